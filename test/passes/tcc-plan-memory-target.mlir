// RUN: tcc-opt %s --split-input-file --tcc-plan-memory | FileCheck %s
// RUN: not tcc-opt %s --split-input-file --tcc-plan-memory="float-bytes=4" 2>&1 | FileCheck %s --check-prefix=CONFLICT
// Without float-bytes, the plan follows the module's #tcc.target: the CUDA
// target's mixed precision (fp16 working copies, the GEMM workspace, the
// device reserve), the CPU's f32 or f64. A float-bytes that contradicts the
// target is an error, not a plan the emitter would read as another
// precision.
// CONFLICT: error: float-bytes=4 contradicts the module's target #tcc.target<kind = cuda, storage = f16, arch = 90> (2 bytes per float)
// CONFLICT: error: float-bytes=4 contradicts the module's target #tcc.target<kind = cpu, storage = f64, arch = 0> (8 bytes per float)

// CHECK-LABEL: func.func @cuda
// CHECK-SAME: tcc.layout = #tcc.layout<arena_bytes = 33554816, planned_bytes = 100663744, device_reserve_bytes = 67108928,
// CHECK-SAME: shadows = [64], shadow_bytes = 32, workspace = 256, workspace_bytes = 33554432>
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
  func.func @cuda(%x: tensor<16xf32> {tcc.input = "x"}) -> (tensor<16xf32> {tcc.output = "y"}) {
    %y = tcc.exp %x : (tensor<16xf32>) -> tensor<16xf32>
    return %y : tensor<16xf32>
  }
}

// -----

// CHECK-LABEL: func.func @cpu_f64
// CHECK-SAME: tcc.layout = #tcc.layout<arena_bytes = 384, planned_bytes = 384,
// CHECK-SAME: input_bytes = 128, output_bytes = 128,
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f64, arch = 0>} {
  func.func @cpu_f64(%x: tensor<16xf32> {tcc.input = "x"}) -> (tensor<16xf32> {tcc.output = "y"}) {
    %y = tcc.exp %x : (tensor<16xf32>) -> tensor<16xf32>
    return %y : tensor<16xf32>
  }
}


// -----

// On CUDA, what only a softmax reads (an unfused attention's scores with an
// additive mask) is stored in fp32, as the softmax computes: float32's
// lowest as a mask is -inf in fp16, and a row of -inf is NaN. The same add
// read by an exp is fp16: 8192 bytes less (64 x 64 x 2).
// CHECK-LABEL: func.func @softmax_input
// CHECK-SAME: arena_bytes = 33619968
// CHECK-LABEL: func.func @exp_input
// CHECK-SAME: arena_bytes = 33611776
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
  func.func @softmax_input(%x: tensor<64x64xf32> {tcc.input = "x"}) -> (tensor<64x64xf32> {tcc.output = "y"}) {
    %m = tcc.constant {value = dense<-3.0e38> : tensor<64xf32>} : () -> tensor<64xf32>
    %s = tcc.add %x, %m : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64x64xf32>
    %p = tcc.softmax %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
    return %p : tensor<64x64xf32>
  }
}

// -----

module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
  func.func @exp_input(%x: tensor<64x64xf32> {tcc.input = "x"}) -> (tensor<64x64xf32> {tcc.output = "y"}) {
    %m = tcc.constant {value = dense<-3.0e38> : tensor<64xf32>} : () -> tensor<64xf32>
    %s = tcc.add %x, %m : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64x64xf32>
    %p = tcc.exp %s : (tensor<64x64xf32>) -> tensor<64x64xf32>
    return %p : tensor<64x64xf32>
  }
}
