// RUN: cuvil-opt %s -p lower-cuvil-to-torch --split-input-file | FileCheck %s
// RUN: cuvil-opt %s -p 'lower-cuvil-to-torch{attention=decomposed}' --split-input-file | FileCheck %s --check-prefix=DECOMP
// RUN: cuvil-opt %s -p 'lower-cuvil-to-torch{pad_rows=16}' --split-input-file | FileCheck %s --check-prefix=ROWS
// RUN: cuvil-opt %s -p 'lower-cuvil-to-torch{flatten=true}' --split-input-file | FileCheck %s --check-prefix=FLAT
// RUN: cuvil-opt %s -p 'lower-cuvil-to-torch{attention=decomposed causal_block=2}' --split-input-file | FileCheck %s --check-prefix=BLOCK

// Every Cuvil op becomes torch ops that IREE's torch input pipeline compiles; no cuvil op is left.

// ===== cuvil.linear: aten.linear, then the epilogue activation =====

// CHECK-LABEL: func.func @linear_with_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[3],f32>)
// CHECK:         %[[Y:[0-9]+]] = torch.aten.linear %[[X]], %[[W]], %[[B]] : !torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
// CHECK-NEXT:    return %[[Y]]
// CHECK-NOT:     cuvil.
func.func @linear_with_bias(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK-LABEL: func.func @linear_without_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK:         %[[NONE:.+]] = torch.constant.none
// CHECK:         torch.aten.linear %[[X]], %[[W]], %[[NONE]] : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[2,5,3],f32>
// CHECK-NOT:     cuvil.
func.func @linear_without_bias(%x: !torch.vtensor<[2,5,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,5,3],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,5,3],f32>
  return %0 : !torch.vtensor<[2,5,3],f32>
}

// -----

// pad_rows=16 (the cpu target): 1030 out features (at least PAD_FROM_ROWS = 1024, not a multiple
// of 16) get 10 zero rows of weight and bias (constant_pad_nd), the result is sliced back to
// 1030 before the activation; 1000 rows (under 1024) stay as they are.
// ROWS-LABEL: func.func @linear_ragged_rows
// ROWS-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[1030,4],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[1030],f32>, %[[W2:[a-z0-9]+]]: !torch.vtensor<[1000,4],f32>)
// ROWS:        %[[WP:[0-9]+]] = torch.aten.constant_pad_nd %[[W]], %{{.+}}, %{{.+}} : !torch.vtensor<[1030,4],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[1040,4],f32>
// ROWS:        %[[BP:[0-9]+]] = torch.aten.constant_pad_nd %[[B]], %{{.+}}, %{{.+}} : !torch.vtensor<[1030],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[1040],f32>
// ROWS:        %[[Y:[0-9]+]] = torch.aten.linear %[[X]], %[[WP]], %[[BP]] : {{.*}} -> !torch.vtensor<[2,5,1040],f32>
// ROWS:        %[[S:[0-9]+]] = torch.aten.slice.Tensor %[[Y]], {{.*}} -> !torch.vtensor<[2,5,1030],f32>
// ROWS:        torch.aten.relu %[[S]]
// ROWS:        torch.aten.linear %[[X]], %[[W2]], {{.*}} -> !torch.vtensor<[2,5,1000],f32>
// ROWS-NOT:     constant_pad_nd
func.func @linear_ragged_rows(%x: !torch.vtensor<[2,5,4],f32>, %w: !torch.vtensor<[1030,4],f32>, %b: !torch.vtensor<[1030],f32>, %w2: !torch.vtensor<[1000,4],f32>) -> (!torch.vtensor<[2,5,1030],f32>, !torch.vtensor<[2,5,1000],f32>) {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[1030,4],f32>, !torch.vtensor<[1030],f32>) -> !torch.vtensor<[2,5,1030],f32>
  %1 = "cuvil.linear"(%x, %w2) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[1000,4],f32>) -> !torch.vtensor<[2,5,1000],f32>
  return %0, %1 : !torch.vtensor<[2,5,1030],f32>, !torch.vtensor<[2,5,1000],f32>
}

// -----

