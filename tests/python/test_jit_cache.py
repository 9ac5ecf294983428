"""@cuvil_mlir.jit, torch.compile(backend="cuvil") and the on-disk compile cache (docs/jit-and-cache.md).

Every cache here lives in the test's tmp_path (CUVIL_CACHE_DIR is pointed there), and the
models are tiny, so each compile takes a second or two.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import textwrap
import warnings
import zipfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cuvil_mlir
import models
from cuvil_mlir import cli
from cuvil_mlir.compiler.cache import Cache, CacheWarning, compile_exported, default_directory, parse_size
from cuvil_mlir.core.diagnostics import CompileError, CuvilError
from cuvil_mlir.compiler.fingerprint import compile_key
from cuvil_mlir.compiler.jitted import JitError, JitWarning
from cuvil_mlir.core.passes import load_pattern_file
from cuvil_mlir.compiler.pipeline import Options


class Tiny(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc1 = nn.Linear(d, 32)
        self.fc2 = nn.Linear(32, 8)
        self.scale = 1.0

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))) * self.scale


class Unsupported(nn.Module):
    """erfinv has no lowering in IREE 3.13: compiling fails naming torch.aten.erfinv."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.erfinv(torch.tanh(self.fc(x)))


def tiny(seed=0):
    torch.manual_seed(seed)
    return Tiny().eval()


