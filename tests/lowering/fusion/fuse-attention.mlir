// RUN: cuvil-opt %s -p fuse-attention --split-input-file | FileCheck %s
// Hand-written attention, in the forms torch.export and the FX importer write it, ->
// cuvil.attention. The first half are forms the pass must fuse; the second half are
// look-alikes it must leave alone.

// ===== fires =====

// HF eager attention as torch.export + the FX importer write it: 4-D matmuls as
// view(bmm(view, view)), kᵀ as permute, scale as mul.Scalar, an additive float mask, the
// softmax decomposed into max/sub/exp/sum/div.
// CHECK-LABEL: func.func @hf_eager
// CHECK-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[K:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[V:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[M:[a-z0-9]+]]: !torch.vtensor<[1,1,4,4],f32>)
// CHECK-NOT:     torch.aten.bmm
// CHECK:         %[[O:[0-9]+]] = "cuvil.attention"(%[[Q]], %[[K]], %[[V]], %[[M]]) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 2.500000e-01 : f64}
// CHECK-SAME:      -> !torch.vtensor<[1,2,4,8],f32>
// CHECK-NEXT:    return %[[O]]
func.func @hf_eager(%q: !torch.vtensor<[1,2,4,8],f32>, %k: !torch.vtensor<[1,2,4,8],f32>, %v: !torch.vtensor<[1,2,4,8],f32>, %mask: !torch.vtensor<[1,1,4,4],f32>) -> !torch.vtensor<[1,2,4,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %int8 = torch.constant.int 8
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %float1 = torch.constant.float 1.000000e+00
  %scale = torch.constant.float 2.500000e-01
  %perm = torch.prim.ListConstruct %int0, %int1, %int3, %int2 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %kt = torch.aten.permute %k, %perm : !torch.vtensor<[1,2,4,8],f32>, !torch.list<int> -> !torch.vtensor<[1,2,8,4],f32>
  %s_q = torch.prim.ListConstruct %int2, %int4, %int8 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %q3 = torch.aten.view %q, %s_q : !torch.vtensor<[1,2,4,8],f32>, !torch.list<int> -> !torch.vtensor<[2,4,8],f32>
  %s_kt = torch.prim.ListConstruct %int2, %int8, %int4 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %kt3 = torch.aten.view %kt, %s_kt : !torch.vtensor<[1,2,8,4],f32>, !torch.list<int> -> !torch.vtensor<[2,8,4],f32>
  %s3 = torch.aten.bmm %q3, %kt3 : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %s_s = torch.prim.ListConstruct %int1, %int2, %int4, %int4 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %s = torch.aten.view %s3, %s_s : !torch.vtensor<[2,4,4],f32>, !torch.list<int> -> !torch.vtensor<[1,2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[1,2,4,4],f32>, !torch.float -> !torch.vtensor<[1,2,4,4],f32>
  %masked = torch.aten.add.Tensor %scaled, %mask, %int1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[1,1,4,4],f32>, !torch.int -> !torch.vtensor<[1,2,4,4],f32>
  %values, %indices = torch.aten.max.dim %masked, %int-1, %true : !torch.vtensor<[1,2,4,4],f32>, !torch.int, !torch.bool -> !torch.vtensor<[1,2,4,1],f32>, !torch.vtensor<[1,2,4,1],si64>
  %shifted = torch.aten.sub.Tensor %masked, %values, %float1 : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[1,2,4,1],f32>, !torch.float -> !torch.vtensor<[1,2,4,4],f32>
  %e = torch.aten.exp %shifted : !torch.vtensor<[1,2,4,4],f32> -> !torch.vtensor<[1,2,4,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %sum = torch.aten.sum.dim_IntList %e, %dims, %true, %none : !torch.vtensor<[1,2,4,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[1,2,4,1],f32>
  %p = torch.aten.div.Tensor %e, %sum : !torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[1,2,4,1],f32> -> !torch.vtensor<[1,2,4,4],f32>
  %s_p = torch.prim.ListConstruct %int2, %int4, %int4 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %p3 = torch.aten.view %p, %s_p : !torch.vtensor<[1,2,4,4],f32>, !torch.list<int> -> !torch.vtensor<[2,4,4],f32>
  %v3 = torch.aten.view %v, %s_q : !torch.vtensor<[1,2,4,8],f32>, !torch.list<int> -> !torch.vtensor<[2,4,8],f32>
  %o3 = torch.aten.bmm %p3, %v3 : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  %s_o = torch.prim.ListConstruct %int1, %int2, %int4, %int8 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %o = torch.aten.view %o3, %s_o : !torch.vtensor<[2,4,8],f32>, !torch.list<int> -> !torch.vtensor<[1,2,4,8],f32>
  return %o : !torch.vtensor<[1,2,4,8],f32>
}

// -----

// aten.matmul, transpose.int, division by a constant, softmax.int; S differs from L.
// CHECK-LABEL: func.func @matmul_softmax_int
// CHECK-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[K:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[V:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>)
// CHECK-NEXT:    %[[O:[0-9]+]] = "cuvil.attention"(%[[Q]], %[[K]], %[[V]]) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 5.000000e-01 : f64}
// CHECK-SAME:      (!torch.vtensor<[3,4,8],f32>, !torch.vtensor<[3,6,8],f32>, !torch.vtensor<[3,6,5],f32>) -> !torch.vtensor<[3,4,5],f32>
// CHECK-NEXT:    return %[[O]]
func.func @matmul_softmax_int(%q: !torch.vtensor<[3,4,8],f32>, %k: !torch.vtensor<[3,6,8],f32>, %v: !torch.vtensor<[3,6,5],f32>) -> !torch.vtensor<[3,4,5],f32> {
  %int-2 = torch.constant.int -2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %two = torch.constant.float 2.000000e+00
  %kt = torch.aten.transpose.int %k, %int-2, %int-1 : !torch.vtensor<[3,6,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[3,8,6],f32>
  %s = torch.aten.matmul %q, %kt : !torch.vtensor<[3,4,8],f32>, !torch.vtensor<[3,8,6],f32> -> !torch.vtensor<[3,4,6],f32>
  %scaled = torch.aten.div.Scalar %s, %two : !torch.vtensor<[3,4,6],f32>, !torch.float -> !torch.vtensor<[3,4,6],f32>
  %p = torch.aten.softmax.int %scaled, %int-1, %none : !torch.vtensor<[3,4,6],f32>, !torch.int, !torch.none -> !torch.vtensor<[3,4,6],f32>
  %o = torch.aten.matmul %p, %v : !torch.vtensor<[3,4,6],f32>, !torch.vtensor<[3,6,5],f32> -> !torch.vtensor<[3,4,5],f32>
  return %o : !torch.vtensor<[3,4,5],f32>
}

// -----

// A constant lower-triangular keep-mask with a -inf fill becomes is_causal (no mask operand);
// bare bmms, _softmax over dim 2 of a 3-D tensor.
// CHECK-LABEL: func.func @causal_literal
// CHECK-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[K:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[V:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>)
// CHECK-NOT:     torch.aten.where
// CHECK:         %[[O:[0-9]+]] = "cuvil.attention"(%[[Q]], %[[K]], %[[V]]) {is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 0.35355339059327373 : f64}
// CHECK-NEXT:    return %[[O]]
func.func @causal_literal(%q: !torch.vtensor<[2,3,8],f32>, %k: !torch.vtensor<[2,3,8],f32>, %v: !torch.vtensor<[2,3,8],f32>) -> !torch.vtensor<[2,3,8],f32> {
  %tril = torch.vtensor.literal(dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>) : !torch.vtensor<[3,3],i1>
  %ninf = torch.vtensor.literal(dense<0xFF800000> : tensor<f32>) : !torch.vtensor<[],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %scale = torch.constant.float 0.35355339059327373
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,3,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,3],f32>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,3,8],f32>, !torch.vtensor<[2,8,3],f32> -> !torch.vtensor<[2,3,3],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,3,3],f32>, !torch.float -> !torch.vtensor<[2,3,3],f32>
  %masked = torch.aten.where.self %tril, %scaled, %ninf : !torch.vtensor<[3,3],i1>, !torch.vtensor<[2,3,3],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[2,3,3],f32>
  %p = torch.aten._softmax %masked, %int2, %false : !torch.vtensor<[2,3,3],f32>, !torch.int, !torch.bool -> !torch.vtensor<[2,3,3],f32>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,3,3],f32>, !torch.vtensor<[2,3,8],f32> -> !torch.vtensor<[2,3,8],f32>
  return %o : !torch.vtensor<[2,3,8],f32>
}

