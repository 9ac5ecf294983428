// RUN: cuvil-opt %s -p fuse-gated-ffn --split-input-file | FileCheck %s

// act(x·W_gᵀ + b_g) * (x·W_uᵀ + b_u) -> one cuvil.linear over [W_g; W_u] with a gated activation.
// The first half are forms the pass must fuse; the second half are look-alikes it must leave alone.

// ===== fires =====

// SwiGLU as raise-torch-to-cuvil leaves it (silu fused into the gate linear), gate first.
// CHECK-LABEL: func.func @swiglu_fused_gate
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,2],f32>)
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}1.000000e+00, 1.000000e+00], [1.000000e+00, 1.000000e+00], [2.000000e+00, 2.000000e+00], [2.000000e+00, 2.000000e+00]]> : tensor<4x2xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]]) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      (!torch.vtensor<[3,2],f32>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,2],f32>
// CHECK-NEXT:    return %[[Y]]
// CHECK-NOT:     torch.aten.mul.Tensor
func.func @swiglu_fused_gate(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Up projection first, a bias on the up projection only: the gate's half of the bias is zeros.
// The gate stays first in the stacked weight whatever the operand order.
// CHECK-LABEL: func.func @swiglu_up_first_one_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,3,2],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}1.000000e+00, 1.000000e+00], [1.000000e+00, 1.000000e+00], [2.000000e+00, 2.000000e+00], [2.000000e+00, 2.000000e+00]]> : tensor<4x2xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[0.000000e+00, 0.000000e+00, 5.000000e-01, 5.000000e-01]> : tensor<4xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]], %[[B]]) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-SAME:      -> !torch.vtensor<[1,3,2],f32>
// CHECK-NEXT:    return %[[Y]]
func.func @swiglu_up_first_one_bias(%x: !torch.vtensor<[1,3,2],f32>) -> !torch.vtensor<[1,3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %bu = torch.vtensor.literal(dense<0.5> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %u = "cuvil.linear"(%x, %wu, %bu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[2,2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,3,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[1,3,2],f32>
  %0 = torch.aten.mul.Tensor %u, %g : !torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,3,2],f32> -> !torch.vtensor<[1,3,2],f32>
  return %0 : !torch.vtensor<[1,3,2],f32>
}

// -----

// The activation still a separate op (silu of a plain linear), as with the pass run alone.
// CHECK-LABEL: func.func @swiglu_separate_silu
// CHECK:         "cuvil.linear"(%{{.*}}) {activation = "swiglu"
// CHECK-NOT:     torch.aten.silu
// CHECK-NOT:     torch.aten.mul.Tensor
func.func @swiglu_separate_silu(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %l = "cuvil.linear"(%x, %wg) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %g = torch.aten.silu %l : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// GeGLU (exact gelu as a separate op), biases on both projections.
// CHECK-LABEL: func.func @geglu_both_biases
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[2.500000e-01, 2.500000e-01, 5.000000e-01, 5.000000e-01]> : tensor<4xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%{{.*}}, %{{.*}}, %[[B]]) {activation = "geglu", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NEXT:    return %[[Y]]
func.func @geglu_both_biases(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %bg = torch.vtensor.literal(dense<0.25> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %bu = torch.vtensor.literal(dense<0.5> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %none = torch.constant.str "none"
  %l = "cuvil.linear"(%x, %wg, %bg) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[3,2],f32>
  %g = torch.aten.gelu %l, %none : !torch.vtensor<[3,2],f32>, !torch.str -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu, %bu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %u, %g : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// GeGLU with the tanh gelu fused into the gate linear; a bias on the gate only.
// CHECK-LABEL: func.func @geglu_tanh_fused_gate
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[2.500000e-01, 2.500000e-01, 0.000000e+00, 0.000000e+00]> : tensor<4xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %[[B]]) {activation = "geglu_tanh"
func.func @geglu_tanh_fused_gate(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %bg = torch.vtensor.literal(dense<0.25> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg, %bg) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// ReGLU (relu gate).
// CHECK-LABEL: func.func @reglu
// CHECK:         "cuvil.linear"(%{{.*}}) {activation = "reglu"
// CHECK-NOT:     torch.aten.mul.Tensor
func.func @reglu(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Weights raised from aten.mm are permutes of [K, N] literals: they are folded into one literal.
// CHECK-LABEL: func.func @swiglu_permuted_weights
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00], [5.000000e+00, 7.000000e+00], [6.000000e+00, 8.000000e+00]]> : tensor<4x2xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]]) {activation = "swiglu"
// CHECK-NOT:     torch.aten.permute
func.func @swiglu_permuted_weights(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %kg = torch.vtensor.literal(dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %ku = torch.vtensor.literal(dense<[[5.0, 6.0], [7.0, 8.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wg = torch.aten.permute %kg, %perm : !torch.vtensor<[2,2],f32>, !torch.list<int> -> !torch.vtensor<[2,2],f32>
  %wu = torch.aten.permute %ku, %perm : !torch.vtensor<[2,2],f32>, !torch.list<int> -> !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Constant weights Python cannot fold (here: f16 literals converted to f32) are stacked with aten.cat.
// CHECK-LABEL: func.func @swiglu_unfolded_weights_cat
// CHECK-DAG:     %[[G:[0-9]+]] = torch.prims.convert_element_type %[[KG:[0-9]+]]
// CHECK-DAG:     %[[U:[0-9]+]] = torch.prims.convert_element_type %[[KU:[0-9]+]]
// CHECK:         %[[L:[0-9]+]] = torch.prim.ListConstruct %[[G]], %[[U]] : (!torch.vtensor<[2,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.list<vtensor>
// CHECK:         %[[W:[0-9]+]] = torch.aten.cat %[[L]], %{{.*}} : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[4,2],f32>
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]]) {activation = "swiglu"
func.func @swiglu_unfolded_weights_cat(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %int6 = torch.constant.int 6
  %kg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %ku = torch.vtensor.literal(dense<2.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %wg = torch.prims.convert_element_type %kg, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %wu = torch.prims.convert_element_type %ku, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// bf16 weights stay bf16.
// CHECK-LABEL: func.func @swiglu_bf16
// CHECK:         torch.vtensor.literal({{.*}} : tensor<4x2xbf16>) : !torch.vtensor<[4,2],bf16>
// CHECK:         "cuvil.linear"(%{{.*}}) {activation = "swiglu"{{.*}} -> !torch.vtensor<[3,2],bf16>
func.func @swiglu_bf16(%x: !torch.vtensor<[3,2],bf16>) -> !torch.vtensor<[3,2],bf16> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xbf16>) : !torch.vtensor<[2,2],bf16>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xbf16>) : !torch.vtensor<[2,2],bf16>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],bf16>, !torch.vtensor<[2,2],bf16>) -> !torch.vtensor<[3,2],bf16>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],bf16>, !torch.vtensor<[2,2],bf16>) -> !torch.vtensor<[3,2],bf16>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],bf16>, !torch.vtensor<[3,2],bf16> -> !torch.vtensor<[3,2],bf16>
  return %0 : !torch.vtensor<[3,2],bf16>
}

// -----

// One linear already packs [W_g; W_u] (Phi-3's gate_up_proj + chunk): only the activation changes.
// CHECK-LABEL: func.func @packed_gate_first
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,2],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[4,2],f32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]]) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      -> !torch.vtensor<[3,2],f32>
// CHECK-NEXT:    return %[[Y]]
func.func @packed_gate_first(%x: !torch.vtensor<[3,2],f32>, %w: !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,4],f32>
  %g = torch.aten.slice.Tensor %y, %int-1, %int0, %int2, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %u = torch.aten.slice.Tensor %y, %int-1, %int2, %int4, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %a = torch.aten.silu %g : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %u, %a : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// The gate is the second half (and the slice end is INT64_MAX): the weight's and bias's halves are swapped.
