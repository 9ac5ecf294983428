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


STRIDED_CASES = [  # (b, hq, hkv, t, d, causal): q, k, v sliced from one fused [B, T, N] projection, o as [B, T, H, D]
    (2, 4, 2, 70, 64, True), (1, 2, 2, 33, 128, False), (1, 4, 1, 1, 64, False),
]

_INTERPRET_STRIDED = _INTERPRET.split("torch.manual_seed(0)")[0] + """
torch.manual_seed(0)
for b, hq, hkv, t, d, causal in CASES:
    n = (hq + 2 * hkv) * d
    lay = lambda start: f"{b}x{t}x{n}:{start}:{t * n}:{d}:{n}"
    spec = ak.AttentionSpec(b, hq, hkv, t, t, d, "f16", causal, d ** -0.5, lay(0), lay(hq * d), lay((hq + hkv) * d),
                            f"{b}x{t}x{hq}x{d}:0:{t * hq * d}:{d}:{hq * d}")
    spec.check()
    y = torch.randn(b, t, n).half()
    o = torch.zeros(b, t, hq, d).half()
    fn[ak.grid_of(spec, ak.AttentionConfig(64, 32, 4, 2, "pointers"))](
        y, y, y, o, **ak.constexprs(spec, ak.AttentionConfig(64, 32, 4, 2, "pointers")))
    q, k, v = (y[..., a:a + h * d].reshape(b, t, h, d).transpose(1, 2).float()
               for a, h in ((0, hq), (hq * d, hkv), ((hq + hkv) * d, hkv)))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv).transpose(1, 2)
    print(b, hq, hkv, t, d, causal, float((o.float() - ref).abs().max()))
"""


