// RUN: cuvil-opt %s -p fuse-norms --split-input-file | FileCheck %s
// Hand-written RMSNorm / LayerNorm, in the form the FX importer writes them (mean as sum / N,
// aten.var as an f64 mean of squared deviations cast back), -> cuvil.norm. The first half are
// forms the pass must fuse; the second half are look-alikes it must leave alone.

// ===== fires =====

// HF Llama's RMSNorm in fp32 as the importer writes it: mean = sum / N, weight on the left.
// CHECK-LABEL: func.func @llama_rms
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,3,4],f32>)
// CHECK-NOT:     torch.aten.rsqrt
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>)
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%[[X]], %[[W]]) {eps = 9.9999999999999995E-7 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      -> !torch.vtensor<[2,3,4],f32>
// CHECK-NEXT:    return %[[Y]]
func.func @llama_rms(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,4],f32> {
  %w = torch.vtensor.literal(dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 9.9999999999999995E-7
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[2,3,4],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[2,3,1],f32>, !torch.int -> !torch.vtensor<[2,3,1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[2,3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,3,1],f32> -> !torch.vtensor<[2,3,1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,3,1],f32> -> !torch.vtensor<[2,3,4],f32>
  %6 = torch.aten.mul.Tensor %w, %5 : !torch.vtensor<[4],f32>, !torch.vtensor<[2,3,4],f32> -> !torch.vtensor<[2,3,4],f32>
  return %6 : !torch.vtensor<[2,3,4],f32>
}

// -----

// HF Llama on fp16: upcast, norm in fp32, cast back, fp16 weight. The norm stays in fp32
// (the weight is converted to an fp32 literal and fused) and the cast back is kept.
// CHECK-LABEL: func.func @llama_rms_fp16
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f16>)
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
// CHECK:         %[[UP:[0-9]+]] = torch.aten.to.dtype %[[X]], %int6, {{.*}} -> !torch.vtensor<[2,4],f32>
// CHECK-NEXT:    %[[N:[0-9]+]] = "cuvil.norm"(%[[UP]], %[[W]]) {eps = 1.000000e-05 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-SAME:      : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,4],f32>
// CHECK-NEXT:    %[[Y:[0-9]+]] = torch.aten.to.dtype %[[N]], %int5, {{.*}} -> !torch.vtensor<[2,4],f16>
// CHECK-NEXT:    return %[[Y]]
func.func @llama_rms_fp16(%x: !torch.vtensor<[2,4],f16>) -> !torch.vtensor<[2,4],f16> {
  %w = torch.vtensor.literal(dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf16>) : !torch.vtensor<[4],f16>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int5 = torch.constant.int 5
  %int6 = torch.constant.int 6
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %up = torch.aten.to.dtype %x, %int6, %false, %false, %none : !torch.vtensor<[2,4],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f32>
  %0 = torch.aten.pow.Tensor_Scalar %up, %int2 : !torch.vtensor<[2,4],f32>, !torch.int -> !torch.vtensor<[2,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[2,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[2,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,1],f32>
  %5 = torch.aten.mul.Tensor %up, %4 : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,4],f32>
  %down = torch.aten.to.dtype %5, %int5, %false, %false, %none : !torch.vtensor<[2,4],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f16>
  %6 = torch.aten.mul.Tensor %w, %down : !torch.vtensor<[4],f16>, !torch.vtensor<[2,4],f16> -> !torch.vtensor<[2,4],f16>
  return %6 : !torch.vtensor<[2,4],f16>
}

// -----

// T5LayerNorm on fp16: the variance of the upcast x, `x16 * rsqrt(var32)` promoted to fp32.
// The norm normalizes the upcast value; no weight here, so the cast back stays outside.
// CHECK-LABEL: func.func @t5_rms_promoted
// CHECK:         %[[UP:[0-9]+]] = torch.aten.to.dtype %{{.*}}, %int6, {{.*}} -> !torch.vtensor<[2,4],f32>
// CHECK-NEXT:    %[[N:[0-9]+]] = "cuvil.norm"(%[[UP]]) {eps = 9.9999999999999995E-7 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>}
// CHECK-SAME:      -> !torch.vtensor<[2,4],f32>
// CHECK-NEXT:    %[[Y:[0-9]+]] = torch.aten.to.dtype %[[N]], %int5, {{.*}} -> !torch.vtensor<[2,4],f16>
// CHECK-NEXT:    return %[[Y]]
func.func @t5_rms_promoted(%x: !torch.vtensor<[2,4],f16>) -> !torch.vtensor<[2,4],f16> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int5 = torch.constant.int 5
  %int6 = torch.constant.int 6
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %up = torch.aten.to.dtype %x, %int6, %false, %false, %none : !torch.vtensor<[2,4],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f32>
  %0 = torch.aten.pow.Tensor_Scalar %up, %int2 : !torch.vtensor<[2,4],f32>, !torch.int -> !torch.vtensor<[2,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[2,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[2,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[2,4],f16>, !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,4],f32>
  %down = torch.aten.to.dtype %5, %int5, %false, %false, %none : !torch.vtensor<[2,4],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f16>
  return %down : !torch.vtensor<[2,4],f16>
}

// -----

// x / sqrt(mean(x * x) + eps) with mean.dim, no weight.
// CHECK-LABEL: func.func @rms_div_mean_dim
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%[[X]]) {eps = 1.000000e-05 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>}
// CHECK-NEXT:    return %[[Y]]
func.func @rms_div_mean_dim(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,4],f32> {
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %0 = torch.aten.mul.Tensor %x, %x : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,4],f32> -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.mean.dim %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.add.Scalar %1, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.sqrt %2 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.div.Tensor %x, %3 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  return %4 : !torch.vtensor<[3,4],f32>
}

// -----

// reciprocal(sqrt(...)), eps a 0-d literal on the left, a [1, 4] weight on the right: the
// weight is reshaped to the normalized shape.
// CHECK-LABEL: func.func @rms_reciprocal_tensor_eps
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%[[X]], %[[W]]) {eps = 9.9999999747524271E-7 : f64, kind = "rms", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 0>}
// CHECK-NEXT:    return %[[Y]]
func.func @rms_reciprocal_tensor_eps(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,4],f32> {
  %w = torch.vtensor.literal(dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>) : !torch.vtensor<[1,4],f32>
  %eps = torch.vtensor.literal(dense<1.0E-6> : tensor<f32>) : !torch.vtensor<[],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Tensor %eps, %2, %int1 : !torch.vtensor<[],f32>, !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.sqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.reciprocal %4 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %6 = torch.aten.mul.Tensor %x, %5 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  %7 = torch.aten.mul.Tensor %6, %w : !torch.vtensor<[3,4],f32>, !torch.vtensor<[1,4],f32> -> !torch.vtensor<[3,4],f32>
  return %7 : !torch.vtensor<[3,4],f32>
}

// -----

// A weight that is no constant (a function argument of the normalized shape) is used as is.
// CHECK-LABEL: func.func @rms_weight_argument
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>, %[[W:[a-z0-9]+]]: !torch.vtensor<[4],f32>)
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%[[X]], %[[W]]) {{.*}}kind = "rms"
// CHECK-NEXT:    return %[[Y]]
func.func @rms_weight_argument(%x: !torch.vtensor<[3,4],f32>, %w: !torch.vtensor<[4],f32>) -> !torch.vtensor<[3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  %6 = torch.aten.mul.Tensor %5, %w : !torch.vtensor<[3,4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[3,4],f32>
  return %6 : !torch.vtensor<[3,4],f32>
}

// -----

// keepdim false where it does not matter: x is [1, 4], so the [1] mean broadcasts the same.
// CHECK-LABEL: func.func @rms_keepdim_false_single_row
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%{{.*}}) {{.*}}kind = "rms", normalized_shape = array<i64: 4>
// CHECK-NEXT:    return %[[Y]]
func.func @rms_keepdim_false_single_row(%x: !torch.vtensor<[1,4],f32>) -> !torch.vtensor<[1,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[1,4],f32>, !torch.int -> !torch.vtensor<[1,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %false, %none : !torch.vtensor<[1,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[1],f32>, !torch.int -> !torch.vtensor<[1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[1],f32>, !torch.float, !torch.int -> !torch.vtensor<[1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[1],f32> -> !torch.vtensor<[1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[1,4],f32>, !torch.vtensor<[1],f32> -> !torch.vtensor<[1,4],f32>
  return %5 : !torch.vtensor<[1,4],f32>
}

// -----

// LayerNorm with aten.var(unbiased=False) as the importer writes it: the variance in f64 and
// cast back, the mean computed twice, `x - mean` with alpha 1; weight and bias.
// CHECK-LABEL: func.func @layer_norm_var_affine
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f32>)
// CHECK-DAG:     %[[W:[0-9]+]] = torch.vtensor.literal(dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>)
// CHECK-DAG:     %[[B:[0-9]+]] = torch.vtensor.literal(dense<5.000000e-01> : tensor<4xf32>)
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%[[X]], %[[W]], %[[B]]) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NEXT:    return %[[Y]]
func.func @layer_norm_var_affine(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %w = torch.vtensor.literal(dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %b = torch.vtensor.literal(dense<[0.5, 0.5, 0.5, 0.5]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %int6 = torch.constant.int 6
  %int7 = torch.constant.int 7
  %int-1 = torch.constant.int -1
  %float1 = torch.constant.float 1.000000e+00
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %x, %dims, %true, %none : !torch.vtensor<[2,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f32>
  %mean = torch.aten.div.Scalar %0, %int4 : !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,1],f32>
  %x64 = torch.aten.to.dtype %x, %int7, %false, %false, %none : !torch.vtensor<[2,4],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f64>
  %1 = torch.aten.sum.dim_IntList %x64, %dims, %true, %none : !torch.vtensor<[2,4],f64>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f64>
  %mean64 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[2,1],f64>, !torch.int -> !torch.vtensor<[2,1],f64>
  %2 = torch.aten.sub.Tensor %x64, %mean64, %float1 : !torch.vtensor<[2,4],f64>, !torch.vtensor<[2,1],f64>, !torch.float -> !torch.vtensor<[2,4],f64>
  %3 = torch.aten.mul.Tensor %2, %2 : !torch.vtensor<[2,4],f64>, !torch.vtensor<[2,4],f64> -> !torch.vtensor<[2,4],f64>
  %4 = torch.aten.sum.dim_IntList %3, %dims, %true, %none : !torch.vtensor<[2,4],f64>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f64>
  %5 = torch.aten.div.Scalar %4, %int4 : !torch.vtensor<[2,1],f64>, !torch.int -> !torch.vtensor<[2,1],f64>
  %var = torch.aten.to.dtype %5, %int6, %false, %false, %none : !torch.vtensor<[2,1],f64>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f32>
  %6 = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,4],f32>
  %7 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[2,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1],f32>
  %8 = torch.aten.sqrt %7 : !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,1],f32>
  %9 = torch.aten.div.Tensor %6, %8 : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,4],f32>
  %10 = torch.aten.mul.Tensor %9, %w : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[2,4],f32>
  %11 = torch.aten.add.Tensor %10, %b, %int1 : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[2,4],f32>
  return %11 : !torch.vtensor<[2,4],f32>
}

// -----

// LayerNorm over the last two dims, mean((x - mean)²) with `x - mean` written twice (no CSE),
// rsqrt, no affine: the root is the normalizing multiply.
// CHECK-LABEL: func.func @layer_norm_last_two_dims
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,3,4],f32>)
// CHECK-NOT:     torch.aten
// CHECK:         %[[Y:[0-9]+]] = "cuvil.norm"(%[[X]]) {eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 3, 4>, operandSegmentSizes = array<i32: 1, 0, 0>}
// CHECK-NEXT:    return %[[Y]]
func.func @layer_norm_last_two_dims(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int12 = torch.constant.int 12
  %int-1 = torch.constant.int -1
  %int-2 = torch.constant.int -2
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %dims = torch.prim.ListConstruct %int-2, %int-1 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %x, %dims, %true, %none : !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1,1],f32>
  %mean = torch.aten.div.Scalar %0, %int12 : !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[2,1,1],f32>
  %c1 = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %1 = torch.aten.pow.Tensor_Scalar %c1, %int2 : !torch.vtensor<[2,3,4],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %2 = torch.aten.sum.dim_IntList %1, %dims, %true, %none : !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1,1],f32>
  %var = torch.aten.div.Scalar %2, %int12 : !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[2,1,1],f32>
  %c2 = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %3 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[2,1,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[2,1,1],f32>
  %5 = torch.aten.mul.Tensor %c2, %4 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[2,3,4],f32>
  return %5 : !torch.vtensor<[2,3,4],f32>
}

