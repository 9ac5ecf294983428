"""float64 math functions IREE's CPU codegen cannot link, computed in float32.

IREE 3.13's llvm-cpu backend lowers float64 ``sin``, ``cos``, ``tanh``, ``atan``, ``atan2``,
``fmod`` ... to libm calls its embedded linker does not have ("iree-lld: error: undefined
symbol: sin") and cannot legalize float64 ``math.erf`` at all. A float64 program that uses
them would not compile. Each such op is rewritten (on the decomposed FX graph, before
import) to run on float32 copies of its float64 operands, its result widened back: the
program keeps float64 everywhere else, and those ops are float32-accurate (~1e-7 relative).
Ops IREE computes in float64 (add, mul, exp, log, sqrt, matmul, reductions, ...) are untouched.
"""

from __future__ import annotations

# aten overload packets whose float64 form fails on llvm-cpu (checked with IREE 3.13)
NARROWED = (
    "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
    "erf", "erfc", "erfinv", "fmod", "remainder", "gelu", "lgamma", "digamma",
)


def narrow_f64_math(program) -> int:
    """Rewrite the float64 NARROWED ops of ``program``'s graph in place; returns how many."""
    import torch

    packets = {getattr(torch.ops.aten, name) for name in NARROWED if hasattr(torch.ops.aten, name)}
    graph = program.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or getattr(node.target, "overloadpacket", None) not in packets:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype != torch.float64:
            continue
        with graph.inserting_before(node):
            node.args = tuple(_narrow(graph, a) for a in node.args)
        with graph.inserting_after(node):
            wide = graph.call_function(torch.ops.aten._to_copy.default, (node,), {"dtype": torch.float64})
        node.replace_all_uses_with(wide, delete_user_cb=lambda user: user is not wide)
        _set_meta(node, val.to(torch.float32))
        _set_meta(wide, val)
        count += 1
    if count:
        graph.lint()
        program.graph_module.recompile()
    return count


def _narrow(graph, arg):
    import torch

    val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float64:
        return arg
    node = graph.call_function(torch.ops.aten._to_copy.default, (arg,), {"dtype": torch.float32})
    _set_meta(node, val.to(torch.float32))
    return node


def _set_meta(node, val) -> None:
    """The node's value and tensor metadata (torch-mlir reads the result type from them)."""
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    node.meta["val"] = val
    node.meta["tensor_meta"] = _extract_tensor_metadata(val)
