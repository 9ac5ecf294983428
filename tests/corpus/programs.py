"""The differential corpus: small programs generated from tables (op x dtype x shape).

Each ``Program`` builds an ``nn.Module`` and its example inputs; ``differential.py`` runs it
eagerly, through cuvil and through plain torch-mlir + IREE, and compares. Programs are
data: adding an op is one row in a table, not a new test. Names are stable
(``family/op/dtype/shape``) so a failure can be rerun by name (benchmarks/corpus.py -k).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

Dim = torch.export.Dim


@dataclass(frozen=True)
class Program:
    name: str  # family/op/dtype/shape
    family: str
    make: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple[tuple, dict]]  # (args, kwargs)
    dynamic_shapes: Any = None  # for torch.export; then ``call_inputs`` has other sizes
    call_inputs: Callable[[torch.Generator], tuple[tuple, dict]] | None = None
    check: str = "values"  # "values" | "random:LO,HI" (only shape, dtype and range: RNGs differ)
    rtol: float = 1e-3
    atol: float = 1e-5
    calls: int = 1  # >1: call repeatedly (module state must persist between calls)
    tags: tuple[str, ...] = ()


class Fn(nn.Module):
    """A module around a function of the inputs (buffers/params given as ``state``)."""

    def __init__(self, fn, params=None, buffers=None):
        super().__init__()
        self.fn = fn
        for k, v in (params or {}).items():
            self.register_parameter(k, nn.Parameter(v, requires_grad=False))
        for k, v in (buffers or {}).items():
            self.register_buffer(k, v)

    def forward(self, *args, **kwargs):
        return self.fn(self, *args, **kwargs)


# --- value makers -----------------------------------------------------------------------

def rand(shape, dtype, g, *, low=-2.0, high=2.0, positive=False):
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype in (torch.complex64, torch.complex128):
        real = torch.float32 if dtype == torch.complex64 else torch.float64
        return torch.complex(rand(shape, real, g), rand(shape, real, g))
    if not dtype.is_floating_point:
        lo = 1 if positive else (0 if dtype == torch.uint8 else -5)
        return torch.randint(lo, 6, shape, generator=g, dtype=dtype)
    lo = 0.25 if positive else low
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - lo) + lo).to(dtype)


def _args(*makers):
    return lambda g: (tuple(m(g) for m in makers), {})


def _t(shape, dtype, **kw):
    return lambda g: rand(shape, dtype, g, **kw)


F32, F64, F16, I32, I64, BOOL, C64, C128 = (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64,
                                            torch.bool, torch.complex64, torch.complex128)
DT = {F32: "f32", F64: "f64", F16: "f16", I32: "i32", I64: "i64", BOOL: "bool", C64: "c64", C128: "c128"}


def _shape_name(*shapes) -> str:
    return "+".join("x".join(map(str, s)) if s else "0d" for s in shapes)


# --- elementwise ------------------------------------------------------------------------
FLOAT_ONLY, ANY_NUM, INT_ONLY, BOOL_ONLY = "float", "num", "int", "bool"
UNARY = [
    # name, fn, domain, positive inputs
    ("neg", torch.neg, ANY_NUM, False), ("abs", torch.abs, ANY_NUM, False), ("exp", torch.exp, FLOAT_ONLY, False),
    ("log", torch.log, FLOAT_ONLY, True), ("sqrt", torch.sqrt, FLOAT_ONLY, True), ("rsqrt", torch.rsqrt, FLOAT_ONLY, True),
    ("sin", torch.sin, FLOAT_ONLY, False), ("cos", torch.cos, FLOAT_ONLY, False), ("tanh", torch.tanh, FLOAT_ONLY, False),
    ("sigmoid", torch.sigmoid, FLOAT_ONLY, False), ("relu", torch.relu, FLOAT_ONLY, False),
    ("gelu", F.gelu, FLOAT_ONLY, False), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), FLOAT_ONLY, False),
    ("silu", F.silu, FLOAT_ONLY, False), ("erf", torch.erf, FLOAT_ONLY, False), ("floor", torch.floor, FLOAT_ONLY, False),
    ("ceil", torch.ceil, FLOAT_ONLY, False), ("round", torch.round, FLOAT_ONLY, False),
    ("reciprocal", torch.reciprocal, FLOAT_ONLY, True), ("softplus", F.softplus, FLOAT_ONLY, False),
    ("elu", F.elu, FLOAT_ONLY, False), ("leaky_relu", F.leaky_relu, FLOAT_ONLY, False),
    ("hardswish", F.hardswish, FLOAT_ONLY, False), ("clamp", lambda x: torch.clamp(x, -1, 1), ANY_NUM, False),
    ("sign", torch.sign, ANY_NUM, False), ("square", torch.square, ANY_NUM, False),
    ("logical_not", torch.logical_not, BOOL_ONLY, False), ("bitwise_not", torch.bitwise_not, INT_ONLY, False),
    ("log1p", torch.log1p, FLOAT_ONLY, True), ("expm1", torch.expm1, FLOAT_ONLY, False),
    ("atan", torch.atan, FLOAT_ONLY, False), ("trunc", torch.trunc, FLOAT_ONLY, False),
]


def _domain_dtypes(domain):
    return {FLOAT_ONLY: [F32, F64, F16], ANY_NUM: [F32, I32, I64, F64], INT_ONLY: [I32, I64], BOOL_ONLY: [BOOL]}[domain]


def unary_programs():
    for name, fn, domain, positive in UNARY:
        for dtype in _domain_dtypes(domain):
            shapes = {F32: [(), (3, 5)], F64: [(3, 5)]}.get(dtype, [(7,)])
            for shape in shapes:
                tol = 2e-3 if dtype == F16 else 1e-3
                yield Program(f"elementwise/{name}/{DT[dtype]}/{_shape_name(shape)}", "elementwise",
                              lambda fn=fn: Fn(lambda m, x: fn(x)), _args(_t(shape, dtype, positive=positive)), rtol=tol,
                              atol=1e-3 if dtype == F16 else 1e-5,
                              tags=(("f64",) if dtype == F64 else ()) + (("0d",) if shape == () else ()))


BINARY = [
    ("add", torch.add, ANY_NUM), ("sub", torch.sub, ANY_NUM), ("mul", torch.mul, ANY_NUM),
    ("div", lambda a, b: a / (b.abs() + 1), ANY_NUM), ("maximum", torch.maximum, ANY_NUM),
    ("minimum", torch.minimum, ANY_NUM), ("pow", lambda a, b: a.abs().pow(b.clamp(-2, 2)), FLOAT_ONLY),
    ("atan2", torch.atan2, FLOAT_ONLY), ("remainder", lambda a, b: torch.remainder(a, b.abs() + 1), ANY_NUM),
    ("floor_divide", lambda a, b: torch.floor_divide(a, b.abs() + 1), ANY_NUM), ("eq", torch.eq, ANY_NUM),
    ("lt", torch.lt, ANY_NUM), ("ge", torch.ge, ANY_NUM),
    ("where", lambda a, b: torch.where(a > b, a, b * 2), ANY_NUM), ("add_alpha", lambda a, b: torch.add(a, b, alpha=3), ANY_NUM),
    ("bitwise_and", torch.bitwise_and, INT_ONLY), ("bitwise_xor", torch.bitwise_xor, INT_ONLY),
    ("logical_and", torch.logical_and, BOOL_ONLY), ("scalar_rsub", lambda a, b: 2.5 - a * b, FLOAT_ONLY),
]
BINARY_SHAPES = [((4, 5), (4, 5)), ((4, 1), (1, 5)), ((), (3,))]


def binary_programs():
    for name, fn, domain in BINARY:
        for dtype in _domain_dtypes(domain):
            if dtype == F16:
                continue
            shapes = BINARY_SHAPES if dtype == F32 else BINARY_SHAPES[1:2]
            for sa, sb in shapes:
                yield Program(f"elementwise/{name}/{DT[dtype]}/{_shape_name(sa, sb)}", "elementwise",
                              lambda fn=fn: Fn(lambda m, a, b: fn(a, b)), _args(_t(sa, dtype), _t(sb, dtype)),
                              tags=("f64",) if dtype == F64 else ())


# --- mixed dtypes -----------------------------------------------------------------------
MIXED = [
    ("f32_plus_i64", F32, I64, lambda a, b: a + b), ("i32_times_f16", I32, F16, lambda a, b: a * b),
    ("mask_f32", BOOL, F32, lambda a, b: b * a), ("i64_div_i64", I64, I64, lambda a, b: a / (b.abs() + 1)),
    ("to_f16_back", F32, F32, lambda a, b: (a.half() + b.half()).float()), ("to_i32", F32, F32, lambda a, b: (a * 3).to(torch.int32) + b.int()),
    ("bool_sum", BOOL, BOOL, lambda a, b: (a & b).sum()), ("f64_plus_f32", F64, F32, lambda a, b: a + b),
    ("int_mean", I64, F32, lambda a, b: a.float().mean() + b), ("where_mixed", BOOL, I32, lambda a, b: torch.where(a, b, 1.5)),
]


def mixed_programs():
    for name, da, db, fn in MIXED:
        yield Program(f"mixed/{name}/{DT[da]}-{DT[db]}/3x4", "mixed", lambda fn=fn: Fn(lambda m, a, b: fn(a, b)),
                      _args(_t((3, 4), da), _t((3, 4), db)), rtol=2e-3, atol=2e-3)


# --- reductions ----------------------------------------------------------------------------
REDUCTIONS = [
    ("sum", lambda x, d, k: x.sum() if d is None else x.sum(d, keepdim=k)),
    ("mean", lambda x, d, k: x.mean() if d is None else x.mean(d, keepdim=k)),
    ("amax", lambda x, d, k: x.amax() if d is None else x.amax(d, keepdim=k)),
    ("amin", lambda x, d, k: x.amin() if d is None else x.amin(d, keepdim=k)),
    ("prod", lambda x, d, k: x.prod() if d is None else x.prod(d, keepdim=k)),
    ("argmax", lambda x, d, k: x.argmax() if d is None else x.argmax(d, keepdim=k)),
    ("argmin", lambda x, d, k: x.argmin() if d is None else x.argmin(d, keepdim=k)),
    ("var", lambda x, d, k: x.var() if d is None else x.var(d, keepdim=k)),
    ("std", lambda x, d, k: x.std() if d is None else x.std(d, keepdim=k)),
    ("norm", lambda x, d, k: x.norm() if d is None else x.norm(dim=d, keepdim=k)),
    ("logsumexp", lambda x, d, k: x.logsumexp(0 if d is None else d, keepdim=k)),
    ("softmax", lambda x, d, k: x.softmax(-1 if d is None else d)),
    ("log_softmax", lambda x, d, k: x.log_softmax(-1 if d is None else d)),
    ("cumsum", lambda x, d, k: x.cumsum(0 if d is None else d)),
    ("max_dim", lambda x, d, k: x.max(0 if d is None else d, keepdim=k)),  # (values, indices)
    ("sort", lambda x, d, k: x.sort(-1 if d is None else d)),
    ("topk", lambda x, d, k: x.topk(2, -1 if d is None else d)),
    ("all", lambda x, d, k: (x > 0).all() if d is None else (x > 0).all(d)),
    ("any", lambda x, d, k: (x > 0).any() if d is None else (x > 0).any(d)),
]
REDUCE_DIMS = [(None, False), (1, False), (-1, True)]


def reduction_programs():
    for name, fn in REDUCTIONS:
        for dtype in (F32, F64):
            for dim, keep in (REDUCE_DIMS if dtype == F32 else REDUCE_DIMS[:1]):
                shape = (4, 6)
                tag = f"{'all' if dim is None else dim}{'k' if keep else ''}"
                yield Program(f"reduction/{name}/{DT[dtype]}/{_shape_name(shape)}-{tag}", "reduction",
                              lambda fn=fn, dim=dim, keep=keep: Fn(lambda m, x: fn(x, dim, keep)), _args(_t(shape, dtype, positive=name == "prod")),
                              tags=("f64",) if dtype == F64 else ())
    for name, fn in [("sum_i32", lambda x: x.sum()), ("sum_i64_dim", lambda x: x.sum(0)), ("max_i32", lambda x: x.amax(1))]:
        yield Program(f"reduction/{name}/i32/4x6", "reduction", lambda fn=fn: Fn(lambda m, x: fn(x)), _args(_t((4, 6), I32)))


# --- indexing, scatter, gather --------------------------------------------------------------
def _idx(shape, high):
    return lambda g: torch.randint(0, high, shape, generator=g)


INDEXING = [
    ("gather", lambda x, i: torch.gather(x, 1, i), (4, 6), (4, 3), 6),
    ("scatter", lambda x, i: torch.zeros_like(x).scatter(1, i, x[:, :3]), (4, 6), (4, 3), 6),
    ("scatter_add", lambda x, i: torch.zeros_like(x).scatter_add(1, i, x[:, :3]), (4, 6), (4, 3), 6),
    ("scatter_reduce_amax", lambda x, i: torch.zeros_like(x).scatter_reduce(1, i, x[:, :3], "amax", include_self=False), (4, 6), (4, 3), 6),
    ("index_select", lambda x, i: torch.index_select(x, 0, i), (5, 3), (4,), 5),
    ("advanced_index", lambda x, i: x[i], (5, 3), (2, 2), 5),
    ("advanced_index_2d", lambda x, i: x[i, i], (5, 5), (3,), 5),
    ("index_put", lambda x, i: x.index_put((i,), torch.ones(i.shape[0], x.shape[1])), (5, 3), (2,), 5),
    ("index_add", lambda x, i: x.index_add(0, i, torch.ones(i.shape[0], x.shape[1])), (5, 3), (2,), 5),
    ("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 1), (4, 6), (4, 2), 6),
    ("embedding", lambda x, i: F.embedding(i, x), (10, 4), (2, 3), 10),
    ("one_hot", lambda x, i: F.one_hot(i, 6).float() + x.sum(), (2,), (5,), 6),
]


def indexing_programs():
    for name, fn, xs, ishape, high in INDEXING:
        yield Program(f"indexing/{name}/f32/{_shape_name(xs, ishape)}", "indexing", lambda fn=fn: Fn(lambda m, x, i: fn(x, i)),
                      _args(_t(xs, F32), _idx(ishape, high)))
    slices = [
        ("slice_step", lambda x: x[:, 1::2]), ("slice_neg", lambda x: x[-3:, :-1]), ("masked_fill", lambda x: x.masked_fill(x > 0, -1.0)),
        ("narrow", lambda x: x.narrow(1, 1, 3)), ("select", lambda x: x[2]), ("select_0d", lambda x: x[1, 2]),
        ("flip", lambda x: x.flip(0)), ("roll", lambda x: x.roll(2, 1)), ("tril", lambda x: x.tril()), ("triu", lambda x: x.triu(1)),
        ("diagonal", lambda x: x[:4, :4].diagonal()), ("setitem_copy", lambda x: _setitem(x)),
    ]
    for name, fn in slices:
        yield Program(f"indexing/{name}/f32/5x6", "indexing", lambda fn=fn: Fn(lambda m, x: fn(x)), _args(_t((5, 6), F32)),
                      tags=("0d",) if name == "select_0d" else ())


def _setitem(x):
    y = x.clone()
    y[1:3, 2] = 7.0
    return y


# --- pooling, conv, matmul -------------------------------------------------------------------
POOLING = [
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), (1, 3, 8, 8)),
    ("max_pool2d_s1p1", lambda x: F.max_pool2d(x, 3, 1, 1), (1, 2, 7, 7)),
    ("max_pool2d_indices", lambda x: F.max_pool2d(x, 2, return_indices=True), (1, 3, 8, 8)),
    ("max_pool2d_indices_p1", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), (2, 2, 9, 9)),
    ("max_pool1d", lambda x: F.max_pool1d(x, 2), (1, 3, 10)),
    ("max_pool1d_indices", lambda x: F.max_pool1d(x, 2, return_indices=True), (1, 3, 10)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2), (1, 3, 8, 8)),
    ("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (1, 3, 9, 9)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, 1), (2, 4, 6, 6)),
    ("adaptive_avg_pool2d_3", lambda x: F.adaptive_avg_pool2d(x, 3), (1, 2, 6, 6)),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, 2), (1, 2, 6, 6)),
    ("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 1), (1, 2, 9)),
    ("upsample_nearest", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (1, 2, 4, 4)),
    ("upsample_bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), (1, 2, 4, 4)),
]


def pooling_programs():
    for name, fn, shape in POOLING:
        for dtype in (F32, F64):
            if dtype == F64 and "indices" not in name and name not in ("max_pool2d", "avg_pool2d"):
                continue
            yield Program(f"pooling/{name}/{DT[dtype]}/{_shape_name(shape)}", "pooling", lambda fn=fn: Fn(lambda m, x: fn(x)),
                          _args(_t(shape, dtype)), tags=("f64",) if dtype == F64 else ())


CONVS = [
    ("conv2d", lambda: nn.Conv2d(3, 4, 3), (1, 3, 8, 8)), ("conv2d_s2p1", lambda: nn.Conv2d(3, 4, 3, 2, 1), (2, 3, 9, 9)),
    ("conv2d_groups", lambda: nn.Conv2d(4, 4, 3, padding=1, groups=2), (1, 4, 6, 6)),
    ("conv2d_depthwise", lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), (1, 4, 6, 6)),
    ("conv2d_dilation", lambda: nn.Conv2d(2, 3, 3, dilation=2), (1, 2, 9, 9)),
    ("conv1d", lambda: nn.Conv1d(3, 5, 3, padding=1), (2, 3, 10)),
    ("conv_transpose2d", lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), (1, 3, 4, 4)),
    ("conv_transpose1d", lambda: nn.ConvTranspose1d(3, 2, 3), (1, 3, 6)),
    ("conv_bn_relu", lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4).eval(), nn.ReLU()), (1, 3, 6, 6)),
    ("conv3d", lambda: nn.Conv3d(2, 2, 3), (1, 2, 5, 5, 5)),
]


def _seeded(factory, dtype=F32):
    def make():
        torch.manual_seed(0)
        m = factory().eval()
        with torch.no_grad():
            for b in m.buffers():
                if b.dtype.is_floating_point:
                    b.uniform_(0.5, 1.5)
        return m.to(dtype)
    return make


def conv_programs():
    for name, factory, shape in CONVS:
        for dtype in (F32, F64):
            if dtype == F64 and name not in ("conv2d", "conv1d"):
                continue
            yield Program(f"conv/{name}/{DT[dtype]}/{_shape_name(shape)}", "conv", _seeded(factory, dtype), _args(_t(shape, dtype)),
                          tags=("f64",) if dtype == F64 else ())


MATMULS = [
    ("mm", lambda a, b: a @ b, (4, 5), (5, 3)), ("bmm", torch.bmm, (2, 4, 5), (2, 5, 3)),
    ("matmul_bcast", torch.matmul, (2, 3, 4, 5), (5, 6)), ("matmul_vec", torch.matmul, (4, 5), (5,)),
    ("dot", torch.dot, (6,), (6,)), ("outer", torch.outer, (3,), (4,)),
    ("einsum_bij_bjk", lambda a, b: torch.einsum("bij,bjk->bik", a, b), (2, 3, 4), (2, 4, 5)),
    ("einsum_trace", lambda a, b: torch.einsum("ii->", a @ b), (3, 4), (4, 3)),
    ("addmm", lambda a, b: torch.addmm(b[:1, :], a, b), (3, 4), (4, 4)),
    ("baddbmm", lambda a, b: torch.baddbmm(a @ b, a, b, alpha=0.5), (2, 3, 3), (2, 3, 3)),
    ("mm_relu_bias", lambda a, b: torch.relu(a @ b + 1.0), (8, 16), (16, 8)),
]


def matmul_programs():
    for name, fn, sa, sb in MATMULS:
        for dtype in (F32, F64, I32):
            if dtype == I32 and name not in ("mm", "bmm"):
                continue
            if dtype == F64 and name not in ("mm", "bmm", "dot", "matmul_bcast"):
                continue
            yield Program(f"matmul/{name}/{DT[dtype]}/{_shape_name(sa, sb)}", "matmul", lambda fn=fn: Fn(lambda m, a, b: fn(a, b)),
                          _args(_t(sa, dtype), _t(sb, dtype)), tags=(("f64",) if dtype == F64 else ()) + (("0d",) if name in ("dot", "einsum_trace") else ()))
    layers = [
        ("linear", lambda: nn.Linear(8, 4), (3, 8)), ("linear_nobias", lambda: nn.Linear(8, 4, bias=False), (2, 5, 8)),
        ("mlp_gelu", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)), (4, 8)),
        ("mlp_gelu_tanh", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU("tanh"), nn.Linear(16, 4)), (4, 8)),
        ("mlp_silu", lambda: nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 8)), (4, 8)),
        ("layer_norm", lambda: nn.LayerNorm(8), (3, 8)), ("rms_norm", lambda: nn.RMSNorm(8), (3, 8)),
        ("group_norm", lambda: nn.GroupNorm(2, 4), (2, 4, 3, 3)), ("batch_norm_eval", lambda: nn.BatchNorm1d(4), (3, 4)),
        ("mha", lambda: nn.MultiheadAttention(8, 2, batch_first=True), (1, 5, 8)),
        ("transformer_layer", lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), (2, 5, 8)),
        ("gru_cell", lambda: nn.GRUCell(4, 6), (2, 4)), ("lstm", lambda: nn.LSTM(4, 6, batch_first=True), (2, 3, 4)),
    ]
    for name, factory, shape in layers:
        for dtype in (F32, F64):
            if dtype == F64 and name not in ("linear", "mlp_gelu", "layer_norm", "mha"):
                continue
            inputs = (lambda g, shape=shape, dtype=dtype: ((rand(shape, dtype, g),) * 3, {})) if name == "mha" else _args(_t(shape, dtype))
            yield Program(f"layers/{name}/{DT[dtype]}/{_shape_name(shape)}", "layers", _seeded(factory, dtype), inputs,
                          tags=("f64",) if dtype == F64 else ())


# --- views and shape ops --------------------------------------------------------------------
VIEWS = [
    ("reshape", lambda x: x.reshape(6, -1)), ("permute", lambda x: x.permute(2, 0, 1) + 0), ("transpose", lambda x: x.transpose(0, 2).contiguous()),
    ("flatten", lambda x: x.flatten(1)), ("unsqueeze", lambda x: x.unsqueeze(1) * 2), ("squeeze", lambda x: x[:, :1].squeeze(1)),
    ("expand", lambda x: x[:, :1, :].expand(-1, 5, -1) + 0), ("cat", lambda x: torch.cat([x, x * 2], 1)),
    ("stack", lambda x: torch.stack([x, -x], 0)), ("split", lambda x: x.split(1, 1)), ("chunk", lambda x: x.chunk(2, 2)),
    ("unbind", lambda x: x.unbind(0)), ("repeat", lambda x: x.repeat(1, 2, 1)), ("pad", lambda x: F.pad(x, (1, 2))),
    ("pad_reflect", lambda x: F.pad(x, (1, 1), mode="reflect")), ("view_dtype_sum", lambda x: x.view(-1).sum(0, keepdim=True)),
    ("tile", lambda x: x.tile(2)), ("movedim", lambda x: x.movedim(0, -1) * 1), ("t_mm", lambda x: x[0].t() @ x[0]),
    ("arange_add", lambda x: x + torch.arange(4, dtype=x.dtype)), ("zeros_like_fill", lambda x: torch.full_like(x, 3.0) - x),
    ("new_ones", lambda x: x.new_ones(2, 2) * x.mean()),
]


def view_programs():
    for name, fn in VIEWS:
        for dtype in (F32, I64):
            if dtype == I64 and name not in ("reshape", "cat", "permute", "split"):
                continue
            yield Program(f"views/{name}/{DT[dtype]}/2x3x4", "views", lambda fn=fn: Fn(lambda m, x: fn(x)), _args(_t((2, 3, 4), dtype)))


# --- in-place mutation of inputs and buffers -----------------------------------------------------
def _counter(m, x):
    m.count.add_(1)
    return x * m.count


def _running_mean(m, x):
    m.mean.mul_(0.9).add_(0.1 * x.mean(0))
    return x - m.mean


def _cache_write(m, x):
    m.cache[: x.shape[0]].copy_(x)
    return m.cache.sum(0)


INPLACE = [
    # name, fn(m, x, b), buffers, calls
    ("add_return_input", lambda m, x, b: x.add_(b), None, 1),
    ("mul_return_other", lambda m, x, b: x.mul_(2) + b, None, 1),
    ("relu_inplace_both", lambda m, x, b: (x.relu_(), b * 2), None, 1),
    ("mutate_not_returned", lambda m, x, b: (x.sub_(1), b)[1] + 1, None, 1),
    ("mutate_two_inputs", lambda m, x, b: (x.add_(1), b.mul_(3))[0] + b, None, 1),
    ("setitem_input", lambda m, x, b: _setitem_input(x, b), None, 1),
    ("copy_into_input", lambda m, x, b: x.copy_(b * 2).sum(), None, 1),
    ("index_put_input", lambda m, x, b: x.index_put_((torch.tensor([0, 2]),), b[:2]).clone(), None, 1),
    ("clamp_inplace", lambda m, x, b: x.clamp_(-0.5, 0.5) * b, None, 1),
    ("buffer_counter", lambda m, x, b: _counter(m, x) + b, {"count": torch.zeros(())}, 3),
    ("buffer_running_mean", lambda m, x, b: _running_mean(m, x) + b, {"mean": torch.zeros(4)}, 3),
    ("buffer_cache", lambda m, x, b: _cache_write(m, x) + b.sum(), {"cache": torch.zeros(6, 4)}, 2),
    ("buffer_and_input", lambda m, x, b: _counter(m, x.add_(b)), {"count": torch.zeros(())}, 2),
]


def _setitem_input(x, b):
    x[0] = b[0]
    return x * 2


def inplace_programs():
    for name, fn, buffers, calls in INPLACE:
        for dtype in (F32, F64):
            if dtype == F64 and name not in ("add_return_input", "buffer_counter"):
                continue
            yield Program(f"inplace/{name}/{DT[dtype]}/3x4", "inplace",
                          lambda fn=fn, buffers=buffers, dtype=dtype: Fn(fn, buffers={k: v.clone().to(dtype) for k, v in (buffers or {}).items()}),
                          _args(_t((3, 4), dtype), _t((3, 4), dtype)), calls=calls,
                          tags=("mutation",) + (("f64",) if dtype == F64 else ()))
    bn = lambda: nn.BatchNorm1d(4).train()  # running stats are buffer mutations
    yield Program("inplace/batch_norm_train/f32/8x4", "inplace", bn, _args(_t((8, 4), F32)), calls=2, tags=("mutation",))


# --- random ops (values differ between RNGs: shape, dtype and range are checked) ------------------
RANDOM = [
    ("rand_like", lambda x: torch.rand_like(x), "0,1"), ("randn_like_abs", lambda x: torch.randn_like(x).abs().clamp(max=10), "0,10"),
    ("randint_i64", lambda x: torch.randint(0, 10, (3, 4)) + x.long(), "-10,20"),
    ("randint_i32", lambda x: torch.randint(0, 10, (3, 4), dtype=torch.int32), "0,9"),
    ("randint_like", lambda x: torch.randint_like(x, 5), "0,4"),
    ("randint_f32_dtype", lambda x: torch.randint(3, 8, (3, 4), dtype=torch.float32), "3,7"),
    ("bernoulli", lambda x: torch.bernoulli(torch.full_like(x, 0.5)), "0,1"),
    ("rand_seeded", lambda x: _seeded_rand(x), "0,1"),
    ("dropout_train", lambda x: F.dropout(torch.ones_like(x), 0.5, training=True), "0,2"),
    ("uniform_", lambda x: torch.empty_like(x).uniform_(-1, 1), "-1,1"),
    ("normal_", lambda x: torch.empty_like(x).normal_().clamp(-3, 3), "-3,3"),
    ("randperm", lambda x: torch.randperm(6) + x.long()[0, 0] * 0, "0,5"),
]


def _seeded_rand(x):
    g = torch.Generator().manual_seed(0)
    return torch.rand(x.shape, generator=g)


def random_programs():
    for name, fn, bounds in RANDOM:
        yield Program(f"random/{name}/f32/3x4", "random", lambda fn=fn: Fn(lambda m, x: fn(x)), _args(_t((3, 4), F32)),
                      check=f"random:{bounds}")


# --- complex ------------------------------------------------------------------------------
COMPLEX = [
    ("mul", lambda a, b: a * b), ("add", lambda a, b: a + b), ("abs", lambda a, b: a.abs()), ("real_imag", lambda a, b: a.real * b.imag),
    ("view_as_real", lambda a, b: torch.view_as_real(a * b)), ("conj", lambda a, b: a.conj() * b), ("angle", lambda a, b: a.angle()),
    ("exp", lambda a, b: torch.exp(a)), ("matmul", lambda a, b: a @ b.transpose(0, 1)), ("sum", lambda a, b: a.sum()),
    ("complex_from_parts", lambda a, b: torch.complex(a.real, b.imag) * 2), ("view_as_complex", lambda a, b: torch.view_as_complex(torch.view_as_real(a) * 2)),
]


def complex_programs():
    for name, fn in COMPLEX:
        for dtype in (C64, C128):
            if dtype == C128 and name not in ("mul", "abs", "matmul"):
                continue
            yield Program(f"complex/{name}/{DT[dtype]}/3x3", "complex", lambda fn=fn: Fn(lambda m, a, b: fn(a, b)),
                          _args(_t((3, 3), dtype), _t((3, 3), dtype)), tags=("complex",))


# --- float64 that float32 cannot compute ---------------------------------------------------------
def f64_programs():
    yield Program("f64/cancel/f64/16", "f64", lambda: Fn(lambda m, x: (x + 1e8) - 1e8), _args(_t((16,), F64)), rtol=1e-9, atol=1e-12, tags=("f64",))
    yield Program("f64/tiny_sum/f64/64", "f64", lambda: Fn(lambda m, x: (x * 1e-12).sum() + 1.0), _args(_t((64,), F64)), rtol=1e-14, atol=0, tags=("f64", "0d"))
    yield Program("f64/exp_big/f64/8", "f64", lambda: Fn(lambda m, x: torch.exp(x * 200)), _args(_t((8,), F64, positive=True)), rtol=1e-9, tags=("f64",))
    yield Program("f64/double_mlp/f64/4x8", "f64", _seeded(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)), F64),
                  _args(_t((4, 8), F64)), rtol=1e-9, atol=1e-12, tags=("f64",))
    yield Program("f64/mixed_out/f64/4", "f64", lambda: Fn(lambda m, x: (x.double() / 3, x.float())), _args(_t((4,), F64)), rtol=1e-12, atol=0, tags=("f64",))


# --- 0-d tensors -------------------------------------------------------------------------------
ZERO_D = [
    ("in_add", lambda x, y: x + y, (), (3,)), ("in_in", lambda x, y: x * y + 1, (), ()), ("out_sum", lambda x, y: (x * y).sum(), (3, 4), (3, 4)),
    ("out_mean_pair", lambda x, y: (x.mean(), y.amax()), (5,), (5,)), ("out_item_like", lambda x, y: x[0, 0] * y[1], (2, 2), (3,)),
    ("in_int", lambda x, y: y * x, (), (4,)), ("out_dot", lambda x, y: torch.dot(x, y), (4,), (4,)),
]


def zero_d_programs():
    for name, fn, sa, sb in ZERO_D:
        for dtype in (F32, I64, F64):
            if dtype != F32 and name not in ("in_add", "out_sum", "in_int"):
                continue
            yield Program(f"zero_d/{name}/{DT[dtype]}/{_shape_name(sa, sb)}", "zero_d", lambda fn=fn: Fn(lambda m, a, b: fn(a, b)),
                          _args(_t(sa, dtype), _t(sb, dtype)), tags=("0d",))


# --- Python scalars in and out --------------------------------------------------------------------
def scalar_programs():
    yield Program("scalars/float_arg/f32/4", "scalars", lambda: Fn(lambda m, x, a: x * a), lambda g: ((rand((4,), F32, g), 2.5), {}))
    yield Program("scalars/int_arg/f32/4", "scalars", lambda: Fn(lambda m, x, n: x + n), lambda g: ((rand((4,), F32, g), 3), {}))
    yield Program("scalars/bool_arg/f32/4", "scalars", lambda: Fn(lambda m, x, flag: x * 2 if flag else x), lambda g: ((rand((4,), F32, g), True), {}))
    yield Program("scalars/int_result/f32/4", "scalars", lambda: Fn(lambda m, x: (x * 2, x.shape[0])), _args(_t((4,), F32)))
    yield Program("scalars/float_result/f32/4", "scalars", lambda: Fn(lambda m, x: (x + 1, 0.5)), _args(_t((4,), F32)))
    yield Program("scalars/none_result/f32/4", "scalars", lambda: Fn(lambda m, x: (x + 1, None)), _args(_t((4,), F32)))
    yield Program("scalars/float_kwarg/f32/4", "scalars", lambda: Fn(lambda m, x, scale=1.0: x * scale), lambda g: ((rand((4,), F32, g),), {"scale": 0.5}))
    yield Program("scalars/str_arg/f32/4", "scalars", lambda: Fn(lambda m, x, mode: x.relu() if mode == "relu" else x), lambda g: ((rand((4,), F32, g), "relu"), {}))
    yield Program("scalars/shape_result/f32/3x4", "scalars", lambda: Fn(lambda m, x: (x.sum(0), tuple(x.shape))), _args(_t((3, 4), F32)))


# --- data-dependent programs ------------------------------------------------------------------------
def data_dependent_programs():
    yield Program("data_dependent/item_scale/f32/4", "data_dependent", lambda: Fn(lambda m, x: x * x.max().item()), _args(_t((4,), F32)))
    yield Program("data_dependent/int_item/f32/4", "data_dependent", lambda: Fn(lambda m, x: x + int(x.abs().sum().item() > 1)), _args(_t((4,), F32)))
    yield Program("data_dependent/branch_on_value/f32/4", "data_dependent", lambda: Fn(lambda m, x: x * 2 if x.sum() > -100 else x), _args(_t((4,), F32)))
    yield Program("data_dependent/float_of_tensor/f32/4", "data_dependent", lambda: Fn(lambda m, x: x + float(x[0])), _args(_t((4,), F32)))
    yield Program("data_dependent/bool_of_tensor/f32/4", "data_dependent", lambda: Fn(lambda m, x: x - 1 if bool((x > 10).any()) else x + 1), _args(_t((4,), F32)))
    yield Program("data_dependent/size_from_value/f32/4", "data_dependent", lambda: Fn(lambda m, x, n: x[: int(n.item())]), lambda g: ((rand((6,), F32, g), torch.tensor(3)), {}))


# --- output and input pytrees -------------------------------------------------------------------------
Pair = collections.namedtuple("Pair", ["first", "second"])


def _model_output_cls():
    try:
        from transformers.modeling_outputs import BaseModelOutput
    except Exception:
        return None
    return BaseModelOutput


def pytree_programs():
    yield Program("pytree/dict_out/f32/3", "pytree", lambda: Fn(lambda m, x, y: {"sum": x + y, "pair": (x * 2, [y - 1])}),
                  _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/tuple_out/f32/3", "pytree", lambda: Fn(lambda m, x, y: (x + y, x * y)), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/single_tuple_out/f32/3", "pytree", lambda: Fn(lambda m, x, y: (x + y,)), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/list_out/f32/3", "pytree", lambda: Fn(lambda m, x, y: [x, y, x - y]), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/nested/f32/3", "pytree", lambda: Fn(lambda m, x, y: ((x, (y, [x + y])), {"a": {"b": y * 3}})), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/namedtuple_out/f32/3", "pytree", lambda: Fn(lambda m, x, y: Pair(x + 1, y + 2)), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/same_tensor_twice/f32/3", "pytree", lambda: Fn(lambda m, x, y: (x + y, x + y, x)), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/input_returned/f32/3", "pytree", lambda: Fn(lambda m, x, y: (x, y * 2)), _args(_t((3,), F32), _t((3,), F32)))
    yield Program("pytree/kwargs_in/f32/3", "pytree", lambda: Fn(lambda m, x, *, bias: x + bias), lambda g: ((rand((3,), F32, g),), {"bias": rand((3,), F32, g)}))
    yield Program("pytree/dict_in/f32/3", "pytree", lambda: Fn(lambda m, d: d["a"] * d["b"]), lambda g: (({"a": rand((3,), F32, g), "b": rand((3,), F32, g)},), {}))
    yield Program("pytree/list_in/f32/3", "pytree", lambda: Fn(lambda m, xs: xs[0] + xs[1] * xs[2]), lambda g: (([rand((3,), F32, g) for _ in range(3)],), {}))
    yield Program("pytree/tuple_in_dict_out/f32/3", "pytree", lambda: Fn(lambda m, t: {"x": t[0].sum(), "y": t[1]}), lambda g: (((rand((3,), F32, g), rand((2,), F32, g)),), {}))
    cls = _model_output_cls()
    if cls is not None:
        yield Program("pytree/hf_model_output/f32/3", "pytree", lambda: Fn(lambda m, x, y: cls(last_hidden_state=x * y)), _args(_t((3,), F32), _t((3,), F32)))


# --- dynamic dims ----------------------------------------------------------------------------------
def _dyn(name, fn, shape, call_shape, dims, dtype=F32, n_inputs=1, factory=None):
    batch = Dim("batch", min=2, max=64)
    dynamic = tuple({d: batch for d in dims} for _ in range(n_inputs))
    if factory is None:  # Fn.forward(*xs): the varargs' dynamic shapes are one tuple
        dynamic = (dynamic,)
    make = factory or (lambda fn=fn: Fn(lambda m, *xs: fn(*xs)))
    return Program(f"dynamic/{name}/{DT[dtype]}/{_shape_name(shape)}-to-{_shape_name(call_shape)}", "dynamic", make,
                   lambda g: (tuple(rand(shape, dtype, g) for _ in range(n_inputs)), {}), dynamic_shapes=dynamic,
                   call_inputs=lambda g: (tuple(rand(call_shape, dtype, g) for _ in range(n_inputs)), {}), tags=("dynamic",))


def dynamic_programs():
    yield _dyn("add", lambda a, b: a + b, (4, 8), (7, 8), [0], n_inputs=2)
    yield _dyn("softmax", lambda x: x.softmax(-1), (4, 8), (9, 8), [0])
    yield _dyn("sum_dim", lambda x: x.sum(0), (4, 8), (2, 8), [0])
    yield _dyn("mean_last", lambda x: x.mean(-1), (4, 8), (6, 8), [0])
    yield _dyn("reshape", lambda x: x.reshape(-1, 4), (4, 8), (3, 8), [0])
    yield _dyn("cat", lambda a, b: torch.cat([a, b], 0), (4, 8), (5, 8), [0], n_inputs=2)
    yield _dyn("matmul", lambda a, b: a @ b.transpose(0, 1), (4, 8), (3, 8), [0], n_inputs=2)
    yield _dyn("linear", None, (4, 8), (11, 8), [0], factory=_seeded(lambda: nn.Linear(8, 4)))
    yield _dyn("mlp_gelu", None, (4, 8), (5, 8), [0], factory=_seeded(lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))))
    yield _dyn("layer_norm", None, (4, 8), (6, 8), [0], factory=_seeded(lambda: nn.LayerNorm(8)))
    yield _dyn("attention", lambda q, k: F.scaled_dot_product_attention(q, k, k), (1, 2, 4, 8), (1, 2, 7, 8), [2], n_inputs=2)
    yield _dyn("mha_block", None, (2, 5, 8), (3, 5, 8), [0], factory=_seeded(lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)))
    yield _dyn("conv_batch", None, (2, 3, 6, 6), (3, 3, 6, 6), [0], factory=_seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())))
    yield _dyn("f64_linear", None, (4, 8), (6, 8), [0], dtype=F64, factory=_seeded(lambda: nn.Linear(8, 4), F64))


FAMILIES = {
    "elementwise": lambda: [*unary_programs(), *binary_programs()],
    "mixed": mixed_programs, "reduction": reduction_programs, "indexing": indexing_programs, "pooling": pooling_programs,
    "conv": conv_programs, "matmul": matmul_programs, "views": view_programs, "inplace": inplace_programs,
    "random": random_programs, "complex": complex_programs, "f64": f64_programs, "zero_d": zero_d_programs,
    "scalars": scalar_programs, "data_dependent": data_dependent_programs, "pytree": pytree_programs, "dynamic": dynamic_programs,
    "dtypes": lambda: [], "empty": lambda: [], "ops": lambda: [], "modules": lambda: [],
}


def _family(name: str) -> list[Program]:
    """A family's table here plus its programs in more_programs.py."""
    import more_programs

    return [*FAMILIES[name](), *more_programs.programs(name)]


def all_programs() -> list[Program]:
    out = [p for name in FAMILIES for p in _family(name)]
    names = [p.name for p in out]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate program names: {sorted(dup)}"
    return out


def sample(programs: list[Program], n: int) -> list[Program]:
    """A stable sample of about ``n`` programs spread over every family: the same number
    from each (evenly spaced through its table), so small families are not drowned out."""
    by_family: dict[str, list[Program]] = {}
    for p in programs:
        by_family.setdefault(p.family, []).append(p)
    per_family = max(1, round(n / len(by_family)))
    out = []
    for family in sorted(by_family):
        items = by_family[family]
        k = min(per_family, len(items))
        out += [items[(j * len(items)) // k] for j in range(k)]
    return out
