"""Pass ``lower-cuvil-to-kernels``: hand ``cuvil.linear`` and ``cuvil.attention`` ops to a
target's own kernels.

Each ``cuvil.linear`` the kernel contract covers becomes a call of a private function, one
per distinct linear (shape, dtype, epilogue), that says which computation it is::

    %y = "cuvil.linear"(%x, %w, %b) {activation = "gelu_tanh"} : ([8,128,768], [3072,768], [3072]) -> [8,128,3072]
        ->
    %x2 = torch.aten.view %x, [1024, 768]
    %y2 = func.call @cuvil_kernel_linear_1024x3072x768_f16_gelu_tanh_bias(%x2, %w, %b)
    %y  = torch.aten.view %y2, [8, 128, 3072]

    func.func private @cuvil_kernel_linear_...(%x, %w, %b) -> !torch.vtensor<[1024,3072],f16>
        attributes {cuvil.kernel = "linear", cuvil.kernel_spec = {m = 1024, n = 3072, k = 768, ...}} {
      %y = "cuvil.linear"(%x, %w, %b) {activation = "gelu_tanh"} ...   // IREE's codegen, if nothing else
      return %y
    }

A linear whose one use (through views) is a residual add, ``linear(x) + r`` with r of the same
shape and dtype in either order, passes r too (flattened to [M, F]) and the call replaces the add
(``has_residual``; the kernel adds r in its epilogue): a transformer's output projections.

The function's body is the op itself, on the flattened [M, K] input, so ``lower-cuvil-to-torch``
lowers it like any other: a module that goes no further is still complete and correct. The
target replaces the body at the hand-off (targets/iree.py, in IREE's context, where the HAL
dialect exists) by a ``hal.dispatch.extern`` of its kernel, or keeps it (IREE's codegen) where
it has no kernel for that linear; the package metadata says which (``kernels``).

The contract (what a kernel for sm_90 handles; anything else stays with IREE and is counted as
``kept: <why>``): static shapes; input and weight (and bias) f16 or bf16 of one dtype; K and
the out features multiples of 8 (TMA needs 16-byte row strides); any activation of
cuvil.linear, gated ones included; leading input dims of any rank, flattened into M.

``cuvil.attention`` ops the attention kernel covers become calls the same way, one private
function per (shape, dtype, causal, scale, layouts)::

    %o = func.call @cuvil_kernel_attention_1x32x8x512x512x64_f16_causal_s0p125(%q, %k, %v)

The kernel reads strided operands, so the call takes what the heads were cut from rather than
the ``[B, H, T, D]`` copies a transformer's attention block makes (``attention_operand``): a q,
k or v that is ``permute(view(slice(y)))`` of a fused QKV projection's ``[B, T, N]`` output
passes ``y`` itself (offset and token stride in the spec), one that is a ``[B, T, H, D]``
tensor transposed passes that tensor, and HF's ``repeat_kv`` (unsqueeze, broadcast, view) of
grouped k/v heads passes the kv heads once; a result whose one use (through same-shape views)
swaps heads and tokens back is written as ``[B, T, H, D]``, the call replacing that transpose.
The private function takes those tensors and its body rebuilds the slices, views, transposes
and repeats around the op, so IREE's codegen computes the same where no kernel is built.

Its contract: static shapes; rank 4 ``[B, H, T, D]``; q, k, v and the result of one dtype, f16
or bf16; head dim 64 or 128 (q, k and v alike); k/v heads dividing q heads (grouped-query
attention), batch alike; Tq and Tkv any (causal is torch's top-left diagonal, as
cuvil.attention means); no mask, or one that folds to a constant keeping every key or exactly
the causal triangle (HF's masking utils without padding: the call drops it and is causal).
Anything else is ``kept attention: <why>``.

Heads cut from a kernel's output go on to RoPE (Llama's q and k): ``slice(y, -1, a, b)`` of a
call's ``[..., N]`` result viewed as ``[..., H, D]`` becomes ``slice(view(y, [..., N/D, D]),
-2, a/D, b/D)`` ("slice by heads"). The same values; but IREE fuses a slice into its consumer
only when no reshape stands between them, so the slice-then-view form cost a copy of q and k
(a ``slow_memcpy`` dispatch each, a tenth of a Llama layer at 4096 tokens on an H100).
A KV-cache write at a position the device holds, ``slice_scatter(cache, new, dim, int(P) + n,
int(P) + n + T)`` (compile_causal_lm's steps), becomes a call of a cache-write kernel function
``(cache, new, P) -> cache'`` (``cache_write_form``): the kernel reads P on the device and writes in
place, where IREE's own copy takes the offset as a push constant and so reads P back to the host
before every call. A ``[B, H, S, D]`` cache's new k or v is passed as ``attention_operand`` finds it
(the fused QKV output itself, with strides). torch.export's range asserts on ``int(P)``, then the only
host reads left, are dropped (``_drop_host_reads``). docs/targets.md, "The KV-cache write".
Test: tests/lowering/kernels/lower-cuvil-to-kernels.mlir.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cuvil_mlir.core.diagnostics import module_path
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.passes import FunctionPass
from cuvil_mlir.core.patterns import (
    Firings, build, const_float, const_int, const_int_list, defining_op, erase_dead, has_one_use, info, is_none, num_uses,
    torch_int, torch_int_list, vtensor_type,
)
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import CASTS, KERNEL_ALIGN_ELEMENTS, convert, fold

NAME = "lower-cuvil-to-kernels"
KERNEL_ATTR = "cuvil.kernel"  # on the private function: which op it computes ("linear", "attention")
SPEC_ATTR = "cuvil.kernel_spec"  # its shape, dtype and epilogue
SITES_ATTR = "cuvil.kernel_sites"  # the nn.Module paths of the ops it computes (for the metadata)
KERNEL_DTYPES = ("f16", "bf16")
_LAYOUT = ("torch.aten.permute", "torch.aten.transpose.int", "torch.aten.t")


def why_not(op, half: str | None = None) -> str | None:
    """None when a kernel for sm_90 covers this cuvil.linear, else why not (in words). ``half``:
    the 16-bit dtype of the widened form (``narrowed``), whose bias may be f32."""
    x, w, y = info(op.input), info(op.weight), info(op.result)
    if any(d < 0 for t in (x, w, y) for d in t.shape):
        return "dynamic shape"
    if half is None and x.dtype not in KERNEL_DTYPES:
        return f"dtype {x.dtype}"
    dtype = half or x.dtype
    if op.bias is not None and info(op.bias).dtype not in ((dtype, "f32") if half else (dtype,)):
        return f"bias dtype {info(op.bias).dtype} differs from {dtype}"
    if half is None and y.dtype != x.dtype:
        return f"result dtype {y.dtype} differs from {x.dtype}"
    k, out = x.shape[-1], y.shape[-1]
    if k % KERNEL_ALIGN_ELEMENTS:
        return f"K={k} not a multiple of {KERNEL_ALIGN_ELEMENTS}"
    if out % KERNEL_ALIGN_ELEMENTS:
        return f"out features {out} not a multiple of {KERNEL_ALIGN_ELEMENTS}"
    if math.prod(x.shape[:-1]) == 0 or k == 0:
        return "empty tensor"
    return None


ATTENTION_HEAD_DIMS = (64, 128)  # what the attention kernel is built for (targets/cuda_attention_kernels.py)
# An attention mask is folded up to this many elements (common.fold's own limit is 1M): HF's
# masking utilities build the causal mask at [batch, 1, T, T] from aranges (Llama at batch 8,
# T=512: 2M booleans), and a mask that folds to torch's causal triangle is no mask for the kernel.
MASK_FOLD_LIMIT = 1 << 26


def constant_mask(op) -> str | None:
    """What a mask that folds to a constant means: "none" (it keeps every key), "causal" (torch's
    top-left lower triangle, broadcast over batch and heads: HF's masking utils for a sequence
    without padding), else None (a real mask; or larger than MASK_FOLD_LIMIT). Additive
    masks count as keep-where-0 when every other value is -inf or about the dtype's lowest
    (exact here: a triangle keeps a key in every row)."""
    arr = fold(op.mask, limit=MASK_FOLD_LIMIT)
    if arr is None:
        return None
    q, k = info(op.q), info(op.k)
    if arr.dtype != np.bool_:
        keep = arr == 0
        if not np.all(keep | (arr <= -6.0e4)):
            return None
    else:
        keep = arr
    try:
        keep = np.broadcast_to(keep, (*q.shape[:-1], k.shape[-2]))
    except ValueError:
        return None
    if keep.all():
        return "none"
    if (keep == np.tril(np.ones(keep.shape[-2:], dtype=bool))).all():
        return "causal"
    return None


def why_not_attention(op) -> str | None:
    """None when the attention kernel for sm_90 covers this cuvil.attention, else why not."""
    q, k, v, y = info(op.q), info(op.k), info(op.v), info(op.result)
    if op.mask is not None and (any(d < 0 for d in info(op.mask).shape) or constant_mask(op) is None):
        return "explicit mask"
    if any(d < 0 for t in (q, k, v, y) for d in t.shape):
        return "dynamic shape"
    if q.rank != 4:
        return f"rank {q.rank} (the kernel takes [B, H, T, D])"
    if q.dtype not in KERNEL_DTYPES:
        return f"dtype {q.dtype}"
    if y.dtype != q.dtype:
        return f"result dtype {y.dtype} differs from {q.dtype}"
    if q.shape[-1] not in ATTENTION_HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        return f"head dims q {q.shape[-1]}, v {v.shape[-1]} (the kernel takes {' or '.join(map(str, ATTENTION_HEAD_DIMS))})"
    if 0 in q.shape or 0 in k.shape:
        return "empty tensor"
    if k.shape[0] != q.shape[0] or v.shape[:2] != k.shape[:2] or q.shape[1] % k.shape[1]:
        return f"q {q.shape[:2]} and k/v {k.shape[:2]}, {v.shape[:2]} batch and heads do not match (kv heads must divide q heads)"
    return None


def attention_spec_of(op) -> dict:
    q, k = info(op.q), info(op.k)
    causal = ir.BoolAttr(op.attributes["is_causal"]).value or (op.mask is not None and constant_mask(op) == "causal")
    return {"op": "attention", "batch": q.shape[0], "heads": q.shape[1], "kv_heads": k.shape[1], "tq": q.shape[2],
            "tkv": k.shape[2], "d": q.shape[3], "dtype": q.dtype, "causal": causal,
            # a string: exact (repr round-trips) and readable by the hand-off's attribute reader
            "scale": repr(ir.FloatAttr(op.attributes["scale"]).value)}


def why_not_prefix(op) -> str | None:
    """None when the prefix kernel covers this attention over a cache prefix (prefix_form), else
    why not: what the attention kernel needs of dtypes and head dims."""
    q, v, y = info(op.q), info(op.v), info(op.result)
    if q.dtype not in KERNEL_DTYPES:
        return f"dtype {q.dtype}"
    if y.dtype != q.dtype or v.dtype != q.dtype:
        return f"result or value dtype {y.dtype}, {v.dtype} differs from {q.dtype}"
    if q.shape[-1] not in ATTENTION_HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        return f"head dims q {q.shape[-1]}, v {v.shape[-1]} (the kernel takes {' or '.join(map(str, ATTENTION_HEAD_DIMS))})"
    if 0 in q.shape:
        return "empty tensor"
    return None


def prefix_spec_of(op, prefix: dict) -> dict:
    q, cache = info(op.q), info(prefix["k"])
    return {"op": "attention", "batch": q.shape[0], "heads": q.shape[1], "kv_heads": prefix["kv_heads"], "tq": q.shape[2],
            "tkv": cache.shape[2], "d": q.shape[3], "dtype": q.dtype, "causal": False, "prefix": True,
            "scale": repr(ir.FloatAttr(op.attributes["scale"]).value)}


LAYOUTS = ("q_layout", "k_layout", "v_layout", "o_layout")
_VIEWS = ("torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view")


def attention_symbol_of(spec: dict) -> str:
    shape = "x".join(str(spec[n]) for n in ("batch", "heads", "kv_heads", "tq", "tkv", "d"))
    scale = spec["scale"].replace(".", "p").replace("-", "m").replace("+", "")
    layouts = "|".join(spec.get(n, "") for n in LAYOUTS)
    strided = f"_l{hashlib.sha256(layouts.encode()).hexdigest()[:8]}" if layouts.strip("|") else ""
    kind = "_causal" if spec["causal"] else "_prefix" if spec.get("prefix") else ""
    return f"cuvil_kernel_attention_{shape}_{spec['dtype']}{kind}_s{scale}{strided}"


def _swapped_heads(value):
    """x when ``value`` is the rank-4 x with dims 1 and 2 swapped (permute [0, 2, 1, 3] or
    transpose(1, 2)), else None."""
    op = defining_op(value, ("torch.aten.permute", "torch.aten.transpose.int"))
    if op is None or info(value) is None or info(value).rank != 4:
        return None
    if op.operation.name == "torch.aten.permute":
        ok = const_int_list(op.operands[1]) in ([0, 2, 1, 3], [0, -2, -3, -1], [0, 2, 1, -1])
    else:
        dims = {d % 4 for d in (const_int(op.operands[1]), const_int(op.operands[2])) if d is not None}
        ok = dims == {1, 2}
    return op.operands[0] if ok else None


def _repeated_kv(value):
    """(x, x's heads) when ``value`` is HF's repeat_kv of x ``[B, Hkv, T, D]``:
    view(broadcast_to(unsqueeze(x, 2), [B, Hkv, n, T, D]), [B, Hkv·n, T, D]); else None."""
    view = defining_op(value, _VIEWS)
    bcast = defining_op(view.operands[0], ("torch.aten.broadcast_to", "torch.aten.expand")) if view is not None else None
    unsq = defining_op(bcast.operands[0], "torch.aten.unsqueeze") if bcast is not None else None
    if unsq is None or const_int(unsq.operands[1]) not in (2, -3):
        return None
    x, wide, out = info(unsq.operands[0]), info(bcast.result), info(value)
    if x is None or x.rank != 4 or wide is None or out is None:
        return None
    b, h, t, d = x.shape
    if len(wide.shape) != 5 or tuple(wide.shape[:2]) != (b, h) or tuple(wide.shape[3:]) != (t, d) or tuple(out.shape) != (b, h * wide.shape[2], t, d):
        return None
    return unsq.operands[0], h


def attention_operand(value) -> tuple[ir.Value, str]:
    """(the tensor the kernel reads, its layout string, "" for ``value`` itself as contiguous
    ``[B, H, T, D]``) for one [B, H, T, D] operand (targets/cuda_attention_kernels.py)."""
    b, h, t, d = info(value).shape
    x = _swapped_heads(value)
    if x is None:
        return value, ""
    view = defining_op(x, _VIEWS)
    piece = defining_op(view.operands[0], "torch.aten.slice.Tensor") if view is not None else None
    if piece is not None and tuple(info(view.operands[0]).shape) == (b, t, h * d):
        y, start, step = info(piece.operands[0]), const_int(piece.operands[2]), const_int(piece.operands[4])
        if (y is not None and y.rank == 3 and tuple(y.shape[:2]) == (b, t) and const_int(piece.operands[1]) in (2, -1)
                and step == 1 and start is not None and 0 <= start and start + h * d <= y.shape[2]):
            n = y.shape[2]
            return piece.operands[0], f"{b}x{t}x{n}:{start}:{t * n}:{d}:{n}"
    return x, f"{b}x{t}x{h}x{d}:0:{t * h * d}:{d}:{h * d}"


# ----------------------------------------------------------------------------- prefix (KV-cache) attention

_EXPANDS = ("torch.aten.unsqueeze", "torch.aten.broadcast_to", "torch.aten.expand")


def _int_of(value) -> tuple[ir.Value, int] | None:
    """(P, n) when the !torch.int ``value`` is ``int(P) + n`` (P a one-element int64 tensor,
    n a constant; ``int(P)`` alone is n = 0), else None."""
    add = defining_op(value, "torch.aten.add.int")
    n = 0
    if add is not None:
        for a, b in ((0, 1), (1, 0)):
            if const_int(add.operands[b]) is not None and defining_op(add.operands[a], "torch.aten.Int.Tensor") is not None:
                value, n = add.operands[a], const_int(add.operands[b])
                break
        else:
            return None
    item = defining_op(value, "torch.aten.Int.Tensor")
    p = info(item.operands[0]) if item is not None else None
    if p is None or p.dtype != "si64" or list(p.shape) not in ([1], []):
        return None
    return item.operands[0], n


def _same_int(a, b) -> bool:
    """Whether two !torch.int values are the same SSA value or the same ``int(P) + n``."""
    if a == b:
        return True
    x, y = _int_of(a), _int_of(b)
    return x is not None and y is not None and x[0] == y[0] and x[1] == y[1]


def _strip(value, names, keep_last: int):
    """Through a chain of ``names`` ops that keep the trailing ``keep_last`` dims (unsqueeze
    only before them, broadcasts only of leading dims): the value they start from."""
    while (op := defining_op(value, names)) is not None:
        src, out = info(op.operands[0]), info(value)
        if src is None or out is None or src.rank < keep_last or list(src.shape[src.rank - keep_last:]) != list(out.shape[out.rank - keep_last:]):
            return value
        if op.operation.name == "torch.aten.unsqueeze":
            dim = const_int(op.operands[1])
            if dim is None or dim % out.rank >= out.rank - keep_last:
                return value
        value = op.operands[0]
    return value


def _arange(value):
    """(start, end, step) operands of a ``torch.aten.arange.start_step`` defining value."""
    op = defining_op(value, "torch.aten.arange.start_step")
    return None if op is None else (op.operands[0], op.operands[1], op.operands[2])


def _cache_slice(value):
    """(cache, end) when ``value`` is ``cache[:, :, :end]`` of a static [B, H, S, D] cache."""
    piece = defining_op(value, "torch.aten.slice.Tensor")
    if piece is None:
        return None
    cache = info(piece.operands[0])
    if cache is None or cache.rank != 4 or min(cache.shape) < 0 or const_int(piece.operands[1]) not in (2, -2):
        return None
    if not (is_none(piece.operands[2]) or const_int(piece.operands[2]) == 0) or const_int(piece.operands[4]) != 1:
        return None
    return piece.operands[0], piece.operands[3]


def prefix_form(op) -> dict | None:
    """What a cuvil.attention over the filled prefix of a KV cache reads, or None: q ``[B, H, T,
    D]`` at positions ``P .. P+T-1`` (P a one-element int64 tensor on the device), k and v the
    caches' first ``P + T`` slots (``cache[:, :, :int(P) + T]``, through HF's repeat_kv for
    grouped heads), and the mask ``arange(P + T)[None, :] <= (P + arange(T))[:, None]`` broadcast
    over batch and heads: query t sees keys 0 .. P+t. This is the decode step (and a later prompt
    chunk) that compile_causal_lm exports through transformers' masking utilities; the prefix
    kernel reads the whole cache and P, so the shapes are static.

    Returns {"k": cache, "v": cache, "pos": P, "kv_heads": n, "repeated": bool}."""
    q = info(op.q)
    if op.mask is None or q is None or q.rank != 4 or min(q.shape) < 0:
        return None
    tq = q.shape[2]
    k_rep, v_rep = _repeated_kv(op.k), _repeated_kv(op.v)
    repeated = k_rep is not None and v_rep is not None and k_rep[1] == v_rep[1]
    k_src, v_src = (k_rep[0], v_rep[0]) if repeated else (op.k, op.v)
    ks, vs = _cache_slice(k_src), _cache_slice(v_src)
    if ks is None or vs is None or not _same_int(ks[1], vs[1]):
        return None
    kc, vc = info(ks[0]), info(vs[0])
    if list(kc.shape) != list(vc.shape) or kc.shape[0] != q.shape[0] or q.shape[1] % kc.shape[1] or kc.dtype != q.dtype:
        return None
    if not repeated and kc.shape[1] != q.shape[1]:
        return None
    end = _int_of(ks[1])
    if end is None or end[1] != tq:
        return None
    pos = end[0]
    # the mask: [.., T, keys] from le(keys [1, K], queries [T, 1]) (or ge with the sides swapped)
    m = info(op.mask)
    if m is None or m.dtype != "i1" or m.rank != 4 or m.shape[-2] != tq:
        return None
    cmp = defining_op(_strip(op.mask, _EXPANDS, 2), ("torch.aten.le.Tensor", "torch.aten.ge.Tensor"))
    if cmp is None:
        return None
    keys, queries = cmp.operands if cmp.operation.name == "torch.aten.le.Tensor" else cmp.operands[::-1]
    kk, qq = _strip(keys, "torch.aten.unsqueeze", 1), _strip(queries, "torch.aten.unsqueeze", 0)
    if info(keys) is None or info(queries) is None or info(keys).rank != 2 or info(queries).rank != 2:
        return None
    if info(keys).shape[0] != 1 or info(queries).shape[1] != 1 or info(queries).shape[0] != tq:
        return None
    span = _arange(kk)
    if span is None or const_int(span[0]) != 0 or const_int(span[2]) != 1 or not _same_int(span[1], ks[1]):
        return None
    add = defining_op(qq, "torch.aten.add.Tensor")
    if add is None or const_float(add.operands[2]) != 1.0:
        return None
    for a, b in ((0, 1), (1, 0)):
        steps = _arange(add.operands[b])
        if add.operands[a] == pos and steps is not None and [const_int(x) for x in steps] == [0, tq, 1]:
            break
    else:
        return None
    return {"k": ks[0], "v": vs[0], "pos": pos, "kv_heads": kc.shape[1], "repeated": repeated}


# ----------------------------------------------------------------------------- KV-cache write

CACHE_WRITE_DTYPES = ("f16", "bf16", "f32")


def cache_write_form(op) -> dict | None:
    """The spec of a write into a cache at a position the device holds, or None:
    ``slice_scatter(dst, src, dim, int(P) + n, int(P) + n + T, 1)`` with dst and src static and of
    one dtype (f16, bf16 or f32), src T long along ``dim`` and dst's shape elsewhere, P a
    one-element int64 tensor. compile_causal_lm's steps write every layer's keys and values so
    (``Cache.update``); the kernel reads P on the device and writes the slots in place."""
    if op.name != "torch.aten.slice_scatter":
        return None
    dst, src = info(op.operands[0]), info(op.operands[1])
    dim, step = const_int(op.operands[2]), const_int(op.operands[5])
    if dst is None or src is None or dim is None or step != 1 or dst.dtype != src.dtype or dst.dtype not in CACHE_WRITE_DTYPES:
        return None
    if dst.rank != src.rank or min(dst.shape) < 0 or min(src.shape) < 0 or not -dst.rank <= dim < dst.rank:
        return None
    dim %= dst.rank
    rows = src.shape[dim]
    if [n for i, n in enumerate(dst.shape) if i != dim] != [n for i, n in enumerate(src.shape) if i != dim] or rows > dst.shape[dim]:
        return None
    start, end = _int_of(op.operands[3]), _int_of(op.operands[4])
    if start is None or end is None or start[0] != end[0] or end[1] != start[1] + rows:
        return None
    spec = {"op": "cache_write", "outer": math.prod(dst.shape[:dim]), "slots": dst.shape[dim], "rows": rows,
            "inner": math.prod(dst.shape[dim + 1:]), "dtype": dst.dtype, "offset": start[1], "dim": dim,
            "dst_shape": "x".join(map(str, dst.shape)), "src_shape": "x".join(map(str, src.shape)), "pos": start[0],
            "src": op.operands[1]}
    if dst.rank == 4 and dim == 2:  # a [B, H, S, D] cache: k or v read where attention would read them
        value, layout = attention_operand(op.operands[1])
        if layout:
            spec.update(heads=dst.shape[1], src_layout=layout, src=value)
    return spec


def _declare_cache_write(module: ir.Module, op, spec: dict, symbol: str):
    """The private function ``(dst, src, P) -> dst'`` whose body is the slice_scatter at
    ``int(P) + offset`` (IREE's own form, where no kernel is built)."""
    dst, src, pos = op.operands[0].type, spec["src"].type, spec["pos"].type
    with ir.InsertionPoint(module.body), op.location:
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(symbol), "sym_visibility": ir.StringAttr.get("private"),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get([dst, src, pos], [dst])),
                        KERNEL_ATTR: ir.StringAttr.get("cache_write"),
                        SPEC_ATTR: _plain_spec_attr({k: v for k, v in spec.items() if k not in ("pos", "src")})})
        block = func.regions[0].blocks.append(dst, src, pos)
        with ir.InsertionPoint(block):
            written = block.arguments[1]
            if spec.get("src_layout"):  # the [B, H, T, D] src from the tensor it was cut from
                b, h, t, d = (int(x) for x in spec["src_shape"].split("x"))
                written = _rebuild_operand(written, spec["src_layout"], h, {"batch": b, "tq": t, "d": d, "dtype": spec["dtype"]}, "q")
            int_type = ir.Type.parse("!torch.int")
            start = build("torch.aten.Int.Tensor", [block.arguments[2]], int_type)
            if spec["offset"]:
                start = build("torch.aten.add.int", [start, torch_int(spec["offset"])], int_type)
            end = build("torch.aten.add.int", [start, torch_int(spec["rows"])], int_type)
            out = build("torch.aten.slice_scatter", [block.arguments[0], written, torch_int(spec["dim"]), start, end,
                                                     torch_int(1)], dst)
            ir.Operation.create("func.return", operands=[out])
    return func


