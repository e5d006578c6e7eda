//===- kernels_loss.cuh - softmax cross-entropy loss kernels ---------*- CUDA -*-===//
//
// Part of tcc's CUDA kernel library: softmax cross-entropy loss kernels. kernels.cuh
// includes every part and states the conventions they share (storage
// types, asynchronous launchers on stream(), index errors as a device flag).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_LOSS_CUH
#define TCC_RUNTIME_CUDA_KERNELS_LOSS_CUH

#include "common.cuh"

namespace tcc::cuda {

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

namespace detail {

// Scale of the gradient for reductions 1 and 2 (dout[0] or dout[0] / wsum),
// written by sce_prep_kernel and read by sce_grad_kernel on the same stream.
static __device__ float g_tcc_sce_scale = 0.0f;

// Label of position p: class in [0, C), -1 if ignored, -2 if out of range.
template <class I>
__device__ __forceinline__ int64_t sce_label(I raw, int64_t C, bool has_ignore, int64_t ignore_index) {
  const int64_t l = static_cast<int64_t>(raw);
  if (has_ignore && l == ignore_index)
    return -1;
  return (l >= 0 && l < C) ? l : -2;
}

template <class TW> __device__ __forceinline__ double sce_weight(const TW *w, int64_t l) {
  return w ? static_cast<double>(ld(w[l])) : 1.0;
}

// Loss over the P = N * D positions. reduction 0: any grid, out[p] per
// position; 1 / 2: launched with ONE block (blockDim multiple of 32).
template <class I, class TW>
__global__ void sce_loss_kernel(float *out, const float *log_prob, const I *labels, const TW *weights, int64_t N,
                                int64_t C, int64_t D, int reduction, bool has_ignore, int64_t ignore_index) {
  __shared__ double sh[32];
  const int64_t P = N * D;
  double total = 0.0, wsum = 0.0;
  for (int64_t p = gtid(); p < P; p += gstride()) {
    const int64_t l = sce_label(labels[p], C, has_ignore, ignore_index);
    if (l == -2)
      set_error();
    double loss = 0.0;
    if (l >= 0) {
      const int64_t n = p / D, d = p - n * D;
      const double w = sce_weight(weights, l);
      loss = -w * static_cast<double>(log_prob[(n * C + l) * D + d]);
      wsum += w;
      total += loss;
    }
    if (reduction == 0)
      out[p] = static_cast<float>(loss);
  }
  if (reduction != 0) {
    total = block_allreduce(total, SumOp(), sh);
    wsum = block_allreduce(wsum, SumOp(), sh);
    if (threadIdx.x == 0) {
      if (reduction == 1)
        out[0] = static_cast<float>(total);
      else
        out[0] = wsum == 0.0 ? NAN : static_cast<float>(total / wsum);
    }
  }
}

// ONE block: g_tcc_sce_scale = dout[0] (reduction 1) or dout[0] / wsum (2).
template <class I, class TW, class TD = float>
__global__ void sce_prep_kernel(const TD *dout, const I *labels, const TW *weights, int64_t P, int64_t C,
                                int reduction, bool has_ignore, int64_t ignore_index) {
  __shared__ double sh[32];
  double wsum = 0.0;
  if (reduction == 2) {
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
      const int64_t l = sce_label(labels[p], C, has_ignore, ignore_index);
      if (l >= 0)
        wsum += sce_weight(weights, l);
    }
    wsum = block_allreduce(wsum, SumOp(), sh);
  }
  if (threadIdx.x == 0) {
    const double g = static_cast<double>(ld(dout[0]));
    g_tcc_sce_scale = static_cast<float>(reduction == 2 ? g / wsum : g);
  }
}

// One thread per element of dscores [N, C, D].
template <class TO, class I, class TW, class TD = float>
__global__ void sce_grad_kernel(TO *dscores, const TD *dout, const float *log_prob, const I *labels,
                                const TW *weights, int64_t N, int64_t C, int64_t D, int reduction, bool has_ignore,
                                int64_t ignore_index) {
  const int64_t n_all = N * C * D;
  const float s_all = reduction == 0 ? 0.0f : g_tcc_sce_scale;
  for (int64_t e = gtid(); e < n_all; e += gstride()) {
    const int64_t d = e % D;
    const int64_t t = e / D;
    const int64_t c = t % C;
    const int64_t n = t / C;
    const int64_t p = n * D + d;
    const int64_t l = sce_label(labels[p], C, has_ignore, ignore_index);
    if (l < 0) {
      if (l == -2 && c == 0)
        set_error();
      dscores[e] = conv<TO>(0.0f);
      continue;
    }
    const float w = weights ? static_cast<float>(ld(weights[l])) : 1.0f;
    const float s = reduction == 0 ? static_cast<float>(ld(dout[p])) : s_all;
    const float pr = expf(log_prob[e]) - (c == l ? 1.0f : 0.0f);
    dscores[e] = conv<TO>(pr * (w * s));
  }
}

// One block per row of [N, C] scores: the row's log-sum-exp, then its loss
// (added into *total) and gradient, scaled by g_tcc_sce_scale (which
// sce_prep_kernel wrote on the same stream). Every thread of a block takes
// the same branches (the label is the row's).
template <class TO, class TS, class I, class TW>
__global__ void sce_with_grad_row_kernel(TO *dscores, double *total, const TS *scores, const I *labels,
                                         const TW *weights, int64_t N, int64_t C, bool has_ignore,
                                         int64_t ignore_index) {
  __shared__ float sh[32];
  const float scale = g_tcc_sce_scale;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const TS *s = scores + n * C;
    TO *d = dscores + n * C;
    const int64_t l = sce_label(labels[n], C, has_ignore, ignore_index);
    if (l < 0) {
      if (l == -2 && threadIdx.x == 0)
        set_error();
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        d[c] = conv<TO>(0.0f);
      continue;
    }
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      m = fmaxf(m, static_cast<float>(ld(s[c])));
    m = block_allreduce(m, MaxOp(), sh);
    // The label's score is read before the sum's barrier: `dscores` may be
    // `scores` (the planner writes the gradient over the logits), and no
    // thread writes before every thread has passed that barrier.
    const float sl = static_cast<float>(ld(s[l]));
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      sum += expf(static_cast<float>(ld(s[c])) - m);
    sum = block_allreduce(sum, SumOp(), sh);
    const float lse = m + logf(sum);
    const float w = weights ? static_cast<float>(ld(weights[l])) : 1.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float p = expf(static_cast<float>(ld(s[c])) - lse) - (c == l ? 1.0f : 0.0f);
      d[c] = conv<TO>(p * (w * scale));
    }
    if (threadIdx.x == 0)
      atomicAdd(total, -static_cast<double>(w) * (static_cast<double>(sl) - static_cast<double>(lse)));
  }
}

