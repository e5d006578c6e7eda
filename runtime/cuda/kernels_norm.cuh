//===- kernels_norm.cuh - softmax and layer-norm kernels -------------*- CUDA -*-===//
//
// Part of tcc's CUDA kernel library: softmax and layer-norm kernels. kernels.cuh
// includes every part and states the conventions they share (storage
// types, asynchronous launchers on stream(), index errors as a device flag).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_NORM_CUH
#define TCC_RUNTIME_CUDA_KERNELS_NORM_CUH

#include "common.cuh"

namespace tcc::cuda {

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

namespace detail {

// One warp per row of L (<= 1024) contiguous elements.
template <class TO, class TI>
__global__ void softmax_warp_kernel(TO *out, const TI *in, int64_t rows, int64_t L, bool log) {
  const int lane = threadIdx.x & 31;
  const int64_t nwarps = gstride() >> 5;
  for (int64_t r = gtid() >> 5; r < rows; r += nwarps) {
    const TI *x = in + r * L;
    TO *y = out + r * L;
    float m = -INFINITY;
    for (int64_t l = lane; l < L; l += 32)
      m = fmaxf(m, static_cast<float>(ld(x[l])));
    m = warp_allreduce(m, MaxOp());
    float s = 0.0f;
    for (int64_t l = lane; l < L; l += 32)
      s += expf(static_cast<float>(ld(x[l])) - m);
    s = warp_allreduce(s, SumOp());
    if (log) {
      const float ls = logf(s);
      for (int64_t l = lane; l < L; l += 32)
        y[l] = conv<TO>(static_cast<float>(ld(x[l])) - m - ls);
    } else {
      const float inv = 1.0f / s;
      for (int64_t l = lane; l < L; l += 32)
        y[l] = conv<TO>(expf(static_cast<float>(ld(x[l])) - m) * inv);
    }
  }
}

// One block per row of L contiguous elements.
template <class TO, class TI>
__global__ void softmax_block_kernel(TO *out, const TI *in, int64_t rows, int64_t L, bool log) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TI *x = in + r * L;
    TO *y = out + r * L;
    float m = -INFINITY;
    for (int64_t l = threadIdx.x; l < L; l += blockDim.x)
      m = fmaxf(m, static_cast<float>(ld(x[l])));
    m = block_allreduce(m, MaxOp(), sh);
    float s = 0.0f;
    for (int64_t l = threadIdx.x; l < L; l += blockDim.x)
      s += expf(static_cast<float>(ld(x[l])) - m);
    s = block_allreduce(s, SumOp(), sh);
    if (log) {
      const float ls = logf(s);
      for (int64_t l = threadIdx.x; l < L; l += blockDim.x)
        y[l] = conv<TO>(static_cast<float>(ld(x[l])) - m - ls);
    } else {
      const float inv = 1.0f / s;
      for (int64_t l = threadIdx.x; l < L; l += blockDim.x)
        y[l] = conv<TO>(expf(static_cast<float>(ld(x[l])) - m) * inv);
    }
  }
}

// One thread per (outer, inner) position, looping over L (stride inner).
template <class TO, class TI>
__global__ void softmax_strided_kernel(TO *out, const TI *in, int64_t outer, int64_t L, int64_t inner, bool log) {
  const int64_t n = outer * inner;
  for (int64_t e = gtid(); e < n; e += gstride()) {
    const int64_t o = e / inner, i = e - o * inner;
    const TI *x = in + o * L * inner + i;
    TO *y = out + o * L * inner + i;
    float m = -INFINITY;
    for (int64_t l = 0; l < L; ++l)
      m = fmaxf(m, static_cast<float>(ld(x[l * inner])));
    float s = 0.0f;
    for (int64_t l = 0; l < L; ++l)
      s += expf(static_cast<float>(ld(x[l * inner])) - m);
    if (log) {
      const float ls = logf(s);
      for (int64_t l = 0; l < L; ++l)
        y[l * inner] = conv<TO>(static_cast<float>(ld(x[l * inner])) - m - ls);
    } else {
      const float inv = 1.0f / s;
      for (int64_t l = 0; l < L; ++l)
        y[l * inner] = conv<TO>(expf(static_cast<float>(ld(x[l * inner])) - m) * inv);
    }
  }
}

