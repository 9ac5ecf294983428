// RUN: cuvil-opt %s -p fuse-horizontal --split-input-file | FileCheck %s

// cuvil.linears reading the same input -> one cuvil.linear over the stacked weights + slices.
// The first half are groups the pass must fuse; the second half are look-alikes it must leave alone.

// ===== fires =====

// Q, K, V without biases. K's and V's weights are defined after Q: the stacked literal is
// built before Q, and each original's users read its slice.
// CHECK-LABEL: func.func @qkv
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,3,2],f32>)
// CHECK-DAG:     %[[I0:.+]] = torch.constant.int 0
// CHECK-DAG:     %[[I1:.+]] = torch.constant.int 1
// CHECK-DAG:     %[[I2:.+]] = torch.constant.int 2
// CHECK-DAG:     %[[I4:.+]] = torch.constant.int 4
// CHECK-DAG:     %[[I5:.+]] = torch.constant.int 5
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}1.000000e+00, 1.000000e+00], [1.000000e+00, 1.000000e+00], [2.000000e+00, 2.000000e+00], [2.000000e+00, 2.000000e+00], [3.000000e+00, 3.000000e+00]]> : tensor<5x2xf32>)
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[X]], %[[W]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[5,2],f32>) -> !torch.vtensor<[1,3,5],f32>
// CHECK-NEXT:    %[[Q:[0-9]+]] = torch.aten.slice.Tensor %[[Y]], %[[I2]], %[[I0]], %[[I2]], %[[I1]] : {{.*}} -> !torch.vtensor<[1,3,2],f32>
// CHECK-NEXT:    %[[K:[0-9]+]] = torch.aten.slice.Tensor %[[Y]], %[[I2]], %[[I2]], %[[I4]], %[[I1]] : {{.*}} -> !torch.vtensor<[1,3,2],f32>
// CHECK-NEXT:    %[[V:[0-9]+]] = torch.aten.slice.Tensor %[[Y]], %[[I2]], %[[I4]], %[[I5]], %[[I1]] : {{.*}} -> !torch.vtensor<[1,3,1],f32>
// CHECK-NEXT:    %[[R:[0-9]+]] = torch.aten.relu %[[Q]]
// CHECK-NOT:     "cuvil.linear"
// CHECK:         return %[[R]], %[[K]], %[[V]]
func.func @qkv(%x: !torch.vtensor<[1,3,2],f32>) -> (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,3,1],f32>) {
  %wq = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %q = "cuvil.linear"(%x, %wq) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[1,3,2],f32>
  %r = torch.aten.relu %q : !torch.vtensor<[1,3,2],f32> -> !torch.vtensor<[1,3,2],f32>
  %wk = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %k = "cuvil.linear"(%x, %wk) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[1,3,2],f32>
  %wv = torch.vtensor.literal(dense<3.0> : tensor<1x2xf32>) : !torch.vtensor<[1,2],f32>
  %v = "cuvil.linear"(%x, %wv) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,2],f32>) -> !torch.vtensor<[1,3,1],f32>
  return %r, %k, %v : !torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,3,2],f32>, !torch.vtensor<[1,3,1],f32>
}

// -----