def close(a, b, tol=1e-5):
    return float((a - b).abs().max()) <= tol * max(float(b.abs().max()), 1e-6)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """The default cache of every test: its own folder, never the user's."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(folder))
    monkeypatch.delenv("CUVIL_CACHE", raising=False)
    return folder


def export(model, *args):
    return torch.export.export(model, args, strict=False)


# ---------------------------------------------------------------------------------------
# Cache keys.


def test_key_is_stable_and_ignores_object_identity():
    """Two exports of two equal models give one key: no addresses or ids leak into it."""
    x = torch.randn(4, 16)
    k1, _ = compile_key(export(tiny(), x), Options())
    k2, _ = compile_key(export(tiny(), x), Options())
    assert k1 == k2


def test_key_changes_with_everything_that_changes_the_module():
    x = torch.randn(4, 16)
    base, _ = compile_key(export(tiny(), x), Options())
    changed_weight = tiny()
    with torch.no_grad():
        changed_weight.fc2.bias[3] += 1e-3
    keys = {
        "weight": compile_key(export(changed_weight, x), Options())[0],
        "shape": compile_key(export(tiny(), torch.randn(5, 16)), Options())[0],
        "target": compile_key(export(tiny(), x), Options(target="vmvx"))[0],
        "opt_level": compile_key(export(tiny(), x), Options(opt_level=1))[0],
        "precision": compile_key(export(tiny(), x), Options(precision="fp16"))[0],
        "disabled pass": compile_key(export(tiny(), x), Options(disabled_passes=("fuse-linear-epilogue",)))[0],
    }
    for what, key in keys.items():
        assert key != base, f"the key ignores a change of {what}"
    assert len(set(keys.values())) == len(keys)


PATTERN_FILE = '''
from cuvil_mlir.core.patterns import PatternSet

patterns = PatternSet("user-noop")


@patterns.add("torch.aten.relu")
def never(op, rewriter):
    """relu -> relu (never matches)"""
    return None
'''


def test_key_follows_the_user_pattern_files_source(tmp_path):
    path = tmp_path / "my_patterns.py"
    path.write_text(PATTERN_FILE)
    program = export(tiny(), torch.randn(4, 16))
    without, _ = compile_key(program, Options())
    first, parts = compile_key(program, Options(patterns=tuple(load_pattern_file(path))))
    again, _ = compile_key(program, Options(patterns=tuple(load_pattern_file(path))))
    path.write_text(PATTERN_FILE.replace("return None", "return None  # edited"))
    edited, _ = compile_key(program, Options(patterns=tuple(load_pattern_file(path))))
    assert first == again  # reloading an unchanged file hits
    assert first != without and edited != first  # a changed pattern file invalidates
    assert parts["patterns"][0]["name"] == "user-noop"


def test_parse_size_and_default_directory(monkeypatch, tmp_path):
    assert parse_size("10G") == 10 * 1024**3 and parse_size("512M") == 512 * 1024**2 and parse_size(123) == 123
    assert parse_size("1.5kb") == 1536
    with pytest.raises(CuvilError, match="malformed size"):
        parse_size("lots")
    assert default_directory() == tmp_path / "cache"
    monkeypatch.delenv("CUVIL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_directory() == tmp_path / "xdg" / "cuvil-mlir"


# ---------------------------------------------------------------------------------------
# The cache itself.


@pytest.fixture(scope="module")
def tiny_compiled():
    """One real compile of the tiny model, reused by the store tests."""
    x = torch.randn(4, 16)
    return export(tiny(), x), x, cuvil_mlir.compile(tiny(), (x,))


def test_compile_hit_after_miss_and_a_changed_weight_misses(tmp_path, tiny_compiled):
    program, x, _ = tiny_compiled
    cache = Cache(tmp_path / "c")
    first, status1, key1 = compile_exported(program, Options(), cache)
    second, status2, key2 = compile_exported(program, Options(), cache)
    assert (status1, status2) == ("miss", "hit") and key1 == key2
    assert torch.equal(first(x), second(x))
    changed = tiny()
    with torch.no_grad():
        changed.fc1.weight.mul_(2)
    third, status3, key3 = compile_exported(export(changed, x), Options(), cache)
    assert status3 == "miss" and key3 != key1
    with torch.no_grad():
        assert close(third(x), changed(x))
    assert len(cache.entries()) == 2


def test_compile_api_cache_option(tmp_path):
    x = torch.randn(2, 16)
    model = tiny()
    a = cuvil_mlir.compile(model, (x,), cache=tmp_path / "api")
    b = cuvil_mlir.compile(model, (x,), cache=tmp_path / "api")
    assert a.metadata["cache_key"] == b.metadata["cache_key"]
    (entry,) = Cache(tmp_path / "api").entries()
    assert not (tmp_path / "cache").exists()  # cache=<folder> does not touch the default one
    with zipfile.ZipFile(entry.path) as z:  # stored, not deflated: loading costs reading the file
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, tiny_compiled, damage):
    program, x, compiled = tiny_compiled
    cache = Cache(tmp_path / "c")
    key = "k" * 64
    path = cache.put(key, compiled)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a zip at all")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # one byte of the module's data: only the sha256 check sees it
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:])
    with pytest.warns(CacheWarning, match="corrupt entry"):
        assert cache.get(key) is None
    assert not path.exists()
    rebuilt, status = cache.get_or_build(key, lambda: compiled)
    assert status == "miss" and cache.get(key) is not None
    assert torch.equal(rebuilt(x), compiled(x))


def test_lru_eviction_keeps_the_recently_used(tmp_path, tiny_compiled):
    _, _, compiled = tiny_compiled
    cache = Cache(tmp_path / "c")
    keys = [c * 64 for c in "abc"]
    for i, key in enumerate(keys):
        path = cache.put(key, compiled)
        os.utime(path, (1000 + i, 1000 + i))  # a < b < c
    assert cache.get(keys[0]) is not None  # a is used now: the newest
    size = cache.entries()[0].bytes
    removed = cache.prune(max_bytes=2 * size + size // 2)
    assert [e.key for e in removed] == [keys[1]]  # b was the least recently used
    assert {e.key for e in cache.entries()} == {keys[0], keys[2]}
    assert cache.prune() == []  # within the limit: nothing to do
    small = Cache(tmp_path / "c", max_bytes=size + 1)
    small.put("d" * 64, compiled)  # putting prunes to the limit, never the new entry
    assert [e.key for e in small.entries()] == ["d" * 64]


def test_a_compile_failure_is_remembered(tmp_path):
    cache = Cache(tmp_path / "c")
    x = torch.randn(2, 8)
    program = export(Unsupported().eval(), x)
    with pytest.raises(CompileError, match="erfinv"):
        compile_exported(program, Options(), cache)
    with pytest.raises(CompileError, match="cached failure"):
        compile_exported(program, Options(), cache)
    assert cache.info()["failed"] == 1
    cache.clear()
    assert cache.info() == {**cache.info(), "entries": 0, "failed": 0}


def _compile_in_process(folder: str, queue) -> None:
    torch.set_num_threads(1)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
    compiled, status, key = compile_exported(export(tiny(), x), Options(), Cache(folder))
    queue.put((status, key, compiled(x).numpy().tobytes()))


def test_concurrent_compiles_from_several_processes(tmp_path):
    """Three processes compile the same model into one cache at once: one compiles, the
    others wait for its lock and load its entry; every result is the same."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_compile_in_process, args=(str(tmp_path / "shared"), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    statuses = sorted(r[0] for r in results)
    assert statuses.count("miss") == 1 and set(statuses) <= {"miss", "waited", "hit"}, statuses
    assert len({r[1] for r in results}) == 1 and len({r[2] for r in results}) == 1
    assert len(Cache(tmp_path / "shared").entries()) == 1