_HOST_INT_OPS = frozenset({"torch.aten.add.int", "torch.aten.sub.int", "torch.aten.mul.int", "torch.aten.ge.int", "torch.aten.gt.int",
                           "torch.aten.le.int", "torch.aten.lt.int", "torch.aten.eq.int", "torch.aten.ne.int",
                           "torch.aten.Int.bool", "torch.aten.Bool.int", "torch.runtime.assert"})


def _drop_host_reads(func, positions: list) -> int:
    """Erase ``int(P)`` of each position tensor P whose remaining uses are only torch.export's
    range asserts (``torch.runtime.assert``), the integer arithmetic feeding them and dead
    values: once the cache writes and the prefix attention read P on the device, those asserts
    are all that would read it back to the host, a wait in the middle of every call. The range
    is the caller's to check (CausalLM checks the position before each call; the kernels write
    and read nothing outside the cache). Returns how many reads were dropped."""
    reads = []

    def visit(op):
        if op.name == "torch.aten.Int.Tensor" and any(op.operands[0] == p for p in positions):
            reads.append(op)
        return ir.WalkResult.ADVANCE

    func.operation.walk(visit)
    dropped = 0
    for read in reads:
        closure, work, ok = [], [read], True
        while work and ok:
            op = work.pop()
            for result in op.results:
                for use in result.uses:
                    user = use.owner
                    if user in closure or user == read:
                        continue
                    if user.name in _HOST_INT_OPS or (user.results and not any(num_uses(r) for r in user.results)):
                        closure.append(user)
                        work.append(user)
                    else:
                        ok = False
        if not ok:
            continue
        remaining = closure + [read]
        while remaining:
            free = [op for op in remaining if not any(num_uses(r) for r in op.results)]
            if not free:
                break
            for op in free:
                remaining.remove(op)
                op.erase()
        dropped += 1
    return dropped


