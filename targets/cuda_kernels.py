"""Hopper (sm_90a) kernels for Cuvil ops, written in Triton and compiled ahead of time on the
CPU machine (Triton compiles for a given target without a GPU), then embedded in the IREE
module as executable objects of ``hal.dispatch.extern`` (targets/iree.py).

Only this module imports ``triton``, and only when a kernel is built: ``pip install
'cuvil-mlir[kernels]'``. Without it the CUDA target keeps IREE's own codegen for every op
(``available()`` says why).

The linear kernel: ``y = act(x · Wᵀ + b)`` for x ``[M, K]``, W ``[N, K]`` (torch's layout), b
``[N]``, fp16/bf16 in and out, fp32 accumulation, TMA loads and stores through device-side
tensor descriptors, wgmma through ``tl.dot``. Gated activations (swiglu, ...) keep two
accumulators, one for the gate rows ``W[:F]`` and one for the up rows ``W[F:]``, and write
``act(gate) * up`` (N = F out features). Every size is a constexpr: one kernel per shape.

IREE's CUDA ABI passes the bindings as pointers, then the push constants as i32. With every
size constexpr, Triton's entry takes only pointers: x, W, b (when there is one), y, then two
hidden ones of its own, the global scratch (where device-side TMA descriptors are written:
``global_scratch_size`` bytes per program) and the profile scratch (unused). The extern
dispatch binds them as two extra results: a transient scratch buffer of ``grid *
global_scratch_size`` bytes and a 16-byte dummy.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cuvil_mlir.core.diagnostics import CompileError

# What the kernel family covers (the pass lower-cuvil-to-kernels checks the same contract on
# the IR; a shape outside it keeps IREE's codegen).
DTYPES = {"f16": "fp16", "bf16": "bf16"}
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "relu6")
GATED = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu"}
_ACT_CODE = {name: i for i, name in enumerate(ACTIVATIONS)}

TRITON_VERSION = "3.9.0"
# PTX ISA 8.7 and the ptxas of CUDA 12.9 that Triton bundles: drivers of CUDA 13.0 (the H200's
# 580 driver) reject Triton 3.9's default PTX 9.4 ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION").
PTX_VERSION = 87
CACHE_ENV = "CUVIL_KERNEL_CACHE"  # where built kernels are kept (default ~/.cache/cuvil-mlir/kernels)
CONFIGS_PATH = Path(__file__).with_name("cuda_kernel_configs.json")
CONFIGS_ENV = "CUVIL_KERNEL_CONFIGS"  # another tile table (a JSON file like CONFIGS_PATH), for tuning


class SharedMemoryError(CompileError):
    """A kernel config needs more shared memory than sm_90 has (the module would not load)."""


def available() -> str | None:
    """None when kernels can be built here, else why not (in words)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed (pip install 'cuvil-mlir[kernels]')"
    from importlib.metadata import version

    if version("triton") != TRITON_VERSION:
        return f"triton {version('triton')} is installed; the kernels are built and tuned with triton {TRITON_VERSION}"
    return None


@dataclass(frozen=True)
class LinearSpec:
    """One cuvil.linear as the kernel sees it (after flattening the leading dims into M)."""

    m: int
    n: int  # rows of W (2F for a gated activation)
    k: int
    dtype: str  # f16 | bf16
    activation: str
    has_bias: bool
    bias_dtype: str = ""  # the bias's dtype: the kernel's (default) or f32 (added in fp32 either way)
    # a residual [M, F] (the kernel's dtype) added to the result in fp32 after the activation: the
    # `linear(x) + r` of a transformer's attention and MLP output projections, one dispatch
    has_residual: bool = False

    @property
    def bias_type(self) -> str:
        return self.bias_dtype or self.dtype

    @property
    def gated(self) -> bool:
        return self.activation in GATED

    @property
    def out_features(self) -> int:
        return self.n // 2 if self.gated else self.n


KINDS = ("tiles", "persistent", "pointers", "splitk")


