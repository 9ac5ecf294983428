// RUN: cuvil-opt %s -p raise-torch-to-cuvil --split-input-file | FileCheck %s

// Each chunk is one case. The first half are forms the pass must raise (as torch.export and
// torch-mlir's FX importer produce them); the second half are look-alikes it must leave alone.

// ===== linear =====

// CHECK-LABEL: func.func @linear_with_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]], %[[B]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-SAME:      -> !torch.vtensor<[2,3],f32>
// CHECK-NOT:     torch.aten.linear
// CHECK:         return %[[Y]]
func.func @linear_with_bias(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %0 = torch.aten.linear %x, %w, %b : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @linear_without_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK:         "cuvil.linear"(%[[X]], %[[W]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      -> !torch.vtensor<[2,5,3],f32>
// CHECK-NOT:     torch.aten.linear
func.func @linear_without_bias(%x: !torch.vtensor<[2,5,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,5,3],f32> {
  %none = torch.constant.none
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,5,3],f32>
  return %0 : !torch.vtensor<[2,5,3],f32>
}

// -----

// mm against permute(W) of a constant W: the linear takes W itself, not the permute.
// CHECK-LABEL: func.func @mm_permuted_constant_weight
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>)
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32>
// CHECK-NOT:     torch.aten.mm
// CHECK:         return %[[Y]]
func.func @mm_permuted_constant_weight(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %wt = torch.aten.permute %w, %perm : !torch.vtensor<[3,4],f32>, !torch.list<int> -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %wt : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// mm against a constant [K, N] that is not a transpose: a permute to [N, K] is inserted.
// CHECK-LABEL: func.func @mm_unpermuted_constant_weight
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>)
// CHECK:         %[[WT:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>)
// CHECK:         %[[W:[0-9]+]] = torch.aten.permute %[[WT]], %{{.*}} : !torch.vtensor<[4,3],f32>, !torch.list<int> -> !torch.vtensor<[3,4],f32>
// CHECK:         "cuvil.linear"(%[[X]], %[[W]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32>
// CHECK-NOT:     torch.aten.mm
func.func @mm_unpermuted_constant_weight(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @mm_transposed_with_t
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]])
// CHECK-NOT:     torch.aten.mm
func.func @mm_transposed_with_t(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %wt = torch.aten.t %w : !torch.vtensor<[3,4],f32> -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %wt : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// A float 1.0 multiplier is the same identity.
// CHECK-LABEL: func.func @mul_by_float_one
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,3],f32>)
// CHECK-NOT:     torch.aten.mul.Scalar
// CHECK:         return %[[X]]
func.func @mul_by_float_one(%x: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %float1 = torch.constant.float 1.000000e+00
  %0 = torch.aten.mul.Scalar %x, %float1 : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// CHECK-LABEL: func.func @matmul_3d_by_constant_weight
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>)
// CHECK:         %[[WT:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>)
// CHECK:         %[[W:[0-9]+]] = torch.aten.permute %[[WT]], %{{.*}} : !torch.vtensor<[4,3],f32>, !torch.list<int> -> !torch.vtensor<[3,4],f32>
// CHECK:         "cuvil.linear"(%[[X]], %[[W]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,5,3],f32>
// CHECK-NOT:     torch.aten.matmul
func.func @matmul_3d_by_constant_weight(%x: !torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,3],f32> {
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %0 = torch.aten.matmul %x, %w : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,5,3],f32>
  return %0 : !torch.vtensor<[2,5,3],f32>
}

// -----

// ===== convolution =====

// -----

// CHECK-LABEL: func.func @conv_with_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,2,8,8],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x2x3x3xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%[[X]], %[[W]], %[[B]])
// CHECK-SAME:      activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>
// CHECK-SAME:      -> !torch.vtensor<[1,3,4,4],f32>
// CHECK-NOT:     torch.aten.convolution
// CHECK:         return %[[Y]]
func.func @conv_with_bias(%x: !torch.vtensor<[1,2,8,8],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x2x3x3xf32>) : !torch.vtensor<[3,2,3,3],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %stride = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %padding = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %dilation = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %output_padding = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %b, %stride, %padding, %dilation, %false, %output_padding, %int1 : !torch.vtensor<[1,2,8,8],f32>, !torch.vtensor<[3,2,3,3],f32>, !torch.vtensor<[3],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  return %0 : !torch.vtensor<[1,3,4,4],f32>
}

