"""The Hopper attention kernel on the CPU side: its config table and contract, the kernel build
(when triton is installed), its numerics in Triton's CPU interpreter, the extern dispatch, and
what a cuda:h200 package records for cuvil.attention. On the H200:
benchmarks/gpu/attention_kernels.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cuvil_mlir.core.diagnostics import CompileError
from cuvil_mlir.targets import cuda_attention_kernels as ak
from cuvil_mlir.targets import cuda_kernels as ck

needs_triton = pytest.mark.skipif(ck.available() is not None, reason=f"kernels cannot be built here: {ck.available()}")


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ck.CACHE_ENV, str(tmp_path / "kernels"))


def _spec(b=1, hq=4, hkv=4, tq=100, tkv=100, d=64, dtype="f16", causal=True):
    return ak.AttentionSpec(b, hq, hkv, tq, tkv, d, dtype, causal, d ** -0.5)


def test_shipped_table_covers_every_attention():
    for d in ak.HEAD_DIMS:
        for tq in (1, 17, 64, 65, 2048, 8192):
            for causal in (False, True):
                config = ak.select_config(_spec(tq=tq, d=d, causal=causal))
                assert config is not None and config.kind in ("tma", "pointers") and config.bm in (64, 128)
    assert ak.select_config(_spec(tq=1)).bm == 64


def test_contract_is_checked():
    for spec, why in ((_spec(d=80), "head dim 80"), (_spec(hkv=3), "3 kv heads do not divide 4"), (_spec(dtype="f32"), "dtype f32")):
        with pytest.raises(CompileError, match=why):
            spec.check()


def test_materialize_routes_attention_and_says_why_not(monkeypatch):
    monkeypatch.setattr(ck, "available", lambda: "triton is not installed")
    spec = {"op": "attention", "batch": 1, "heads": 4, "kv_heads": 4, "tq": 8, "tkv": 8, "d": 64, "dtype": "f16", "causal": True, "scale": "0.125"}
    from cuvil_mlir.targets.cuda import materialize_kernel

    text, record = materialize_kernel("f", spec)
    assert text is None and record["kernel"] is None and record["why"] == "triton is not installed" and record["op"] == "attention"


@needs_triton
def test_kernel_builds_for_sm90a_with_wgmma_and_is_cached():
    spec = _spec(b=2, hq=8, hkv=2, tq=300, tkv=300, d=128, dtype="bf16")
    for kind, tma in (("tma", True), ("pointers", False)):
        config = ak.AttentionConfig(128, 64, 8, 3, kind)
        kb = ak.build_attention(spec, config)
        ptx = open(kb.cubin_path.replace("kernel.cubin", "kernel.ptx")).read()
        assert open(kb.cubin_path, "rb").read(4) == b"\x7fELF"
        assert ".target sm_90a" in ptx and "wgmma.mma_async" in ptx and f".entry {kb.name}(" in ptx
        assert ("cp.async.bulk.tensor" in ptx) == tma
        assert kb.grid == (3, 16) and kb.threads == 256
        assert ak.build_attention(spec, config) == kb  # from the cache


@needs_triton
def test_dispatch_function_is_one_extern_dispatch_over_the_grid():
    kb = ak.build_attention(_spec(b=2, hq=8, hkv=2, tq=200, tkv=200), ak.AttentionConfig(128, 64, 4, 3, "tma"))
    text = ak.dispatch_function("fn", kb)
    assert text.startswith("func.func private @fn(%q: !torch.vtensor<[2,8,200,64],f16>, %k: !torch.vtensor<[2,2,200,64],f16>, "
                           "%v: !torch.vtensor<[2,2,200,64],f16>) -> !torch.vtensor<[2,8,200,64],f16>")
    assert text.count('"hal.dispatch.extern"(%q_t, %k_t, %v_t)') == 1
    assert "%gx = arith.constant 2 : index" in text and "%gy = arith.constant 16 : index" in text
    assert f"tensor<{kb.scratch_bytes * 32}xi8>" in text and kb.scratch_bytes > 0  # TMA descriptors, per program


CASES = [  # (b, hq, hkv, tq, tkv, d, causal): GQA, ragged blocks, decode, Tq != Tkv (top-left causal)
    (1, 4, 2, 70, 70, 64, True), (1, 2, 2, 1, 90, 64, False), (2, 2, 1, 33, 100, 64, True), (1, 2, 2, 100, 40, 64, True),
    (1, 2, 2, 65, 65, 128, False),
]


_INTERPRET = """
import sys, torch, triton
import torch.nn.functional as F
from cuvil_mlir.targets import cuda_attention_kernels as ak
fn = ak.kernel()
# the interpreter looks helpers up in the module's globals, not in kernel()'s closure
for f in (fn.fn, dict(zip(fn.fn.__code__.co_freevars, fn.fn.__closure__))["_step"].cell_contents.fn):
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        setattr(ak, name, cell.cell_contents)
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
torch.manual_seed(0)
for b, hq, hkv, tq, tkv, d, causal in CASES:
    spec = ak.AttentionSpec(b, hq, hkv, tq, tkv, d, "f16", causal, d ** -0.5)
    config = ak.AttentionConfig(64, 32, 4, 2, sys.argv[1])
    q, k, v = torch.randn(b, hq, tq, d).half(), torch.randn(b, hkv, tkv, d).half(), torch.randn(b, hkv, tkv, d).half()
    o = torch.zeros_like(q)
    fn[ak.grid_of(spec, config)](q, k, v, o, **ak.constexprs(spec, config))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=hq != hkv)
    print(b, hq, hkv, tq, tkv, d, causal, float((o.float() - ref).abs().max()))
