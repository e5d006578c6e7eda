// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cpu" --tcc-fuse --tcc-plan-memory --tcc-lower-to-kernels --mlir-print-local-scope | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cpu" --tcc-fuse --tcc-plan-memory --tcc-lower-to-kernels | tcc-translate --tcck-to-cpp --split-input-file | FileCheck %s --check-prefix=CPP
// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cuda" --tcc-fuse --tcc-plan-memory --tcc-lower-to-kernels | tcc-translate --tcck-to-cu --split-input-file | FileCheck %s --check-prefix=CU
// tcc-lower-to-kernels (LowerCopyLoops.cpp): a data-movement fusion is a
// tcck.copy_loop with one #tcck.copy per split part or concat operand, each
// an affine map from its space to a flat index in its source and another
// in its destination; the emitters write them as loop nests (CPU) or one
// grid-stride kernel (CUDA).

// A split whose parts are strided views all the way to the results: each
// copy runs over its result, reading the input's view (linear maps).
// x[b, 2i + j] is t[b, j, i]; x[b, 4 + k] is tb[k, b].
// CHECK-LABEL: func.func @strided
// CHECK: tcck.copy_loop ins(%arg0 : memref<2x12xf32>) outs(%{{.*}}, %{{.*}} : memref<2x2x2xf32>, memref<8x2xf32>)
// CHECK-SAME: [#tcck.copy<in = 0, out = 0, shape = [2, 2, 2], from = (d0, d1, d2) -> (d0 * 12 + d1 + d2 * 2), to = (d0, d1, d2) -> (d0 * 4 + d1 * 2 + d2)>,
// CHECK-SAME: #tcck.copy<in = 0, out = 1, shape = [8, 2], from = (d0, d1) -> (d0 + d1 * 12 + 4), to = (d0, d1) -> (d0 * 2 + d1)>]
// CPP-LABEL: from @strided
// CPP: for (int64_t i0 = 0; i0 < 2LL; ++i0)
// CPP-NEXT: for (int64_t i1 = 0; i1 < 2LL; ++i1)
// CPP-NEXT: for (int64_t i2 = 0; i2 < 2LL; ++i2)
// CPP-NEXT: [[T:v[0-9]+]][i0 * 4LL + i1 * 2LL + i2] = arg0[i0 * 12LL + i1 + i2 * 2LL];
// CPP-NEXT: for (int64_t i0 = 0; i0 < 8LL; ++i0)
// CPP-NEXT: for (int64_t i1 = 0; i1 < 2LL; ++i1)
// CPP-NEXT: [[B:v[0-9]+]][i0 * 2LL + i1] = arg0[i0 + i1 * 12LL + 4LL];
func.func @strided(%x: tensor<2x12xf32> {tcc.input = "x"}) -> (tensor<2x2x2xf32> {tcc.output = "a"}, tensor<4x4xf32> {tcc.output = "b"}) {
  %a, %b = tcc.split %x {axis = 1 : i64, split = array<i64: 4, 8>} : (tensor<2x12xf32>) -> (tensor<2x4xf32>, tensor<2x8xf32>)
  %r = tcc.reshape %a {shape = array<i64: 2, 2, 2>} : (tensor<2x4xf32>) -> tensor<2x2x2xf32>
  %t = tcc.transpose %r {perm = array<i64: 0, 2, 1>} : (tensor<2x2x2xf32>) -> tensor<2x2x2xf32>
  %tb = tcc.transpose %b {perm = array<i64: 1, 0>} : (tensor<2x8xf32>) -> tensor<8x2xf32>
  %rb = tcc.reshape %tb {shape = array<i64: 4, 4>} : (tensor<8x2xf32>) -> tensor<4x4xf32>
  return %t, %rb : tensor<2x2x2xf32>, tensor<4x4xf32>
}

// -----

// A concat operand whose chain is no strided view (a transpose, a reshape
// that merges dimensions the transpose made non-contiguous, a transpose):
// the copy runs over the operand, fetching each element back through the
// chain (floordiv and mod, mlir::linearize and delinearize). u[d0, d1] is
// y[d1, d0 mod 2, d0 floordiv 2]; the map says the same for d0 < 6. The second operand is a plain copy to
// rows 6 to 11.
// CHECK-LABEL: func.func @gather
// CHECK: tcck.copy_loop ins(%arg0, %arg1 : memref<2x2x3xf32>, memref<6x2xf32>) outs(%{{.*}} : memref<12x2xf32>)
// CHECK-SAME: [#tcck.copy<in = 0, out = 0, shape = [6, 2], from = (d0, d1) -> ((d1 + d0 floordiv 6) * 6 + (d0 mod 2) * 3 + (d0 mod 6) floordiv 2), to = (d0, d1) -> (d0 * 2 + d1)>,
// CHECK-SAME: #tcck.copy<in = 1, out = 0, shape = [6, 2], from = (d0, d1) -> (d0 * 2 + d1), to = (d0, d1) -> (d0 * 2 + d1 + 12)>]
// CPP-LABEL: from @gather
// CPP: [[C:v[0-9]+]][i0 * 2LL + i1] = arg0[(i1 + (i0 / 6LL)) * 6LL + (i0 % 2LL) * 3LL + ((i0 % 6LL) / 2LL)];
// CPP: [[C]][i0 * 2LL + i1 + 12LL] = arg1[i0 * 2LL + i1];
// One kernel on CUDA, the copies one after another along its index.
// CU-LABEL: __global__ void __launch_bounds__(256) move0(__half *__restrict__ o0, const __half *__restrict__ a0, const __half *__restrict__ a1) {
// CU-NEXT: for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 24LL; i += (int64_t)gridDim.x * blockDim.x) {
// CU-NEXT: if (i < 12LL) {
// CU-NEXT: int64_t j = i - 0LL;
// CU-NEXT: const int64_t c1 = j % 2LL; j /= 2LL;
// CU-NEXT: const int64_t c0 = j;
// CU-NEXT: o0[c0 * 2LL + c1] = conv<__half>(ld(a0[(c1 + (c0 / 6LL)) * 6LL + (c0 % 2LL) * 3LL + ((c0 % 6LL) / 2LL)]));
// CU-NEXT: }
// CU-NEXT: else if (i < 24LL) {
// CU-NEXT: int64_t j = i - 12LL;
// CU: o0[c0 * 2LL + c1 + 12LL] = conv<__half>(ld(a1[c0 * 2LL + c1]));
// CU: if (24LL > 0) TCC_LAUNCH(grid_for(24LL), 256, 0, stream(), move0)(
func.func @gather(%y: tensor<2x2x3xf32> {tcc.input = "y"}, %z: tensor<6x2xf32> {tcc.input = "z"}) -> (tensor<12x2xf32> {tcc.output = "c"}) {
  %t = tcc.transpose %y {perm = array<i64: 0, 2, 1>} : (tensor<2x2x3xf32>) -> tensor<2x3x2xf32>
  %r = tcc.reshape %t {shape = array<i64: 2, 6>} : (tensor<2x3x2xf32>) -> tensor<2x6xf32>
  %u = tcc.transpose %r {perm = array<i64: 1, 0>} : (tensor<2x6xf32>) -> tensor<6x2xf32>
  %c = tcc.concat %u, %z {axis = 0 : i64} : (tensor<6x2xf32>, tensor<6x2xf32>) -> tensor<12x2xf32>
  return %c : tensor<12x2xf32>
}