@dataclass(frozen=True)
class TileConfig:
    bm: int
    bn: int  # output columns per program (for gated: of the result, F)
    bk: int
    warps: int
    stages: int
    group: int = 8
    # "tiles": one program per output tile; "persistent": one program per SM looping over tiles
    # (descriptors made once per program, the next tile's loads overlap this one's epilogue),
    # warp-specialized (producer/consumer warps) when ``ws``; "pointers": one program per tile,
    # pointer loads (cp.async) instead of TMA; "splitk": ``split`` programs per tile, each over a
    # share of K, pointer loads, the last of a tile to finish summing their fp32 partials (below)
    kind: str = "tiles"
    ws: bool = False
    # TMA kernels: store the output tile in two [BM, BN/2] halves (half the epilogue's shared
    # memory, which leaves room for one more pipeline stage at 128x256)
    subtile: bool = False
    split: int = 1  # splitk: programs per output tile (K cut into that many shares)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise CompileError(f"unknown linear kernel kind {self.kind!r} in a tile config; kinds: {', '.join(KINDS)}")
        if (self.kind == "splitk") != (self.split > 1):
            raise CompileError(f"a tile config has split={self.split} with kind {self.kind!r}: split > 1 is kind 'splitk' (and only it)")

    @property
    def key(self) -> str:
        extra = {"tiles": "", "pointers": "ptr", "splitk": f"sk{self.split}"}.get(self.kind, f"p{'ws' if self.ws else ''}")
        return f"{self.bm}x{self.bn}x{self.bk}w{self.warps}s{self.stages}{extra}{'e' if self.subtile else ''}"


@dataclass(frozen=True)
class KernelBinary:
    """A built kernel, everything the extern dispatch needs."""

    name: str  # the entry point (PTX .entry, IREE export name)
    image: bytes  # cubin (sm_90a)
    ptx: str
    threads: int
    shared_bytes: int
    grid: int
    scratch_bytes: int  # global scratch per program
    config: TileConfig
    spec: LinearSpec
    cubin_path: str = ""  # the files in the kernel cache (what the IREE module embeds)
    ptx_path: str = ""

    def describe(self) -> dict:
        return {"kernel": self.name, "config": self.config.key, "grid": self.grid, "threads": self.threads,
                "shared_bytes": self.shared_bytes, "triton": TRITON_VERSION}


# ----------------------------------------------------------------------------- selection


def load_configs(path: Path | None = None) -> list[dict]:
    """The tile table: rules in order, the first whose bounds hold is used (see the JSON)."""
    path = Path(path or os.environ.get(CONFIGS_ENV) or CONFIGS_PATH)
    try:
        return json.loads(path.read_text())["rules"]
    except (OSError, ValueError, KeyError) as e:
        raise CompileError(f"cannot read the kernel tile table {path}: {e}") from e


def select_config(spec: LinearSpec, rules: list[dict] | None = None) -> TileConfig | None:
    """The tile configuration for a linear from the table (the first rule whose bounds hold),
    or None where the table says IREE's codegen is faster (``"config": "iree"``)."""
    for rule in rules if rules is not None else load_configs():
        when = rule.get("when", {})
        if (when.get("min_m", 0) <= spec.m <= when.get("max_m", 1 << 62)
                and when.get("min_n", 0) <= spec.out_features <= when.get("max_n", 1 << 62)
                and when.get("min_k", 0) <= spec.k <= when.get("max_k", 1 << 62)
                and when.get("gated", spec.gated) == spec.gated):
            return None if rule["config"] == "iree" else TileConfig(**rule["config"])
    raise CompileError(f"no rule of {CONFIGS_PATH.name} matches {spec} (its last rule should match everything)")


# ----------------------------------------------------------------------------- the kernel