// -----

// LayerNorm whose 'weight' is [3, 4] (not the normalized shape [4]): the normalization fuses,
// the multiply stays.
// CHECK-LABEL: func.func @layer_norm_weight_other_shape
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[3,4],f32>)
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal(dense<2.000000e+00> : tensor<3x4xf32>)
// CHECK-NOT:     torch.aten
// CHECK:         %[[N:[0-9]+]] = "cuvil.norm"(%[[X]]) {{.*}}kind = "layer", normalized_shape = array<i64: 4>, operandSegmentSizes = array<i32: 1, 0, 0>}
// CHECK-NEXT:    %[[Y:[0-9]+]] = torch.aten.mul.Tensor %[[N]], %[[W]]
// CHECK-NEXT:    return %[[Y]]
func.func @layer_norm_weight_other_shape(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,4],f32> {
  %w = torch.vtensor.literal(dense<2.0> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %x, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %mean = torch.aten.div.Scalar %0, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %c = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %1 = torch.aten.pow.Tensor_Scalar %c, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %2 = torch.aten.sum.dim_IntList %1, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %var = torch.aten.div.Scalar %2, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.mul.Tensor %c, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  %6 = torch.aten.mul.Tensor %5, %w : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,4],f32> -> !torch.vtensor<[3,4],f32>
  return %6 : !torch.vtensor<[3,4],f32>
}