// -----

// 2-D (mm), the scale on q, masked_fill with finfo.min by a boolean input mask: the mask
// becomes the additive where(mask, finfo.min, 0), viewed to q's rank.
// CHECK-LABEL: func.func @masked_fill_2d
// CHECK-SAME:    (%[[Q:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[K:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[V:[a-z0-9]+]]: !torch.vtensor<{{[^>]*}}>, %[[P:[a-z0-9]+]]: !torch.vtensor<[6],i1>)
// CHECK-DAG:     %[[ZERO:[0-9]+]] = torch.vtensor.literal(dense<0.000000e+00> : tensor<1xf32>)
// CHECK-DAG:     %[[MIN:[0-9]+]] = torch.vtensor.literal(dense<-3.40282347E+38> : tensor<1xf32>)
// CHECK:         %[[ADD:[0-9]+]] = torch.aten.where.self %[[P]], %[[MIN]], %[[ZERO]] : {{.*}} -> !torch.vtensor<[6],f32>
// CHECK:         %[[M:[0-9]+]] = torch.aten.view %[[ADD]], {{.*}} -> !torch.vtensor<[1,6],f32>
// CHECK-NEXT:    %[[O:[0-9]+]] = "cuvil.attention"(%[[Q]], %[[K]], %[[V]], %[[M]]) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.250000e-01 : f64}
// CHECK-NOT:     torch.aten.mm
// CHECK:         return %[[O]]
func.func @masked_fill_2d(%q: !torch.vtensor<[4,8],f32>, %k: !torch.vtensor<[6,8],f32>, %v: !torch.vtensor<[6,8],f32>, %pad: !torch.vtensor<[6],i1>) -> !torch.vtensor<[4,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %scale = torch.constant.float 0.125
  %min = torch.constant.float -3.4028234663852886E+38
  %none = torch.constant.none
  %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %qs = torch.aten.mul.Scalar %q, %scale : !torch.vtensor<[4,8],f32>, !torch.float -> !torch.vtensor<[4,8],f32>
  %kt = torch.aten.permute %k, %perm : !torch.vtensor<[6,8],f32>, !torch.list<int> -> !torch.vtensor<[8,6],f32>
  %s = torch.aten.mm %qs, %kt : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,6],f32> -> !torch.vtensor<[4,6],f32>
  %masked = torch.aten.masked_fill.Scalar %s, %pad, %min : !torch.vtensor<[4,6],f32>, !torch.vtensor<[6],i1>, !torch.float -> !torch.vtensor<[4,6],f32>
  %p = torch.aten.softmax.int %masked, %int1, %none : !torch.vtensor<[4,6],f32>, !torch.int, !torch.none -> !torch.vtensor<[4,6],f32>
  %o = torch.aten.mm %p, %v : !torch.vtensor<[4,6],f32>, !torch.vtensor<[6,8],f32> -> !torch.vtensor<[4,8],f32>
  return %o : !torch.vtensor<[4,8],f32>
}

