//===- kernels.cuh - CUDA kernels for tcc's generated code -------*- CUDA -*-===//
//
// Header-only CUDA C++17 kernels that the CUDA code emitted by tcc calls, one
// host call per tensor op, over device pointers into one arena. The semantics
// are those of the CPU reference runtime/cpu/kernels.h; the differences are:
//
//  * Storage types: floating tensors are __half or float, integer tensors
//    int64_t, int32_t, uint8_t (bool: one byte 0/1) or another integer type.
//    Every pointer argument has its own template parameter, so mixed
//    __half/float operands work. Floating arithmetic is done in float (load
//    __half -> float, compute, store -> __half rounding to nearest even);
//    floating accumulations (reductions, softmax / layer_norm statistics,
//    losses) are carried in float (double where noted), not double.
//  * Launchers are asynchronous: every kernel goes on stream(), nothing
//    synchronizes (except the few host helpers documented as synchronous), and
//    no host memory is read by a kernel: shapes, strides and host arrays are
//    copied into structs passed by value.
//  * Index errors (gather, gather_grad, sce_loss*) cannot be returned: the
//    kernel sets a device flag (read_and_clear_error_flag()) and writes 0.
//
// All tensors are dense row-major, rank <= 8 (a rank-0 tensor has one
// element); zero-size tensors launch nothing. Kernels use grid-stride loops
// with int64 indices and capped grids.
//
// The parts the fixed half of a step also uses are in common.cuh and
// optimizer.cuh (step_host.h); its __device__ variables (the reduction
// scratch) have internal linkage, one copy per unit that includes this.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_CUH
#define TCC_RUNTIME_CUDA_KERNELS_CUH

#include "common.cuh"
#include "optimizer.cuh"

namespace tcc::cuda {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace detail {

template <BinaryOp Op, class TO, class TA, class TB>
__global__ void binary_kernel(TO *out, const TA *a, const TB *b, NdIndex<2> ix, int64_t n) {
  using C = binary_compute_t<compute_t<TA>, compute_t<TB>>;
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t off[2];
    nd_offsets(ix, i, off);
    out[i] = binary_scalar<Op, TO>(C(ld(a[off[0]])), C(ld(b[off[1]])));
  }
}

template <UnaryOp Op, class TO, class TI> __global__ void unary_kernel(TO *out, const TI *in, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = conv<TO>(unary_scalar<Op>(ld(in[i])));
}

template <class TO, class TI> __global__ void cast_kernel(TO *out, const TI *in, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = conv<TO>(in[i]);
}

template <class TI> __global__ void cast_to_bool_kernel(uint8_t *out, const TI *in, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const auto v = ld(in[i]);
    out[i] = v != decltype(v)(0) ? 1 : 0; // NaN -> 1
  }
}

template <class TO, class TX, class TY>
__global__ void where_kernel(TO *out, const uint8_t *c, const TX *x, const TY *y, NdIndex<3> ix, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t off[3];
    nd_offsets(ix, i, off);
    out[i] = c[off[0]] ? conv<TO>(x[off[1]]) : conv<TO>(y[off[2]]);
  }
}

template <class TO, class TI> __global__ void gather1_kernel(TO *out, const TI *in, NdIndex<1> ix, int64_t base,
                                                             int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t off[1];
    nd_offsets(ix, i, off);
    out[i] = conv<TO>(in[base + off[0]]);
  }
}

template <class TO, class TI> __global__ void scatter1_kernel(TO *out, const TI *in, NdIndex<1> ix, int64_t base,
                                                              int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t off[1];
    nd_offsets(ix, i, off);
    out[base + off[0]] = conv<TO>(in[i]);
  }
}

// Rows of `cols` elements: out[r, c] = in[r, c - lo] where lo <= c < hi,
// else 0 (rows out_stride and in_stride elements apart): a slice or the zero
// padding of one (slice_grad) along the last axis only. No index arithmetic
// per element but the row's, and every output element written once (no
// memset first): GPT-2's output projection pads and slices 50257-column rows
// (tcc-pad-gemms).
template <class TO, class TI>
__global__ void copy_rows_kernel(TO *out, int64_t out_stride, const TI *in, int64_t in_stride, int64_t rows,
                                 int64_t cols, int64_t lo, int64_t hi) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    TO *o = out + r * out_stride;
    const TI *x = in + r * in_stride;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x)
      o[c] = c >= lo && c < hi ? conv<TO>(x[c - lo]) : conv<TO>(0.0f);
  }
}