def test_cache_cli(tmp_path, tiny_compiled, capsys):
    _, _, compiled = tiny_compiled
    folder = tmp_path / "c"
    cache = Cache(folder)
    for c in "ab":
        cache.put(c * 64, compiled, {"target": "cpu", "model": {"inputs": ["float32[4, 16]"]}})
    assert cli.main(["cache", "info", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "entries: 2 compiled" in out and "float32[4, 16]" in out
    assert cli.main(["cache", "info", "--dir", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 2
    assert cli.main(["cache", "prune", "--dir", str(folder), "--max-size", "1"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    cache.put("c" * 64, compiled)
    assert cli.main(["cache", "clear", "--dir", str(folder)]) == 0
    assert "removed 1 entry" in capsys.readouterr().out and cache.entries() == []


# ---------------------------------------------------------------------------------------
# @jit


def test_jit_instance_compiles_once_per_signature():
    model = tiny()
    fast = cuvil_mlir.jit(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        ref = model(x)
    assert close(fast(x), ref) and close(fast(x), ref)
    state = fast.cuvil_jit
    assert state.compiles == 1 and [(e.status, e.calls) for e in state.entries] == [("compiled", 2)]
    fast(torch.randn(3, 16))  # a new shape: a second signature
    assert state.compiles == 2 and [e.signature for e in state.entries] == ["float32[4, 16]", "float32[3, 16]"]
    assert fast.fc1 is model.fc1 and "compiled (cache miss" in state.explain()
    assert set(state.entries[0].times) == {"call key", "export", "key", "compile"}
    sites = Cache().get(state.entries[0].key).metadata["pattern_sites"]
    assert set(sites["raise-torch-to-cuvil"]["linear"]) == {"fc1", "fc2"}  # not "jitted.fc1"


def test_jit_second_object_hits_the_disk_cache_bit_identical():
    x = torch.randn(4, 16)
    first = cuvil_mlir.jit(tiny())
    second = cuvil_mlir.jit(tiny())  # another object with the same weights: same key
    a, b = first(x), second(x)
    assert [e.cache for e in first.cuvil_jit.entries] == ["miss"]
    assert [e.cache for e in second.cuvil_jit.entries] == ["hit (call record)"]  # found without exporting
    assert "export" not in second.cuvil_jit.entries[0].times
    assert torch.equal(a, b)


MODEL_FILE = """
import torch

class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) * FACTOR
"""


def _import_model_file(path, name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_jit_call_record_is_not_used_after_the_models_source_changed(tmp_path):
    """The warm start finds entries without exporting, keyed on the module tree and weights;
    a change to the source the export ran must send it back to exporting."""
    path = tmp_path / "scaled_model.py"
    path.write_text(MODEL_FILE.replace("FACTOR", "2.0"))
    x = torch.randn(2, 8)
    torch.manual_seed(0)
    first = cuvil_mlir.jit(_import_model_file(path, "scaled_model").Scaled().eval())
    y1 = first(x)
    path.write_text(MODEL_FILE.replace("FACTOR", "3.0"))  # same class, same weights, new forward
    torch.manual_seed(0)
    changed = _import_model_file(path, "scaled_model").Scaled().eval()
    second = cuvil_mlir.jit(changed)
    y2 = second(x)
    entry = second.cuvil_jit.entries[0]
    assert entry.cache == "miss" and "export" in entry.times  # the record's file check failed
    with torch.no_grad():
        assert close(y2, changed(x)) and close(y2, y1 * 1.5)
    torch.manual_seed(0)
    third = cuvil_mlir.jit(_import_model_file(path, "scaled_model").Scaled().eval())
    third(x)
    assert third.cuvil_jit.entries[0].cache == "hit (call record)"  # the new source has its record now


def test_no_call_record_for_functions_or_dynamic(cache_dir):
    fast = cuvil_mlir.jit(lambda a: a * 2 + 1)
    fast(torch.randn(3))
    cuvil_mlir.jit(tiny(), dynamic=True)(torch.randn(2, 16))
    assert not (cache_dir / "v1" / "calls").exists()


def test_jit_class_decorator_and_function():
    @cuvil_mlir.jit
    class Decorated(Tiny):
        pass

    torch.manual_seed(0)
    m = Decorated().eval()
    assert type(m).__name__ == "Decorated" and isinstance(m, Tiny)
    assert list(m.state_dict()) == list(tiny().state_dict())  # no wrapper in the names
    x = torch.randn(4, 16)
    assert close(m(x), tiny()(x).detach()) and m.cuvil_jit.compiles == 1
    clone = copy.deepcopy(m)  # the copy starts without compiled modules
    assert clone.cuvil_jit.compiles == 0 and close(clone(x), m(x))

    w = torch.randn(6, 5)

    @cuvil_mlir.jit(target="cpu")
    def f(a, b, *, scale=2.0):
        return {"y": (a @ b + w.sum()) * scale, "n": 3}

    a, b = torch.randn(4, 6), torch.randn(6, 5)
    out = f(a, b, scale=0.5)
    assert out["n"] == 3 and close(out["y"], (a @ b + w.sum()) * 0.5)
    f(a, b, scale=0.5)
    f(a, b, scale=3.0)  # a Python scalar is specialized: a new signature
    assert f.cuvil_jit.compiles == 2 and f.__name__ == "f"


def test_jit_recompiles_after_weights_or_attributes_change():
    model = tiny()
    fast = cuvil_mlir.jit(model)
    x = torch.randn(4, 16)
    fast(x)
    fast(x)
    assert fast.cuvil_jit.compiles == 1  # nothing changed: no recompile
    with torch.no_grad():
        model.fc1.weight.mul_(-1)  # in place (an optimizer step, load_state_dict)
        assert close(fast(x), model(x))
    model.scale = 3.0  # a plain attribute forward reads
    with torch.no_grad():
        assert close(fast(x), model(x))
    model.fc2 = nn.Linear(32, 8)  # a replaced submodule
    with torch.no_grad():
        assert close(fast(x), model(x))
    assert fast.cuvil_jit.compiles == 4
    assert any("changed since it was compiled" in e for e in fast.cuvil_jit.events)


def test_jit_falls_back_to_eager_on_an_unsupported_op():
    model = Unsupported().eval()
    x = torch.randn(2, 8)
    fast = cuvil_mlir.jit(model)
    with pytest.warns(JitWarning, match=r"runs in eager PyTorch: .*torch\.aten\.erfinv") as record:
        y = fast(x)
    assert len([w for w in record if issubclass(w.category, JitWarning)]) == 1
    assert "\n" not in str(record[0].message)
    with torch.no_grad():
        assert torch.equal(y, model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same signature again: eager, no second warning
        fast(x)
    entry = fast.cuvil_jit.entries[0]
    assert entry.status == "eager" and "erfinv" in entry.reason and entry.calls == 2

    strict = cuvil_mlir.jit(Unsupported().eval(), fallback="error", cache=False)
    with pytest.raises(CompileError, match=r"torch\.aten\.erfinv"):
        strict(x)


def test_jit_recompile_limit():
    fast = cuvil_mlir.jit(tiny(), max_compiles=1)
    fast(torch.randn(2, 16))
    with pytest.warns(JitWarning, match="recompile limit reached"):
        y = fast(torch.randn(3, 16))
    assert y.shape == (3, 8) and [e.status for e in fast.cuvil_jit.entries] == ["compiled", "eager"]
    strict = cuvil_mlir.jit(tiny(), max_compiles=1, fallback="error")
    strict(torch.randn(2, 16))
    with pytest.raises(JitError, match="recompile limit"):
        strict(torch.randn(3, 16))


def test_jit_inference_only_cases_run_eager():
    model = tiny()
    fast = cuvil_mlir.jit(model)
    x = torch.randn(2, 16, requires_grad=True)
    with pytest.warns(JitWarning, match="requires grad"):
        y = fast(x)
    y.sum().backward()  # eager: autograd works
    assert x.grad is not None and fast.cuvil_jit.compiles == 0
    model.train()
    with pytest.warns(JitWarning, match="training mode"):
        fast(torch.randn(2, 16))
    assert fast.cuvil_jit.compiles == 0


def test_jit_device_failure_falls_back():
    """CUDA modules compile on this machine, and fail to load where there is no GPU."""
    from cuvil_mlir.runtime.session import available_devices

    if "cuda" in available_devices():
        pytest.skip("this machine has a CUDA device")
    model = tiny()
    fast = cuvil_mlir.jit(model, target="cuda")
    x = torch.randn(2, 16)
    with pytest.warns(JitWarning, match="cuda"):
        y = fast(x)
    with torch.no_grad():
        assert torch.equal(y, model(x))
    assert fast.cuvil_jit.entries[0].status == "eager"


def test_jit_dynamic_dims():
    model = tiny()
    fast = cuvil_mlir.jit(model, dynamic=True)
    with torch.no_grad():
        for batch in (2, 5, 9):
            x = torch.randn(batch, 16)
            assert close(fast(x), model(x))
        assert fast.cuvil_jit.compiles == 1
        fast(torch.randn(1, 16))  # export specializes size 1: outside the compiled range
    assert fast.cuvil_jit.compiles == 2


def test_jit_bad_options_fail_at_decoration():
    with pytest.raises(CuvilError, match="unknown target"):
        cuvil_mlir.jit(tiny(), target="cpux")
    with pytest.raises(CuvilError, match="fallback"):
        cuvil_mlir.jit(tiny(), fallback="ignore")


def test_cache_off_by_environment(monkeypatch, cache_dir):
    monkeypatch.setenv("CUVIL_CACHE", "0")
    fast = cuvil_mlir.jit(tiny())
    fast(torch.randn(2, 16))
    assert fast.cuvil_jit.entries[0].cache == "off" and not cache_dir.exists()


# ---------------------------------------------------------------------------------------
# torch.compile(backend="cuvil")


def _graphs_since(before):
    from cuvil_mlir.compiler.dynamo_backend import compiled_graphs

    return [g for g in compiled_graphs() if g.serial > before]


def _last_serial() -> int:
    from cuvil_mlir.compiler.dynamo_backend import compiled_graphs

    return max((g.serial for g in compiled_graphs()), default=-1)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_backend_is_registered_through_the_entry_point():
    assert "cuvil" in torch._dynamo.list_backends()


def test_backend_mlp_options_and_weight_update():
    model, (x,) = models.mlp(batch=4)
    before = _last_serial()
    fast = torch.compile(model, backend="cuvil", options={"target": "cpu", "opt-level": 2})
    with torch.no_grad():
        assert close(fast(x), model(x))
        with torch.no_grad():
            model.fc3.bias.add_(1.0)  # Dynamo passes the same parameter: cuvil sees its new version
        assert close(fast(x), model(x))
    (graph,) = _graphs_since(before)
    assert graph.options.opt_level == 2 and graph.compiles == 2
    assert [e.status for e in graph.entries] == ["compiled"]
    # the exported ops keep the model's module paths (not the wrapper's): provenance, keep_paths
    sites = Cache().get(graph.entries[0].key).metadata["pattern_sites"]
    assert set(sites["raise-torch-to-cuvil"]["linear"]) == {"fc1", "fc2", "fc3"}


def test_backend_unknown_option_is_an_error():
    model, (x,) = models.mlp(batch=2)
    with pytest.raises(Exception, match="backend 'cuvil' has no option 'precisoin'"):
        torch.compile(model, backend="cuvil", options={"precisoin": "fp16"})(x)


def test_backend_graph_break():
    """A data-dependent branch breaks the graph: cuvil compiles both sides' graphs, the
    branch itself runs in Python."""

    def f(x):
        y = torch.sin(x) * 2
        if y.sum() > 0:
            return F.gelu(y) + 1
        return y - 1

    before = _last_serial()
    fast = torch.compile(f, backend="cuvil")
    pos, neg = torch.full((4, 8), 0.5), torch.full((4, 8), -0.5)
    assert close(fast(pos), f(pos)) and close(fast(neg), f(neg))
    graphs = _graphs_since(before)
    assert len(graphs) == 3  # sin*2 (+ the condition), then one graph per branch
    assert all([e.status for e in g.entries] == ["compiled"] for g in graphs)


def test_backend_falls_back_to_the_graphs_eager_code():
    model = Unsupported().eval()
    x = torch.randn(2, 8)
    fast = torch.compile(model, backend="cuvil")
    with torch.no_grad(), pytest.warns(JitWarning, match="erfinv"):
        y = fast(x)
    with torch.no_grad():
        assert torch.equal(y, model(x))


def test_backend_grad_mode_runs_eager():
    model, (x,) = models.mlp(batch=2)
    fast = torch.compile(model, backend="cuvil")
    with pytest.warns(JitWarning, match="grad"):
        y = fast(x)
    y.sum().backward()
    assert model.fc1.weight.grad is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(models.E2E_MODELS))
def test_backend_on_the_e2e_models(name):
    model, args = models.E2E_MODELS[name]()
    before = _last_serial()
    fast = torch.compile(model, backend="cuvil")
    with torch.no_grad():
        ref = model(*args)
        got = fast(*args)
    assert got.shape == ref.shape and close(got, ref, tol=1e-4)
    graphs = _graphs_since(before)
    assert graphs and all(e.status == "compiled" for g in graphs for e in g.entries), [g.explain() for g in graphs]


def test_cuvil_compile_cache_flag(tmp_path, cache_dir, capsys):
    pt2 = tmp_path / "tiny.pt2"
    torch.export.save(export(tiny(), torch.randn(2, 16)), pt2)
    for name in ("a", "b"):
        assert cli.main(["compile", str(pt2), "-o", str(tmp_path / f"{name}.cuvilpkg"), "--cache"]) == 0
    assert len(Cache().entries()) == 1  # the second compile was a hit
    assert cuvil_mlir.load(tmp_path / "b.cuvilpkg").metadata["cache_key"] == Cache().entries()[0].key
    assert cli.main(["compile", str(pt2), "-o", str(tmp_path / "c.cuvilpkg")]) == 0  # no --cache: no entry
    assert len(Cache().entries()) == 1


def test_compile_cache_keys_kwargs_and_dynamic_dims(cache_dir):
    """compile(cache=True) with kwargs and dynamic_shapes: the second compile is a hit, and the
    loaded entry is called like the model (kwargs, any batch in the range)."""
    from torch.export import Dim

    class Scale(torch.nn.Module):
        def forward(self, x, *, scale):
            return x * scale

    build = dict(kwargs={"scale": torch.tensor(2.0)}, dynamic_shapes={"x": {0: Dim("b", max=16)}, "scale": None}, cache=True)
    first = cuvil_mlir.compile(Scale(), (torch.randn(3, 4),), **build)
    assert len(Cache().entries()) == 1
    again = cuvil_mlir.compile(Scale(), (torch.randn(3, 4),), **build)
    assert len(Cache().entries()) == 1  # a hit, no second entry
    for compiled in (first, again):
        out = compiled(torch.ones(5, 4), scale=torch.tensor(3.0))
        assert out.shape == (5, 4) and torch.all(out == 3.0)
    with pytest.raises(CuvilError, match="ONNX"):
        cuvil_mlir.compile(str(cache_dir / "absent.onnx"), cache=True)