// flatten=true (the cpu target): an input of rank > 2 is viewed as [rows, K], the linear (and a
// gated linear's halves) computed on rows, the result viewed back; a 2-D input stays as it is.
// With a dynamic leading dim the rows are -1.
// FLAT-LABEL: func.func @linear_2d_stays
// FLAT-NOT:     torch.aten.view
// FLAT-LABEL: func.func @linear_flattened
// FLAT:         %[[X2:[0-9]+]] = torch.aten.view %{{.+}}, %{{.+}} : !torch.vtensor<[2,5,4],f32>, !torch.list<int> -> !torch.vtensor<[10,4],f32>
// FLAT:         %[[Y:[0-9]+]] = torch.aten.linear %[[X2]], {{.*}} -> !torch.vtensor<[10,3],f32>
// FLAT:         %[[A:[0-9]+]] = torch.aten.relu %[[Y]] : !torch.vtensor<[10,3],f32>
// FLAT:         torch.aten.view %[[A]], {{.*}} -> !torch.vtensor<[2,5,3],f32>
// FLAT:         %[[G:[0-9]+]] = torch.aten.linear {{.*}} -> !torch.vtensor<[10,6],f32>
// FLAT:         torch.aten.mul.Tensor {{.*}} -> !torch.vtensor<[10,3],f32>
// FLAT:         torch.aten.view {{.*}} -> !torch.vtensor<[2,5,3],f32>
// FLAT-LABEL: func.func @linear_flattened_dynamic
// FLAT:         torch.aten.view {{.*}} -> !torch.vtensor<[?,4],f32>
// FLAT:         torch.aten.linear {{.*}} -> !torch.vtensor<[?,3],f32>
// FLAT:         torch.aten.view {{.*}} -> !torch.vtensor<[1,?,3],f32>
func.func @linear_2d_stays(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}
func.func @linear_flattened(%x: !torch.vtensor<[2,5,4],f32>, %w: !torch.vtensor<[3,4],f32>, %wg: !torch.vtensor<[6,4],f32>) -> (!torch.vtensor<[2,5,3],f32>, !torch.vtensor<[2,5,3],f32>) {
  %0 = "cuvil.linear"(%x, %w) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,5,3],f32>
  %1 = "cuvil.linear"(%x, %wg) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[6,4],f32>) -> !torch.vtensor<[2,5,3],f32>
  return %0, %1 : !torch.vtensor<[2,5,3],f32>, !torch.vtensor<[2,5,3],f32>
}
func.func @linear_flattened_dynamic(%x: !torch.vtensor<[1,?,4],f32>, %w: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[1,?,3],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[1,?,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[1,?,3],f32>
  return %0 : !torch.vtensor<[1,?,3],f32>
}
// -----

// A weight that is the transpose of a constant ([in, out], GPT-2's Conv1D) becomes a constant
// of its own in [out, in] layout: no transpose left for IREE (an external parameter could not
// be transposed at compile time). A transpose of a function argument stays.
// CHECK-LABEL: func.func @linear_transposed_constant
// CHECK:         %[[W:.+]] = torch.vtensor.literal(dense<{{\[\[}}1.000000e+00, 3.000000e+00, 5.000000e+00], [2.000000e+00, 4.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>) : !torch.vtensor<[2,3],f32>
// CHECK:         torch.aten.linear %{{.+}}, %[[W]], %{{.+}} : !torch.vtensor<[4,3],f32>, !torch.vtensor<[2,3],f32>
// CHECK-LABEL: func.func @linear_transposed_argument
// CHECK:         %[[T:.+]] = torch.aten.t %{{.+}}
// CHECK:         torch.aten.linear %{{.+}}, %[[T]]
func.func @linear_transposed_constant(%x: !torch.vtensor<[4,3],f32>) -> !torch.vtensor<[4,2],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>) : !torch.vtensor<[3,2],f32>
  %wt = torch.aten.t %w : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[2,3],f32>
  %0 = "cuvil.linear"(%x, %wt) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[4,3],f32>, !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[4,2],f32>
  return %0 : !torch.vtensor<[4,2],f32>
}
func.func @linear_transposed_argument(%x: !torch.vtensor<[4,3],f32>, %w: !torch.vtensor<[3,2],f32>) -> !torch.vtensor<[4,2],f32> {
  %wt = torch.aten.t %w : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[2,3],f32>
  %0 = "cuvil.linear"(%x, %wt) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[4,3],f32>, !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[4,2],f32>
  return %0 : !torch.vtensor<[4,2],f32>
}

// -----

