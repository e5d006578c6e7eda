//===- kernels_movement.cuh - gather ---------------------------------*- CUDA -*-===//
//
// Part of tcc's CUDA kernel library: gather, scatter, concat, split, transpose and slice kernels. kernels.cuh
// includes every part and states the conventions they share (storage
// types, asynchronous launchers on stream(), index errors as a device flag).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_MOVEMENT_CUH
#define TCC_RUNTIME_CUDA_KERNELS_MOVEMENT_CUH

#include "common.cuh"
#include "kernels_elementwise.cuh" // gather1, copy_rows

namespace tcc::cuda {

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

namespace detail {

template <class I> __device__ __forceinline__ bool norm_index(I raw, int64_t n, int64_t &v) {
  v = static_cast<int64_t>(raw);
  if (v < 0)
    v += n;
  return v >= 0 && v < n;
}

// out [outer, num_idx, inner] <- data [outer, A, inner].
template <class TO, class TD, class I>
__global__ void gather_kernel(TO *out, const TD *data, const I *idx, int64_t outer, int64_t A, int64_t num_idx,
                              int64_t inner) {
  const int64_t n = outer * num_idx * inner;
  for (int64_t e = gtid(); e < n; e += gstride()) {
    const int64_t i = e % inner;
    const int64_t t = e / inner;
    const int64_t j = t % num_idx;
    const int64_t o = t / num_idx;
    int64_t v;
    if (!norm_index(idx[j], A, v)) {
      if (i == 0)
        set_error();
      out[e] = conv<TO>(0);
      continue;
    }
    out[e] = conv<TO>(data[(o * A + v) * inner + i]);
  }
}

template <class TG, class I>
__global__ void gather_grad_kernel(float *out, const TG *grad, const I *idx, int64_t outer, int64_t A,
                                   int64_t num_idx, int64_t inner) {
  const int64_t n = outer * num_idx * inner;
  for (int64_t e = gtid(); e < n; e += gstride()) {
    const int64_t i = e % inner;
    const int64_t t = e / inner;
    const int64_t j = t % num_idx;
    const int64_t o = t / num_idx;
    int64_t v;
    if (!norm_index(idx[j], A, v)) {
      if (i == 0)
        set_error();
      continue;
    }
    atomicAdd(out + (o * A + v) * inner + i, static_cast<float>(ld(grad[e])));
  }
}

// out [outer, total, inner] <- in [outer, size, inner] at column offset col.
template <class TO, class TI>
__global__ void concat_kernel(TO *out, const TI *in, int64_t outer, int64_t blk, int64_t out_blk, int64_t col) {
  const int64_t n = outer * blk;
  for (int64_t e = gtid(); e < n; e += gstride()) {
    const int64_t o = e / blk, r = e - o * blk;
    out[o * out_blk + col + r] = conv<TO>(in[e]);
  }
}

} // namespace detail

/// ONNX Gather: out [outer, num_idx, inner]. Negative indices wrap by +A; an
/// out-of-range index sets the error flag and its output elements are 0.
template <class TO, class TD, class I>
void gather(TO *out, const TD *data, Shape ds, const I *idx, int64_t num_idx, int axis) {
  using namespace detail;
  if (axis < 0)
    axis += ds.rank;
  const int64_t outer = prod(ds.dims, 0, axis);
  const int64_t A = ds.dims[axis];
  const int64_t inner = prod(ds.dims, axis + 1, ds.rank);
  const int64_t n = outer * num_idx * inner;
  if (n <= 0)
    return;
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), gather_kernel<TO, TD, I>)(out, data, idx, outer, A, num_idx, inner);
}

/// Gradient of gather: out (float, shape ds) = 0, then each grad row is
/// atomically added at its index's row (scatter-add). Out-of-range indices
/// set the error flag and are skipped.
template <class TG, class I>
void gather_grad(float *out, Shape ds, const TG *grad, const I *idx, int64_t num_idx, int axis) {
  using namespace detail;
  if (axis < 0)
    axis += ds.rank;
  const int64_t total = ds.numel();
  if (total > 0)
    cudaMemsetAsync(out, 0, static_cast<size_t>(total) * sizeof(float), stream());
  const int64_t outer = prod(ds.dims, 0, axis);
  const int64_t A = ds.dims[axis];
  const int64_t inner = prod(ds.dims, axis + 1, ds.rank);
  const int64_t n = outer * num_idx * inner;
  if (n <= 0)
    return;
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), gather_grad_kernel<TG, I>)(out, grad, idx, outer, A, num_idx, inner);
}

