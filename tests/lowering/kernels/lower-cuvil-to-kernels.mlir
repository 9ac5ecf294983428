// RUN: cuvil-opt %s -p lower-cuvil-to-kernels --split-input-file | FileCheck %s
// After lower-cuvil-to-torch the kernel functions hold the torch lowering (IREE's codegen, the
// fallback a target keeps where it has no kernel); no cuvil op is left anywhere:
// RUN: cuvil-opt %s -p lower-cuvil-to-kernels,lower-cuvil-to-torch,verify-no-cuvil --split-input-file | FileCheck %s --check-prefix=LOWERED

// A batched linear with bias and epilogue: the input is flattened to [M, K], the call computes
// [M, N], the result is viewed back. Two linears of the same spec share one function.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,64,768],f16>, %[[W1:[a-z0-9]+]]: !torch.vtensor<[3072,768],f16>, %[[B1:[a-z0-9]+]]: !torch.vtensor<[3072],f16>, %[[W2:[a-z0-9]+]]: !torch.vtensor<[3072,768],f16>
// CHECK:         %[[XF:[0-9]+]] = torch.aten.view %[[X]], %{{.+}} : !torch.vtensor<[2,64,768],f16>, !torch.list<int> -> !torch.vtensor<[128,768],f16>
// CHECK:         %[[YF:[0-9]+]] = call @cuvil_kernel_linear_128x3072x768_f16_gelu_tanh_bias(%[[XF]], %[[W1]], %[[B1]]) : (!torch.vtensor<[128,768],f16>, !torch.vtensor<[3072,768],f16>, !torch.vtensor<[3072],f16>) -> !torch.vtensor<[128,3072],f16>
// CHECK:         %[[Y:[0-9]+]] = torch.aten.view %[[YF]], %{{.+}} : !torch.vtensor<[128,3072],f16>, !torch.list<int> -> !torch.vtensor<[2,64,3072],f16>
// CHECK:         call @cuvil_kernel_linear_128x3072x768_f16_gelu_tanh_bias(%{{.+}}, %[[W2]], %[[B1]])
// CHECK-NOT:     cuvil.linear
// CHECK:       func.func private @cuvil_kernel_linear_128x3072x768_f16_gelu_tanh_bias(%{{.+}}: !torch.vtensor<[128,768],f16>, %{{.+}}: !torch.vtensor<[3072,768],f16>, %{{.+}}: !torch.vtensor<[3072],f16>) -> !torch.vtensor<[128,3072],f16>
// CHECK-SAME:    cuvil.kernel = "linear"
// CHECK-SAME:    cuvil.kernel_sites = ["", ""]
// CHECK-SAME:    cuvil.kernel_spec = {activation = "gelu_tanh", bias_dtype = "f16", dtype = "f16", has_bias = true, k = 768 : i64, m = 128 : i64, n = 3072 : i64}
// CHECK:         "cuvil.linear"(%arg0, %arg1, %arg2) {activation = "gelu_tanh"
// CHECK-NOT:   func.func private
// LOWERED-LABEL: func.func @mlp
// LOWERED:       func.func private @cuvil_kernel_linear_128x3072x768_f16_gelu_tanh_bias
// LOWERED:         torch.aten.linear
// LOWERED:         torch.aten.tanh
// LOWERED-NOT:   cuvil.linear
func.func @mlp(%x: !torch.vtensor<[2,64,768],f16>, %w1: !torch.vtensor<[3072,768],f16>, %b1: !torch.vtensor<[3072],f16>, %w2: !torch.vtensor<[3072,768],f16>) -> (!torch.vtensor<[2,64,3072],f16>, !torch.vtensor<[2,64,3072],f16>) {
  %0 = "cuvil.linear"(%x, %w1, %b1) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,64,768],f16>, !torch.vtensor<[3072,768],f16>, !torch.vtensor<[3072],f16>) -> !torch.vtensor<[2,64,3072],f16>
  %1 = "cuvil.linear"(%x, %w2, %b1) {activation = "gelu_tanh", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[2,64,768],f16>, !torch.vtensor<[3072,768],f16>, !torch.vtensor<[3072],f16>) -> !torch.vtensor<[2,64,3072],f16>
  return %0, %1 : !torch.vtensor<[2,64,3072],f16>, !torch.vtensor<[2,64,3072],f16>
}

// -----

// A residual connection after the linear (`r + linear(x)`, either order, through views): the
// kernel adds r in its epilogue, the call takes it flattened and replaces the add. The r is
// computed after the linear here, so the call goes where the add was.
// CHECK-LABEL: func.func @residual
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,64,768],f16>, %[[W:[a-z0-9]+]]: !torch.vtensor<[768,768],f16>, %[[H:[a-z0-9]+]]: !torch.vtensor<[2,64,768],f16>
// CHECK:         %[[R:[0-9]+]] = torch.aten.neg %[[H]]
// CHECK:         %[[RF:[0-9]+]] = torch.aten.view %[[R]], %{{.+}} -> !torch.vtensor<[128,768],f16>
// CHECK:         %[[YF:[0-9]+]] = call @cuvil_kernel_linear_128x768x768_f16_none_res(%{{.+}}, %[[W]], %[[RF]]) : (!torch.vtensor<[128,768],f16>, !torch.vtensor<[768,768],f16>, !torch.vtensor<[128,768],f16>) -> !torch.vtensor<[128,768],f16>
// CHECK:         %[[Y:[0-9]+]] = torch.aten.view %[[YF]], %{{.+}} -> !torch.vtensor<[2,64,768],f16>
// CHECK-NOT:     torch.aten.add.Tensor
// CHECK:         return %[[Y]]
// CHECK:       func.func private @cuvil_kernel_linear_128x768x768_f16_none_res(%{{.+}}: !torch.vtensor<[128,768],f16>, %{{.+}}: !torch.vtensor<[768,768],f16>, %[[RA:[a-z0-9]+]]: !torch.vtensor<[128,768],f16>)
// CHECK-SAME:    has_residual = true
// CHECK:         %[[L:[0-9]+]] = "cuvil.linear"
// CHECK:         torch.aten.add.Tensor %[[L]], %[[RA]]
// LOWERED-LABEL: func.func @residual
// LOWERED-NOT:   cuvil.linear
func.func @residual(%x: !torch.vtensor<[2,64,768],f16>, %w: !torch.vtensor<[768,768],f16>, %h: !torch.vtensor<[2,64,768],f16>) -> !torch.vtensor<[2,64,768],f16> {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,64,768],f16>, !torch.vtensor<[768,768],f16>) -> !torch.vtensor<[2,64,768],f16>
  %r = torch.aten.neg %h : !torch.vtensor<[2,64,768],f16> -> !torch.vtensor<[2,64,768],f16>
  %int1 = torch.constant.int 1
  %1 = torch.aten.add.Tensor %r, %0, %int1 : !torch.vtensor<[2,64,768],f16>, !torch.vtensor<[2,64,768],f16>, !torch.int -> !torch.vtensor<[2,64,768],f16>
  return %1 : !torch.vtensor<[2,64,768],f16>
}

