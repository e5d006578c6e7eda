//===- kernels_elementwise.cuh - elementwise -------------------------*- CUDA -*-===//
//
// Part of tcc's CUDA kernel library: elementwise, casts, fills, GELU, dot and accumulate kernels. kernels.cuh
// includes every part and states the conventions they share (storage
// types, asynchronous launchers on stream(), index errors as a device flag).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_ELEMENTWISE_CUH
#define TCC_RUNTIME_CUDA_KERNELS_ELEMENTWISE_CUH

#include "common.cuh"

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

/// The fp16 working copy: dst[i] = half(src[i]).
inline void refresh_half(__half *dst, const float *src, int64_t n) { copy(dst, src, n); }

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_KERNELS_ELEMENTWISE_CUH
