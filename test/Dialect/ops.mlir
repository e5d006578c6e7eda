// RUN: tcc-opt %s --split-input-file | FileCheck %s
// Round trip: every op parses, verifies (its declared result types equal the
// inferred ones) and prints back in its declarative form.

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<2x3xi64>, %m: tensor<1x3xi1>) -> tensor<2x3xf32> {
  // CHECK: tcc.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = tcc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.sub
  %1 = tcc.sub %0, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.mul
  %2 = tcc.mul %1, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.div
  %3 = tcc.div %2, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // Pow alone may mix element types (the exponent's is free).
  // CHECK: tcc.pow %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  %4 = tcc.pow %3, %i : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  // CHECK: tcc.sqrt
  %5 = tcc.sqrt %4 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.neg
  %6 = tcc.neg %5 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.exp
  %7 = tcc.exp %6 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.log
  %8 = tcc.log %7 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.erf
  %9 = tcc.erf %8 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.tanh
  %10 = tcc.tanh %9 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.sigmoid
  %11 = tcc.sigmoid %10 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.relu
  %12 = tcc.relu %11 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.reciprocal
  %13 = tcc.reciprocal %12 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.abs
  %14 = tcc.abs %13 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.identity
  %15 = tcc.identity %14 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.equal %{{.*}}, %{{.*}} : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi1>
  %16 = tcc.equal %i, %i : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi1>
  // CHECK: tcc.less
  %17 = tcc.less %15, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  // CHECK: tcc.greater
  %18 = tcc.greater %15, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: tcc.and
  %19 = tcc.and %16, %m : (tensor<2x3xi1>, tensor<1x3xi1>) -> tensor<2x3xi1>
  // CHECK: tcc.or
  %20 = tcc.or %19, %17 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: tcc.not
  %21 = tcc.not %20 : (tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: tcc.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %22 = tcc.where %21, %15, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: tcc.cast %{{.*}} {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %23 = tcc.cast %22 {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %24 = tcc.cast %23 {to = f32} : (tensor<2x3xf16>) -> tensor<2x3xf32>
  return %24 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @linalg
func.func @linalg(%a: tensor<2x4x8x16xf32>, %w: tensor<16x32xf32>, %v: tensor<16xf32>, %x: tensor<8x16xf32>, %wt: tensor<32x16xf32>, %c: tensor<32xf32>) -> (tensor<2x4x8x32xf32>, tensor<2x4x8xf32>, tensor<8x32xf32>, tensor<32xf32>) {
  // CHECK: tcc.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8x16xf32>, tensor<16x32xf32>) -> tensor<2x4x8x32xf32>
  %0 = tcc.matmul %a, %w : (tensor<2x4x8x16xf32>, tensor<16x32xf32>) -> tensor<2x4x8x32xf32>
  // A 1-D right operand is a vector: its dimension disappears from the result.
  // CHECK: tcc.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8x16xf32>, tensor<16xf32>) -> tensor<2x4x8xf32>
  %1 = tcc.matmul %a, %v : (tensor<2x4x8x16xf32>, tensor<16xf32>) -> tensor<2x4x8xf32>
  // CHECK: tcc.gemm %{{.*}}, %{{.*}}, %{{.*}} {alpha = 5.000000e-01 : f32, transB = 1 : i64} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %2 = tcc.gemm %x, %wt, %c {transB = 1 : i64, alpha = 0.5 : f32} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  // CHECK: tcc.matmul %{{.*}}, %{{.*}} : (tensor<16xf32>, tensor<16x32xf32>) -> tensor<32xf32>
  %3 = tcc.matmul %v, %w : (tensor<16xf32>, tensor<16x32xf32>) -> tensor<32xf32>
  return %0, %1, %2, %3 : tensor<2x4x8x32xf32>, tensor<2x4x8xf32>, tensor<8x32xf32>, tensor<32xf32>
}

// -----

// CHECK-LABEL: func.func @normalization
func.func @normalization(%x: tensor<4x16x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>, %g2: tensor<16x32xf32>) -> (tensor<4x16x32xf32>, tensor<4x16x32xf32>, tensor<4x16x32xf32>, tensor<4x1x1xf32>) {
  // CHECK: tcc.softmax %{{.*}} : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  %0 = tcc.softmax %x : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  // CHECK: tcc.log_softmax %{{.*}} {axis = 1 : i64}
  %1 = tcc.log_softmax %x {axis = 1 : i64} : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  // CHECK: tcc.layer_normalization %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<4x16x32xf32>, tensor<4x16x1xf32>, tensor<4x16x1xf32>)
  %y, %mean, %rstd = tcc.layer_normalization %x, %g, %b : (tensor<4x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<4x16x32xf32>, tensor<4x16x1xf32>, tensor<4x16x1xf32>)
  // Normalizing from axis 1 keeps one statistic per batch row; no bias.
  // CHECK: tcc.layer_normalization %{{.*}}, %{{.*}} {axis = 1 : i64}
  %y2, %m2, %r2 = tcc.layer_normalization %x, %g2 {axis = 1 : i64} : (tensor<4x16x32xf32>, tensor<16x32xf32>) -> (tensor<4x16x32xf32>, tensor<4x1x1xf32>, tensor<4x1x1xf32>)
  return %0, %1, %y, %m2 : tensor<4x16x32xf32>, tensor<4x16x32xf32>, tensor<4x16x32xf32>, tensor<4x1x1xf32>
}

// -----

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<4x16x32xf32>) -> (tensor<4x16x1xf32>, tensor<f32>, tensor<4x32xf32>, tensor<4x16x32xf32>) {
  // CHECK: tcc.reduce_mean %{{.*}} {axes = array<i64: -1>} : (tensor<4x16x32xf32>) -> tensor<4x16x1xf32>
  %0 = tcc.reduce_mean %x {axes = array<i64: -1>} : (tensor<4x16x32xf32>) -> tensor<4x16x1xf32>
  // No axes: every axis.
  // CHECK: tcc.reduce_sum %{{.*}} {keepdims = 0 : i64} : (tensor<4x16x32xf32>) -> tensor<f32>
  %1 = tcc.reduce_sum %x {keepdims = 0 : i64} : (tensor<4x16x32xf32>) -> tensor<f32>
  // CHECK: tcc.reduce_sum %{{.*}} {axes = array<i64: 1>, keepdims = 0 : i64} : (tensor<4x16x32xf32>) -> tensor<4x32xf32>
  %2 = tcc.reduce_sum %x {axes = array<i64: 1>, keepdims = 0 : i64} : (tensor<4x16x32xf32>) -> tensor<4x32xf32>
  // No axes with noop_with_empty_axes: the identity.
  // CHECK: tcc.reduce_sum %{{.*}} {noop_with_empty_axes = 1 : i64} : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  %3 = tcc.reduce_sum %x {noop_with_empty_axes = 1 : i64} : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  return %0, %1, %2, %3 : tensor<4x16x1xf32>, tensor<f32>, tensor<4x32xf32>, tensor<4x16x32xf32>
}

// -----

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<4x16x32xf32>, %wte: tensor<65x32xf32>, %idx: tensor<4x16xi64>) {
  // CHECK: tcc.gather %{{.*}}, %{{.*}} : (tensor<65x32xf32>, tensor<4x16xi64>) -> tensor<4x16x32xf32>
  %0 = tcc.gather %wte, %idx : (tensor<65x32xf32>, tensor<4x16xi64>) -> tensor<4x16x32xf32>
  // CHECK: tcc.reshape %{{.*}} {shape = array<i64: 0, 16, 4, -1>} : (tensor<4x16x32xf32>) -> tensor<4x16x4x8xf32>
  %1 = tcc.reshape %x {shape = array<i64: 0, 16, 4, -1>} : (tensor<4x16x32xf32>) -> tensor<4x16x4x8xf32>
  // CHECK: tcc.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>} : (tensor<4x16x4x8xf32>) -> tensor<4x4x16x8xf32>
  %2 = tcc.transpose %1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<4x16x4x8xf32>) -> tensor<4x4x16x8xf32>
  // Without perm: reversed.
  // CHECK: tcc.transpose %{{.*}} : (tensor<4x16x32xf32>) -> tensor<32x16x4xf32>
  %3 = tcc.transpose %x : (tensor<4x16x32xf32>) -> tensor<32x16x4xf32>
  // CHECK: tcc.unsqueeze %{{.*}} {axes = array<i64: 0, -1>} : (tensor<4x16x32xf32>) -> tensor<1x4x16x32x1xf32>
  %4 = tcc.unsqueeze %x {axes = array<i64: 0, -1>} : (tensor<4x16x32xf32>) -> tensor<1x4x16x32x1xf32>
  // CHECK: tcc.squeeze %{{.*}} : (tensor<1x4x16x32x1xf32>) -> tensor<4x16x32xf32>
  %5 = tcc.squeeze %4 : (tensor<1x4x16x32x1xf32>) -> tensor<4x16x32xf32>
  // CHECK: tcc.squeeze %{{.*}} {axes = array<i64: 0>} : (tensor<1x4x16x32x1xf32>) -> tensor<4x16x32x1xf32>
  %6 = tcc.squeeze %4 {axes = array<i64: 0>} : (tensor<1x4x16x32x1xf32>) -> tensor<4x16x32x1xf32>
  // ONNX clamping: an end past the axis clamps; a negative step walks back.
  // CHECK: tcc.slice %{{.*}} {axes = array<i64: 1, 2>, ends = array<i64: 9223372036854775807, 0>, starts = array<i64: 8, -1>, steps = array<i64: 1, -2>} : (tensor<4x16x32xf32>) -> tensor<4x8x16xf32>
  %7 = tcc.slice %x {starts = array<i64: 8, -1>, ends = array<i64: 9223372036854775807, 0>, axes = array<i64: 1, 2>, steps = array<i64: 1, -2>} : (tensor<4x16x32xf32>) -> tensor<4x8x16xf32>
  // CHECK: tcc.split %{{.*}} {axis = 2 : i64, split = array<i64: 8, 24>} : (tensor<4x16x32xf32>) -> (tensor<4x16x8xf32>, tensor<4x16x24xf32>)
  %8:2 = tcc.split %x {axis = 2 : i64, split = array<i64: 8, 24>} : (tensor<4x16x32xf32>) -> (tensor<4x16x8xf32>, tensor<4x16x24xf32>)
  // CHECK: tcc.concat %{{.*}}, %{{.*}} {axis = -1 : i64} : (tensor<4x16x24xf32>, tensor<4x16x8xf32>) -> tensor<4x16x32xf32>
  %9 = tcc.concat %8#1, %8#0 {axis = -1 : i64} : (tensor<4x16x24xf32>, tensor<4x16x8xf32>) -> tensor<4x16x32xf32>
  // CHECK: tcc.expand %{{.*}} {shape = array<i64: 2, 1, 1, 1>} : (tensor<4x16x32xf32>) -> tensor<2x4x16x32xf32>
  %10 = tcc.expand %x {shape = array<i64: 2, 1, 1, 1>} : (tensor<4x16x32xf32>) -> tensor<2x4x16x32xf32>
  return
}

// -----

// CHECK-LABEL: func.func @constants
func.func @constants(%x: tensor<4x16x32xf32>) -> (tensor<3xi64>, tensor<2xi64>, tensor<2x2xf32>, tensor<3xi64>) {
  // CHECK: tcc.constant {value = dense<[4, 16, 32]> : tensor<3xi64>} : () -> tensor<3xi64>
  %0 = tcc.constant {value = dense<[4, 16, 32]> : tensor<3xi64>} : () -> tensor<3xi64>
  // CHECK: tcc.shape %{{.*}} {start = 1 : i64} : (tensor<4x16x32xf32>) -> tensor<2xi64>
  %1 = tcc.shape %x {start = 1 : i64} : (tensor<4x16x32xf32>) -> tensor<2xi64>
  // CHECK: tcc.constant_of_shape {shape = array<i64: 2, 2>, value = dense<1.000000e+00> : tensor<1xf32>} : () -> tensor<2x2xf32>
  %2 = tcc.constant_of_shape {shape = array<i64: 2, 2>, value = dense<1.0> : tensor<1xf32>} : () -> tensor<2x2xf32>
  // CHECK: tcc.shape %{{.*}} : (tensor<4x16x32xf32>) -> tensor<3xi64>
  %3 = tcc.shape %x : (tensor<4x16x32xf32>) -> tensor<3xi64>
  return %0, %1, %2, %3 : tensor<3xi64>, tensor<2xi64>, tensor<2x2xf32>, tensor<3xi64>
}

// -----

// CHECK-LABEL: func.func @training
func.func @training(%x: tensor<4x8xf32>, %rng: tensor<2xi64>, %logits: tensor<8x5x3xf32>, %labels: tensor<8x3xi64>, %w: tensor<5xf32>) -> (tensor<4x8xf32>, tensor<f32>, tensor<8x3xf32>) {
  // CHECK: tcc.dropout %{{.*}} {ratio = 0.000000e+00 : f32, training = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %y, %mask = tcc.dropout %x {ratio = 0.0 : f32, training = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  // CHECK: tcc.random_keep %{{.*}} {ratio = 2.500000e-01 : f32, shape = array<i64: 4, 8>, stream = 3 : i64} : (tensor<2xi64>) -> tensor<4x8xi1>
  %keep = tcc.random_keep %rng {ratio = 0.25 : f32, shape = array<i64: 4, 8>, stream = 3 : i64} : (tensor<2xi64>) -> tensor<4x8xi1>
  // CHECK: tcc.softmax_cross_entropy_loss %{{.*}}, %{{.*}} {ignore_index = -100 : i64} : (tensor<8x5x3xf32>, tensor<8x3xi64>) -> (tensor<f32>, tensor<8x5x3xf32>)
  %loss, %logp = tcc.softmax_cross_entropy_loss %logits, %labels {ignore_index = -100 : i64} : (tensor<8x5x3xf32>, tensor<8x3xi64>) -> (tensor<f32>, tensor<8x5x3xf32>)
  // CHECK: tcc.softmax_cross_entropy_loss %{{.*}}, %{{.*}}, %{{.*}} {reduction = "none"} : (tensor<8x5x3xf32>, tensor<8x3xi64>, tensor<5xf32>) -> (tensor<8x3xf32>, tensor<8x5x3xf32>)
  %l2, %lp2 = tcc.softmax_cross_entropy_loss %logits, %labels, %w {reduction = "none"} : (tensor<8x5x3xf32>, tensor<8x3xi64>, tensor<5xf32>) -> (tensor<8x3xf32>, tensor<8x5x3xf32>)
  return %y, %loss, %l2 : tensor<4x8xf32>, tensor<f32>, tensor<8x3xf32>
}

// -----

// CHECK-LABEL: func.func @attention
// CHECK: %[[O:.+]], %[[L:.+]] = tcc.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
// CHECK: tcc.attention_grad %arg0, %arg1, %arg2, %[[O]], %[[L]], %arg3 {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5xf32>, tensor<2x3x5x4xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>)
func.func @attention(%q: tensor<2x3x5x8xf32>, %k: tensor<2x3x7x8xf32>, %v: tensor<2x3x7x4xf32>, %g: tensor<2x3x5x4xf32>) {
  %o, %l = tcc.attention %q, %k, %v {scale = 0.125 : f64, causal = true} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  %dq, %dk, %dv = tcc.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.125 : f64, causal = true} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5xf32>, tensor<2x3x5x4xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>)
  return
}