@needs_triton
def test_strided_layouts_in_the_triton_interpreter():
    """q, k and v read straight from a fused QKV projection's [B, T, N] output (offsets and token
    stride N), grouped kv heads, o written as [B, T, H, D]: the layouts lower-cuvil-to-kernels
    passes for a transformer's attention block, against SDPA on the sliced views."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", f"CASES = {STRIDED_CASES!r}\n" + _INTERPRET_STRIDED], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    errors = [float(line.split()[-1]) for line in r.stdout.splitlines()]
    assert len(errors) == len(STRIDED_CASES) and max(errors) < 3e-3, r.stdout


def test_strided_layout_outside_its_tensor_is_refused():
    bad = ak.AttentionSpec(1, 2, 2, 16, 16, 64, "f16", True, 0.125, q_layout="1x16x384:320:6144:64:384")
    with pytest.raises(CompileError, match="q layout"):
        bad.check()


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


def test_strided_kernel_function_computes_what_the_op_did():
    """The strided attention's kernel function (what a target without the kernel compiles: its
    body rebuilds the slices, views, repeated kv heads and the transpose back) gives the numbers
    of the block it replaced, on IREE's CPU. The block is the lit test's @strided."""
    from pathlib import Path

    import numpy as np

    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import parse_module
    from cuvil_mlir.core.passes import run_pipeline
    from cuvil_mlir.lowering import builtin_registry
    from cuvil_mlir.runtime.session import Session
    from cuvil_mlir.targets import iree, parse_target

    lit = Path(__file__).parents[1] / "lowering" / "kernels" / "lower-cuvil-to-kernels.mlir"
    (text,) = [chunk for chunk in lit.read_text().split("// -----") if "func.func @strided(" in chunk]
    cpu, registry = parse_target("cpu"), builtin_registry()
    y = np.random.default_rng(0).standard_normal((2, 16, 512)).astype(np.float16)
    outs = []
    for passes in (["lower-cuvil-to-torch"], ["lower-cuvil-to-kernels", "lower-cuvil-to-torch"]):
        module = parse_module(text, make_context())
        fired = run_pipeline(module, [registry.get(p) for p in passes + ["verify-no-cuvil"]])
        outs.append(Session(iree.compile_to_vmfb(module, cpu.iree_flags()), cpu.driver).invoke("strided", [y])[0])
    assert fired["lower-cuvil-to-kernels"] == {"attention (strided)": 1}
    q, k, v = (torch.from_numpy(y[..., a:a + h * 64]).float().reshape(2, 16, h, 64).transpose(1, 2)
               for a, h in ((0, 4), (256, 2), (384, 2)))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2).reshape(2, 16, 256)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert float((torch.from_numpy(outs[1]).float() - ref).abs().max()) < 2e-3


@needs_triton
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hf_attention_blocks_get_the_strided_kernel(arch):
    """HF GPT-2 (fused c_attn, split) and Llama (q/k/v projections fused horizontally, RoPE on q
    and k, repeat_kv of 2 kv heads) in fp16 on cuda:h200: every attention reads v (and GPT-2's q
    and k) from the fused projection's output and writes [B, T, H, D] for the output projection,
    Llama's kv heads read once; Llama's q and k are sliced by heads for RoPE. The attention and MLP
    output projections add the residual in the linear kernel's epilogue (the residual adds are gone)."""
    import cuvil_mlir
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=512, use_cache=False))
    else:
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                             intermediate_size=512, vocab_size=512, use_cache=False))
    compiled = cuvil_mlir.compile(model.eval().half(), (torch.randint(0, 512, (2, 32)),), target="cuda:h200")
    assert compiled.patterns_fired["lower-cuvil-to-kernels"]["attention (strided)"] == 2
    (record,) = {r["function"]: r for r in compiled.metadata["kernels"] if r["function"].startswith("cuvil_kernel_attention")}.values()
    assert "_strided_" in record["kernel"] and record["kv_heads"] == (4 if arch == "gpt2" else 2)
    n = 3 * 256 if arch == "gpt2" else 256 + 2 * 128
    assert record["v_layout"] == f"2x32x{n}:{n - (256 if arch == 'gpt2' else 128)}:{32 * n}:64:{n}"
    assert record["o_layout"] == "2x32x4x64:0:8192:64:256"
    assert (record.get("q_layout") == f"2x32x{n}:0:{32 * n}:64:{n}") == (arch == "gpt2")  # Llama's RoPE writes q itself
    fired = compiled.patterns_fired["lower-cuvil-to-kernels"]
    assert fired["linear (widened 16-bit) + residual" if arch == "gpt2" else "linear + residual"] == 2 * 2
    assert fired.get("slice by heads", 0) == (0 if arch == "gpt2" else 2 * 2)  # Llama's q and k on their way to RoPE
    residual = [r for r in compiled.metadata["kernels"] if r.get("has_residual")]
    assert {r["kernel"].split("_res_")[0] + "_res" for r in residual} == {r["function"].replace("cuvil_kernel_", "cuvil_") for r in residual}
    sites = sorted(p.split(".")[-2:][0] + "." + p.split(".")[-1] for r in residual for p in r["sites"])
    assert sites == sorted(2 * (["attn.c_proj", "mlp.c_proj"] if arch == "gpt2" else ["self_attn.o_proj", "mlp.down_proj"])), sites


PREFIX_CASES = [  # (b, hq, hkv, tq, cache length S, pos, d, bn): decode (GQA, one split / several), a later prompt chunk
    (1, 4, 2, 1, 64, 37, 64, 16), (2, 4, 1, 1, 256, 200, 64, 16), (1, 2, 2, 1, 256, 0, 128, 16),
    (1, 4, 2, 5, 96, 60, 64, 16), (2, 2, 2, 20, 128, 90, 64, 16),
]