// -----

// HF's fp16 softmax: upcast to fp32, softmax, cast back: the casts go, attention stays fp16.
// CHECK-LABEL: func.func @fp16_upcast
// CHECK-NOT:     convert_element_type
// CHECK:         "cuvil.attention"({{.*}}) {is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.250000e-01 : f64}
// CHECK-SAME:      -> !torch.vtensor<[2,4,8],f16>
func.func @fp16_upcast(%q: !torch.vtensor<[2,4,8],f16>, %k: !torch.vtensor<[2,4,8],f16>, %v: !torch.vtensor<[2,4,8],f16>) -> !torch.vtensor<[2,4,8],f16> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int5 = torch.constant.int 5
  %int6 = torch.constant.int 6
  %false = torch.constant.bool false
  %scale = torch.constant.float 0.125
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f16>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f16>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f16>, !torch.vtensor<[2,8,4],f16> -> !torch.vtensor<[2,4,4],f16>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f16>, !torch.float -> !torch.vtensor<[2,4,4],f16>
  %up = torch.prims.convert_element_type %scaled, %int6 : !torch.vtensor<[2,4,4],f16>, !torch.int -> !torch.vtensor<[2,4,4],f32>
  %p32 = torch.aten._softmax %up, %int2, %false : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.bool -> !torch.vtensor<[2,4,4],f32>
  %p = torch.prims.convert_element_type %p32, %int5 : !torch.vtensor<[2,4,4],f32>, !torch.int -> !torch.vtensor<[2,4,4],f16>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,4,4],f16>, !torch.vtensor<[2,4,8],f16> -> !torch.vtensor<[2,4,8],f16>
  return %o : !torch.vtensor<[2,4,8],f16>
}

// -----

// ===== must not fire =====

// softmax over dim 1 (the queries), not the keys.
// CHECK-LABEL: func.func @softmax_over_queries
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @softmax_over_queries(%q: !torch.vtensor<[2,4,8],f32>, %k: !torch.vtensor<[2,4,8],f32>, %v: !torch.vtensor<[2,4,8],f32>) -> !torch.vtensor<[2,4,8],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %none = torch.constant.none
  %scale = torch.constant.float 0.125
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f32>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %scaled, %int1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o : !torch.vtensor<[2,4,8],f32>
}

