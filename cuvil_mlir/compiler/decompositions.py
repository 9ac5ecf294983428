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


def table() -> dict:
    import torch

    aten = torch.ops.aten
    out = {
        aten.add.Tensor: _add, aten.sub.Tensor: _sub, aten.abs.default: _abs, aten.angle.default: _angle,
        aten._conj.default: _conj, aten.conj_physical.default: _conj, aten.exp.default: _exp,
        aten.sum.default: lambda z, *, dtype=None: _sum(z, None, False, dtype=dtype), aten.sum.dim_IntList: _sum,
        aten.complex.default: _from_parts, aten.mul.Tensor: _mul_real, aten.mul.Scalar: _mul_real,
        aten.randint.low: _randint_float, aten.square.default: _square,
    }
    return out