_INTERPRET_PREFIX = _INTERPRET.split("fn = ak.kernel()")[0] + """
attention, combine = ak.prefix_kernels()
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
torch.manual_seed(0)
for b, hq, hkv, tq, s, pos, d, bn in CASES:
    spec = ak.AttentionSpec(b, hq, hkv, tq, s, d, "f16", False, d ** -0.5, prefix=True)
    spec.check()
    config = ak.AttentionConfig(64, bn, 4, 2, "pointers")
    sizes, combine_sizes = ak.prefix_constexprs(spec, config)
    q = torch.randn(b, hq, tq, d).half()
    k, v = torch.randn(b, hkv, s, d).half(), torch.randn(b, hkv, s, d).half()
    k[:, :, pos + tq:], v[:, :, pos + tq:] = float("nan"), float("nan")  # past the queries: never read
    o = torch.zeros_like(q)
    grid = ak.prefix_grid(spec, config)
    if sizes["SPLITS"] == 1:
        attention[grid](q, k, v, torch.tensor([pos]), o, **sizes)
    else:
        part = torch.empty(ak.prefix_partial_bytes(spec, config) // 4, dtype=torch.float32)
        attention[grid](q, k, v, torch.tensor([pos]), part, **sizes)
        combine[grid[:2]](part, o, **combine_sizes)
    keys = torch.arange(pos + tq)
    mask = keys[None, :] <= pos + torch.arange(tq)[:, None]
    ref = F.scaled_dot_product_attention(q.float(), k[:, :, :pos + tq].float(), v[:, :, :pos + tq].float(), attn_mask=mask,
                                         enable_gqa=hq != hkv)
    print(b, hq, hkv, tq, s, pos, d, sizes["SPLITS"], float((o.float() - ref).abs().max()))
"""


@needs_triton
def test_prefix_kernel_numerics_in_the_triton_interpreter():
    """The prefix (KV-cache) kernels in Triton's CPU interpreter against SDPA over the filled prefix
    with the causal-offset mask: single-token decode and a 5- and 20-token chunk, grouped kv heads,
    one split and several (the combine), position 0; the cache past the queries holds NaN, which
    must not reach the result."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", f"CASES = {PREFIX_CASES!r}\n" + _INTERPRET_PREFIX], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split() for line in r.stdout.splitlines()]
    assert len(rows) == len(PREFIX_CASES) and max(float(x[-1]) for x in rows) < 3e-3, r.stdout
    assert {int(x[-2]) for x in rows} >= {1, 2}, r.stdout  # both paths: one split, and partials + combine


def test_prefix_kernel_function_computes_what_the_op_did():
    """The prefix attention's kernel function (its body clones the cache slices, repeat_kv and the
    mask) gives the numbers of the attention it replaced on IREE's CPU, at two positions, with
    NaN in the cache past the chunk (never read). The block is the lit test's @prefix."""
    from pathlib import Path

    import numpy as np

    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import parse_module
    from cuvil_mlir.core.passes import run_pipeline
    from cuvil_mlir.lowering import builtin_registry
    from cuvil_mlir.runtime.session import Session
    from cuvil_mlir.targets import iree, parse_target

    lit = Path(__file__).parents[1] / "lowering" / "kernels" / "lower-cuvil-to-kernels.mlir"
    (text,) = [chunk for chunk in lit.read_text().split("// -----") if "func.func @prefix(" in chunk]
    cpu, registry = parse_target("cpu"), builtin_registry()
    sessions = []
    for passes in (["lower-cuvil-to-torch"], ["lower-cuvil-to-kernels", "lower-cuvil-to-torch"]):
        module = parse_module(text, make_context())
        fired = run_pipeline(module, [registry.get(p) for p in passes + ["verify-no-cuvil"]])
        sessions.append(Session(iree.compile_to_vmfb(module, cpu.iree_flags()), cpu.driver))
    assert fired["lower-cuvil-to-kernels"] == {"attention over a cache prefix": 1}
    rng = np.random.default_rng(0)
    for pos in (0, 20):
        q = rng.standard_normal((2, 4, 3, 64)).astype(np.float16)
        kc, vc = (rng.standard_normal((2, 2, 32, 64)).astype(np.float16) for _ in range(2))
        kc[:, :, pos + 3:], vc[:, :, pos + 3:] = np.nan, np.nan
        args = [q, kc, vc, np.array([pos], dtype=np.int64)]
        outs = [s.invoke("prefix", args)[0] for s in sessions]
        np.testing.assert_array_equal(outs[0], outs[1])
        mask = torch.arange(pos + 3)[None, :] <= pos + torch.arange(3)[:, None]
        k, v = (torch.from_numpy(c[:, :, :pos + 3]).float() for c in (kc, vc))
        ref = F.scaled_dot_product_attention(torch.from_numpy(q).float(), k, v, attn_mask=mask, enable_gqa=True)
        assert float((torch.from_numpy(outs[1]).float() - ref).abs().max()) < 2e-3, pos


