// RUN: cuvil-opt %s -p quantize-weights --split-input-file | FileCheck %s
// RUN: cuvil-opt %s -p 'quantize-weights{bits=4,group=2}' --split-input-file | FileCheck %s --check-prefix=INT4

// Each chunk is one case: constant float weights of cuvil.linear / cuvil.conv2d are stored
// quantized (int8 per output channel; int4 group-wise, two per byte) and dequantized right
// before the op; look-alikes without a constant float weight are left alone.

// ===== linear =====

// int8: row 0 has max |w| = 4 (scale 4/127), row 1 is all zeros (scale 1, q 0).
// CHECK-LABEL: func.func @linear_constant_weight
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK-DAG:     %[[S:[0-9]+]] = torch.vtensor.literal(dense<{{\[}}[0.0314960629], [1.000000e+00]]> : tensor<2x1xf32>) : !torch.vtensor<[2,1],f32>
// CHECK-DAG:     %[[Q:[0-9]+]] = torch.vtensor.literal(dense<{{\[}}[32, -64, 16, 127], [0, 0, 0, 0]]> : tensor<2x4xsi8>) : !torch.vtensor<[2,4],si8>
// CHECK-DAG:     %[[INT6:[a-z0-9_]+]] = torch.constant.int 6
// CHECK:         %[[F:[0-9]+]] = torch.prims.convert_element_type %[[Q]], %[[INT6]] : !torch.vtensor<[2,4],si8>, !torch.int -> !torch.vtensor<[2,4],f32>
// CHECK:         %[[W:[0-9]+]] = torch.aten.mul.Tensor %[[F]], %[[S]] : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,4],f32>
// CHECK:         "cuvil.linear"(%[[X]], %[[W]], %{{[0-9]+}}) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     tensor<2x4xf32>
// int4 (group 2): group scales max/7; u = q + 8 packed low | high << 4: [1, -2 | 0.5, 4] -> 27, 249.
// INT4-LABEL: func.func @linear_constant_weight
// INT4-DAG:     %[[S:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[\[\[}}0.285714298]], {{\[\[}}0.571428597]]], {{\[\[\[}}1.000000e+00]], {{\[\[}}1.000000e+00]]]]> : tensor<2x2x1x1xf32>)
// INT4-DAG:     %[[SHIFTS:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[\[\[}}0], [4]]]]> : tensor<1x1x2x1xui8>)
// INT4-DAG:     %[[P:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[\[\[}}27]], {{\[\[}}249]]], {{\[\[\[}}136]], {{\[\[}}136]]]]> : tensor<2x2x1x1xui8>)
// INT4:         %[[SH:[0-9]+]] = torch.aten.bitwise_right_shift.Tensor %[[P]], %[[SHIFTS]] : {{.*}} -> !torch.vtensor<[2,2,2,1],ui8>
// INT4:         %[[U:[0-9]+]] = torch.aten.bitwise_and.Scalar %[[SH]], %{{.*}} -> !torch.vtensor<[2,2,2,1],ui8>
// INT4:         %[[F:[0-9]+]] = torch.prims.convert_element_type %[[U]], %{{.*}} -> !torch.vtensor<[2,2,2,1],f32>
// INT4:         %[[C:[0-9]+]] = torch.aten.sub.Scalar %[[F]], %{{.*}} -> !torch.vtensor<[2,2,2,1],f32>
// INT4:         %[[D:[0-9]+]] = torch.aten.mul.Tensor %[[C]], %[[S]] : {{.*}} -> !torch.vtensor<[2,2,2,1],f32>
// INT4:         %[[W:[0-9]+]] = torch.aten.view %[[D]], %{{.*}} -> !torch.vtensor<[2,4],f32>
// INT4:         "cuvil.linear"(%{{.*}}, %[[W]], %{{[0-9]+}}) {activation = "relu"
func.func @linear_constant_weight(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %b = torch.vtensor.literal(dense<[0.25, 0.5]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %y = "cuvil.linear"(%x, %w, %b) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// A weight read through a transpose of a [K, N] constant is quantized in the [N, K] layout;
// the bias stays in float. f16 models keep f16 scales and an f16 dequantization (dtype 5).
// CHECK-LABEL: func.func @linear_transposed_f16_weight
// CHECK-DAG:     torch.vtensor.literal(dense<{{\[}}[127, 64], [-127, 0], [0, 127]]> : tensor<3x2xsi8>)
// CHECK-DAG:     torch.vtensor.literal({{.*}} : tensor<3x1xf16>) : !torch.vtensor<[3,1],f16>
// CHECK-DAG:     %[[INT5:[a-z0-9_]+]] = torch.constant.int 5
// CHECK:         torch.prims.convert_element_type %{{[0-9]+}}, %[[INT5]] : !torch.vtensor<[3,2],si8>, !torch.int -> !torch.vtensor<[3,2],f16>
// CHECK:         "cuvil.linear"({{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[5,2],f16>, !torch.vtensor<[3,2],f16>) -> !torch.vtensor<[5,3],f16>
// CHECK-NOT:     torch.aten.permute
// INT4-LABEL: func.func @linear_transposed_f16_weight
// INT4:         torch.vtensor.literal({{.*}} : tensor<3x1x1x1xui8>)
// INT4:         "cuvil.linear"
func.func @linear_transposed_f16_weight(%x: !torch.vtensor<[5,2],f16>) -> !torch.vtensor<[5,3],f16> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %wt = torch.vtensor.literal(dense<[[2.0, -1.0, 0.0], [1.0, 0.0, 3.0]]> : tensor<2x3xf16>) : !torch.vtensor<[2,3],f16>
  %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %w = torch.aten.permute %wt, %perm : !torch.vtensor<[2,3],f16>, !torch.list<int> -> !torch.vtensor<[3,2],f16>
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[5,2],f16>, !torch.vtensor<[3,2],f16>) -> !torch.vtensor<[5,3],f16>
  return %y : !torch.vtensor<[5,3],f16>
}

