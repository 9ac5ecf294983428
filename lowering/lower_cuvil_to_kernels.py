"""Pass ``lower-cuvil-to-kernels``: hand ``cuvil.linear`` ops to a target's own kernels.

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

The function's body is the op itself, on the flattened [M, K] input, so ``lower-cuvil-to-torch``
lowers it like any other: a module that goes no further is still complete and correct. The
target replaces the body at the hand-off (targets/iree.py, in IREE's context, where the HAL
dialect exists) by a ``hal.dispatch.extern`` of its kernel, or keeps it (IREE's codegen) where
it has no kernel for that linear; the package metadata says which (``kernels``).

The contract (what a kernel for sm_90 handles; anything else stays with IREE and is counted as
``kept: <why>``): static shapes; input and weight (and bias) f16 or bf16 of one dtype; K and
the out features multiples of 8 (TMA needs 16-byte row strides); any activation of
cuvil.linear, gated ones included; leading input dims of any rank, flattened into M.
Test: tests/lowering/lower-cuvil-to-kernels.mlir.
"""

from __future__ import annotations

import math

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.diagnostics import module_path
from cuvil_mlir.ir import ir
from cuvil_mlir.passes import ConfigurablePass
from cuvil_mlir.patterns import Firings, build, info, torch_int_list, vtensor_type

NAME = "lower-cuvil-to-kernels"
ARCHS = ("sm_90",)
KERNEL_ATTR = "cuvil.kernel"  # on the private function: which op it computes ("linear")
SPEC_ATTR = "cuvil.kernel_spec"  # its shape, dtype and epilogue
SITES_ATTR = "cuvil.kernel_sites"  # the nn.Module paths of the ops it computes (for the metadata)
KERNEL_DTYPES = ("f16", "bf16")
ALIGN_ELEMENTS = 8  # 16-byte rows of 16-bit elements


def why_not(op) -> str | None:
    """None when a kernel for sm_90 covers this cuvil.linear, else why not (in words)."""
    x, w, y = info(op.input), info(op.weight), info(op.result)
    if any(d < 0 for t in (x, w, y) for d in t.shape):
        return "dynamic shape"
    if x.dtype not in KERNEL_DTYPES:
        return f"dtype {x.dtype}"
    if op.bias is not None and info(op.bias).dtype != x.dtype:
        return f"bias dtype {info(op.bias).dtype} differs from {x.dtype}"
    if y.dtype != x.dtype:
        return f"result dtype {y.dtype} differs from {x.dtype}"
    k, out = x.shape[-1], y.shape[-1]
    if k % ALIGN_ELEMENTS:
        return f"K={k} not a multiple of {ALIGN_ELEMENTS}"
    if out % ALIGN_ELEMENTS:
        return f"out features {out} not a multiple of {ALIGN_ELEMENTS}"
    if math.prod(x.shape[:-1]) == 0 or k == 0:
        return "empty tensor"
    return None


def spec_of(op) -> dict:
    x, w = info(op.input), info(op.weight)
    return {"m": math.prod(x.shape[:-1]), "n": w.shape[0], "k": x.shape[-1], "dtype": x.dtype,
            "activation": cuvil.activation_of(op), "has_bias": op.bias is not None}


def symbol_of(spec: dict) -> str:
    return (f"cuvil_kernel_linear_{spec['m']}x{spec['n']}x{spec['k']}_{spec['dtype']}_{spec['activation']}"
            f"{'_bias' if spec['has_bias'] else ''}")


def _spec_attr(spec: dict) -> ir.Attribute:
    i64 = ir.IntegerType.get_signless(64)
    return ir.DictAttr.get({
        "m": ir.IntegerAttr.get(i64, spec["m"]), "n": ir.IntegerAttr.get(i64, spec["n"]), "k": ir.IntegerAttr.get(i64, spec["k"]),
        "dtype": ir.StringAttr.get(spec["dtype"]), "activation": ir.StringAttr.get(spec["activation"]),
        "has_bias": ir.BoolAttr.get(spec["has_bias"]),
    })