// -----

// Without a bias, grouped and dilated.
// CHECK-LABEL: func.func @conv_without_bias_grouped
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,4,8,8],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[4,2,3,3],f32>)
// CHECK:         "cuvil.conv2d"(%[[X]], %[[W]])
// CHECK-SAME:      activation = "none", dilation = array<i64: 2, 2>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>
// CHECK-SAME:      -> !torch.vtensor<[1,4,4,4],f32>
// CHECK-NOT:     torch.aten.convolution
func.func @conv_without_bias_grouped(%x: !torch.vtensor<[1,4,8,8],f32>, %w: !torch.vtensor<[4,2,3,3],f32>) -> !torch.vtensor<[1,4,4,4],f32> {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %stride = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %padding = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %dilation = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %output_padding = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %none, %stride, %padding, %dilation, %false, %output_padding, %int2 : !torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[4,2,3,3],f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,4,4,4],f32>
  return %0 : !torch.vtensor<[1,4,4,4],f32>
}

// ===== attention =====

// -----

// No explicit scale: 1/sqrt(head dim 16) = 0.25.
// CHECK-LABEL: func.func @sdpa_default_scale
// CHECK-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[K:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[V:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>)
// CHECK:         %[[O:[0-9]+]] = "cuvil.attention"(%[[Q]], %[[K]], %[[V]]) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 2.500000e-01 : f64}
// CHECK-NOT:     torch.aten.scaled_dot_product_attention
// CHECK:         return %[[O]]
func.func @sdpa_default_scale(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,5,16],f32>, %v: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %float0 = torch.constant.float 0.000000e+00
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %float0, %false, %none, %false : !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,2,5,16],f32>
  return %0 : !torch.vtensor<[1,2,5,16],f32>
}

// -----

// CHECK-LABEL: func.func @sdpa_causal_explicit_scale
// CHECK:         "cuvil.attention"(%{{.*}}, %{{.*}}, %{{.*}}) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.250000e-01 : f64}
// CHECK-NOT:     torch.aten.scaled_dot_product_attention
func.func @sdpa_causal_explicit_scale(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,5,16],f32>, %v: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32> {
  %none = torch.constant.none
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %float0 = torch.constant.float 0.000000e+00
  %scale = torch.constant.float 1.250000e-01
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %float0, %true, %scale, %false : !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.none, !torch.float, !torch.bool, !torch.float, !torch.bool -> !torch.vtensor<[1,2,5,16],f32>
  return %0 : !torch.vtensor<[1,2,5,16],f32>
}

// -----

// CHECK-LABEL: func.func @sdpa_with_mask
// CHECK-SAME:    %[[M:[a-z0-9]+]]: !torch.vtensor<[1,1,5,7],f32>)
// CHECK:         "cuvil.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %[[M]]) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64}
// CHECK-SAME:      -> !torch.vtensor<[1,2,5,8],f32>
// CHECK-NOT:     torch.aten.scaled_dot_product_attention
func.func @sdpa_with_mask(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,7,16],f32>, %v: !torch.vtensor<[1,2,7,8],f32>, %mask: !torch.vtensor<[1,1,5,7],f32>) -> !torch.vtensor<[1,2,5,8],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %float0 = torch.constant.float 0.000000e+00
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %mask, %float0, %false, %none, %false : !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,7,16],f32>, !torch.vtensor<[1,2,7,8],f32>, !torch.vtensor<[1,1,5,7],f32>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,2,5,8],f32>
  return %0 : !torch.vtensor<[1,2,5,8],f32>
}

// ===== norms =====