def _plain_spec_attr(spec: dict) -> ir.Attribute:
    """A spec of integers and strings as a ``cuvil.kernel_spec`` dictionary."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.DictAttr.get({k: ir.StringAttr.get(v) if isinstance(v, str) else ir.IntegerAttr.get(i64, v) for k, v in spec.items()})


def cache_write_symbol_of(spec: dict) -> str:
    strided = ""
    if spec.get("src_layout"):
        strided = "_strided_" + hashlib.sha256(spec["src_layout"].encode()).hexdigest()[:8]
    return (f"cuvil_kernel_cache_write_{spec['dst_shape']}_d{spec['dim']}_t{spec['rows']}_{spec['dtype']}"
            f"{'_o' + str(spec['offset']) if spec['offset'] else ''}{strided}")


def _clone_into(values, mapping: dict) -> list | None:
    """The ``values`` recomputed at the insertion point from ``mapping`` (old value -> new):
    every op between is cloned (ops without regions; anything else reached -> None, and
    nothing is created). ``mapping`` is extended with the clones."""
    order, seen = [], set()

    def visit(value) -> bool:
        if any(value == k for k in mapping):
            return True
        op = defining_op(value)
        if op is None or len(op.operation.regions):
            return False
        key = op.operation
        if key in seen:
            return True
        if not all(visit(v) for v in op.operands):
            return False
        seen.add(key)
        order.append(op)
        return True

    if not all(visit(v) for v in values):
        return None

    def lookup(value):
        return next(new for old, new in mapping.items() if old == value)

    for op in order:
        clone = op.operation.clone()
        for i, v in enumerate(op.operands):
            clone.operands[i] = lookup(v)
        for old, new in zip(op.operation.results, clone.results):
            mapping[old] = new
    return [lookup(v) for v in values]


def _heads_swapped_back(op):
    """The op (permute / transpose) that turns the attention's result back into [B, T, H, D],
    when it is the one use of the result (through same-shape views), else None."""
    value = op.result
    while has_one_use(value):
        user = next(iter(value.uses)).owner
        user = user.opview if isinstance(user, ir.Operation) else user
        if len(user.operation.results) != 1:  # func.return, a call's operand list
            return None
        if user.operation.name in _VIEWS and info(user.result) is not None and info(user.result).shape == info(value).shape:
            value = user.result
            continue
        return user if _swapped_heads(user.result) is not None and user.operands[0] == value else None
    return None


def _rebuild_operand(arg, layout: str, heads: int, spec: dict, which: str):
    """In the fallback body: the [B, H, T, D] operand from what the call passes."""
    b, t, d = spec["batch"], spec["tkv"] if which in "kv" else spec["tq"], spec["d"]
    if not layout:
        return arg
    shape = [int(x) for x in layout.split(":")[0].split("x")]
    dtype = spec["dtype"]
    if len(shape) == 3:  # a slice of [B, T, N]
        start = int(layout.split(":")[1])
        arg = build("torch.aten.slice.Tensor", [arg, torch_int(2), torch_int(start), torch_int(start + heads * d), torch_int(1)],
                    vtensor_type([b, t, heads * d], dtype))
        arg = build("torch.aten.view", [arg, torch_int_list([b, t, heads, d])], vtensor_type([b, t, heads, d], dtype))
    return build("torch.aten.transpose.int", [arg, torch_int(1), torch_int(2)], vtensor_type([b, heads, t, d], dtype))


def _repeat_heads(x, spec: dict):
    """k/v ``[B, Hkv, T, D]`` repeated to the q heads (HF's repeat_kv), in the fallback body."""
    b, hkv, h, t, d, dtype = spec["batch"], spec["kv_heads"], spec["heads"], spec["tkv"], spec["d"], spec["dtype"]
    if hkv == h:
        return x
    x = build("torch.aten.unsqueeze", [x, torch_int(2)], vtensor_type([b, hkv, 1, t, d], dtype))
    x = build("torch.aten.broadcast_to", [x, torch_int_list([b, hkv, h // hkv, t, d])], vtensor_type([b, hkv, h // hkv, t, d], dtype))
    return build("torch.aten.view", [x, torch_int_list([b, h, t, d])], vtensor_type([b, h, t, d], dtype))


def _declare_attention(module: ir.Module, op, spec: dict, symbol: str, operands: list, repeated: bool, result_type):
    """The private function computing one attention from the tensors the call passes: its body
    rebuilds the op's operands (slices, views, transposes, repeated kv heads; for a prefix
    attention a clone of what computed k, v and the mask from the caches and P) and is the op.
    None (and no function) when a prefix attention's operands depend on anything else."""
    i64 = ir.IntegerType.get_signless(64)
    attr = {n: ir.IntegerAttr.get(i64, spec[n]) for n in ("batch", "heads", "kv_heads", "tq", "tkv", "d")}
    attr.update({n: ir.StringAttr.get(spec[n]) for n in ("op", "dtype", "scale")})
    attr.update({n: ir.StringAttr.get(spec[n]) for n in LAYOUTS if spec[n]})  # a contiguous [B, H, T, D] says nothing
    attr["causal"] = ir.BoolAttr.get(spec["causal"])
    if spec.get("prefix"):
        attr["prefix"] = ir.BoolAttr.get(True)
    inputs = [v.type for v in operands]
    with ir.InsertionPoint(module.body), op.location:
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(symbol), "sym_visibility": ir.StringAttr.get("private"),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get(inputs, [result_type])),
                        KERNEL_ATTR: ir.StringAttr.get("attention"), SPEC_ATTR: ir.DictAttr.get(attr)})
        block = func.regions[0].blocks.append(*inputs)
        with ir.InsertionPoint(block):
            kv_heads = spec["kv_heads"] if repeated else spec["heads"]
            q = _rebuild_operand(block.arguments[0], spec["q_layout"], spec["heads"], spec, "q")
            mask = None
            if spec.get("prefix"):  # the slices of the caches, repeat_kv and the mask, as the program had them
                args = block.arguments
                cloned = _clone_into([op.k, op.v, op.mask], {operands[1]: args[1], operands[2]: args[2], operands[3]: args[3]})
                if cloned is None:
                    func.erase()
                    return None
                k, v, mask = cloned
            else:
                k = _rebuild_operand(block.arguments[1], spec["k_layout"], kv_heads, spec, "k")
                v = _rebuild_operand(block.arguments[2], spec["v_layout"], kv_heads, spec, "v")
                if repeated:
                    k, v = _repeat_heads(k, spec), _repeat_heads(v, spec)
            out = cuvil.attention(op.result.type, q, k, v, mask, scale=ir.FloatAttr(op.attributes["scale"]).value,
                                  is_causal=spec["causal"])
            if spec["o_layout"]:
                b, h, t, d = info(op.result).shape
                out = build("torch.aten.transpose.int", [out, torch_int(1), torch_int(2)], vtensor_type([b, t, h, d], spec["dtype"]))
            ir.Operation.create("func.return", operands=[out])
    return func


def _cast_source(value):
    """x when ``value`` is a cast of a 16-bit x to f32, else None."""
    cast = defining_op(value, CASTS)
    if cast is None or info(value).dtype != "f32" or info(cast.operands[0]).dtype not in KERNEL_DTYPES:
        return None
    return cast.operands[0]


def narrowed(op):
    """(16-bit dtype, 16-bit input, the truncating cast) for the form torch.export gives a 16-bit
    ``addmm`` (HF GPT-2's Conv1D): an f32 cuvil.linear of upcast 16-bit x and W (through a
    transpose) whose one use casts the result back to 16 bits. The kernel computes exactly that:
    16-bit products, fp32 accumulation, bias and activation, one rounding at the end."""
    if info(op.result).dtype != "f32" or not has_one_use(op.result):
        return None
    user = next(iter(op.result.uses)).owner
    if user.name not in CASTS or info(user.results[0]).dtype not in KERNEL_DTYPES:
        return None
    half = info(user.results[0]).dtype
    x = _cast_source(op.input)
    w = op.weight
    while (layout := defining_op(w, _LAYOUT)) is not None:
        w = layout.operands[0]
    w = _cast_source(w)
    if x is None or w is None or info(x).dtype != half or info(w).dtype != half:
        return None
    return half, x, user


def spec_of(op, half: str | None = None) -> dict:
    x, w = info(op.input), info(op.weight)
    dtype = half or x.dtype
    return {"m": math.prod(x.shape[:-1]), "n": w.shape[0], "k": x.shape[-1], "dtype": dtype,
            "activation": cuvil.activation_of(op), "has_bias": op.bias is not None,
            "bias_dtype": info(op.bias).dtype if op.bias is not None else "", "widened": half is not None,
            "has_residual": False}


def residual_add(value, dtype: str):
    """(the add, r, the views between) when ``value``'s one use, through views, is ``value + r``
    (``add.Tensor``, alpha 1, either order) with r of the same shape and ``dtype``: a transformer's
    residual connection after an output projection, which the kernel adds in its epilogue."""
    views = []
    while has_one_use(value):
        user = next(iter(value.uses)).owner
        if user.name in _VIEWS:
            views.append(user)
            value = user.results[0]
            continue
        if user.name != "torch.aten.add.Tensor" or const_float(user.operands[2]) != 1.0:
            return None
        other = user.operands[1] if user.operands[0] == value else user.operands[0]
        out, r, v = info(user.results[0]), info(other), info(value)
        if other == value or r is None or out is None or not (list(r.shape) == list(out.shape) == list(v.shape)) \
                or not r.dtype == out.dtype == dtype:
            return None
        return user, other, views
    return None


def symbol_of(spec: dict) -> str:
    bias = "" if not spec["has_bias"] else "_bias" if spec["bias_dtype"] == spec["dtype"] else f"_bias_{spec['bias_dtype']}"
    res = "_res" if spec["has_residual"] else ""
    return f"cuvil_kernel_linear_{spec['m']}x{spec['n']}x{spec['k']}_{spec['dtype']}_{spec['activation']}{bias}{res}"


def _spec_attr(spec: dict) -> ir.Attribute:
    i64 = ir.IntegerType.get_signless(64)
    fields = {
        "m": ir.IntegerAttr.get(i64, spec["m"]), "n": ir.IntegerAttr.get(i64, spec["n"]), "k": ir.IntegerAttr.get(i64, spec["k"]),
        "dtype": ir.StringAttr.get(spec["dtype"]), "activation": ir.StringAttr.get(spec["activation"]),
        "has_bias": ir.BoolAttr.get(spec["has_bias"]), "bias_dtype": ir.StringAttr.get(spec["bias_dtype"]),
    }
    if spec["has_residual"]:  # written only when there is one
        fields["has_residual"] = ir.BoolAttr.get(True)
    return ir.DictAttr.get(fields)


def read_spec(attr) -> dict:
    """The spec dict back from a ``cuvil.kernel_spec`` attribute."""
    d = ir.DictAttr(attr)
    return {"m": ir.IntegerAttr(d["m"]).value, "n": ir.IntegerAttr(d["n"]).value, "k": ir.IntegerAttr(d["k"]).value,
            "dtype": ir.StringAttr(d["dtype"]).value, "activation": ir.StringAttr(d["activation"]).value,
            "has_bias": ir.BoolAttr(d["has_bias"]).value, "bias_dtype": ir.StringAttr(d["bias_dtype"]).value,
            "has_residual": "has_residual" in d and ir.BoolAttr(d["has_residual"]).value}


def _declare(module: ir.Module, op, spec: dict, symbol: str) -> None:
    """The private function computing one linear on [M, K] (its body: the cuvil.linear; for the
    widened form the casts around it too, and the residual add, so the body computes what the
    program did)."""
    y, dtype = info(op.result), spec["dtype"]
    flat_x = vtensor_type([spec["m"], spec["k"]], dtype)
    flat_y = vtensor_type([spec["m"], y.shape[-1]], dtype)
    weight = vtensor_type(info(op.weight).shape, dtype)
    inputs = [flat_x, weight] + ([op.bias.type] if op.bias is not None else []) + ([flat_y] if spec["has_residual"] else [])
    with ir.InsertionPoint(module.body), op.location:
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(symbol), "sym_visibility": ir.StringAttr.get("private"),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get(inputs, [flat_y])),
                        KERNEL_ATTR: ir.StringAttr.get("linear"), SPEC_ATTR: _spec_attr(spec)})
        block = func.regions[0].blocks.append(*inputs)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            x, w = args[0], args[1]
            if spec["widened"]:
                x, w = convert(x, "f32"), convert(w, "f32")
            wide_y = vtensor_type([spec["m"], y.shape[-1]], "f32") if spec["widened"] else flat_y
            result = cuvil.linear(wide_y, x, w, args[2] if spec["has_bias"] else None, activation=spec["activation"])
            value = result.result if isinstance(result, ir.OpView) else result
            if spec["widened"]:
                value = convert(value, dtype)
            if spec["has_residual"]:
                value = build("torch.aten.add.Tensor", [value, args[-1], torch_int(1)], flat_y)
            ir.Operation.create("func.return", operands=[value])
    return func