// CHECK-LABEL: func.func @linear_relu
// CHECK:         %[[L:[0-9]+]] = torch.aten.linear
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.relu %[[L]] : !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
// CHECK-NEXT:    return %[[A]]
// CHECK-LABEL: func.func @linear_gelu
// CHECK:         %[[S:.+]] = torch.constant.str "none"
// CHECK:         %[[L:[0-9]+]] = torch.aten.linear
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.gelu %[[L]], %[[S]] : !torch.vtensor<[2,3],f32>, !torch.str -> !torch.vtensor<[2,3],f32>
// CHECK-NEXT:    return %[[A]]
// gelu(tanh) is written out (IREE's aten.gelu tanh lowering is less accurate):
// 0.5 * y * (1 + tanh(sqrt(2/pi) * (y + 0.044715 * y^3)))
// CHECK-LABEL: func.func @linear_gelu_tanh
// CHECK-NOT:     torch.aten.gelu
// CHECK:         %[[L:[0-9]+]] = torch.aten.linear
// CHECK-NEXT:    %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %[[L]], %[[L]]
// CHECK-NEXT:    %[[CUBE:[0-9]+]] = torch.aten.mul.Tensor %[[SQ]], %[[L]]
// CHECK-NEXT:    %[[C:[0-9]+]] = torch.aten.mul.Scalar %[[CUBE]], %float4.471500e-02
// CHECK-NEXT:    %[[IN:[0-9]+]] = torch.aten.add.Tensor %[[L]], %[[C]], %int1
// CHECK-NEXT:    %[[K:[0-9]+]] = torch.aten.mul.Scalar %[[IN]], %float7.978850e-01
// CHECK-NEXT:    %[[T:[0-9]+]] = torch.aten.tanh %[[K]]
// CHECK-NEXT:    %[[P:[0-9]+]] = torch.aten.add.Scalar %[[T]], %float1.000000e00, %int1
// CHECK-NEXT:    %[[H:[0-9]+]] = torch.aten.mul.Scalar %[[L]], %float5.000000e-01
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.mul.Tensor %[[H]], %[[P]]
// CHECK-NEXT:    return %[[A]]
// CHECK-LABEL: func.func @linear_silu
// CHECK:         %[[L:[0-9]+]] = torch.aten.linear
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.silu %[[L]]
// CHECK-NEXT:    return %[[A]]
// CHECK-LABEL: func.func @linear_sigmoid
// CHECK:         %[[L:[0-9]+]] = torch.aten.linear
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.sigmoid %[[L]]
// CHECK-NEXT:    return %[[A]]
// CHECK-NOT:     cuvil.
func.func @linear_relu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}
func.func @linear_gelu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}
func.func @linear_gelu_tanh(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}
func.func @linear_silu(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}
func.func @linear_sigmoid(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[3,4],f32>, %b: !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "sigmoid", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// Gated activations: one aten.linear with 2F out features, the two halves along the last dim,
// the gate's activation on the first half, times the second.
// CHECK-LABEL: func.func @linear_swiglu
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[?,5,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[6,4],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[6],f32>)
// CHECK-DAG:     %[[I0:.+]] = torch.constant.int 0
// CHECK-DAG:     %[[I1:.+]] = torch.constant.int 1
// CHECK-DAG:     %[[I2:.+]] = torch.constant.int 2
// CHECK-DAG:     %[[I3:.+]] = torch.constant.int 3
// CHECK-DAG:     %[[I6:.+]] = torch.constant.int 6
// CHECK:         %[[Y:[0-9]+]] = torch.aten.linear %[[X]], %[[W]], %[[B]] : {{.*}} -> !torch.vtensor<[?,5,6],f32>
// CHECK-NEXT:    %[[G:[0-9]+]] = torch.aten.slice.Tensor %[[Y]], %[[I2]], %[[I0]], %[[I3]], %[[I1]] : {{.*}} -> !torch.vtensor<[?,5,3],f32>
// CHECK-NEXT:    %[[U:[0-9]+]] = torch.aten.slice.Tensor %[[Y]], %[[I2]], %[[I3]], %[[I6]], %[[I1]] : {{.*}} -> !torch.vtensor<[?,5,3],f32>
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.silu %[[G]] : !torch.vtensor<[?,5,3],f32> -> !torch.vtensor<[?,5,3],f32>
// CHECK-NEXT:    %[[R:[0-9]+]] = torch.aten.mul.Tensor %[[A]], %[[U]] : {{.*}} -> !torch.vtensor<[?,5,3],f32>
// CHECK-NEXT:    return %[[R]]
// CHECK-LABEL: func.func @linear_geglu_tanh
// CHECK-NOT:     torch.aten.gelu
// CHECK:         %[[Y:[0-9]+]] = torch.aten.linear {{.*}} -> !torch.vtensor<[2,6],f32>
// CHECK:         %[[G:[0-9]+]] = torch.aten.slice.Tensor %[[Y]]
// CHECK:         %[[U:[0-9]+]] = torch.aten.slice.Tensor %[[Y]]
// CHECK:         torch.aten.tanh
// CHECK:         %[[A:[0-9]+]] = torch.aten.mul.Tensor %{{[0-9]+}}, %{{[0-9]+}}
// CHECK-NEXT:    torch.aten.mul.Tensor %[[A]], %[[U]]
// CHECK-NOT:     cuvil.
func.func @linear_swiglu(%x: !torch.vtensor<[?,5,4],f32>, %w: !torch.vtensor<[6,4],f32>, %b: !torch.vtensor<[6],f32>) -> !torch.vtensor<[?,5,3],f32> {
  %0 = "cuvil.linear"(%x, %w, %b) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[?,5,4],f32>, !torch.vtensor<[6,4],f32>, !torch.vtensor<[6],f32>) -> !torch.vtensor<[?,5,3],f32>
  return %0 : !torch.vtensor<[?,5,3],f32>
}
func.func @linear_geglu_tanh(%x: !torch.vtensor<[2,4],f32>, %w: !torch.vtensor<[6,4],f32>) -> !torch.vtensor<[2,3],f32> {
  %0 = "cuvil.linear"(%x, %w) {activation = "geglu_tanh", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[6,4],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// ===== cuvil.conv2d: aten.convolution (not transposed, output_padding [0, 0]), then the activation =====

// -----

// CHECK-LABEL: func.func @conv2d_grouped_dilated_silu
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,4,8,8],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[6,2,3,3],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[6],f32>)
// CHECK-DAG:     %[[I0:.+]] = torch.constant.int 0
// CHECK-DAG:     %[[I1:.+]] = torch.constant.int 1
// CHECK-DAG:     %[[I2:.+]] = torch.constant.int 2
// CHECK-DAG:     %[[I3:.+]] = torch.constant.int 3
// CHECK-DAG:     %[[FALSE:.+]] = torch.constant.bool false
// CHECK:         %[[STRIDE:[0-9]+]] = torch.prim.ListConstruct %[[I1]], %[[I1]]
// CHECK:         %[[PAD:[0-9]+]] = torch.prim.ListConstruct %[[I3]], %[[I3]]
// CHECK:         %[[DIL:[0-9]+]] = torch.prim.ListConstruct %[[I2]], %[[I2]]
// CHECK:         %[[OUTPAD:[0-9]+]] = torch.prim.ListConstruct %[[I0]], %[[I0]]
// CHECK:         %[[C:[0-9]+]] = torch.aten.convolution %[[X]], %[[W]], %[[B]], %[[STRIDE]], %[[PAD]], %[[DIL]], %[[FALSE]], %[[OUTPAD]], %[[I2]] :
// CHECK-SAME:      -> !torch.vtensor<[1,6,10,10],f32>
// CHECK-NEXT:    %[[A:[0-9]+]] = torch.aten.silu %[[C]]
// CHECK-NEXT:    return %[[A]]
// CHECK-NOT:     cuvil.
func.func @conv2d_grouped_dilated_silu(%x: !torch.vtensor<[1,4,8,8],f32>, %w: !torch.vtensor<[6,2,3,3],f32>, %b: !torch.vtensor<[6],f32>) -> !torch.vtensor<[1,6,10,10],f32> {
  %0 = "cuvil.conv2d"(%x, %w, %b) {activation = "silu", dilation = array<i64: 2, 2>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, padding = array<i64: 3, 3>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[6,2,3,3],f32>, !torch.vtensor<[6],f32>) -> !torch.vtensor<[1,6,10,10],f32>
  return %0 : !torch.vtensor<[1,6,10,10],f32>
}

// -----

