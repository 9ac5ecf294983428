"""External parameters (cuvil_mlir/core/params.py): weights out of the modules, into one
page-aligned archive per package that loading maps; checked against inline weights bit for bit."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import torch

import cuvil_mlir
from cuvil_mlir.compiler.pipeline import Options, compile_program
from cuvil_mlir.core import params
from cuvil_mlir.core.diagnostics import CuvilError, PackageError
from cuvil_mlir.runtime import package
from cuvil_mlir.runtime.parameters import ALIGNMENT, ARCHIVE_NAME, Parameters


class Block(torch.nn.Module):
    """Linear + GELU + LayerNorm + Linear, a conv + BN (folded by fuse-conv-bn: a derived weight)."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.norm = torch.nn.LayerNorm(128)
        self.down = torch.nn.Linear(128, 32)
        self.conv = torch.nn.Conv2d(8, 32, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(32)

    def forward(self, x, img):
        y = self.down(self.norm(torch.nn.functional.gelu(self.up(x))))
        return y, self.bn(self.conv(img))


def _model():
    torch.manual_seed(0)
    model = Block().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return model, (torch.randn(4, 64), torch.randn(1, 8, 6, 6))


@pytest.fixture(scope="module")
def pair():
    model, args = _model()
    inline = compile_program(model, args, Options(params="inline"))
    external = compile_program(model, args, Options(params="external"))
    return model, args, inline, external


def test_external_matches_inline_bit_for_bit(pair):
    model, args, inline, external = pair
    assert inline.parameters is None and external.parameters is not None
    for a, b in zip(inline(*args), external(*args)):
        assert torch.equal(a, b)
    fresh = (torch.randn(4, 64), torch.randn(1, 8, 6, 6))
    for a, b in zip(inline(*fresh), external(*fresh)):
        assert torch.equal(a, b)


def test_weights_leave_the_module_and_are_not_copied(pair):
    model, _, inline, external = pair
    keys = set(external.parameters.arrays)
    assert {"up.weight", "down.weight"} <= keys  # named by their state-dict names
    assert any(k.startswith("derived.") for k in keys)  # the BN-folded conv weight, computed by a pass
    assert "conv.weight" not in keys  # replaced by the folded one: not carried
    assert np.shares_memory(external.parameters.arrays["up.weight"], model.up.weight.detach().numpy())
    assert len(external.modules[0].vmfb) < len(inline.modules[0].vmfb) - external.parameters.nbytes // 2


def test_precision_policies_write_their_weights_into_the_store():
    model, args = _model()
    for policy in ("fp16", "int8-weight", "int4-weight"):
        inline = compile_program(model, args, Options(params="inline", precision=policy))
        external = compile_program(model, args, Options(params="external", precision=policy))
        arrays = external.parameters.arrays
        assert "up.weight" not in arrays, policy  # only the transformed weight is kept
        assert any(a.dtype in (np.float16, np.int8, np.uint8) for a in arrays.values()), policy
        for a, b in zip(inline(*args), external(*args)):
            assert torch.equal(a, b), policy


def test_package_holds_one_aligned_stored_archive_and_loads_mapped(pair, tmp_path):
    _, args, _, external = pair
    path = tmp_path / "m.cuvilpkg"
    external.save(path)
    meta, _ = package.read(path)
    entry = meta["parameters"]
    assert entry["file"] == ARCHIVE_NAME and entry["count"] == len(external.parameters.arrays)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(ARCHIVE_NAME)
        assert info.compress_type == zipfile.ZIP_STORED
    located = package.read_parameters(path, meta)
    assert located.offset % ALIGNMENT == 0 and located.length == entry["bytes"]
    loaded = cuvil_mlir.load(path)
    assert isinstance(loaded.parameters, Parameters) and loaded.parameters.arrays is None  # mapped, not read
    for a, b in zip(external(*args), loaded(*args)):
        assert torch.equal(a, b)
    again = tmp_path / "again.cuvilpkg"  # a loaded package saves its archive again (copied from the mapping)
    loaded.save(again)
    assert package.read(again)[0]["parameters"]["sha256"] == entry["sha256"]
    for a, b in zip(external(*args), cuvil_mlir.load(again)(*args)):
        assert torch.equal(a, b)


def _saved(pair, tmp_path):
    path = tmp_path / "m.cuvilpkg"
    pair[3].save(path)
    meta, _ = package.read(path)
    return path, package.read_parameters(path, meta)


def test_tampered_archive_is_rejected(pair, tmp_path):
    path, located = _saved(pair, tmp_path)
    data = bytearray(path.read_bytes())
    data[located.offset + located.length - 100] ^= 0xFF  # a weight's byte
    path.write_bytes(bytes(data))
    with pytest.raises(PackageError, match="parameters/model.irpa fails its sha256 check"):
        cuvil_mlir.load(path)


def test_damaged_archive_header_is_rejected_without_verifying(pair, tmp_path):
    path, located = _saved(pair, tmp_path)
    data = bytearray(path.read_bytes())
    data[located.offset:located.offset + 4] = b"XXXX"  # the archive's magic
    path.write_bytes(bytes(data))
    with pytest.raises(PackageError, match="not a valid IREE parameter archive"):
        cuvil_mlir.load(path, verify=False)


def test_truncated_package_is_rejected(pair, tmp_path):
    path, located = _saved(pair, tmp_path)
    path.write_bytes(path.read_bytes()[:located.offset + located.length // 2])
    with pytest.raises(PackageError, match="corrupt|truncated"):
        cuvil_mlir.load(path, verify=False)


def test_resized_archive_entry_is_rejected(pair, tmp_path):
    path, _ = _saved(pair, tmp_path)
    meta, _ = package.read(path)
    meta["parameters"]["bytes"] += 64
    with pytest.raises(PackageError, match="metadata.json says"):
        package.read_parameters(path, meta)


def test_multi_target_package_holds_one_copy_of_the_weights(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).eval()  # 4 MB
    args = (torch.randn(2, 512),)
    compiled = compile_program(model, args, Options(target="cpu,cuda,vulkan", params="external"))
    path = tmp_path / "three.cuvilpkg"
    compiled.save(path)
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        sizes = {n: z.getinfo(n).file_size for n in names}
    assert names.count(ARCHIVE_NAME) == 1 and sum(n.endswith(".vmfb") for n in names) == 3
    weights = compiled.parameters.nbytes
    assert all(size < weights / 4 for n, size in sizes.items() if n.endswith(".vmfb"))  # no module carries them
    assert path.stat().st_size < 1.5 * weights + sum(s for n, s in sizes.items() if n != ARCHIVE_NAME)
    torch.testing.assert_close(cuvil_mlir.load(path, prefer="cpu")(*args), model(*args), rtol=1e-4, atol=1e-4)


def test_the_inline_external_rule():
    assert params.resolve_mode("auto", params.EXTERNAL_FROM_BYTES - 1) == "inline"
    assert params.resolve_mode("auto", params.EXTERNAL_FROM_BYTES) == "external"
    assert params.resolve_mode("inline", 10 * params.EXTERNAL_FROM_BYTES) == "inline"
    assert params.resolve_mode("external", 0) == "external"
    with pytest.raises(CuvilError, match="params='mapped': expected one of auto, inline, external"):
        params.resolve_mode("mapped", 0)
    model, args = _model()
    assert compile_program(model, args, Options()).parameters is None  # a small model stays inline


def test_hand_off_declares_named_parameters():
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import module_to_bytecode, parse_module
    from cuvil_mlir.targets import iree

    model, args = _model()
    assert params.PARAMETER_OP not in cuvil_mlir.lower(model, args, stage="torch")  # a small model: inline literals
    lowered = compile_program(model, args, Options(params="external"), emit="lowered", elide_weights=False).text
    assert lowered.count('"cuvil.parameter"') >= 2 and "torch.vtensor.literal(dense<" in lowered  # small ones stay
    keys: set = set()
    data = iree.externalize_parameters(module_to_bytecode(parse_module(lowered, make_context())), keys)
    assert {"up.weight", "down.weight"} <= keys
    assert iree.externalize_parameters(data, set()) == data  # nothing left to replace


def test_old_and_parameterless_packages_have_no_archive(pair, tmp_path):
    _, args, inline, _ = pair
    path = tmp_path / "inline.cuvilpkg"
    inline.save(path)
    meta, _ = package.read(path)
    assert "parameters" not in meta and package.read_parameters(path, meta) is None
    with zipfile.ZipFile(path) as z:
        assert ARCHIVE_NAME not in z.namelist()
        assert json.loads(z.read("metadata.json"))["format_version"] == package.FORMAT_VERSION