// -----

// CHECK-LABEL: func.func @attention_bias
// CHECK: %[[O:.+]], %[[L:.+]] = tcc.attention %arg0, %arg0, %arg0, %arg1 {scale = 1.000000e+00 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x1x1x5xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5xf32>)
// CHECK: tcc.attention_grad %arg0, %arg0, %arg0, %[[O]], %[[L]], %arg0, %arg1 {scale = 1.000000e+00 : f64}
func.func @attention_bias(%q: tensor<2x3x5x8xf32>, %m: tensor<2x1x1x5xf32>) {
  %o, %l = tcc.attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x1x1x5xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5xf32>)
  %dq, %dk, %dv = tcc.attention_grad %q, %q, %q, %o, %l, %q, %m {scale = 1.0 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5xf32>, tensor<2x3x5x8xf32>, tensor<2x1x1x5xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>)
  return
}

// -----

// Dropout on the probabilities: the random state after the bias.
// CHECK-LABEL: func.func @attention_dropout
// CHECK: %[[O:.+]], %[[L:.+]] = tcc.attention %arg0, %arg0, %arg0, %arg1 rng %arg2 {dropout = 1.000000e-01 : f32, dropout_stream = 2 : i64, scale = 1.000000e+00 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x1x1x5xf32>, tensor<2xi64>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5xf32>)
// CHECK: tcc.attention_grad %arg0, %arg0, %arg0, %[[O]], %[[L]], %arg0 rng %arg2 {dropout = 1.000000e-01 : f32, dropout_stream = 2 : i64, scale = 1.000000e+00 : f64}
func.func @attention_dropout(%q: tensor<2x3x5x8xf32>, %m: tensor<2x1x1x5xf32>, %rng: tensor<2xi64>) {
  %o, %l = tcc.attention %q, %q, %q, %m rng %rng {scale = 1.0 : f64, dropout = 0.1 : f32, dropout_stream = 2 : i64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x1x1x5xf32>, tensor<2xi64>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5xf32>)
  %dq, %dk, %dv = tcc.attention_grad %q, %q, %q, %o, %l, %q rng %rng {scale = 1.0 : f64, dropout = 0.1 : f32, dropout_stream = 2 : i64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5xf32>, tensor<2x3x5x8xf32>, tensor<2xi64>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>)
  return
}