def _kernel():
    """The Triton function (defined on first use, so importing this module needs no triton)."""
    global _LINEAR
    if _LINEAR is not None:
        return _LINEAR
    import triton
    import triton.language as tl

    @triton.jit
    def _act(v, ACT: tl.constexpr):
        if ACT == 1:  # relu
            v = tl.maximum(v, 0.0)
        elif ACT == 2:  # gelu (erf)
            v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
        elif ACT == 3:  # gelu_tanh: 0.5 v (1 + tanh(u)), tanh(u) = 2 sigmoid(2u) - 1
            u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
            v = v * tl.sigmoid(2.0 * u)
        elif ACT == 4:  # silu
            v = v * tl.sigmoid(v)
        elif ACT == 5:  # sigmoid
            v = tl.sigmoid(v)
        elif ACT == 6:  # relu6
            v = tl.minimum(tl.maximum(v, 0.0), 6.0)
        return v

    @triton.jit
    def _residual(acc, r_ptr, rm, rn, M: tl.constexpr, F: tl.constexpr):
        # acc + r[rm, rn] in fp32; rows past M and columns past F read nothing (they are not stored)
        mask = (rm[:, None] < M) & (rn[None, :] < F)
        return acc + tl.load(r_ptr + rm[:, None] * F + rn[None, :], mask=mask, other=0.0).to(tl.float32)

    @triton.jit
    def _tile(xd, wd, yd, b_ptr, r_ptr, y_ptr, om, on, M: tl.constexpr, K: tl.constexpr, F: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr,
              ACT: tl.constexpr, GATED: tl.constexpr, SUBTILE: tl.constexpr):
        # one [BM, BN] output tile at (om, on): TMA loads, wgmma (tl.dot) into fp32, the epilogue, a TMA store
        acc = tl.zeros((BM, BN), tl.float32)
        if GATED:
            up = tl.zeros((BM, BN), tl.float32)
        for kk in range(0, tl.cdiv(K, BK)):
            a = xd.load([om, kk * BK])
            acc = tl.dot(a, wd.load([on, kk * BK]).T, acc)
            if GATED:
                up = tl.dot(a, wd.load([F + on, kk * BK]).T, up)
        cols = on + tl.arange(0, BN)
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=cols < F, other=0.0).to(tl.float32)[None, :]
            if GATED:
                up += tl.load(b_ptr + F + cols, mask=cols < F, other=0.0).to(tl.float32)[None, :]
        acc = _act(acc, ACT)
        if GATED:
            acc = acc * up
        if HAS_RES:
            acc = _residual(acc, r_ptr, om + tl.arange(0, BM), cols, M, F)
        out = acc.to(y_ptr.dtype.element_ty)
        if SUBTILE:
            left, right = tl.split(tl.permute(tl.reshape(out, (BM, 2, BN // 2)), (0, 2, 1)))
            yd.store([om, on], left)
            yd.store([om, on + BN // 2], right)
        else:
            yd.store([om, on], out)

    @triton.jit
    def cuvil_linear(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                     F: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     GROUP: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr,
                     GATED: tl.constexpr, SUBTILE: tl.constexpr):
        # F: out features (N, or N // 2 gated). Programs are grouped along M for L2 reuse of W.
        xd = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        wd = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        yd = tl.make_tensor_descriptor(y_ptr, shape=[M, F], strides=[F, 1], block_shape=[BM, BN // (2 if SUBTILE else 1)])
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(F, BN)
        width = GROUP * num_n
        first = (pid // width) * GROUP
        size = min(num_m - first, GROUP)
        pm = first + (pid % width) % size
        pn = (pid % width) // size
        om = pm * BM
        on = pn * BN
        _tile(xd, wd, yd, b_ptr, r_ptr, y_ptr, om, on, M, K, F, BM, BN, BK, HAS_BIAS, HAS_RES, ACT, GATED, SUBTILE)

    @triton.jit
    def cuvil_linear_persistent(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                                F: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                                GROUP: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr,
                                GATED: tl.constexpr, PROGRAMS: tl.constexpr, WS: tl.constexpr, SUBTILE: tl.constexpr):
        xd = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        wd = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        yd = tl.make_tensor_descriptor(y_ptr, shape=[M, F], strides=[F, 1], block_shape=[BM, BN // (2 if SUBTILE else 1)])
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(F, BN)
        width = GROUP * num_n
        for tile in tl.range(tl.program_id(0), num_m * num_n, PROGRAMS, flatten=True, warp_specialize=WS):
            first = (tile // width) * GROUP
            size = min(num_m - first, GROUP)
            om = (first + (tile % width) % size) * BM
            on = ((tile % width) // size) * BN
            _tile(xd, wd, yd, b_ptr, r_ptr, y_ptr, om, on, M, K, F, BM, BN, BK, HAS_BIAS, HAS_RES, ACT, GATED, SUBTILE)

    @triton.jit
    def cuvil_linear_pointers(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                              F: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                              GROUP: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr,
                              GATED: tl.constexpr):
        # pointer loads (cp.async pipelining) instead of TMA descriptors; rows past M or F read
        # a valid row (modulo) and are not stored; K past its end is masked only when ragged
        rm, rn, rk, xp, wp = _pointer_tile(x_ptr, w_ptr, tl.program_id(0), M, K, F, BM, BN, BK, GROUP)
        acc, up = _pointer_loop(xp, wp, rk, 0, tl.cdiv(K, BK), K, F, BM, BN, BK, GATED)
        _pointer_epilogue(acc, up, b_ptr, r_ptr, y_ptr, rm, rn, M, F, HAS_BIAS, HAS_RES, ACT, GATED)

    @triton.jit
    def _pointer_tile(x_ptr, w_ptr, tile, M: tl.constexpr, K: tl.constexpr, F: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        # output tile ``tile`` (grouped along M for L2 reuse of W): its rows, columns, the K offsets
        # of one step, and the pointers of its first x and W blocks
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(F, BN)
        width = GROUP * num_n
        first = (tile // width) * GROUP
        size = min(num_m - first, GROUP)
        rm = (first + (tile % width) % size) * BM + tl.arange(0, BM)
        rn = ((tile % width) // size) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        return rm, rn, rk, x_ptr + (rm % M)[:, None] * K + rk[None, :], w_ptr + (rn % F)[:, None] * K + rk[None, :]

    @triton.jit
    def _pointer_loop(xp, wp, rk, first, last, K: tl.constexpr, F: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, GATED: tl.constexpr):
        # the fp32 product of the K steps first..last-1 (BK each) from pointer loads; K past its end is
        # masked only when ragged; (acc, up) with up the up rows' product when gated (else acc again)
        acc = tl.zeros((BM, BN), tl.float32)
        up = acc
        xp += first * BK
        wp += first * BK
        for kk in range(first, last):
            if K % BK == 0:
                a = tl.load(xp)
                b = tl.load(wp)
            else:
                a = tl.load(xp, mask=(kk * BK + rk)[None, :] < K, other=0.0)
                b = tl.load(wp, mask=(kk * BK + rk)[None, :] < K, other=0.0)
            acc = tl.dot(a, b.T, acc)
            if GATED:
                if K % BK == 0:
                    u = tl.load(wp + F * K)
                else:
                    u = tl.load(wp + F * K, mask=(kk * BK + rk)[None, :] < K, other=0.0)
                up = tl.dot(a, u.T, up)
            xp += BK
            wp += BK
        return acc, up

    @triton.jit
    def _pointer_epilogue(acc, up, b_ptr, r_ptr, y_ptr, rm, rn, M: tl.constexpr, F: tl.constexpr, HAS_BIAS: tl.constexpr,
                          HAS_RES: tl.constexpr, ACT: tl.constexpr, GATED: tl.constexpr):
        # bias, activation (gated: act(gate) * up), residual, and the masked store of the [BM, BN] tile
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=rn < F, other=0.0).to(tl.float32)[None, :]
            if GATED:
                up += tl.load(b_ptr + F + rn, mask=rn < F, other=0.0).to(tl.float32)[None, :]
        acc = _act(acc, ACT)
        if GATED:
            acc = acc * up
        if HAS_RES:
            acc = _residual(acc, r_ptr, rm, rn, M, F)
        tl.store(y_ptr + rm[:, None] * F + rn[None, :], acc.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < F))

    @triton.jit
    def cuvil_linear_splitk(x_ptr, w_ptr, b_ptr, r_ptr, c_ptr, y_ptr, ws_ptr, M: tl.constexpr, N: tl.constexpr,
                            K: tl.constexpr, F: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                            SPLIT: tl.constexpr, GROUP: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr,
                            ACT: tl.constexpr, GATED: tl.constexpr):
        # SPLIT programs per output tile, program s over K steps [s*per, (s+1)*per): its fp32 partial
        # (and the up rows' when gated) goes to the workspace ws[tile, s]; then it counts itself in
        # c[tile] (zero at the call's start: the dispatch's tied operand is a zero constant). The one
        # that counts last sums the tile's partials in order s = 0..SPLIT-1 (the same sum whichever
        # finishes last), runs the epilogue and sets the count back to zero. Small M: SPLIT times
        # the programs of one per tile.
        pid = tl.program_id(0)
        tile = pid // SPLIT
        part = pid % SPLIT
        rm, rn, rk, xp, wp = _pointer_tile(x_ptr, w_ptr, tile, M, K, F, BM, BN, BK, GROUP)
        steps = tl.cdiv(K, BK)
        per = tl.cdiv(steps, SPLIT)
        acc, up = _pointer_loop(xp, wp, rk, part * per, min(part * per + per, steps), K, F, BM, BN, BK, GATED)
        PARTS: tl.constexpr = 2 if GATED else 1
        cell = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        slot = ws_ptr + tile * (SPLIT * PARTS * BM * BN) + cell
        tl.store(slot + part * (PARTS * BM * BN), acc)
        if GATED:
            tl.store(slot + part * (PARTS * BM * BN) + BM * BN, up)
        tl.debug_barrier()  # every thread's partial written before the count releases it
        if tl.atomic_add(c_ptr + tile, 1, sem="acq_rel", scope="gpu") == SPLIT - 1:
            acc = tl.zeros((BM, BN), tl.float32)
            up = acc
            for s in range(SPLIT):
                acc += tl.load(slot + s * (PARTS * BM * BN), cache_modifier=".cg")
                if GATED:
                    up += tl.load(slot + s * (PARTS * BM * BN) + BM * BN, cache_modifier=".cg")
            _pointer_epilogue(acc, up, b_ptr, r_ptr, y_ptr, rm, rn, M, F, HAS_BIAS, HAS_RES, ACT, GATED)
            tl.atomic_xchg(c_ptr + tile, 0, sem="relaxed", scope="gpu")  # counters left as found: zero

    _LINEAR = {"tiles": cuvil_linear, "persistent": cuvil_linear_persistent, "pointers": cuvil_linear_pointers,
               "splitk": cuvil_linear_splitk}
    return _LINEAR


_LINEAR = None
SMS = 132  # H100 SXM / H200: the persistent kernel's program count (at most)
MAX_SHARED_BYTES = 232448  # sm_90's opt-in shared memory per block (227 KiB): IREE refuses to load more


def kernel_name(spec: LinearSpec, config: TileConfig) -> str:
    """A readable, unique entry name: what shows up in profiles and IREE's dispatch names."""
    digest = hashlib.sha256(repr((asdict(spec), asdict(config))).encode()).hexdigest()[:8]
    bias = "" if not spec.has_bias else "_bias" if spec.bias_type == spec.dtype else f"_bias_{spec.bias_type}"
    res = "_res" if spec.has_residual else ""
    return f"cuvil_linear_{spec.m}x{spec.n}x{spec.k}_{spec.dtype}_{spec.activation}{bias}{res}_{config.key}_{digest}"


def build_linear(spec: LinearSpec, config: TileConfig | None = None) -> KernelBinary:
    """Compile (or take from the cache) the linear kernel for ``spec``."""
    reason = available()
    if reason:
        raise CompileError(f"cannot build the Hopper linear kernel: {reason}")
    config = config or select_config(spec)
    name = kernel_name(spec, config)
    key = hashlib.sha256(json.dumps([_source_hash(), name, asdict(spec), asdict(config)]).encode()).hexdigest()[:24]
    cache = _cache_dir() / key
    if (cache / "meta.json").exists():
        meta = json.loads((cache / "meta.json").read_text())
        return KernelBinary(name, (cache / "kernel.cubin").read_bytes(), (cache / "kernel.ptx").read_text(),
                            meta["threads"], meta["shared"], meta["grid"], meta["scratch"], config, spec,
                            str(cache / "kernel.cubin"), str(cache / "kernel.ptx"))
    ptx, threads, shared, scratch = _compile(spec, config, name)
    if shared > MAX_SHARED_BYTES:  # the whole module would fail to load ("exceeds the device maximum")
        raise SharedMemoryError(f"{name} needs {shared} B of shared memory; sm_90 allows {MAX_SHARED_BYTES}")
    cubin = _ptxas(ptx)
    grid = grid_of(spec, config)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "kernel.ptx").write_text(ptx)  # NUL-terminated by IREE's flatbuffer string
    (cache / "kernel.cubin").write_bytes(cubin)
    (cache / "meta.json").write_text(json.dumps({"threads": threads, "shared": shared, "grid": grid, "scratch": scratch}))  # last: marks it complete
    return KernelBinary(name, cubin, ptx, threads, shared, grid, scratch, config, spec, str(cache / "kernel.cubin"), str(cache / "kernel.ptx"))


def _compile(spec: LinearSpec, config: TileConfig, name: str) -> tuple[str, int, int, int]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    fn = _kernel()[config.kind]
    ty = "*" + DTYPES[spec.dtype]
    sizes = constexprs(spec, config)
    bias_ty = "*" + {"f32": "fp32", **DTYPES}[spec.bias_type] if spec.has_bias else ty
    pointers = {"x_ptr": ty, "w_ptr": ty, "b_ptr": bias_ty, "r_ptr": ty, "y_ptr": ty}
    if config.kind == "splitk":  # the binding order: inputs (the counters last), then outputs (y, the workspace)
        pointers = {"x_ptr": ty, "w_ptr": ty, "b_ptr": bias_ty, "r_ptr": ty, "c_ptr": "*i32", "y_ptr": ty, "ws_ptr": "*fp32"}
    signature = {**pointers, **{k: "constexpr" for k in sizes}}
    # IREE's binding pointers are at least 16-byte aligned (its stream resource alignment)
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(pointers))}
    try:
        k = triton.compile(ASTSource(fn, signature=signature, constexprs=sizes, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": config.warps, "num_stages": config.stages, "ptx_version": PTX_VERSION})
    except Exception as e:  # Triton's compile errors are of many types
        raise CompileError(f"Triton failed to compile {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    ptx = rename_entry(k.asm["ptx"], k.metadata.name, name)
    return ptx, k.metadata.num_warps * 32, k.metadata.shared, k.metadata.global_scratch_size


def constexprs(spec: LinearSpec, config: TileConfig) -> dict:
    """The kernel's compile-time arguments for ``spec`` and ``config`` (after its five pointers:
    x, w, b, r, y)."""
    sizes = dict(M=spec.m, N=spec.n, K=spec.k, F=spec.out_features, BM=config.bm, BN=config.bn, BK=config.bk,
                 GROUP=config.group, HAS_BIAS=int(spec.has_bias), HAS_RES=int(spec.has_residual),
                 ACT=_ACT_CODE[GATED.get(spec.activation, spec.activation)], GATED=int(spec.gated))
    if config.kind in ("tiles", "persistent"):
        sizes["SUBTILE"] = int(config.subtile)
    if config.kind == "splitk":
        sizes["SPLIT"] = config.split
    if config.kind == "persistent":
        sizes.update(PROGRAMS=grid_of(spec, config), WS=int(config.ws))
    return sizes


def grid_of(spec: LinearSpec, config: TileConfig) -> int:
    """Programs launched: one per output tile, ``split`` per tile (splitk), or (persistent) at
    most one per SM."""
    tiles = output_tiles(spec, config)
    return min(tiles, SMS) if config.kind == "persistent" else tiles * config.split


def output_tiles(spec: LinearSpec, config: TileConfig) -> int:
    return math.ceil(spec.m / config.bm) * math.ceil(spec.out_features / config.bn)


def workspace_bytes(spec: LinearSpec, config: TileConfig) -> int:
    """splitk: the fp32 partials, [tiles, split, (2 if gated) x BM x BN]; else none."""
    if config.kind != "splitk":
        return 0
    return output_tiles(spec, config) * config.split * (2 if spec.gated else 1) * config.bm * config.bn * 4


def rename_entry(ptx: str, old: str, new: str) -> str:
    """The PTX with its entry ``old`` (and its parameter names) called ``new``."""
    out, n = re.subn(rf"\.entry {re.escape(old)}\(", f".entry {new}(", ptx)
    if n != 1:
        raise CompileError(f"expected one .entry {old} in the kernel's PTX, found {n}")
    return re.sub(rf"\b{re.escape(old)}_param_", f"{new}_param_", out)


def _ptxas(ptx: str) -> bytes:
    """sm_90a cubin from the PTX, with the ptxas Triton bundles."""
    from triton import knobs

    ptxas = knobs.nvidia.ptxas.path  # CUDA 12.9's (ptxas-blackwell is 13.4: its cubins want a newer driver)
    with tempfile.TemporaryDirectory(prefix="cuvil-ptxas-") as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        r = subprocess.run([ptxas, "-arch=sm_90a", "-O3", str(src), "-o", str(out)], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"ptxas failed on a Triton kernel: {r.stderr.strip().splitlines()[:3]}")
        return out.read_bytes()


def _cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cuvil-mlir" / "kernels")


def _source_hash() -> str:
    """The kernels' content hash: the Triton source, how it is compiled, and the toolchain."""
    import inspect

    parts = [inspect.getsource(f) for f in (_kernel, _compile, constexprs, _ptxas)] + [str(PTX_VERSION), TRITON_VERSION]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- IREE dispatch

# The executable target the objects are for: any CUDA variant IREE builds (its nvptx format).
EXECUTABLE_TARGET = '#hal.executable.target<"cuda", "cuda-nvptx-fb">'
_MLIR_DTYPE = {"f16": "f16", "bf16": "bf16"}


def extern_op(result: str, inputs: list[tuple[str, str]], outputs: list[str], kernel, grid,
              tied: dict[int, int] | None = None, path: str | None = None) -> list[str]:
    """Lines of one ``hal.dispatch.extern`` of a Triton ``kernel`` (its name, threads,
    shared_bytes, scratch_bytes, cubin_path) named ``%result`` (``%result#0`` is its first output):
    ``inputs`` (SSA name, builtin type) bound read-only, then ``outputs`` (builtin types), then
    Triton's global scratch (grid x its per-program size) and profile scratch (a 16-byte dummy).
    ``tied``: output index -> input index, an output written in place of that input (the input's
    binding is then read-write and the output has none of its own: IREE's tied results).
    ``path``: the object to embed (default the kernel's cubin).

    The op is written in generic form: its custom syntax takes no workgroup_size /
    workgroup_local_memory. IREE's CUDA runtime loads the object with cuModuleLoadDataEx (a cubin
    or PTX) and sets the dynamic shared memory size with cuFuncSetAttribute(
    MAX_DYNAMIC_SHARED_SIZE_BYTES) from ``workgroup_local_memory``, so the kernels' >48 KiB of
    shared memory needs no opt-in of ours. The object is named by path (the kernel cache's file;
    iree-compile embeds it in the module): IREE 3.13 prints an object with inline data and no
    path as `<{, data = ...}>`, which it cannot parse back."""
    tied = tied or {}
    programs = math.prod(grid)
    results = outputs + [f"tensor<{max(kernel.scratch_bytes * programs, 16)}xi8>", "tensor<16xi8>"]
    written = set(tied.values())
    bindings = ", ".join(["#hal.pipeline.binding<storage_buffer>" if i in written else "#hal.pipeline.binding<storage_buffer, ReadOnly>"
                          for i in range(len(inputs))]
                         + ["#hal.pipeline.binding<storage_buffer>"] * (len(results) - len(tied)))
    ties = [f"{tied[i]} : index" if i in tied else "-1 : index" for i in range(len(results))]
    props = ", ".join([
        f'export_name = "{kernel.name}"',
        f"layout = #hal.pipeline.layout<bindings = [{bindings}]>",
        f"operandSegmentSizes = array<i32: 0, {len(inputs)}, 0, 0>",
        f'target_objects = [[#hal.executable.object<{{path = "{path or kernel.cubin_path}"}}>]]',
        "target_ordinals = [0 : index]",
        f"targets = [{EXECUTABLE_TARGET}]",
        f"tied_operands = [{', '.join(ties)}]",
        f"workgroup_size = [{kernel.threads} : index, 1 : index, 1 : index]",
        f"workgroup_local_memory = {kernel.shared_bytes} : index",
    ])
    gx, gy, gz = (*grid, 1, 1)[:3]
    return [
        f'  %{result}:{len(results)} = "hal.dispatch.extern"({", ".join(n for n, _ in inputs)}) <{{{props}}}> ({{',
        "  ^bb0(%device: !hal.device):",
        f"    %gx = arith.constant {gx} : index",
        f"    %gy = arith.constant {gy} : index",
        f"    %gz = arith.constant {gz} : index",
        "    hal.return %gx, %gy, %gz : index, index, index",
        f"  }}, {{\n  }}) : ({', '.join(t for _, t in inputs)}) -> ({', '.join(results)})",
    ]


def dispatch_function(symbol: str, kb: KernelBinary, *, embed: str = "cubin", torch_types: bool = True) -> str:
    """MLIR text of ``func.func private @symbol(x, w[, b][, r]) -> y`` whose body is one
    ``hal.dispatch.extern`` of the kernel (extern_op). With ``torch_types`` the function takes
    and returns ``!torch.vtensor`` (the signature lower-cuvil-to-kernels declares) and converts
    with ``torch_c``; else builtin tensors. A split-K kernel also takes a zero counter per output
    tile (a constant; its tied result makes IREE fill a fresh buffer with zeros each call) and
    writes its fp32 partials to a workspace output."""
    s, t = kb.spec, _MLIR_DTYPE[kb.spec.dtype]
    shapes = {"x": [s.m, s.k], "w": [s.n, s.k], "b": [s.n], "r": [s.m, s.out_features], "y": [s.m, s.out_features]}
    dtypes = {"x": t, "w": t, "r": t, "y": t, "b": {"f32": "f32", **_MLIR_DTYPE}[s.bias_type]}
    builtin = {name: f"tensor<{'x'.join(map(str, d))}x{dtypes[name]}>" for name, d in shapes.items()}
    vtensor = {name: f"!torch.vtensor<[{','.join(map(str, d))}],{dtypes[name]}>" for name, d in shapes.items()}
    names = ["x", "w"] + (["b"] if s.has_bias else []) + (["r"] if s.has_residual else [])
    outer = vtensor if torch_types else builtin
    lines = []
    if torch_types:
        for n in names:
            lines.append(f"  %{n}_t = torch_c.to_builtin_tensor %{n} : {vtensor[n]} -> {builtin[n]}")
    ref = (lambda n: f"%{n}_t") if torch_types else (lambda n: f"%{n}")
    # without a bias (a residual), x fills the kernel's bias (residual) slot, never read: HAS_BIAS
    # (HAS_RES) is 0
    slots = ["x", "w", "b" if s.has_bias else "x", "r" if s.has_residual else "x"]
    inputs = [(ref(n), builtin[n]) for n in slots]
    outputs, tied = [builtin["y"]], {}
    if kb.config.kind == "splitk":
        counters = f"tensor<{output_tiles(s, kb.config)}xi32>"
        lines.append(f"  %counters = arith.constant dense<0> : {counters}")
        inputs.append(("%counters", counters))
        outputs += [f"tensor<{workspace_bytes(s, kb.config) // 4}xf32>", counters]
        tied = {2: 4}
    lines += extern_op("out", inputs, outputs, kb, (kb.grid,), tied, kb.cubin_path if embed == "cubin" else kb.ptx_path)
    if torch_types:
        lines.append(f"  %y = torch_c.from_builtin_tensor %out#0 : {builtin['y']} -> {vtensor['y']}")
        lines.append(f"  return %y : {vtensor['y']}")
    else:
        lines.append(f"  return %out#0 : {builtin['y']}")
    args = ", ".join(f"%{n}: {outer[n]}" for n in names)
    return f"func.func private @{symbol}({args}) -> {outer['y']} {{\n" + "\n".join(lines) + "\n}\n"


def _build_fitting(spec: LinearSpec, config: TileConfig) -> KernelBinary:
    """The table's config, with fewer pipeline stages where its shared memory does not fit this
    spec (a residual's epilogue tile takes more than the table's sweep, which had none, saw)."""
    while True:
        try:
            return build_linear(spec, config)
        except SharedMemoryError:
            if config.stages <= 2:
                raise
            config = replace(config, stages=config.stages - 1)


def materialize(symbol: str, spec: dict) -> tuple[str | None, dict]:
    """For targets/iree.py: the body of the kernel function ``symbol`` that
    lower-cuvil-to-kernels declared for ``spec`` (its cuvil.kernel_spec), as MLIR text of the
    whole function, or None to keep its body (IREE's codegen), and a record for the package
    metadata saying which kernel (or why none)."""
    record = {"function": symbol, **spec}
    reason = available()
    if reason:
        return None, {**record, "kernel": None, "why": reason}
    ls = LinearSpec(spec["m"], spec["n"], spec["k"], spec["dtype"], spec["activation"], spec["has_bias"], spec.get("bias_dtype", ""),
                    spec.get("has_residual", False))
    try:
        config = select_config(ls)
        if config is None:
            return None, {**record, "kernel": None, "why": "the tile table prefers IREE's codegen for this shape"}
        kb = _build_fitting(ls, config)
    except CompileError as e:
        return None, {**record, "kernel": None, "why": e.message if hasattr(e, "message") else str(e)}
    return dispatch_function(symbol, kb), {**record, **kb.describe()}
