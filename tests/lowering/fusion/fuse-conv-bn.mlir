// RUN: cuvil-opt %s -p fuse-conv-bn --split-input-file | FileCheck %s
// RUN: cuvil-opt %s -p fuse-conv-bn,fuse-linear-epilogue --split-input-file | FileCheck %s --check-prefix=EPI

// An inference batch norm after a cuvil.conv2d, as torch-mlir decomposes BatchNorm2d in eval():
// (conv - mean) * reciprocal(sqrt(var + eps)) * gamma + beta, per-channel [C,1,1] constants,
// folds into the conv's constant weight and bias. With fuse-linear-epilogue after it (EPI), a
// ReLU after the batch norm then lands in the same conv. The first half are forms the pass must
// fold; the second half are look-alikes it must leave alone.

// ===== fires =====

// -----

// w = [1, 2], b = [0.5, -1]; mean = [1, 2], var + eps = [4, 0.25], gamma = [1, 3], beta = [0.25, 1]:
// scale = gamma / sqrt(var + eps) = [0.5, 6], w' = w * scale = [0.5, 12],
// b' = (b - mean) * scale + beta = [0, -17].
// CHECK-LABEL: func.func @conv_bn_eval
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,1,4,4],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[\[\[}}5.000000e-01]]], {{\[\[\[}}1.200000e+01]]]]> : tensor<2x1x1x1xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[0.000000e+00, -1.700000e+01]> : tensor<2xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%[[X]], %[[W]], %[[B]]) {activation = "none"
// CHECK-NOT:     torch.aten.sub.Tensor
// CHECK-NOT:     torch.aten.mul.Tensor
// CHECK-NOT:     torch.aten.add.Tensor
// CHECK:         return %[[Y]]
// EPI-LABEL:     func.func @conv_bn_eval
// EPI:           %[[Y:[0-9]+]] = "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "none"
// EPI:           return %[[Y]]
func.func @conv_bn_eval(%x: !torch.vtensor<[1,1,4,4],f32>) -> !torch.vtensor<[1,2,4,4],f32> {
  %int-1 = torch.constant.int -1
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>) : !torch.vtensor<[2,1,1,1],f32>
  %b = torch.vtensor.literal(dense<[0.5, -1.0]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %mean = torch.vtensor.literal(dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %var = torch.vtensor.literal(dense<[4.0, 0.25]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %gamma = torch.vtensor.literal(dense<[[[1.0]], [[3.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %beta = torch.vtensor.literal(dense<[[[0.25]], [[1.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,1,4,4],f32>, !torch.vtensor<[2,1,1,1],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,2,4,4],f32>
  %1 = torch.aten.sqrt %var : !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>
  %2 = torch.aten.reciprocal %1 : !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>
  %3 = torch.aten.unsqueeze %2, %int-1 : !torch.vtensor<[2],f32>, !torch.int -> !torch.vtensor<[2,1],f32>
  %4 = torch.aten.unsqueeze %3, %int-1 : !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,1,1],f32>
  %5 = torch.aten.sub.Tensor %0, %mean, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[1,2,4,4],f32>
  %6 = torch.aten.mul.Tensor %5, %4 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[1,2,4,4],f32>
  %7 = torch.aten.mul.Tensor %6, %gamma : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[1,2,4,4],f32>
  %8 = torch.aten.add.Tensor %7, %beta, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[1,2,4,4],f32>
  return %8 : !torch.vtensor<[1,2,4,4],f32>
}

// -----

// Depthwise conv without a bias, f16, the batch norm computed in f32 and cast back (as an f16
// model exports), then a ReLU: one conv2d {activation = "relu"} with EPI.
// scale = [0.5, 2], w' = [0.5, 2], b' = -mean * scale = [-0.5, -4].
// CHECK-LABEL: func.func @depthwise_conv_bn_f16_relu
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[\[\[}}5.000000e-01]]], {{\[\[\[}}2.000000e+00]]]]> : tensor<2x1x1x1xf16>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[-5.000000e-01, -4.000000e+00]> : tensor<2xf16>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%{{.*}}, %[[W]], %[[B]]) {activation = "none", dilation = array<i64: 1, 1>, groups = 2 : i64
// CHECK-NOT:     torch.aten.to.dtype
// CHECK:         torch.aten.relu %[[Y]]
// EPI-LABEL:     func.func @depthwise_conv_bn_f16_relu
// EPI:           %[[Y:[0-9]+]] = "cuvil.conv2d"(%{{.*}}, %{{.*}}, %{{.*}}) {activation = "relu", dilation = array<i64: 1, 1>, groups = 2 : i64
// EPI-NOT:       torch.aten.relu
// EPI:           return %[[Y]]
func.func @depthwise_conv_bn_f16_relu(%x: !torch.vtensor<[1,2,4,4],f16>) -> !torch.vtensor<[1,2,4,4],f16> {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %int5 = torch.constant.int 5
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x1x1x1xf16>) : !torch.vtensor<[2,1,1,1],f16>
  %mean = torch.vtensor.literal(dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %invstd = torch.vtensor.literal(dense<[[[0.5]], [[2.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,2,4,4],f16>, !torch.vtensor<[2,1,1,1],f16>) -> !torch.vtensor<[1,2,4,4],f16>
  %1 = torch.aten.sub.Tensor %0, %mean, %int1 : !torch.vtensor<[1,2,4,4],f16>, !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[1,2,4,4],f32>
  %2 = torch.aten.mul.Tensor %1, %invstd : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[1,2,4,4],f32>
  %3 = torch.aten.to.dtype %2, %int5, %false, %false, %none : !torch.vtensor<[1,2,4,4],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[1,2,4,4],f16>
  %4 = torch.aten.relu %3 : !torch.vtensor<[1,2,4,4],f16> -> !torch.vtensor<[1,2,4,4],f16>
  return %4 : !torch.vtensor<[1,2,4,4],f16>
}

// ===== must not fire =====

// -----

// The conv's result is also returned: folding would change that output.
// CHECK-LABEL: func.func @no_fold_when_conv_has_other_uses
// CHECK:         %[[C:[0-9]+]] = "cuvil.conv2d"
// CHECK:         torch.aten.mul.Tensor %[[C]]
func.func @no_fold_when_conv_has_other_uses(%x: !torch.vtensor<[1,1,4,4],f32>) -> (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[1,2,4,4],f32>) {
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x1x1x1xf32>) : !torch.vtensor<[2,1,1,1],f32>
  %s = torch.vtensor.literal(dense<[[[0.5]], [[2.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,1,4,4],f32>, !torch.vtensor<[2,1,1,1],f32>) -> !torch.vtensor<[1,2,4,4],f32>
  %1 = torch.aten.mul.Tensor %0, %s : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[1,2,4,4],f32>
  return %1, %0 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[1,2,4,4],f32>
}

// -----

// Statistics that are function arguments (not constants), as in training mode.
// CHECK-LABEL: func.func @no_fold_non_constant_statistics
// CHECK:         %[[C:[0-9]+]] = "cuvil.conv2d"
// CHECK:         torch.aten.sub.Tensor %[[C]]
func.func @no_fold_non_constant_statistics(%x: !torch.vtensor<[1,1,4,4],f32>, %mean: !torch.vtensor<[2,1,1],f32>) -> !torch.vtensor<[1,2,4,4],f32> {
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x1x1x1xf32>) : !torch.vtensor<[2,1,1,1],f32>
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,1,4,4],f32>, !torch.vtensor<[2,1,1,1],f32>) -> !torch.vtensor<[1,2,4,4],f32>
  %1 = torch.aten.sub.Tensor %0, %mean, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[1,2,4,4],f32>
  return %1 : !torch.vtensor<[1,2,4,4],f32>
}

// -----

// A constant that varies over the spatial dims is not per channel.
// CHECK-LABEL: func.func @no_fold_spatial_constant
// CHECK:         %[[C:[0-9]+]] = "cuvil.conv2d"
// CHECK:         torch.aten.mul.Tensor %[[C]]
func.func @no_fold_spatial_constant(%x: !torch.vtensor<[1,1,2,2],f32>) -> !torch.vtensor<[1,2,2,2],f32> {
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x1x1x1xf32>) : !torch.vtensor<[2,1,1,1],f32>
  %s = torch.vtensor.literal(dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[2,1,1,1],f32>) -> !torch.vtensor<[1,2,2,2],f32>
  %1 = torch.aten.mul.Tensor %0, %s : !torch.vtensor<[1,2,2,2],f32>, !torch.vtensor<[2,2],f32> -> !torch.vtensor<[1,2,2,2],f32>
  return %1 : !torch.vtensor<[1,2,2,2],f32>
}

// -----

// A conv that already has an activation: the scale applies after the relu, not to the weights.
// CHECK-LABEL: func.func @no_fold_after_fused_activation
// CHECK:         %[[C:[0-9]+]] = "cuvil.conv2d"(%{{.*}}, %{{.*}}) {activation = "relu"
// CHECK:         torch.aten.mul.Tensor %[[C]]
func.func @no_fold_after_fused_activation(%x: !torch.vtensor<[1,1,4,4],f32>) -> !torch.vtensor<[1,2,4,4],f32> {
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x1x1x1xf32>) : !torch.vtensor<[2,1,1,1],f32>
  %s = torch.vtensor.literal(dense<[[[-0.5]], [[2.0]]]> : tensor<2x1x1xf32>) : !torch.vtensor<[2,1,1],f32>
  %0 = "cuvil.conv2d"(%x, %w) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,1,4,4],f32>, !torch.vtensor<[2,1,1,1],f32>) -> !torch.vtensor<[1,2,4,4],f32>
  %1 = torch.aten.mul.Tensor %0, %s : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[1,2,4,4],f32>
  return %1 : !torch.vtensor<[1,2,4,4],f32>
}
