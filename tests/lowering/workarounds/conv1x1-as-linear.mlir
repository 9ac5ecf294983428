// RUN: cuvil-opt %s -p conv1x1-as-linear --split-input-file | FileCheck %s
// Followed by the kernel pass (what the sm_90 targets run), the linear becomes a kernel call:
// RUN: cuvil-opt %s -p conv1x1-as-linear,lower-cuvil-to-kernels,lower-cuvil-to-torch,verify-no-cuvil --split-input-file | FileCheck %s --check-prefix=KERNEL

// A 16-bit 1x1 convolution of fewer than 128 input channels, without padding (ResNet's
// downsample, issue 16): every stride-th pixel (slices along H and W), channels last, one linear
// with the conv's weight viewed [O, I], bias and activation, and back to channels first.

// CHECK-LABEL: func.func @downsample
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,32,16,16],f16>, %[[W:[a-z0-9]+]]: !torch.vtensor<[64,32,1,1],f16>, %[[B:[a-z0-9]+]]: !torch.vtensor<[64],f16>)
// CHECK:         %[[H:[0-9]+]] = torch.aten.slice.Tensor %[[X]], %int2, %int0, %int16, %int2 : {{.+}} -> !torch.vtensor<[1,32,8,16],f16>
// CHECK:         %[[HW:[0-9]+]] = torch.aten.slice.Tensor %[[H]], %int3, %int0, %int16{{.*}}, %int2{{.*}} : {{.+}} -> !torch.vtensor<[1,32,8,8],f16>
// CHECK:         %[[P:[0-9]+]] = torch.aten.permute %[[HW]], %{{.+}} -> !torch.vtensor<[1,8,8,32],f16>
// CHECK:         %[[WV:[0-9]+]] = torch.aten.view %[[W]], %{{.+}} -> !torch.vtensor<[64,32],f16>
// CHECK:         %[[Y:[0-9]+]] = "cuvil.linear"(%[[P]], %[[WV]], %[[B]]) {activation = "relu"{{.*}}} : {{.+}} -> !torch.vtensor<[1,8,8,64],f16>
// CHECK:         %[[O:[0-9]+]] = torch.aten.permute %[[Y]], %{{.+}} -> !torch.vtensor<[1,64,8,8],f16>
// CHECK:         return %[[O]]
// KERNEL-LABEL:  func.func @downsample
// KERNEL:        call @cuvil_kernel_linear_64x64x32_f16_relu_bias
func.func @downsample(%x: !torch.vtensor<[1,32,16,16],f16>, %w: !torch.vtensor<[64,32,1,1],f16>, %b: !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (!torch.vtensor<[1,32,16,16],f16>, !torch.vtensor<[64,32,1,1],f16>, !torch.vtensor<[64],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0 : !torch.vtensor<[1,64,8,8],f16>
}

// -----

// Stride 1 (a bottleneck's 1x1), bf16, no bias: no slice.
// CHECK-LABEL: func.func @pointwise
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         "cuvil.linear"(%{{.+}}, %{{.+}}) {activation = "none"{{.*}}} : {{.+}} -> !torch.vtensor<[2,5,7,16],bf16>
func.func @pointwise(%x: !torch.vtensor<[2,64,5,7],bf16>, %w: !torch.vtensor<[16,64,1,1],bf16>) -> !torch.vtensor<[2,16,5,7],bf16> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[2,64,5,7],bf16>, !torch.vtensor<[16,64,1,1],bf16>) -> !torch.vtensor<[2,16,5,7],bf16>
  return %0 : !torch.vtensor<[2,16,5,7],bf16>
}

// -----

// Left alone: 128 input channels (IREE is right there), f32, a 3x3 kernel, padding, channels
// not a multiple of 8 (the kernel would not take the linear).
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-5: "cuvil.conv2d"
// CHECK-NOT:     cuvil.linear
func.func @kept(%a: !torch.vtensor<[1,128,8,8],f16>, %wa: !torch.vtensor<[256,128,1,1],f16>, %f: !torch.vtensor<[1,32,8,8],f32>, %wf: !torch.vtensor<[64,32,1,1],f32>,
                %x: !torch.vtensor<[1,32,8,8],f16>, %w3: !torch.vtensor<[64,32,3,3],f16>, %w1: !torch.vtensor<[64,32,1,1],f16>, %o: !torch.vtensor<[1,12,8,8],f16>, %wo: !torch.vtensor<[64,12,1,1],f16>)
    -> (!torch.vtensor<[1,256,8,8],f16>, !torch.vtensor<[1,64,8,8],f32>, !torch.vtensor<[1,64,8,8],f16>, !torch.vtensor<[1,64,10,10],f16>, !torch.vtensor<[1,64,8,8],f16>) {
  %0 = "cuvil.conv2d"(%a, %wa) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,128,8,8],f16>, !torch.vtensor<[256,128,1,1],f16>) -> !torch.vtensor<[1,256,8,8],f16>
  %1 = "cuvil.conv2d"(%f, %wf) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,32,8,8],f32>, !torch.vtensor<[64,32,1,1],f32>) -> !torch.vtensor<[1,64,8,8],f32>
  %2 = "cuvil.conv2d"(%x, %w3) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,32,8,8],f16>, !torch.vtensor<[64,32,3,3],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  %3 = "cuvil.conv2d"(%x, %w1) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,32,8,8],f16>, !torch.vtensor<[64,32,1,1],f16>) -> !torch.vtensor<[1,64,10,10],f16>
  %4 = "cuvil.conv2d"(%o, %wo) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,12,8,8],f16>, !torch.vtensor<[64,12,1,1],f16>) -> !torch.vtensor<[1,64,8,8],f16>
  return %0, %1, %2, %3, %4 : !torch.vtensor<[1,256,8,8],f16>, !torch.vtensor<[1,64,8,8],f32>, !torch.vtensor<[1,64,8,8],f16>, !torch.vtensor<[1,64,10,10],f16>, !torch.vtensor<[1,64,8,8],f16>
}
