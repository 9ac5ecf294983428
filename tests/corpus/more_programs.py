"""More corpus programs: the forms a second, independent pass over "what do small PyTorch
programs look like" found (narrow integer and 16-bit float dtypes, empty tensors, the many
ways to mutate an input or a buffer, output structures, scalar and container inputs, complex,
float64, a long tail of ops and nn modules). Written apart from programs.py's tables, then
kept as part of the corpus; programs.py merges them into its families by name prefix.
"""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F
from torch import nn

from programs import BOOL, C64, C128, F16, F32, F64, I32, I64, Fn, Program, _args, _t, rand

U8, I8, I16, BF16 = torch.uint8, torch.int8, torch.int16, torch.bfloat16
P: list[Program] = []


def add(name, make, inputs, **kw):
    P.append(Program(name, name.split("/")[0], make, inputs, **kw))


def fn(name, f, *makers, **kw):
    add(name, lambda f=f: Fn(lambda m, *a: f(*a)), _args(*makers), **kw)


# dtypes
for dt, nm in [(U8, "u8"), (I8, "i8"), (I16, "i16")]:
    fn(f"dtypes/add/{nm}", lambda a, b: a + b, _t((3, 4), dt), _t((3, 4), dt))
    fn(f"dtypes/mul_sum/{nm}", lambda a: (a * 2).sum(1), _t((3, 4), dt))
    fn(f"dtypes/to_f32/{nm}", lambda a: a.float() * 0.5, _t((3, 4), dt))
    fn(f"dtypes/max/{nm}", lambda a: a.amax(0), _t((3, 4), dt))
fn("dtypes/bf16_add", lambda a, b: a + b, _t((3, 4), BF16), _t((3, 4), BF16), rtol=1e-2, atol=1e-2)
fn("dtypes/bf16_matmul", lambda a, b: a @ b, _t((4, 8), BF16), _t((8, 3), BF16), rtol=2e-2, atol=5e-2)
fn("dtypes/f16_matmul", lambda a, b: a @ b, _t((4, 8), F16), _t((8, 3), F16), rtol=1e-2, atol=1e-2)
fn("dtypes/f16_softmax", lambda a: a.softmax(-1), _t((4, 8), F16), rtol=1e-2, atol=1e-3)
fn("dtypes/bool_out", lambda a, b: (a > b) | (a < 0), _t((3, 4), F32), _t((3, 4), F32))
fn("dtypes/bool_in_where", lambda m, a: torch.where(m, a, -a), _t((3, 4), BOOL), _t((3, 4), F32))
fn("dtypes/i64_to_bool", lambda a: a.bool(), _t((5,), I64))
fn("dtypes/f32_to_u8", lambda a: (a.abs() * 10).to(torch.uint8), _t((5,), F32))
fn("dtypes/i32_matmul", lambda a, b: a @ b, _t((3, 4), I32), _t((4, 2), I32))
fn("dtypes/i64_cumsum", lambda a: a.cumsum(0), _t((6,), I64))
fn("dtypes/f64_i64_mix", lambda a, b: a * b + 1, _t((3,), F64), _t((3,), I64))

# empty tensors
fn("empty/add", lambda a, b: a + b, _t((0, 4), F32), _t((0, 4), F32))
fn("empty/sum", lambda a: a.sum(0), _t((0, 4), F32))
fn("empty/cat", lambda a, b: torch.cat([a, b]), _t((0, 3), F32), _t((2, 3), F32))
fn("empty/matmul", lambda a, b: a @ b, _t((2, 0), F32), _t((0, 3), F32))
fn("empty/slice_out", lambda a: a[3:], _t((3, 2), F32))

# mutations
def _m2(x):
    x[:, 1] = 0.0
    return x.sum()
fn("inplace/more_setitem_col", _m2, _t((3, 4), F32))
def _m3(x, y):
    x.add_(y); y.mul_(2)
    return x + y
fn("inplace/more_two_inputs", _m3, _t((3,), F32), _t((3,), F32))
def _m4(x):
    x.zero_()