// -----

// Token-major: [B, S, H*D] operands, 2 heads of 4 (query, key) and 3 (value).
// CHECK-LABEL: func.func @attention_token_major
// CHECK: %[[O:.+]], %[[L:.+]] = tcc.attention %arg0, %arg1, %arg2 {heads = 2 : i64, scale = 5.000000e-01 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x6xf32>) -> (tensor<2x5x6xf32>, tensor<2x2x5xf32>)
// CHECK: %{{.+}}:3 = tcc.attention_grad %arg0, %arg1, %arg2, %[[O]], %[[L]], %arg3 {heads = 2 : i64, scale = 5.000000e-01 : f64} : ({{.*}}) -> (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x6xf32>)
func.func @attention_token_major(%q: tensor<2x5x8xf32>, %k: tensor<2x7x8xf32>, %v: tensor<2x7x6xf32>, %g: tensor<2x5x6xf32>) {
  %o, %l = tcc.attention %q, %k, %v {heads = 2 : i64, scale = 0.5 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x6xf32>) -> (tensor<2x5x6xf32>, tensor<2x2x5xf32>)
  %dq, %dk, %dv = tcc.attention_grad %q, %k, %v, %o, %l, %g {heads = 2 : i64, scale = 0.5 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x6xf32>, tensor<2x5x6xf32>, tensor<2x2x5xf32>, tensor<2x5x6xf32>) -> (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x6xf32>)
  return
}