static __global__ void random_keep_kernel(uint8_t *out, const int64_t *rng, uint64_t stream, uint32_t threshold,
                                   int64_t n) {
  const uint64_t k = ::tcc::random::key((uint64_t)rng[0], (uint64_t)rng[1], stream);
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = ::tcc::random::keep(k, (uint64_t)i, threshold) ? 1 : 0;
}

/// rng[1] += 1: the next micro-step's dropout masks.
static __global__ void advance_rng_kernel(int64_t *rng) { rng[1] += 1; }

template <class T> __global__ void fill_kernel(T *out, int64_t n, double value) {
  const T v = conv<T>(value);
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = v;
}

template <class TO, class TI> __global__ void gelu_kernel(TO *out, const TI *in, int64_t n, bool tanh_approx) {
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = conv<TO>(gelu_scalar(static_cast<float>(ld(in[i])), tanh_approx));
}

template <class TO, class TG, class TI>
__global__ void gelu_grad_kernel(TO *out, const TG *g, const TI *in, int64_t n, bool tanh_approx) {
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = conv<TO>(
        gelu_grad_scalar(static_cast<float>(ld(g[i])), static_cast<float>(ld(in[i])), tanh_approx));
}

template <class TG> __global__ void accumulate_kernel(float *acc, const TG *g, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride())
    acc[i] += static_cast<float>(ld(g[i]));
}

} // namespace detail

/// out = a op b with NumPy broadcasting (as / bs right-aligned to os).
template <class TO, class TA, class TB>
void binary(BinaryOp op, TO *out, Shape os, const TA *a, Shape as, const TB *b, Shape bs) {
  using namespace detail;
  const int64_t n = os.numel();
  if (n <= 0)
    return;
  int64_t st[2][8];
  bcast_strides(os, as, st[0]);
  bcast_strides(os, bs, st[1]);
  const NdIndex<2> ix = make_nd<2>(os.rank, os.dims, st);
  const unsigned g = grid_for(n);
  cudaStream_t s = stream();
  switch (op) {
#define TCC_BINARY_CASE(K)                                                                                  \
  case BinaryOp::K:                                                                                         \
    TCC_LAUNCH(g, kThreads, 0, s, binary_kernel<BinaryOp::K, TO, TA, TB>)(out, a, b, ix, n);                        \
    break;
    TCC_BINARY_CASE(Add)
    TCC_BINARY_CASE(Sub)
    TCC_BINARY_CASE(Mul)
    TCC_BINARY_CASE(Div)
    TCC_BINARY_CASE(Pow)
    TCC_BINARY_CASE(Equal)
    TCC_BINARY_CASE(Less)
    TCC_BINARY_CASE(Greater)
    TCC_BINARY_CASE(And)
    TCC_BINARY_CASE(Or)
#undef TCC_BINARY_CASE
  }
}

/// out[i] = op(in[i]), computed in float for floating TI (in TI for integer
/// TI), converted to TO.
template <class TO, class TI> void unary(UnaryOp op, TO *out, const TI *in, int64_t n) {
  using namespace detail;
  if (n <= 0)
    return;
  const unsigned g = grid_for(n);
  cudaStream_t s = stream();
  switch (op) {
#define TCC_UNARY_CASE(K)                                                                                   \
  case UnaryOp::K:                                                                                          \
    TCC_LAUNCH(g, kThreads, 0, s, unary_kernel<UnaryOp::K, TO, TI>)(out, in, n);                                    \
    break;
    TCC_UNARY_CASE(Sqrt)
    TCC_UNARY_CASE(Neg)
    TCC_UNARY_CASE(Exp)
    TCC_UNARY_CASE(Log)
    TCC_UNARY_CASE(Erf)
    TCC_UNARY_CASE(Tanh)
    TCC_UNARY_CASE(Sigmoid)
    TCC_UNARY_CASE(Relu)
    TCC_UNARY_CASE(Reciprocal)
    TCC_UNARY_CASE(Abs)
    TCC_UNARY_CASE(Not)
    TCC_UNARY_CASE(Sin)
    TCC_UNARY_CASE(Cos)
#undef TCC_UNARY_CASE
  }
}

