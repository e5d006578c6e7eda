// RUN: tcc-translate --tcck-to-cu --split-input-file --verify-diagnostics %s
// What the CUDA kernels' translation refuses, on the module, op or function
// at fault.

// expected-error @below {{tcc-translate --tcck-to-cu: the module's target is not cuda; --tcck-to-cpp translates its kernels}}
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
func.func @micro_step(%x: memref<4xf32>) {
  return
}
}

// -----

module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
// expected-error @below {{tcc-translate: argument 0 is not a buffer (memref): run tcc-lower-to-kernels first}}
func.func @micro_step(%x: tensor<4xf32>) {
  return
}
}

// -----

module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
func.func @micro_step(%x: memref<4xf16>) {
  // expected-error @below {{'tcc.constant' op tcc-translate: not a kernel (tcck) op: run tcc-lower-to-kernels first}}
  %0 = tcc.constant {value = dense<[4, 16, 32]> : tensor<3xi64>} : () -> tensor<3xi64>
  return
}
}

// -----

// A CUDA GEMM epilogue is cuBLASLt's, as tcc-lower-to-kernels decided it;
// the emitter does not work it out again from the region.
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
func.func @micro_step(%x: memref<4x8xf16>, %w: memref<8x8xf16>, %b: memref<8xf16>) {
  // expected-error @below {{'tcck.matmul' op has an epilogue without a cuBLASLt decision (tcc-lower-to-kernels records one for the CUDA target)}}
  tcck.matmul outs(%x : memref<4x8xf16>) ins(%x, %w : memref<4x8xf16>, memref<8x8xf16>)
      epilogue(%b : memref<8xf16>) maps [affine_map<(d0, d1) -> (d1)>] {
  ^bb0(%p: f32, %c: f32):
    %s = tcck.scalar "Add" %p, %c : (f32, f32) -> f32
    tcck.yield %s : f32
  } {trans_lhs = false, trans_rhs = false}
  return
}
}
