// RUN: tcc-translate --tcck-to-cpp --split-input-file --verify-diagnostics %s
// What the CPU kernels' emitter refuses, on the op or function at fault.

module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
// expected-error @below {{tcc-translate --tcck-to-cpp: the module's target is cuda; --tcck-to-cu translates its kernels}}
func.func @micro_step(%x: memref<4xf16>) {
  return
}
}

// -----

module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
// expected-error @below {{tcc-translate: argument 0 is not a buffer (memref): run tcc-lower-to-kernels first}}
func.func @micro_step(%x: tensor<4xf32>) {
  return
}
}

// -----

module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
func.func @micro_step(%x: memref<4xf32>) {
  // expected-error @below {{'tcc.constant' op tcc-translate: not a kernel (tcck) op: run tcc-lower-to-kernels first}}
  %0 = tcc.constant {value = dense<[4, 16, 32]> : tensor<3xi64>} : () -> tensor<3xi64>
  return
}
}

// -----

// expected-error @below {{tcc-translate needs the module's target}}
module {
func.func @micro_step(%x: memref<4xf32>) {
  return
}
}

// -----

// expected-error @below {{tcc-translate: expected one kernel function, found 2}}
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
func.func @a(%x: memref<4xf32>) {
  return
}
func.func @b(%x: memref<4xf32>) {
  return
}
}

// -----

// Past the kernels' 8 dimensions, one diagnostic (not a C++ compile error).
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {
func.func @micro_step(%x: memref<2x1x2x1x2x1x2x1x2xf32>, %y: memref<2x1x2x1x2x1x2x1x2xf32>) {
  %v = tcck.view 64 : memref<2x1x2x1x2x1x2x1x2xf32>
  // expected-error @below {{has a rank-9 operand 'memref<2x1x2x1x2x1x2x1x2xf32>'; the step's kernels take at most 8 dimensions}}
  tcck.ew "Add" %v, %x, %y : memref<2x1x2x1x2x1x2x1x2xf32>, memref<2x1x2x1x2x1x2x1x2xf32>, memref<2x1x2x1x2x1x2x1x2xf32>
  return
}
}
