// RUN: cuvil-opt %s -p slice-strided-1x1-conv --split-input-file | FileCheck %s
// Lowered, no cuvil op is left and the convolution has stride 1:
// RUN: cuvil-opt %s -p slice-strided-1x1-conv,lower-cuvil-to-torch,verify-no-cuvil --split-input-file | FileCheck %s --check-prefix=LOWERED

// A strided 1x1 convolution without padding (ResNet's downsample, issue 16) reads every
// stride-th pixel: it becomes a strided slice per strided dim and a 1x1 convolution of stride 1,
// with the same weight, bias and activation. The first half are forms the pass must rewrite;
// the second half are look-alikes it must leave alone.

// ===== fires =====

// CHECK-LABEL: func.func @downsample
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,32,16,16],f16>, %[[W:[a-z0-9]+]]: !torch.vtensor<[64,32,1,1],f16>, %[[B:[a-z0-9]+]]: !torch.vtensor<[64],f16>)
// CHECK-DAG:     %[[NONE:.+]] = torch.constant.none
// CHECK-DAG:     %[[I0:.+]] = torch.constant.int 0
// CHECK-DAG:     %[[I2:.+]] = torch.constant.int 2
// CHECK-DAG:     %[[I3:.+]] = torch.constant.int 3
// CHECK:         %[[H:[0-9]+]] = torch.aten.slice.Tensor %[[X]], %[[I2]], %[[I0]], %[[NONE]], %[[I2]] : !torch.vtensor<[1,32,16,16],f16>, !torch.int, !torch.int, !torch.none, !torch.int -> !torch.vtensor<[1,32,8,16],f16>
// CHECK:         %[[HW:[0-9]+]] = torch.aten.slice.Tensor %[[H]], %[[I3]], %{{.+}}, %{{.+}}, %{{.+}} : !torch.vtensor<[1,32,8,16],f16>, !torch.int, !torch.int, !torch.none, !torch.int -> !torch.vtensor<[1,32,8,8],f16>
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%[[HW]], %[[W]], %[[B]]) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>}
// CHECK-SAME:    -> !torch.vtensor<[1,64,8,8],f16>
// CHECK:         return %[[Y]]
// LOWERED-LABEL: func.func @downsample
// LOWERED:       torch.aten.slice.Tensor
// LOWERED:       torch.aten.slice.Tensor
// LOWERED:       %[[ONE:.+]] = torch.prim.ListConstruct %{{.+}}, %{{.+}} : (!torch.int, !torch.int) -> !torch.list<int>
// LOWERED:       torch.aten.convolution %{{.+}}, %{{.+}}, %{{.+}}, %[[ONE]],
// LOWERED:       torch.aten.relu
// LOWERED-NOT:   cuvil.
func.func @downsample(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// Odd sizes, stride (3, 1), no bias, a dilation (one tap: it reads nothing else): one slice,
// ceil(7 / 3) = 3 rows; the width is not sliced.
// CHECK-LABEL: func.func @uneven_strides_odd_size
// CHECK:         %[[H:[0-9]+]] = torch.aten.slice.Tensor %arg0, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : {{.+}} -> !torch.vtensor<[2,4,3,5],f32>
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%[[H]], %arg1) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>}
// CHECK-SAME:    -> !torch.vtensor<[2,8,3,5],f32>
func.func @uneven_strides_odd_size(%x: !torch.vtensor<[2,4,7,5],f32>, %w: !torch.vtensor<[8,4,1,1],f32>) -> !torch.vtensor<[2,8,3,5],f32> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 2, 2>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 3, 1>} : (!torch.vtensor<[2,4,7,5],f32>, !torch.vtensor<[8,4,1,1],f32>) -> !torch.vtensor<[2,8,3,5],f32>
  return %0 : !torch.vtensor<[2,8,3,5],f32>
}

// -----

// A dynamic batch and height: the slice's end is none (the whole dim), its size stays dynamic.
// CHECK-LABEL: func.func @dynamic_height
// CHECK:         torch.aten.slice.Tensor %arg0, {{.+}} -> !torch.vtensor<[?,16,?,8],f16>
// CHECK:         torch.aten.slice.Tensor {{.+}} -> !torch.vtensor<[?,16,?,4],f16>
// CHECK:         "cuvil.conv2d"{{.+}}stride = array<i64: 1, 1>
func.func @dynamic_height(%x: !torch.vtensor<[?,16,?,8],f16>, %w: !torch.vtensor<[32,16,1,1],f16>) -> !torch.vtensor<[?,32,?,4],f16> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[?,16,?,8],f16>, !torch.vtensor<[32,16,1,1],f16>) -> !torch.vtensor<[?,32,?,4],f16>
  return %0 : !torch.vtensor<[?,32,?,4],f16>
}

// -----

// ===== does not fire =====

// A strided 3x3 convolution (it reads neighbours).
// CHECK-LABEL: func.func @strided_3x3
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {{.+}}stride = array<i64: 2, 2>
func.func @strided_3x3(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,3,3],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,3,3],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// A padded strided 1x1 convolution (its border outputs read the padding).
// CHECK-LABEL: func.func @padded_1x1
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {{.+}}padding = array<i64: 1, 1>, stride = array<i64: 2, 2>
func.func @padded_1x1(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,9,9],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,9,9],f16>
  return %0 : !torch.vtensor<[1,64,9,9],f16>
}

// -----

// A grouped strided 1x1 convolution (the bug was measured on groups = 1 only).
// CHECK-LABEL: func.func @grouped_1x1
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {{.+}}groups = 2 : i64{{.+}}stride = array<i64: 2, 2>
func.func @grouped_1x1(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,16,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,16,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// A 1x1 convolution of stride 1 (already what the rewrite makes).
// CHECK-LABEL: func.func @stride_1
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2)
func.func @stride_1(%x: !torch.vtensor<[1,32,8,8],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,32,8,8],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}