/// Numeric conversion (see conv).
template <class TO, class TI> void cast(TO *out, const TI *in, int64_t n) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::cast_kernel<TO, TI>)(out, in, n);
}

/// out[i] = in[i] != 0 (NaN -> 1).
template <class TI> void cast_to_bool(uint8_t *out, const TI *in, int64_t n) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::cast_to_bool_kernel<TI>)(out, in, n);
}

/// out = c ? x : y, all three broadcast to os.
template <class TO, class TX, class TY>
void where(TO *out, Shape os, const uint8_t *c, Shape cs, const TX *x, Shape xs, const TY *y, Shape ys) {
  using namespace detail;
  const int64_t n = os.numel();
  if (n <= 0)
    return;
  int64_t st[3][8];
  bcast_strides(os, cs, st[0]);
  bcast_strides(os, xs, st[1]);
  bcast_strides(os, ys, st[2]);
  const NdIndex<3> ix = make_nd<3>(os.rank, os.dims, st);
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), where_kernel<TO, TX, TY>)(out, c, x, y, ix, n);
}

template <class TO, class TI> void broadcast_to(TO *out, Shape os, const TI *in, Shape is) {
  using namespace detail;
  const int64_t n = os.numel();
  if (n <= 0)
    return;
  int64_t st[1][8];
  bcast_strides(os, is, st[0]);
  const NdIndex<1> ix = make_nd<1>(os.rank, os.dims, st);
  TCC_LAUNCH(grid_for(n), kThreads, 0, stream(), gather1_kernel<TO, TI>)(out, in, ix, 0, n);
}

/// Converting copy of n elements (out and in must not overlap unless equal).
template <class TO, class TI> void copy(TO *out, const TI *in, int64_t n) {
  if (n <= 0)
    return;
  if constexpr (std::is_same_v<TO, TI>) {
    if (static_cast<const void *>(out) == static_cast<const void *>(in))
      return;
    cudaMemcpyAsync(out, in, static_cast<size_t>(n) * sizeof(TO), cudaMemcpyDeviceToDevice, stream());
  } else {
    cast(out, in, n);
  }
}

namespace detail {
template <class T> __global__ void dot_kernel(float *out, const T *a, const T *b, int64_t n) {
  __shared__ float sh[32];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += ld(a[i]) * ld(b[i]);
  s = block_allreduce(s, SumOp(), sh);
  if (threadIdx.x == 0)
    out[0] = s;
}
} // namespace detail

/// out[0] = a · b in fp32: the matmul of two vectors, whose scalar result the
/// CUDA target keeps in fp32 (cuBLASLt writes fp16). One block.
inline void dot(float *out, const __half *a, const __half *b, int64_t n) {
  TCC_LAUNCH(1, detail::kThreads, 0, stream(), detail::dot_kernel<__half>)(out, a, b, n);
}

/// Dropout's keep mask (runtime/tcc_random.h), reading the random state
/// rng = [seed, counter] on the device (so a captured graph draws new masks
/// on every replay).
inline void random_keep(uint8_t *out, const int64_t *rng, uint64_t stream_id, uint32_t threshold, int64_t n) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::random_keep_kernel)(out, rng, stream_id, threshold, n);
}

/// Advances the random state's counter: the step's last kernel.
inline void advance_rng(int64_t *rng) {
  TCC_LAUNCH(1, 1, 0, stream(), detail::advance_rng_kernel)(rng);
}

/// out[0:n] = value, converted to T on the device (conv<T>(double)).
template <class T> void fill(T *out, int64_t n, double value) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::fill_kernel<T>)(out, n, value);
}

template <class TO, class TI> void gelu(TO *out, const TI *in, int64_t n, bool tanh_approx) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::gelu_kernel<TO, TI>)(out, in, n, tanh_approx);
}

template <class TO, class TG, class TI>
void gelu_grad(TO *out, const TG *g, const TI *in, int64_t n, bool tanh_approx) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::gelu_grad_kernel<TO, TG, TI>)(out, g, in, n, tanh_approx);
}

