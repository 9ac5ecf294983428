// RUN: cuvil-opt %s -p raise-torch-to-cuvil,fuse-linear-epilogue --split-input-file | FileCheck %s

// The bias add and the activation after a cuvil.linear / cuvil.conv2d become the op's bias and
// activation. Inputs are torch IR as the FX importer writes it, raised first (raise maps one op
// to one op and leaves the epilogue alone). The first half are forms the pass must fuse; the
// second half are look-alikes it must leave alone.

// ===== fires =====

// -----

// A separate bias add after the linear folds into it.
// CHECK-LABEL: func.func @mm_then_bias_add
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %[[W]], %[[B]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.add.Tensor
// CHECK:         return %[[Y]]
func.func @mm_then_bias_add(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %wt = torch.aten.t %w : !torch.vtensor<[3,4],f32> -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %wt : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// The bias may come first: add(b, linear).
// CHECK-LABEL: func.func @bias_add_bias_first
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.add.Tensor
func.func @bias_add_bias_first(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %b, %0, %int1 : !torch.vtensor<[3],f32>, !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// What torch.export makes of nn.Linear when addmm is decomposed: mm, mul.Scalar by 1 on
// both the product and the bias, then add. All of it becomes one linear with a bias.
// CHECK-LABEL: func.func @decomposed_addmm_with_mul_by_one
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>)
// CHECK-NOT:     torch.aten.mul.Scalar
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]], %[[B]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.mul.Scalar
// CHECK-NOT:     torch.aten.add.Tensor
// CHECK:         return %[[Y]]
func.func @decomposed_addmm_with_mul_by_one(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %wt = torch.aten.permute %w, %perm : !torch.vtensor<[3,4],f32>, !torch.list<int> -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %wt : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.mul.Scalar %0, %int1 : !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.mul.Scalar %b, %int1 : !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
  %3 = torch.aten.add.Tensor %1, %2, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %3 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @linear_relu
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.relu
// CHECK:         return %[[Y]]
// CHECK-LABEL: func.func @linear_gelu
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.gelu
// CHECK-LABEL: func.func @linear_gelu_tanh
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.gelu
// CHECK-LABEL: func.func @linear_silu
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.silu
// CHECK-LABEL: func.func @linear_sigmoid
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "sigmoid", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.sigmoid
func.func @linear_relu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}
func.func @linear_gelu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %str = torch.constant.str "none"
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[2,3],f32>, !torch.str -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}
func.func @linear_gelu_tanh(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %str = torch.constant.str "tanh"
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[2,3],f32>, !torch.str -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}
func.func @linear_silu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.silu %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}
func.func @linear_sigmoid(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.sigmoid %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// The bias add first, then the activation: both land in the one linear.
// CHECK-LABEL: func.func @mm_bias_add_then_relu
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.add.Tensor
// CHECK-NOT:     torch.aten.relu
func.func @mm_bias_add_then_relu(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %wt = torch.aten.t %w : !torch.vtensor<[3,4],f32> -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %wt : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.relu %1 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @conv_relu
// CHECK:         "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu",
// CHECK-NOT:     torch.aten.relu
// CHECK-LABEL: func.func @conv_gelu
// CHECK:         "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "gelu",
// CHECK-NOT:     torch.aten.gelu
// CHECK-LABEL: func.func @conv_gelu_tanh
// CHECK:         "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "gelu_tanh",
// CHECK-NOT:     torch.aten.gelu
// CHECK-LABEL: func.func @conv_silu
// CHECK:         "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "silu",
// CHECK-NOT:     torch.aten.silu
// CHECK-LABEL: func.func @conv_sigmoid
// CHECK:         "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "sigmoid",
// CHECK-NOT:     torch.aten.sigmoid
func.func @conv_relu(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %b, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.vtensor<[3],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[1,3,4,4],f32> -> !torch.vtensor<[1,3,4,4],f32>
  return %1 : !torch.vtensor<[1,3,4,4],f32>
}
func.func @conv_gelu(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %str = torch.constant.str "none"
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %b, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.vtensor<[3],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[1,3,4,4],f32>, !torch.str -> !torch.vtensor<[1,3,4,4],f32>
  return %1 : !torch.vtensor<[1,3,4,4],f32>
}
func.func @conv_gelu_tanh(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %str = torch.constant.str "tanh"
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %b, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.vtensor<[3],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.aten.gelu %0, %str : !torch.vtensor<[1,3,4,4],f32>, !torch.str -> !torch.vtensor<[1,3,4,4],f32>
  return %1 : !torch.vtensor<[1,3,4,4],f32>
}
func.func @conv_silu(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %b, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.vtensor<[3],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.aten.silu %0 : !torch.vtensor<[1,3,4,4],f32> -> !torch.vtensor<[1,3,4,4],f32>
  return %1 : !torch.vtensor<[1,3,4,4],f32>
}
func.func @conv_sigmoid(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %b, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.vtensor<[3],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.aten.sigmoid %0 : !torch.vtensor<[1,3,4,4],f32> -> !torch.vtensor<[1,3,4,4],f32>
  return %1 : !torch.vtensor<[1,3,4,4],f32>
}

// -----

// ReLU6 / hardtanh(0, 6) as torch.export writes them: minimum(6, maximum(y, 0)) with 0-d constants.
// CHECK-LABEL: func.func @linear_relu6_min_max
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu6", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.maximum
// CHECK-NOT:     torch.aten.minimum
// CHECK:         return %[[Y]]
func.func @linear_relu6_min_max(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %six = torch.vtensor.literal(dense<6.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %zero = torch.vtensor.literal(dense<0.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.maximum %0, %zero : !torch.vtensor<[2,3],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.minimum %six, %1 : !torch.vtensor<[],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @conv_relu6_clamp
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%{{.*}}, %{{.*}}) {activation = "relu6",
// CHECK-NOT:     torch.aten.clamp
// CHECK:         return %[[Y]]
func.func @conv_relu6_clamp(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %float0 = torch.constant.float 0.000000e+00
  %float6 = torch.constant.float 6.000000e+00
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %none, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.aten.clamp %0, %float0, %float6 : !torch.vtensor<[1,3,4,4],f32>, !torch.float, !torch.float -> !torch.vtensor<[1,3,4,4],f32>
  return %1 : !torch.vtensor<[1,3,4,4],f32>
}

// -----

// A hand-written SiLU, sigmoid first: y * sigmoid(y) -> silu.
// CHECK-LABEL: func.func @linear_times_sigmoid
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "silu",
// CHECK-NOT:     torch.aten.sigmoid
// CHECK-NOT:     torch.aten.mul.Tensor
// CHECK:         return %[[Y]]
func.func @linear_times_sigmoid(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.sigmoid %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.mul.Tensor %1, %0 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2 : !torch.vtensor<[2,3],f32>
}

// -----

// 0.5 * y * (1 + erf(y / sqrt(2))), as torch.export writes it -> exact gelu.
// CHECK-LABEL: func.func @linear_hand_written_erf_gelu
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "gelu",
// CHECK-NOT:     torch.aten.erf
// CHECK-NOT:     torch.aten.mul
// CHECK:         return %[[Y]]
func.func @linear_hand_written_erf_gelu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %half = torch.constant.float 5.000000e-01
  %sqrt2 = torch.constant.float 1.4142135623730951
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.mul.Scalar %0, %half : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.div.Scalar %0, %sqrt2 : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  %3 = torch.aten.erf %2 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %4 = torch.aten.add.Scalar %3, %int1, %int1 : !torch.vtensor<[2,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,3],f32>
  %5 = torch.aten.mul.Tensor %1, %4 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %5 : !torch.vtensor<[2,3],f32>
}

// -----

// HF GPT-2's MLP input: Conv1D (a decomposed addmm of the flattened input, then a view back
// to 3-D) and NewGELU. Bias and gelu_tanh land in the linear; the view moves after it.
// CHECK-LABEL: func.func @gpt2_conv1d_new_gelu
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>)
// CHECK:         %[[FLAT:[0-9]+]] = torch.aten.view %[[X]]
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[FLAT]], %{{.*}}, %{{.*}}) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-SAME:      -> !torch.vtensor<[10,3],f32>
// CHECK:         %[[V:[0-9]+]] = torch.aten.view %[[Y]], %{{.*}} : !torch.vtensor<[10,3],f32>, !torch.list<int> -> !torch.vtensor<[2,5,3],f32>
// CHECK-NOT:     torch.aten.tanh
// CHECK-NOT:     torch.aten.add
// CHECK:         return %[[V]]
func.func @gpt2_conv1d_new_gelu(%x: !torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,3],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %int5 = torch.constant.int 5
  %int10 = torch.constant.int 10
  %half = torch.constant.float 5.000000e-01
  %three = torch.constant.float 3.000000e+00
  %c = torch.constant.float 4.471500e-02
  %k = torch.constant.float 0.79788456080286541
  %one = torch.constant.float 1.000000e+00
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %s0 = torch.prim.ListConstruct %int10, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %flat = torch.aten.view %x, %s0 : !torch.vtensor<[2,5,4],f32>, !torch.list<int> -> !torch.vtensor<[10,4],f32>
  %0 = torch.aten.mm %flat, %w : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[10,3],f32>
  %1 = torch.aten.mul.Scalar %0, %int1 : !torch.vtensor<[10,3],f32>, !torch.int -> !torch.vtensor<[10,3],f32>
  %2 = torch.aten.mul.Scalar %b, %int1 : !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
  %3 = torch.aten.add.Tensor %1, %2, %int1 : !torch.vtensor<[10,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[10,3],f32>
  %s1 = torch.prim.ListConstruct %int2, %int5, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %h = torch.aten.view %3, %s1 : !torch.vtensor<[10,3],f32>, !torch.list<int> -> !torch.vtensor<[2,5,3],f32>
  %4 = torch.aten.mul.Scalar %h, %half : !torch.vtensor<[2,5,3],f32>, !torch.float -> !torch.vtensor<[2,5,3],f32>
  %5 = torch.aten.pow.Tensor_Scalar %h, %three : !torch.vtensor<[2,5,3],f32>, !torch.float -> !torch.vtensor<[2,5,3],f32>
  %6 = torch.aten.mul.Scalar %5, %c : !torch.vtensor<[2,5,3],f32>, !torch.float -> !torch.vtensor<[2,5,3],f32>
  %7 = torch.aten.add.Tensor %h, %6, %int1 : !torch.vtensor<[2,5,3],f32>, !torch.vtensor<[2,5,3],f32>, !torch.int -> !torch.vtensor<[2,5,3],f32>
  %8 = torch.aten.mul.Scalar %7, %k : !torch.vtensor<[2,5,3],f32>, !torch.float -> !torch.vtensor<[2,5,3],f32>
  %9 = torch.aten.tanh %8 : !torch.vtensor<[2,5,3],f32> -> !torch.vtensor<[2,5,3],f32>
  %10 = torch.aten.add.Scalar %9, %one, %int1 : !torch.vtensor<[2,5,3],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,5,3],f32>
  %11 = torch.aten.mul.Tensor %4, %10 : !torch.vtensor<[2,5,3],f32>, !torch.vtensor<[2,5,3],f32> -> !torch.vtensor<[2,5,3],f32>
  return %11 : !torch.vtensor<[2,5,3],f32>
}