// -----

// Packed: one [B, S, 3*H*D] operand (value first here), one gradient.
// CHECK-LABEL: func.func @attention_packed
// CHECK: %[[O:.+]], %[[L:.+]] = tcc.attention %arg0, %arg0, %arg0 {causal = true, columns = array<i64: 8, 16, 0>, heads = 2 : i64, scale = 5.000000e-01 : f64} : (tensor<2x5x24xf32>, tensor<2x5x24xf32>, tensor<2x5x24xf32>) -> (tensor<2x5x8xf32>, tensor<2x2x5xf32>)
// CHECK: %{{.+}} = tcc.attention_grad %arg0, %arg0, %arg0, %[[O]], %[[L]], %arg1 {causal = true, columns = array<i64: 8, 16, 0>, heads = 2 : i64, scale = 5.000000e-01 : f64} : ({{.*}}) -> tensor<2x5x24xf32>
func.func @attention_packed(%qkv: tensor<2x5x24xf32>, %g: tensor<2x5x8xf32>) {
  %o, %l = tcc.attention %qkv, %qkv, %qkv {heads = 2 : i64, columns = array<i64: 8, 16, 0>, scale = 0.5 : f64, causal = true} : (tensor<2x5x24xf32>, tensor<2x5x24xf32>, tensor<2x5x24xf32>) -> (tensor<2x5x8xf32>, tensor<2x2x5xf32>)
  %d = tcc.attention_grad %qkv, %qkv, %qkv, %o, %l, %g {heads = 2 : i64, columns = array<i64: 8, 16, 0>, scale = 0.5 : f64, causal = true} : (tensor<2x5x24xf32>, tensor<2x5x24xf32>, tensor<2x5x24xf32>, tensor<2x5x8xf32>, tensor<2x2x5xf32>, tensor<2x5x8xf32>) -> tensor<2x5x24xf32>
  return
}