fn("inplace/more_zero_returns_none", _m4, _t((3,), F32))
def _m5(x):
    return x.add_(1)
fn("inplace/more_returns_mutated", _m5, _t((3,), F32))
def _m6(x, y):
    x.copy_(y)
    return x
fn("inplace/more_copy_", _m6, _t((2, 3), F32), _t((2, 3), F32))
def _m7(x):
    x.fill_(3.0)
    return x.sum()
fn("inplace/more_fill_", _m7, _t((2, 3), F32))
def _m8(a, b, out):
    torch.add(a, b, out=out)
    return out
fn("inplace/more_out_arg", _m8, _t((3,), F32), _t((3,), F32), _t((3,), F32))
def _m9(x):
    v = x.view(-1)
    v[2] = 7.0
    return x * 1
fn("inplace/more_view_write", _m9, _t((2, 3), F32))
def _m10(x):
    x.relu_()
    return x.mean()
fn("inplace/more_relu_", _m10, _t((4,), F32))

class BufSlice(nn.Module):
    def __init__(self):
        super().__init__(); self.register_buffer("buf", torch.zeros(4, 3))
    def forward(self, x):
        self.buf[1:3] = x
        return self.buf.sum(0)
add("inplace/more_buffer_slice", BufSlice, _args(_t((2, 3), F32)), calls=2)
class BufInc(nn.Module):
    def __init__(self):
        super().__init__(); self.register_buffer("n", torch.tensor(0, dtype=torch.int64)); self.register_buffer("acc", torch.zeros(3))
    def forward(self, x):
        self.n += 1
        self.acc.add_(x)
        return self.acc / self.n
add("inplace/more_buffer_counter_0d", BufInc, _args(_t((3,), F32)), calls=3)
class BNTrain(nn.Module):
    def __init__(self):
        super().__init__(); self.bn = nn.BatchNorm1d(4); self.bn.train()
    def forward(self, x):
        return self.bn(x)
add("inplace/more_batchnorm_train", BNTrain, _args(_t((8, 4), F32)), calls=2, rtol=1e-3, atol=1e-4)

# outputs structure
fn("pytree/more_identity", lambda x: x, _t((3,), F32))
fn("pytree/more_same_twice", lambda x: (x * 2, x * 2), _t((3,), F32))
def _o2(x):
    y = x * 2
    return y, y
fn("pytree/more_alias_twice", _o2, _t((3,), F32))
fn("pytree/more_view_of_input", lambda x: x.t(), _t((2, 3), F32))
fn("pytree/more_input_and_result", lambda x: (x, x + 1), _t((3,), F32))
fn("pytree/more_none_in_tuple", lambda x: (x + 1, None), _t((3,), F32))
fn("pytree/more_int_const", lambda x: (x + 1, 3), _t((3,), F32))
fn("pytree/more_float_const", lambda x: (x + 1, 2.5), _t((3,), F32))
fn("pytree/more_shape", lambda x: (x.sum(), x.shape), _t((3, 2), F32))
fn("pytree/more_size_int", lambda x: x.shape[0] * 2, _t((3, 2), F32))
fn("pytree/more_nested", lambda x: {"a": [x, (x + 1, {"b": x * 2})], "c": x.sum()}, _t((3,), F32))
fn("pytree/more_int_keys", lambda x: {0: x, 1: x + 1}, _t((3,), F32))
NT = collections.namedtuple("NT", "lo hi")
fn("pytree/more_namedtuple", lambda x: NT(x.min(), x.max()), _t((5,), F32))
fn("pytree/more_list_split", lambda x: list(x.split(2)), _t((5, 2), F32))
fn("pytree/more_unbind", lambda x: x.unbind(0), _t((3, 2), F32))
fn("pytree/more_chunk", lambda x: x.chunk(3, 1), _t((2, 6), F32))
fn("pytree/more_single_tuple", lambda x: (x * 3,), _t((3,), F32))
fn("pytree/more_empty_list_plus", lambda x: ([], x + 1), _t((3,), F32))