// -----

// A 3-D x @ W + b: view, mm, view, then the bias add (bias first) and a relu on the 3-D value.
// CHECK-LABEL: func.func @matmul_3d_bias_relu_through_view
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK:         %[[V:[0-9]+]] = torch.aten.view %[[Y]]
// CHECK-NOT:     torch.aten.add.Tensor
// CHECK-NOT:     torch.aten.relu
// CHECK:         return %[[V]]
func.func @matmul_3d_bias_relu_through_view(%x: !torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,3],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %int5 = torch.constant.int 5
  %int10 = torch.constant.int 10
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %s0 = torch.prim.ListConstruct %int10, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %flat = torch.aten.view %x, %s0 : !torch.vtensor<[2,5,4],f32>, !torch.list<int> -> !torch.vtensor<[10,4],f32>
  %0 = torch.aten.mm %flat, %w : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[10,3],f32>
  %s1 = torch.prim.ListConstruct %int2, %int5, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.view %0, %s1 : !torch.vtensor<[10,3],f32>, !torch.list<int> -> !torch.vtensor<[2,5,3],f32>
  %2 = torch.aten.add.Tensor %b, %1, %int1 : !torch.vtensor<[3],f32>, !torch.vtensor<[2,5,3],f32>, !torch.int -> !torch.vtensor<[2,5,3],f32>
  %3 = torch.aten.relu %2 : !torch.vtensor<[2,5,3],f32> -> !torch.vtensor<[2,5,3],f32>
  return %3 : !torch.vtensor<[2,5,3],f32>
}