// -----

// CHECK-LABEL: func.func @fusion_kinds
// CHECK: tcc.fusion reduction(%{{.+}}) : (tensor<4x8xf32>) -> tensor<4x1xf32> {
// CHECK: tcc.fusion gemm(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> {
func.func @fusion_kinds(%a: tensor<4x8xf32>, %b: tensor<8x8xf32>) -> (tensor<4x1xf32>, tensor<4x8xf32>) {
  %r = tcc.fusion reduction(%a) : (tensor<4x8xf32>) -> tensor<4x1xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %e = tcc.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %s = tcc.reduce_sum %e {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    tcc.yield %s : tensor<4x1xf32>
  }
  %g = tcc.fusion gemm(%a, %b) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<8x8xf32>):
    %m = tcc.matmul %x, %y : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    tcc.yield %m : tensor<4x8xf32>
  }
  return %r, %g : tensor<4x1xf32>, tensor<4x8xf32>
}

// -----

// The memory plan's typed layout parses and prints back.
// CHECK-LABEL: func.func @planned
// CHECK-SAME: tcc.layout = #tcc.layout<arena_bytes = 256, planned_bytes = 256, device_reserve_bytes = 0, params = [], grads = [], state = [], inputs = [0], results = [64], param_bytes = 0, grad_bytes = 0, state_bytes = 0, input_bytes = 64, output_bytes = 64, temporary_bytes = 128, temporary_bytes_unshared = 256, saved_activation_bytes = 0, seed = -1, rng = -1, peak_live_bytes = 128, peak_op = "tcc.exp", peak_values = [{bytes = 64 : i64, kept_for_backward = false, op = "tcc.exp"}], shadows = [], shadow_bytes = 0, workspace = -1, workspace_bytes = 0>
func.func @planned(%x: tensor<16xf32> {tcc.input = "x"}) -> (tensor<16xf32> {tcc.output = "y"}) attributes {tcc.layout = #tcc.layout<arena_bytes = 256, planned_bytes = 256, device_reserve_bytes = 0, params = [], grads = [], state = [], inputs = [0], results = [64], param_bytes = 0, grad_bytes = 0, state_bytes = 0, input_bytes = 64, output_bytes = 64, temporary_bytes = 128, temporary_bytes_unshared = 256, saved_activation_bytes = 0, seed = -1, rng = -1, peak_live_bytes = 128, peak_op = "tcc.exp", peak_values = [{bytes = 64 : i64, kept_for_backward = false, op = "tcc.exp"}], shadows = [], shadow_bytes = 0, workspace = -1, workspace_bytes = 0>} {
  %y = tcc.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// CHECK: module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>}
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
}

// -----

// Activation swapping (tcc-swap-activations): out, the wait for it, back,
// the wait for that.
// CHECK-LABEL: func.func @swaps
// CHECK: %[[H:.+]] = tcc.swap_out %[[X:.+]] swap 3 : tensor<4x8xf32>
// CHECK-NEXT: tcc.swap_wait %[[X]] swap 3 : tensor<4x8xf32>
// CHECK-NEXT: %[[Y:.+]] = tcc.swap_in %[[H]] swap 3 : tensor<4x8xf32>
// CHECK-NEXT: tcc.swap_wait %[[Y]] swap 3 : tensor<4x8xf32>
func.func @swaps(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %h = tcc.swap_out %x swap 3 : tensor<4x8xf32>
  tcc.swap_wait %x swap 3 : tensor<4x8xf32>
  %y = tcc.swap_in %h swap 3 : tensor<4x8xf32>
  tcc.swap_wait %y swap 3 : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
