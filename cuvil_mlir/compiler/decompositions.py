"""Decompositions of ops torch-mlir + IREE 3.13 get wrong or cannot compile, used by the
importer's ``run_decompositions`` (cuvil's import; the plain-IREE baseline does not use them).

``square`` of an integer tensor: torch-mlir's lowering says "unimplemented: non-floating
point dtype"; it is ``x * x``.

``randint`` with a float dtype: IREE returns non-integral values (7.8 for randint(3, 8));
it is written as ``floor(uniform(low, high))`` in that dtype.

Complex ops IREE 3.13 cannot compile, written on real views.

torch-mlir imports complex tensors and IREE runs complex mul, matmul and the real/complex
views, but fails on others: ``add``/``sub`` (its alpha multiply becomes ``arith.muli`` on
``complex<f32>``), ``abs`` (``math.absf`` on complex), ``sum``, ``exp``, ``_conj``, ``angle``
and ``complex(re, im)`` ("failed to legalize torch.operator"), and complex times a real
number ("Only integer/float dtype supported"). These decompositions, used
by the importer's ``run_decompositions``, compute them on ``view_as_real`` (the last dim
holds real and imaginary parts) and come back with ``view_as_complex``. For real inputs
they return NotImplemented: the op is left as it is.

Pooling IREE rejects ("inferred input/output operand #N has shape's dimension #M to be A, but
found B"): ceil mode where it changes no output size, and a single window shorter or longer than
the input; both as an equal pooling (``_simpler_pool``). Negative padding (a crop) as a slice:
torch-mlir put it into ``tensor.pad`` and got wrong results with no error. ``fftn``, ``fft2`` and
their inverse and real forms as 1-D transforms. Scatters along a negative dim along the same dim
counted from the front (iree-compile crashed on them). ``lgamma`` and ``digamma`` (no lowering)
written out: Lanczos, the digamma series, reflection.
"""

from __future__ import annotations


def _real(z):
    import torch

    return torch.view_as_real(z)


def _complex(r):
    import torch

    return torch.view_as_complex(r.contiguous())


def _parts(z):
    r = _real(z)
    return r[..., 0], r[..., 1]


def _add(a, b, *, alpha=1):
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_complex() and b.is_complex() and a.dtype == b.dtype):
        return NotImplemented
    rb = _real(b) if alpha == 1 else _real(b) * alpha
    ra = _real(a)
    if ra.dim() != rb.dim():  # broadcast like the complex tensors do, then the (re, im) dim
        shape = torch.broadcast_shapes(a.shape, b.shape)
        ra, rb = ra.expand(*shape, 2), rb.expand(*shape, 2)
    return _complex(ra + rb)


def _sub(a, b, *, alpha=1):
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_complex() and b.is_complex()):
        return NotImplemented
    return _add(a, b, alpha=-alpha)


def _mul_real(a, b):
    """complex * real (a number or a real tensor): both parts scaled. complex * complex: IREE's."""
    import torch

    if isinstance(a, torch.Tensor) and a.is_complex() and not (isinstance(b, torch.Tensor) and b.is_complex()):
        z, s = a, b
    elif isinstance(b, torch.Tensor) and b.is_complex() and not (isinstance(a, torch.Tensor) and a.is_complex()):
        z, s = b, a
    else:
        return NotImplemented
    if isinstance(s, complex):
        return NotImplemented
    s = s.unsqueeze(-1) if isinstance(s, torch.Tensor) else s
    return _complex(_real(z) * s)


def _mul_complex_number(a, b):
    """A tensor times a Python complex number (``x * 1j``): torch-mlir cannot import the
    complex constant ("'NoneType' object is not callable"); it is two real products."""
    import torch

    if isinstance(a, complex) and isinstance(b, torch.Tensor):
        a, b = b, a
    if not (isinstance(a, torch.Tensor) and isinstance(b, complex)):
        return NotImplemented
    if a.is_complex():
        re, im = _parts(a)
    elif a.dtype.is_floating_point:
        re, im = a, torch.zeros_like(a)
    else:
        return NotImplemented
    return _from_parts(re * b.real - im * b.imag, re * b.imag + im * b.real)