// One block per row of C elements; blockDim.x a multiple of 32.
template <class TY, class TX, class TS, class TB>
__global__ void layer_norm_kernel(TY *y, float *mean, float *inv_std_dev, const TX *x, int64_t rows, int64_t C,
                                  const TS *scale, NdIndex<1> sidx, int sdirect, const TB *bias, NdIndex<1> bidx,
                                  int bdirect, float eps) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TX *xr = x + r * C;
    TY *yr = y + r * C;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
      s += static_cast<float>(ld(xr[i]));
    s = block_allreduce(s, SumOp(), sh);
    const float mu = s / static_cast<float>(C); // C == 0: NaN, as the CPU header
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const float d = static_cast<float>(ld(xr[i])) - mu;
      q += d * d;
    }
    q = block_allreduce(q, SumOp(), sh);
    const float var = q / static_cast<float>(C);
    const float rstd = 1.0f / sqrtf(var + eps);
    if (threadIdx.x == 0) {
      if (mean)
        mean[r] = mu;
      if (inv_std_dev)
        inv_std_dev[r] = rstd;
    }
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      float v = (static_cast<float>(ld(xr[i])) - mu) * rstd;
      if (scale) {
        int64_t o[1] = {i};
        if (!sdirect)
          nd_offsets(sidx, i, o);
        v *= static_cast<float>(ld(scale[o[0]]));
      }
      if (bias) {
        int64_t o[1] = {i};
        if (!bdirect)
          nd_offsets(bidx, i, o);
        v += static_cast<float>(ld(bias[o[0]]));
      }
      yr[i] = conv<TY>(v);
    }
  }
}

} // namespace detail

/// Softmax (or log-softmax) over one axis (ONNX opset-13 semantics), in float.
template <class TO, class TI> void softmax(TO *out, const TI *in, Shape s, int axis, bool log) {
  using namespace detail;
  if (axis < 0)
    axis += s.rank;
  const int64_t outer = prod(s.dims, 0, axis);
  const int64_t L = s.dims[axis];
  const int64_t inner = prod(s.dims, axis + 1, s.rank);
  if (outer <= 0 || L <= 0 || inner <= 0)
    return;
  cudaStream_t st = stream();
  if (inner == 1) {
    if (L <= 1024) {
      const int64_t blocks = std::min<int64_t>((outer + 7) / 8, kMaxBlocks);
      TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, softmax_warp_kernel<TO, TI>)(out, in, outer, L, log);
    } else {
      const int64_t blocks = std::min<int64_t>(outer, kMaxBlocks);
      TCC_LAUNCH(static_cast<unsigned>(blocks), 512, 0, st, softmax_block_kernel<TO, TI>)(out, in, outer, L, log);
    }
  } else {
    TCC_LAUNCH(grid_for(outer * inner), kThreads, 0, st, softmax_strided_kernel<TO, TI>)(out, in, outer, L, inner, log);
  }
}

/// ONNX LayerNormalization over dims [axis, rank). mean / inv_std_dev (one
/// float per row) may be nullptr; scale nullptr = 1; bias may be nullptr.
/// scale / bias broadcast (right-aligned) to the normalized shape xs[axis:].
/// Statistics in float, variance biased, rstd = 1 / sqrt(var + eps).
template <class TY, class TX, class TS, class TB>
void layer_norm(TY *y, float *mean, float *inv_std_dev, const TX *x, Shape xs, int axis, const TS *scale,
                       Shape ss, const TB *bias, Shape bs, double eps) {
  using namespace detail;
  if (axis < 0)
    axis += xs.rank;
  const int64_t rows = prod(xs.dims, 0, axis);
  const int64_t C = prod(xs.dims, axis, xs.rank);
  if (rows <= 0)
    return;
  Shape ns{xs.rank - axis, {}};
  for (int32_t i = 0; i < ns.rank; ++i)
    ns.dims[i] = xs.dims[axis + i];
  NdIndex<1> sidx, bidx;
  std::memset(&sidx, 0, sizeof(sidx));
  std::memset(&bidx, 0, sizeof(bidx));
  const int sdirect = scale == nullptr || ss.numel() == C;
  const int bdirect = bias == nullptr || bs.numel() == C;
  if (!sdirect) {
    int64_t st[1][8];
    bcast_strides(ns, ss, st[0]);
    sidx = make_nd<1>(ns.rank, ns.dims, st);
  }
  if (!bdirect) {
    int64_t st[1][8];
    bcast_strides(ns, bs, st[0]);
    bidx = make_nd<1>(ns.rank, ns.dims, st);
  }
  int threads = static_cast<int>(std::min<int64_t>(256, (C + 31) / 32 * 32));
  if (threads < 32)
    threads = 32;
  const int64_t blocks = std::min<int64_t>(rows, kMaxBlocks);
  TCC_LAUNCH(static_cast<unsigned>(blocks), threads, 0, stream(), layer_norm_kernel<TY, TX, TS, TB>)(
      y, mean, inv_std_dev, x, rows, C, scale, sidx, sdirect, bias, bidx, bdirect, static_cast<float>(eps));
}

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_KERNELS_NORM_CUH