// ===== must not fire =====

// -----

// The linear's result is also returned, so the bias add cannot be folded into it.
// CHECK-LABEL: func.func @no_fold_bias_add_when_linear_has_other_uses
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         %[[A:[0-9]+]] = torch.aten.add.Tensor %[[L]], %{{.*}}, %{{.*}}
// CHECK:         return %[[A]], %[[L]]
func.func @no_fold_bias_add_when_linear_has_other_uses(%x: !torch.vtensor<[2,4],f32>) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>) {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1, %0 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>
}

// -----

// The linear's result feeds the relu and is returned: the relu stays separate.
// CHECK-LABEL: func.func @no_fuse_activation_when_linear_has_two_uses
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK:         %[[R:[0-9]+]] = torch.aten.relu %[[L]]
// CHECK:         return %[[R]], %[[L]]
func.func @no_fuse_activation_when_linear_has_two_uses(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>) {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1, %0 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>
}

// -----

// A second activation after a fused one is left alone (a linear has one epilogue).
// CHECK-LABEL: func.func @no_fuse_second_activation
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu",
// CHECK:         torch.aten.sigmoid %[[L]]
func.func @no_fuse_second_activation(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.sigmoid %1 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2 : !torch.vtensor<[2,3],f32>
}

// -----

// A [2,3] addend is not a bias of 3 out features.
// CHECK-LABEL: func.func @no_fold_bias_of_wrong_shape
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         torch.aten.add.Tensor %[[L]], %{{.*}}, %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>, !torch.int
func.func @no_fold_bias_of_wrong_shape(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %c = torch.vtensor.literal(dense<2.500000e-01> : tensor<2x3xf32>) : !torch.vtensor<[2,3],f32>
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %c, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// A bias that is a function argument (not a constant) is not folded.
// CHECK-LABEL: func.func @no_fold_non_constant_bias
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         torch.aten.add.Tensor
func.func @no_fold_non_constant_bias(%x: !torch.vtensor<[2,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// add with alpha = 2 scales the bias: not a plain bias add.
// CHECK-LABEL: func.func @no_fold_bias_add_with_alpha
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         torch.aten.add.Tensor
func.func @no_fold_bias_add_with_alpha(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int2 = torch.constant.int 2
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int2 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// A gelu with an unknown approximation is not fused.
// CHECK-LABEL: func.func @no_fuse_gelu_unknown_approximation
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         torch.aten.gelu
func.func @no_fuse_gelu_unknown_approximation(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>, %approximate: !torch.str) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.gelu %0, %approximate : !torch.vtensor<[2,3],f32>, !torch.str -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// A cast between the linear and the activation: the relu is of an f64 value.
// CHECK-LABEL: func.func @no_fuse_after_dtype_change
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         %[[C:[0-9]+]] = torch.aten.to.dtype %[[L]]
// CHECK:         torch.aten.relu %[[C]]
func.func @no_fuse_after_dtype_change(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f64> {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int7 = torch.constant.int 7
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.to.dtype %0, %int7, %false, %false, %none : !torch.vtensor<[2,3],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,3],f64>
  %2 = torch.aten.relu %1 : !torch.vtensor<[2,3],f64> -> !torch.vtensor<[2,3],f64>
  return %2 : !torch.vtensor<[2,3],f64>
}

// -----

// An f32 bias on an f16 linear promotes the sum to f32: not the linear's bias.
// CHECK-LABEL: func.func @no_fold_bias_of_other_dtype
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         torch.aten.add.Tensor
func.func @no_fold_bias_of_other_dtype(%x: !torch.vtensor<[2,4],f16>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf16>) : !torch.vtensor<[4,3],f16>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[2,4],f16>, !torch.vtensor<[4,3],f16> -> !torch.vtensor<[2,3],f16>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f16>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// hardtanh(-1, 1) is not ReLU6.
// CHECK-LABEL: func.func @no_fuse_clamp_other_than_0_6
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         torch.aten.hardtanh
func.func @no_fuse_clamp_other_than_0_6(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %lo = torch.constant.float -1.000000e+00
  %hi = torch.constant.float 1.000000e+00
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.hardtanh %0, %lo, %hi : !torch.vtensor<[2,3],f32>, !torch.float, !torch.float -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// The maximum's result is also returned: the relu6 chain cannot be folded.
// CHECK-LABEL: func.func @no_fuse_relu6_when_max_is_reused
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         torch.aten.maximum
// CHECK:         torch.aten.minimum
func.func @no_fuse_relu6_when_max_is_reused(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>) {
  %six = torch.vtensor.literal(dense<6.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %zero = torch.vtensor.literal(dense<0.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.maximum %0, %zero : !torch.vtensor<[2,3],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.minimum %six, %1 : !torch.vtensor<[],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2, %1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>
}

// -----

// y * sigmoid(z) with z another value is a gate, not a SiLU.
// CHECK-LABEL: func.func @no_fuse_times_sigmoid_of_other_value
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         torch.aten.sigmoid %arg3
// CHECK:         torch.aten.mul.Tensor
func.func @no_fuse_times_sigmoid_of_other_value(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>, %z: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.sigmoid %z : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.mul.Tensor %0, %1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %2 : !torch.vtensor<[2,3],f32>
}

// -----

// erf(y / 1.2) is not the gelu constant: the formula stays as written.
// CHECK-LABEL: func.func @no_fuse_gelu_formula_with_wrong_constant
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         torch.aten.erf
func.func @no_fuse_gelu_formula_with_wrong_constant(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %half = torch.constant.float 5.000000e-01
  %c = torch.constant.float 1.200000e+00
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.mul.Scalar %0, %half : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.div.Scalar %0, %c : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  %3 = torch.aten.erf %2 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %4 = torch.aten.add.Scalar %3, %int1, %int1 : !torch.vtensor<[2,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,3],f32>
  %5 = torch.aten.mul.Tensor %1, %4 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %5 : !torch.vtensor<[2,3],f32>
}

// -----

// The erf is also returned: fusing would have to keep it, so nothing fuses.
// CHECK-LABEL: func.func @no_fuse_gelu_formula_intermediate_reused
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none",
// CHECK:         torch.aten.erf
// CHECK:         torch.aten.mul.Tensor
func.func @no_fuse_gelu_formula_intermediate_reused(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>) {
  %int1 = torch.constant.int 1
  %half = torch.constant.float 5.000000e-01
  %sqrt2 = torch.constant.float 1.4142135623730951
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.mul.Scalar %0, %half : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.div.Scalar %0, %sqrt2 : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  %3 = torch.aten.erf %2 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %4 = torch.aten.add.Scalar %3, %int1, %int1 : !torch.vtensor<[2,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,3],f32>
  %5 = torch.aten.mul.Tensor %1, %4 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %5, %3 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>
}

// -----

// A view that changes the last dim: the bias no longer lines up with the out features.
// CHECK-LABEL: func.func @no_fold_bias_through_view_changing_last_dim
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         torch.aten.view
// CHECK:         torch.aten.add.Tensor
func.func @no_fold_bias_through_view_changing_last_dim(%x: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[2,6],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<6xf32>) : !torch.vtensor<[6],f32>
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[4,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[4,3],f32>
  %s = torch.prim.ListConstruct %int2, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.view %0, %s : !torch.vtensor<[4,3],f32>, !torch.list<int> -> !torch.vtensor<[2,6],f32>
  %2 = torch.aten.add.Tensor %1, %b, %int1 : !torch.vtensor<[2,6],f32>, !torch.vtensor<[6],f32>, !torch.int -> !torch.vtensor<[2,6],f32>
  return %2 : !torch.vtensor<[2,6],f32>
}

// -----

// The widened 16-bit linear (torch.export's CPU form of an f16 addmm: mm in f32, then a cast back to
// f16, then a view): the activation after the cast fuses into the f32 linear; cast and view follow it.
// CHECK-LABEL: func.func @widened_f16_linear_relu_through_cast
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : {{.*}} -> !torch.vtensor<[10,3],f32>
// CHECK:         %[[C:[0-9]+]] = torch.aten.to.dtype %[[Y]]
// CHECK:         %[[V:[0-9]+]] = torch.aten.view %[[C]]
// CHECK-NOT:     torch.aten.relu
// CHECK:         return %[[V]]
func.func @widened_f16_linear_relu_through_cast(%x: !torch.vtensor<[10,4],f16>) -> !torch.vtensor<[2,5,3],f16> {
  %int5 = torch.constant.int 5
  %int6 = torch.constant.int 6
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %false = torch.constant.bool false
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf16>) : !torch.vtensor<[4,3],f16>
  %xf = torch.aten.to.dtype %x, %int6, %false, %false, %none : !torch.vtensor<[10,4],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[10,4],f32>
  %wf = torch.aten.to.dtype %w, %int6, %false, %false, %none : !torch.vtensor<[4,3],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %xf, %wf : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[10,3],f32>
  %1 = torch.aten.to.dtype %0, %int5, %false, %false, %none : !torch.vtensor<[10,3],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[10,3],f16>
  %s = torch.prim.ListConstruct %int2, %int5, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.view %1, %s : !torch.vtensor<[10,3],f16>, !torch.list<int> -> !torch.vtensor<[2,5,3],f16>
  %3 = torch.aten.relu %2 : !torch.vtensor<[2,5,3],f16> -> !torch.vtensor<[2,5,3],f16>
  return %3 : !torch.vtensor<[2,5,3],f16>
}

// -----

// The cast must narrow f32 to a 16-bit type: a linear cast up to f64 keeps its relu.
// CHECK-LABEL: func.func @no_fuse_through_widening_cast
// CHECK:         "cuvil.linear"({{.*}}) {activation = "none"
// CHECK:         torch.aten.relu
func.func @no_fuse_through_widening_cast(%x: !torch.vtensor<[10,4],f32>) -> !torch.vtensor<[10,3],f64> {
  %int7 = torch.constant.int 7
  %false = torch.constant.bool false
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[10,3],f32>
  %1 = torch.aten.to.dtype %0, %int7, %false, %false, %none : !torch.vtensor<[10,3],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[10,3],f64>
  %2 = torch.aten.relu %1 : !torch.vtensor<[10,3],f64> -> !torch.vtensor<[10,3],f64>
  return %2 : !torch.vtensor<[10,3],f64>
}
