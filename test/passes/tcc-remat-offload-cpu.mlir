// RUN: not tcc-opt %s --tcc-build-backward --tcc-remat="offload=auto budget=1000" 2>&1 | FileCheck %s
// The CPU target has one memory: offload is refused, not ignored.
// CHECK: error: offload=auto needs the CUDA target: the CPU target has one memory
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
  func.func @main(%w: tensor<256xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
    %0 = tcc.tanh %w : (tensor<256xf32>) -> tensor<256xf32>
    %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<256xf32>) -> tensor<f32>
    return %1 : tensor<f32>
  }
}