/// out dims[i] = is.dims[perm[i]] (perm: host array of is.rank entries).
template <class TO, class TI> void transpose(TO *out, const TI *in, Shape is, const int64_t *perm) {
  using namespace detail;
  const int64_t n = is.numel();
  if (n <= 0)
    return;
  Shape os{is.rank, {}};
  int64_t ist[8], st[1][8];
  contig_strides(is, ist);
  for (int32_t i = 0; i < is.rank; ++i) {
    os.dims[i] = is.dims[perm[i]];
    st[0][i] = ist[perm[i]];
  }
  const NdIndex<1> ix = make_nd<1>(os.rank, os.dims, st);
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), gather1_kernel<TO, TI>)(out, in, ix, 0, n);
}

namespace detail {
/// Whether a slice of `big` to `small` (starts, steps) takes part of the last
/// axis only, with step 1: then it is a copy of rows (copy_rows_kernel).
inline bool last_axis_only(Shape big, Shape small, const int64_t *starts, const int64_t *steps) {
  if (big.rank < 1 || big.rank != small.rank)
    return false;
  for (int32_t d = 0; d < big.rank; ++d)
    if (steps[d] != 1 || starts[d] < 0 || (d + 1 < big.rank && (starts[d] != 0 || big.dims[d] != small.dims[d])))
      return false;
  return starts[big.rank - 1] + small.dims[big.rank - 1] <= big.dims[big.rank - 1];
}

template <class TO, class TI>
void copy_rows(TO *out, int64_t out_stride, const TI *in, int64_t in_stride, int64_t rows, int64_t cols, int64_t lo,
               int64_t hi) {
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((cols + kThreads - 1) / kThreads, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  TCC_LAUNCH(grid, kThreads, 0, stream(), copy_rows_kernel<TO, TI>)(out, out_stride, in, in_stride, rows, cols, lo, hi);
}
} // namespace detail

/// out[i_0, ...] = in[starts[d] + i_d * steps[d], ...] (host arrays of
/// os.rank entries; steps may be negative).
template <class TO, class TI>
void slice(TO *out, Shape os, const TI *in, Shape is, const int64_t *starts, const int64_t *steps) {
  using namespace detail;
  const int64_t n = os.numel();
  if (n <= 0)
    return;
  if (last_axis_only(is, os, starts, steps)) {
    const int64_t cols = os.dims[os.rank - 1];
    copy_rows(out, cols, in + starts[os.rank - 1], is.dims[is.rank - 1], n / cols, cols, 0, cols);
    return;
  }
  int64_t ist[8], st[1][8];
  contig_strides(is, ist);
  int64_t b = 0;
  for (int32_t d = 0; d < os.rank; ++d) {
    b += starts[d] * ist[d];
    st[0][d] = steps[d] * ist[d];
  }
  const NdIndex<1> ix = make_nd<1>(os.rank, os.dims, st);
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), gather1_kernel<TO, TI>)(out, in, ix, b, n);
}

/// Gradient of slice: out (shape os = the slice's input shape) is 0 except at
/// the sliced positions, which get g (shape gs = the slice's output shape).
template <class TO, class TG>
void slice_grad(TO *out, Shape os, const TG *g, Shape gs, const int64_t *starts, const int64_t *steps) {
  using namespace detail;
  const int64_t total = os.numel();
  if (total <= 0)
    return;
  if (gs.numel() > 0 && last_axis_only(os, gs, starts, steps)) {
    const int64_t cols = os.dims[os.rank - 1], lo = starts[os.rank - 1];
    copy_rows(out, cols, g, gs.dims[gs.rank - 1], total / cols, cols, lo, lo + gs.dims[gs.rank - 1]);
    return;
  }
  cudaMemsetAsync(out, 0, static_cast<size_t>(total) * sizeof(TO), stream()); // all-zero bits == 0
  const int64_t n = gs.numel();
  if (n <= 0)
    return;
  int64_t ost[8], st[1][8];
  contig_strides(os, ost);
  int64_t b = 0;
  for (int32_t d = 0; d < gs.rank; ++d) {
    b += starts[d] * ost[d];
    st[0][d] = steps[d] * ost[d];
  }
  const NdIndex<1> ix = make_nd<1>(gs.rank, gs.dims, st);
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), scatter1_kernel<TO, TG>)(out, g, ix, b, n);
}

/// Concatenation along axis of n inputs (ins / sizes: host arrays of n device
/// pointers / axis sizes). One copy kernel per input.
template <class TO, class TI>
void concat(TO *out, Shape os, int axis, int n, const TI *const *ins, const int64_t *sizes) {
  using namespace detail;
  if (axis < 0)
    axis += os.rank;
  const int64_t outer = prod(os.dims, 0, axis);
  const int64_t inner = prod(os.dims, axis + 1, os.rank);
  if (outer <= 0 || inner <= 0)
    return;
  const int64_t out_blk = os.dims[axis] * inner;
  int64_t col = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t blk = sizes[i] * inner;
    if (blk > 0)
      TCC_LAUNCH(grid_for(outer * blk), kThreads, 0, stream(), concat_kernel<TO, TI>)(out, ins[i], outer, blk, out_blk, col);
    col += blk;
  }
}

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_KERNELS_MOVEMENT_CUH