/// acc[i] += float(g[i]) (gradient accumulation).
template <class TG> void accumulate(float *acc, const TG *g, int64_t n) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::accumulate_kernel<TG>)(acc, g, n);
}

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

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace detail {

template <class TI> using reduce_acc_t = std::conditional_t<is_floating_v<TI>, float, double>;

template <class TO, class Acc> __device__ __forceinline__ TO reduce_finish(Acc s, int64_t count, bool mean) {
  if (!mean)
    return conv<TO>(s);
  return conv<TO>(s / static_cast<Acc>(count));
}

/// Stores a reduction's result, or with `acc` (fp32 outputs: a gradient
/// accumulator) adds it to what is there; each output has one writer.
template <class TO> __device__ __forceinline__ void store_reduced(TO *p, TO v, bool acc) {
  if constexpr (std::is_same_v<TO, float>) {
    *p = acc ? *p + v : v;
  } else {
    *p = v;
  }
}

// Reduced elements of output o are in[o * R + r], r < R: one block per output.
template <class TO, class TI>
__global__ void reduce_rows_block_kernel(TO *out, const TI *in, int64_t on, int64_t R, bool mean, bool acc) {
  using Acc = reduce_acc_t<TI>;
  __shared__ Acc sh[32];
  for (int64_t o = blockIdx.x; o < on; o += gridDim.x) {
    const TI *x = in + o * R;
    Acc s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      s += static_cast<Acc>(ld(x[r]));
    s = block_allreduce(s, SumOp(), sh);
    if (threadIdx.x == 0)
      store_reduced(out + o, reduce_finish<TO>(s, R, mean), acc);
  }
}

// Same layout, one warp per output.
template <class TO, class TI>
__global__ void reduce_rows_warp_kernel(TO *out, const TI *in, int64_t on, int64_t R, bool mean, bool acc) {
  using Acc = reduce_acc_t<TI>;
  const int lane = threadIdx.x & 31;
  const int64_t nwarps = gstride() >> 5;
  for (int64_t o = gtid() >> 5; o < on; o += nwarps) {
    const TI *x = in + o * R;
    Acc s = 0;
    for (int64_t r = lane; r < R; r += 32)
      s += static_cast<Acc>(ld(x[r]));
    s = warp_allreduce(s, SumOp());
    if (lane == 0)
      store_reduced(out + o, reduce_finish<TO>(s, R, mean), acc);
  }
}

// General: block (bx, by), bx * by == 256; threadIdx.x picks an output of the
// block's tile of bx outputs (consecutive outputs: coalesced when the kept
// dims are innermost), threadIdx.y a slice of the reduced elements.
template <class TO, class TI>
__global__ void reduce_general_kernel(TO *out, const TI *in, int64_t on, NdIndex<1> kept, int64_t count,
                                      NdIndex<1> red, bool mean, bool acc) {
  using Acc = reduce_acc_t<TI>;
  __shared__ Acc sh[kThreads];
  const int bx = blockDim.x, by = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * bx; base < on; base += static_cast<int64_t>(gridDim.x) * bx) {
    const int64_t o = base + tx;
    Acc s = 0;
    if (o < on) {
      int64_t ko[1];
      nd_offsets(kept, o, ko);
      const TI *x = in + ko[0];
      if (red.rank <= 1) {
        const int64_t st = red.rank == 1 ? red.st[0][0] : 0;
        for (int64_t r = ty; r < count; r += by)
          s += static_cast<Acc>(ld(x[r * st]));
      } else {
        for (int64_t r = ty; r < count; r += by) {
          int64_t ro[1];
          nd_offsets(red, r, ro);
          s += static_cast<Acc>(ld(x[ro[0]]));
        }
      }
    }
    if (by > 1) {
      sh[ty * bx + tx] = s;
      __syncthreads();
      if (ty == 0) {
        for (int j = 1; j < by; ++j)
          s += sh[j * bx + tx];
      }
      __syncthreads();
    }
    if (ty == 0 && o < on)
      store_reduced(out + o, reduce_finish<TO>(s, count, mean), acc);
  }
}

