// A module without Cuvil ops passes through unchanged; one with Cuvil ops fails, naming the
// first op left, where it is, and every kind left.
// RUN: not cuvil-opt %s -p verify-no-cuvil --split-input-file | FileCheck %s
// RUN: not cuvil-opt %s -p verify-no-cuvil --split-input-file 2>&1 | FileCheck %s --check-prefix=ERR
// After lowering there is nothing left to complain about:
// RUN: cuvil-opt %s -p lower-cuvil-to-torch,verify-no-cuvil --split-input-file | FileCheck %s --check-prefix=LOWERED

// LOWERED-NOT: error
// LOWERED:     torch.aten.linear
// LOWERED:     torch.aten.relu
// LOWERED:     torch.aten.layer_norm
// LOWERED:     torch.aten.scaled_dot_product_attention
// LOWERED-NOT: cuvil.
// LOWERED-NOT: error

// CHECK-LABEL: func.func @torch_only
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK:         %[[NONE:.+]] = torch.constant.none
// CHECK-NEXT:    %[[Y:[0-9]+]] = torch.aten.linear %[[X]], %[[W]], %[[NONE]]
// CHECK-NEXT:    %[[R:[0-9]+]] = torch.aten.relu %[[Y]]
// CHECK-NEXT:    return %[[R]]
func.func @torch_only(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %none = torch.constant.none
  %0 = torch.aten.linear %x, %w, %none : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK: // -----
// CHECK-NEXT: // error: 'cuvil.linear' at "{{.*}}verify-no-cuvil.mlir":[[# @LINE + 3]]:8 was not lowered: {{.*}}(1 Cuvil op(s) left: cuvil.linear)
// ERR: cuvil-opt: error: 'cuvil.linear' at "{{.*}}verify-no-cuvil.mlir":[[# @LINE + 2]]:8 was not lowered: no pass in the pipeline lowers it to torch ops (1 Cuvil op(s) left: cuvil.linear); IREE cannot compile Cuvil ops
func.func @one_cuvil_op(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK: // -----
// CHECK-NEXT: // error: 'cuvil.norm' at "{{.*}}verify-no-cuvil.mlir":[[# @LINE + 3]]:8 was not lowered: {{.*}}(2 Cuvil op(s) left: cuvil.attention, cuvil.norm)
// ERR: cuvil-opt: error: 'cuvil.norm' at "{{.*}}verify-no-cuvil.mlir":[[# @LINE + 2]]:8 was not lowered
func.func @two_cuvil_ops(%x: !torch.vtensor<[1,2,5,4],f32>) -> !torch.vtensor<[1,2,5,4],f32> {
  %0 = "cuvil.norm"(%x) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[1,2,5,4],f32>) -> !torch.vtensor<[1,2,5,4],f32>
  %1 = "cuvil.attention"(%0, %0, %0) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 5.000000e-01 : f64} : (!torch.vtensor<[1,2,5,4],f32>, !torch.vtensor<[1,2,5,4],f32>, !torch.vtensor<[1,2,5,4],f32>) -> !torch.vtensor<[1,2,5,4],f32>
  return %1 : !torch.vtensor<[1,2,5,4],f32>
}
