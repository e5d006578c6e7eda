// RUN: not tcc-opt %s --tcc-swap-activations="mode=all" 2>&1 | FileCheck %s
// The CPU target has one memory: swapping is refused, not ignored.
// CHECK: error: tcc-swap-activations needs the CUDA target: the CPU target has one memory
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
  func.func @main(%w: tensor<256xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
    %0 = tcc.reduce_sum %w {keepdims = 0 : i64} : (tensor<256xf32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}