// -----

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>, %[[G:[a-z0-9]+]]: !torch.vtensor<[4],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[4],f32>)
// CHECK:         "cuvil.norm"(%[[X]], %[[G]], %[[B]]) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NOT:     torch.aten.layer_norm
func.func @layer_norm(%x: !torch.vtensor<[2,5,4],f32>, %g: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,5,4],f32> {
  %false = torch.constant.bool false
  %int4 = torch.constant.int 4
  %eps = torch.constant.float 1.000000e-05
  %shape = torch.prim.ListConstruct %int4 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.layer_norm %x, %shape, %g, %b, %eps, %false : !torch.vtensor<[2,5,4],f32>, !torch.list<int>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.float, !torch.bool -> !torch.vtensor<[2,5,4],f32>
  return %0 : !torch.vtensor<[2,5,4],f32>
}

// -----

// CHECK-LABEL: func.func @layer_norm_without_affine
// CHECK:         "cuvil.norm"(%{{[a-z0-9]+}}) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 5, 4>, operandSegmentSizes = array<i32: 1, 0, 0>}
// CHECK-NOT:     torch.aten.layer_norm
func.func @layer_norm_without_affine(%x: !torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,4],f32> {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int4 = torch.constant.int 4
  %int5 = torch.constant.int 5
  %eps = torch.constant.float 1.000000e-05
  %shape = torch.prim.ListConstruct %int5, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.layer_norm %x, %shape, %none, %none, %eps, %false : !torch.vtensor<[2,5,4],f32>, !torch.list<int>, !torch.none, !torch.none, !torch.float, !torch.bool -> !torch.vtensor<[2,5,4],f32>
  return %0 : !torch.vtensor<[2,5,4],f32>
}

// -----

// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>, %[[G:[a-z0-9]+]]: !torch.vtensor<[4],f32>)
// CHECK:         "cuvil.norm"(%[[X]], %[[G]]) {eps = 9.9999999999999995E-7 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-NOT:     torch.aten.rms_norm
func.func @rms_norm(%x: !torch.vtensor<[2,4],f32>, %g: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,4],f32> {
  %int4 = torch.constant.int 4
  %eps = torch.constant.float 9.9999999999999995E-7
  %shape = torch.prim.ListConstruct %int4 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.rms_norm %x, %shape, %g, %eps : !torch.vtensor<[2,4],f32>, !torch.list<int>, !torch.vtensor<[4],f32>, !torch.float -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

// eps = None means torch.finfo(dtype).eps: 2^-23 for f32.
// CHECK-LABEL: func.func @rms_norm_default_eps
// CHECK:         "cuvil.norm"(%{{[a-z0-9]+}}) {eps = 1.1920928955078125E-7 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>}
// CHECK-NOT:     torch.aten.rms_norm
func.func @rms_norm_default_eps(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %none = torch.constant.none
  %int4 = torch.constant.int 4
  %shape = torch.prim.ListConstruct %int4 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.rms_norm %x, %shape, %none, %none : !torch.vtensor<[2,4],f32>, !torch.list<int>, !torch.none, !torch.none -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// ===== must not fire =====

// -----

// mm of two activations is not a linear layer: no constant weight.
// CHECK-LABEL: func.func @no_raise_mm_of_activations
// CHECK:         torch.aten.mm %{{.*}}, %{{.*}} : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32>
// CHECK-NOT:     cuvil.linear
func.func @no_raise_mm_of_activations(%x: !torch.vtensor<[2,4],f32>, %y: !torch.vtensor<[4,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = torch.aten.mm %x, %y : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @no_raise_sdpa_with_dropout
// CHECK:         torch.aten.scaled_dot_product_attention
// CHECK-NOT:     cuvil.attention
func.func @no_raise_sdpa_with_dropout(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,5,16],f32>, %v: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %dropout = torch.constant.float 1.000000e-01
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %dropout, %false, %none, %false : !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,2,5,16],f32>
  return %0 : !torch.vtensor<[1,2,5,16],f32>
}

// -----

// Grouped-query attention (enable_gqa = true) stays with aten.
// CHECK-LABEL: func.func @no_raise_sdpa_with_gqa
// CHECK:         torch.aten.scaled_dot_product_attention
// CHECK-NOT:     cuvil.attention
func.func @no_raise_sdpa_with_gqa(%q: !torch.vtensor<[1,4,5,16],f32>, %k: !torch.vtensor<[1,2,5,16],f32>, %v: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,4,5,16],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %true = torch.constant.bool true
  %float0 = torch.constant.float 0.000000e+00
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %float0, %false, %none, %true : !torch.vtensor<[1,4,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,5,16],f32>
  return %0 : !torch.vtensor<[1,4,5,16],f32>
}

// -----

// CHECK-LABEL: func.func @no_raise_transposed_convolution
// CHECK:         torch.aten.convolution
// CHECK-NOT:     cuvil.conv2d
func.func @no_raise_transposed_convolution(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[2,3,3,3],f32>) -> !torch.vtensor<[1,3,6,6],f32> {
  %true = torch.constant.bool true
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.convolution %x, %w, %none, %ones, %zeros, %ones, %true, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2,3,3,3],f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,6,6],f32>
  return %0 : !torch.vtensor<[1,3,6,6],f32>
}