// Split reduction for few outputs and many reduced elements (floating inputs
// only): grid (tiles, splits); block (bx, by), bx * by == 256, by a power of
// two. Block (t, j) sums outputs [t*bx, t*bx + bx) over the reduced slice
// [j*chunk, (j+1)*chunk) into g_tcc_reduce_partials[j * on + o]; the last
// block of tile t to finish (counter) adds the partials in a fixed order, so
// results are deterministic. The scratch is static device memory, so calls
// must not run concurrently (they are all on stream()).
constexpr int64_t kReduceScratch = int64_t(1) << 21; // floats
constexpr int64_t kReduceCounters = int64_t(1) << 16;
static __device__ float g_tcc_reduce_partials[kReduceScratch];
static __device__ unsigned int g_tcc_reduce_counters[kReduceCounters]; // 0 between calls

__device__ __forceinline__ float tree_sum_y(float s, float *sh) { // over threadIdx.y; all threads get the sum
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  __syncthreads();
  sh[ty * bx + tx] = s;
  __syncthreads();
  for (int h = by >> 1; h > 0; h >>= 1) {
    if (ty < h)
      sh[ty * bx + tx] += sh[(ty + h) * bx + tx];
    __syncthreads();
  }
  return sh[tx];
}

template <class TO, class TI>
__global__ void reduce_split_kernel(TO *out, const TI *in, int64_t on, NdIndex<1> kept, int64_t count,
                                    NdIndex<1> red, bool mean, int64_t chunk, bool acc) {
  __shared__ float sh[kThreads];
  __shared__ int is_last;
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * bx + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < count ? r0 + chunk : count;
  float s = 0.0f;
  if (o < on) {
    int64_t ko[1];
    nd_offsets(kept, o, ko);
    const TI *x = in + ko[0];
    if (red.rank <= 1) {
      const int64_t st = red.rank == 1 ? red.st[0][0] : 0;
      for (int64_t r = r0 + ty; r < r1; r += by)
        s += static_cast<float>(ld(x[r * st]));
    } else {
      for (int64_t r = r0 + ty; r < r1; r += by) {
        int64_t ro[1];
        nd_offsets(red, r, ro);
        s += static_cast<float>(ld(x[ro[0]]));
      }
    }
  }
  s = tree_sum_y(s, sh);
  if (ty == 0 && o < on)
    g_tcc_reduce_partials[static_cast<int64_t>(blockIdx.y) * on + o] = s;
  __threadfence();
  __syncthreads();
  if (tx == 0 && ty == 0) {
    const unsigned prev = atomicAdd(&g_tcc_reduce_counters[blockIdx.x], 1u);
    is_last = prev == gridDim.y - 1;
  }
  __syncthreads();
  if (!is_last)
    return;
  __threadfence();
  float t = 0.0f;
  if (o < on)
    for (int64_t j = ty; j < gridDim.y; j += by)
      t += __ldcg(&g_tcc_reduce_partials[j * on + o]);
  t = tree_sum_y(t, sh);
  if (ty == 0 && o < on)
    store_reduced(out + o, reduce_finish<TO>(t, count, mean), acc);
  if (tx == 0 && ty == 0)
    g_tcc_reduce_counters[blockIdx.x] = 0;
}

} // namespace detail