def _abs(z):
    import torch

    if not z.is_complex():
        return NotImplemented
    re, im = _parts(z)
    return torch.sqrt(re * re + im * im)


def _angle(z):
    import torch

    if not z.is_complex():
        return NotImplemented
    re, im = _parts(z)
    return torch.atan2(im, re)


def _conj(z):
    import torch

    if not z.is_complex():
        return NotImplemented
    re, im = _parts(z)
    return _complex(torch.stack([re, -im], -1))


def _exp(z):
    import torch

    if not z.is_complex():
        return NotImplemented
    re, im = _parts(z)
    scale = torch.exp(re)
    return _complex(torch.stack([scale * torch.cos(im), scale * torch.sin(im)], -1))


def _sum(z, dim=None, keepdim=False, *, dtype=None):
    import torch

    if not z.is_complex() or dtype is not None:
        return NotImplemented
    dims = list(range(z.dim())) if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else (
        [dim] if isinstance(dim, int) else list(dim))
    dims = [d - 1 if d < 0 else d for d in dims]  # the real view has one more (last) dim
    if not dims:
        return z.clone()
    return _complex(torch.sum(_real(z), dims, keepdim=keepdim))


def _from_parts(re, im):
    import torch

    return _complex(torch.stack([re, im], -1))


def _randint_float(low, high=None, size=None, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    import torch

    if high is None or size is None or dtype is None or not dtype.is_floating_point or generator is not None:
        return NotImplemented
    u = torch.rand(size, dtype=torch.float64, device=device)
    return torch.floor(u * (high - low) + low).clamp(max=high - 1).to(dtype)


def _square(x):
    if x.dtype.is_floating_point or x.is_complex():
        return NotImplemented
    return x * x


# --- integer arithmetic ------------------------------------------------------------------------

def _mul_narrow_int(a, b):
    """An int8/uint8 tensor times a Python number: torch-mlir's scalar conversion stops at
    "for conversion to byte or char type dstOriginalDtype has to be passed"; the number as a
    0-d tensor of the tensor's dtype takes the tensor-tensor path, same wrap-around."""
    import torch

    if isinstance(b, torch.Tensor) and not isinstance(a, torch.Tensor):
        a, b = b, a
    if not (isinstance(a, torch.Tensor) and a.dtype in (torch.int8, torch.uint8) and isinstance(b, (int, bool))):
        return NotImplemented
    return a * torch.full((), int(b), dtype=a.dtype, device=a.device)


def _int_bits(dtype) -> int:
    import torch

    return torch.iinfo(dtype).bits


def _pow_int_scalar(x, exponent):
    """Integer ``x ** n`` for a Python int n >= 0 (torch-mlir: "unimplemented: non-floating
    point dtype"): square and multiply, unrolled, with the same wrap-around as torch."""
    import torch

    if x.dtype.is_floating_point or x.is_complex() or x.dtype == torch.bool or not isinstance(exponent, int) or exponent < 0:
        return NotImplemented
    result, base, n = torch.ones_like(x), x, exponent
    while n:
        if n & 1:
            result = result * base
        n >>= 1
        if n:
            base = base * base
    return result


def _pow_int_tensor(x, exponent):
    """Integer ``x ** e`` for an integer tensor ``e`` (torch: negative exponents are not
    defined for integers): square and multiply over every bit of ``e``'s dtype."""
    import torch

    if not isinstance(exponent, torch.Tensor) or x.dtype.is_floating_point or x.is_complex() or x.dtype == torch.bool:
        return NotImplemented
    if exponent.dtype.is_floating_point or exponent.is_complex() or exponent.dtype == torch.bool:
        return NotImplemented
    dtype = torch.promote_types(x.dtype, exponent.dtype)
    base, e = x.to(dtype), exponent.to(dtype)
    shape = torch.broadcast_shapes(base.shape, e.shape)
    result, base, e = torch.ones(shape, dtype=dtype, device=x.device), base.expand(shape), e.expand(shape)
    for _ in range(_int_bits(dtype) - 1):  # the sign bit: negative exponents are not defined
        result = torch.where((e & 1) == 1, result * base, result)
        base, e = base * base, e >> 1
    return result


# --- order statistics and scans: sort-based forms ---------------------------------------------------

def _select_sorted(x, index: int, dim: int, keepdim: bool):
    import torch

    values, indices = torch.sort(x, dim=dim)  # sort.stable: torch-mlir cannot lower it
    v, i = values.narrow(dim, index, 1), indices.narrow(dim, index, 1)
    return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))