"""


@needs_triton
@pytest.mark.parametrize("kind", ["tma", "pointers"])
def test_kernel_numerics_in_the_triton_interpreter(kind):
    """The kernel's source run by Triton's CPU interpreter (TRITON_INTERPRET=1, set before triton
    is imported: a fresh interpreter) against torch SDPA in fp32."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", f"CASES = {CASES!r}\n" + _INTERPRET, kind], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    errors = [float(line.split()[-1]) for line in r.stdout.splitlines()]
    assert len(errors) == len(CASES) and max(errors) < 3e-3, r.stdout


class _Attention(torch.nn.Module):
    def __init__(self, mask=None):
        super().__init__()
        self.mask = mask

    def forward(self, q, k, v):
        if self.mask == "causal":  # a constant causal mask, as HF's masking utils build it
            keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        if self.mask == "band":
            keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril().triu(-4)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@needs_triton
@pytest.mark.parametrize("mask", [None, "causal"])
def test_h200_package_records_the_attention_kernel(mask):
    import cuvil_mlir

    q = torch.randn(1, 4, 100, 64).half()
    compiled = cuvil_mlir.compile(_Attention(mask), (q, q, q), target="cuda:h200")
    (record,) = compiled.metadata["kernels"]
    assert record["function"] == "cuvil_kernel_attention_1x4x4x100x100x64_f16_causal_s0p125" and record["causal"] is True
    assert record["kernel"].startswith("cuvil_attention_1x4x4x100x100x64_f16_causal_") and record["grid"] == [1, 4]
    assert compiled.patterns_fired["lower-cuvil-to-kernels"] == {"attention": 1}


def test_a_real_mask_stays_with_iree():
    import cuvil_mlir

    q = torch.randn(1, 4, 16, 64).half()
    compiled = cuvil_mlir.compile(_Attention("band"), (q, q, q), target="cuda:h200")
    assert compiled.metadata["kernels"] == []
    assert compiled.patterns_fired["lower-cuvil-to-kernels"] == {"kept attention: explicit mask": 1}


class _BatchCausalMask(torch.nn.Module):
    """SDPA with the causal mask HF's masking utilities build for a batch without padding: from
    aranges, at [batch, 1, T, T] (here 8 x 512 x 512: past common.fold's default 1M elements)."""

    def forward(self, q, k, v):
        b, t = q.shape[0], q.shape[-2]
        rows = torch.arange(t)[None, None, :, None]
        cols = torch.arange(t)[None, None, None, :]
        batch = torch.arange(b)[:, None, None, None]
        keep = (cols <= rows) & (batch >= 0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


@needs_triton
def test_a_large_constant_causal_mask_gets_the_causal_kernel():
    import cuvil_mlir

    q = torch.randn(8, 2, 512, 64).half()
    compiled = cuvil_mlir.compile(_BatchCausalMask(), (q, q, q), target="cuda:h200")
    (record,) = compiled.metadata["kernels"]
    assert record["kernel"] and record["causal"] is True, record
    assert compiled.patterns_fired["lower-cuvil-to-kernels"] == {"attention": 1}
