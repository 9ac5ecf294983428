// Round trip: each op parses, prints, and parses again to the same op. The invalid chunks at the
// end print as `// error:` comments, which the second cuvil-opt reads as empty modules.
// RUN: not cuvil-opt %s --split-input-file | cuvil-opt --split-input-file | FileCheck %s

// Verifier errors: each invalid op is reported at its own line with what is wrong.
// RUN: not cuvil-opt %s --split-input-file | FileCheck %s --check-prefix=ERR

// CHECK-LABEL: func.func @linear_with_bias
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%arg0, %arg1, %arg2) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[8,64],f32>, !torch.vtensor<[128,64],f32>, !torch.vtensor<[128],f32>) -> !torch.vtensor<[8,128],f32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear_with_bias(%x: !torch.vtensor<[8,64],f32>, %w: !torch.vtensor<[128,64],f32>, %b: !torch.vtensor<[128],f32>) -> !torch.vtensor<[8,128],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[8,64],f32>, !torch.vtensor<[128,64],f32>, !torch.vtensor<[128],f32>) -> !torch.vtensor<[8,128],f32>
  return %0 : !torch.vtensor<[8,128],f32>
}

// -----

// A gated activation: the result has half of the weight's out features.
// CHECK-LABEL: func.func @linear_gated
// CHECK:         "cuvil.linear"(%arg0, %arg1, %arg2) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[?,64],f32>, !torch.vtensor<[256,64],f32>, !torch.vtensor<[256],f32>) -> !torch.vtensor<[?,128],f32>
func.func @linear_gated(%x: !torch.vtensor<[?,64],f32>, %w: !torch.vtensor<[256,64],f32>, %b: !torch.vtensor<[256],f32>) -> !torch.vtensor<[?,128],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[?,64],f32>, !torch.vtensor<[256,64],f32>, !torch.vtensor<[256],f32>) -> !torch.vtensor<[?,128],f32>
  return %0 : !torch.vtensor<[?,128],f32>
}

// -----

// Every activation, no bias, a dynamic batch dim and a 3-D input.
// CHECK-LABEL: func.func @linear_activations
// CHECK:         "cuvil.linear"(%arg0, %arg1) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
// CHECK:         "cuvil.linear"(%arg0, %arg1) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         "cuvil.linear"(%arg0, %arg1) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         "cuvil.linear"(%arg0, %arg1) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         "cuvil.linear"(%arg0, %arg1) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         "cuvil.linear"(%arg0, %arg1) {activation = "sigmoid", operandSegmentSizes = array<i32: 1, 1, 0>}
func.func @linear_activations(%x: !torch.vtensor<[?,5,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
  %1 = "cuvil.linear"(%x, %w) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
  %2 = "cuvil.linear"(%x, %w) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
  %3 = "cuvil.linear"(%x, %w) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
  %4 = "cuvil.linear"(%x, %w) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
  %5 = "cuvil.linear"(%x, %w) {activation = "sigmoid", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[?,5,3],f32>
  return %5 : !torch.vtensor<[?,5,3],f32>
}

// -----

// CHECK-LABEL: func.func @conv2d
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[8,3,3,3],f32>, !torch.vtensor<[8],f32>) -> !torch.vtensor<[1,8,8,8],f32>
// CHECK:         "cuvil.conv2d"(%arg3, %arg4) {activation = "none", dilation = array<i64: 2, 2>, groups = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 2, 1>} : (!torch.vtensor<[1,8,9,9],f32>, !torch.vtensor<[8,2,3,3],f32>) -> !torch.vtensor<[1,8,3,5],f32>
func.func @conv2d(%x: !torch.vtensor<[1,3,8,8],f32>, %w: !torch.vtensor<[8,3,3,3],f32>, %b: !torch.vtensor<[8],f32>, %x2: !torch.vtensor<[1,8,9,9],f32>, %w2: !torch.vtensor<[8,2,3,3],f32>) -> (!torch.vtensor<[1,8,8,8],f32>, !torch.vtensor<[1,8,3,5],f32>) {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[8,3,3,3],f32>, !torch.vtensor<[8],f32>) -> !torch.vtensor<[1,8,8,8],f32>
  %1 = "cuvil.conv2d"(%x2, %w2) {activation = "none", dilation = array<i64: 2, 2>, groups = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 2, 1>} : (!torch.vtensor<[1,8,9,9],f32>, !torch.vtensor<[8,2,3,3],f32>) -> !torch.vtensor<[1,8,3,5],f32>
  return %0, %1 : !torch.vtensor<[1,8,8,8],f32>, !torch.vtensor<[1,8,3,5],f32>
}