// -----

// An fp16 norm cast up to fp32 before an fp32 weight: fusing would round the weight to fp16,
// so only the normalization fuses.
// CHECK-LABEL: func.func @rms_upcast_before_weight
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,4],f16>)
// CHECK:         %[[W:[0-9]+]] = torch.vtensor.literal({{.*}}tensor<4xf32>)
// CHECK:         %[[N:[0-9]+]] = "cuvil.norm"(%[[X]]) {{.*}}kind = "rms"{{.*}} -> !torch.vtensor<[2,4],f16>
// CHECK-NEXT:    %[[UP:[0-9]+]] = torch.aten.to.dtype %[[N]], %int6, {{.*}} -> !torch.vtensor<[2,4],f32>
// CHECK-NEXT:    %[[Y:[0-9]+]] = torch.aten.mul.Tensor %[[UP]], %[[W]]
// CHECK-NEXT:    return %[[Y]]
func.func @rms_upcast_before_weight(%x: !torch.vtensor<[2,4],f16>) -> !torch.vtensor<[2,4],f32> {
  %w = torch.vtensor.literal(dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int6 = torch.constant.int 6
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[2,4],f16>, !torch.int -> !torch.vtensor<[2,4],f16>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[2,4],f16>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f16>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[2,1],f16>, !torch.int -> !torch.vtensor<[2,1],f16>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[2,1],f16>, !torch.float, !torch.int -> !torch.vtensor<[2,1],f16>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,1],f16> -> !torch.vtensor<[2,1],f16>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[2,4],f16>, !torch.vtensor<[2,1],f16> -> !torch.vtensor<[2,4],f16>
  %up = torch.aten.to.dtype %5, %int6, %false, %false, %none : !torch.vtensor<[2,4],f16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f32>
  %6 = torch.aten.mul.Tensor %up, %w : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[2,4],f32>
  return %6 : !torch.vtensor<[2,4],f32>
}

