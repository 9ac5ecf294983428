"""External weights during an import (both importers): torch-mlir's lowering pipelines reject
any ``torch.operator`` (their backend contract), so while a module is imported and lowered a
parameter is a call of a private declaration that names it (``call``); ``calls_to_references``
turns the calls into core/params.py's references once the pipeline is done."""

from __future__ import annotations

from cuvil_mlir.core import params
from cuvil_mlir.core.ir import func, ir

DECLARATION_PREFIX = "__cuvil_parameter_"


def call(module: ir.Module, key: str, vtensor_type, symbols: dict) -> ir.Value:
    """A call of the declaration of parameter ``key`` (declared at the top of ``module`` on
    first use; ``symbols``: key -> symbol, kept by the caller) at the current insertion point."""
    symbol = symbols.get(key)
    if symbol is None:
        symbol = symbols[key] = f"{DECLARATION_PREFIX}{len(symbols)}"
        with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
            declaration = func.FuncOp(symbol, ir.FunctionType.get([], [vtensor_type]), visibility="private")
            declaration.attributes[params.KEY_ATTR] = ir.StringAttr.get(key)
    return ir.Operation.create("func.call", results=[vtensor_type], attributes={"callee": ir.FlatSymbolRefAttr.get(symbol)}).result


def calls_to_references(module: ir.Module) -> ir.Module:
    """Each call of a parameter declaration -> a parameter reference; the declarations removed."""
    declarations = {}
    for op in list(module.body.operations):
        if op.operation.name == "func.func" and params.KEY_ATTR in op.operation.attributes:
            symbol = ir.StringAttr(op.operation.attributes["sym_name"]).value
            declarations[symbol] = (ir.StringAttr(op.operation.attributes[params.KEY_ATTR]).value, op)
    calls = []

    def visit(op):
        if op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in declarations:
            calls.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    with module.context:
        for c in calls:
            key = declarations[ir.FlatSymbolRefAttr(c.attributes["callee"]).value][0]
            with ir.InsertionPoint(c), c.location:
                value = params.reference(key, c.results[0].type)
            c.results[0].replace_all_uses_with(value)
            c.erase()
    for _, declaration in declarations.values():
        declaration.operation.erase()
    return module