// -----

// CHECK-LABEL: func.func @no_fold_mul_by_two
// CHECK:         torch.aten.mul.Scalar %{{.*}}, %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.int
func.func @no_fold_mul_by_two(%x: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int2 = torch.constant.int 2
  %0 = torch.aten.mul.Scalar %x, %int2 : !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// One torch op, one Cuvil op: the separate bias add and the activation after a linear or conv
// are fuse-linear-epilogue's (tests/lowering/fusion/fuse-linear-epilogue.mlir), not raise's.
// CHECK-LABEL: func.func @no_epilogue_in_raise
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK:         %[[A:[0-9]+]] = torch.aten.add.Tensor %[[L]]
// CHECK:         torch.aten.relu %[[A]]
// CHECK:         %[[C:[0-9]+]] = "cuvil.conv2d"
// CHECK-SAME:      activation = "none"
// CHECK:         torch.aten.silu %[[C]]
func.func @no_epilogue_in_raise(%x: !torch.vtensor<[2,4],f32>, %img: !torch.vtensor<[1,2,4,4],f32>, %cw: !torch.vtensor<[3,2,1,1],f32>) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[1,3,4,4],f32>) {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<2.500000e-01> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %wt = torch.aten.t %w : !torch.vtensor<[3,4],f32> -> !torch.vtensor<[4,3],f32>
  %0 = torch.aten.mm %x, %wt : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  %2 = torch.aten.relu %1 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.convolution %img, %cw, %none, %ones, %zeros, %ones, %false, %zeros, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,3,4,4],f32>
  %4 = torch.aten.silu %3 : !torch.vtensor<[1,3,4,4],f32> -> !torch.vtensor<[1,3,4,4],f32>
  return %2, %4 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[1,3,4,4],f32>
}

// -----

// An ONNX MatMul of two activations, and of a vector by a weight (matmul's 1-D rule), stay.
// CHECK-LABEL: func.func @matmul_of_activations_or_vector
// CHECK-NOT:     cuvil.linear
// CHECK:         torch.aten.matmul
// CHECK:         torch.aten.matmul
func.func @matmul_of_activations_or_vector(%a: !torch.vtensor<[2,5,4],f32>, %b: !torch.vtensor<[4,3],f32>, %v: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[2,5,3],f32>, !torch.vtensor<[3],f32>) {
  %w = torch.vtensor.literal(dense<5.000000e-01> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %0 = torch.aten.matmul %a, %b : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[2,5,3],f32>
  %1 = torch.aten.matmul %v, %w : !torch.vtensor<[4],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[3],f32>
  return %0, %1 : !torch.vtensor<[2,5,3],f32>, !torch.vtensor<[3],f32>
}