// -----

// No residual epilogue where the add is not one: alpha 2, a broadcast r, a result used twice.
// CHECK-LABEL: func.func @not_residual
// CHECK:         call @cuvil_kernel_linear_128x768x768_f16_none(
// CHECK-NEXT:    torch.aten.add.Tensor
// CHECK-NEXT:    call @cuvil_kernel_linear_128x768x768_f16_none(
// CHECK-NEXT:    torch.aten.add.Tensor
// CHECK-NEXT:    call @cuvil_kernel_linear_128x768x768_f16_none(
// CHECK-NEXT:    torch.aten.add.Tensor
// CHECK-NOT:   _res
func.func @not_residual(%x: !torch.vtensor<[128,768],f16>, %w: !torch.vtensor<[768,768],f16>, %h: !torch.vtensor<[128,768],f16>, %b: !torch.vtensor<[768],f16>) -> (!torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>) {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[128,768],f16>, !torch.vtensor<[768,768],f16>) -> !torch.vtensor<[128,768],f16>
  %1 = torch.aten.add.Tensor %0, %h, %int2 : !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>, !torch.int -> !torch.vtensor<[128,768],f16>
  %2 = "cuvil.linear"(%h, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[128,768],f16>, !torch.vtensor<[768,768],f16>) -> !torch.vtensor<[128,768],f16>
  %3 = torch.aten.add.Tensor %2, %b, %int1 : !torch.vtensor<[128,768],f16>, !torch.vtensor<[768],f16>, !torch.int -> !torch.vtensor<[128,768],f16>
  %4 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[128,768],f16>, !torch.vtensor<[768,768],f16>) -> !torch.vtensor<[128,768],f16>
  %5 = torch.aten.add.Tensor %4, %h, %int1 : !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>, !torch.int -> !torch.vtensor<[128,768],f16>
  return %1, %3, %5, %4 : !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>, !torch.vtensor<[128,768],f16>
}

// -----

// Rank 2 needs no view; a gated linear computes [M, F] from W [2F, K]; bf16 is covered.
// CHECK-LABEL: func.func @gated_rank2
// CHECK-NOT:     torch.aten.view
// CHECK:         %[[Y:[0-9]+]] = call @cuvil_kernel_linear_16x2752x512_bf16_swiglu(%arg0, %arg1) : (!torch.vtensor<[16,512],bf16>, !torch.vtensor<[2752,512],bf16>) -> !torch.vtensor<[16,1376],bf16>
// CHECK-NEXT:    return %[[Y]]
// CHECK:       func.func private @cuvil_kernel_linear_16x2752x512_bf16_swiglu
// CHECK-SAME:    has_bias = false
func.func @gated_rank2(%x: !torch.vtensor<[16,512],bf16>, %w: !torch.vtensor<[2752,512],bf16>) -> !torch.vtensor<[16,1376],bf16> {
  %0 = "cuvil.linear"(%x, %w) {activation = "swiglu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[16,512],bf16>, !torch.vtensor<[2752,512],bf16>) -> !torch.vtensor<[16,1376],bf16>
  return %0 : !torch.vtensor<[16,1376],bf16>
}

// -----

// A single-token (rank 1) input is M = 1.
// CHECK-LABEL: func.func @decode_rank1
// CHECK:         torch.aten.view %arg0, %{{.+}} -> !torch.vtensor<[1,2048],f16>
// CHECK:         call @cuvil_kernel_linear_1x1024x2048_f16_silu
// CHECK:         torch.aten.view %{{.+}} -> !torch.vtensor<[1024],f16>
func.func @decode_rank1(%x: !torch.vtensor<[2048],f16>, %w: !torch.vtensor<[1024,2048],f16>) -> !torch.vtensor<[1024],f16> {
  %0 = "cuvil.linear"(%x, %w) {activation = "silu", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2048],f16>, !torch.vtensor<[1024,2048],f16>) -> !torch.vtensor<[1024],f16>
  return %0 : !torch.vtensor<[1024],f16>
}

// -----

// The widened form torch.export gives a 16-bit addmm (HF GPT-2's Conv1D): an f32 linear of upcast
// f16 x and W (through a permute) whose one use casts back to f16. The kernel computes exactly
// that (f16 products, fp32 accumulation and bias): the call takes the f16 x, W cast back (IREE
// folds the pair), the f32 bias, and replaces the truncation. The function's body is the
// original computation, casts included.
// CHECK-LABEL: func.func @widened_addmm
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[16,64],f16>
// CHECK:         %[[WT:[0-9]+]] = torch.aten.permute
// CHECK:         %[[W16:[0-9]+]] = torch.prims.convert_element_type %[[WT]], %{{.+}} : !torch.vtensor<[192,64],f32>, !torch.int -> !torch.vtensor<[192,64],f16>
// CHECK:         %[[Y:[0-9]+]] = call @cuvil_kernel_linear_16x192x64_f16_none_bias_f32(%[[X]], %[[W16]], %arg2) : (!torch.vtensor<[16,64],f16>, !torch.vtensor<[192,64],f16>, !torch.vtensor<[192],f32>) -> !torch.vtensor<[16,192],f16>
// CHECK-NEXT:    return %[[Y]]
// An f32 linear whose result stays f32 is not narrowed:
// CHECK-LABEL: func.func @f32_result_kept
// CHECK-NOT:     call
// CHECK:         "cuvil.linear"
// CHECK:       func.func private @cuvil_kernel_linear_16x192x64_f16_none_bias_f32
// CHECK-SAME:    bias_dtype = "f32", dtype = "f16"
// CHECK:         torch.prims.convert_element_type %arg0
// CHECK:         torch.prims.convert_element_type %arg1
// CHECK:         "cuvil.linear"(%{{.+}}, %{{.+}}, %arg2) {{.+}} -> !torch.vtensor<[16,192],f32>
// CHECK:         torch.prims.convert_element_type %{{.+}} -> !torch.vtensor<[16,192],f16>
func.func @widened_addmm(%x: !torch.vtensor<[16,64],f16>, %w: !torch.vtensor<[64,192],f16>, %b: !torch.vtensor<[192],f32>) -> !torch.vtensor<[16,192],f16> {
  %int5 = torch.constant.int 5
  %int6 = torch.constant.int 6
  %false = torch.constant.bool false
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %x32 = torch.aten.to.dtype %x, %int6, %false, %false, %none : !torch.vtensor<[16,64],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[16,64],f32>
  %w32 = torch.aten.to.dtype %w, %int6, %false, %false, %none : !torch.vtensor<[64,192],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[64,192],f32>
  %p = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %wt = torch.aten.permute %w32, %p : !torch.vtensor<[64,192],f32>, !torch.list<int> -> !torch.vtensor<[192,64],f32>
  %y = "cuvil.linear"(%x32, %wt, %b) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[16,64],f32>, !torch.vtensor<[192,64],f32>, !torch.vtensor<[192],f32>) -> !torch.vtensor<[16,192],f32>
  %y16 = torch.aten.to.dtype %y, %int5, %false, %false, %none : !torch.vtensor<[16,192],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[16,192],f16>
  return %y16 : !torch.vtensor<[16,192],f16>
}
func.func @f32_result_kept(%x: !torch.vtensor<[16,64],f16>, %w: !torch.vtensor<[192,64],f32>) -> !torch.vtensor<[16,192],f32> {
  %int6 = torch.constant.int 6
  %false = torch.constant.bool false
  %none = torch.constant.none
  %x32 = torch.aten.to.dtype %x, %int6, %false, %false, %none : !torch.vtensor<[16,64],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[16,64],f32>
  %y = "cuvil.linear"(%x32, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[16,64],f32>, !torch.vtensor<[192,64],f32>) -> !torch.vtensor<[16,192],f32>
  return %y : !torch.vtensor<[16,192],f32>
}