def _kthvalue(x, k, dim=-1, keepdim=False):
    """``kthvalue`` (IREE: "'tm_tensor.topk' op region block must end with a linalg_ext.yield i1")
    as a sort and a slice."""
    if x.dim() == 0 or not 1 <= k <= x.shape[dim]:
        return NotImplemented
    return _select_sorted(x, k - 1, dim, keepdim)


def _median_dim(x, dim=0, keepdim=False):
    """``median`` along ``dim`` (the lower median, as torch's; torch-mlir cannot lower it):
    a sort and a slice; a float slice holding NaN gives NaN at its first NaN, as torch."""
    import torch

    if x.dim() == 0 or x.shape[dim] == 0:
        return NotImplemented
    values, indices = _select_sorted(x, (x.shape[dim] - 1) // 2, dim, keepdim)
    if not x.dtype.is_floating_point:
        return values, indices
    nan = torch.isnan(x)
    has_nan = nan.any(dim, keepdim=keepdim)
    first_nan = nan.to(torch.int64).argmax(dim, keepdim=keepdim)
    return torch.where(has_nan, torch.full_like(values, float("nan")), values), torch.where(has_nan, first_nan, indices)


def _median(x):
    import torch

    if x.numel() == 0:
        return NotImplemented
    flat = x.reshape(-1)
    value = _select_sorted(flat, (x.numel() - 1) // 2, 0, False)[0]
    if x.dtype.is_floating_point:
        value = torch.where(torch.isnan(flat).any(), torch.full_like(value, float("nan")), value)
    return value


SCAN_LIMIT = 4096  # the masked form of a cumulative max is quadratic in the scanned length


def _cumulative_extreme(largest: bool):
    """``cummax``/``cummin`` (torch-mlir cannot lower them) for scans up to SCAN_LIMIT long:
    position i takes the extreme of positions <= i (a triangular mask); its index is the
    last position holding that value, as torch's."""

    def decompose(x, dim):
        import torch

        if x.dim() == 0 or x.is_complex() or x.dtype == torch.bool:
            return NotImplemented
        n = x.shape[dim]
        if not isinstance(n, int) or n > SCAN_LIMIT:
            return NotImplemented
        moved = x.movedim(dim, -1)
        pos = torch.arange(n, device=x.device)
        later = pos.unsqueeze(0) > pos.unsqueeze(1)  # [i, j]: j after i
        if x.dtype.is_floating_point:
            fill = float("-inf") if largest else float("inf")
        else:
            info = torch.iinfo(x.dtype)
            fill = info.min if largest else info.max
        rows = moved.unsqueeze(-2).expand(*moved.shape[:-1], n, n).masked_fill(later, fill)
        values = rows.amax(-1) if largest else rows.amin(-1)
        hit = (rows == values.unsqueeze(-1)) & ~later
        if x.dtype.is_floating_point:  # NaN is the extreme once seen, as in torch
            nan_rows = torch.isnan(rows) & ~later
            seen_nan = nan_rows.any(-1)
            values = torch.where(seen_nan, torch.full_like(values, float("nan")), values)
            hit = torch.where(seen_nan.unsqueeze(-1), nan_rows, hit)
        index = torch.where(hit, pos, torch.full_like(pos, -1)).amax(-1)
        return values.movedim(-1, dim), index.movedim(-1, dim)

    return decompose


# --- distances and bucketing -------------------------------------------------------------------

def _cdist(x1, x2, p=2.0, compute_mode=None):
    """``cdist`` (torch-mlir cannot lower ``_cdist_forward``) from the pairwise differences:
    exact, not the matmul form that cancels for near points."""
    import torch

    if not (x1.dtype.is_floating_point and x2.dtype.is_floating_point) or x1.dim() < 2 or x2.dim() < 2:
        return NotImplemented
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == 0:
        return (diff != 0).sum(-1).to(x1.dtype)
    if p == float("inf"):
        return diff.amax(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return diff.square().sum(-1).sqrt()
    return diff.pow(p).sum(-1).pow(1.0 / p)


def _searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """``searchsorted`` (torch-mlir cannot lower it) as a count: the insertion index of v is
    the number of boundaries below it (``<=`` for ``right``/``side="right"``)."""
    import torch

    if sorter is not None or not isinstance(values, torch.Tensor) or sorted_sequence.dim() == 0:
        return NotImplemented
    right = right or side == "right"
    if sorted_sequence.dim() == 1:
        b, v = sorted_sequence, values.unsqueeze(-1)
    elif sorted_sequence.shape[:-1] == values.shape[:-1]:
        b, v = sorted_sequence.unsqueeze(-2), values.unsqueeze(-1)
    else:
        return NotImplemented
    below = (b <= v) if right else (b < v)
    return below.sum(-1).to(torch.int32 if out_int32 else torch.int64)


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """``embedding_bag`` (IREE: "failed to legalize torch.aten.embedding_bag.padding_idx") as
    an embedding and a reduction per bag: bag b holds indices offsets[b] .. offsets[b+1]-1
    (a membership mask), sum / mean / max (modes 0 / 1 / 2); padding_idx entries are left out.
    Returns (output, offset2bag, bag_size, max_indices) as torch does."""
    import torch

    if indices.dim() != 1 or offsets.dim() != 1 or mode not in (0, 1, 2) or (per_sample_weights is not None and mode != 0):
        return NotImplemented
    n, bags = indices.shape[0], offsets.shape[0] - (1 if include_last_offset else 0)
    starts = offsets[:bags]
    ends = offsets[1:bags + 1] if include_last_offset else torch.cat([offsets[1:], torch.full((1,), n, dtype=offsets.dtype, device=offsets.device)])
    pos = torch.arange(n, device=indices.device, dtype=offsets.dtype)
    member = (pos.unsqueeze(0) >= starts.unsqueeze(1)) & (pos.unsqueeze(0) < ends.unsqueeze(1))  # [bags, n]
    if padding_idx is not None and padding_idx >= 0:
        member = member & (indices != padding_idx).unsqueeze(0)
    rows = torch.nn.functional.embedding(indices, weight)  # [n, dim]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(-1).to(rows.dtype)
    bag_size = member.sum(1)
    offset2bag = (pos.unsqueeze(0) >= starts.unsqueeze(1)).sum(0) - 1
    if mode == 2:
        masked = rows.unsqueeze(0).masked_fill(~member.unsqueeze(-1), float("-inf"))
        output = masked.amax(1)
        where = torch.where(masked == output.unsqueeze(1), indices.view(1, n, 1).expand_as(masked), torch.full_like(masked, -1, dtype=indices.dtype))
        max_indices = where.amax(1)
        empty = (bag_size == 0).unsqueeze(-1)
        output = output.masked_fill(empty, 0.0)
        max_indices = max_indices.masked_fill(empty, 0)
    else:
        output = member.to(rows.dtype) @ rows
        if mode == 1:
            output = output / bag_size.clamp(min=1).unsqueeze(-1).to(rows.dtype)
        max_indices = torch.zeros_like(bag_size)
    return output, offset2bag.to(indices.dtype), bag_size.to(indices.dtype), max_indices.to(indices.dtype)


# --- Fourier transforms as DFT products ------------------------------------------------------------------

DFT_LIMIT = 8192  # a dense DFT matrix is n x n


def _dft_angles(n_in: int, n_out: int, length: int, device):
    """2*pi*k*j/length for k < n_out, j < n_in, with k*j reduced mod length first (exact
    integers: angles stay accurate in float32 for long transforms)."""
    import torch

    k = torch.arange(n_out, device=device, dtype=torch.int64).unsqueeze(1)
    j = torch.arange(n_in, device=device, dtype=torch.int64).unsqueeze(0)
    return ((k * j) % length).to(torch.float64) * (2 * 3.141592653589793 / length)


def _norm_scale(norm, n: int, forward: bool) -> float:
    mode = norm or "backward"
    if mode == "ortho":
        return n ** -0.5
    if (mode == "forward") == forward:
        return 1.0 / n
    return 1.0


def _fft_input(x, n, dim):
    """``x`` moved so the transformed dim is last, cropped or zero-padded to ``n``."""
    import torch

    x = x.movedim(dim, -1)
    size = x.shape[-1]
    n = size if n is None else n
    if n < size:
        x = x.narrow(-1, 0, n)
    elif n > size:
        x = torch.nn.functional.pad(x, (0, n - size)) if not x.is_complex() else _from_parts(
            *[torch.nn.functional.pad(part, (0, n - size)) for part in _parts(x)])
    return x, n


def _fft_complex(inverse: bool):
    def decompose(x, n=None, dim=-1, norm=None):
        import torch

        if x.dim() == 0 or not (x.is_complex() or x.dtype.is_floating_point):
            return NotImplemented
        x, n = _fft_input(x, n, dim)
        if n > DFT_LIMIT or n == 0:
            return NotImplemented
        real_dtype = x.real.dtype if x.is_complex() else x.dtype
        re, im = _parts(x) if x.is_complex() else (x, torch.zeros_like(x))
        work = torch.float64 if real_dtype == torch.float64 else torch.float32
        angles = _dft_angles(n, n, n, x.device)
        c, s = torch.cos(angles).to(work), torch.sin(angles).to(work)
        if not inverse:
            s = -s
        re, im = re.to(work), im.to(work)
        # (re + i im) (c + i s)^T along the last dim
        out_re = re @ c.T - im @ s.T
        out_im = re @ s.T + im @ c.T
        scale = _norm_scale(norm, n, forward=not inverse)
        result = _from_parts(out_re * scale, out_im * scale)
        return result.to(torch.complex128 if work == torch.float64 else torch.complex64).movedim(-1, dim)

    return decompose


def _rfft(x, n=None, dim=-1, norm=None):
    import torch

    if x.dim() == 0 or not x.dtype.is_floating_point:
        return NotImplemented
    x, n = _fft_input(x, n, dim)
    if n > DFT_LIMIT or n == 0:
        return NotImplemented
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = _dft_angles(n, n // 2 + 1, n, x.device)
    scale = _norm_scale(norm, n, forward=True)
    xr = x.to(work)
    result = _from_parts(xr @ torch.cos(angles).to(work).T * scale, -(xr @ torch.sin(angles).to(work).T) * scale)
    return result.movedim(-1, dim)


def _irfft(x, n=None, dim=-1, norm=None):
    """The inverse of ``rfft``: bins 0 .. n//2 of a Hermitian spectrum, the imaginary parts
    of bin 0 (and of bin n/2 for even n) ignored, as torch's."""
    import torch

    if x.dim() == 0 or not x.is_complex():
        return NotImplemented
    x = x.movedim(dim, -1)
    bins = x.shape[-1]
    n = 2 * (bins - 1) if n is None else n
    if n <= 0 or n > DFT_LIMIT:
        return NotImplemented
    used = n // 2 + 1
    re, im = _parts(x)
    if bins >= used:
        re, im = re.narrow(-1, 0, used), im.narrow(-1, 0, used)
    else:
        re, im = (torch.nn.functional.pad(p, (0, used - bins)) for p in (re, im))
    work = torch.float64 if re.dtype == torch.float64 else torch.float32
    k = torch.arange(used, device=x.device)
    edge = (k == 0) | ((k == n // 2) if n % 2 == 0 else (k < 0))  # bins counted once
    weights = torch.where(edge, 1.0, 2.0).to(work)
    angles = _dft_angles(used, n, n, x.device)  # [n, used]
    c, s = torch.cos(angles).to(work) * weights, torch.sin(angles).to(work) * weights
    out = re.to(work) @ c.T - im.to(work) @ s.T
    return (out * _norm_scale(norm, n, forward=False)).movedim(-1, dim)


def _fft_dims(x, s, dim):
    """The dims an n-dimensional transform runs over (torch's defaults: all, or the last len(s))."""
    if dim is None:
        return list(range(x.dim() - (len(s) if s is not None else x.dim()), x.dim()))
    return [d % x.dim() for d in ([dim] if isinstance(dim, int) else dim)]


def _fft_n(inverse: bool, default_dim=None):
    """``fftn``/``ifftn``/``fft2``/``ifft2`` (torch-mlir has no lowering for them; FNet's
    Fourier mixing): one 1-D transform per dim, each the DFT above."""
    def decompose(x, s=None, dim=default_dim, norm=None):
        if x.dim() == 0:
            return NotImplemented
        dims = _fft_dims(x, s, dim)
        if s is not None and len(s) != len(dims):
            return NotImplemented
        one = _fft_complex(inverse)
        for i, d in enumerate(dims):
            x = one(x, None if s is None else s[i], d, norm)
            if x is NotImplemented:
                return NotImplemented
        return x
    return decompose


def _rfft_n(default_dim=None):
    """``rfftn``/``rfft2``: the real transform along the last of its dims, then a complex one
    along each of the others."""
    def decompose(x, s=None, dim=default_dim, norm=None):
        if x.dim() == 0 or not x.dtype.is_floating_point:
            return NotImplemented
        dims = _fft_dims(x, s, dim)
        if s is not None and len(s) != len(dims):
            return NotImplemented
        x = _rfft(x, None if s is None else s[-1], dims[-1], norm)
        if x is NotImplemented or len(dims) == 1:
            return x
        return _fft_n(False)(x, None if s is None else s[:-1], dims[:-1], norm)
    return decompose


def _pool_size(length, kernel: int, stride: int, padding: int, dilation: int, ceil: bool) -> int:
    """A pooling window count along one dim, as torch computes it."""
    span = length + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= length + padding:  # the last window starts in the right padding
        out -= 1
    return out


def _per_dim(value, default: list, dims: int) -> list:
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    value = value or list(default)
    return value * dims if len(value) == 1 else value


def _simpler_pool(x, kernel, stride, padding, dilation, ceil: bool, dims: int):
    """An equal pooling IREE compiles, as (input, kernel, stride, ceil_mode), or None when there
    is nothing to change (or the sizes are not static):

    - a dim with one window, no padding and no dilation whose length is not the window's (a
      floor-mode leftover, or a ceil-mode window longer than the input): the input cut to what
      the window covers, and the window that length (IREE folds the unit output dim away and
      then rejects the longer input; EfficientNet's pooler, AvgPool2d(1280, ceil_mode=True) over
      7x7);
    - ceil mode where it changes no output size: floor mode (torch-mlir pads every spatial dim
      for ceil mode, and where the size is the floor one the padded input contradicts it:
      Funnel's pooling along the sequence with kernel (2, 1))."""
    kernel = _per_dim(kernel, [1], dims)
    stride, padding, dilation = _per_dim(stride, kernel, dims), _per_dim(padding, [0], dims), _per_dim(dilation, [1], dims)
    sizes = list(x.shape[-dims:])
    if len(kernel) != dims or not all(isinstance(n, int) for n in sizes):
        return None
    changed = False
    for i, n in enumerate(sizes):
        if (padding[i] == 0 and dilation[i] == 1 and n != kernel[i]
                and _pool_size(n, kernel[i], stride[i], 0, 1, ceil) == 1):
            width = min(n, kernel[i])
            x = x.narrow(x.dim() - dims + i, 0, width)
            sizes[i] = kernel[i] = stride[i] = width
            changed = True
    if ceil and all(_pool_size(n, k, st, p, d, True) == _pool_size(n, k, st, p, d, False)
                    for n, k, st, p, d in zip(sizes, kernel, stride, padding, dilation)):
        ceil, changed = False, True
    return (x, kernel, stride, ceil) if changed else None


def _avg_pool(op, dims: int):
    def decompose(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, *rest):
        simpler = _simpler_pool(x, kernel_size, stride, padding, [1], ceil_mode, dims)
        if simpler is None:
            return NotImplemented
        x, kernel, stride, ceil = simpler
        return op(x, kernel, stride, padding, ceil, count_include_pad, *rest)
    return decompose


def _max_pool(op, dims: int, indices: bool = False):
    def decompose(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        simpler = _simpler_pool(x, kernel_size, stride, padding, dilation, ceil_mode, dims)
        if simpler is None:
            return NotImplemented
        cut, kernel, stride, ceil = simpler
        out = op(cut, kernel, stride, padding, dilation, ceil)
        if not indices or cut.shape == x.shape:
            return out
        # the indices count positions in the cut input's window plane: the same coordinates
        # (every cut starts at 0), counted in the full input's
        values, flat = out
        rest, full = flat, flat * 0
        scale = 1
        for cut_size, size in zip(reversed(cut.shape[-dims:]), reversed(x.shape[-dims:])):
            full = full + (rest % cut_size) * scale
            rest, scale = rest // cut_size, scale * size
        return values, full
    return decompose


def _constant_pad(x, pad, value=0):
    """Padding with negative amounts (a crop; RWKV's time shift pads (0, 0, 1, -1)): the crop
    as a slice, then the non-negative padding. torch-mlir writes negative amounts into
    ``tensor.pad``, which folded to its input when the amounts summed to zero (wrong results,
    no error) and failed to compile otherwise."""
    import torch

    pad = list(pad)
    if all(not isinstance(p, int) or p >= 0 for p in pad):
        return NotImplemented
    for i in range(len(pad) // 2):
        dim, low, high = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        start = max(-low, 0)
        stop = x.shape[dim] - max(-high, 0)
        if start or max(-high, 0):
            x = x.narrow(dim, start, stop - start)
    return torch.ops.aten.constant_pad_nd.default(x, [max(p, 0) for p in pad], value)


def _scatter_positive_dim(op):
    """``scatter``/``scatter_add``/``scatter_reduce`` along a negative dim, counted from the
    front: torch-mlir's TMTensor lowering indexes with the dim as given and iree-compile
    crashed (signal 11; GroupViT's hard softmax scatters along -1)."""
    def decompose(x, dim, *rest, **kwargs):
        if not isinstance(dim, int) or dim >= 0:
            return NotImplemented
        return op(x, dim % max(x.dim(), 1), *rest, **kwargs)
    return decompose


# Lanczos' approximation of the gamma function, g = 7, nine terms (the widely published set)
LANCZOS_G = 7.0
LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
           12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)


def _math_dtype(x):
    import torch

    return x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32


def _lgamma(x):
    """log |gamma(x)| (torch-mlir has no lowering: the Student-t log-likelihood of Informer,
    Autoformer and TimeSeriesTransformer): Lanczos for x >= 0.5, the reflection formula below
    (sin(pi x) on x - round(x), exact for any x), +inf at the poles."""
    import math

    import torch

    if not x.dtype.is_floating_point:
        return NotImplemented
    v = x.to(_math_dtype(x))
    reflect = v < 0.5
    z = torch.where(reflect, -v, v - 1)  # gamma(y) with y = 1 - v (reflected) or v, as z = y - 1
    series = LANCZOS[0] + sum(c / (z + i) for i, c in enumerate(LANCZOS[1:], 1))
    t = z + LANCZOS_G + 0.5
    upper = 0.5 * math.log(2 * math.pi) + (z + 0.5) * t.log() - t + series.log()
    lower = math.log(math.pi) - (math.pi * (v - v.round())).sin().abs().log() - upper
    pole = reflect & (v == v.floor())
    return torch.where(pole, torch.full_like(v, math.inf), torch.where(reflect, lower, upper)).to(x.dtype)


def _digamma(x):
    """d/dx log gamma(x) (no torch-mlir lowering either): six steps of the recurrence, then the
    asymptotic series; the reflection formula below 0.5; -inf at 0 and nan at the negative
    integers, as torch."""
    import math

    import torch

    if not x.dtype.is_floating_point:
        return NotImplemented
    v = x.to(_math_dtype(x))
    reflect = v < 0.5
    y = torch.where(reflect, 1 - v, v)
    shift = sum(1 / (y + k) for k in range(6))
    w = y + 6
    w2 = 1 / (w * w)
    tail = w2 * (1 / 12 - w2 * (1 / 120 - w2 * (1 / 252 - w2 * (1 / 240 - w2 / 132))))
    upper = w.log() - 0.5 / w - tail - shift
    lower = upper - math.pi / (math.pi * (v - v.round())).tan()
    out = torch.where(reflect, lower, upper)
    out = torch.where(reflect & (v == v.floor()), torch.full_like(v, math.nan), out)
    return torch.where(v == 0, torch.full_like(v, -math.inf), out).to(x.dtype)


def _first(*rules):
    def decompose(*args, **kwargs):
        for rule in rules:
            result = rule(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return NotImplemented

    return decompose


def table() -> dict:
    import torch

    aten = torch.ops.aten
    out = {
        aten.add.Tensor: _add, aten.sub.Tensor: _sub, aten.abs.default: _abs, aten.angle.default: _angle,
        aten._conj.default: _conj, aten.conj_physical.default: _conj, aten.exp.default: _exp,
        aten.sum.default: lambda z, *, dtype=None: _sum(z, None, False, dtype=dtype), aten.sum.dim_IntList: _sum,
        aten.complex.default: _from_parts, aten.mul.Tensor: _mul_real, aten.mul.Scalar: _mul_real,
        aten.randint.low: _randint_float, aten.square.default: _square,
        aten.pow.Tensor_Scalar: _pow_int_scalar, aten.pow.Tensor_Tensor: _pow_int_tensor,
        aten.kthvalue.default: _kthvalue, aten.median.dim: _median_dim, aten.median.default: _median,
        aten.cummax.default: _cumulative_extreme(True), aten.cummin.default: _cumulative_extreme(False),
        aten._cdist_forward.default: _cdist, aten.searchsorted.Tensor: _searchsorted,
        aten._embedding_bag_forward_only.default: _embedding_bag, aten._embedding_bag.default: _embedding_bag,
        aten.fft_fft.default: _fft_complex(False), aten.fft_ifft.default: _fft_complex(True),
        aten.fft_rfft.default: _rfft, aten.fft_irfft.default: _irfft,
    }
    for op, dims in ((aten.avg_pool1d.default, 1), (aten.avg_pool2d.default, 2), (aten.avg_pool3d.default, 3)):
        out[op] = _avg_pool(op, dims)
    for op, dims in ((aten.max_pool1d.default, 1), (aten.max_pool2d.default, 2), (aten.max_pool3d.default, 3)):
        out[op] = _max_pool(op, dims)
    for op, dims in ((aten.max_pool2d_with_indices.default, 2), (aten.max_pool3d_with_indices.default, 3)):
        out[op] = _max_pool(op, dims, indices=True)
    out[aten.constant_pad_nd.default] = _constant_pad
    out[aten.lgamma.default], out[aten.digamma.default] = _lgamma, _digamma
    for op in (aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter_reduce.two):
        out[op] = _scatter_positive_dim(op)
    out[aten.fft_fftn.default], out[aten.fft_ifftn.default] = _fft_n(False), _fft_n(True)
    out[aten.fft_fft2.default], out[aten.fft_ifft2.default] = _fft_n(False, (-2, -1)), _fft_n(True, (-2, -1))
    out[aten.fft_rfftn.default], out[aten.fft_rfft2.default] = _rfft_n(), _rfft_n((-2, -1))
    for op in (aten.mul.Tensor, aten.mul.Scalar):  # every rule of an op, first that applies
        out[op] = _first(out[op], _mul_complex_number, _mul_narrow_int)
    return out