// CHECK-LABEL: func.func @conv2d_without_bias
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[1,2,4,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[3,2,1,1],f32>)
// CHECK:         %[[NONE:.+]] = torch.constant.none
// CHECK:         %[[C:[0-9]+]] = torch.aten.convolution %[[X]], %[[W]], %[[NONE]],
// CHECK-NEXT:    return %[[C]]
// CHECK-NOT:     cuvil.
func.func @conv2d_without_bias(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32> {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "none", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  return %0 : !torch.vtensor<[1,3,4,4],f32>
}

// -----

// CHECK-LABEL: func.func @conv2d_activations
// CHECK:         %[[C1:[0-9]+]] = torch.aten.convolution
// CHECK-NEXT:    torch.aten.relu %[[C1]]
// CHECK:         %[[C2:[0-9]+]] = torch.aten.convolution
// CHECK-NEXT:    torch.aten.gelu %[[C2]], %{{.+}} :
// CHECK:         %[[C3:[0-9]+]] = torch.aten.convolution
// CHECK-NEXT:    torch.aten.sigmoid %[[C3]]
// CHECK-NOT:     cuvil.
func.func @conv2d_activations(%x: !torch.vtensor<[1,2,4,4],f32>, %w: !torch.vtensor<[3,2,1,1],f32>) -> (!torch.vtensor<[1,3,4,4],f32>, !torch.vtensor<[1,3,4,4],f32>, !torch.vtensor<[1,3,4,4],f32>) {
  %0 = "cuvil.conv2d"(%x, %w) {activation = "relu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  %1 = "cuvil.conv2d"(%x, %w) {activation = "gelu", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  %2 = "cuvil.conv2d"(%x, %w) {activation = "sigmoid", dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  return %0, %1, %2 : !torch.vtensor<[1,3,4,4],f32>, !torch.vtensor<[1,3,4,4],f32>, !torch.vtensor<[1,3,4,4],f32>
}

// ===== cuvil.attention: aten.scaled_dot_product_attention with dropout 0 and the explicit scale
// (or, with attention=decomposed, matmul + softmax) =====

// -----

// attention=decomposed: matmul(softmax(matmul(q, kᵀ) * scale, masked), v), the 4-D matmuls as
// view + bmm + view (IREE's CPU code for a 4-D aten.matmul is far slower); causal is a constant
// lower-triangular keep mask (no tril: its index math needs 64-bit integers). The output goes
// through an optimization barrier (a stand-in targets/iree.py swaps for util.optimization_barrier):
// IREE must not fold a transpose of it into the bmm.
// DECOMP-LABEL: func.func @attention_causal_without_mask
// DECOMP-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[K:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[V:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>)
// DECOMP-DAG:     %[[SCALE:.+]] = torch.constant.float 1.250000e-01
// DECOMP-DAG:     %[[NEG_INF:.+]] = torch.constant.float 0xFFF0000000000000
// DECOMP-DAG:     %[[KEEP:[0-9]+]] = torch.vtensor.literal(dense<{{\[\[}}true, false, false, false, false], [true, true, false, false, false], {{.*}}, [true, true, true, true, true]]> : tensor<5x5xi1>) : !torch.vtensor<[5,5],i1>
// DECOMP:         %[[KT:[0-9]+]] = torch.aten.transpose.int %[[K]], {{.*}} -> !torch.vtensor<[1,2,16,5],f32>
// DECOMP:         %[[Q3:[0-9]+]] = torch.aten.view %[[Q]], {{.*}} -> !torch.vtensor<[2,5,16],f32>
// DECOMP:         %[[KT3:[0-9]+]] = torch.aten.view %[[KT]], {{.*}} -> !torch.vtensor<[2,16,5],f32>
// DECOMP-NEXT:    %[[S3:[0-9]+]] = torch.aten.bmm %[[Q3]], %[[KT3]] : {{.*}} -> !torch.vtensor<[2,5,5],f32>
// DECOMP:         %[[S:[0-9]+]] = torch.aten.view %[[S3]], {{.*}} -> !torch.vtensor<[1,2,5,5],f32>
// DECOMP:         %[[SS:[0-9]+]] = torch.aten.mul.Scalar %[[S]], %[[SCALE]]
// DECOMP:         %[[M:[0-9]+]] = torch.aten.where.ScalarOther %[[KEEP]], %[[SS]], %[[NEG_INF]]
// DECOMP:         %[[P:[0-9]+]] = torch.aten.softmax.int %[[M]], %{{.+}}, %{{.+}} : {{.*}} -> !torch.vtensor<[1,2,5,5],f32>
// DECOMP:         %[[P3:[0-9]+]] = torch.aten.view %[[P]], {{.*}} -> !torch.vtensor<[2,5,5],f32>
// DECOMP:         %[[V3:[0-9]+]] = torch.aten.view %[[V]], {{.*}} -> !torch.vtensor<[2,5,16],f32>
// DECOMP-NEXT:    %[[O3:[0-9]+]] = torch.aten.bmm %[[P3]], %[[V3]] : {{.*}} -> !torch.vtensor<[2,5,16],f32>
// DECOMP:         %[[O:[0-9]+]] = torch.aten.view %[[O3]], {{.*}} -> !torch.vtensor<[1,2,5,16],f32>
// DECOMP-NEXT:    %[[B:[0-9]+]] = torch.operator "util.optimization_barrier"(%[[O]]) : (!torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32>
// DECOMP-NEXT:    return %[[B]]
// DECOMP-NOT:     scaled_dot_product_attention
// causal_block=2: 5 queries as blocks of 2, 2 and 1, each over the keys up to its last position
// (2, 4, 5), with the keep mask shifted by the block's start; the results concatenated along the
// queries, then the barrier.
// BLOCK-LABEL: func.func @attention_causal_without_mask
// BLOCK-DAG:     torch.vtensor.literal(dense<{{\[\[}}true, false], [true, true]]> : tensor<2x2xi1>)
// BLOCK-DAG:     torch.vtensor.literal(dense<{{\[\[}}true, true, true, false], [true, true, true, true]]> : tensor<2x4xi1>)
// BLOCK-DAG:     torch.vtensor.literal(dense<true> : tensor<1x5xi1>)
// BLOCK:         torch.aten.softmax.int {{.*}} -> !torch.vtensor<[1,2,2,2],f32>
// BLOCK:         torch.aten.softmax.int {{.*}} -> !torch.vtensor<[1,2,2,4],f32>
// BLOCK:         torch.aten.softmax.int {{.*}} -> !torch.vtensor<[1,2,1,5],f32>
// BLOCK:         %[[L:[0-9]+]] = torch.prim.ListConstruct {{.*}} : (!torch.vtensor<[1,2,2,16],f32>, !torch.vtensor<[1,2,2,16],f32>, !torch.vtensor<[1,2,1,16],f32>) -> !torch.list<vtensor>
// BLOCK-NEXT:    %[[C:[0-9]+]] = torch.aten.cat %[[L]], {{.*}} -> !torch.vtensor<[1,2,5,16],f32>
// BLOCK-NEXT:    torch.operator "util.optimization_barrier"(%[[C]])
// BLOCK-LABEL: func.func @attention_with_mask
// BLOCK-NOT:     torch.aten.cat
// CHECK-LABEL: func.func @attention_causal_without_mask
// CHECK-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[K:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[V:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>)
// CHECK-DAG:     %[[NONE:.+]] = torch.constant.none
// CHECK-DAG:     %[[DROP:.+]] = torch.constant.float 0.000000e+00
// CHECK-DAG:     %[[TRUE:.+]] = torch.constant.bool true
// CHECK-DAG:     %[[FALSE:.+]] = torch.constant.bool false
// CHECK-DAG:     %[[SCALE:.+]] = torch.constant.float 1.250000e-01
// CHECK:         %[[O:[0-9]+]] = torch.aten.scaled_dot_product_attention %[[Q]], %[[K]], %[[V]], %[[NONE]], %[[DROP]], %[[TRUE]], %[[SCALE]], %[[FALSE]] :
// CHECK-SAME:      -> !torch.vtensor<[1,2,5,16],f32>
// CHECK-NEXT:    return %[[O]]
// CHECK-NOT:     cuvil.
func.func @attention_causal_without_mask(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,5,16],f32>, %v: !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32> {
  %0 = "cuvil.attention"(%q, %k, %v) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.250000e-01 : f64} : (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) -> !torch.vtensor<[1,2,5,16],f32>
  return %0 : !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A boolean mask keeps where true.
// DECOMP-LABEL: func.func @attention_with_mask
// DECOMP-SAME:    %[[M:[a-z0-9]+]]: !torch.vtensor<[1,1,5,7],i1>)
// DECOMP:         %[[SS:[0-9]+]] = torch.aten.mul.Scalar
// DECOMP:         %[[W:[0-9]+]] = torch.aten.where.ScalarOther %[[M]], %[[SS]], %{{.+}} : !torch.vtensor<[1,1,5,7],i1>, !torch.vtensor<[1,2,5,7],f32>, !torch.float -> !torch.vtensor<[1,2,5,7],f32>
// DECOMP:         torch.aten.softmax.int %[[W]]
// DECOMP-NOT:     tensor<5x7xi1>
// DECOMP-NOT:     scaled_dot_product_attention
// CHECK-LABEL: func.func @attention_with_mask
// CHECK-SAME:    %[[M:[a-z0-9]+]]: !torch.vtensor<[1,1,5,7],i1>)
// CHECK-DAG:     %[[FALSE:.+]] = torch.constant.bool false
// CHECK-DAG:     %[[SCALE:.+]] = torch.constant.float 2.500000e-01
// CHECK:         torch.aten.scaled_dot_product_attention %{{.+}}, %{{.+}}, %{{.+}}, %[[M]], %{{.+}}, %[[FALSE]], %[[SCALE]], %[[FALSE]] :
// CHECK-SAME:      !torch.vtensor<[1,1,5,7],i1>, !torch.float, !torch.bool, !torch.float, !torch.bool -> !torch.vtensor<[1,2,5,8],f32>
// CHECK-NOT:     cuvil.
func.func @attention_with_mask(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,7,16],f32>, %v: !torch.vtensor<[1,2,7,8],f32>, %m: !torch.vtensor<[1,1,5,7],i1>) -> !torch.vtensor<[1,2,5,8],f32> {
  %0 = "cuvil.attention"(%q, %k, %v, %m) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,7,16],f32>, !torch.vtensor<[1,2,7,8],f32>, !torch.vtensor<[1,1,5,7],i1>) -> !torch.vtensor<[1,2,5,8],f32>
  return %0 : !torch.vtensor<[1,2,5,8],f32>
}