/// Sum (or mean) over the dims whose bit is set in axes_mask (bit d = dim d),
/// keepdims layout: the output holds the kept dims in order (row-major), as
/// the CPU header. Accumulates in float (double for integer inputs). Mean
/// over an empty set is NaN; a sum is 0. mask 0 = converting copy.
/// Few outputs over many elements use a deterministic split reduction with a
/// static device scratch (reduce calls must not run concurrently).
/// `add_into` (for sums into fp32 `out` only: tcc asks for it there, for a
/// gradient accumulator): adds the sums into `out` instead of writing them.
template <class TO, class TI>
void reduce(TO *out, const TI *in, Shape is, uint32_t axes_mask, bool mean, bool add_into = false) {
  using namespace detail;
  uint32_t mask = 0;
  for (int32_t d = 0; d < is.rank; ++d)
    mask |= axes_mask & (1u << d);
  if (mask == 0) {
    if constexpr (std::is_same_v<TO, float>)
      if (add_into) {
        accumulate(out, in, is.numel());
        return;
      }
    copy(out, in, is.numel());
    return;
  }
  int64_t ist[8];
  contig_strides(is, ist);
  int64_t on = 1, count = 1;
  Shape ks{0, {}}, rs{0, {}};
  int64_t kst[1][8], rst[1][8];
  bool seen_reduced = false, trailing = true; // all non-1 reduced dims after all non-1 kept dims
  for (int32_t d = 0; d < is.rank; ++d) {
    const int64_t n = is.dims[d];
    if (mask & (1u << d)) {
      count *= n;
      if (n != 1) {
        seen_reduced = true;
        rs.dims[rs.rank] = n;
        rst[0][rs.rank++] = ist[d];
      }
    } else {
      on *= n;
      if (n != 1) {
        if (seen_reduced)
          trailing = false;
        ks.dims[ks.rank] = n;
        kst[0][ks.rank++] = ist[d];
      }
    }
  }
  if (on <= 0)
    return;
  if (count == 0) {
    if (!add_into) // an empty sum adds nothing
      fill(out, on, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  cudaStream_t st = stream();
  const NdIndex<1> kept = make_nd<1>(ks.rank, ks.dims, kst);
  const NdIndex<1> red = make_nd<1>(rs.rank, rs.dims, rst);
  constexpr int64_t kTargetBlocks = 1056; // ~8 blocks of 256 threads per SM on an H100 / H200
  if (trailing && count >= 32 && (on >= 1024 || count < 4096)) {
    if (count >= 4096) {
      const int64_t blocks = std::min<int64_t>(on, kMaxBlocks);
      TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, reduce_rows_block_kernel<TO, TI>)(out, in, on, count, mean, add_into);
    } else {
      const int64_t blocks = std::min<int64_t>((on + 7) / 8, kMaxBlocks);
      TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, reduce_rows_warp_kernel<TO, TI>)(out, in, on, count, mean, add_into);
    }
    return;
  }
  if constexpr (is_floating_v<TI>) {
    // Few outputs, many reduced elements: split the reduced range over blocks.
    // Trailing layout: one output per block, threads along the reduced range
    // (coalesced); else a tile of outputs along x (coalesced when the kept
    // dims are innermost).
    const int bx = trailing ? 1 : on >= 64 ? 64 : on >= 16 ? 16 : 1;
    const int by = kThreads / bx;
    const int64_t tiles = (on + bx - 1) / bx;
    if (count >= 1024 && tiles < kTargetBlocks / 2 && tiles <= kReduceCounters) {
      int64_t splits = (kTargetBlocks + tiles - 1) / tiles;
      splits = std::min<int64_t>(splits, count / (4 * by)); // >= 4 elements per thread
      splits = std::min<int64_t>(splits, kReduceScratch / on);
      splits = std::min<int64_t>(splits, 65535);
      if (splits >= 2) {
        const int64_t chunk = (count + splits - 1) / splits;
        splits = (count + chunk - 1) / chunk;
        TCC_LAUNCH(dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), dim3(bx, by), 0, st, reduce_split_kernel<TO, TI>)(out, in, on, kept, count, red, mean, chunk, add_into);
        return;
      }
    }
  }
  if (trailing && count >= 32) {
    const int64_t blocks = std::min<int64_t>(on, kMaxBlocks);
    TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, reduce_rows_block_kernel<TO, TI>)(out, in, on, count, mean, add_into);
    return;
  }
  const int by = count >= 256 ? 16 : count >= 16 ? 4 : 1;
  const int bx = kThreads / by;
  const int64_t blocks = std::min<int64_t>((on + bx - 1) / bx, kMaxBlocks);
  TCC_LAUNCH(static_cast<unsigned>(blocks), dim3(bx, by), 0, st, reduce_general_kernel<TO, TI>)(out, in, on, kept, count, red, mean, add_into);
}

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

/// The fp16 working copy: dst[i] = half(src[i]).
inline void refresh_half(__half *dst, const float *src, int64_t n) { copy(dst, src, n); }

} // namespace tcc::cuda

// Fused (flash) attention, forward and backward, on tensor cores.
#include "attention.cuh"

// The launchers every CUDA step links compiled once (kernels.cu).
#include "prebuilt.cuh"

#endif // TCC_RUNTIME_CUDA_KERNELS_CUH
