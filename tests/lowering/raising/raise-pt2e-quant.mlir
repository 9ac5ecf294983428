// RUN: cuvil-opt %s -p raise-pt2e-quant --split-input-file | FileCheck %s

// Each chunk is one case: PT2E quantize/dequantize pairs around a linear/conv (as torch-mlir
// imports torch.ops.quantized_decomposed) become cuvil.qlinear / cuvil.qconv2d reading the
// float input directly; forms with other semantics stay fake-quantized.

// int8 activation, folded per-channel int8 weight (convert_pt2e's default).
// CHECK-LABEL: func.func @linear_int8_per_channel
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[4,4],f32>)
// CHECK-DAG:     %[[Q:[0-9]+]] = torch.vtensor.literal(dense<{{\[}}[1, -2, 3, 4], [5, 6, 7, -8]]> : tensor<2x4xsi8>)
// CHECK-DAG:     %[[S:[0-9]+]] = torch.vtensor.literal(dense<[1.250000e-01, 2.500000e-01]> : tensor<2xf32>)
// CHECK:         "cuvil.qlinear"(%[[X]], %[[Q]], %[[S]], %{{[0-9]+}}) {activation = "relu", input_scale = 2.000000e-02 : f64, input_zero_point = 3 : i64
// CHECK-NOT:     "cuvil.linear"
func.func @linear_int8_per_channel(%x: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[4,2],f32> {
  %b = torch.vtensor.literal(dense<[0.5, -0.5]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wz = torch.vtensor.literal(dense<0> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  %ws = torch.vtensor.literal(dense<[0.125, 0.25]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wq = torch.vtensor.literal(dense<[[1, -2, 3, 4], [5, 6, 7, -8]]> : tensor<2x4xsi8>) : !torch.vtensor<[2,4],si8>
  %none = torch.constant.none
  %s = torch.constant.float 2.000000e-02
  %z = torch.constant.int 3
  %int0 = torch.constant.int 0
  %qmin = torch.constant.int -128
  %qmax = torch.constant.int 127
  %wmin = torch.constant.int -127
  %int8 = torch.constant.int 1
  %0 = torch.quantized_decomposed.quantize_per_tensor %x, %s, %z, %qmin, %qmax, %int8 : !torch.vtensor<[4,4],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,4],si8>
  %1 = torch.quantized_decomposed.dequantize_per_tensor %0, %s, %z, %qmin, %qmax, %int8, %none : !torch.vtensor<[4,4],si8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[4,4],f32>
  %2 = torch.quantized_decomposed.dequantize_per_channel %wq, %ws, %wz, %int0, %wmin, %qmax, %int8, %none : !torch.vtensor<[2,4],si8>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],si64>, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%1, %2, %b) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[4,4],f32>, !torch.vtensor<[2,4],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[4,2],f32>
  return %y : !torch.vtensor<[4,2],f32>
}

// -----

// uint8 activation [0, 255] with zero point 128 is the int8 grid with zero point 0; a
// per-tensor weight gets its scale per channel; a weight still quantized in the graph
// (quantize_per_tensor of a float constant) is quantized the same way here: 0.5 / 0.25 = 2.
// CHECK-LABEL: func.func @linear_uint8_per_tensor_weight
// CHECK-DAG:     torch.vtensor.literal(dense<{{\[}}[2, -4], [8, 0]]> : tensor<2x2xsi8>)
// CHECK-DAG:     torch.vtensor.literal(dense<2.500000e-01> : tensor<2xf32>)
// CHECK:         "cuvil.qlinear"(%arg0, {{.*}}) {activation = "none", input_scale = 1.000000e-01 : f64, input_zero_point = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>}
func.func @linear_uint8_per_tensor_weight(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<[[0.5, -1.0], [2.0, 0.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %none = torch.constant.none
  %s = torch.constant.float 1.000000e-01
  %z = torch.constant.int 128
  %ws = torch.constant.float 2.500000e-01
  %int0 = torch.constant.int 0
  %u8max = torch.constant.int 255
  %qmin = torch.constant.int -128
  %qmax = torch.constant.int 127
  %uint8 = torch.constant.int 0
  %int8 = torch.constant.int 1
  %0 = torch.quantized_decomposed.quantize_per_tensor %x, %s, %z, %int0, %u8max, %uint8 : !torch.vtensor<[3,2],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],ui8>
  %1 = torch.quantized_decomposed.dequantize_per_tensor %0, %s, %z, %int0, %u8max, %uint8, %none : !torch.vtensor<[3,2],ui8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[3,2],f32>
  %2 = torch.quantized_decomposed.quantize_per_tensor %w, %ws, %int0, %qmin, %qmax, %int8 : !torch.vtensor<[2,2],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2],si8>
  %3 = torch.quantized_decomposed.dequantize_per_tensor %2, %ws, %int0, %qmin, %qmax, %int8, %none : !torch.vtensor<[2,2],si8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[2,2],f32>
  %y = "cuvil.linear"(%1, %3) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %y : !torch.vtensor<[3,2],f32>
}

// -----

// conv2d keeps its attributes.
// CHECK-LABEL: func.func @conv2d_int8
// CHECK:         "cuvil.qconv2d"(%arg0, {{.*}}) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, input_scale = 5.000000e-02 : f64, input_zero_point = -2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>}
// CHECK-SAME:      (!torch.vtensor<[1,1,4,4],f32>, !torch.vtensor<[2,1,3,3],si8>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,2,4,4],f32>
func.func @conv2d_int8(%x: !torch.vtensor<[1,1,4,4],f32>) -> !torch.vtensor<[1,2,4,4],f32> {
  %wz = torch.vtensor.literal(dense<0> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  %ws = torch.vtensor.literal(dense<[0.125, 0.25]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wq = torch.vtensor.literal(dense<3> : tensor<2x1x3x3xsi8>) : !torch.vtensor<[2,1,3,3],si8>
  %none = torch.constant.none
  %s = torch.constant.float 5.000000e-02
  %z = torch.constant.int -2
  %int0 = torch.constant.int 0
  %qmin = torch.constant.int -128
  %qmax = torch.constant.int 127
  %int8 = torch.constant.int 1
  %0 = torch.quantized_decomposed.quantize_per_tensor %x, %s, %z, %qmin, %qmax, %int8 : !torch.vtensor<[1,1,4,4],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,1,4,4],si8>
  %1 = torch.quantized_decomposed.dequantize_per_tensor %0, %s, %z, %qmin, %qmax, %int8, %none : !torch.vtensor<[1,1,4,4],si8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[1,1,4,4],f32>
  %2 = torch.quantized_decomposed.dequantize_per_channel %wq, %ws, %wz, %int0, %qmin, %qmax, %int8, %none : !torch.vtensor<[2,1,3,3],si8>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],si64>, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[2,1,3,3],f32>
  %y = "cuvil.conv2d"(%1, %2) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,1,4,4],f32>, !torch.vtensor<[2,1,3,3],f32>) -> !torch.vtensor<[1,2,4,4],f32>
  return %y : !torch.vtensor<[1,2,4,4],f32>
}

