"""Dynamic dims for a program that has none: ``cuvil compile model.pt2 --dynamic SPEC``.

SPEC names dims of the program's positional inputs (``I:D``: input I, dim D) or keyword
inputs (``name:D``), optionally a shared name and a range:

    --dynamic 0:0                     input 0, dim 0: its own dynamic dim, range 1..inf
    --dynamic batch=0:0,1:0@1..64     input 0 dim 0 and input 1 dim 0: one dim "batch", 1 <= batch <= 64

The program is exported again from its own module (``ExportedProgram.module()``) with
torch.export's ``dynamic_shapes``; torch.export checks that the program is correct for
every size in the range (and says which dims must be static when it is not).
"""

from __future__ import annotations

import re

from cuvil_mlir.core.diagnostics import ImportError_

_SPEC = re.compile(r"^(?:(?P<name>[A-Za-z_]\w*)=)?(?P<dims>[^@]+?)(?:@(?P<min>\d+)\.\.(?P<max>\d+|inf))?$")
_DIM = re.compile(r"^(?P<input>\d+|[A-Za-z_]\w*):(?P<dim>\d+)$")


def parse(specs: list[str]) -> list[tuple[str, list[tuple[int | str, int]], int, int | None]]:
    """``--dynamic`` specs -> (name, [(input, dim)], min, max)."""
    out = []
    for n, spec in enumerate(specs):
        m = _SPEC.match(spec.strip())
        if not m:
            raise ImportError_(f"--dynamic {spec!r}: expected [NAME=]I:D[,I:D...][@MIN..MAX], e.g. batch=0:0,1:0@1..64")
        dims = []
        for part in m.group("dims").split(","):
            d = _DIM.match(part.strip())
            if not d:
                raise ImportError_(f"--dynamic {spec!r}: {part!r} is not INPUT:DIM (an input's position or keyword name, a dim index)")
            dims.append((int(d.group("input")) if d.group("input").isdigit() else d.group("input"), int(d.group("dim"))))
        low = int(m.group("min")) if m.group("min") else 1
        high = None if m.group("max") in (None, "inf") else int(m.group("max"))
        if high is not None and high < low:
            raise ImportError_(f"--dynamic {spec!r}: the range {low}..{high} is empty")
        out.append((m.group("name") or f"dyn{n}", dims, low, high))
    return out


def dynamic_shapes_for(specs: list[str], args: tuple, kwargs: dict):
    """torch.export ``dynamic_shapes`` (a tuple for args, then kwargs by name) for the specs."""
    import torch

    arg_shapes: list[dict | None] = [None] * len(args)
    kw_shapes: dict[str, dict | None] = {k: None for k in kwargs}
    for name, dims, low, high in parse(specs):
        dim = torch.export.Dim(name, min=low, max=high) if high is not None else torch.export.Dim(name, min=low)
        for which, d in dims:
            value = args[which] if isinstance(which, int) and which < len(args) else kwargs.get(which) if isinstance(which, str) else None
            if not isinstance(value, torch.Tensor):
                raise ImportError_(f"--dynamic: input {which!r} is not a tensor input of the program "
                                   f"({len(args)} positional input(s), keyword inputs: {sorted(kwargs) or 'none'})")
            if d >= value.dim():
                raise ImportError_(f"--dynamic: input {which!r} has {value.dim()} dim(s), no dim {d}")
            shapes = arg_shapes if isinstance(which, int) else kw_shapes
            slot = shapes[which] if shapes[which] is not None else {}
            slot[d] = dim
            shapes[which] = slot
    return (*arg_shapes, *kw_shapes.values()) if kw_shapes else tuple(arg_shapes)


def with_dynamic_dims(program, specs: list[str]):
    """``program`` exported again with the dims of ``specs`` dynamic."""
    import torch

    if not program.example_inputs:
        raise ImportError_("--dynamic needs the program's example inputs, and this .pt2 has none (torch.export.save keeps them "
                           "from torch 2.5 on): export it with dynamic_shapes instead")
    args, kwargs = program.example_inputs
    dynamic = dynamic_shapes_for(specs, args, kwargs)
    try:  # without the static shapes' guards (torch >= 2.6); torch.export checks the new ones
        module = program.module(check_guards=False)
    except TypeError:
        module = program.module()
    try:
        if kwargs:
            return torch.export.export(module, args, kwargs, dynamic_shapes={**_arg_names(module, args, dynamic), **{
                k: v for k, v in zip(kwargs, dynamic[len(args):])}}, strict=False)
        return torch.export.export(module, args, dynamic_shapes=dynamic, strict=False)
    except Exception as e:
        text = " ".join(str(e).split())
        raise ImportError_(f"--dynamic: torch.export cannot make these dims dynamic: {type(e).__name__}: {text[:600]}") from e


def _arg_names(module, args, dynamic) -> dict:
    import inspect

    names = list(inspect.signature(module.forward).parameters)[: len(args)]
    return dict(zip(names, dynamic[: len(args)]))