// -----

// Outside the contract the op stays for lower-cuvil-to-torch (IREE's codegen): f32, K or out
// features not a multiple of 8 (TMA rows must be 16-byte aligned), dynamic shapes, a bias of
// another dtype.
// CHECK-LABEL: func.func @kept
// CHECK-NOT:     call
// CHECK-COUNT-5: "cuvil.linear"
// CHECK-NOT:     call
// CHECK-NOT:   func.func private
func.func @kept(%x32: !torch.vtensor<[8,64],f32>, %w32: !torch.vtensor<[64,64],f32>, %xk: !torch.vtensor<[8,770],f16>, %wk: !torch.vtensor<[64,770],f16>,
                %x: !torch.vtensor<[8,64],f16>, %wn: !torch.vtensor<[13,64],f16>, %xd: !torch.vtensor<[?,64],f16>, %w: !torch.vtensor<[64,64],f16>,
                %b32: !torch.vtensor<[64],f32>) -> (!torch.vtensor<[8,64],f32>, !torch.vtensor<[8,64],f16>, !torch.vtensor<[8,13],f16>, !torch.vtensor<[?,64],f16>, !torch.vtensor<[8,64],f16>) {
  %0 = "cuvil.linear"(%x32, %w32) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[8,64],f32>, !torch.vtensor<[64,64],f32>) -> !torch.vtensor<[8,64],f32>
  %1 = "cuvil.linear"(%xk, %wk) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[8,770],f16>, !torch.vtensor<[64,770],f16>) -> !torch.vtensor<[8,64],f16>
  %2 = "cuvil.linear"(%x, %wn) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[8,64],f16>, !torch.vtensor<[13,64],f16>) -> !torch.vtensor<[8,13],f16>
  %3 = "cuvil.linear"(%xd, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[?,64],f16>, !torch.vtensor<[64,64],f16>) -> !torch.vtensor<[?,64],f16>
  %4 = "cuvil.linear"(%x, %w, %b32) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 1>} : (!torch.vtensor<[8,64],f16>, !torch.vtensor<[64,64],f16>, !torch.vtensor<[64],f32>) -> !torch.vtensor<[8,64],f16>
  return %0, %1, %2, %3, %4 : !torch.vtensor<[8,64],f32>, !torch.vtensor<[8,64],f16>, !torch.vtensor<[8,13],f16>, !torch.vtensor<[?,64],f16>, !torch.vtensor<[8,64],f16>
}

// -----

// Attention: causal MHA and a grouped-query decode step (1 query, 8 kv heads for 32 q heads)
// become calls on the op's own [B, H, T, D] operands (no views); one function per shape,
// dtype, causal and scale, whose body is the op; the spec says "attention" and carries the
// scale exactly (as a string).
// CHECK-LABEL: func.func @attention
// CHECK:         %[[O:[0-9]+]] = call @cuvil_kernel_attention_2x12x12x100x100x64_f16_causal_s0p125(%arg0, %arg0, %arg0) : (!torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[2,12,100,64],f16>) -> !torch.vtensor<[2,12,100,64],f16>
// CHECK:         %[[D:[0-9]+]] = call @cuvil_kernel_attention_1x32x8x1x2047x128_bf16_s0p08838834764831845(%arg1, %arg2, %arg2)
// CHECK:         call @cuvil_kernel_attention_2x12x12x100x100x64_f16_causal_s0p125(%[[O]], %arg0, %arg0)
// CHECK-NOT:     "cuvil.attention"
// CHECK:       func.func private @cuvil_kernel_attention_2x12x12x100x100x64_f16_causal_s0p125(%{{.+}}: !torch.vtensor<[2,12,100,64],f16>, %{{.+}}: !torch.vtensor<[2,12,100,64],f16>, %{{.+}}: !torch.vtensor<[2,12,100,64],f16>) -> !torch.vtensor<[2,12,100,64],f16>
// CHECK-SAME:    cuvil.kernel = "attention"
// CHECK-SAME:    cuvil.kernel_sites = ["", ""]
// CHECK-SAME:    cuvil.kernel_spec = {batch = 2 : i64, causal = true, d = 64 : i64, dtype = "f16", heads = 12 : i64, kv_heads = 12 : i64, op = "attention", scale = "0.125", tkv = 100 : i64, tq = 100 : i64}
// CHECK:         "cuvil.attention"(%arg0, %arg1, %arg2) {is_causal = true
// CHECK:       func.func private @cuvil_kernel_attention_1x32x8x1x2047x128_bf16_s0p08838834764831845
// CHECK-SAME:    cuvil.kernel_spec = {batch = 1 : i64, causal = false, d = 128 : i64, dtype = "bf16", heads = 32 : i64, kv_heads = 8 : i64, op = "attention", scale = "0.08838834764831845", tkv = 2047 : i64, tq = 1 : i64}
// LOWERED-LABEL: func.func @attention
// LOWERED:       func.func private @cuvil_kernel_attention_2x12x12x100x100x64_f16_causal_s0p125
// LOWERED:         torch.aten.scaled_dot_product_attention
// LOWERED-NOT:   cuvil.attention
func.func @attention(%x: !torch.vtensor<[2,12,100,64],f16>, %q: !torch.vtensor<[1,32,1,128],bf16>, %kv: !torch.vtensor<[1,8,2047,128],bf16>) -> (!torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[1,32,1,128],bf16>) {
  %0 = "cuvil.attention"(%x, %x, %x) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[2,12,100,64],f16>) -> !torch.vtensor<[2,12,100,64],f16>
  %1 = "cuvil.attention"(%q, %kv, %kv) {is_causal = false, scale = 0.08838834764831845 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[1,32,1,128],bf16>, !torch.vtensor<[1,8,2047,128],bf16>, !torch.vtensor<[1,8,2047,128],bf16>) -> !torch.vtensor<[1,32,1,128],bf16>
  %2 = "cuvil.attention"(%0, %x, %x) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[2,12,100,64],f16>) -> !torch.vtensor<[2,12,100,64],f16>
  return %2, %1 : !torch.vtensor<[2,12,100,64],f16>, !torch.vtensor<[1,32,1,128],bf16>
}