def _head_slices(func, kernels: set[str]) -> list:
    """The ``slice(y, -1, start, end)`` ops of a kernel call's result y (through views) whose one
    use views the slice as heads ``[..., H, D]``, D dividing the offsets: q and k cut from a fused
    QKV projection on their way to RoPE (the module docstring says why)."""
    found = []

    def visit(op):
        if op.name == "torch.aten.slice.Tensor":
            found.append(op.opview)
        return ir.WalkResult.ADVANCE

    func.operation.walk(visit)
    keep = []
    for piece in found:
        src, out = info(piece.operands[0]), info(piece.result)
        dim, start, end, step = (const_int(v) for v in piece.operands[1:5])
        if src is None or out is None or dim is None or start is None or end is None or step != 1 or not has_one_use(piece.result):
            continue
        if dim % src.rank != src.rank - 1 or min(src.shape) < 0:
            continue
        view = next(iter(piece.result.uses)).owner
        heads = info(view.results[0]) if view.name in _VIEWS else None
        if heads is None or not num_uses(view.results[0]) or list(heads.shape[:-2]) != list(out.shape[:-1]) or heads.shape[-2] * heads.shape[-1] != out.shape[-1]:
            continue
        d = heads.shape[-1]
        if src.shape[-1] % d or start % d or min(end, src.shape[-1]) % d:
            continue
        producer = piece.operands[0]
        while (through := defining_op(producer, _VIEWS)) is not None:
            producer = through.operands[0]
        call = defining_op(producer, "func.call")
        if call is not None and ir.FlatSymbolRefAttr(call.attributes["callee"]).value in kernels:
            keep.append(piece)
    return keep


