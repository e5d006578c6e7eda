// RUN: tcc-opt %s --tcc-fuse-attention --tcc-build-backward | FileCheck %s

// The backward pass of a fused attention is one tcc.attention_grad, which
// reads the forward op's operands, its result and its log-sum-exp, and gives
// the gradients of the query, the key (through the transpose that undid
// k^T) and the value; the probabilities are not stored.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[K:.+]] = tcc.transpose %[[KT:[a-z0-9]+]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK: %[[O:.+]], %[[LSE:.+]] = tcc.attention %[[Q:[a-z0-9]+]], %[[K]], %[[V:[a-z0-9]+]] {causal = true, scale = 5.000000e-01 : f64}
// CHECK-NOT: tcc.softmax
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = tcc.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]], %{{.+}} {causal = true, scale = 5.000000e-01 : f64}
// CHECK: %[[DKT:.+]] = tcc.transpose %[[DK]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK: return {{.*}}%[[DQ]], %[[DKT]], %[[DV]]
func.func @main(%q: tensor<1x2x4x8xf32> {tcc.param = "q"}, %kt: tensor<1x2x8x4xf32> {tcc.param = "kt"},
                %v: tensor<1x2x4x8xf32> {tcc.param = "v"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %s = tcc.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %c, %s : (tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %mask = tcc.constant {value = dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>} : () -> tensor<4x4xi1>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %ninf, %t : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tcc.softmax %u : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = tcc.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %l = tcc.reduce_sum %o {keepdims = 0 : i64} : (tensor<1x2x4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
