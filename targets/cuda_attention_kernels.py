"""The Hopper (sm_90a) attention kernel for ``cuvil.attention``: a flash-attention forward pass
written in Triton, compiled ahead of time on the CPU machine like the linear kernels
(targets/cuda_kernels.py: same toolchain, cache, PTX version and IREE ABI), embedded in the
IREE module as one ``hal.dispatch.extern``.

What it computes, for q ``[B, Hq, Tq, D]``, k and v ``[B, Hkv, Tkv, D]`` (contiguous, Hkv
dividing Hq: grouped-query attention reads kv head ``h // (Hq / Hkv)`` for q head ``h``), o
``[B, Hq, Tq, D]``::

    o = softmax(q · kᵀ · scale [+ causal mask]) · v

with torch's causal convention (``scaled_dot_product_attention(is_causal=True)``, which is what
``cuvil.attention`` means): key ``j`` is visible to query ``i`` when ``j <= i``, aligned at the
top left also when Tq != Tkv. Online softmax in base 2 with fp32 statistics and an fp32
accumulator, ``tl.dot`` for both products (wgmma on sm_90a), q/k/v loaded through device-side
TMA descriptors (``kind = "tma"``: 3-D ``[B·H, T, D]`` boxes, so a block past the end of one
head reads zeros, not the next head) or pointer loads (``"pointers"``). Only the blocks a row
can see are visited (causal programs stop at the diagonal, and the heaviest diagonal blocks
are launched first); masking is applied only in the blocks that need it (the diagonal and the
ragged last key block). Grid: ``(ceil(Tq / BM), B·Hq)``.

Layouts: by default every operand is a contiguous ``[B, H, T, D]``. A spec may instead give
an operand's layout as element strides into the tensor the dispatch passes (``layout``:
``"SHAPE:offset:batch stride:head stride:token stride"``, D contiguous): q, k and v then come
straight from the ``[B, T, N]`` output of a fused QKV projection (offset = the slice start,
token stride N: no copy, no transpose) or from a ``[B, T, H, D]`` tensor, and o is written as
``[B, T, H, D]`` for the output projection (lower-cuvil-to-kernels finds these layouts). Strided
operands use pointer loads (the TMA descriptors assume the default layout).

**Prefix (cache) attention** (``prefix = True``): k and v are a KV cache ``[B, Hkv, S, D]``
(contiguous; ``tkv`` is S, the cache length) and a fourth operand ``pos`` (one int64 on the
device) says where the queries are: query ``t`` sits at position ``pos + t`` and sees keys
``0 .. pos + t`` (a decode step, or a prompt chunk after the first, against the filled prefix of
the cache; nothing past ``pos + Tq - 1`` is read, so the rest of the cache may hold anything).
The positions are read on the device, so one kernel serves every step. A program takes the
``GROUP x Tq`` query rows of one kv head (grouped-query attention reads each cached key once
for all the q heads sharing it) against one slice of the keys; with ``SPLITS > 1`` slices the
programs write fp32 partial results (unnormalised accumulator, running max and sum per row)
and a second kernel combines them (flash-decoding: a single query against a long cache would
otherwise run on B x Hkv programs). Grid ``(ceil(GROUP·Tq / BM), B·Hkv, SPLITS)``.

Every size is a constexpr (one kernel per shape, as for linear). The entry takes q, k, v, o
and Triton's two hidden pointers (global scratch, where the TMA descriptors are written, and
profile scratch), all bindings of the extern dispatch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from cuvil_mlir.core.diagnostics import CompileError

from . import cuda_kernels as ck

HEAD_DIMS = (64, 128)
CONFIGS_PATH = Path(__file__).with_name("cuda_attention_configs.json")
CONFIGS_ENV = "CUVIL_ATTENTION_CONFIGS"  # another config table (a JSON file like CONFIGS_PATH), for tuning


@dataclass(frozen=True)
class AttentionSpec:
    """One cuvil.attention as the kernel sees it."""

    batch: int
    heads: int  # q heads
    kv_heads: int  # k/v heads (divides heads)
    tq: int
    tkv: int
    d: int
    dtype: str  # f16 | bf16
    causal: bool
    scale: float
    # "" (a contiguous [B, H, T, D] operand) or "SHAPE:offset:sb:sh:st" (see the module doc)
    q_layout: str = ""
    k_layout: str = ""
    v_layout: str = ""
    o_layout: str = ""
    prefix: bool = False  # k/v are a [B, Hkv, tkv, D] cache; queries at pos .. pos+tq-1 (module doc)

    def layout(self, which: str) -> tuple[list[int], int, int, int, int]:
        """(tensor shape, offset, batch stride, head stride, token stride) of operand ``which``
        (q, k, v or o), in elements."""
        text = getattr(self, f"{which}_layout")
        heads = self.kv_heads if which in "kv" else self.heads
        t = self.tkv if which in "kv" else self.tq
        if not text:
            return [self.batch, heads, t, self.d], 0, heads * t * self.d, t * self.d, self.d
        shape, *strides = text.split(":")
        off, sb, sh, st = (int(x) for x in strides)
        return [int(x) for x in shape.split("x")], off, sb, sh, st

    @property
    def strided(self) -> bool:
        return any((self.q_layout, self.k_layout, self.v_layout, self.o_layout))

    def check(self) -> None:
        """Raise CompileError when the kernel does not cover this attention."""
        if self.dtype not in ck.DTYPES:
            raise CompileError(f"attention kernel: dtype {self.dtype} is not one of {', '.join(ck.DTYPES)}")
        if self.d not in HEAD_DIMS:
            raise CompileError(f"attention kernel: head dim {self.d} is not one of {HEAD_DIMS}")
        if self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise CompileError(f"attention kernel: {self.kv_heads} kv heads do not divide {self.heads} q heads")
        if min(self.batch, self.tq, self.tkv) <= 0:
            raise CompileError(f"attention kernel: empty tensor ({self})")
        if self.prefix and (self.k_layout or self.v_layout or self.causal):
            raise CompileError("prefix attention kernel: k and v must be the contiguous cache, and the causal offset "
                               "comes from pos (causal=False)")
        for which in "qkvo":
            shape, off, sb, sh, st = self.layout(which)
            heads = self.kv_heads if which in "kv" else self.heads
            t = self.tkv if which in "kv" else self.tq
            last = off + (self.batch - 1) * sb + (heads - 1) * sh + (t - 1) * st + self.d
            if min(off, sb, sh, st) < 0 or last > math.prod(shape) or (st % 8 or sh % 8 or sb % 8 or off % 8):
                raise CompileError(f"attention kernel: {which} layout {self.layout(which)} does not fit its tensor "
                                   "or is not 16-byte aligned")


@dataclass(frozen=True)
class AttentionConfig:
    bm: int  # query rows per program
    bn: int  # keys per step
    warps: int
    stages: int
    kind: str = "tma"  # "tma" (device-side tensor descriptors) | "pointers" (cp.async loads)

    @property
    def key(self) -> str:
        return f"{self.bm}x{self.bn}w{self.warps}s{self.stages}{'' if self.kind == 'tma' else 'ptr'}"


@dataclass(frozen=True)
class KernelPart:
    """One compiled Triton kernel."""

    name: str
    threads: int
    shared_bytes: int
    scratch_bytes: int  # global scratch per program
    cubin_path: str


@dataclass(frozen=True)
class AttentionBinary:
    """A built attention kernel, everything the extern dispatch needs."""

    name: str
    threads: int
    shared_bytes: int
    grid: tuple[int, ...]
    scratch_bytes: int  # global scratch per program
    config: AttentionConfig
    spec: AttentionSpec
    cubin_path: str
    combine: KernelPart | None = None  # prefix attention over several splits: the kernel that combines them

    def describe(self) -> dict:
        out = {"kernel": self.name, "config": self.config.key, "grid": list(self.grid), "threads": self.threads,
               "shared_bytes": self.shared_bytes, "triton": ck.TRITON_VERSION}
        if self.spec.prefix:
            out["splits"] = self.grid[2]
        return out


# ----------------------------------------------------------------------------- selection


def load_configs(path: Path | None = None) -> list[dict]:
    """The config table: rules in order, the first whose bounds hold is used (see the JSON)."""
    path = Path(path or os.environ.get(CONFIGS_ENV) or CONFIGS_PATH)
    try:
        return json.loads(path.read_text())["rules"]
    except (OSError, ValueError, KeyError) as e:
        raise CompileError(f"cannot read the attention kernel table {path}: {e}") from e


def select_config(spec: AttentionSpec, rules: list[dict] | None = None) -> AttentionConfig | None:
    """The config for an attention from the table (the first rule whose bounds hold: ``prefix``
    (absent: false), ``d``, ``causal``, ``min_tq``/``max_tq``), or None where the table says IREE's codegen
    (``"config": "iree"``)."""
    for rule in rules if rules is not None else load_configs():
        when = rule.get("when", {})
        if (when.get("prefix", False) == spec.prefix and when.get("d", spec.d) == spec.d and when.get("causal", spec.causal) == spec.causal
                and when.get("min_tq", 0) <= spec.tq <= when.get("max_tq", 1 << 62)):
            return None if rule["config"] == "iree" else AttentionConfig(**rule["config"])
    raise CompileError(f"no rule of {CONFIGS_PATH.name} matches {spec} (its last rule should match everything)")


# ----------------------------------------------------------------------------- the kernel


def kernel():
    """The Triton function (defined on first use, so importing this module needs no triton).
    benchmarks/gpu/attention_kernels.py JITs the same function on the H200 to tune it."""
    global _ATTENTION
    if _ATTENTION is not None:
        return _ATTENTION
    import triton
    import triton.language as tl

    @triton.jit
    def _load(desc, base, row, start, rows: tl.constexpr, T: tl.constexpr, D: tl.constexpr, ST: tl.constexpr,
              TMA: tl.constexpr, RAGGED: tl.constexpr):
        # rows [start, start + rows) of one head as [rows, D] (TMA: head ``row`` of the [B·H, T, D]
        # descriptor; pointers: from ``base``, token stride ST); past T: zeros
        if TMA:
            return desc.load([row, start, 0]).reshape(rows, D)
        offs = start + tl.arange(0, rows)
        p = base + offs[:, None] * ST + tl.arange(0, D)[None, :]
        if RAGGED:
            return tl.load(p, mask=offs[:, None] < T, other=0.0)
        return tl.load(p)

    @triton.jit
    def _step(acc, l_i, m_i, q, kd, vd, k_base, v_base, kv_row, start, rows, qk_scale, TKV: tl.constexpr,
              D: tl.constexpr, K_ST: tl.constexpr, V_ST: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr,
              MASK: tl.constexpr, TMA: tl.constexpr):
        # one block of BN keys: scores, online softmax (base 2), acc += p · v
        k = _load(kd, k_base, kv_row, start, BN, TKV, D, K_ST, TMA, MASK)
        qk = tl.dot(q, k.T)
        if MASK:
            cols = start + tl.arange(0, BN)
            keep = cols[None, :] < TKV
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load(vd, v_base, kv_row, start, BN, TKV, D, V_ST, TMA, MASK)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        return acc, l_i, m_new

    @triton.jit
    def cuvil_attention(q_ptr, k_ptr, v_ptr, o_ptr, BH: tl.constexpr, HQ: tl.constexpr, GROUP: tl.constexpr,
                        TQ: tl.constexpr, TKV: tl.constexpr, D: tl.constexpr, SCALE: tl.constexpr,
                        CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, TMA: tl.constexpr,
                        Q_OFF: tl.constexpr, Q_SB: tl.constexpr, Q_SH: tl.constexpr, Q_ST: tl.constexpr,
                        K_OFF: tl.constexpr, K_SB: tl.constexpr, K_SH: tl.constexpr, K_ST: tl.constexpr,
                        V_OFF: tl.constexpr, V_SB: tl.constexpr, V_SH: tl.constexpr, V_ST: tl.constexpr,
                        O_SB: tl.constexpr, O_SH: tl.constexpr, O_ST: tl.constexpr):
        # BH = B * HQ; GROUP = HQ / HKV (q heads per kv head); X_OFF/SB/SH/ST: element offset and
        # batch, head and token strides of q, k, v, o (D contiguous)
        pid_m = tl.program_id(0)
        if CAUSAL:  # the diagonal's long rows first: they take the most steps
            pid_m = tl.num_programs(0) - 1 - pid_m
        bh = tl.program_id(1)
        b = bh // HQ
        h = bh % HQ
        kv_h = h // GROUP
        kv_row = b * (HQ // GROUP) + kv_h
        k_base = k_ptr + K_OFF + b * K_SB + kv_h * K_SH
        v_base = v_ptr + V_OFF + b * V_SB + kv_h * V_SH
        m0 = pid_m * BM
        if TMA:
            qd = tl.make_tensor_descriptor(q_ptr, shape=[BH, TQ, D], strides=[TQ * D, D, 1], block_shape=[1, BM, D])
            kd = tl.make_tensor_descriptor(k_ptr, shape=[BH // GROUP, TKV, D], strides=[TKV * D, D, 1], block_shape=[1, BN, D])
            vd = tl.make_tensor_descriptor(v_ptr, shape=[BH // GROUP, TKV, D], strides=[TKV * D, D, 1], block_shape=[1, BN, D])
        else:
            qd = 0
            kd = 0
            vd = 0
        rows = m0 + tl.arange(0, BM)
        q = _load(qd, q_ptr + Q_OFF + b * Q_SB + h * Q_SH, bh, m0, BM, TQ, D, Q_ST, TMA, TQ % BM != 0)
        qk_scale = SCALE * 1.4426950408889634  # log2(e): exp(x) = exp2(x log2 e)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        # keys every row of the block sees (no mask), then the rest (the diagonal, the ragged end)
        if CAUSAL:
            full = (tl.minimum(m0 + 1, TKV) // BN) * BN
            end = tl.minimum(m0 + BM, TKV)
        else:
            full = (TKV // BN) * BN
            end = TKV
        for start in tl.range(0, full, BN):
            acc, l_i, m_i = _step(acc, l_i, m_i, q, kd, vd, k_base, v_base, kv_row, start, rows, qk_scale, TKV, D,
                                  K_ST, V_ST, BN, CAUSAL, False, TMA)
        for start in tl.range(full, end, BN):
            acc, l_i, m_i = _step(acc, l_i, m_i, q, kd, vd, k_base, v_base, kv_row, start, rows, qk_scale, TKV, D,
                                  K_ST, V_ST, BN, CAUSAL, True, TMA)
        out = (acc / l_i[:, None]).to(o_ptr.dtype.element_ty)
        if TMA:
            od = tl.make_tensor_descriptor(o_ptr, shape=[BH, TQ, D], strides=[TQ * D, D, 1], block_shape=[1, BM, D])
            od.store([bh, m0, 0], out.reshape(1, BM, D))
        else:
            p = o_ptr + b * O_SB + h * O_SH + rows[:, None] * O_ST + tl.arange(0, D)[None, :]
            tl.store(p, out, mask=rows[:, None] < TQ)

    _ATTENTION = cuvil_attention
    return _ATTENTION


_ATTENTION = None


def prefix_rows(spec: AttentionSpec) -> int:
    """Query rows per kv head: the q heads sharing it times the queries."""
    return spec.heads // spec.kv_heads * spec.tq


def prefix_block_rows(spec: AttentionSpec, config: AttentionConfig) -> int:
    """BM for a prefix attention: the table's, cut to the rows there are (at least 16, tl.dot's
    smallest M): a decode step of Llama's 4 q heads per kv head takes 16-row blocks, not 64."""
    return max(16, min(config.bm, 1 << (prefix_rows(spec) - 1).bit_length()))