// -----

// Attention outside the kernel's contract stays for lower-cuvil-to-torch: an explicit mask,
// dynamic shapes, head dim 80, f32, rank 3, kv heads not dividing q heads.
// CHECK-LABEL: func.func @attention_kept
// CHECK-NOT:     call
// CHECK-COUNT-6: "cuvil.attention"
// CHECK-NOT:     call
// CHECK-NOT:   func.func private
func.func @attention_kept(%x: !torch.vtensor<[1,4,16,64],f16>, %m: !torch.vtensor<[1,1,16,16],i1>, %xd: !torch.vtensor<[1,4,?,64],f16>, %x80: !torch.vtensor<[1,4,16,80],f16>,
                          %x32: !torch.vtensor<[1,4,16,64],f32>, %x3: !torch.vtensor<[4,16,64],f16>, %k3: !torch.vtensor<[1,3,16,64],f16>)
    -> (!torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,4,?,64],f16>, !torch.vtensor<[1,4,16,80],f16>, !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[4,16,64],f16>, !torch.vtensor<[1,4,16,64],f16>) {
  %0 = "cuvil.attention"(%x, %x, %x, %m) {is_causal = false, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,1,16,16],i1>) -> !torch.vtensor<[1,4,16,64],f16>
  %1 = "cuvil.attention"(%xd, %xd, %xd) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[1,4,?,64],f16>, !torch.vtensor<[1,4,?,64],f16>, !torch.vtensor<[1,4,?,64],f16>) -> !torch.vtensor<[1,4,?,64],f16>
  %2 = "cuvil.attention"(%x80, %x80, %x80) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[1,4,16,80],f16>, !torch.vtensor<[1,4,16,80],f16>, !torch.vtensor<[1,4,16,80],f16>) -> !torch.vtensor<[1,4,16,80],f16>
  %3 = "cuvil.attention"(%x32, %x32, %x32) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[1,4,16,64],f32>) -> !torch.vtensor<[1,4,16,64],f32>
  %4 = "cuvil.attention"(%x3, %x3, %x3) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[4,16,64],f16>, !torch.vtensor<[4,16,64],f16>, !torch.vtensor<[4,16,64],f16>) -> !torch.vtensor<[4,16,64],f16>
  %5 = "cuvil.attention"(%x, %k3, %k3) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,3,16,64],f16>, !torch.vtensor<[1,3,16,64],f16>) -> !torch.vtensor<[1,4,16,64],f16>
  return %0, %1, %2, %3, %4, %5 : !torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,4,?,64],f16>, !torch.vtensor<[1,4,16,80],f16>, !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[4,16,64],f16>, !torch.vtensor<[1,4,16,64],f16>
}

// -----