// -----

// CHECK-LABEL: func.func @attention
// CHECK:         "cuvil.attention"(%arg0, %arg1, %arg2) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.250000e-01 : f64} : (!torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>) -> !torch.vtensor<[1,2,5,64],f32>
// CHECK:         "cuvil.attention"(%arg0, %arg1, %arg2, %arg3) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 5.000000e-01 : f64} : (!torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,1,5,5],i1>) -> !torch.vtensor<[1,2,5,64],f32>
func.func @attention(%q: !torch.vtensor<[1,2,5,64],f32>, %k: !torch.vtensor<[1,2,5,64],f32>, %v: !torch.vtensor<[1,2,5,64],f32>, %m: !torch.vtensor<[1,1,5,5],i1>) -> (!torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>) {
  %0 = "cuvil.attention"(%q, %k, %v) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.250000e-01 : f64} : (!torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>) -> !torch.vtensor<[1,2,5,64],f32>
  %1 = "cuvil.attention"(%q, %k, %v, %m) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 5.000000e-01 : f64} : (!torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,1,5,5],i1>) -> !torch.vtensor<[1,2,5,64],f32>
  return %0, %1 : !torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>
}

// -----

// CHECK-LABEL: func.func @norm
// CHECK:         "cuvil.norm"(%arg0, %arg1, %arg2) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 768>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[1,128,768],f32>, !torch.vtensor<[768],f32>, !torch.vtensor<[768],f32>) -> !torch.vtensor<[1,128,768],f32>
// CHECK:         "cuvil.norm"(%arg0) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 128, 768>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[1,128,768],f32>) -> !torch.vtensor<[1,128,768],f32>
// CHECK:         "cuvil.norm"(%arg0, %arg1) {eps = 9.9999999999999995E-7 : f64, kind = "rms", normalized_shape = array<i64: 768>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,128,768],f32>, !torch.vtensor<[768],f32>) -> !torch.vtensor<[1,128,768],f32>
func.func @norm(%x: !torch.vtensor<[1,128,768],f32>, %g: !torch.vtensor<[768],f32>, %b: !torch.vtensor<[768],f32>) -> (!torch.vtensor<[1,128,768],f32>, !torch.vtensor<[1,128,768],f32>, !torch.vtensor<[1,128,768],f32>) {
  %0 = "cuvil.norm"(%x, %g, %b) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 768>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[1,128,768],f32>, !torch.vtensor<[768],f32>, !torch.vtensor<[768],f32>) -> !torch.vtensor<[1,128,768],f32>
  %1 = "cuvil.norm"(%x) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 128, 768>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[1,128,768],f32>) -> !torch.vtensor<[1,128,768],f32>
  %2 = "cuvil.norm"(%x, %g) {eps = 1.000000e-06 : f64, kind = "rms", normalized_shape = array<i64: 768>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,128,768],f32>, !torch.vtensor<[768],f32>) -> !torch.vtensor<[1,128,768],f32>
  return %0, %1, %2 : !torch.vtensor<[1,128,768],f32>, !torch.vtensor<[1,128,768],f32>, !torch.vtensor<[1,128,768],f32>
}