// ONE block: out[0] = *total (reduction 1) or *total / wsum (2; NaN if 0).
template <class I, class TW>
__global__ void sce_with_grad_finish_kernel(float *out, const double *total, const I *labels, const TW *weights,
                                            int64_t N, int64_t C, int reduction, bool has_ignore,
                                            int64_t ignore_index) {
  __shared__ double sh[32];
  double wsum = 0.0;
  for (int64_t p = threadIdx.x; p < N; p += blockDim.x) {
    const int64_t l = sce_label(labels[p], C, has_ignore, ignore_index);
    if (l >= 0)
      wsum += sce_weight(weights, l);
  }
  wsum = block_allreduce(wsum, SumOp(), sh);
  if (threadIdx.x == 0)
    out[0] = reduction == 1 ? static_cast<float>(*total)
             : wsum == 0.0  ? NAN
                            : static_cast<float>(*total / wsum);
}

} // namespace detail

/// sce_loss and sce_loss_grad on [N, C] scores for reduction 1 (sum) or 2
/// (mean) without the log-probabilities: out[0] the loss, dscores its
/// gradient scaled by dout[0]; `scratch` is one device double.
template <class TO, class TS, class I, class TW>
void sce_loss_with_grad(float *out, TO *dscores, const TS *scores, int64_t N, int64_t C, const I *labels,
                               const TW *weights, const float *dout, int reduction, bool has_ignore,
                               int64_t ignore_index, double *scratch) {
  using namespace detail;
  TCC_LAUNCH(1, 1024, 0, stream(), sce_prep_kernel<I, TW>)(dout, labels, weights, N, C, reduction, has_ignore,
                                                   ignore_index);
  cudaMemsetAsync(scratch, 0, sizeof(double), stream());
  if (N > 0 && C > 0)
    TCC_LAUNCH(static_cast<unsigned>(N < 65535 * 8 ? N : 65535 * 8), 256, 0, stream(), sce_with_grad_row_kernel<TO, TS, I, TW>)(
            dscores, scratch, scores, labels, weights, N, C, has_ignore, ignore_index);
  TCC_LAUNCH(1, 1024, 0, stream(), sce_with_grad_finish_kernel<I, TW>)(out, scratch, labels, weights, N, C, reduction,
                                                               has_ignore, ignore_index);
}