// Attention as a transformer block writes it: q, k and v cut from one fused QKV projection
// ([B, T, N] slices, viewed to heads and transposed), k/v repeated to the q heads (HF's
// repeat_kv), the result transposed back to [B, T, H, D]. The call takes the fused tensor
// itself (layouts: offset and strides in elements), reads each kv head once and writes
// [B, T, H, D] in place of the transpose back; the body rebuilds the views around the op.
// CHECK-LABEL: func.func @strided
// CHECK:         %[[O:[0-9]+]] = call @cuvil_kernel_attention_2x4x2x16x16x64_f16_causal_s0p125_l{{[0-9a-f]+}}(%arg0, %arg0, %arg0) : (!torch.vtensor<[2,16,512],f16>, !torch.vtensor<[2,16,512],f16>, !torch.vtensor<[2,16,512],f16>) -> !torch.vtensor<[2,16,4,64],f16>
// CHECK:         torch.aten.view %[[O]], %{{.+}} -> !torch.vtensor<[2,16,256],f16>
// CHECK:       func.func private @cuvil_kernel_attention_2x4x2x16x16x64_f16_causal_s0p125_l
// CHECK-SAME:    k_layout = "2x16x512:256:8192:64:512", kv_heads = 2 : i64, o_layout = "2x16x4x64:0:4096:64:256"
// CHECK-SAME:    q_layout = "2x16x512:0:8192:64:512"
// CHECK-SAME:    v_layout = "2x16x512:384:8192:64:512"
// CHECK-COUNT-3: torch.aten.slice.Tensor %arg
// CHECK:         torch.aten.broadcast_to
// CHECK:         "cuvil.attention"
// CHECK:         torch.aten.transpose.int
// LOWERED-LABEL: func.func @strided
// LOWERED:       func.func private @cuvil_kernel_attention_2x4x2x16x16x64_f16_causal_s0p125_l
// LOWERED:         torch.aten.scaled_dot_product_attention
func.func @strided(%y: !torch.vtensor<[2,16,512],f16>) -> !torch.vtensor<[2,16,256],f16> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %int16 = torch.constant.int 16
  %int64 = torch.constant.int 64
  %int256 = torch.constant.int 256
  %int384 = torch.constant.int 384
  %int512 = torch.constant.int 512
  %qs = torch.aten.slice.Tensor %y, %int2, %int0, %int256, %int1 : !torch.vtensor<[2,16,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,16,256],f16>
  %ks = torch.aten.slice.Tensor %y, %int2, %int256, %int384, %int1 : !torch.vtensor<[2,16,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,16,128],f16>
  %vs = torch.aten.slice.Tensor %y, %int2, %int384, %int512, %int1 : !torch.vtensor<[2,16,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,16,128],f16>
  %lq = torch.prim.ListConstruct %int2, %int16, %int4, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %lkv = torch.prim.ListConstruct %int2, %int16, %int2, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %perm = torch.prim.ListConstruct %int0, %int2, %int1, %int3 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %q4 = torch.aten.view %qs, %lq : !torch.vtensor<[2,16,256],f16>, !torch.list<int> -> !torch.vtensor<[2,16,4,64],f16>
  %q = torch.aten.permute %q4, %perm : !torch.vtensor<[2,16,4,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,16,64],f16>
  %k4 = torch.aten.view %ks, %lkv : !torch.vtensor<[2,16,128],f16>, !torch.list<int> -> !torch.vtensor<[2,16,2,64],f16>
  %k = torch.aten.transpose.int %k4, %int1, %int2 : !torch.vtensor<[2,16,2,64],f16>, !torch.int, !torch.int -> !torch.vtensor<[2,2,16,64],f16>
  %v4 = torch.aten.view %vs, %lkv : !torch.vtensor<[2,16,128],f16>, !torch.list<int> -> !torch.vtensor<[2,16,2,64],f16>
  %v = torch.aten.transpose.int %v4, %int1, %int2 : !torch.vtensor<[2,16,2,64],f16>, !torch.int, !torch.int -> !torch.vtensor<[2,2,16,64],f16>
  %l5 = torch.prim.ListConstruct %int2, %int2, %int2, %int16, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %l4 = torch.prim.ListConstruct %int2, %int4, %int16, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %ku = torch.aten.unsqueeze %k, %int2 : !torch.vtensor<[2,2,16,64],f16>, !torch.int -> !torch.vtensor<[2,2,1,16,64],f16>
  %kb = torch.aten.broadcast_to %ku, %l5 : !torch.vtensor<[2,2,1,16,64],f16>, !torch.list<int> -> !torch.vtensor<[2,2,2,16,64],f16>
  %kr = torch.aten.view %kb, %l4 : !torch.vtensor<[2,2,2,16,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,16,64],f16>
  %vu = torch.aten.unsqueeze %v, %int2 : !torch.vtensor<[2,2,16,64],f16>, !torch.int -> !torch.vtensor<[2,2,1,16,64],f16>
  %vb = torch.aten.broadcast_to %vu, %l5 : !torch.vtensor<[2,2,1,16,64],f16>, !torch.list<int> -> !torch.vtensor<[2,2,2,16,64],f16>
  %vr = torch.aten.view %vb, %l4 : !torch.vtensor<[2,2,2,16,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,16,64],f16>
  %o = "cuvil.attention"(%q, %kr, %vr) {is_causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!torch.vtensor<[2,4,16,64],f16>, !torch.vtensor<[2,4,16,64],f16>, !torch.vtensor<[2,4,16,64],f16>) -> !torch.vtensor<[2,4,16,64],f16>
  %ov = torch.aten.view %o, %l4 : !torch.vtensor<[2,4,16,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,16,64],f16>
  %ot = torch.aten.transpose.int %ov, %int1, %int2 : !torch.vtensor<[2,4,16,64],f16>, !torch.int, !torch.int -> !torch.vtensor<[2,16,4,64],f16>
  %l3 = torch.prim.ListConstruct %int2, %int16, %int256 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %out = torch.aten.view %ot, %l3 : !torch.vtensor<[2,16,4,64],f16>, !torch.list<int> -> !torch.vtensor<[2,16,256],f16>
  return %out : !torch.vtensor<[2,16,256],f16>
}

// -----

// Heads cut from a kernel's output (q and k of a fused projection on their way to RoPE) are
// sliced after the view, on the heads dim, where IREE fuses the slice into the consumer. Not
// where the source is no kernel call, or the offset does not fall on a head.
// CHECK-LABEL: func.func @slice_by_heads
// CHECK:         %[[Y:[0-9]+]] = call @cuvil_kernel_linear_64x512x256_f16_none(
// CHECK:         %[[YV:[0-9]+]] = torch.aten.view %[[Y]], %{{.+}} -> !torch.vtensor<[2,32,512],f16>
// CHECK:         %[[H:[0-9]+]] = torch.aten.view %[[YV]], %{{.+}} -> !torch.vtensor<[2,32,8,64],f16>
// CHECK:         %[[Q:[0-9]+]] = torch.aten.slice.Tensor %[[H]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : !torch.vtensor<[2,32,8,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,32,4,64],f16>
// CHECK:         torch.aten.slice.Tensor %[[YV]], %{{.+}} -> !torch.vtensor<[2,32,256],f16>
// CHECK:         torch.aten.slice.Tensor %arg2, %{{.+}} -> !torch.vtensor<[2,32,256],f16>
// CHECK:         return %[[Q]]
func.func @slice_by_heads(%x: !torch.vtensor<[2,32,256],f16>, %w: !torch.vtensor<[512,256],f16>, %z: !torch.vtensor<[2,32,512],f16>) -> (!torch.vtensor<[2,32,4,64],f16>, !torch.vtensor<[2,32,4,64],f16>, !torch.vtensor<[2,32,4,64],f16>) {
  %0 = "cuvil.linear"(%x, %w) {activation = "none", operandSegmentSizes = array<i32: 1, 1, 0>} : (!torch.vtensor<[2,32,256],f16>, !torch.vtensor<[512,256],f16>) -> !torch.vtensor<[2,32,512],f16>
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int32 = torch.constant.int 32
  %int64 = torch.constant.int 64
  %int256 = torch.constant.int 256
  %int288 = torch.constant.int 288
  %heads = torch.prim.ListConstruct %int2, %int32, %int4, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.slice.Tensor %0, %int-1, %int0, %int256, %int1 : !torch.vtensor<[2,32,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,32,256],f16>
  %2 = torch.aten.view %1, %heads : !torch.vtensor<[2,32,256],f16>, !torch.list<int> -> !torch.vtensor<[2,32,4,64],f16>
  %3 = torch.aten.slice.Tensor %0, %int-1, %int32, %int288, %int1 : !torch.vtensor<[2,32,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,32,256],f16>
  %4 = torch.aten.view %3, %heads : !torch.vtensor<[2,32,256],f16>, !torch.list<int> -> !torch.vtensor<[2,32,4,64],f16>
  %5 = torch.aten.slice.Tensor %z, %int-1, %int0, %int256, %int1 : !torch.vtensor<[2,32,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,32,256],f16>
  %6 = torch.aten.view %5, %heads : !torch.vtensor<[2,32,256],f16>, !torch.list<int> -> !torch.vtensor<[2,32,4,64],f16>
  return %2, %4, %6 : !torch.vtensor<[2,32,4,64],f16>, !torch.vtensor<[2,32,4,64],f16>, !torch.vtensor<[2,32,4,64],f16>
}

