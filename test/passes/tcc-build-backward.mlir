// RUN: tcc-opt %s --split-input-file --tcc-build-backward --verify-diagnostics | FileCheck %s
// The backward graph, rule by rule (before canonicalization), and what the
// pass leaves alone. Every test function ends in reduce_sum, whose rule
// broadcasts the seed (the step's last argument, d(loss), which the runtime
// sets to loss scale / accumulation) back over its input: %[[G]] below.

// Add with a broadcast operand: the broadcast dimension is summed back.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: %[[SEED:[a-z0-9]+]]: tensor<f32> {tcc.loss_seed})
// CHECK-SAME: -> (tensor<f32> {tcc.output = "loss"}, tensor<2x3xf32> {tcc.grad = "a"}, tensor<3xf32> {tcc.grad = "b"})
// CHECK: %[[R:.+]] = tcc.reshape %[[SEED]] {shape = array<i64: 1, 1>}
// CHECK: %[[G:.+]] = tcc.expand %[[R]] {shape = array<i64: 2, 3>}
// CHECK: %[[SUM:.+]] = tcc.reduce_sum %[[G]] {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<1x3xf32>
// CHECK: %[[GB:.+]] = tcc.reshape %[[SUM]] {shape = array<i64: 3>}
// CHECK: return %{{.+}}, %[[G]], %[[GB]]
func.func @add_broadcast(%a: tensor<2x3xf32> {tcc.param = "a"}, %b: tensor<3xf32> {tcc.param = "b"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<2x3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Mul: each operand's gradient is the other times the incoming one; the
// [2, 1] operand sums over the broadcast axis 1, keeping it.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[A:.+]]: tensor<2x3xf32> {tcc.param = "a"}, %[[B:.+]]: tensor<2x1xf32> {tcc.param = "b"}, %{{[a-z0-9]+}}: tensor<f32> {tcc.loss_seed})
// CHECK: %[[G:.+]] = tcc.expand
// CHECK: %[[GA:.+]] = tcc.mul %[[G]], %[[B]]
// CHECK: %[[P:.+]] = tcc.mul %[[G]], %[[A]]
// CHECK: %[[GB:.+]] = tcc.reduce_sum %[[P]] {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK: return %{{.+}}, %[[GA]], %[[GB]]
func.func @mul_broadcast(%a: tensor<2x3xf32> {tcc.param = "a"}, %b: tensor<2x1xf32> {tcc.param = "b"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.mul %a, %b : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<2x3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Batched MatMul with a shared weight (a Linear layer): dW = x^T G as one
// GEMM over all rows, [8, 8] x [8, 16], not a batched product summed over the
// batch. The input x gets no gradient (it is not a parameter).
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x8xf32> {tcc.input = "x"}, %[[W:.+]]: tensor<8x16xf32> {tcc.param = "w"}, %{{[a-z0-9]+}}: tensor<f32> {tcc.loss_seed})
// CHECK-SAME: -> (tensor<f32> {tcc.output = "loss"}, tensor<8x16xf32> {tcc.grad = "w"})
// CHECK: %[[G:.+]] = tcc.expand %{{.+}} {shape = array<i64: 2, 4, 16>}
// CHECK: %[[G2:.+]] = tcc.reshape %[[G]] {shape = array<i64: 8, 16>}
// CHECK: %[[X2:.+]] = tcc.reshape %[[X]] {shape = array<i64: 8, 8>}
// CHECK: %[[XT:.+]] = tcc.transpose %[[X2]] {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[DW:.+]] = tcc.matmul %[[XT]], %[[G2]] : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NOT: tcc.reduce_sum
// CHECK: return %{{.+}}, %[[DW]]
func.func @matmul_batched(%x: tensor<2x4x8xf32> {tcc.input = "x"}, %w: tensor<8x16xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<2x4x16xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Gemm with transB: dB = (A^T G)^T, dC = G summed to C's shape.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[X:.+]]: tensor<8x16xf32> {tcc.input = "x"}
// CHECK: %[[G:.+]] = tcc.expand %{{.+}} {shape = array<i64: 8, 32>}
// CHECK: %[[XT:.+]] = tcc.transpose %[[X]] {perm = array<i64: 1, 0>}
// CHECK: %[[P:.+]] = tcc.matmul %[[XT]], %[[G]] : (tensor<16x8xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
// CHECK: %[[DW:.+]] = tcc.transpose %[[P]] {perm = array<i64: 1, 0>} : (tensor<16x32xf32>) -> tensor<32x16xf32>
// CHECK: %[[S:.+]] = tcc.reduce_sum %[[G]] {axes = array<i64: 0>} : (tensor<8x32xf32>) -> tensor<1x32xf32>
// CHECK: %[[DB:.+]] = tcc.reshape %[[S]] {shape = array<i64: 32>}
// CHECK: return %{{.+}}, %[[DW]], %[[DB]]
func.func @gemm(%x: tensor<8x16xf32> {tcc.input = "x"}, %w: tensor<32x16xf32> {tcc.param = "w"}, %b: tensor<32xf32> {tcc.param = "b"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.gemm %x, %w, %b {transB = 1 : i64} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<8x32xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// A tied embedding: the table is gathered and also transposed into the
// output projection; the two contributions are added.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[WTE:.+]]: tensor<10x4xf32> {tcc.param = "wte"}, %[[IDX:.+]]: tensor<2x3xi64> {tcc.input = "idx"}, %{{[a-z0-9]+}}: tensor<f32> {tcc.loss_seed})
// The gradient through the transposed use (a transpose of the matmul's
// operand gradient, one GEMM over all rows), then the gather's, added.
// CHECK: tcc.matmul %{{.+}}, %{{.+}} : (tensor<4x6xf32>, tensor<6x10xf32>) -> tensor<4x10xf32>
// CHECK-NEXT: %[[VIA_T:.+]] = tcc.transpose %{{.+}} {perm = array<i64: 1, 0>} : (tensor<4x10xf32>) -> tensor<10x4xf32>
// CHECK-NEXT: %[[VIA_G:.+]] = tcc.gather_grad %{{.+}}, %[[IDX]] {shape = array<i64: 10, 4>} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<10x4xf32>
// CHECK-NEXT: %[[SUM:.+]] = tcc.add %[[VIA_T]], %[[VIA_G]]
// CHECK: return %{{.+}}, %[[SUM]]
func.func @embedding_tied(%wte: tensor<10x4xf32> {tcc.param = "wte"}, %idx: tensor<2x3xi64> {tcc.input = "idx"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.gather %wte, %idx : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %t = tcc.transpose %wte {perm = array<i64: 1, 0>} : (tensor<10x4xf32>) -> tensor<4x10xf32>
  %1 = tcc.matmul %0, %t : (tensor<2x3x4xf32>, tensor<4x10xf32>) -> tensor<2x3x10xf32>
  %2 = tcc.reduce_sum %1 {keepdims = 0 : i64} : (tensor<2x3x10xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// Softmax: y * (g - sum(g * y)) over the axis, from the forward result.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[Y:.+]] = tcc.softmax
// CHECK: %[[G:.+]] = tcc.expand
// CHECK: %[[GY:.+]] = tcc.mul %[[G]], %[[Y]]
// CHECK: %[[DOT:.+]] = tcc.reduce_sum %[[GY]] {axes = array<i64: 1>} : (tensor<2x5xf32>) -> tensor<2x1xf32>
// CHECK: %[[D:.+]] = tcc.sub %[[G]], %[[DOT]]
// CHECK: %[[DX:.+]] = tcc.mul %[[Y]], %[[D]]
// CHECK: return %{{.+}}, %[[DX]]
func.func @softmax(%x: tensor<2x5xf32> {tcc.param = "x"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.softmax %x : (tensor<2x5xf32>) -> tensor<2x5xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<2x5xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// LayerNormalization reuses the forward statistics; the scale and bias
// gradients sum over the rows.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[Y:.+]], %[[MEAN:.+]], %[[RSTD:.+]] = tcc.layer_normalization
// CHECK: %[[G:.+]] = tcc.expand
// CHECK: %[[C:.+]] = tcc.sub %{{.+}}, %[[MEAN]]
// CHECK: %[[XHAT:.+]] = tcc.mul %[[C]], %[[RSTD]]
// CHECK: tcc.reduce_mean %{{.+}} {axes = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2x1xf32>
// CHECK: %[[DX:.+]] = tcc.mul %[[RSTD]], %{{.+}} : (tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[GX:.+]] = tcc.mul %[[G]], %[[XHAT]]
// CHECK: %[[SG:.+]] = tcc.reduce_sum %[[GX]] {axes = array<i64: 0>}
// CHECK: %[[DG:.+]] = tcc.reshape %[[SG]] {shape = array<i64: 4>}
// CHECK: %[[SB:.+]] = tcc.reduce_sum %[[G]] {axes = array<i64: 0>}
// CHECK: %[[DB:.+]] = tcc.reshape %[[SB]] {shape = array<i64: 4>}
// CHECK: return %{{.+}}, %[[DG]], %[[DB]]
func.func @layernorm(%x: tensor<2x4xf32> {tcc.input = "x"}, %g: tensor<4xf32> {tcc.param = "g"}, %b: tensor<4xf32> {tcc.param = "b"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %y, %m, %r = tcc.layer_normalization %x, %g, %b : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %1 = tcc.reduce_sum %y {keepdims = 0 : i64} : (tensor<2x4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// The loss op: its gradient op reads the forward log-probabilities.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: %[[SEED:[a-z0-9]+]]: tensor<f32> {tcc.loss_seed})
// CHECK: %[[LOSS:.+]], %[[LOGP:.+]] = tcc.softmax_cross_entropy_loss %{{.+}}, %[[L:[a-z0-9]+]] {ignore_index = -100 : i64}
// CHECK: %[[D:.+]] = tcc.softmax_cross_entropy_loss_grad %[[SEED]], %[[LOGP]], %[[L]] {ignore_index = -100 : i64}
// CHECK: return %[[LOSS]], %[[D]]
func.func @sce(%s: tensor<4x5xf32> {tcc.param = "s"}, %l: tensor<4xi64> {tcc.input = "l"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %o, %lp = tcc.softmax_cross_entropy_loss %s, %l {ignore_index = -100 : i64} : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  return %o : tensor<f32>
}

// -----

// Concat splits the gradient back with slices; Split concatenates it, with
// zeros for the unused piece; Slice scatters it into the input's shape.
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[G:.+]] = tcc.expand %{{.+}} {shape = array<i64: 2, 8>}
// CHECK: %[[S0:.+]] = tcc.slice %[[G]] {axes = array<i64: 1>, ends = array<i64: 4>, starts = array<i64: 0>}
// CHECK: %[[S1:.+]] = tcc.slice %[[G]] {axes = array<i64: 1>, ends = array<i64: 8>, starts = array<i64: 4>}
// CHECK: %[[SUM:.+]] = tcc.add %[[S0]], %[[S1]]
// CHECK: %[[ZERO:.+]] = tcc.constant {value = dense<0.000000e+00> : tensor<2x2xf32>}
// CHECK: %[[CAT:.+]] = tcc.concat %[[ZERO]], %[[SUM]] {axis = 1 : i64}
// CHECK: %[[DX:.+]] = tcc.slice_grad %[[CAT]] {ends = array<i64: 3>, shape = array<i64: 4, 6>, starts = array<i64: 1>} : (tensor<2x6xf32>) -> tensor<4x6xf32>
// CHECK: return %{{.+}}, %[[DX]]
func.func @slice_split_concat(%x: tensor<4x6xf32> {tcc.param = "x"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %s = tcc.slice %x {starts = array<i64: 1>, ends = array<i64: 3>} : (tensor<4x6xf32>) -> tensor<2x6xf32>
  %p:2 = tcc.split %s {axis = 1 : i64, split = array<i64: 2, 4>} : (tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x4xf32>)
  %c = tcc.concat %p#1, %p#1 {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %1 = tcc.reduce_sum %c {keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Leaves alone: a frozen parameter gets no gradient result, and the
// subgraph that depends only on inputs and frozen values is not
// differentiated (no rule is called for the exp of the input).
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: -> (tensor<f32> {tcc.output = "loss"}, tensor<3xf32> {tcc.grad = "w"})
// CHECK: tcc.exp %
// CHECK-NOT: tcc.exp %
// CHECK: return
func.func @frozen(%w: tensor<3xf32> {tcc.param = "w"}, %f: tensor<3xf32> {tcc.param = "f", tcc.frozen}, %x: tensor<3xf32> {tcc.input = "x"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %e = tcc.exp %x : (tensor<3xf32>) -> tensor<3xf32>
  %m = tcc.mul %e, %f : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %0 = tcc.mul %m, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// A parameter that does not reach the loss: warned about, zero gradient.
// The other outputs stay, after the loss.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: -> (tensor<f32> {tcc.output = "loss"}, tensor<3xf32> {tcc.output = "aux"}, tensor<3xf32> {tcc.grad = "w"}, tensor<2xf32> {tcc.grad = "unused"})
// CHECK: %[[Z:.+]] = tcc.constant {value = dense<0.000000e+00> : tensor<2xf32>}
// CHECK: return %{{.+}}, %{{.+}}, %{{.+}}, %[[Z]]
// expected-warning @+1 {{parameter "unused" does not reach the loss; its gradient is zero}}
func.func @unused(%w: tensor<3xf32> {tcc.param = "w"}, %u: tensor<2xf32> {tcc.param = "unused"}) -> (tensor<3xf32> {tcc.output = "aux"}, tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.exp %w : (tensor<3xf32>) -> tensor<3xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<3xf32>) -> tensor<f32>
  return %0, %1 : tensor<3xf32>, tensor<f32>
}

// -----

// GELU's rule is its own gradient op.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32> {tcc.param = "x"}, %{{[a-z0-9]+}}: tensor<f32> {tcc.loss_seed})
// CHECK: %[[G:.+]] = tcc.expand
// CHECK: %[[D:.+]] = tcc.gelu_grad %[[G]], %[[X]] {approximate = "tanh"}
// CHECK: return %{{.+}}, %[[D]]
func.func @gelu(%x: tensor<4xf32> {tcc.param = "x"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.gelu %x {approximate = "tanh"} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Reciprocal: d(1/x)/dx = -r^2 (r = 1/x), multiplied into the incoming
// gradient one r at a time. r * r on its own is 1/x^2, a temporary that
// overflows fp16 (65504) for |x| < 3.9e-3 on the CUDA target: the mean
// square of a Gemma-2 post-feedforward RMSNorm's input (~6e-6 at init) made
// every gradient before it inf/NaN (issue 44's follow-up).
// CHECK-LABEL: func.func @micro_step
// CHECK: %[[R:.+]] = tcc.reciprocal
// CHECK-NOT: tcc.mul %[[R]], %[[R]]
// CHECK: %[[G:.+]] = tcc.expand
// CHECK-NOT: tcc.mul %[[R]], %[[R]]
// CHECK: %[[GR:.+]] = tcc.mul %[[G]], %[[R]]
// CHECK: %[[GRR:.+]] = tcc.mul %[[GR]], %[[R]]
// CHECK: tcc.neg %[[GRR]]
func.func @reciprocal(%a: tensor<2x3xf32> {tcc.param = "a"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.reciprocal %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<2x3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