# scalars and kwargs
class ScaleKw(nn.Module):
    def forward(self, x, *, scale: float = 2.0, bias=None):
        y = x * scale
        return y if bias is None else y + bias
add("scalars/more_kw_float", ScaleKw, lambda g: ((rand((3,), F32, g),), {"scale": 1.5}))
add("scalars/more_kw_tensor", ScaleKw, lambda g: ((rand((3,), F32, g),), {"bias": rand((3,), F32, g)}))
class IntArg(nn.Module):
    def forward(self, x, n: int):
        return x.repeat(n, 1)
add("scalars/more_int_arg_shape", IntArg, lambda g: ((rand((2, 3), F32, g), 3), {}))
class FloatArg(nn.Module):
    def forward(self, x, eps: float):
        return x / (x.abs().sum() + eps)
add("scalars/more_float_arg", FloatArg, lambda g: ((rand((4,), F32, g), 0.5), {}))
class BoolArg(nn.Module):
    def forward(self, x, flag: bool):
        return x * 2 if flag else x - 1
add("scalars/more_bool_arg", BoolArg, lambda g: ((rand((4,), F32, g), True), {}))
class DefaultArg(nn.Module):
    def forward(self, x, y=None):
        return x if y is None else x + y
add("scalars/more_default_none", DefaultArg, _args(_t((3,), F32)))
class DictIn(nn.Module):
    def forward(self, d):
        return d["a"] * d["b"]
add("scalars/more_dict_input", DictIn, lambda g: (({"a": rand((3,), F32, g), "b": rand((3,), F32, g)},), {}))
class ListIn(nn.Module):
    def forward(self, xs):
        return torch.stack(xs).sum(0)
add("scalars/more_list_input", ListIn, lambda g: (([rand((3,), F32, g) for _ in range(3)],), {}))

# zero-d
fn("zero_d/more_bcast_mul", lambda s, x: s * x, _t((), F32), _t((3, 4), F32))
fn("zero_d/more_int_0d", lambda s, x: x + s, _t((), I64), _t((3,), I64))
fn("zero_d/more_bool_out", lambda x: (x > 0).all(), _t((4,), F32))
fn("zero_d/more_const_inside", lambda x: x * torch.tensor(3.0), _t((3,), F32))
fn("zero_d/more_reduce_reuse", lambda x: x - x.mean(), _t((4, 5), F32))
fn("zero_d/more_only_0d", lambda a, b: torch.maximum(a, b) * 2, _t((), F32), _t((), F32))
fn("zero_d/more_item_like", lambda x: x.sum().reshape(1), _t((3,), F32))
fn("zero_d/more_f64", lambda a: a * a + 1, _t((), F64))

# complex
fn("complex/more_mul", lambda a, b: a * b, _t((3,), C64), _t((3,), C64))
fn("complex/more_abs", lambda a: a.abs(), _t((4,), C64))
fn("complex/more_angle", lambda a: torch.angle(a), _t((4,), C64))
fn("complex/more_real_imag", lambda a: a.real + 2 * a.imag, _t((4,), C64))
fn("complex/more_conj_mul", lambda a: (a * a.conj()).real, _t((4,), C64))
fn("complex/more_from_real", lambda x, y: torch.complex(x, y) * 2, _t((3,), F32), _t((3,), F32))
fn("complex/more_view_as_real", lambda a: torch.view_as_real(a * 1j), _t((3,), C64))
fn("complex/more_view_as_complex", lambda x: torch.view_as_complex(x) * 2, _t((3, 2), F32))
fn("complex/more_polar", lambda r, t: torch.polar(r.abs(), t), _t((3,), F32), _t((3,), F32))
fn("complex/more_matmul", lambda a, b: a @ b, _t((2, 3), C64), _t((3, 2), C64))
fn("complex/more_exp", lambda a: torch.exp(a), _t((3,), C64), rtol=1e-3, atol=1e-4)
fn("complex/more_rotary", lambda x, f: torch.view_as_real(torch.view_as_complex(x.reshape(2, 4, 2)) * f).flatten(1), _t((2, 8), F32), _t((4,), C64))
fn("complex/more_c128_add", lambda a, b: a + b, _t((3,), C128), _t((3,), C128))
fn("complex/more_fft", lambda x: torch.fft.fft(x).abs(), _t((8,), F32))