// -----

// Attention over the filled prefix of a KV cache (a 3-token chunk at position P of a 32-slot
// cache, grouped kv heads, the causal-offset mask HF's masking utilities build from P): one call
// of the prefix kernel with the whole caches and P. Its body clones the slices, repeat_kv and
// the mask, so IREE's codegen computes the same where there is no kernel.
// CHECK-LABEL: func.func @prefix
// CHECK:         %[[O:[0-9]+]] = call @cuvil_kernel_attention_2x4x2x3x32x64_f16_prefix_s0p125(%arg0, %arg1, %arg2, %arg3) : (!torch.vtensor<[2,4,3,64],f16>, !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[2,4,3,64],f16>
// CHECK:         return %[[O]]
// CHECK:       func.func private @cuvil_kernel_attention_2x4x2x3x32x64_f16_prefix_s0p125
// CHECK-SAME:    kv_heads = 2 : i64
// CHECK-SAME:    prefix = true
// CHECK-SAME:    tkv = 32 : i64, tq = 3 : i64
// CHECK:         torch.aten.Int.Tensor %arg3
// CHECK:         torch.aten.slice.Tensor %arg1
// CHECK:         torch.aten.slice.Tensor %arg2
// CHECK:         torch.aten.le.Tensor
// CHECK:         "cuvil.attention"
// LOWERED-LABEL: func.func @prefix
// LOWERED:       func.func private @cuvil_kernel_attention_2x4x2x3x32x64_f16_prefix_s0p125
// LOWERED-NOT:   cuvil.attention
func.func @prefix(%q: !torch.vtensor<[2,4,3,64],f16>, %kc: !torch.vtensor<[2,2,32,64],f16>, %vc: !torch.vtensor<[2,2,32,64],f16>, %pos: !torch.vtensor<[1],si64>) -> !torch.vtensor<[2,4,3,64],f16> {
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %int64 = torch.constant.int 64
  %false = torch.constant.bool false
  %cpu = torch.constant.device "cpu"
  %p = torch.aten.Int.Tensor %pos : !torch.vtensor<[1],si64> -> !torch.int
  %end = torch.aten.add.int %p, %int3 : !torch.int, !torch.int -> !torch.int
  %steps = torch.aten.arange.start_step %int0, %int3, %int1, %int4, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.int, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[3],si64>
  %qpos = torch.aten.add.Tensor %pos, %steps, %int1 : !torch.vtensor<[1],si64>, !torch.vtensor<[3],si64>, !torch.int -> !torch.vtensor<[3],si64>
  %keys = torch.aten.arange.start_step %int0, %end, %int1, %int4, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.int, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  %k2 = torch.aten.unsqueeze %keys, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %q2 = torch.aten.unsqueeze %qpos, %int1 : !torch.vtensor<[3],si64>, !torch.int -> !torch.vtensor<[3,1],si64>
  %le = torch.aten.le.Tensor %k2, %q2 : !torch.vtensor<[1,?],si64>, !torch.vtensor<[3,1],si64> -> !torch.vtensor<[3,?],i1>
  %m3 = torch.aten.unsqueeze %le, %int0 : !torch.vtensor<[3,?],i1>, !torch.int -> !torch.vtensor<[1,3,?],i1>
  %m4 = torch.aten.unsqueeze %m3, %int1 : !torch.vtensor<[1,3,?],i1>, !torch.int -> !torch.vtensor<[1,1,3,?],i1>
  %ml = torch.prim.ListConstruct %int2, %int1, %int3, %end : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %mask = torch.aten.broadcast_to %m4, %ml : !torch.vtensor<[1,1,3,?],i1>, !torch.list<int> -> !torch.vtensor<[2,1,3,?],i1>
  %ks = torch.aten.slice.Tensor %kc, %int2, %none, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.int, !torch.none, !torch.int, !torch.int -> !torch.vtensor<[2,2,?,64],f16>
  %vs = torch.aten.slice.Tensor %vc, %int2, %none, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.int, !torch.none, !torch.int, !torch.int -> !torch.vtensor<[2,2,?,64],f16>
  %l5 = torch.prim.ListConstruct %int2, %int2, %int2, %end, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %l4 = torch.prim.ListConstruct %int2, %int4, %end, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %ku = torch.aten.unsqueeze %ks, %int2 : !torch.vtensor<[2,2,?,64],f16>, !torch.int -> !torch.vtensor<[2,2,1,?,64],f16>
  %kb = torch.aten.broadcast_to %ku, %l5 : !torch.vtensor<[2,2,1,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,2,2,?,64],f16>
  %kr = torch.aten.view %kb, %l4 : !torch.vtensor<[2,2,2,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,?,64],f16>
  %vu = torch.aten.unsqueeze %vs, %int2 : !torch.vtensor<[2,2,?,64],f16>, !torch.int -> !torch.vtensor<[2,2,1,?,64],f16>
  %vb = torch.aten.broadcast_to %vu, %l5 : !torch.vtensor<[2,2,1,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,2,2,?,64],f16>
  %vr = torch.aten.view %vb, %l4 : !torch.vtensor<[2,2,2,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,?,64],f16>
  %o = "cuvil.attention"(%q, %kr, %vr, %mask) {is_causal = false, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!torch.vtensor<[2,4,3,64],f16>, !torch.vtensor<[2,4,?,64],f16>, !torch.vtensor<[2,4,?,64],f16>, !torch.vtensor<[2,1,3,?],i1>) -> !torch.vtensor<[2,4,3,64],f16>
  return %o : !torch.vtensor<[2,4,3,64],f16>
}

// -----

