"""The hand-off to IREE (targets/iree.py): what the seam rewrites in IREE's own context, checked
on small torch-dialect functions compiled for the CPU: an argument written in place stays in
its buffer (no copy per call), and the optimization-barrier stand-in becomes IREE's barrier."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cuvil_mlir.core.patterns import BARRIER_OP
from cuvil_mlir.runtime.session import Session
from cuvil_mlir.targets import iree, parse_target

CPU = parse_target("cpu").iree_flags()

# One decode step's cache write: row `pos` of a [1, 4, 64, 8] cache (an argument written in place,
# as torch-mlir imports a mutated input) gets `new`; the result sums the filled prefix, read
# after the write.
WRITE_THEN_READ = """
func.func @step(%new: !torch.vtensor<[1,4,1,8],f32>, %pos: !torch.vtensor<[1],si64>, %cache: !torch.tensor<[1,4,64,8],f32>) -> !torch.vtensor<[1,4,8],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %none = torch.constant.none
  %c = torch.copy.to_vtensor %cache : !torch.vtensor<[1,4,64,8],f32>
  %p = torch.aten.item %pos : !torch.vtensor<[1],si64> -> !torch.int
  %end = torch.aten.add.int %p, %int1 : !torch.int, !torch.int -> !torch.int
  %u = torch.aten.slice_scatter %c, %new, %int2, %p, %end, %int1 : !torch.vtensor<[1,4,64,8],f32>, !torch.vtensor<[1,4,1,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,4,64,8],f32>
  torch.overwrite.tensor.contents %u overwrites %cache : !torch.vtensor<[1,4,64,8],f32>, !torch.tensor<[1,4,64,8],f32>
  %s = torch.aten.slice.Tensor %u, %int2, %none, %end, %int1 : !torch.vtensor<[1,4,64,8],f32>, !torch.int, !torch.none, !torch.int, !torch.int -> !torch.vtensor<[1,4,?,8],f32>
  %dims = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
  %r = torch.aten.sum.dim_IntList %s, %dims, %false, %none : !torch.vtensor<[1,4,?,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[1,4,8],f32>
  return %r : !torch.vtensor<[1,4,8],f32>
}
"""
CACHE_BYTES = 4 * 64 * 8 * 4


def _module(text: str):
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import parse_module

    return parse_module(text, make_context())


def _copies_of_the_cache(stream_ir: str) -> int:
    return len(re.findall(rf"stream\.cmd\.copy [^\n]*, %c{CACHE_BYTES} :", stream_ir))


def test_written_argument_is_not_copied_per_call():
    from iree.compiler import compile_str

    stream = iree.compile_to_vmfb(_module(WRITE_THEN_READ), [*CPU, "--compile-to=stream"]).decode()
    assert _copies_of_the_cache(stream) == 0
    assert re.search(rf"rw %\w+\[%c0 for %c{CACHE_BYTES}\]", stream)  # the write goes to the argument's buffer
    # why the rewrite exists: IREE's own lowering copies the whole cache every call (if this
    # starts failing, a new IREE ties it itself and tie_written_arguments can go)
    plain = compile_str(WRITE_THEN_READ.encode(), input_type="torch", extra_args=[*CPU, "--compile-to=stream"]).decode()
    assert _copies_of_the_cache(plain) == 1


def test_written_argument_is_updated_in_place_across_calls():
    session = Session(iree.compile_to_vmfb(_module(WRITE_THEN_READ), CPU), "local-task")
    cache = session.device_zeros([1, 4, 64, 8], "float32")
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal((1, 4, 1, 8)).astype(np.float32) for _ in range(3)]
    for pos, row in enumerate(rows):
        (out,) = session.to_host(session.invoke_resident("step", [row, np.array([pos], np.int64), cache]))
        np.testing.assert_allclose(out, np.concatenate(rows[:pos + 1], axis=2).sum(axis=2), rtol=1e-6)
    (stored,) = session.to_host([cache])
    np.testing.assert_array_equal(stored[:, :, :3], np.concatenate(rows, axis=2))
    assert not stored[:, :, 3:].any()


# A batched matmul whose result is transposed, as HF attention transposes its output: through
# the barrier stand-in lower-cuvil-to-torch puts on decomposed attention's output.
BMM_TRANSPOSED = """
func.func @pv(%p: !torch.vtensor<[12,128,256],f32>, %v: !torch.vtensor<[12,256,64],f32>) -> !torch.vtensor<[128,12,64],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[12,128,256],f32>, !torch.vtensor<[12,256,64],f32> -> !torch.vtensor<[12,128,64],f32>
  %b = torch.operator "util.optimization_barrier"(%o) : (!torch.vtensor<[12,128,64],f32>) -> !torch.vtensor<[12,128,64],f32>
  %t = torch.aten.transpose.int %b, %int0, %int1 : !torch.vtensor<[12,128,64],f32>, !torch.int, !torch.int -> !torch.vtensor<[128,12,64],f32>
  return %t : !torch.vtensor<[128,12,64],f32>
}
"""


@pytest.mark.parametrize("barrier", [True, False])
def test_barrier_keeps_the_transpose_out_of_the_matmul(barrier):
    """IREE folds the transpose into the batch matmul (a form llvm-cpu runs 2-5x slower,
    benchmarks/iree_cpu/README.md) unless the barrier stands between them."""
    from iree.compiler import compile_str
    from iree.compiler import ir as iree_ir

    text = BMM_TRANSPOSED if barrier else re.sub(r'  %b = torch.operator .*\n', "", BMM_TRANSPOSED).replace("%t = torch.aten.transpose.int %b", "%t = torch.aten.transpose.int %o")
    data = iree.materialize_barriers(text.encode())
    with iree_ir.Context():
        text = str(iree_ir.Module.parse(data))
    assert "torch.operator" not in text and (f"{BARRIER_OP} %" in text) == barrier  # the op itself, not the stand-in
    flow = compile_str(data, input_type="torch", extra_args=[*CPU, "--compile-to=flow"]).decode()
    exports = set(re.findall(r"flow\.executable\.export public @([\w$]+)", flow))
    assert any("transpose" in name for name in exports) == barrier, exports
    session = Session(compile_str(data, input_type="torch", extra_args=CPU), "local-task")
    rng = np.random.default_rng(1)
    p, v = rng.standard_normal((12, 128, 256)).astype(np.float32), rng.standard_normal((12, 256, 64)).astype(np.float32)
    (out,) = session.to_host(session.invoke_resident("pv", [p, v]))
    np.testing.assert_allclose(out, np.matmul(p, v).transpose(1, 0, 2), rtol=1e-4, atol=1e-4)


# An argument overwritten with another input's value (not written in its own buffer): IREE must
# copy it into the argument, so its own form stays (a tie after the barrier would order that
# copy after the fence's signal).
OVERWRITE_WITH_INPUT = """
func.func @swap(%x: !torch.vtensor<[1,4,64,8],f32>, %cache: !torch.tensor<[1,4,64,8],f32>) -> !torch.vtensor<[1,4,64,8],f32> {
  %int1 = torch.constant.int 1
  %c = torch.copy.to_vtensor %cache : !torch.vtensor<[1,4,64,8],f32>
  %y = torch.aten.add.Tensor %c, %x, %int1 : !torch.vtensor<[1,4,64,8],f32>, !torch.vtensor<[1,4,64,8],f32>, !torch.int -> !torch.vtensor<[1,4,64,8],f32>
  torch.overwrite.tensor.contents %x overwrites %cache : !torch.vtensor<[1,4,64,8],f32>, !torch.tensor<[1,4,64,8],f32>
  return %y : !torch.vtensor<[1,4,64,8],f32>
}
"""


def test_other_written_values_keep_irees_form():
    from iree.compiler import compile_str

    staged = compile_str(OVERWRITE_WITH_INPUT.encode(), input_type="torch", extra_args=[*CPU, "--compile-to=input"])
    assert iree.tie_written_arguments(staged) == staged
    staged = compile_str(WRITE_THEN_READ.encode(), input_type="torch", extra_args=[*CPU, "--compile-to=input"])
    assert iree.tie_written_arguments(staged) != staged
    session = Session(iree.compile_to_vmfb(_module(OVERWRITE_WITH_INPUT), CPU), "local-task")
    cache = session.device_zeros([1, 4, 64, 8], "float32")
    x = np.random.default_rng(2).standard_normal((1, 4, 64, 8)).astype(np.float32)
    for expected in (x, 2 * x):  # the cache holds x after the first call
        (out,) = session.to_host(session.invoke_resident("swap", [x, cache]))
        np.testing.assert_allclose(out, expected, rtol=1e-6)