def prefix_splits(spec: AttentionSpec, config: AttentionConfig) -> tuple[int, int]:
    """(splits, keys per split) of a prefix attention: enough programs to fill the GPU twice
    over (ck.SMS), each split at least 4 key blocks, the split length a multiple of BN."""
    blocks = math.ceil(spec.tkv / config.bn)
    programs = math.ceil(prefix_rows(spec) / prefix_block_rows(spec, config)) * spec.batch * spec.kv_heads
    splits = max(1, min(math.ceil(2 * ck.SMS / programs), blocks // 4))
    chunk = math.ceil(blocks / splits) * config.bn
    return math.ceil(spec.tkv / chunk), chunk


def prefix_kernels():
    """The two Triton functions of prefix attention: (attention, combine). Defined on first use."""
    global _PREFIX
    if _PREFIX is not None:
        return _PREFIX
    import triton
    import triton.language as tl

    @triton.jit
    def cuvil_prefix_attention(q_ptr, k_ptr, v_ptr, pos_ptr, out_ptr, HKV: tl.constexpr, GROUP: tl.constexpr,
                               TQ: tl.constexpr, S: tl.constexpr, D: tl.constexpr, SCALE: tl.constexpr,
                               BM: tl.constexpr, BN: tl.constexpr, SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                               Q_OFF: tl.constexpr, Q_SB: tl.constexpr, Q_SH: tl.constexpr, Q_ST: tl.constexpr,
                               O_SB: tl.constexpr, O_SH: tl.constexpr, O_ST: tl.constexpr):
        # rows of the block: q head (kv_h·GROUP + row // TQ) at query t = row % TQ, position pos + t
        pid_m = tl.program_id(0)
        bk = tl.program_id(1)
        split = tl.program_id(2)
        b = bk // HKV
        kv_h = bk % HKV
        rows = pid_m * BM + tl.arange(0, BM)
        valid = rows < GROUP * TQ
        head = kv_h * GROUP + rows // TQ
        t = rows % TQ
        dims = tl.arange(0, D)
        pos = tl.load(pos_ptr).to(tl.int32)
        q = tl.load(q_ptr + Q_OFF + b * Q_SB + head[:, None] * Q_SH + t[:, None] * Q_ST + dims[None, :],
                    mask=valid[:, None], other=0.0)
        limit = pos + t  # the last key each row sees
        end = tl.minimum(pos + TQ, S)  # keys past every row's limit are never read
        lo = split * CHUNK
        hi = tl.minimum(lo + CHUNK, end)
        kv = (b * HKV + kv_h) * S * D
        qk_scale = SCALE * 1.4426950408889634  # log2(e): exp(x) = exp2(x log2 e)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        for start in tl.range(lo, hi, BN):
            cols = start + tl.arange(0, BN)
            inside = cols < end
            k = tl.load(k_ptr + kv + cols[:, None] * D + dims[None, :], mask=inside[:, None], other=0.0)
            qk = tl.dot(q, k.T)
            keep = inside[None, :] & (cols[None, :] <= limit[:, None])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that sees no key of this split yet
            p = tl.math.exp2(qk - m_safe[:, None])
            alpha = tl.math.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + kv + cols[:, None] * D + dims[None, :], mask=inside[:, None], other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        if SPLITS == 1:
            out = (acc / l_i[:, None]).to(out_ptr.dtype.element_ty)
            tl.store(out_ptr + b * O_SB + head[:, None] * O_SH + t[:, None] * O_ST + dims[None, :], out, mask=valid[:, None])
        else:  # partials: [programs of (bk, pid_m)] x [SPLITS] x (acc [BM, D], m [BM], l [BM]), fp32
            base = out_ptr + ((bk * tl.num_programs(0) + pid_m) * SPLITS + split) * BM * (D + 2)
            tl.store(base + tl.arange(0, BM)[:, None] * D + dims[None, :], acc)
            tl.store(base + BM * D + tl.arange(0, BM), m_i)
            tl.store(base + BM * D + BM + tl.arange(0, BM), l_i)

    @triton.jit
    def cuvil_prefix_combine(part_ptr, o_ptr, HKV: tl.constexpr, GROUP: tl.constexpr, TQ: tl.constexpr,
                             D: tl.constexpr, BM: tl.constexpr, SPLITS: tl.constexpr, O_SB: tl.constexpr,
                             O_SH: tl.constexpr, O_ST: tl.constexpr):
        # o = sum_s 2^(m_s - m) acc_s / sum_s 2^(m_s - m) l_s, m the max of the splits' m_s
        pid_m = tl.program_id(0)
        bk = tl.program_id(1)
        b = bk // HKV
        kv_h = bk % HKV
        r = tl.arange(0, BM)
        rows = pid_m * BM + r
        dims = tl.arange(0, D)
        base = part_ptr + (bk * tl.num_programs(0) + pid_m) * SPLITS * BM * (D + 2)
        m = tl.full([BM], float("-inf"), tl.float32)
        for s in tl.static_range(SPLITS):
            m = tl.maximum(m, tl.load(base + s * BM * (D + 2) + BM * D + r))
        m = tl.where(m == float("-inf"), 0.0, m)
        acc = tl.zeros([BM, D], tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        for s in tl.static_range(SPLITS):
            part = base + s * BM * (D + 2)
            w = tl.math.exp2(tl.load(part + BM * D + r) - m)
            l_i += w * tl.load(part + BM * D + BM + r)
            acc += w[:, None] * tl.load(part + r[:, None] * D + dims[None, :])
        out = (acc / l_i[:, None]).to(o_ptr.dtype.element_ty)
        head = kv_h * GROUP + rows // TQ
        t = rows % TQ
        tl.store(o_ptr + b * O_SB + head[:, None] * O_SH + t[:, None] * O_ST + dims[None, :], out,
                 mask=(rows < GROUP * TQ)[:, None])

    _PREFIX = (cuvil_prefix_attention, cuvil_prefix_combine)
    return _PREFIX


_PREFIX = None


def prefix_constexprs(spec: AttentionSpec, config: AttentionConfig) -> tuple[dict, dict]:
    """The constexpr arguments of (attention, combine) for a prefix attention."""
    _, q_off, q_sb, q_sh, q_st = spec.layout("q")
    _, _, o_sb, o_sh, o_st = spec.layout("o")
    splits, chunk = prefix_splits(spec, config)
    common = dict(HKV=spec.kv_heads, GROUP=spec.heads // spec.kv_heads, TQ=spec.tq, D=spec.d,
                  BM=prefix_block_rows(spec, config), SPLITS=splits)
    out = dict(O_SB=o_sb, O_SH=o_sh, O_ST=o_st)
    attention = dict(common, S=spec.tkv, SCALE=float(spec.scale), BN=config.bn, CHUNK=chunk,
                     Q_OFF=q_off, Q_SB=q_sb, Q_SH=q_sh, Q_ST=q_st, **out)
    return attention, dict(common, **out)


def prefix_grid(spec: AttentionSpec, config: AttentionConfig) -> tuple[int, int, int]:
    return (math.ceil(prefix_rows(spec) / prefix_block_rows(spec, config)), spec.batch * spec.kv_heads,
            prefix_splits(spec, config)[0])


def prefix_partial_bytes(spec: AttentionSpec, config: AttentionConfig) -> int:
    """The fp32 partials the attention kernel writes for the combine (0 with one split)."""
    gx, gy, splits = prefix_grid(spec, config)
    return 0 if splits == 1 else gx * gy * splits * prefix_block_rows(spec, config) * (spec.d + 2) * 4


def constexprs(spec: AttentionSpec, config: AttentionConfig) -> dict:
    """The kernel's constexpr arguments for one attention and config."""
    strides = {}
    for which in "qkvo":
        _, off, sb, sh, st = spec.layout(which)
        w = which.upper()
        strides.update({f"{w}_SB": sb, f"{w}_SH": sh, f"{w}_ST": st, **({f"{w}_OFF": off} if which != "o" else {})})
    return dict(BH=spec.batch * spec.heads, HQ=spec.heads, GROUP=spec.heads // spec.kv_heads, TQ=spec.tq, TKV=spec.tkv,
                D=spec.d, SCALE=float(spec.scale), CAUSAL=int(spec.causal), BM=config.bm, BN=config.bn,
                TMA=int(config.kind == "tma"), **strides)


def grid_of(spec: AttentionSpec, config: AttentionConfig) -> tuple[int, int]:
    return math.ceil(spec.tq / config.bm), spec.batch * spec.heads


def kernel_name(spec: AttentionSpec, config: AttentionConfig) -> str:
    digest = hashlib.sha256(repr((asdict(spec), asdict(config))).encode()).hexdigest()[:8]
    shape = f"{spec.batch}x{spec.heads}x{spec.kv_heads}x{spec.tq}x{spec.tkv}x{spec.d}"
    return (f"cuvil_attention_{shape}_{spec.dtype}{'_causal' if spec.causal else ''}{'_prefix' if spec.prefix else ''}"
            f"{'_strided' if spec.strided else ''}"
            f"_{config.key}_{digest}")


def build_attention(spec: AttentionSpec, config: AttentionConfig | None = None) -> AttentionBinary:
    """Compile (or take from the kernel cache) the attention kernel for ``spec`` (a prefix
    attention: its two kernels, the combine only with more than one split)."""
    reason = ck.available()
    if reason:
        raise CompileError(f"cannot build the Hopper attention kernel: {reason}")
    spec.check()
    config = config or select_config(spec)
    if config is None:
        raise CompileError(f"the attention table prefers IREE's codegen for {spec}")
    if (spec.strided or spec.prefix) and config.kind == "tma":  # the descriptors assume contiguous [B, H, T, D]
        config = AttentionConfig(config.bm, config.bn, config.warps, config.stages, "pointers")
    name = kernel_name(spec, config)
    ty = "*" + ck.DTYPES[spec.dtype]
    if not spec.prefix:
        sizes = constexprs(spec, config)
        part = _build_part(name, kernel(), {"q_ptr": ty, "k_ptr": ty, "v_ptr": ty, "o_ptr": ty}, sizes, config.warps, config.stages)
        return AttentionBinary(part.name, part.threads, part.shared_bytes, grid_of(spec, config), part.scratch_bytes,
                               config, spec, part.cubin_path)
    attention_fn, combine_fn = prefix_kernels()
    sizes, combine_sizes = prefix_constexprs(spec, config)
    partial = "*fp32" if sizes["SPLITS"] > 1 else ty
    part = _build_part(name, attention_fn, {"q_ptr": ty, "k_ptr": ty, "v_ptr": ty, "pos_ptr": "*i64", "out_ptr": partial},
                       sizes, config.warps, config.stages)
    combine = None
    if sizes["SPLITS"] > 1:
        combine = _build_part(name.replace("cuvil_attention_", "cuvil_attention_combine_", 1), combine_fn,
                              {"part_ptr": "*fp32", "o_ptr": ty}, combine_sizes, config.warps, config.stages)
    return AttentionBinary(part.name, part.threads, part.shared_bytes, prefix_grid(spec, config), part.scratch_bytes,
                           config, spec, part.cubin_path, combine)


def _build_part(name: str, fn, pointers: dict, sizes: dict, warps: int, stages: int) -> KernelPart:
    """One Triton kernel compiled for sm_90a (or taken from the kernel cache): its pointer
    arguments (name: Triton type) then its constexprs."""
    key = hashlib.sha256(json.dumps([_source_hash(), name, list(pointers.items()), sizes, warps, stages]).encode()).hexdigest()[:24]
    cache = ck._cache_dir() / key
    if (cache / "meta.json").exists():
        meta = json.loads((cache / "meta.json").read_text())
        return KernelPart(name, meta["threads"], meta["shared"], meta["scratch"], str(cache / "kernel.cubin"))
    ptx, threads, shared, scratch = _compile(fn, pointers, sizes, warps, stages, name)
    if shared > ck.MAX_SHARED_BYTES:
        raise CompileError(f"{name} needs {shared} B of shared memory; sm_90 allows {ck.MAX_SHARED_BYTES}")
    cubin = ck._ptxas(ptx)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "kernel.ptx").write_text(ptx)
    (cache / "kernel.cubin").write_bytes(cubin)
    (cache / "meta.json").write_text(json.dumps({"threads": threads, "shared": shared, "scratch": scratch}))  # last: marks it complete
    return KernelPart(name, threads, shared, scratch, str(cache / "kernel.cubin"))


def _compile(fn, pointers: dict, sizes: dict, warps: int, stages: int, name: str) -> tuple[str, int, int, int]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    signature = {**pointers, **{k: "constexpr" for k in sizes}}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(pointers))}  # IREE's bindings are 16-byte aligned
    try:
        k = triton.compile(ASTSource(fn, signature=signature, constexprs=sizes, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": warps, "num_stages": stages, "ptx_version": ck.PTX_VERSION})
    except Exception as e:  # Triton's compile errors are of many types
        raise CompileError(f"Triton failed to compile {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    ptx = ck.rename_entry(k.asm["ptx"], k.metadata.name, name)
    return ptx, k.metadata.num_warps * 32, k.metadata.shared, k.metadata.global_scratch_size


def _source_hash() -> str:
    import inspect

    parts = [inspect.getsource(kernel), inspect.getsource(prefix_kernels), inspect.getsource(cache_write_kernel), inspect.getsource(_compile),
             inspect.getsource(ck._ptxas), str(ck.PTX_VERSION), ck.TRITON_VERSION]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- IREE dispatch


def dispatch_function(symbol: str, kb: AttentionBinary, *, torch_types: bool = True) -> str:
    """MLIR text of ``func.func private @symbol(q, k, v[, pos]) -> o`` whose body is the kernel's
    ``hal.dispatch.extern``: bindings q, k, v (and a prefix attention's pos) read-only, o, the
    global scratch and the profile scratch; a prefix attention over several splits writes its
    fp32 partials instead of o, and a second extern (the combine) reads them and writes o. With
    ``torch_types`` it takes and returns ``!torch.vtensor`` (the signature
    lower-cuvil-to-kernels declares), else builtin tensors."""
    s = kb.spec
    t = s.dtype
    names = "qkvp" if s.prefix else "qkv"
    shapes = {n: s.layout(n)[0] for n in "qkvo"}
    builtin = {n: f"tensor<{'x'.join(map(str, d))}x{t}>" for n, d in shapes.items()}
    vtensor = {n: f"!torch.vtensor<[{','.join(map(str, d))}],{t}>" for n, d in shapes.items()}
    builtin["p"], vtensor["p"] = "tensor<1xi64>", "!torch.vtensor<[1],si64>"
    outer = vtensor if torch_types else builtin
    lines = [f"  %{n}_t = torch_c.to_builtin_tensor %{n} : {vtensor[n]} -> {builtin[n]}" for n in names if torch_types]
    inputs = [(f"%{n}_t" if torch_types else f"%{n}", builtin[n]) for n in names]
    if kb.combine is None:
        lines += ck.extern_op("r", inputs, [builtin["o"]], kb, kb.grid)
    else:
        partial = f"tensor<{prefix_partial_bytes(s, kb.config)}xi8>"
        lines += ck.extern_op("part", inputs, [partial], kb, kb.grid)
        lines += ck.extern_op("r", [("%part#0", partial)], [builtin["o"]], kb.combine, kb.grid[:2])
    if torch_types:
        lines.append(f"  %o = torch_c.from_builtin_tensor %r#0 : {builtin['o']} -> {vtensor['o']}")
        lines.append(f"  return %o : {vtensor['o']}")
    else:
        lines.append(f"  return %r#0 : {builtin['o']}")
    args = ", ".join(f"%{n}: {outer[n]}" for n in names)
    return f"func.func private @{symbol}({args}) -> {outer['o']} {{\n" + "\n".join(lines) + "\n}\n"


def spec_from_record(spec: dict) -> AttentionSpec:
    """The AttentionSpec of a ``cuvil.kernel_spec`` that lower-cuvil-to-kernels wrote (the scale
    travels as a string: the hand-off's attribute reader knows integers, booleans and strings)."""
    return AttentionSpec(spec["batch"], spec["heads"], spec["kv_heads"], spec["tq"], spec["tkv"], spec["d"],
                         spec["dtype"], spec["causal"], float(spec["scale"]),
                         *(spec.get(f"{n}_layout", "") for n in "qkvo"), spec.get("prefix", False))


def materialize(symbol: str, spec: dict) -> tuple[str | None, dict]:
    """For targets/iree.py (through targets/cuda.py materialize_kernel): the kernel function's new body for
    an attention, or None to keep IREE's codegen, and the metadata record saying which."""
    record = {"function": symbol, **spec}
    reason = ck.available()
    if reason:
        return None, {**record, "kernel": None, "why": reason}
    try:
        aspec = spec_from_record(spec)
        config = select_config(aspec)
        if config is None:
            return None, {**record, "kernel": None, "why": "the attention table prefers IREE's codegen for this shape"}
        kb = build_attention(aspec, config)
    except CompileError as e:
        return None, {**record, "kernel": None, "why": e.message if hasattr(e, "message") else str(e)}
    return dispatch_function(symbol, kb), {**record, **kb.describe()}


# ----------------------------------------------------------------------------- KV-cache write
#
# A decode step (or a prompt chunk) writes its keys and values into the cache at a position the
# device holds: ``slice_scatter(cache, new, dim, int(P) + n, int(P) + n + T)``. IREE's own form
# of that write reads P back to the host before the call can go on (the copy's offset is a push
# constant) and copies one element per thread (two ``slow_memcpy`` dispatches a layer, half a
# batch-8 Llama decode step on an H100). This kernel reads P on the device and writes the slots
# in place: the extern dispatch's result is tied to the cache operand.


@dataclass(frozen=True)
class CacheWriteSpec:
    """``dst`` viewed as ``[outer, slots, inner]`` (the dims before, at and after the written
    one), ``src`` as ``[outer, rows, inner]``: src goes to slots ``P + offset ..`` of each outer row.
    ``src_layout`` (a ``[B, H, S, D]`` cache written along S, ``heads`` = H): src read with the
    strides of an attention operand's layout (``"SHAPE:offset:batch stride:head stride:token
    stride"``, D contiguous): k or v straight from a fused QKV projection's output, no copy."""

    outer: int
    slots: int
    rows: int
    inner: int
    dtype: str  # f16 | bf16 | f32
    offset: int = 0
    heads: int = 1
    src_layout: str = ""

    def src_strides(self) -> tuple[int, int, int, int]:
        """(offset, batch stride, head stride, row stride) of src, in elements."""
        if not self.src_layout:
            return 0, self.heads * self.rows * self.inner, self.rows * self.inner, self.inner
        off, sb, sh, st = (int(x) for x in self.src_layout.split(":")[1:])
        return off, sb, sh, st

    def check(self) -> None:
        if self.dtype not in CACHE_WRITE_DTYPES:
            raise CompileError(f"cache write kernel: dtype {self.dtype} is not one of {', '.join(CACHE_WRITE_DTYPES)}")
        if min(self.outer, self.slots, self.rows, self.inner, self.heads) <= 0 or self.rows > self.slots or self.outer % self.heads:
            raise CompileError(f"cache write kernel: {self.rows} rows do not fit {self.slots} slots ({self})")
        if self.outer > 65535:
            raise CompileError(f"cache write kernel: {self.outer} outer rows exceed the grid's y limit (65535)")
        if self.src_layout:
            off, sb, sh, st = self.src_strides()
            size = math.prod(int(x) for x in self.src_layout.split(":")[0].split("x"))
            last = off + (self.outer // self.heads - 1) * sb + (self.heads - 1) * sh + (self.rows - 1) * st + self.inner
            if min(off, sb, sh, st) < 0 or last > size:
                raise CompileError(f"cache write kernel: src layout {self.src_layout} does not fit its tensor")


CACHE_WRITE_DTYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}
_CACHE_WRITE_BLOCK = 1024  # elements per program at most


def cache_write_kernel():
    """The Triton function of the cache write. Defined on first use."""
    global _CACHE_WRITE
    if _CACHE_WRITE is not None:
        return _CACHE_WRITE
    import triton
    import triton.language as tl

    @triton.jit
    def cuvil_cache_write(src_ptr, pos_ptr, dst_ptr, SLOTS: tl.constexpr, ROWS: tl.constexpr, INNER: tl.constexpr,
                          OFFSET: tl.constexpr, BLOCK: tl.constexpr, HEADS: tl.constexpr, SRC_OFF: tl.constexpr,
                          SRC_SB: tl.constexpr, SRC_SH: tl.constexpr, SRC_ST: tl.constexpr):
        # rows pos .. pos+ROWS-1 of outer row o = (b, h) are one contiguous run of ROWS·INNER elements
        o = tl.program_id(1).to(tl.int64)
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        start = tl.load(pos_ptr) + OFFSET
        inside = i < ROWS * INNER
        # rows that would not all fit the cache write nothing (integer arithmetic: Triton's
        # interpreter takes no scalar boolean in a mask)
        outside = tl.minimum((start < 0).to(tl.int32) + (start + ROWS > SLOTS).to(tl.int32), 1)
        src = SRC_OFF + (o // HEADS) * SRC_SB + (o % HEADS) * SRC_SH + (i // INNER) * SRC_ST + i % INNER
        x = tl.load(src_ptr + src, mask=inside, other=0)
        tl.store(dst_ptr + o * (SLOTS * INNER) + start * INNER + i, x, mask=i < ROWS * INNER * (1 - outside))

    _CACHE_WRITE = cuvil_cache_write
    return _CACHE_WRITE


_CACHE_WRITE = None


def cache_write_grid(spec: CacheWriteSpec) -> tuple[int, int]:
    return math.ceil(spec.rows * spec.inner / _cache_write_block(spec)), spec.outer


def _cache_write_block(spec: CacheWriteSpec) -> int:
    return min(_CACHE_WRITE_BLOCK, max(128, 1 << (spec.rows * spec.inner - 1).bit_length()))


def cache_write_constexprs(spec: CacheWriteSpec) -> dict:
    off, sb, sh, st = spec.src_strides()
    return dict(SLOTS=spec.slots, ROWS=spec.rows, INNER=spec.inner, OFFSET=spec.offset, BLOCK=_cache_write_block(spec),
                HEADS=spec.heads, SRC_OFF=off, SRC_SB=sb, SRC_SH=sh, SRC_ST=st)


def build_cache_write(spec: CacheWriteSpec) -> KernelPart:
    reason = ck.available()
    if reason:
        raise CompileError(f"cannot build the cache write kernel: {reason}")
    spec.check()
    ty = "*" + CACHE_WRITE_DTYPES[spec.dtype]
    digest = hashlib.sha256(repr(asdict(spec)).encode()).hexdigest()[:8]
    name = f"cuvil_cache_write_{spec.outer}x{spec.slots}x{spec.rows}x{spec.inner}_{spec.dtype}{'_strided' if spec.src_layout else ''}_{digest}"
    sizes = cache_write_constexprs(spec)
    return _build_part(name, cache_write_kernel(), {"src_ptr": ty, "pos_ptr": "*i64", "dst_ptr": ty}, sizes, 4, 1)


def cache_write_function(symbol: str, spec: CacheWriteSpec, part: KernelPart, dst_shape: list[int], src_shape: list[int]) -> str:
    """MLIR text of ``func.func private @symbol(dst, src, pos) -> dst'`` (the signature
    lower-cuvil-to-kernels declares, torch types): one extern dispatch whose result is ``dst``
    written in place."""
    t = spec.dtype
    vt = {"dst": f"!torch.vtensor<[{','.join(map(str, dst_shape))}],{t}>", "src": f"!torch.vtensor<[{','.join(map(str, src_shape))}],{t}>",
          "pos": "!torch.vtensor<[1],si64>"}
    bt = {"dst": f"tensor<{'x'.join(map(str, dst_shape))}x{t}>", "src": f"tensor<{'x'.join(map(str, src_shape))}x{t}>",
          "pos": "tensor<1xi64>"}
    lines = [f"  %{n}_t = torch_c.to_builtin_tensor %{n} : {vt[n]} -> {bt[n]}" for n in ("dst", "src", "pos")]
    lines += ck.extern_op("r", [("%src_t", bt["src"]), ("%pos_t", bt["pos"]), ("%dst_t", bt["dst"])], [bt["dst"]], part,
                     cache_write_grid(spec), tied={0: 2})
    lines += [f"  %out = torch_c.from_builtin_tensor %r#0 : {bt['dst']} -> {vt['dst']}", f"  return %out : {vt['dst']}"]
    return (f"func.func private @{symbol}(%dst: {vt['dst']}, %src: {vt['src']}, %pos: {vt['pos']}) -> {vt['dst']} {{\n"
            + "\n".join(lines) + "\n}\n")


def materialize_cache_write(symbol: str, spec: dict) -> tuple[str | None, dict]:
    """For targets/iree.py (through targets/cuda.py materialize_kernel): the cache write's kernel
    function, or None to keep IREE's own (the ``slice_scatter`` the body holds)."""
    record = {"function": symbol, **spec}
    reason = ck.available()
    if reason:
        return None, {**record, "kernel": None, "why": reason}
    try:
        cs = CacheWriteSpec(spec["outer"], spec["slots"], spec["rows"], spec["inner"], spec["dtype"], spec.get("offset", 0),
                            spec.get("heads", 1), spec.get("src_layout", ""))
        part = build_cache_write(cs)
    except CompileError as e:
        return None, {**record, "kernel": None, "why": e.message if hasattr(e, "message") else str(e)}
    dst = [int(x) for x in spec["dst_shape"].split("x")]
    src = [int(x) for x in (spec.get("src_layout") or spec["src_shape"]).split(":")[0].split("x")]
    return cache_write_function(symbol, cs, part, dst, src), {**record, "kernel": part.name, "grid": list(cache_write_grid(cs)),
                                                               "threads": part.threads, "triton": ck.TRITON_VERSION}
