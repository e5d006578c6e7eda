// RUN: tcc-opt %s --split-input-file --tcc-mixed-precision | FileCheck %s

// Under the CUDA target's mixed precision a reduction's result is fp32; a
// GEMM reads fp16, so the pooled value gets an explicit cast (stored fp16).
// A parameter's fp16 working copy needs none.
// CHECK-LABEL: func.func @pool_then_linear
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x8x16xf32> {tcc.input = "x"}, %[[W:[a-z0-9]+]]: tensor<16x3xf32> {tcc.param = "w"})
// CHECK: %[[P:.+]] = tcc.reduce_mean %[[X]]
// CHECK: %[[H:.+]] = tcc.cast %[[P]] {to = f32} : (tensor<4x1x16xf32>) -> tensor<4x1x16xf32>
// CHECK: tcc.matmul %[[H]], %[[W]]
func.func @pool_then_linear(%x: tensor<4x8x16xf32> {tcc.input = "x"}, %w: tensor<16x3xf32> {tcc.param = "w"}) -> tensor<4x1x3xf32> {
  %p = tcc.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x8x16xf32>) -> tensor<4x1x16xf32>
  %y = tcc.matmul %p, %w : (tensor<4x1x16xf32>, tensor<16x3xf32>) -> tensor<4x1x3xf32>
  return %y : tensor<4x1x3xf32>
}

// -----

// A view of an fp32 value is fp32 too; an fp16 activation is left alone.
// CHECK-LABEL: func.func @view_of_reduction
// CHECK: %[[R:.+]] = tcc.reshape
// CHECK: %[[H:.+]] = tcc.cast %[[R]]
// CHECK: tcc.matmul %[[H]], %{{.+}}
// CHECK: %[[T:.+]] = tcc.tanh
// CHECK-NOT: tcc.cast
// CHECK: tcc.matmul %[[T]]
func.func @view_of_reduction(%x: tensor<4x16xf32>, %w: tensor<4x3xf32>) -> (tensor<1x3xf32>, tensor<4x3xf32>) {
  %s = tcc.reduce_sum %x {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %r = tcc.reshape %s {shape = array<i64: 1, 4>} : (tensor<4x1xf32>) -> tensor<1x4xf32>
  %y = tcc.matmul %r, %w : (tensor<1x4xf32>, tensor<4x3xf32>) -> tensor<1x3xf32>
  %t = tcc.tanh %x : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %tt = tcc.transpose %t {perm = array<i64: 1, 0>} : (tensor<4x16xf32>) -> tensor<16x4xf32>
  %z = tcc.matmul %t, %tt : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
  %zz = tcc.matmul %z, %w : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %y, %zz : tensor<1x3xf32>, tensor<4x3xf32>
}

// -----

// The attention kernels read fp16 query, key, value, output and output
// gradient, and the fp32 log-sum-exp as it is: an fp32 value (here a
// reduction's result) as the value gets a cast, the log-sum-exp does not.
// CHECK-LABEL: func.func @attention
// CHECK: %[[V:.+]] = tcc.reduce_sum
// CHECK: %[[H:.+]] = tcc.cast %[[V]] {to = f32}
// CHECK: %[[O:.+]], %[[L:.+]] = tcc.attention %{{.+}}, %{{.+}}, %[[H]]
// CHECK: %[[H2:.+]] = tcc.cast %[[V]] {to = f32}
// CHECK-NOT: tcc.cast
// CHECK: tcc.attention_grad %{{.+}}, %{{.+}}, %[[H2]], %[[O]], %[[L]], %{{.+}} {causal = true, scale
func.func @attention(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %x: tensor<1x2x4x8x3xf32>, %g: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %v = tcc.reduce_sum %x {axes = array<i64: 4>, keepdims = 0 : i64} : (tensor<1x2x4x8x3xf32>) -> tensor<1x2x4x8xf32>
  %o, %l = tcc.attention %q, %k, %v {scale = 0.5 : f64, causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %dq, %dk, %dv = tcc.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.5 : f64, causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return %o, %dq : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}