CACHE_WRITE_CASES = [  # (dst shape, dim, rows, dtype, offset, position, strided src): decode, a prompt chunk, fp32, past the end
    ((2, 4, 64, 64), 2, 1, "f16", 0, 37, False), ((1, 2, 256, 128), 2, 32, "bf16", 0, 200, False),
    ((3, 8, 16, 64), 2, 16, "f16", 0, 0, False), ((2, 2, 48, 32), 2, 5, "f32", 1, 10, False),
    ((2, 4, 64, 64), 2, 1, "f16", 0, 64, False), ((2, 2, 8, 16), 2, 4, "f32", 0, -1, False),
    ((2, 2, 64, 64), 2, 1, "f16", 0, 40, True), ((2, 2, 64, 64), 2, 6, "f16", 0, 58, True),
]

_INTERPRET_CACHE_WRITE = """
import torch, triton
from cuvil_mlir.targets import cuda_attention_kernels as ak
fn = ak.cache_write_kernel()
torch.manual_seed(0)
dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
for shape, dim, rows, dtype, offset, pos, strided in CASES:
    outer, slots, inner = 1, shape[dim], 1
    for n in shape[:dim]: outer *= n
    for n in shape[dim + 1:]: inner *= n
    dst = torch.randn(shape).to(dtypes[dtype])
    if strided:  # v cut from a fused QKV output [B, T, N]: heads 3 .. 3+H of N/D, viewed and transposed
        b, h, _, d = shape
        n = (h + 3 + 1) * d
        qkv = torch.randn(b, rows, n).to(dtypes[dtype])
        src = qkv[:, :, 3 * d:(3 + h) * d].view(b, rows, h, d).transpose(1, 2)
        spec = ak.CacheWriteSpec(outer, slots, rows, inner, dtype, offset, h, f"{b}x{rows}x{n}:{3 * d}:{rows * n}:{d}:{n}")
        arg = qkv
    else:
        src = torch.randn(*shape[:dim], rows, *shape[dim + 1:]).to(dtypes[dtype])
        spec = ak.CacheWriteSpec(outer, slots, rows, inner, dtype, offset)
        arg = src
    spec.check()
    ref = dst.clone()
    start = pos + offset
    if 0 <= start and start + rows <= slots:
        ref.narrow(dim, start, rows).copy_(src)
    fn[ak.cache_write_grid(spec)](arg, torch.tensor([pos]), dst, **ak.cache_write_constexprs(spec))
    print(shape, pos, bool(torch.equal(dst, ref)))
"""