def read_spec(attr) -> dict:
    """The spec dict back from a ``cuvil.kernel_spec`` attribute."""
    d = ir.DictAttr(attr)
    return {"m": ir.IntegerAttr(d["m"]).value, "n": ir.IntegerAttr(d["n"]).value, "k": ir.IntegerAttr(d["k"]).value,
            "dtype": ir.StringAttr(d["dtype"]).value, "activation": ir.StringAttr(d["activation"]).value,
            "has_bias": ir.BoolAttr(d["has_bias"]).value}


def _declare(module: ir.Module, op, spec: dict, symbol: str) -> None:
    """The private function computing one linear on [M, K] (its body: the cuvil.linear)."""
    x, y = info(op.input), info(op.result)
    flat_x = vtensor_type([spec["m"], spec["k"]], x.dtype)
    flat_y = vtensor_type([spec["m"], y.shape[-1]], y.dtype)
    inputs = [flat_x, op.weight.type] + ([op.bias.type] if op.bias is not None else [])
    with ir.InsertionPoint(module.body), op.location:
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(symbol), "sym_visibility": ir.StringAttr.get("private"),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get(inputs, [flat_y])),
                        KERNEL_ATTR: ir.StringAttr.get("linear"), SPEC_ATTR: _spec_attr(spec)})
        block = func.regions[0].blocks.append(*inputs)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            result = cuvil.linear(flat_y, args[0], args[1], args[2] if len(args) > 2 else None, activation=spec["activation"])
            value = result.result if isinstance(result, ir.OpView) else result
            ir.Operation.create("func.return", operands=[value])
    return func


def _is_kernel_function(op) -> bool:
    return op.operation.name == "func.func" and KERNEL_ATTR in op.attributes


def run(module: ir.Module) -> Firings:
    with module.context:
        return _run(module)


def _run(module: ir.Module) -> Firings:
    fired = Firings()
    linears = []
    for func in module.body.operations:
        if func.operation.name != "func.func" or _is_kernel_function(func):
            continue

        def visit(op):
            if op.name == "cuvil.linear":
                linears.append(op.opview)
            return ir.WalkResult.ADVANCE

        func.operation.walk(visit)
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations if _is_kernel_function(op)}
    sites: dict[str, list[str]] = {}
    for op in linears:
        reason = why_not(op)
        if reason is not None:
            fired.record(f"kept: {reason}", op.location)
            continue
        spec = spec_of(op)
        symbol = symbol_of(spec)
        if symbol not in functions:
            functions[symbol] = _declare(module, op, spec, symbol)
        sites.setdefault(symbol, []).append(module_path(op.location))
        x, y = info(op.input), info(op.result)
        with ir.InsertionPoint(op.operation), op.location:
            flat_x = op.input
            if x.rank != 2:
                flat_x = build("torch.aten.view", [op.input, torch_int_list([spec["m"], spec["k"]])], vtensor_type([spec["m"], spec["k"]], x.dtype))
            operands = [flat_x, op.weight] + ([op.bias] if op.bias is not None else [])
            flat_type = vtensor_type([spec["m"], y.shape[-1]], y.dtype)
            call = ir.Operation.create("func.call", results=[flat_type], operands=operands,
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(symbol)})
            out = call.result
            if y.rank != 2:
                out = build("torch.aten.view", [out, torch_int_list(list(y.shape))], op.result.type)
        loc = op.location
        op.result.replace_all_uses_with(out)
        op.operation.erase()
        fired.record("linear", loc)
    for symbol, paths in sites.items():
        func = functions[symbol]
        old = [ir.StringAttr(a).value for a in ir.ArrayAttr(func.attributes[SITES_ATTR])] if SITES_ATTR in func.attributes else []
        func.attributes[SITES_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(p) for p in old + paths])
    return fired


def make(arch: str = "sm_90"):
    from cuvil_mlir.passes import FunctionPass

    return FunctionPass(NAME, run, f"cuvil.linear -> calls of per-shape kernel functions a target fills ({arch})")


PASS = ConfigurablePass(NAME, make, {"arch": ARCHS}, "cuvil.linear -> calls of per-shape kernel functions a target fills")