/// SoftmaxCrossEntropyLoss: scores [N, C, D...], labels [N, D...]; log_prob
/// (float, shape of scores) = log-softmax over dim 1; out: [N, D...] floats
/// (reduction 0 none) or one float (1 sum, 2 weighted mean: NaN if the weight
/// sum is 0). Ignored positions contribute 0. An out-of-range label sets the
/// error flag (and counts as ignored).
template <class TS, class I, class TW>
void sce_loss(float *out, float *log_prob, const TS *scores, Shape ss, const I *labels, const TW *weights,
                     int reduction, bool has_ignore, int64_t ignore_index) {
  using namespace detail;
  const int64_t N = ss.dims[0], C = ss.dims[1];
  const int64_t D = prod(ss.dims, 2, ss.rank);
  softmax(log_prob, scores, ss, 1, true);
  const int64_t P = N * D;
  if (reduction == 0) {
    if (P <= 0)
      return;
    TCC_LAUNCH(grid_for(P), kThreads, 0, stream(), sce_loss_kernel<I, TW>)(out, log_prob, labels, weights, N, C, D, 0,
                                                                     has_ignore, ignore_index);
  } else {
    // P == 0 still writes out[0] (0, or NaN for a mean).
    TCC_LAUNCH(1, 1024, 0, stream(), sce_loss_kernel<I, TW>)(out, log_prob, labels, weights, N, C, D, reduction, has_ignore,
                                                      ignore_index);
  }
}

/// Gradient of sce_loss w.r.t. scores; dout has the loss's shape. Ignored
/// positions get an exact 0 gradient.
template <class TO, class I, class TW, class TD>
void sce_loss_grad(TO *dscores, const TD *dout, const float *log_prob, Shape ss, const I *labels,
                          const TW *weights, int reduction, bool has_ignore, int64_t ignore_index) {
  using namespace detail;
  const int64_t N = ss.dims[0], C = ss.dims[1];
  const int64_t D = prod(ss.dims, 2, ss.rank);
  const int64_t n = N * C * D;
  if (n <= 0)
    return;
  if (reduction != 0)
    TCC_LAUNCH(1, 1024, 0, stream(), sce_prep_kernel<I, TW, TD>)(dout, labels, weights, N * D, C, reduction, has_ignore,
                                                     ignore_index);
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), sce_grad_kernel<TO, I, TW, TD>)(dscores, dout, log_prob, labels, weights, N, C,
                                                                     D, reduction, has_ignore, ignore_index);
}

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_KERNELS_LOSS_CUH
