# RUN: %PYTHON %s | FileCheck %s
"""The Python builders of dialects/cuvil.py make ops that verify and print as expected."""

from cuvil_mlir.compiler.context import make_context
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.core.ir import func, ir
from cuvil_mlir.core.patterns import vtensor_type


def f32(*shape):
    return vtensor_type(shape, "f32")


def build(fn, *arg_shapes):
    """Print a module holding one function ``fn(*args)`` of f32 tensors, after verifying it."""
    print(f"TEST: {fn.__name__}")
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            func.FuncOp.from_py_func(*[f32(*shape) for shape in arg_shapes], name=fn.__name__)(fn)
        module.operation.verify()
        print(module)


# CHECK-LABEL: TEST: linear
# CHECK: "cuvil.linear"(%arg0, %arg1, %arg2) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
# CHECK: "cuvil.linear"(%arg0, %arg1) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
def linear(x, w, b):
    return cuvil.linear(f32(2, 3), x, w, b, activation="gelu_tanh"), cuvil.linear(f32(2, 3), x, w)


build(linear, (2, 4), (3, 4), (3,))


# CHECK-LABEL: TEST: conv2d
# CHECK: "cuvil.conv2d"(%arg0, %arg1) {activation = "relu", dilation = array<i64: 1, 1>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>}
def conv2d(x, w):
    return cuvil.conv2d(f32(1, 8, 4, 4), x, w, stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=2, activation="relu")


build(conv2d, (1, 4, 8, 8), (8, 2, 3, 3))


# is_causal = false must survive the builder (ext drops falsy attributes).
# CHECK-LABEL: TEST: attention
# CHECK: "cuvil.attention"(%arg0, %arg1, %arg2) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 2.500000e-01 : f64}
# CHECK: "cuvil.attention"(%arg0, %arg1, %arg2, %arg3) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.250000e-01 : f64}
def attention(q, k, v, mask):
    plain = cuvil.attention(f32(1, 2, 5, 16), q, k, v, scale=0.25, is_causal=False)
    return plain, cuvil.attention(f32(1, 2, 5, 16), q, k, v, mask, scale=0.125, is_causal=True)


build(attention, (1, 2, 5, 16), (1, 2, 5, 16), (1, 2, 5, 16), (1, 1, 5, 5))


# CHECK-LABEL: TEST: norm
# CHECK: "cuvil.norm"(%arg0, %arg1, %arg2) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 1>}
# CHECK: "cuvil.norm"(%arg0, %arg1) {eps = 9.9999999999999995E-7 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 0>}
def norm(x, g, b):
    layer = cuvil.norm(f32(2, 4), x, g, b, kind="layer", eps=1e-5, normalized_shape=[4])
    return layer, cuvil.norm(f32(2, 4), x, g, kind="rms", eps=1e-6, normalized_shape=[4])


build(norm, (2, 4), (4,), (4,))