// -----

// Several queries (a prefill chunk) against a KV cache's filled prefix (dynamic length): the
// batch dims collapsed with flatten (a view's one -1 cannot infer the dynamic dims), bmm, and
// unflatten back; no 4-D aten.matmul.
// DECOMP-LABEL: func.func @attention_chunk_over_prefix
// DECOMP-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<[1,2,5,16],f32>, %[[K:[a-z0-9]+]]: !torch.vtensor<[1,2,?,16],f32>, %[[V:[a-z0-9]+]]: !torch.vtensor<[1,2,?,8],f32>, %[[M:[a-z0-9]+]]: !torch.vtensor<[1,1,5,?],i1>)
// DECOMP:         %[[KT:[0-9]+]] = torch.aten.transpose.int %[[K]], {{.*}} -> !torch.vtensor<[1,2,16,?],f32>
// DECOMP:         %[[Q3:[0-9]+]] = torch.aten.flatten.using_ints %[[Q]], {{.*}} -> !torch.vtensor<[2,5,16],f32>
// DECOMP:         %[[KT3:[0-9]+]] = torch.aten.flatten.using_ints %[[KT]], {{.*}} -> !torch.vtensor<[2,16,?],f32>
// DECOMP-NEXT:    %[[S3:[0-9]+]] = torch.aten.bmm %[[Q3]], %[[KT3]] : {{.*}} -> !torch.vtensor<[2,5,?],f32>
// DECOMP:         %[[S:[0-9]+]] = torch.aten.unflatten.int %[[S3]], {{.*}} -> !torch.vtensor<[1,2,5,?],f32>
// DECOMP:         %[[P:[0-9]+]] = torch.aten.softmax.int
// DECOMP:         %[[P3:[0-9]+]] = torch.aten.flatten.using_ints %[[P]], {{.*}} -> !torch.vtensor<[2,5,?],f32>
// DECOMP:         %[[V3:[0-9]+]] = torch.aten.flatten.using_ints %[[V]], {{.*}} -> !torch.vtensor<[2,?,8],f32>
// DECOMP-NEXT:    %[[O3:[0-9]+]] = torch.aten.bmm %[[P3]], %[[V3]] : {{.*}} -> !torch.vtensor<[2,5,8],f32>
// DECOMP:         %[[O:[0-9]+]] = torch.aten.unflatten.int %[[O3]], {{.*}} -> !torch.vtensor<[1,2,5,8],f32>
// DECOMP-NEXT:    %[[B:[0-9]+]] = torch.operator "util.optimization_barrier"(%[[O]])
// DECOMP-NEXT:    return %[[B]]
// DECOMP-NOT:     torch.aten.matmul
// CHECK-LABEL: func.func @attention_chunk_over_prefix(
// CHECK:         torch.aten.scaled_dot_product_attention
func.func @attention_chunk_over_prefix(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,?,16],f32>, %v: !torch.vtensor<[1,2,?,8],f32>, %m: !torch.vtensor<[1,1,5,?],i1>) -> !torch.vtensor<[1,2,5,8],f32> {
  %0 = "cuvil.attention"(%q, %k, %v, %m) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,8],f32>, !torch.vtensor<[1,1,5,?],i1>) -> !torch.vtensor<[1,2,5,8],f32>
  return %0 : !torch.vtensor<[1,2,5,8],f32>
}