# f64
fn("f64/more_matmul", lambda a, b: a @ b, _t((3, 4), F64), _t((4, 5), F64))
fn("f64/more_conv2d", lambda x, w: F.conv2d(x, w, padding=1), _t((1, 2, 5, 5), F64), _t((3, 2, 3, 3), F64))
fn("f64/more_layer_norm", lambda x: F.layer_norm(x, (6,)), _t((3, 6), F64))
fn("f64/more_softmax", lambda x: x.softmax(-1), _t((3, 6), F64))
add("f64/more_nn_linear", lambda: nn.Linear(4, 3).double(), _args(_t((2, 4), F64)))
fn("f64/more_precise", lambda x: (x + 1e-12) - x, _t((3,), F64), atol=1e-15, rtol=1e-6)
fn("f64/more_cumprod", lambda x: x.cumprod(0), _t((5,), F64, positive=True))

# misc ops
fn("ops/einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), _t((2, 3, 4), F32), _t((2, 4, 5), F32))
fn("ops/einsum_outer", lambda a, b: torch.einsum("i,j->ij", a, b), _t((3,), F32), _t((4,), F32))
fn("ops/interp_nearest", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), _t((1, 2, 3, 3), F32))
fn("ops/interp_bilinear", lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False), _t((1, 2, 3, 3), F32))
fn("ops/pad_reflect", lambda x: F.pad(x, (1, 2), mode="reflect"), _t((1, 2, 5), F32))
fn("ops/pad_replicate", lambda x: F.pad(x, (1, 1, 2, 0), mode="replicate"), _t((1, 1, 3, 3), F32))
fn("ops/pad_const", lambda x: F.pad(x, (1, 1), value=2.0), _t((2, 3), F32))
fn("ops/conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2), _t((1, 2, 4, 4), F32), _t((2, 3, 3, 3), F32))
fn("ops/group_norm", lambda x: F.group_norm(x, 2), _t((2, 4, 3, 3), F32))
fn("ops/instance_norm", lambda x: F.instance_norm(x), _t((2, 3, 4, 4), F32))
fn("ops/pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), _t((1, 8, 3, 3), F32))
fn("ops/unfold", lambda x: F.unfold(x, 2), _t((1, 2, 4, 4), F32))
fn("ops/cdist", lambda a, b: torch.cdist(a, b), _t((4, 3), F32), _t((5, 3), F32))
fn("ops/baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2), _t((2, 3, 5), F32), _t((2, 3, 4), F32), _t((2, 4, 5), F32))
fn("ops/lerp", lambda a, b: torch.lerp(a, b, 0.3), _t((4,), F32), _t((4,), F32))
fn("ops/clamp_tensor", lambda x, lo: torch.clamp(x, min=lo, max=lo + 1), _t((4,), F32), _t((4,), F32))
fn("ops/nan_to_num", lambda x: torch.nan_to_num(torch.log(x)), _t((5,), F32))
fn("ops/isnan_isinf", lambda x: torch.isnan(torch.log(x)) | torch.isinf(1 / (x - x)), _t((5,), F32))
fn("ops/bucketize", lambda x, b: torch.bucketize(x, b), _t((6,), F32), lambda g: torch.tensor([-1.0, 0.0, 1.0]))
fn("ops/searchsorted", lambda b, x: torch.searchsorted(b, x), lambda g: torch.tensor([-1.0, 0.0, 1.0, 2.0]), _t((5,), F32))
fn("ops/repeat_interleave", lambda x: x.repeat_interleave(2, dim=0), _t((3, 2), F32))
fn("ops/tile", lambda x: x.tile((2, 3)), _t((2, 2), F32))
fn("ops/meshgrid", lambda a, b: torch.stack(torch.meshgrid(a, b, indexing="ij")), _t((3,), F32), _t((4,), F32))
fn("ops/arange_float", lambda x: x + torch.arange(0, 1, 0.25), _t((4,), F32))
fn("ops/linspace", lambda x: x * torch.linspace(-1, 1, 5), _t((5,), F32))
fn("ops/full_like", lambda x: torch.full_like(x, 7) + x, _t((3, 2), F32))
fn("ops/logit", lambda x: torch.logit(x, eps=1e-3), _t((5,), F32, positive=True))
fn("ops/hardtanh", lambda x: F.hardtanh(x, -0.5, 0.5), _t((5,), F32))
fn("ops/glu", lambda x: F.glu(x, -1), _t((3, 4), F32))
fn("ops/cosine_similarity", lambda a, b: F.cosine_similarity(a, b), _t((3, 4), F32), _t((3, 4), F32))
fn("ops/normalize", lambda a: F.normalize(a, dim=-1), _t((3, 4), F32))
fn("ops/mse_loss", lambda a, b: F.mse_loss(a, b), _t((3, 4), F32), _t((3, 4), F32))
fn("ops/cross_entropy", lambda a, t: F.cross_entropy(a, t), _t((4, 5), F32), lambda g: torch.randint(0, 5, (4,), generator=g))
fn("ops/triu_indices_mask", lambda x: x.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf")).softmax(-1), _t((4, 4), F32))
fn("ops/diag_embed", lambda x: torch.diag_embed(x), _t((2, 3), F32))
fn("ops/trace", lambda x: torch.trace(x), _t((4, 4), F32))
fn("ops/outer", lambda a, b: torch.outer(a, b), _t((3,), F32), _t((2,), F32))
fn("ops/cross", lambda a, b: torch.linalg.cross(a, b), _t((4, 3), F32), _t((4, 3), F32))
fn("ops/kthvalue", lambda x: x.kthvalue(2, -1).values, _t((3, 5), F32))
fn("ops/median", lambda x: x.median(-1).values, _t((3, 5), F32))
fn("ops/cummax", lambda x: x.cummax(0).values, _t((5,), F32))
fn("ops/flatten_unflatten", lambda x: x.flatten(1).unflatten(1, (3, 4)), _t((2, 12), F32))
fn("ops/movedim", lambda x: x.movedim(0, -1).contiguous(), _t((2, 3, 4), F32))
fn("ops/expand_add", lambda x: x.expand(3, 4) + 1, _t((1, 4), F32))
fn("ops/index_fill", lambda x: x.index_fill(1, torch.tensor([0, 2]), -1.0), _t((3, 4), F32))
fn("ops/masked_scatter", lambda x, m: x.masked_scatter(m, torch.ones(12)), _t((3, 4), F32), _t((3, 4), BOOL))
fn("ops/argsort", lambda x: x.argsort(-1), _t((3, 5), F32))
fn("ops/amax_multi", lambda x: x.amax((0, 2)), _t((2, 3, 4), F32))
fn("ops/std_unbiased0", lambda x: x.std(1, correction=0), _t((3, 5), F32))
fn("ops/var_mean", lambda x: torch.var_mean(x, 1), _t((3, 5), F32))
fn("ops/sum_dtype", lambda x: x.sum(1, dtype=torch.float64), _t((3, 5), F32))
fn("ops/mean_int_to_f", lambda x: x.to(torch.float32).mean(), _t((6,), I32))
fn("ops/div_trunc", lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="trunc"), _t((5,), F32), _t((5,), F32))
fn("ops/int_div_floor", lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"), _t((5,), I64), _t((5,), I64))
fn("ops/fmod", lambda a, b: torch.fmod(a, b.abs() + 0.5), _t((5,), F32), _t((5,), F32))
fn("ops/shift", lambda a: (a << 2) >> 1, _t((5,), I32))
fn("ops/pow_int", lambda a: a ** 3, _t((5,), I64))

# modules
def _seed(m):
    torch.manual_seed(0)
    return m
add("modules/conv1d", lambda: _seed(nn.Conv1d(3, 4, 3, padding=1)), _args(_t((2, 3, 8), F32)))
add("modules/depthwise", lambda: _seed(nn.Conv2d(4, 4, 3, groups=4)), _args(_t((1, 4, 6, 6), F32)))
add("modules/dilated", lambda: _seed(nn.Conv2d(2, 3, 3, dilation=2)), _args(_t((1, 2, 8, 8), F32)))
add("modules/conv3d", lambda: _seed(nn.Conv3d(2, 2, 2)), _args(_t((1, 2, 4, 4, 4), F32)))
add("modules/maxpool_ceil", lambda: nn.MaxPool2d(2, ceil_mode=True), _args(_t((1, 2, 5, 5), F32)))
add("modules/adaptive_avg", lambda: nn.AdaptiveAvgPool2d((3, 3)), _args(_t((1, 2, 7, 7), F32)))
add("modules/avgpool_pad", lambda: nn.AvgPool2d(3, 2, padding=1, count_include_pad=False), _args(_t((1, 2, 6, 6), F32)))
add("modules/embedding_pad", lambda: _seed(nn.Embedding(10, 4, padding_idx=0)), lambda g: ((torch.randint(0, 10, (2, 5), generator=g),), {}))
add("modules/embedding_bag", lambda: _seed(nn.EmbeddingBag(10, 4, mode="mean")), lambda g: ((torch.randint(0, 10, (3, 4), generator=g),), {}))
add("modules/prelu", lambda: _seed(nn.PReLU(3)), _args(_t((2, 3, 4), F32)))
add("modules/layernorm_2d", lambda: _seed(nn.LayerNorm((3, 4))), _args(_t((2, 3, 4), F32)))
add("modules/layernorm_noaffine", lambda: nn.LayerNorm(4, elementwise_affine=False), _args(_t((2, 4), F32)))
add("modules/bn1d_eval", lambda: _seed(nn.BatchNorm1d(3)).eval(), _args(_t((4, 3, 5), F32)))
add("modules/bn2d_eval_noaffine", lambda: nn.BatchNorm2d(3, affine=False).eval(), _args(_t((2, 3, 4, 4), F32)))
add("modules/mha", lambda: _seed(nn.MultiheadAttention(8, 2, batch_first=True)).eval(), lambda g: ((rand((2, 5, 8), F32, g),) * 3, {}), rtol=1e-3, atol=1e-4)
add("modules/transformer_layer", lambda: _seed(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)).eval(), _args(_t((2, 5, 8), F32)), rtol=1e-3, atol=1e-4)
add("modules/lstm", lambda: _seed(nn.LSTM(4, 5, batch_first=True)), _args(_t((2, 3, 4), F32)), rtol=1e-3, atol=1e-4)
add("modules/gru", lambda: _seed(nn.GRU(4, 5, batch_first=True)), _args(_t((2, 3, 4), F32)), rtol=1e-3, atol=1e-4)
add("modules/upsample", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), _args(_t((1, 1, 3, 3), F32)))
add("modules/sequential_mlp", lambda: _seed(nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Dropout(0.1), nn.Linear(8, 2))).eval(), _args(_t((3, 4), F32)))
add("modules/softmax2d", lambda: nn.Softmax2d(), _args(_t((1, 3, 2, 2), F32)))
add("modules/flatten_linear", lambda: _seed(nn.Sequential(nn.Flatten(), nn.Linear(12, 3))), _args(_t((2, 3, 4), F32)))
add("modules/pairwise_dist", lambda: nn.PairwiseDistance(), _args(_t((3, 4), F32), _t((3, 4), F32)))
add("modules/rmsnorm", lambda: _seed(nn.RMSNorm(4)), _args(_t((2, 4), F32)))

def programs(family: str) -> list[Program]:
    """The programs of ``family`` (a name's first part)."""
    return [p for p in P if p.family == family]