// One member has a bias: the others' parts of the stacked bias are zeros.
// CHECK-LABEL: func.func @one_bias
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[0.000000e+00, 0.000000e+00, 5.000000e-01, 5.000000e-01]> : tensor<4xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}, %{{.*}}, %[[B]]) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-SAME:      -> !torch.vtensor<[3,4],f32>
// CHECK-COUNT-2: torch.aten.slice.Tensor
// CHECK-NOT:     "cuvil.linear"
func.func @one_bias(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %bb = torch.vtensor.literal(dense<0.5> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %wb, %bb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// Members with the same epilogue activation keep it on the combined op; the one with another
// activation stays alone. The group is ordered as in the IR, skipping the odd one out.
// CHECK-LABEL: func.func @same_activation_grouped
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}2.000000e+00, 2.000000e+00], [2.000000e+00, 2.000000e+00], [3.000000e+00, 3.000000e+00], [3.000000e+00, 3.000000e+00]]> : tensor<4x2xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}) {activation = "sigmoid"{{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]]) {activation = "relu"{{.*}} -> !torch.vtensor<[3,4],f32>
// CHECK-COUNT-2: torch.aten.slice.Tensor
// CHECK-NOT:     "cuvil.linear"
func.func @same_activation_grouped(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %w1 = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %w2 = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %w3 = torch.vtensor.literal(dense<3.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %w1) {activation = "sigmoid", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %w2) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %c = "cuvil.linear"(%x, %w3) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b, %c : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// Weights raised from aten.mm (permutes of [K, N] literals) are folded into one literal.
// CHECK-LABEL: func.func @permuted_weights
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00], [5.000000e+00, 7.000000e+00], [6.000000e+00, 8.000000e+00]]> : tensor<4x2xf32>)
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]])
// CHECK-NOT:     torch.aten.permute
func.func @permuted_weights(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %ka = torch.vtensor.literal(dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %kb = torch.vtensor.literal(dense<[[5.0, 6.0], [7.0, 8.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wa = torch.aten.permute %ka, %perm : !torch.vtensor<[2,2],f32>, !torch.list<int> -> !torch.vtensor<[2,2],f32>
  %wb = torch.aten.permute %kb, %perm : !torch.vtensor<[2,2],f32>, !torch.list<int> -> !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// Constant weights Python cannot fold, defined before the first member: stacked with aten.cat.
// A dynamic batch dim is fine (the slices are along the static last dim).
// CHECK-LABEL: func.func @unfolded_weights_cat
// CHECK:         %[[L:[0-9]+]] = torch.prim.ListConstruct %{{.*}}, %{{.*}} : (!torch.vtensor<[2,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.list<vtensor>
// CHECK:         %[[W:[0-9]+]] = torch.aten.cat %[[L]], %{{.*}} : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[4,2],f32>
// CHECK:         "cuvil.linear"(%{{.*}}, %[[W]]) {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK-COUNT-2: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[?,2],f32>
func.func @unfolded_weights_cat(%x: !torch.vtensor<[?,2],f32>) -> (!torch.vtensor<[?,2],f32>, !torch.vtensor<[?,2],f32>) {
  %int6 = torch.constant.int 6
  %ka = torch.vtensor.literal(dense<1.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %kb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %wa = torch.prims.convert_element_type %ka, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %wb = torch.prims.convert_element_type %kb, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[?,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[?,2],f32>
  return %a, %b : !torch.vtensor<[?,2],f32>, !torch.vtensor<[?,2],f32>
}

// -----

// A group inside a region, its unfolded weights defined in the enclosing block.
// CHECK-LABEL: func.func @group_in_region
// CHECK:         torch.prim.If
// CHECK-NEXT:      torch.prim.ListConstruct
// CHECK-NEXT:      torch.aten.cat
// CHECK-NEXT:      "cuvil.linear"{{.*}} -> !torch.vtensor<[3,4],f32>
// CHECK-COUNT-2:   torch.aten.slice.Tensor
// CHECK-NOT:       "cuvil.linear"
func.func @group_in_region(%x: !torch.vtensor<[3,2],f32>, %c: !torch.bool) -> !torch.vtensor<[3,2],f32> {
  %int1 = torch.constant.int 1
  %int6 = torch.constant.int 6
  %ka = torch.vtensor.literal(dense<1.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %kb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %wa = torch.prims.convert_element_type %ka, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %wb = torch.prims.convert_element_type %kb, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %0 = torch.prim.If %c -> (!torch.vtensor<[3,2],f32>) {
    %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
    %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
    %s = torch.aten.add.Tensor %a, %b, %int1 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.int -> !torch.vtensor<[3,2],f32>
    torch.prim.If.yield %s : !torch.vtensor<[3,2],f32>
  } else {
    torch.prim.If.yield %x : !torch.vtensor<[3,2],f32>
  }
  return %0 : !torch.vtensor<[3,2],f32>
}

// ===== must not fire =====

// -----

// A single linear.
// CHECK-LABEL: func.func @single_linear
// CHECK:         "cuvil.linear"{{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @single_linear(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a : !torch.vtensor<[3,2],f32>
}

// -----

// Different inputs.
// CHECK-LABEL: func.func @different_inputs
// CHECK-COUNT-2: "cuvil.linear"{{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @different_inputs(%x: !torch.vtensor<[3,2],f32>, %z: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%z, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// Different activations.
// CHECK-LABEL: func.func @different_activations
// CHECK:         "cuvil.linear"{{.*}}activation = "none"{{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK:         "cuvil.linear"{{.*}}activation = "gelu"{{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @different_activations(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// Dynamic in-features.
// CHECK-LABEL: func.func @dynamic_in_features
// CHECK-COUNT-2: "cuvil.linear"
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @dynamic_in_features(%x: !torch.vtensor<[3,?],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,?],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,?],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// A weight that is not a constant.
// CHECK-LABEL: func.func @weight_not_constant
// CHECK-COUNT-2: "cuvil.linear"
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @weight_not_constant(%x: !torch.vtensor<[3,2],f32>, %wb: !torch.vtensor<[2,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// The linears sit in different blocks (one inside a torch.prim.If region).
// CHECK-LABEL: func.func @different_blocks
// CHECK:         "cuvil.linear"
// CHECK:         torch.prim.If
// CHECK:         "cuvil.linear"
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @different_blocks(%x: !torch.vtensor<[3,2],f32>, %c: !torch.bool) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %wb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %0 = torch.prim.If %c -> (!torch.vtensor<[3,2],f32>) {
    %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
    torch.prim.If.yield %b : !torch.vtensor<[3,2],f32>
  } else {
    torch.prim.If.yield %x : !torch.vtensor<[3,2],f32>
  }
  return %a, %0 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// A gated linear (what fuse-gated-ffn leaves) keeps its [W_g; W_u] layout: not grouped.
// CHECK-LABEL: func.func @gated_not_grouped
// CHECK:         "cuvil.linear"{{.*}}activation = "swiglu"
// CHECK:         "cuvil.linear"{{.*}}activation = "none"
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @gated_not_grouped(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %wa = torch.vtensor.literal(dense<1.0> : tensor<4x2xf32>) : !torch.vtensor<[4,2],f32>
  %wb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[3,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}

// -----

// The second weight cannot be folded and is defined after the first linear: the combined op
// (built before the first linear) could not read it, so nothing is merged.
// CHECK-LABEL: func.func @weight_defined_after_first
// CHECK-COUNT-2: "cuvil.linear"{{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK-NOT:     torch.aten.slice.Tensor
func.func @weight_defined_after_first(%x: !torch.vtensor<[3,2],f32>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>) {
  %int6 = torch.constant.int 6
  %wa = torch.vtensor.literal(dense<1.0> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %a = "cuvil.linear"(%x, %wa) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %kb = torch.vtensor.literal(dense<2.0> : tensor<2x2xf16>) : !torch.vtensor<[2,2],f16>
  %wb = torch.prims.convert_element_type %kb, %int6 : !torch.vtensor<[2,2],f16>, !torch.int -> !torch.vtensor<[2,2],f32>
  %b = "cuvil.linear"(%x, %wb) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %a, %b : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>
}