// -----

// One query against a KV cache's filled prefix (dynamic length): multiply-and-sum reductions
// over keys and values as stored, no kᵀ, no [B*H, S, D] views (IREE would copy the prefix).
// DECOMP-LABEL: func.func @attention_single_query
// DECOMP-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<[2,3,1,16],f32>, %[[K:[a-z0-9]+]]: !torch.vtensor<[2,3,?,16],f32>, %[[V:[a-z0-9]+]]: !torch.vtensor<[2,3,?,8],f32>, %[[M:[a-z0-9]+]]: !torch.vtensor<[2,1,1,?],i1>)
// DECOMP:         %[[P:[0-9]+]] = torch.aten.mul.Tensor %[[Q]], %[[K]] : !torch.vtensor<[2,3,1,16],f32>, !torch.vtensor<[2,3,?,16],f32> -> !torch.vtensor<[2,3,?,16],f32>
// DECOMP:         torch.aten.sum.dim_IntList %[[P]], %{{.+}}, %{{.+}}, %{{.+}} : {{.+}} -> !torch.vtensor<[2,3,?],f32>
// DECOMP:         %[[W:[0-9]+]] = torch.aten.where.ScalarOther %[[M]]
// DECOMP:         %[[S:[0-9]+]] = torch.aten.softmax.int %[[W]]
// DECOMP:         %[[T:[0-9]+]] = torch.aten.transpose.int %[[S]], {{.+}} -> !torch.vtensor<[2,3,?,1],f32>
// DECOMP:         %[[PV:[0-9]+]] = torch.aten.mul.Tensor %[[T]], %[[V]] : {{.+}} -> !torch.vtensor<[2,3,?,8],f32>
// DECOMP:         %[[O:[0-9]+]] = torch.aten.sum.dim_IntList %[[PV]], {{.+}} -> !torch.vtensor<[2,3,1,8],f32>
// DECOMP-NEXT:    return %[[O]]
// DECOMP-NOT:     torch.aten.bmm
// attention=sdpa writes a single query out the same way (lower_cuvil_to_torch._single_query).
// CHECK-LABEL: func.func @attention_single_query(
// CHECK:         torch.aten.sum.dim_IntList
// CHECK-NOT:     scaled_dot_product_attention
func.func @attention_single_query(%q: !torch.vtensor<[2,3,1,16],f32>, %k: !torch.vtensor<[2,3,?,16],f32>, %v: !torch.vtensor<[2,3,?,8],f32>, %m: !torch.vtensor<[2,1,1,?],i1>) -> !torch.vtensor<[2,3,1,8],f32> {
  %0 = "cuvil.attention"(%q, %k, %v, %m) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[2,3,1,16],f32>, !torch.vtensor<[2,3,?,16],f32>, !torch.vtensor<[2,3,?,8],f32>, !torch.vtensor<[2,1,1,?],i1>) -> !torch.vtensor<[2,3,1,8],f32>
  return %0 : !torch.vtensor<[2,3,1,8],f32>
}

// -----

// A float mask is additive.
// CHECK-LABEL: func.func @attention_with_float_mask
// CHECK-SAME:    %[[M:[a-z0-9]+]]: !torch.vtensor<[5,7],f32>)
// CHECK:         torch.aten.scaled_dot_product_attention %{{.+}}, %{{.+}}, %{{.+}}, %[[M]],
// DECOMP-LABEL: func.func @attention_with_float_mask
// DECOMP-SAME:    %[[M:[a-z0-9]+]]: !torch.vtensor<[5,7],f32>)
// DECOMP:         %[[SS:[0-9]+]] = torch.aten.mul.Scalar
// DECOMP:         %[[A:[0-9]+]] = torch.aten.add.Tensor %[[SS]], %[[M]], %{{.+}} : !torch.vtensor<[1,2,5,7],f32>, !torch.vtensor<[5,7],f32>, !torch.int -> !torch.vtensor<[1,2,5,7],f32>
// DECOMP:         torch.aten.softmax.int %[[A]]
func.func @attention_with_float_mask(%q: !torch.vtensor<[1,2,5,16],f32>, %k: !torch.vtensor<[1,2,7,16],f32>, %v: !torch.vtensor<[1,2,7,8],f32>, %m: !torch.vtensor<[5,7],f32>) -> !torch.vtensor<[1,2,5,8],f32> {
  %0 = "cuvil.attention"(%q, %k, %v, %m) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,7,16],f32>, !torch.vtensor<[1,2,7,8],f32>, !torch.vtensor<[5,7],f32>) -> !torch.vtensor<[1,2,5,8],f32>
  return %0 : !torch.vtensor<[1,2,5,8],f32>
}

// ===== cuvil.norm =====

