// RUN: cuvil-opt %s -p narrow-io --split-input-file | FileCheck %s
// RUN: cuvil-opt %s -p 'narrow-io{dtype=bf16},demote-precision{dtype=bf16}' --split-input-file | FileCheck %s --check-prefix=DEMOTED

// f32 inputs and outputs of a public function become 16-bit, with a cast in at entry and a
// cast out before the return; integer tensors keep their type.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,2],f16>, %[[IDS:[a-z0-9]+]]: !torch.vtensor<[3],si64>)
// CHECK-SAME:    -> (!torch.vtensor<[3,2],f16>, !torch.vtensor<[3],si64>)
// CHECK:         %[[W:[0-9]+]] = torch.prims.convert_element_type %[[X]], %int6 : !torch.vtensor<[3,2],f16>, !torch.int -> !torch.vtensor<[3,2],f32>
// CHECK:         %[[S:[0-9]+]] = torch.aten.add.Tensor %[[W]], %[[W]]
// CHECK:         %[[N:[0-9]+]] = torch.prims.convert_element_type %[[S]], %int5 : !torch.vtensor<[3,2],f32>, !torch.int -> !torch.vtensor<[3,2],f16>
// CHECK:         return %[[N]], %[[IDS]] : !torch.vtensor<[3,2],f16>, !torch.vtensor<[3],si64>
// After demotion the casts meet demote-precision's and fold: the add reads and writes bf16.
// DEMOTED-LABEL: func.func @mixed
// DEMOTED-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,2],bf16>, %[[IDS:[a-z0-9]+]]: !torch.vtensor<[3],si64>)
// DEMOTED-NOT:     convert_element_type
// DEMOTED:         %[[S:[0-9]+]] = torch.aten.add.Tensor %[[X]], %[[X]], %int1 : {{.*}} -> !torch.vtensor<[3,2],bf16>
// DEMOTED-NEXT:    return %[[S]], %[[IDS]]
func.func @mixed(%x: !torch.vtensor<[3,2],f32>, %ids: !torch.vtensor<[3],si64>) -> (!torch.vtensor<[3,2],f32>, !torch.vtensor<[3],si64>) {
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %x, %x, %int1 : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],f32>, !torch.int -> !torch.vtensor<[3,2],f32>
  return %0, %ids : !torch.vtensor<[3,2],f32>, !torch.vtensor<[3],si64>
}

// -----

// A kept op (softmax stays f32) between narrowed I/O: cast in, f32 softmax, cast out.
// DEMOTED-LABEL: func.func @kept
// DEMOTED-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],bf16>) -> !torch.vtensor<[2,4],bf16>
// DEMOTED:         %[[W:[0-9]+]] = torch.prims.convert_element_type %[[X]], %int6 : {{.*}} -> !torch.vtensor<[2,4],f32>
// DEMOTED:         %[[S:[0-9]+]] = torch.aten._softmax %[[W]], {{.*}} -> !torch.vtensor<[2,4],f32>
// DEMOTED:         %[[N:[0-9]+]] = torch.prims.convert_element_type %[[S]], %int15 : {{.*}} -> !torch.vtensor<[2,4],bf16>
// DEMOTED-NEXT:    return %[[N]]
func.func @kept(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten._softmax %x, %int1, %false : !torch.vtensor<[2,4],f32>, !torch.int, !torch.bool -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

// Private functions are not the model's interface: unchanged.
// CHECK-LABEL: func.func private @helper
// CHECK-SAME:    (%{{.*}}: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32>
// CHECK-NOT:     convert_element_type
func.func private @helper(%x: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  return %x : !torch.vtensor<[2],f32>
}