// -----

// The attention weights are also returned: fusing would compute them twice.
// CHECK-LABEL: func.func @weights_returned
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @weights_returned(%q: !torch.vtensor<[2,4,8],f32>, %k: !torch.vtensor<[2,4,8],f32>, %v: !torch.vtensor<[2,4,8],f32>) -> (!torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,4,4],f32>) {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %scale = torch.constant.float 0.125
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f32>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %scaled, %int-1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o, %p : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,4,4],f32>
}

// -----

// The scale is a function argument.
// CHECK-LABEL: func.func @scale_not_constant
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @scale_not_constant(%q: !torch.vtensor<[2,4,8],f32>, %k: !torch.vtensor<[2,4,8],f32>, %v: !torch.vtensor<[2,4,8],f32>, %d: !torch.vtensor<[],f32>) -> !torch.vtensor<[2,4,8],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f32>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.div.Tensor %s, %d : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %scaled, %int-1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o : !torch.vtensor<[2,4,8],f32>
}

// -----

// The value matmul reads softmax * 0.5.
// CHECK-LABEL: func.func @value_matmul_not_softmax
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @value_matmul_not_softmax(%q: !torch.vtensor<[2,4,8],f32>, %k: !torch.vtensor<[2,4,8],f32>, %v: !torch.vtensor<[2,4,8],f32>) -> !torch.vtensor<[2,4,8],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %scale = torch.constant.float 0.125
  %half = torch.constant.float 0.5
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f32>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %scaled, %int-1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %ph = torch.aten.mul.Scalar %p, %half : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.bmm %ph, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o : !torch.vtensor<[2,4,8],f32>
}

// -----

// A 2-D value matrix against 3-D weights: the batch dims do not fit.
// CHECK-LABEL: func.func @value_shared_across_batch
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @value_shared_across_batch(%q: !torch.vtensor<[2,4,8],f32>, %k: !torch.vtensor<[2,4,8],f32>, %v: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[2,4,8],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %scale = torch.constant.float 0.125
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f32>
  %s = torch.aten.matmul %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %scaled, %int-1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.matmul %p, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o : !torch.vtensor<[2,4,8],f32>
}

// -----

// The right operand of the scores matmul is no transpose of a key tensor.
// CHECK-LABEL: func.func @keys_not_transposed
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @keys_not_transposed(%q: !torch.vtensor<[2,4,8],f32>, %kt: !torch.vtensor<[2,8,4],f32>, %v: !torch.vtensor<[2,4,8],f32>) -> !torch.vtensor<[2,4,8],f32> {
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %scale = torch.constant.float 0.125
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %scaled, %int-1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o : !torch.vtensor<[2,4,8],f32>
}

// -----

// masked_fill with -10: not a mask (rows differ from attention's where every key is masked).
// CHECK-LABEL: func.func @fill_not_minus_inf
// CHECK-NOT:     cuvil.attention
// CHECK:         torch.aten.softmax.int
// CHECK-NOT:     cuvil.attention
// CHECK:         return
func.func @fill_not_minus_inf(%q: !torch.vtensor<[2,4,8],f32>, %k: !torch.vtensor<[2,4,8],f32>, %v: !torch.vtensor<[2,4,8],f32>, %m: !torch.vtensor<[4,4],i1>) -> !torch.vtensor<[2,4,8],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %scale = torch.constant.float 0.125
  %fill = torch.constant.float -1.000000e+01
  %kt = torch.aten.transpose.int %k, %int1, %int2 : !torch.vtensor<[2,4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,8,4],f32>
  %s = torch.aten.bmm %q, %kt : !torch.vtensor<[2,4,8],f32>, !torch.vtensor<[2,8,4],f32> -> !torch.vtensor<[2,4,4],f32>
  %scaled = torch.aten.mul.Scalar %s, %scale : !torch.vtensor<[2,4,4],f32>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %masked = torch.aten.masked_fill.Scalar %scaled, %m, %fill : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[4,4],i1>, !torch.float -> !torch.vtensor<[2,4,4],f32>
  %p = torch.aten.softmax.int %masked, %int-1, %none : !torch.vtensor<[2,4,4],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,4,4],f32>
  %o = torch.aten.bmm %p, %v : !torch.vtensor<[2,4,4],f32>, !torch.vtensor<[2,4,8],f32> -> !torch.vtensor<[2,4,8],f32>
  return %o : !torch.vtensor<[2,4,8],f32>
}
