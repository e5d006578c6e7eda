// RUN: tcc-opt %s --split-input-file --tcc-fuse-attention --tcc-build-backward | FileCheck %s

// The backward pass of a fused attention is one tcc.attention_grad, which
// reads the forward op's operands, its result and its log-sum-exp, and gives
// the gradients of the query, the key (through the transpose that undid
// k^T) and the value; the probabilities are not stored.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[K:.+]] = tcc.transpose %[[KT:[a-z0-9]+]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK: %[[O:.+]], %[[LSE:.+]] = tcc.attention %[[Q:[a-z0-9]+]], %[[K]], %[[V:[a-z0-9]+]] {causal = true, scale = 5.000000e-01 : f64}
// CHECK-NOT: tcc.softmax
// CHECK: %[[D:.+]]:3 = tcc.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]], %{{.+}} {causal = true, scale = 5.000000e-01 : f64}
// CHECK: %[[DKT:.+]] = tcc.transpose %[[D]]#1 {perm = array<i64: 0, 1, 3, 2>}
// CHECK: return {{.*}}%[[D]]#0, %[[DKT]], %[[D]]#2
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

// -----

// Packed (q, k and v the thirds of one projection): the projection's
// gradient is the one result of tcc.attention_grad, which writes each
// third; no concatenation, no transposes.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[QKV:.+]] = tcc.matmul
// CHECK: %[[O:.+]], %[[LSE:.+]] = tcc.attention %[[QKV]], %[[QKV]], %[[QKV]] {causal = true, columns = array<i64: 0, 8, 16>, heads = 2 : i64, scale = 5.000000e-01 : f64}
// CHECK: %[[D:.+]] = tcc.attention_grad %[[QKV]], %[[QKV]], %[[QKV]], %[[O]], %[[LSE]], %{{.+}} {causal = true, columns = array<i64: 0, 8, 16>, heads = 2 : i64, scale = 5.000000e-01 : f64} : ({{.*}}) -> tensor<2x5x24xf32>
// CHECK-NOT: tcc.concat
// CHECK-NOT: tcc.transpose %[[D]]
// CHECK: tcc.matmul %[[D]]
func.func @main(%x: tensor<2x5x8xf32> {tcc.input = "x"}, %w: tensor<8x24xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %qkv = tcc.matmul %x, %w : (tensor<2x5x8xf32>, tensor<8x24xf32>) -> tensor<2x5x24xf32>
  %q3, %k3, %v3 = tcc.split %qkv {axis = 2 : i64, split = array<i64: 8, 8, 8>} : (tensor<2x5x24xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>)
  %q4 = tcc.reshape %q3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %q = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %k4 = tcc.reshape %k3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x4x5xf32>
  %v4 = tcc.reshape %v3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %v = tcc.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %s = tcc.matmul %q, %kt : (tensor<2x2x5x4xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x5x5xf32>
  %c = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %c : (tensor<2x2x5x5xf32>, tensor<f32>) -> tensor<2x2x5x5xf32>
  %mask = tcc.constant {value = dense<[[false, true, true, true, true], [false, false, true, true, true], [false, false, false, true, true], [false, false, false, false, true], [false, false, false, false, false]]> : tensor<5x5xi1>} : () -> tensor<5x5xi1>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %ninf, %t : (tensor<5x5xi1>, tensor<f32>, tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %p = tcc.softmax %u : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %o = tcc.matmul %p, %v : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
  %ot = tcc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x5x4xf32>) -> tensor<2x5x2x4xf32>
  %o3 = tcc.reshape %ot {shape = array<i64: 2, 5, 8>} : (tensor<2x5x2x4xf32>) -> tensor<2x5x8xf32>
  %l = tcc.reduce_sum %o3 {keepdims = 0 : i64} : (tensor<2x5x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
