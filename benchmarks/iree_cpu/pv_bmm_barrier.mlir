func.func @pv(%p: tensor<12x128x?xf32>, %v: tensor<12x?x64xf32>) -> tensor<128x12x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x128x64xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<12x128x64xf32>) -> tensor<12x128x64xf32>
  %r = linalg.batch_matmul ins(%p, %v : tensor<12x128x?xf32>, tensor<12x?x64xf32>) outs(%f : tensor<12x128x64xf32>) -> tensor<12x128x64xf32>
  %rb = util.optimization_barrier %r : tensor<12x128x64xf32>
  %te = tensor.empty() : tensor<128x12x64xf32>
  %t = linalg.transpose ins(%rb : tensor<12x128x64xf32>) outs(%te : tensor<128x12x64xf32>) permutation = [1, 0, 2]
  return %t : tensor<128x12x64xf32>
}