// The same chain with a strict mask (key < position: a query does not see its own key) is not the
// causal-offset form the prefix kernel computes: the op stays for IREE's codegen.
// CHECK-LABEL: func.func @prefix_strict_mask
// CHECK-NOT:     call @cuvil_kernel
// CHECK:         "cuvil.attention"
// LOWERED-LABEL: func.func @prefix_strict_mask
// LOWERED-NOT:   cuvil_kernel_attention
func.func @prefix_strict_mask(%q: !torch.vtensor<[2,4,3,64],f16>, %kc: !torch.vtensor<[2,2,32,64],f16>, %vc: !torch.vtensor<[2,2,32,64],f16>, %pos: !torch.vtensor<[1],si64>) -> !torch.vtensor<[2,4,3,64],f16> {
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %int64 = torch.constant.int 64
  %false = torch.constant.bool false
  %cpu = torch.constant.device "cpu"
  %p = torch.aten.Int.Tensor %pos : !torch.vtensor<[1],si64> -> !torch.int
  %end = torch.aten.add.int %p, %int3 : !torch.int, !torch.int -> !torch.int
  %steps = torch.aten.arange.start_step %int0, %int3, %int1, %int4, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.int, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[3],si64>
  %qpos = torch.aten.add.Tensor %pos, %steps, %int1 : !torch.vtensor<[1],si64>, !torch.vtensor<[3],si64>, !torch.int -> !torch.vtensor<[3],si64>
  %keys = torch.aten.arange.start_step %int0, %end, %int1, %int4, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.int, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  %k2 = torch.aten.unsqueeze %keys, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %q2 = torch.aten.unsqueeze %qpos, %int1 : !torch.vtensor<[3],si64>, !torch.int -> !torch.vtensor<[3,1],si64>
  %lt = torch.aten.lt.Tensor %k2, %q2 : !torch.vtensor<[1,?],si64>, !torch.vtensor<[3,1],si64> -> !torch.vtensor<[3,?],i1>
  %m3 = torch.aten.unsqueeze %lt, %int0 : !torch.vtensor<[3,?],i1>, !torch.int -> !torch.vtensor<[1,3,?],i1>
  %m4 = torch.aten.unsqueeze %m3, %int1 : !torch.vtensor<[1,3,?],i1>, !torch.int -> !torch.vtensor<[1,1,3,?],i1>
  %ml = torch.prim.ListConstruct %int2, %int1, %int3, %end : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %mask = torch.aten.broadcast_to %m4, %ml : !torch.vtensor<[1,1,3,?],i1>, !torch.list<int> -> !torch.vtensor<[2,1,3,?],i1>
  %ks = torch.aten.slice.Tensor %kc, %int2, %none, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.int, !torch.none, !torch.int, !torch.int -> !torch.vtensor<[2,2,?,64],f16>
  %vs = torch.aten.slice.Tensor %vc, %int2, %none, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.int, !torch.none, !torch.int, !torch.int -> !torch.vtensor<[2,2,?,64],f16>
  %l5 = torch.prim.ListConstruct %int2, %int2, %int2, %end, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %l4 = torch.prim.ListConstruct %int2, %int4, %end, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %ku = torch.aten.unsqueeze %ks, %int2 : !torch.vtensor<[2,2,?,64],f16>, !torch.int -> !torch.vtensor<[2,2,1,?,64],f16>
  %kb = torch.aten.broadcast_to %ku, %l5 : !torch.vtensor<[2,2,1,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,2,2,?,64],f16>
  %kr = torch.aten.view %kb, %l4 : !torch.vtensor<[2,2,2,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,?,64],f16>
  %vu = torch.aten.unsqueeze %vs, %int2 : !torch.vtensor<[2,2,?,64],f16>, !torch.int -> !torch.vtensor<[2,2,1,?,64],f16>
  %vb = torch.aten.broadcast_to %vu, %l5 : !torch.vtensor<[2,2,1,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,2,2,?,64],f16>
  %vr = torch.aten.view %vb, %l4 : !torch.vtensor<[2,2,2,?,64],f16>, !torch.list<int> -> !torch.vtensor<[2,4,?,64],f16>
  %o = "cuvil.attention"(%q, %kr, %vr, %mask) {is_causal = false, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!torch.vtensor<[2,4,3,64],f16>, !torch.vtensor<[2,4,?,64],f16>, !torch.vtensor<[2,4,?,64],f16>, !torch.vtensor<[2,1,3,?],i1>) -> !torch.vtensor<[2,4,3,64],f16>
  return %o : !torch.vtensor<[2,4,3,64],f16>
}

// -----

// A KV-cache write at a position the device holds (compile_causal_lm's Cache.update): the
// slice_scatter goes to the cache-write kernel function, which takes the position tensor; the
// range asserts torch.export left on int(P) are the only host reads left, so they go too.
// CHECK-LABEL: func.func @cache_write
// CHECK-NOT:     torch.aten.Int.Tensor
// CHECK-NOT:     torch.runtime.assert
// CHECK:         %[[K:[0-9]+]] = call @cuvil_kernel_cache_write_2x2x32x64_d2_t1_f16(%arg0, %arg2, %arg4) : (!torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,1,64],f16>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[2,2,32,64],f16>
// CHECK:         %[[V:[0-9]+]] = call @cuvil_kernel_cache_write_2x2x32x64_d2_t1_f16(%arg1, %arg3, %arg4)
// CHECK:         return %[[K]], %[[V]]
// CHECK:       func.func private @cuvil_kernel_cache_write_2x2x32x64_d2_t1_f16
// CHECK-SAME:    cuvil.kernel = "cache_write"
// CHECK-SAME:    dim = 2 : i64, dst_shape = "2x2x32x64", dtype = "f16", inner = 64 : i64, offset = 0 : i64, op = "cache_write", outer = 4 : i64, rows = 1 : i64, slots = 32 : i64, src_shape = "2x2x1x64"
// CHECK:         %[[S:[0-9]+]] = torch.aten.Int.Tensor %arg2
// CHECK:         %[[E:[0-9]+]] = torch.aten.add.int %[[S]], %int1
// CHECK:         torch.aten.slice_scatter %arg0, %arg1, %int2, %[[S]], %[[E]], %int1
// LOWERED-LABEL: func.func @cache_write
// LOWERED:       func.func private @cuvil_kernel_cache_write_2x2x32x64_d2_t1_f16
// LOWERED:         torch.aten.slice_scatter
func.func @cache_write(%kc: !torch.vtensor<[2,2,32,64],f16>, %vc: !torch.vtensor<[2,2,32,64],f16>, %k: !torch.vtensor<[2,2,1,64],f16>, %v: !torch.vtensor<[2,2,1,64],f16>, %pos: !torch.vtensor<[1],si64>) -> (!torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,32,64],f16>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int31 = torch.constant.int 31
  %p = torch.aten.Int.Tensor %pos : !torch.vtensor<[1],si64> -> !torch.int
  %ge = torch.aten.ge.int %p, %int0 : !torch.int, !torch.int -> !torch.bool
  %gei = torch.aten.Int.bool %ge : !torch.bool -> !torch.int
  %geb = torch.aten.Bool.int %gei : !torch.int -> !torch.bool
  torch.runtime.assert %geb, "Runtime assertion failed for expression u0 >= 0"
  %le = torch.aten.le.int %p, %int31 : !torch.int, !torch.int -> !torch.bool
  torch.runtime.assert %le, "Runtime assertion failed for expression u0 <= 31"
  %end = torch.aten.add.int %p, %int1 : !torch.int, !torch.int -> !torch.int
  %dead = torch.aten.slice.Tensor %kc, %int2, %p, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,1,64],f16>
  %kw = torch.aten.slice_scatter %kc, %k, %int2, %p, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,1,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,32,64],f16>
  %vw = torch.aten.slice_scatter %vc, %v, %int2, %p, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,1,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,32,64],f16>
  return %kw, %vw : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,32,64],f16>
}

