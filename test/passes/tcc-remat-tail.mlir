// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-fuse --tcc-remat="budget=800000" | FileCheck %s
// Remat after fusion, of a multi-output fusion's tail: each layer's GEMM,
// bias and GELU are one fusion yielding the pre-activation (which the
// backward pass reads for gelu_grad) and the activation (which it reads for
// the next layer's weight gradient). To fit the budget, tcc recomputes only
// the GELU from the saved pre-activation (a new fusion reading the first
// fusion's result 0), not the GEMM. Unconstrained the plan takes 922048
// bytes; with the budget, 790976.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: arena_bytes = 790976,
// CHECK-SAME: reason = "saved activation with the most bytes per recomputed FLOP: the elementwise tail of a multi-output fusion, recomputed from its other results"
// CHECK: %[[L0:.+]]:2 = tcc.fusion {{[a-z]+}}(%arg0,
// CHECK: %[[L1:.+]]:2 = tcc.fusion {{[a-z]+}}(%[[L0]]#1,
// CHECK: %[[R:.+]] = tcc.fusion loop(%[[L1]]#0) {{{.*}}tcc.remat} : (tensor<256x64xf32>) -> tensor<256x64xf32> {
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<256x64xf32>):
// CHECK-NEXT: %[[G:.+]] = tcc.gelu %[[A]]
// CHECK-NEXT: tcc.yield %[[G]]
// CHECK: tcc.fusion {{[a-z]+}}(%[[R]],
func.func @main(%x: tensor<256x64xf32> {tcc.input = "x"}, %w0: tensor<64x64xf32> {tcc.param = "w0"}, %b0: tensor<64xf32> {tcc.param = "b0"}, %w1: tensor<64x64xf32> {tcc.param = "w1"}, %b1: tensor<64xf32> {tcc.param = "b1"}, %w2: tensor<64x64xf32> {tcc.param = "w2"}, %b2: tensor<64xf32> {tcc.param = "b2"}, %w3: tensor<64x64xf32> {tcc.param = "w3"}, %b3: tensor<64xf32> {tcc.param = "b3"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %m0 = tcc.matmul %x, %w0 : (tensor<256x64xf32>, tensor<64x64xf32>) -> tensor<256x64xf32>
  %h0 = tcc.add %m0, %b0 : (tensor<256x64xf32>, tensor<64xf32>) -> tensor<256x64xf32>
  %g0 = tcc.gelu %h0 {approximate = "tanh"} : (tensor<256x64xf32>) -> tensor<256x64xf32>
  %m1 = tcc.matmul %g0, %w1 : (tensor<256x64xf32>, tensor<64x64xf32>) -> tensor<256x64xf32>
  %h1 = tcc.add %m1, %b1 : (tensor<256x64xf32>, tensor<64xf32>) -> tensor<256x64xf32>
  %g1 = tcc.gelu %h1 {approximate = "tanh"} : (tensor<256x64xf32>) -> tensor<256x64xf32>
  %m2 = tcc.matmul %g1, %w2 : (tensor<256x64xf32>, tensor<64x64xf32>) -> tensor<256x64xf32>
  %h2 = tcc.add %m2, %b2 : (tensor<256x64xf32>, tensor<64xf32>) -> tensor<256x64xf32>
  %g2 = tcc.gelu %h2 {approximate = "tanh"} : (tensor<256x64xf32>) -> tensor<256x64xf32>
  %m3 = tcc.matmul %g2, %w3 : (tensor<256x64xf32>, tensor<64x64xf32>) -> tensor<256x64xf32>
  %h3 = tcc.add %m3, %b3 : (tensor<256x64xf32>, tensor<64xf32>) -> tensor<256x64xf32>
  %g3 = tcc.gelu %h3 {approximate = "tanh"} : (tensor<256x64xf32>) -> tensor<256x64xf32>
  %s = tcc.reduce_sum %g3 {keepdims = 0 : i64} : (tensor<256x64xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