// -----

// int4 with in-features 3 (odd: no two-nibble group) falls back to int8 per channel.
// CHECK-LABEL: func.func @linear_odd_in_features
// CHECK:         tensor<2x3xsi8>
// INT4-LABEL: func.func @linear_odd_in_features
// INT4:         torch.vtensor.literal({{.*}} : tensor<2x3xsi8>)
// INT4-NOT:     bitwise_right_shift
// INT4:         "cuvil.linear"
func.func @linear_odd_in_features(%x: !torch.vtensor<[4,3],f32>) -> !torch.vtensor<[4,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]]> : tensor<2x3xf32>) : !torch.vtensor<[2,3],f32>
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[4,3],f32>, !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[4,2],f32>
  return %y : !torch.vtensor<[4,2],f32>
}

// -----

// ===== conv2d =====

// Per output channel over [I, kh, kw]; scales [O, 1, 1, 1]; the conv keeps its attributes.
// CHECK-LABEL: func.func @conv2d_constant_weight
// CHECK-DAG:     %[[S:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[\[\[}}0.00787401571]]], {{\[\[\[}}0.0157480314]]]]> : tensor<2x1x1x1xf32>)
// CHECK-DAG:     %[[Q:[0-9]+]] = torch.vtensor.literal(dense<127> : tensor<2x1x2x2xsi8>)
// CHECK:         %[[F:[0-9]+]] = torch.prims.convert_element_type %[[Q]]
// CHECK:         %[[W:[0-9]+]] = torch.aten.mul.Tensor %[[F]], %[[S]] : !torch.vtensor<[2,1,2,2],f32>, !torch.vtensor<[2,1,1,1],f32> -> !torch.vtensor<[2,1,2,2],f32>
// CHECK:         "cuvil.conv2d"(%{{.*}}, %[[W]]) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>}
// INT4-LABEL: func.func @conv2d_constant_weight
// INT4:         tensor<2x2x1x1xui8>
// INT4:         torch.aten.view {{.*}} -> !torch.vtensor<[2,1,2,2],f32>
// INT4:         "cuvil.conv2d"
func.func @conv2d_constant_weight(%x: !torch.vtensor<[1,1,5,5],f32>) -> !torch.vtensor<[1,2,3,3],f32> {
  %w = torch.vtensor.literal(dense<[[[[1.0, 1.0], [1.0, 1.0]]], [[[2.0, 2.0], [2.0, 2.0]]]]> : tensor<2x1x2x2xf32>) : !torch.vtensor<[2,1,2,2],f32>
  %y = "cuvil.conv2d"(%x, %w) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,1,5,5],f32>, !torch.vtensor<[2,1,2,2],f32>) -> !torch.vtensor<[1,2,3,3],f32>
  return %y : !torch.vtensor<[1,2,3,3],f32>
}

// -----

// ===== look-alikes that must not change =====

// A weight that is a function argument (not a constant).
// CHECK-LABEL: func.func @linear_argument_weight
// CHECK-NOT:     si8
// CHECK:         "cuvil.linear"(%arg0, %arg1)
// INT4-LABEL: func.func @linear_argument_weight
// INT4-NOT:     ui8
func.func @linear_argument_weight(%x: !torch.vtensor<[3,4],f32>, %w: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// A weight computed from a constant (not a literal or its transpose): left in float.
// CHECK-LABEL: func.func @linear_computed_weight
// CHECK-NOT:     si8
// CHECK:         torch.aten.neg
// CHECK:         "cuvil.linear"
func.func @linear_computed_weight(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> {
  %c = torch.vtensor.literal(dense<[[1.0, -2.0, 0.5, 4.0], [0.0, 1.0, 0.0, 0.0]]> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %w = torch.aten.neg %c : !torch.vtensor<[2,4],f32> -> !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}