// -----

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>, %[[G:[a-z0-9]+]]: !torch.vtensor<[4],f32>, %[[B:[a-z0-9]+]]: !torch.vtensor<[4],f32>)
// CHECK-DAG:     %[[I4:.+]] = torch.constant.int 4
// CHECK-DAG:     %[[EPS:.+]] = torch.constant.float 1.000000e-05
// CHECK-DAG:     %[[FALSE:.+]] = torch.constant.bool false
// CHECK:         %[[SHAPE:[0-9]+]] = torch.prim.ListConstruct %[[I4]] : (!torch.int) -> !torch.list<int>
// CHECK:         %[[Y:[0-9]+]] = torch.aten.layer_norm %[[X]], %[[SHAPE]], %[[G]], %[[B]], %[[EPS]], %[[FALSE]] :
// CHECK-NEXT:    return %[[Y]]
// CHECK-NOT:     cuvil.
func.func @layer_norm(%x: !torch.vtensor<[2,5,4],f32>, %g: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,5,4],f32> {
  %0 = "cuvil.norm"(%x, %g, %b) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,5,4],f32>
  return %0 : !torch.vtensor<[2,5,4],f32>
}

// -----

// CHECK-LABEL: func.func @layer_norm_without_affine
// CHECK-DAG:     %[[NONE:.+]] = torch.constant.none
// CHECK-DAG:     %[[I5:.+]] = torch.constant.int 5
// CHECK-DAG:     %[[I4:.+]] = torch.constant.int 4
// CHECK:         %[[SHAPE:[0-9]+]] = torch.prim.ListConstruct %[[I5]], %[[I4]]
// CHECK:         torch.aten.layer_norm %{{.+}}, %[[SHAPE]], %[[NONE]], %[[NONE]],
// CHECK-NOT:     cuvil.
func.func @layer_norm_without_affine(%x: !torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,4],f32> {
  %0 = "cuvil.norm"(%x) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 5, 4>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,4],f32>
  return %0 : !torch.vtensor<[2,5,4],f32>
}

// -----

// rms: x * rsqrt(mean(x * x, trailing dims, keepdim) + eps) * weight.
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>, %[[G:[a-z0-9]+]]: !torch.vtensor<[4],f32>)
// CHECK-DAG:     %[[I1:.+]] = torch.constant.int 1
// CHECK-DAG:     %[[I2:.+]] = torch.constant.int 2
// CHECK-DAG:     %[[EPS:.+]] = torch.constant.float 9.9999999999999995E-7
// CHECK-DAG:     %[[TRUE:.+]] = torch.constant.bool true
// CHECK-DAG:     %[[NONE:.+]] = torch.constant.none
// CHECK:         %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %[[X]], %[[X]] : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[2,5,4],f32> -> !torch.vtensor<[2,5,4],f32>
// CHECK:         %[[DIMS:[0-9]+]] = torch.prim.ListConstruct %[[I2]] : (!torch.int) -> !torch.list<int>
// CHECK:         %[[MEAN:[0-9]+]] = torch.aten.mean.dim %[[SQ]], %[[DIMS]], %[[TRUE]], %[[NONE]] : {{.*}} -> !torch.vtensor<[2,5,1],f32>
// CHECK:         %[[SHIFT:[0-9]+]] = torch.aten.add.Scalar %[[MEAN]], %[[EPS]], %[[I1]] : {{.*}} -> !torch.vtensor<[2,5,1],f32>
// CHECK:         %[[INV:[0-9]+]] = torch.aten.rsqrt %[[SHIFT]] : !torch.vtensor<[2,5,1],f32> -> !torch.vtensor<[2,5,1],f32>
// CHECK:         %[[N:[0-9]+]] = torch.aten.mul.Tensor %[[X]], %[[INV]] : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[2,5,1],f32> -> !torch.vtensor<[2,5,4],f32>
// CHECK:         %[[Y:[0-9]+]] = torch.aten.mul.Tensor %[[N]], %[[G]] : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[2,5,4],f32>
// CHECK-NEXT:    return %[[Y]]
// CHECK-NOT:     cuvil.
func.func @rms_norm(%x: !torch.vtensor<[2,5,4],f32>, %g: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,5,4],f32> {
  %0 = "cuvil.norm"(%x, %g) {eps = 1.000000e-06 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,5,4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,5,4],f32>
  return %0 : !torch.vtensor<[2,5,4],f32>
}

// -----

// Without a weight the normalized value is the result; two trailing dims are reduced.
// CHECK-LABEL: func.func @rms_norm_without_weight
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f32>)
// CHECK-DAG:     %[[I1:.+]] = torch.constant.int 1
// CHECK-DAG:     %[[I2:.+]] = torch.constant.int 2
// CHECK:         %[[DIMS:[0-9]+]] = torch.prim.ListConstruct %[[I1]], %[[I2]] : (!torch.int, !torch.int) -> !torch.list<int>
// CHECK:         torch.aten.mean.dim %{{.+}}, %[[DIMS]], {{.*}} -> !torch.vtensor<[2,1,1],f32>
// CHECK:         torch.aten.rsqrt
// CHECK:         %[[Y:[0-9]+]] = torch.aten.mul.Tensor %[[X]], %{{.+}} : !torch.vtensor<[2,5,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[2,5,4],f32>
// CHECK-NEXT:    return %[[Y]]
// CHECK-NOT:     cuvil.
func.func @rms_norm_without_weight(%x: !torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,4],f32> {
  %0 = "cuvil.norm"(%x) {eps = 1.000000e-06 : f64, kind = "rms", normalized_shape = array<i64: 5, 4>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[2,5,4],f32>) -> !torch.vtensor<[2,5,4],f32>
  return %0 : !torch.vtensor<[2,5,4],f32>
}

// -----