// -----

// Kept as the program had it: int(P) has a use that needs it on the host (a dynamic slice), so
// the asserts stay; a write at a constant offset is IREE's (nothing to read back); a write whose
// end is not start + the rows written is not a cache write.
// CHECK-LABEL: func.func @cache_write_kept
// CHECK:         torch.aten.Int.Tensor %arg3
// CHECK:         torch.runtime.assert
// CHECK:         call @cuvil_kernel_cache_write_2x2x32x64_d2_t4_f16_o1(%arg0, %arg1, %arg3)
// CHECK:         torch.aten.slice.Tensor %arg0, %int2, %int0, %[[END:[0-9]+]]
// CHECK:         torch.aten.slice_scatter %arg0, %arg1, %int2, %int0, %int4, %int1
// CHECK:         torch.aten.slice_scatter %arg0, %arg2, %int2, %{{[0-9]+}}, %[[END]], %int1
// CHECK:       func.func private @cuvil_kernel_cache_write_2x2x32x64_d2_t4_f16_o1
// CHECK-SAME:    offset = 1 : i64
// CHECK:         torch.aten.add.int %{{[0-9]+}}, %int1
func.func @cache_write_kept(%kc: !torch.vtensor<[2,2,32,64],f16>, %k: !torch.vtensor<[2,2,4,64],f16>, %k2: !torch.vtensor<[2,2,3,64],f16>, %pos: !torch.vtensor<[1],si64>) -> (!torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,?,64],f16>, !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,32,64],f16>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int5 = torch.constant.int 5
  %p = torch.aten.Int.Tensor %pos : !torch.vtensor<[1],si64> -> !torch.int
  %ge = torch.aten.ge.int %p, %int0 : !torch.int, !torch.int -> !torch.bool
  torch.runtime.assert %ge, "Runtime assertion failed for expression u0 >= 0"
  %start = torch.aten.add.int %p, %int1 : !torch.int, !torch.int -> !torch.int
  %end = torch.aten.add.int %p, %int5 : !torch.int, !torch.int -> !torch.int
  %kw = torch.aten.slice_scatter %kc, %k, %int2, %start, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,4,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,32,64],f16>
  %seen = torch.aten.slice.Tensor %kc, %int2, %int0, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,?,64],f16>
  %static = torch.aten.slice_scatter %kc, %k, %int2, %int0, %int4, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,4,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,32,64],f16>
  %short = torch.aten.slice_scatter %kc, %k2, %int2, %start, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,3,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,32,64],f16>
  return %kw, %seen, %static, %short : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,?,64],f16>, !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,32,64],f16>
}

// -----

// v cut from a fused QKV projection's [B, T, N] output (slice, view as heads, transpose): the
// kernel reads it there (src_layout), so the slice and the transpose go; the function's body
// rebuilds them for IREE's own write.
// CHECK-LABEL: func.func @cache_write_strided
// CHECK-NOT:     torch.aten.transpose.int
// CHECK:         %[[W:[0-9]+]] = call @cuvil_kernel_cache_write_2x2x32x64_d2_t3_f16_strided_{{[0-9a-f]+}}(%arg0, %arg1, %arg2) : (!torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,3,512],f16>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[2,2,32,64],f16>
// CHECK:         return %[[W]]
// CHECK:       func.func private @cuvil_kernel_cache_write_2x2x32x64_d2_t3_f16_strided_
// CHECK-SAME:    heads = 2 : i64
// CHECK-SAME:    src_layout = "2x3x512:384:1536:64:512"
// CHECK:         torch.aten.slice.Tensor %arg1, %int2, %int384, %int512, %int1
// CHECK:         torch.aten.view
// CHECK:         torch.aten.transpose.int
// CHECK:         torch.aten.slice_scatter %arg0
func.func @cache_write_strided(%kc: !torch.vtensor<[2,2,32,64],f16>, %qkv: !torch.vtensor<[2,3,512],f16>, %pos: !torch.vtensor<[1],si64>) -> !torch.vtensor<[2,2,32,64],f16> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int64 = torch.constant.int 64
  %int384 = torch.constant.int 384
  %int512 = torch.constant.int 512
  %p = torch.aten.Int.Tensor %pos : !torch.vtensor<[1],si64> -> !torch.int
  %end = torch.aten.add.int %p, %int3 : !torch.int, !torch.int -> !torch.int
  %v = torch.aten.slice.Tensor %qkv, %int2, %int384, %int512, %int1 : !torch.vtensor<[2,3,512],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,3,128],f16>
  %shape = torch.prim.ListConstruct %int2, %int3, %int2, %int64 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %heads = torch.aten.view %v, %shape : !torch.vtensor<[2,3,128],f16>, !torch.list<int> -> !torch.vtensor<[2,3,2,64],f16>
  %t = torch.aten.transpose.int %heads, %int1, %int2 : !torch.vtensor<[2,3,2,64],f16>, !torch.int, !torch.int -> !torch.vtensor<[2,2,3,64],f16>
  %w = torch.aten.slice_scatter %kc, %t, %int2, %p, %end, %int1 : !torch.vtensor<[2,2,32,64],f16>, !torch.vtensor<[2,2,3,64],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,32,64],f16>
  return %w : !torch.vtensor<[2,2,32,64],f16>
}