def _slice_by_heads(piece) -> None:
    """slice(y, -1, a, b) viewed as [..., H, D] -> slice(view(y, [..., N/D, D]), -2, a/D, b/D)."""
    src, view = info(piece.operands[0]), next(iter(piece.result.uses)).owner
    heads = info(view.results[0])
    d = heads.shape[-1]
    start, end = const_int(piece.operands[2]), min(const_int(piece.operands[3]), src.shape[-1])
    shape = list(src.shape[:-1]) + [src.shape[-1] // d, d]
    with ir.InsertionPoint(view), piece.location:
        whole = build("torch.aten.view", [piece.operands[0], torch_int_list(shape)], vtensor_type(shape, src.dtype))
        sliced = build("torch.aten.slice.Tensor", [whole, torch_int(len(shape) - 2), torch_int(start // d), torch_int(end // d),
                                                   torch_int(1)], view.results[0].type)
    view.results[0].replace_all_uses_with(sliced)
    view.erase()
    piece.operation.erase()


def _is_kernel_function(op) -> bool:
    return op.operation.name == "func.func" and KERNEL_ATTR in op.attributes


@dataclass(frozen=True)
class LowerCuvilToKernelsOptions:
    """``arch``: the GPU architecture whose kernels the target has (what the shape contract is for)."""

    arch: Literal["sm_90"] = "sm_90"


def run(module: ir.Module, options: LowerCuvilToKernelsOptions) -> Firings:
    with module.context:
        return _run(module)


def _run(module: ir.Module) -> Firings:
    fired = Firings()
    linears, attentions, writes = [], [], []
    for func in module.body.operations:
        if func.operation.name != "func.func" or _is_kernel_function(func):
            continue

        def visit(op):
            if op.name == "cuvil.linear":
                linears.append(op.opview)
            elif op.name == "cuvil.attention":
                attentions.append(op.opview)
            elif op.name == "torch.aten.slice_scatter":
                writes.append((func, op))
            return ir.WalkResult.ADVANCE

        func.operation.walk(visit)
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations if _is_kernel_function(op)}
    sites: dict[str, list[str]] = {}
    for op in linears:
        wide = narrowed(op)
        reason = why_not(op, wide[0] if wide else None)
        if reason is not None:
            fired.record(f"kept: {reason}", op.location)
            continue
        half, x_value, trunc = wide if wide is not None else (None, op.input, None)
        spec = spec_of(op, half)
        residual = residual_add(trunc.results[0] if trunc is not None else op.result, spec["dtype"])
        spec["has_residual"] = residual is not None
        symbol = symbol_of(spec)
        if symbol not in functions:
            functions[symbol] = _declare(module, op, spec, symbol)
        sites.setdefault(symbol, []).append(module_path(op.location))
        x, y = info(x_value), info(op.result)
        # with a residual the call goes where the add was (r may be computed after the linear)
        with ir.InsertionPoint(residual[0] if residual else op.operation), op.location:
            flat_x = x_value
            if x.rank != 2:
                flat_x = build("torch.aten.view", [x_value, torch_int_list([spec["m"], spec["k"]])], vtensor_type([spec["m"], spec["k"]], x.dtype))
            # widened: W back to 16 bits (it is the upcast of a 16-bit W: IREE folds the pair away)
            weight = convert(op.weight, half) if wide is not None else op.weight
            operands = [flat_x, weight] + ([op.bias] if op.bias is not None else [])
            flat_type = vtensor_type([spec["m"], y.shape[-1]], spec["dtype"])
            if residual:
                r = residual[1]
                operands.append(r if info(r).rank == 2 else build("torch.aten.view", [r, torch_int_list([spec["m"], y.shape[-1]])], flat_type))
            call = ir.Operation.create("func.call", results=[flat_type], operands=operands,
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(symbol)})
            out = call.result
            shape = info(residual[0].results[0]).shape if residual else y.shape
            if len(shape) != 2:
                out = build("torch.aten.view", [out, torch_int_list(list(shape))], vtensor_type(shape, spec["dtype"]))
        loc = op.location
        if residual:  # the call is the add now; the views between go with it
            add, _, views = residual
            add.results[0].replace_all_uses_with(out)
            for dead in [add] + views[::-1]:
                dead.erase()
        if trunc is not None:  # the cast back to 16 bits is the call now
            trunc.results[0].replace_all_uses_with(out)
            trunc.erase()
        else:
            op.result.replace_all_uses_with(out)
        op.operation.erase()
        fired.record(("linear" if wide is None else "linear (widened 16-bit)") + (" + residual" if residual else ""), loc)
    for op in attentions:
        reason = why_not_attention(op)
        prefix = prefix_form(op) if reason in ("explicit mask", "dynamic shape") else None
        if prefix is not None:
            reason = why_not_prefix(op)
        if reason is not None:
            fired.record(f"kept attention: {reason}", op.location)
            continue
        if prefix is not None:
            spec = prefix_spec_of(op, prefix)
            repeated = prefix["repeated"]
            q_value, q_layout = attention_operand(op.q)
            operands, layouts = (q_value, prefix["k"], prefix["v"], prefix["pos"]), (q_layout, "", "")
        else:
            spec = attention_spec_of(op)
            k_value, v_value = op.k, op.v
            k_rep, v_rep = _repeated_kv(op.k), _repeated_kv(op.v)
            repeated = k_rep is not None and v_rep is not None and k_rep[1] == v_rep[1]
            if repeated:  # HF's repeat_kv: the kernel reads each kv head once (grouped-query attention)
                (k_value, spec["kv_heads"]), v_value = k_rep, v_rep[0]
            operands, layouts = zip(*(attention_operand(v) for v in (op.q, k_value, v_value)))
        spec.update(q_layout=layouts[0], k_layout=layouts[1], v_layout=layouts[2], o_layout="")
        back = _heads_swapped_back(op)
        b, h, t, d = info(op.result).shape
        if back is not None:
            spec["o_layout"] = f"{b}x{t}x{h}x{d}:0:{t * h * d}:{d}:{h * d}"
        result_type = back.result.type if back is not None else op.result.type
        symbol = attention_symbol_of(spec)
        if symbol not in functions:
            declared = _declare_attention(module, op, spec, symbol, list(operands), repeated, result_type)
            if declared is None:
                fired.record("kept attention: the cache slices or the mask depend on more than the caches and the position", op.location)
                continue
            functions[symbol] = declared
        sites.setdefault(symbol, []).append(module_path(op.location))
        with ir.InsertionPoint(op.operation), op.location:
            call = ir.Operation.create("func.call", results=[result_type], operands=list(operands),
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(symbol)})
        loc = op.location
        if back is not None:  # the call writes [B, T, H, D]: it replaces the transpose back and the views before it
            back.result.replace_all_uses_with(call.result)
            chain, value = [back], back.operands[0]
            while value != op.result:
                view = defining_op(value)
                chain.append(view)
                value = view.operands[0]
            for dead in chain:
                dead.operation.erase()
        else:
            op.result.replace_all_uses_with(call.result)
        bypassed = [defining_op(v) for v in op.operands]
        op.operation.erase()
        erase_dead(bypassed)  # the slices, transposes and repeats the call reads around
        if prefix is not None:
            fired.record("attention over a cache prefix", loc)
        else:
            fired.record("attention" if not (repeated or any(layouts) or back is not None) else "attention (strided)", loc)
    positions = {}  # function -> the position tensors the cache-write kernels read
    for func, op in writes:
        spec = cache_write_form(op)
        if spec is None:
            continue
        symbol = cache_write_symbol_of(spec)
        if symbol not in functions:
            functions[symbol] = _declare_cache_write(module, op, spec, symbol)
        sites.setdefault(symbol, []).append(module_path(op.location))
        bypassed = [defining_op(v) for v in op.operands[1:5]]
        with ir.InsertionPoint(op), op.location:
            call = ir.Operation.create("func.call", results=[op.results[0].type], operands=[op.operands[0], spec["src"], spec["pos"]],
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(symbol)})
        op.results[0].replace_all_uses_with(call.result)
        loc = op.location
        op.operation.erase()
        erase_dead(bypassed)  # the int(P) arithmetic, and the slices and transposes a strided src read around
        fired.record("cache write at a device position" + (" (strided)" if spec.get("src_layout") else ""), loc)
        positions.setdefault(func, []).append(spec["pos"])
    for func, values in positions.items():
        for _ in range(_drop_host_reads(func, values)):
            fired.record("position range check left to the host", func.location)
    for func in module.body.operations:
        if func.operation.name == "func.func" and not _is_kernel_function(func):
            for piece in _head_slices(func, set(functions)):
                fired.record("slice by heads", piece.location)
                _slice_by_heads(piece)
    for symbol, paths in sites.items():
        func = functions[symbol]
        old = [ir.StringAttr(a).value for a in ir.ArrayAttr(func.attributes[SITES_ATTR])] if SITES_ATTR in func.attributes else []
        func.attributes[SITES_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(p) for p in old + paths])
    return fired


PASS = FunctionPass(NAME, run, "cuvil.linear, cuvil.attention and KV-cache writes -> calls of per-shape kernel functions a target fills",
                    LowerCuvilToKernelsOptions())
