// RUN: cuvil-opt %s -p quantize-static --split-input-file | FileCheck %s
// RUN: cuvil-opt %s -p quantize-static,lower-cuvil-to-torch --split-input-file | FileCheck %s --check-prefix=LOWER

// Each chunk is one case: linear/conv ops with a constant float weight and a known input
// range (a calibration's cuvil.input_range, or a clamp with constant bounds) become
// cuvil.qlinear / cuvil.qconv2d; the second RUN line checks their integer lowering.

// Range [-1, 3]: scale 4/255, zero point round(-128 + 1 / (4/255)) = -64; weights per row.
// CHECK-LABEL: func.func @calibrated_linear
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,3,4],f32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[2.500000e-01, 5.000000e-01]> : tensor<2xf32>)
// CHECK-DAG:     %[[Q:[0-9]+]] = torch.vtensor.literal(dense<{{\[}}[32, -64, 16, 127], [0, 127, 0, 0]]> : tensor<2x4xsi8>)
// CHECK-DAG:     %[[S:[0-9]+]] = torch.vtensor.literal(dense<[0.0314960629, 0.00787401571]> : tensor<2xf32>)
// CHECK:         "cuvil.qlinear"(%[[X]], %[[Q]], %[[S]], %[[B]]) {activation = "relu", input_scale = 0.015686274509803921 : f64, input_zero_point = -64 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>}
// CHECK-SAME:      -> !torch.vtensor<[2,3,2],f32>
// CHECK-NOT:     "cuvil.linear"
// LOWER-LABEL: func.func @calibrated_linear
// LOWER:         %[[XS:[0-9]+]] = torch.aten.mul.Scalar %arg0, %{{.*}} : !torch.vtensor<[2,3,4],f32>, !torch.float
// LOWER:         %[[R:[0-9]+]] = torch.aten.round %[[XS]]
// LOWER:         %[[Z:[0-9]+]] = torch.aten.add.Scalar %[[R]], %int-64
// LOWER:         %[[C:[0-9]+]] = torch.aten.clamp %[[Z]], %int-128, %int127
// LOWER:         %[[XQ:[0-9]+]] = torch.prims.convert_element_type %[[C]], %{{.*}} -> !torch.vtensor<[2,3,4],si8>
// LOWER:         %[[X2:[0-9]+]] = torch.aten.view %[[XQ]], %{{.*}} -> !torch.vtensor<[6,4],si8>
// LOWER:         %[[WT:[0-9]+]] = torch.aten.permute %{{.*}} : !torch.vtensor<[2,4],si8>, !torch.list<int> -> !torch.vtensor<[4,2],si8>
// LOWER:         %[[ACC:[0-9]+]] = torch.aten._int_mm %[[X2]], %[[WT]] : !torch.vtensor<[6,4],si8>, !torch.vtensor<[4,2],si8> -> !torch.vtensor<[6,2],si32>
// LOWER:         %[[ACCF:[0-9]+]] = torch.prims.convert_element_type %[[ACC]], {{.*}} -> !torch.vtensor<[6,2],f32>
// LOWER:         torch.aten.sum.dim_IntList {{.*}} -> !torch.vtensor<[2],si32>
// LOWER:         %[[CORR:[0-9]+]] = torch.aten.sub.Tensor %[[ACCF]], {{.*}} -> !torch.vtensor<[6,2],f32>
// LOWER:         %[[Y:[0-9]+]] = torch.aten.mul.Tensor %[[CORR]], {{.*}} -> !torch.vtensor<[6,2],f32>
// LOWER:         torch.aten.add.Tensor %[[Y]], {{.*}} -> !torch.vtensor<[6,2],f32>
// LOWER:         torch.aten.view {{.*}} -> !torch.vtensor<[2,3,2],f32>
// LOWER:         torch.aten.relu
// LOWER-NOT:     cuvil.
func.func @calibrated_linear(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 1.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %b = torch.vtensor.literal(dense<[0.25, 0.5]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %y = "cuvil.linear"(%x, %w, %b) {activation = "relu", "cuvil.input_range" = array<f64: -1.0, 3.0>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,4],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[2,3,2],f32>
  return %y : !torch.vtensor<[2,3,2],f32>
}

// -----

// A non-negative range [0.5, 2] is widened to [0, 2]: scale 2/255, zero point -128; without a
// zero point the lowering needs no weight-sum correction.
// CHECK-LABEL: func.func @clamped_linear
// CHECK:         "cuvil.qlinear"(%{{.*}}) {activation = "none", input_scale = 0.0078431372549019607 : f64, input_zero_point = -128 : i64
// LOWER-LABEL: func.func @clamped_linear
// LOWER:         torch.aten._int_mm
// LOWER:         torch.aten.sum.dim_IntList
func.func @clamped_linear(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %lo = torch.constant.float 5.000000e-01
  %hi = torch.constant.float 2.000000e+00
  %c = torch.aten.clamp %x, %lo, %hi : !torch.vtensor<[3,4],f32>, !torch.float, !torch.float -> !torch.vtensor<[3,4],f32>
  %w = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 1.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%c, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// Symmetric range [-2, 2] as ReLU6/Hardtanh arrive (minimum(hi, maximum(x, lo))): zero point 0,
// so the lowering has no weight-sum correction.
// CHECK-LABEL: func.func @hardtanh_linear
// CHECK:         "cuvil.qlinear"(%{{.*}}) {activation = "none", input_scale = 0.015686274509803921 : f64, input_zero_point = 0 : i64
// LOWER-LABEL: func.func @hardtanh_linear
// LOWER:         torch.aten._int_mm
// LOWER-NOT:     torch.aten.sum.dim_IntList
// LOWER:         return
func.func @hardtanh_linear(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %lo = torch.vtensor.literal(dense<-2.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %hi = torch.vtensor.literal(dense<2.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %m = torch.aten.maximum %x, %lo : !torch.vtensor<[3,4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[3,4],f32>
  %c = torch.aten.minimum %hi, %m : !torch.vtensor<[],f32>, !torch.vtensor<[3,4],f32> -> !torch.vtensor<[3,4],f32>
  %w = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 1.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%c, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// conv2d: per output channel weights; the lowering subtracts the zero point before an int32
// convolution (so its zero padding stands for a real 0).
// CHECK-LABEL: func.func @calibrated_conv2d
// CHECK:         "cuvil.qconv2d"(%{{.*}}) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, input_scale = 0.015686274509803921 : f64, input_zero_point = -64 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>}
// CHECK-SAME:      (!torch.vtensor<[1,1,5,5],f32>, !torch.vtensor<[2,1,2,2],si8>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,2,3,3],f32>
// LOWER-LABEL: func.func @calibrated_conv2d
// LOWER:         %[[Q:[0-9]+]] = torch.prims.convert_element_type {{.*}} -> !torch.vtensor<[1,1,5,5],si8>
// LOWER:         %[[QI:[0-9]+]] = torch.prims.convert_element_type %[[Q]], {{.*}} -> !torch.vtensor<[1,1,5,5],si32>
// LOWER:         %[[QZ:[0-9]+]] = torch.aten.sub.Scalar %[[QI]], %int-64
// LOWER:         torch.aten.convolution %[[QZ]], {{.*}} -> !torch.vtensor<[1,2,3,3],si32>
// LOWER:         torch.aten.relu
func.func @calibrated_conv2d(%x: !torch.vtensor<[1,1,5,5],f32>) -> !torch.vtensor<[1,2,3,3],f32> {
  %w = torch.vtensor.literal(dense<[[[[1.0, 1.0], [1.0, 1.0]]], [[[2.0, -2.0], [2.0, 2.0]]]]> : tensor<2x1x2x2xf32>) : !torch.vtensor<[2,1,2,2],f32>
  %y = "cuvil.conv2d"(%x, %w) {activation = "relu", "cuvil.input_range" = array<f64: -1.0, 3.0>, dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,1,5,5],f32>, !torch.vtensor<[2,1,2,2],f32>) -> !torch.vtensor<[1,2,3,3],f32>
  return %y : !torch.vtensor<[1,2,3,3],f32>
}

// ===== look-alikes that must not change =====

// -----

// No range: no calibration and no clamp.
// CHECK-LABEL: func.func @unknown_range
// CHECK-NOT:     cuvil.qlinear
// CHECK:         "cuvil.linear"
func.func @unknown_range(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 1.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// A range but a weight that is not a constant (an activation x activation product).
// CHECK-LABEL: func.func @activation_weight
// CHECK-NOT:     cuvil.qlinear
// CHECK:         "cuvil.linear"
func.func @activation_weight(%x: !torch.vtensor<[3,4],f32>, %w: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %y = "cuvil.linear"(%x, %w) {activation = "none", "cuvil.input_range" = array<f64: -1.0, 3.0>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// A clamp whose bound is not a constant says nothing about the range.
// CHECK-LABEL: func.func @clamp_by_tensor
// CHECK-NOT:     cuvil.qlinear
// CHECK:         "cuvil.linear"
func.func @clamp_by_tensor(%x: !torch.vtensor<[3,4],f32>, %hi: !torch.vtensor<[],f32>) -> !torch.vtensor<[3,2],f32> {
  %lo = torch.vtensor.literal(dense<-2.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %m = torch.aten.maximum %x, %lo : !torch.vtensor<[3,4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[3,4],f32>
  %c = torch.aten.minimum %hi, %m : !torch.vtensor<[],f32>, !torch.vtensor<[3,4],f32> -> !torch.vtensor<[3,4],f32>
  %w = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 1.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%c, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}
