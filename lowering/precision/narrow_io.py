"""Pass ``narrow-io{dtype=f16|bf16}``: the public functions take and return their f32 tensors
as 16-bit floats. Test: tests/lowering/precision/narrow-io.mlir.

    func @main(%x: f32) -> f32 { ...; return %y }
        ->  func @main(%x16: f16) -> f16 { %x = convert(%x16, f32); ...; return convert(%y, f16) }

The precision policies run it before ``demote-precision`` when asked to (``fp16{io=fp16}``,
``bf16{io=bf16}``; cuvil_mlir/compiler/precision.py), so the casts it adds meet the ones demotion
makes and fold away (``fold_cast_pair``): a model whose first and last ops are demoted reads
and writes 16-bit buffers directly, half the bytes a caller moves. Integer, boolean and f64
tensors keep their types. The compiled model's signature is read after the pipeline, so it
says float16 (the caller passes 16-bit arrays).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.passes import FunctionPass
from cuvil_mlir.core.patterns import info, vtensor_type
from cuvil_mlir.lowering.common import convert

NAME = "narrow-io"


@dataclass(frozen=True)
class NarrowIOOptions:
    """``dtype``: the 16-bit float type the public functions take and return."""

    dtype: Literal["f16", "bf16"] = "f16"


DESCRIPTION = "public functions take and return their f32 tensors as f16/bf16 (casts at entry and before return)"


def _public_functions(module: ir.Module):
    for op in module.body.operations:
        if op.operation.name != "func.func" or not op.regions[0].blocks:
            continue
        if "sym_visibility" in op.attributes and ir.StringAttr(op.attributes["sym_visibility"]).value != "public":
            continue
        yield op


def _is_f32_tensor(value) -> bool:
    t = info(value)
    return t is not None and t.dtype == "f32"


def narrow_function(func, half: str) -> Counter:
    fired = Counter()
    block = func.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    inputs, results = list(ftype.inputs), list(ftype.results)
    with func.location:
        for i, arg in enumerate(block.arguments):
            if not _is_f32_tensor(arg):
                continue
            uses = [(use.owner, use.operand_number) for use in arg.uses]
            arg.set_type(vtensor_type(info(arg).shape, half))
            with ir.InsertionPoint.at_block_begin(block):
                wide = convert(arg, "f32")
            for owner, index in uses:
                owner.operands[index] = wide
            inputs[i] = arg.type
            fired["narrow_input"] += 1
        returns = [op for op in block.operations if op.operation.name == "func.return"]
        for ret in returns:
            for k, value in enumerate(list(ret.operands)):
                if not _is_f32_tensor(value):
                    continue
                with ir.InsertionPoint(ret):
                    ret.operands[k] = convert(value, half)
                results[k] = ret.operands[k].type
                fired["narrow_output"] += 1
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
    return fired


def run(module: ir.Module, options: NarrowIOOptions) -> Counter:
    fired = Counter()
    for func in _public_functions(module):
        fired += narrow_function(func, options.dtype)
    return fired


PASS = FunctionPass(NAME, run, DESCRIPTION, NarrowIOOptions())
