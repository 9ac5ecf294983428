// RUN: cuvil-opt %s -p gather-strided-1x1-conv --split-input-file | FileCheck %s
// Lowered, no cuvil op is left and the convolution has stride 1:
// RUN: cuvil-opt %s -p gather-strided-1x1-conv,lower-cuvil-to-torch,verify-no-cuvil --split-input-file | FileCheck %s --check-prefix=LOWERED

// A strided 1x1 convolution without padding (ResNet's downsample, issue 16) reads every
// stride-th pixel: it becomes one gather of those pixels (index_select of constant flat indices
// over the input viewed as [N, C, H*W], viewed back) and a 1x1 convolution of stride 1, with the
// same weight, bias and activation. The first half are forms the pass must rewrite; the second
// half are look-alikes it must leave alone.

// ===== fires =====

// Pixel (2i, 2j) of a 16x16 input is flat index 32i + 2j.
// CHECK-LABEL: func.func @downsample
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,32,16,16],f16>, %[[W:[a-z0-9]+]]: !torch.vtensor<[64,32,1,1],f16>, %[[B:[a-z0-9]+]]: !torch.vtensor<[64],f16>)
// CHECK:         %[[IDX:[0-9]+]] = torch.vtensor.literal(dense<[0, 2, 4, 6, 8, 10, 12, 14, 32, 34, {{.*}}, 236, 238]> : tensor<64xsi64>) : !torch.vtensor<[64],si64>
// CHECK:         %[[FLAT:[0-9]+]] = torch.aten.view %[[X]], %{{.+}} : !torch.vtensor<[1,32,16,16],f16>, !torch.list<int> -> !torch.vtensor<[1,32,256],f16>
// CHECK:         %[[PICKED:[0-9]+]] = torch.aten.index_select %[[FLAT]], %int2, %[[IDX]] : !torch.vtensor<[1,32,256],f16>, !torch.int, !torch.vtensor<[64],si64> -> !torch.vtensor<[1,32,64],f16>
// CHECK:         %[[XS:[0-9]+]] = torch.aten.view %[[PICKED]], %{{.+}} : !torch.vtensor<[1,32,64],f16>, !torch.list<int> -> !torch.vtensor<[1,32,8,8],f16>
// CHECK:         %[[Y:[0-9]+]] = "cuvil.conv2d"(%[[XS]], %[[W]], %[[B]]) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>}
// CHECK-SAME:    -> !torch.vtensor<[1,64,8,8],f16>
// CHECK:         return %[[Y]]
// LOWERED-LABEL: func.func @downsample
// LOWERED:       torch.aten.index_select
// LOWERED:       %[[ONE:.+]] = torch.prim.ListConstruct %{{.+}}, %{{.+}} : (!torch.int, !torch.int) -> !torch.list<int>
// LOWERED:       torch.aten.convolution %{{.+}}, %{{.+}}, %{{.+}}, %[[ONE]],
// LOWERED:       torch.aten.relu
// LOWERED-NOT:   cuvil.
func.func @downsample(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// Odd sizes, stride (3, 1), no bias, a dilation (one tap: it reads nothing else): rows 0, 3, 6
// of a 7x5 input (ceil(7 / 3) = 3), every column.
// CHECK-LABEL: func.func @uneven_strides_odd_size
// CHECK:         torch.vtensor.literal(dense<[0, 1, 2, 3, 4, 15, 16, 17, 18, 19, 30, 31, 32, 33, 34]> : tensor<15xsi64>)
// CHECK:         %[[XS:[0-9]+]] = torch.aten.view %{{.+}} -> !torch.vtensor<[2,4,3,5],f32>
// CHECK:         "cuvil.conv2d"(%[[XS]], %arg1) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>}
// CHECK-SAME:    -> !torch.vtensor<[2,8,3,5],f32>
func.func @uneven_strides_odd_size(%x: !torch.vtensor<[2,4,7,5],f32>, %w: !torch.vtensor<[8,4,1,1],f32>) -> !torch.vtensor<[2,8,3,5],f32> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 2, 2>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 3, 1>} : (!torch.vtensor<[2,4,7,5],f32>, !torch.vtensor<[8,4,1,1],f32>) -> !torch.vtensor<[2,8,3,5],f32>
  return %0 : !torch.vtensor<[2,8,3,5],f32>
}

// -----

// A dynamic batch: the views keep it as -1.
// CHECK-LABEL: func.func @dynamic_batch
// CHECK:         %[[M1:.+]] = torch.constant.int -1
// CHECK:         torch.prim.ListConstruct %[[M1]], %{{.+}}, %{{.+}} : (!torch.int, !torch.int, !torch.int)
// CHECK:         torch.aten.index_select {{.+}} -> !torch.vtensor<[?,16,16],f16>
// CHECK:         torch.aten.view {{.+}} -> !torch.vtensor<[?,16,4,4],f16>
// CHECK:         "cuvil.conv2d"{{.+}}stride = array<i64: 1, 1>
func.func @dynamic_batch(%x: !torch.vtensor<[?,16,8,8],f16>, %w: !torch.vtensor<[32,16,1,1],f16>) -> !torch.vtensor<[?,32,4,4],f16> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[?,16,8,8],f16>, !torch.vtensor<[32,16,1,1],f16>) -> !torch.vtensor<[?,32,4,4],f16>
  return %0 : !torch.vtensor<[?,32,4,4],f16>
}

// -----

// ===== does not fire =====

// A strided 3x3 convolution (it reads neighbours).
// CHECK-LABEL: func.func @strided_3x3
// CHECK-NOT:     torch.aten.index_select
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {{.+}}stride = array<i64: 2, 2>
func.func @strided_3x3(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,3,3],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,3,3],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// A padded strided 1x1 convolution (its border outputs read the padding).
// CHECK-LABEL: func.func @padded_1x1
// CHECK-NOT:     torch.aten.index_select
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {{.+}}padding = array<i64: 1, 1>, stride = array<i64: 2, 2>
func.func @padded_1x1(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,9,9],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,9,9],f16>
  return %0 : !torch.vtensor<[1,64,9,9],f16>
}

// -----

// A grouped strided 1x1 convolution (the bug was measured on groups = 1 only).
// CHECK-LABEL: func.func @grouped_1x1
// CHECK-NOT:     torch.aten.index_select
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2) {{.+}}groups = 2 : i64{{.+}}stride = array<i64: 2, 2>
func.func @grouped_1x1(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,16,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,16,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// A dynamic height (the pixel indices are constants).
// CHECK-LABEL: func.func @dynamic_height
// CHECK-NOT:     torch.aten.index_select
// CHECK:         "cuvil.conv2d"(%arg0, %arg1) {{.+}}stride = array<i64: 2, 2>
func.func @dynamic_height(%x: !torch.vtensor<[1,16,?,8],f16>, %w: !torch.vtensor<[32,16,1,1],f16>) -> !torch.vtensor<[1,32,?,4],f16> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,16,?,8],f16>, !torch.vtensor<[32,16,1,1],f16>) -> !torch.vtensor<[1,32,?,4],f16>
  return %0 : !torch.vtensor<[1,32,?,4],f16>
}

// -----

// A 1x1 convolution of stride 1 (already what the rewrite makes).
// CHECK-LABEL: func.func @stride_1
// CHECK-NOT:     torch.aten.index_select
// CHECK:         "cuvil.conv2d"(%arg0, %arg1, %arg2)
func.func @stride_1(%x: !torch.vtensor<[1,32,8,8],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,32,8,8],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}
