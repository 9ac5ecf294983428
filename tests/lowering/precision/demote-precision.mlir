// RUN: cuvil-opt %s -p demote-precision --split-input-file | FileCheck %s
// RUN: cuvil-opt %s -p 'demote-precision{dtype=bf16,keep=none,keep_paths=lm_head}' --split-input-file | FileCheck %s --check-prefix=BF

// Each chunk is one case: f32 ops of the demoted kinds compute in f16 (bf16) between casts,
// cast pairs between demoted ops fold, kept kinds and kept module paths stay f32.

// Linear -> add -> linear: one cast in per input use, one cast out, the f32 round trips
// between the demoted ops folded; weights and biases become 16-bit literals.
// CHECK-LABEL: func.func @linear_chain
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,2],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<{{\[}}[1.000000e+00, -2.000000e+00], [5.000000e-01, 4.000000e+00]]> : tensor<2x2xf16>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<[2.500000e-01, 5.000000e-01]> : tensor<2xf16>)
// CHECK:         %[[X16:[0-9]+]] = torch.prims.convert_element_type %[[X]], %int5 : {{.*}} -> !torch.vtensor<[3,2],f16>
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"(%[[X16]], %[[W]], %[[B]]) {activation = "relu"
// CHECK-SAME:      -> !torch.vtensor<[3,2],f16>
// CHECK:         %[[A:[0-9]+]] = torch.aten.add.Tensor %[[L]], %{{[0-9]+}}, %int1 : !torch.vtensor<[3,2],f16>, !torch.vtensor<[3,2],f16>, !torch.int -> !torch.vtensor<[3,2],f16>
// CHECK:         %[[L2:[0-9]+]] = "cuvil.linear"(%[[A]], %[[W]])
// CHECK:         %[[Y:[0-9]+]] = torch.prims.convert_element_type %[[L2]], %int6 : !torch.vtensor<[3,2],f16>, !torch.int -> !torch.vtensor<[3,2],f32>
// CHECK-NEXT:    return %[[Y]]
// BF-LABEL: func.func @linear_chain
// BF-DAG:     torch.vtensor.literal(dense<{{\[}}[1.000000e+00, -2.000000e+00], [5.000000e-01, 4.000000e+00]]> : tensor<2x2xbf16>)
// BF:         "cuvil.linear"({{.*}} -> !torch.vtensor<[3,2],bf16>
// BF:         torch.aten.add.Tensor {{.*}} -> !torch.vtensor<[3,2],bf16>
// BF:         torch.prims.convert_element_type %{{[0-9]+}}, %int6 : !torch.vtensor<[3,2],bf16>, !torch.int -> !torch.vtensor<[3,2],f32>
func.func @linear_chain(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, -2.0], [0.5, 4.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %b = torch.vtensor.literal(dense<[0.25, 0.5]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[3,2],f32>
  %int1 = torch.constant.int 1
  %1 = torch.aten.add.Tensor %0, %x, %int1 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.int -> !torch.vtensor<[3,2],f32>
  %2 = "cuvil.linear"(%1, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  return %2 : !torch.vtensor<[3,2],f32>
}

// -----

// softmax is kept in f32 by default: the linear's result is widened before it. A weight that
// is not constant is cast. With keep=none softmax computes in bf16 too.
// CHECK-LABEL: func.func @softmax_kept
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"({{.*}} -> !torch.vtensor<[3,2],f16>
// CHECK:         %[[W:[0-9]+]] = torch.prims.convert_element_type %[[L]], %int6 {{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK:         torch.aten.softmax.int %[[W]], %int-1, %none : !torch.vtensor<[3,2],f32>
// BF-LABEL: func.func @softmax_kept
// BF:         torch.aten.softmax.int {{.*}} -> !torch.vtensor<[3,2],bf16>
func.func @softmax_kept(%x: !torch.vtensor<[3,2],f32>, %w: !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32>
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %1 = torch.aten.softmax.int %0, %int-1, %none : !torch.vtensor<[3,2],f32>, !torch.int, !torch.none -> !torch.vtensor<[3,2],f32>
  return %1 : !torch.vtensor<[3,2],f32>
}

// -----

// keep_paths=lm_head keeps the ops of that module (a dotted suffix of the module path).
// CHECK-LABEL: func.func @lm_head
// CHECK:         "cuvil.linear"({{.*}} -> !torch.vtensor<[3,2],f16>
// BF-LABEL: func.func @lm_head
// BF-NOT:     bf16
// BF:         "cuvil.linear"(%arg0, {{.*}} -> !torch.vtensor<[3,2],f32>
// BF-NEXT:    return
func.func @lm_head(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, -2.0], [0.5, 4.0]]> : tensor<2x2xf32>) : !torch.vtensor<[2,2],f32>
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[3,2],f32>, !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[3,2],f32> loc("model.lm_head")
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Squares feeding a kept reduction stay f32 (x*x overflows f16 long before x does); with
// keep=none the reduction and its input are demoted.
// CHECK-LABEL: func.func @squares_into_mean
// CHECK-NOT:     convert_element_type
// CHECK:         torch.aten.mul.Tensor %arg0, %arg0 : !torch.vtensor<[3,2],f32>
// CHECK:         torch.aten.mean.dim {{.*}} -> !torch.vtensor<[3,1],f32>
// CHECK-NEXT:    return
// BF-LABEL: func.func @squares_into_mean
// BF:         torch.aten.mul.Tensor {{.*}} -> !torch.vtensor<[3,2],bf16>
// BF:         torch.aten.mean.dim {{.*}} -> !torch.vtensor<[3,1],bf16>
func.func @squares_into_mean(%x: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[3,1],f32> {
  %0 = torch.aten.mul.Tensor %x, %x : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.mean.dim %0, %dims, %true, %none : !torch.vtensor<[3,2],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  return %1 : !torch.vtensor<[3,1],f32>
}

// -----

// Not f32: f16 and integer ops are left alone.
// CHECK-LABEL: func.func @not_f32
// CHECK-NOT:     convert_element_type
// CHECK:         torch.aten.add.Tensor %arg0, %arg0, %int1 : !torch.vtensor<[3,2],f16>
// CHECK:         torch.aten.add.Tensor %arg1, %arg1, %int1 : !torch.vtensor<[3,2],si64>
// BF-LABEL: func.func @not_f32
// BF-NOT:     convert_element_type
func.func @not_f32(%x: !torch.vtensor<[3,2],f16>, %i: !torch.vtensor<[3,2],si64>) -> (!torch.vtensor<[3,2],f16>, !torch.vtensor<[3,2],si64>) {
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %x, %x, %int1 : !torch.vtensor<[3,2],f16>, !torch.vtensor<[3,2],f16>, !torch.int -> !torch.vtensor<[3,2],f16>
  %1 = torch.aten.add.Tensor %i, %i, %int1 : !torch.vtensor<[3,2],si64>, !torch.vtensor<[3,2],si64>, !torch.int -> !torch.vtensor<[3,2],si64>
  return %0, %1 : !torch.vtensor<[3,2],f16>, !torch.vtensor<[3,2],si64>
}

// -----

// A constant beyond the f16 range (a -1e9 mask value) keeps its op in f32 under f16; bf16 has
// the range (-1e9 rounds to -9.98e8 in bf16).
// CHECK-LABEL: func.func @huge_constant
// CHECK-NOT:     convert_element_type
// CHECK:         torch.aten.add.Tensor {{.*}} -> !torch.vtensor<[2],f32>
// BF-LABEL: func.func @huge_constant
// BF:         torch.vtensor.literal(dense<-9.982440e+08> : tensor<2xbf16>)
// BF:         torch.aten.add.Tensor {{.*}} -> !torch.vtensor<[2],bf16>
func.func @huge_constant(%x: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  %m = torch.vtensor.literal(dense<-1.0e9> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %x, %m, %int1 : !torch.vtensor<[2],f32>, !torch.vtensor<[2],f32>, !torch.int -> !torch.vtensor<[2],f32>
  return %0 : !torch.vtensor<[2],f32>
}