// 16-bit norms reduce in f32 (as PyTorch's kernels): inputs converted up, the result back down.
// CHECK-LABEL: func.func @layer_norm_f16
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,5,4],f16>, %[[G:[a-z0-9]+]]: !torch.vtensor<[4],f16>, %[[B:[a-z0-9]+]]: !torch.vtensor<[4],f16>)
// CHECK-DAG:     %[[F32:.+]] = torch.constant.int 6
// CHECK-DAG:     %[[F16:.+]] = torch.constant.int 5
// CHECK:         %[[X32:[0-9]+]] = torch.prims.convert_element_type %[[X]], %[[F32]] : {{.*}} -> !torch.vtensor<[2,5,4],f32>
// CHECK:         %[[G32:[0-9]+]] = torch.prims.convert_element_type %[[G]], %[[F32]] : {{.*}} -> !torch.vtensor<[4],f32>
// CHECK:         %[[B32:[0-9]+]] = torch.prims.convert_element_type %[[B]], %[[F32]] : {{.*}} -> !torch.vtensor<[4],f32>
// CHECK:         %[[Y32:[0-9]+]] = torch.aten.layer_norm %[[X32]], %{{.+}}, %[[G32]], %[[B32]], {{.*}} -> !torch.vtensor<[2,5,4],f32>
// CHECK:         %[[Y:[0-9]+]] = torch.prims.convert_element_type %[[Y32]], %[[F16]] : {{.*}} -> !torch.vtensor<[2,5,4],f16>
// CHECK-NEXT:    return %[[Y]]
func.func @layer_norm_f16(%x: !torch.vtensor<[2,5,4],f16>, %g: !torch.vtensor<[4],f16>, %b: !torch.vtensor<[4],f16>) -> !torch.vtensor<[2,5,4],f16> {
  %0 = "cuvil.norm"(%x, %g, %b) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,5,4],f16>, !torch.vtensor<[4],f16>, !torch.vtensor<[4],f16>) -> !torch.vtensor<[2,5,4],f16>
  return %0 : !torch.vtensor<[2,5,4],f16>
}

// -----

// CHECK-LABEL: func.func @rms_norm_bf16
// CHECK:         torch.prims.convert_element_type {{.*}} -> !torch.vtensor<[2,5,4],f32>
// CHECK:         torch.aten.mean.dim {{.*}} -> !torch.vtensor<[2,5,1],f32>
// CHECK:         %[[Y:[0-9]+]] = torch.prims.convert_element_type {{.*}} -> !torch.vtensor<[2,5,4],bf16>
// CHECK-NEXT:    return %[[Y]]
func.func @rms_norm_bf16(%x: !torch.vtensor<[2,5,4],bf16>) -> !torch.vtensor<[2,5,4],bf16> {
  %0 = "cuvil.norm"(%x) {eps = 1.000000e-06 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>} : (!torch.vtensor<[2,5,4],bf16>) -> !torch.vtensor<[2,5,4],bf16>
  return %0 : !torch.vtensor<[2,5,4],bf16>
}

// -----

// Written-out f16 attention: its softmax in f32, the probabilities back in f16 for the second matmul.
// DECOMP-LABEL: func.func @attention_f16
// DECOMP:         %[[S32:[0-9]+]] = torch.prims.convert_element_type {{.*}} -> !torch.vtensor<[1,2,5,7],f32>
// DECOMP:         %[[P32:[0-9]+]] = torch.aten.softmax.int %[[S32]], {{.*}} -> !torch.vtensor<[1,2,5,7],f32>
// DECOMP:         torch.prims.convert_element_type %[[P32]], {{.*}} -> !torch.vtensor<[1,2,5,7],f16>
// DECOMP:         torch.aten.bmm {{.*}} -> !torch.vtensor<[2,5,8],f16>
func.func @attention_f16(%q: !torch.vtensor<[1,2,5,16],f16>, %k: !torch.vtensor<[1,2,7,16],f16>, %v: !torch.vtensor<[1,2,7,8],f16>) -> !torch.vtensor<[1,2,5,8],f16> {
  %0 = "cuvil.attention"(%q, %k, %v) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[1,2,5,16],f16>, !torch.vtensor<[1,2,7,16],f16>, !torch.vtensor<[1,2,7,8],f16>) -> !torch.vtensor<[1,2,5,8],f16>
  return %0 : !torch.vtensor<[1,2,5,8],f16>
}

// -----

// A single query (a decode step against a KV cache) is written out under attention=sdpa too: IREE
// folds the unit query dim and its attention op without M faulted on CUDA (lower_cuvil_to_torch._single_query).
// CHECK-LABEL: func.func @attention_single_query_static
// CHECK:         torch.aten.sum.dim_IntList
// CHECK:         torch.aten.where.ScalarOther
// CHECK:         torch.aten.softmax.int
// CHECK:         torch.aten.sum.dim_IntList
// CHECK-NOT:     scaled_dot_product_attention
// DECOMP-LABEL: func.func @attention_single_query_static
// DECOMP-NOT:     scaled_dot_product_attention
func.func @attention_single_query_static(%q: !torch.vtensor<[2,4,1,16],f32>, %k: !torch.vtensor<[2,4,64,16],f32>, %v: !torch.vtensor<[2,4,64,16],f32>, %m: !torch.vtensor<[2,1,1,64],i1>) -> !torch.vtensor<[2,4,1,16],f32> {
  %0 = "cuvil.attention"(%q, %k, %v, %m) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[2,4,1,16],f32>, !torch.vtensor<[2,4,64,16],f32>, !torch.vtensor<[2,4,64,16],f32>, !torch.vtensor<[2,1,1,64],i1>) -> !torch.vtensor<[2,4,1,16],f32>
  return %0 : !torch.vtensor<[2,4,1,16],f32>
}

// -----

// Grouped heads (q 8 heads, k 2): the sdpa op stays (the written-out form needs equal leading dims).
// CHECK-LABEL: func.func @attention_single_query_gqa
// CHECK:         torch.aten.scaled_dot_product_attention
func.func @attention_single_query_gqa(%q: !torch.vtensor<[1,8,1,16],f32>, %k: !torch.vtensor<[1,2,64,16],f32>, %v: !torch.vtensor<[1,2,64,16],f32>) -> !torch.vtensor<[1,8,1,16],f32> {
  %0 = "cuvil.attention"(%q, %k, %v) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 2.500000e-01 : f64} : (!torch.vtensor<[1,8,1,16],f32>, !torch.vtensor<[1,2,64,16],f32>, !torch.vtensor<[1,2,64,16],f32>) -> !torch.vtensor<[1,8,1,16],f32>
  return %0 : !torch.vtensor<[1,8,1,16],f32>
}