// -----

// ===== must not fire =====

// The reduction is over dim 1 of [2, 3, 4], not over the normalized (last) dim.
// CHECK-LABEL: func.func @rms_reduces_other_dim
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.rsqrt
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @rms_reduces_other_dim(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[2,3,4],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1,4],f32>
  %2 = torch.aten.div.Scalar %1, %int3 : !torch.vtensor<[2,1,4],f32>, !torch.int -> !torch.vtensor<[2,1,4],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[2,1,4],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1,4],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,1,4],f32> -> !torch.vtensor<[2,1,4],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,1,4],f32> -> !torch.vtensor<[2,3,4],f32>
  return %5 : !torch.vtensor<[2,3,4],f32>
}

// -----

// keepdim false on a square [4, 4] input: the [4] mean broadcasts along rows, not columns.
// CHECK-LABEL: func.func @rms_keepdim_false
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.rsqrt
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @rms_keepdim_false(%x: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[4,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[4,4],f32>, !torch.int -> !torch.vtensor<[4,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %false, %none : !torch.vtensor<[4,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[4],f32>, !torch.float, !torch.int -> !torch.vtensor<[4],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[4,4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[4,4],f32>
  return %5 : !torch.vtensor<[4,4],f32>
}

// -----

// eps is a function argument, not a constant.
// CHECK-LABEL: func.func @rms_eps_not_constant
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.add.Tensor
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @rms_eps_not_constant(%x: !torch.vtensor<[3,4],f32>, %eps: !torch.vtensor<[],f32>) -> !torch.vtensor<[3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Tensor %2, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.vtensor<[],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  return %5 : !torch.vtensor<[3,4],f32>
}

// -----

// The mean of squares (the 'variance') is also returned.
// CHECK-LABEL: func.func @rms_variance_has_another_use
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.rsqrt
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @rms_variance_has_another_use(%x: !torch.vtensor<[3,4],f32>) -> (!torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32>) {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  return %5, %2 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32>
}

// -----

// sum / 3 over 4 elements is not a mean.
// CHECK-LABEL: func.func @rms_wrong_divisor
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.div.Scalar
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @rms_wrong_divisor(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int3 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Scalar %2, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.mul.Tensor %x, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  return %5 : !torch.vtensor<[3,4],f32>
}

// -----

// eps added outside the square root: x / (sqrt(mean(x²)) + eps).
// CHECK-LABEL: func.func @rms_eps_outside_sqrt
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.sqrt
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @rms_eps_outside_sqrt(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-6
  %0 = torch.aten.pow.Tensor_Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.sum.dim_IntList %0, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %2 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.sqrt %2 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.add.Scalar %3, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.div.Tensor %x, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  return %5 : !torch.vtensor<[3,4],f32>
}

// -----

// aten.var with the default correction 1 (divisor N - 1 = 3): not LayerNorm's variance.
// CHECK-LABEL: func.func @layer_norm_unbiased_var
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.div.Tensor
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @layer_norm_unbiased_var(%x: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %int6 = torch.constant.int 6
  %int7 = torch.constant.int 7
  %int-1 = torch.constant.int -1
  %float1 = torch.constant.float 1.000000e+00
  %float3 = torch.constant.float 3.000000e+00
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %x, %dims, %true, %none : !torch.vtensor<[2,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f32>
  %mean = torch.aten.div.Scalar %0, %int4 : !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,1],f32>
  %x64 = torch.aten.to.dtype %x, %int7, %false, %false, %none : !torch.vtensor<[2,4],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,4],f64>
  %1 = torch.aten.sum.dim_IntList %x64, %dims, %true, %none : !torch.vtensor<[2,4],f64>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f64>
  %mean64 = torch.aten.div.Scalar %1, %int4 : !torch.vtensor<[2,1],f64>, !torch.int -> !torch.vtensor<[2,1],f64>
  %2 = torch.aten.sub.Tensor %x64, %mean64, %float1 : !torch.vtensor<[2,4],f64>, !torch.vtensor<[2,1],f64>, !torch.float -> !torch.vtensor<[2,4],f64>
  %3 = torch.aten.mul.Tensor %2, %2 : !torch.vtensor<[2,4],f64>, !torch.vtensor<[2,4],f64> -> !torch.vtensor<[2,4],f64>
  %4 = torch.aten.sum.dim_IntList %3, %dims, %true, %none : !torch.vtensor<[2,4],f64>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f64>
  %5 = torch.aten.div.Scalar %4, %float3 : !torch.vtensor<[2,1],f64>, !torch.float -> !torch.vtensor<[2,1],f64>
  %var = torch.aten.to.dtype %5, %int6, %false, %false, %none : !torch.vtensor<[2,1],f64>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,1],f32>
  %6 = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,1],f32>, !torch.int -> !torch.vtensor<[2,4],f32>
  %7 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[2,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1],f32>
  %8 = torch.aten.sqrt %7 : !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,1],f32>
  %9 = torch.aten.div.Tensor %6, %8 : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,1],f32> -> !torch.vtensor<[2,4],f32>
  return %9 : !torch.vtensor<[2,4],f32>
}

