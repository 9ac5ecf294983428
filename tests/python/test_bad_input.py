"""Bad input gets a clean CuvilError that names the problem, never a crash."""

import zipfile

import numpy as np
import pytest
import torch

import cuvil_mlir
import models
from cuvil_mlir.core.diagnostics import CuvilError, ImportError_, InputError, LoweringError, MissingFileError, PackageError


@pytest.fixture(scope="module")
def mlp_compiled():
    model, args = models.mlp(batch=4)
    return cuvil_mlir.compile(model, args), args


def test_wrong_input_count(mlp_compiled):
    cm, args = mlp_compiled
    with pytest.raises(InputError, match=r"expected 1 input\(s\) \(float32\[4, 64\]\), got 2"):
        cm(args[0], args[0])


def test_wrong_input_shape(mlp_compiled):
    cm, _ = mlp_compiled
    with pytest.raises(InputError, match=r"input 0: expected shape float32\[4, 64\], got float32\[4, 63\]"):
        cm(torch.randn(4, 63))


def test_wrong_input_dtype(mlp_compiled):
    cm, _ = mlp_compiled
    with pytest.raises(InputError, match="input 0: expected dtype float32, got float64"):
        cm(np.zeros((4, 64), dtype=np.float64))


def test_not_a_tensor(mlp_compiled):
    cm, _ = mlp_compiled
    with pytest.raises(InputError, match="expected a torch.Tensor or numpy.ndarray, got list"):
        cm([[1.0] * 64] * 4)


def test_missing_model_file(tmp_path):
    with pytest.raises(MissingFileError, match="model file not found"):
        cuvil_mlir.compile(str(tmp_path / "nope.pt2"))


def test_file_that_is_not_a_model(tmp_path):
    path = tmp_path / "notes.pt2"
    path.write_text("hello")
    with pytest.raises(ImportError_, match="is not a model"):
        cuvil_mlir.compile(str(path))


def test_zip_that_is_not_a_pt2(tmp_path):
    path = tmp_path / "other.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "not a model")
    with pytest.raises(ImportError_, match="not a loadable torch.export program"):
        cuvil_mlir.compile(str(path))


def test_unsupported_model_object():
    with pytest.raises(ImportError_, match="cannot compile a int"):
        cuvil_mlir.compile(42)


def test_unknown_target():
    model, args = models.mlp(batch=1)
    with pytest.raises(CuvilError, match="unknown target 'tpu'; valid targets: cpu"):
        cuvil_mlir.compile(model, args, target="tpu")


def test_unknown_stage():
    model, args = models.mlp(batch=1)
    with pytest.raises(CuvilError, match="unknown stage 'llvm'"):
        cuvil_mlir.lower(model, args, stage="llvm")


def test_export_failure_is_reported():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow cannot be exported
                return x
            return -x

    with pytest.raises(ImportError_, match="torch.export failed for DataDependent"):
        cuvil_mlir.compile(DataDependent(), (torch.randn(3),))


def test_op_torch_mlir_cannot_lower_is_named():
    """torch-mlir's exception says only that its pipeline failed; the error names the op it could
    not lower and the nn.Module it sits in (from MLIR's diagnostic)."""
    class Router(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.histc(self.gate(x).float(), bins=4, min=0, max=4)  # Mixtral's expert counts

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.router = Router()

        def forward(self, x):
            return self.router(x)

    with pytest.raises(ImportError_, match=r"torch-mlir has no lowering for aten\.histc \(at router\)"):
        cuvil_mlir.compile(Block(), (torch.randn(3, 8),))


def test_cuvil_op_nothing_lowers_is_named():
    """With the lowering pass switched off, the hand-off check names the op and its location."""
    model, args = models.mlp(batch=1)
    with pytest.raises(LoweringError, match=r"'cuvil.linear' at .*models.py.* was not lowered"):
        cuvil_mlir.compile(model, args, disabled_passes=["lower-cuvil-to-torch"])


def test_missing_package(tmp_path):
    with pytest.raises(MissingFileError, match="package not found"):
        cuvil_mlir.load(tmp_path / "missing.cuvilpkg")


def test_foreign_zip_package(tmp_path):
    path = tmp_path / "foreign.cuvilpkg"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("something.txt", "hi")
    with pytest.raises(PackageError, match="has no metadata.json"):
        cuvil_mlir.load(path)


def test_truncated_package(tmp_path, mlp_compiled):
    cm, _ = mlp_compiled
    path = tmp_path / "m.cuvilpkg"
    cm.save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PackageError, match="not a .cuvilpkg|corrupt"):
        cuvil_mlir.load(path)


def test_tampered_module_fails_checksum(tmp_path, mlp_compiled):
    cm, _ = mlp_compiled
    src, dst = tmp_path / "a.cuvilpkg", tmp_path / "b.cuvilpkg"
    cm.save(src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith(".vmfb"):
                data = data[:-8] + b"\0" * 8
            zout.writestr(item, data)
    with pytest.raises(PackageError, match="fails its sha256 check"):
        cuvil_mlir.load(dst)


def test_wrong_format_version(tmp_path, mlp_compiled):
    import json

    cm, _ = mlp_compiled
    src, dst = tmp_path / "a.cuvilpkg", tmp_path / "b.cuvilpkg"
    cm.save(src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "metadata.json":
                meta = json.loads(data)
                meta["format_version"] = 99
                data = json.dumps(meta).encode()
            zout.writestr(item, data)
    with pytest.raises(PackageError, match="format version 99"):
        cuvil_mlir.load(dst)


def test_save_failure_keeps_existing_file(tmp_path, mlp_compiled):
    """A failed save never destroys what was at the destination."""
    cm, _ = mlp_compiled
    path = tmp_path / "keep.cuvilpkg"
    path.write_bytes(b"precious")
    broken = cuvil_mlir.runtime.compiled.CompiledModel(cm.modules, {**cm.metadata, "bad": object()})
    with pytest.raises(TypeError):
        broken.save(path)
    assert path.read_bytes() == b"precious"