// CHECK-LABEL: func.func @packed_gate_second
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}5.000000e+00, 6.000000e+00], [7.000000e+00, 8.000000e+00], [1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<4x2xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[3.000000e+00, 4.000000e+00, 1.000000e+00, 2.000000e+00]> : tensor<4xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]], %[[B]]) {activation = "geglu_tanh"
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @packed_gate_second(%x: !torch.vtensor<[1,3,2],f32>) -> !torch.vtensor<[1,3,2],f32> {
  %int2 = torch.constant.int 2
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %max = torch.constant.int 9223372036854775807
  %tanh = torch.constant.str "tanh"
  %w = torch.vtensor.literal(dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>) : !torch.vtensor<[4,2],f32>
  %b = torch.vtensor.literal(dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %y = "cuvil.linear"(%x, %w, %b) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[4,2],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[1,3,4],f32>
  %u = torch.aten.slice.Tensor %y, %int2, %int0, %int2, %int1 : !torch.vtensor<[1,3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,3,2],f32>
  %g = torch.aten.slice.Tensor %y, %int2, %int2, %max, %int1 : !torch.vtensor<[1,3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,3,2],f32>
  %a = torch.aten.gelu %g, %tanh : !torch.vtensor<[1,3,2],f32>, !torch.str -> !torch.vtensor<[1,3,2],f32>
  %0 = torch.aten.mul.Tensor %a, %u : !torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,3,2],f32> -> !torch.vtensor<[1,3,2],f32>
  return %0 : !torch.vtensor<[1,3,2],f32>
}

// ===== must not fire =====

// -----

// The two projections read different inputs.
// CHECK-LABEL: func.func @different_inputs
// CHECK:         "cuvil.linear"{{.*}}activation = "silu"
// CHECK:         "cuvil.linear"{{.*}}activation = "none"
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @different_inputs(%x: !torch.vtensor<[3,2],f32>, %z: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%z, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// The gate's activated value has another use.
// CHECK-LABEL: func.func @gate_has_another_use
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @gate_has_another_use(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0, %g : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// The gate linear (before its separate silu) has another use.
// CHECK-LABEL: func.func @gate_linear_has_another_use
// CHECK:         torch.aten.silu
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @gate_linear_has_another_use(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %l = "cuvil.linear"(%x, %wg) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %g = torch.aten.silu %l : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0, %l : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// The up projection has another use.
// CHECK-LABEL: func.func @up_has_another_use
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @up_has_another_use(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// A weight that is not a constant (a function argument).
// CHECK-LABEL: func.func @weight_not_constant
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @weight_not_constant(%x: !torch.vtensor<[3,2],f32>, %wu: !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Shapes differ (the mul broadcasts a 1-wide up projection).
// CHECK-LABEL: func.func @shapes_differ
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @shapes_differ(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<1x2xf32>) : !torch.vtensor<[1,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[1,2],f32>) -> !torch.vtensor<[3,1],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// A sigmoid gate is not one of the gated activations; an up projection with an activation
// (silu * silu) is not a gated unit either.
// CHECK-LABEL: func.func @not_a_gated_activation
// CHECK-COUNT-2: torch.aten.mul.Tensor
// CHECK-NOT:     "cuvil.linear"{{.*}}glu
func.func @not_a_gated_activation(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "sigmoid", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %g2 = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u2 = "cuvil.linear"(%x, %wu) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %1 = torch.aten.mul.Tensor %g2, %u2 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0, %1 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// Hand-written swish of ONE linear (silu(l) * l) is not a gated unit.
// CHECK-LABEL: func.func @swish_of_one_linear
// CHECK:         torch.aten.silu
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @swish_of_one_linear(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %l = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %g = torch.aten.silu %l : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %g, %l : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// The projections are outside the block of the mul (it sits in a region).
// CHECK-LABEL: func.func @mul_in_another_block
// CHECK:         torch.prim.If
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @mul_in_another_block(%x: !torch.vtensor<[3,2],f32>, %c: !torch.bool) -> !torch.vtensor<[3,2],f32> {
  %wg = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wu = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %g = "cuvil.linear"(%x, %wg) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %u = "cuvil.linear"(%x, %wu) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.prim.If %c -> (!torch.vtensor<[3,2],f32>) {
    %1 = torch.aten.mul.Tensor %g, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
    torch.prim.If.yield %1 : !torch.vtensor<[3,2],f32>
  } else {
    torch.prim.If.yield %x : !torch.vtensor<[3,2],f32>
  }
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Packed linear, but the slices overlap (not the two halves), and one where the linear has a
// third use.
// CHECK-LABEL: func.func @packed_not_halves
// CHECK-COUNT-2: torch.aten.mul.Tensor
// CHECK-NOT:     glu
func.func @packed_not_halves(%x: !torch.vtensor<[3,2],f32>, %w: !torch.vtensor<[4,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,4],f32>) {
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,4],f32>
  %g = torch.aten.slice.Tensor %y, %int-1, %int0, %int2, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %u = torch.aten.slice.Tensor %y, %int-1, %int1, %int3, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %a = torch.aten.silu %g : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %a, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %z = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,4],f32>
  %g2 = torch.aten.slice.Tensor %z, %int-1, %int0, %int2, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %u2 = torch.aten.slice.Tensor %z, %int-1, %int2, %int4, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %a2 = torch.aten.silu %g2 : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %1 = torch.aten.mul.Tensor %a2, %u2 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0, %1, %z : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,4],f32>
}

// -----

// The gate is the second half but the weight is not a readable constant: its halves cannot be swapped.
// CHECK-LABEL: func.func @packed_gate_second_weight_unknown
// CHECK:         torch.aten.mul.Tensor
// CHECK-NOT:     swiglu
func.func @packed_gate_second_weight_unknown(%x: !torch.vtensor<[3,2],f32>, %w: !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %y = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,4],f32>
  %u = torch.aten.slice.Tensor %y, %int-1, %int0, %int2, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %g = torch.aten.slice.Tensor %y, %int-1, %int2, %int4, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,2],f32>
  %a = torch.aten.silu %g : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %0 = torch.aten.mul.Tensor %a, %u : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}