@needs_triton
def test_cache_write_kernel_in_the_triton_interpreter():
    """The KV-cache write kernel in Triton's CPU interpreter writes exactly the slots at the
    device-held position (plus the spec's offset) and nothing else: decode, a 32-token chunk,
    fp16/bf16/fp32, a source cut from a fused QKV output (strided), and positions whose rows
    would run past the cache or start before it (it writes nothing there)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", f"CASES = {CACHE_WRITE_CASES!r}\n" + _INTERPRET_CACHE_WRITE], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = r.stdout.splitlines()
    assert len(rows) == len(CACHE_WRITE_CASES) and all(row.endswith("True") for row in rows), r.stdout


def test_cache_write_spec_contract():
    with pytest.raises(CompileError, match="dtype"):
        ak.CacheWriteSpec(4, 32, 1, 64, "f64").check()
    with pytest.raises(CompileError, match="do not fit"):
        ak.CacheWriteSpec(4, 32, 33, 64, "f16").check()
    with pytest.raises(CompileError, match="grid"):
        ak.CacheWriteSpec(70000, 32, 1, 64, "f16").check()
    with pytest.raises(CompileError, match="does not fit its tensor"):  # v's heads past the end of the QKV output
        ak.CacheWriteSpec(4, 32, 1, 64, "f16", 0, 2, "2x1x256:192:256:64:256").check()


@needs_triton
def test_cache_write_extern_is_tied_to_the_cache():
    """The kernel function's extern dispatch writes the cache in place: its result is tied to
    the cache operand (which is bound read-write, with no binding of its own for the result)."""
    spec = ak.CacheWriteSpec(4, 32, 1, 64, "f16")
    text = ak.cache_write_function("cw", spec, ak.build_cache_write(spec), [2, 2, 32, 64], [2, 2, 1, 64])
    assert "tied_operands = [2 : index, -1 : index, -1 : index]" in text
    assert text.count("#hal.pipeline.binding<storage_buffer, ReadOnly>") == 2  # src, pos
    assert text.count("#hal.pipeline.binding<storage_buffer>") == 3  # the cache, Triton's two scratch buffers
    assert "-> (tensor<2x2x32x64xf16>, tensor<16xi8>, tensor<16xi8>)" in text


@pytest.mark.parametrize("block", ["cache_write", "cache_write_strided"])
def test_cache_write_kernel_function_computes_what_the_op_did(block):
    """The lit test's @cache_write / @cache_write_strided blocks through lower-cuvil-to-kernels
    (the kernel function's body: the slice_scatter at int(P), the strided source rebuilt from
    the QKV output) give what the program gave on IREE's CPU, at the first, a middle and the
    last position the rows fit."""
    from pathlib import Path

    import numpy as np

    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import parse_module
    from cuvil_mlir.core.passes import run_pipeline
    from cuvil_mlir.lowering import builtin_registry
    from cuvil_mlir.runtime.session import Session
    from cuvil_mlir.targets import iree, parse_target

    lit = Path(__file__).parents[1] / "lowering" / "kernels" / "lower-cuvil-to-kernels.mlir"
    (text,) = [chunk for chunk in lit.read_text().split("// -----") if f"func.func @{block}(" in chunk]
    cpu, registry = parse_target("cpu"), builtin_registry()
    sessions = []
    for passes in ([], ["lower-cuvil-to-kernels"]):
        module = parse_module(text, make_context())
        fired = run_pipeline(module, [registry.get(p) for p in passes + ["lower-cuvil-to-torch", "verify-no-cuvil"]])
        sessions.append(Session(iree.compile_to_vmfb(module, cpu.iree_flags()), cpu.driver))
    if block == "cache_write":
        assert fired["lower-cuvil-to-kernels"] == {"cache write at a device position": 2, "position range check left to the host": 1}
    else:
        assert fired["lower-cuvil-to-kernels"] == {"cache write at a device position (strided)": 1}
    rng = np.random.default_rng(0)
    rows = 1 if block == "cache_write" else 3
    for pos in (0, 17, 32 - rows):
        kc, vc = (rng.standard_normal((2, 2, 32, 64)).astype(np.float16) for _ in range(2))
        if block == "cache_write":
            k, v = (rng.standard_normal((2, 2, 1, 64)).astype(np.float16) for _ in range(2))
            args, written = [kc, vc, k, v, np.array([pos], dtype=np.int64)], k
        else:
            qkv = rng.standard_normal((2, 3, 512)).astype(np.float16)
            args = [kc, qkv, np.array([pos], dtype=np.int64)]
            written = qkv[:, :, 384:].reshape(2, 3, 2, 64).transpose(0, 2, 1, 3)
        outs = [s.invoke(block, args) for s in sessions]
        for before, after in zip(*outs):
            np.testing.assert_array_equal(before, after)
        np.testing.assert_array_equal(outs[1][0][:, :, pos:pos + rows], written)