// ===== look-alikes that must not change =====

// -----

// Weight zero points that are not 0 (asymmetric weights).
// CHECK-LABEL: func.func @asymmetric_weight
// CHECK-NOT:     cuvil.qlinear
// CHECK:         "cuvil.linear"
func.func @asymmetric_weight(%x: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[4,2],f32> {
  %wz = torch.vtensor.literal(dense<[0, 1]> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  %ws = torch.vtensor.literal(dense<[0.125, 0.25]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wq = torch.vtensor.literal(dense<[[1, -2, 3, 4], [5, 6, 7, -8]]> : tensor<2x4xsi8>) : !torch.vtensor<[2,4],si8>
  %none = torch.constant.none
  %s = torch.constant.float 2.000000e-02
  %z = torch.constant.int 3
  %int0 = torch.constant.int 0
  %qmin = torch.constant.int -128
  %qmax = torch.constant.int 127
  %int8 = torch.constant.int 1
  %0 = torch.quantized_decomposed.quantize_per_tensor %x, %s, %z, %qmin, %qmax, %int8 : !torch.vtensor<[4,4],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,4],si8>
  %1 = torch.quantized_decomposed.dequantize_per_tensor %0, %s, %z, %qmin, %qmax, %int8, %none : !torch.vtensor<[4,4],si8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[4,4],f32>
  %2 = torch.quantized_decomposed.dequantize_per_channel %wq, %ws, %wz, %int0, %qmin, %qmax, %int8, %none : !torch.vtensor<[2,4],si8>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],si64>, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%1, %2) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[4,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[4,2],f32>
  return %y : !torch.vtensor<[4,2],f32>
}

// -----

// A restricted activation range ([-127, 127]) clamps differently from qlinear's [-128, 127];
// and a dequantize without its quantize (an int8 model input) has no float input to read.
// CHECK-LABEL: func.func @restricted_range_and_int8_input
// CHECK-NOT:     cuvil.qlinear
// CHECK:         "cuvil.linear"
// CHECK:         "cuvil.linear"
func.func @restricted_range_and_int8_input(%x: !torch.vtensor<[4,4],f32>, %xq: !torch.vtensor<[4,4],si8>) -> (!torch.vtensor<[4,2],f32>, !torch.vtensor<[4,2],f32>) {
  %wz = torch.vtensor.literal(dense<0> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  %ws = torch.vtensor.literal(dense<[0.125, 0.25]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wq = torch.vtensor.literal(dense<[[1, -2, 3, 4], [5, 6, 7, -8]]> : tensor<2x4xsi8>) : !torch.vtensor<[2,4],si8>
  %none = torch.constant.none
  %s = torch.constant.float 2.000000e-02
  %z = torch.constant.int 0
  %qmin = torch.constant.int -127
  %qmax = torch.constant.int 127
  %int8 = torch.constant.int 1
  %0 = torch.quantized_decomposed.quantize_per_tensor %x, %s, %z, %qmin, %qmax, %int8 : !torch.vtensor<[4,4],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,4],si8>
  %1 = torch.quantized_decomposed.dequantize_per_tensor %0, %s, %z, %qmin, %qmax, %int8, %none : !torch.vtensor<[4,4],si8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[4,4],f32>
  %2 = torch.quantized_decomposed.dequantize_per_channel %wq, %ws, %wz, %z, %qmin, %qmax, %int8, %none : !torch.vtensor<[2,4],si8>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],si64>, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[2,4],f32>
  %y = "cuvil.linear"(%1, %2) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[4,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[4,2],f32>
  %3 = torch.quantized_decomposed.dequantize_per_tensor %xq, %s, %z, %qmin, %qmax, %int8, %none : !torch.vtensor<[4,4],si8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[4,4],f32>
  %y2 = "cuvil.linear"(%3, %2) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[4,4],f32>, !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[4,2],f32>
  return %y, %y2 : !torch.vtensor<[4,2],f32>, !torch.vtensor<[4,2],f32>
}