// ===== verifier errors: one invalid op per chunk =====

// -----

func.func @bad_activation(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.linear' op activation must be one of none, relu, gelu, gelu_tanh, silu, sigmoid, relu6, swiglu, geglu, geglu_tanh, reglu; got 'tanh'
  %0 = "cuvil.linear"(%x, %w) {activation = "tanh", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

func.func @weight_rank(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4,1],f32>) -> !torch.vtensor<[2,3],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.linear' op weight must have rank 2 ([out, in]), got rank 3
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4,1],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

func.func @in_features_mismatch(%x: !torch.vtensor<[2,5],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.linear' op input's last dim must equal weight's dim 1 (in features): expected 4, got 5
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,5],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

func.func @linear_bias_size(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,3],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.linear' op bias size must equal out features: expected 3, got 4
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

func.func @linear_gated_full_width(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[6,4],f32>) -> !torch.vtensor<[2,6],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.linear' op gated activation 'geglu': result's last dim must be half of weight's dim 0: expected 3, got 6
  %0 = "cuvil.linear"(%x, %w) {activation = "geglu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[6,4],f32>) -> !torch.vtensor<[2,6],f32>
  return %0 : !torch.vtensor<[2,6],f32>
}

// -----

func.func @linear_gated_odd_width(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[5,4],f32>) -> !torch.vtensor<[2,2],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.linear' op gated activation 'swiglu' needs a static, even weight dim 0 (2 x out features), got 5
  %0 = "cuvil.linear"(%x, %w) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[5,4],f32>) -> !torch.vtensor<[2,2],f32>
  return %0 : !torch.vtensor<[2,2],f32>
}

// -----

func.func @conv_groups_mismatch(%x: !torch.vtensor<[1,4,8,8],f32>, %w: !torch.vtensor<[8,2,3,3],f32>) -> !torch.vtensor<[1,8,6,6],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.conv2d' op input channels (4) must equal weight dim 1 (2) x groups (1)
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[8,2,3,3],f32>) -> !torch.vtensor<[1,8,6,6],f32>
  return %0 : !torch.vtensor<[1,8,6,6],f32>
}

// -----

func.func @conv_stride_length(%x: !torch.vtensor<[1,4,8,8],f32>, %w: !torch.vtensor<[8,4,3,3],f32>) -> !torch.vtensor<[1,8,6,6],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.conv2d' op stride must have 2 elements, got 3
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1, 1>} : (!torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[8,4,3,3],f32>) -> !torch.vtensor<[1,8,6,6],f32>
  return %0 : !torch.vtensor<[1,8,6,6],f32>
}

// -----

func.func @attention_head_dim_mismatch(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,5,8],f32>, %v: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.attention' op q and k head dims must match: expected 8, got 16
  %0 = "cuvil.attention"(%q, %k, %v) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,8],f32>, !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32>
  return %0 : !torch.vtensor<[1,2,5,16],f32>
}

// -----

func.func @attention_scale(%q: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.attention' op scale must be > 0
  %0 = "cuvil.attention"(%q, %q, %q) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 0.000000e+00 : f64} : (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32>
  return %0 : !torch.vtensor<[1,2,5,16],f32>
}

// -----

func.func @norm_kind(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.norm' op kind must be one of layer, rms; got 'batch'
  %0 = "cuvil.norm"(%x) {eps = 1.000000e-05 : f64, kind = "batch", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

func.func @rms_with_bias(%x: !torch.vtensor<[2,4],f32>, %g: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,4],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.norm' op kind 'rms' takes no bias
  %0 = "cuvil.norm"(%x, %g, %b) {eps = 1.000000e-05 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

func.func @norm_shape(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  // ERR: // error: {{.*}}cuvil.mlir:[[# @LINE + 1]]:8: 'cuvil.norm' op x's trailing dims must equal normalized_shape [8]: expected 8, got 4
  %0 = "cuvil.norm"(%x) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 8>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}