// -----

// The mean is also returned (an intermediate with another use).
// CHECK-LABEL: func.func @layer_norm_mean_has_another_use
// CHECK-NOT:     cuvil.norm
// CHECK:         torch.aten.rsqrt
// CHECK-NOT:     cuvil.norm
// CHECK:         return
func.func @layer_norm_mean_has_another_use(%x: !torch.vtensor<[3,4],f32>) -> (!torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32>) {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %dims = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %x, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %mean = torch.aten.div.Scalar %0, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %c = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %1 = torch.aten.pow.Tensor_Scalar %c, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
  %2 = torch.aten.sum.dim_IntList %1, %dims, %true, %none : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3,1],f32>
  %var = torch.aten.div.Scalar %2, %int4 : !torch.vtensor<[3,1],f32>, !torch.int -> !torch.vtensor<[3,1],f32>
  %3 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[3,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[3,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,1],f32>
  %5 = torch.aten.mul.Tensor %c, %4 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32> -> !torch.vtensor<[3,4],f32>
  return %5, %mean : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,1],f32>
}

// -----

// The centering mean is over the last dim, the variance over the last two: no LayerNorm. It is
// an RMSNorm (over the last two dims) of the centered value, and fuses as that.
// CHECK-LABEL: func.func @layer_norm_mixed_dims
// CHECK-SAME:    (%[[X:[a-z0-9]+]]: !torch.vtensor<[2,3,4],f32>)
// CHECK:         %[[C:[0-9]+]] = torch.aten.sub.Tensor %[[X]], %{{.*}}, %int1
// CHECK-NEXT:    %[[Y:[0-9]+]] = "cuvil.norm"(%[[C]]) {{.*}}kind = "rms", normalized_shape = array<i64: 3, 4>
// CHECK-NEXT:    return %[[Y]]
func.func @layer_norm_mixed_dims(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,4],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int12 = torch.constant.int 12
  %int-1 = torch.constant.int -1
  %int-2 = torch.constant.int -2
  %true = torch.constant.bool true
  %none = torch.constant.none
  %eps = torch.constant.float 1.0E-5
  %last = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %two = torch.prim.ListConstruct %int-2, %int-1 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.sum.dim_IntList %x, %last, %true, %none : !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,3,1],f32>
  %mean = torch.aten.div.Scalar %0, %int4 : !torch.vtensor<[2,3,1],f32>, !torch.int -> !torch.vtensor<[2,3,1],f32>
  %c = torch.aten.sub.Tensor %x, %mean, %int1 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,3,1],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %1 = torch.aten.pow.Tensor_Scalar %c, %int2 : !torch.vtensor<[2,3,4],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
  %2 = torch.aten.sum.dim_IntList %1, %two, %true, %none : !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,1,1],f32>
  %var = torch.aten.div.Scalar %2, %int12 : !torch.vtensor<[2,1,1],f32>, !torch.int -> !torch.vtensor<[2,1,1],f32>
  %3 = torch.aten.add.Scalar %var, %eps, %int1 : !torch.vtensor<[2,1,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,1,1],f32>
  %4 = torch.aten.rsqrt %3 : !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[2,1,1],f32>
  %5 = torch.aten.mul.Tensor %c, %4 : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2,1,1],f32> -> !torch.vtensor<[2,3,4],f32>
  return %5 : !torch.vtensor<[2,3,4],f32>
}
