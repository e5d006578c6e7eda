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
// Include this header in ONE translation unit (it defines __device__
// variables with internal linkage).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_CUH
#define TCC_RUNTIME_CUDA_KERNELS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

// tcc_random.h sits beside this header in a step's build directory and one
// level up in the source tree.
#if __has_include("tcc_random.h")
#include "tcc_random.h"
#else
#include "../tcc_random.h"
#endif

/// A kernel launch: TCC_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...)
/// is kernel<<<grid, block, shared_bytes, stream>>>(args...). Built for the
/// host against tcc's CUDA emulation (-DTCC_CUDA_EMU, runtime/cuda/emu), it
/// runs the grid on the CPU instead.
#ifdef TCC_CUDA_EMU
#define TCC_LAUNCH(grid, block, shared_bytes, stream, ...)                                                           \
  ::tcc_emu::launch(grid, block, shared_bytes, stream, &__VA_ARGS__)
#else
#define TCC_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif

namespace tcc::cuda {

struct Shape {
  int32_t rank;
  int64_t dims[8];
  __host__ __device__ int64_t numel() const {
    int64_t n = 1;
    for (int32_t i = 0; i < rank; ++i)
      n *= dims[i];
    return n;
  }
};

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Equal, Less, Greater, And, Or };
enum class UnaryOp { Sqrt, Neg, Exp, Log, Erf, Tanh, Sigmoid, Relu, Reciprocal, Abs, Not, Sin, Cos };

/// The stream every launcher uses (default: the legacy default stream 0).
/// The step sets it before launching.
inline cudaStream_t &stream() {
  static cudaStream_t s = 0;
  return s;
}

//===----------------------------------------------------------------------===//
// Error flag (index errors)
//===----------------------------------------------------------------------===//

static __device__ int g_tcc_error_flag = 0;

/// Device address of the error flag (an int, 0 or 1).
inline int *error_flag_device() {
  void *p = nullptr;
  if (cudaGetSymbolAddress(&p, g_tcc_error_flag) != cudaSuccess)
    return nullptr;
  return static_cast<int *>(p);
}

/// Synchronous: waits for stream(), returns the flag (1 after an index error
/// in gather / gather_grad / sce_loss / sce_loss_grad since the last call, or
/// -1 if a CUDA call failed) and clears it.
inline int read_and_clear_error_flag() {
  int v = 0;
  if (cudaMemcpyFromSymbolAsync(&v, g_tcc_error_flag, sizeof(int), 0, cudaMemcpyDeviceToHost, stream()) !=
      cudaSuccess)
    return -1;
  if (cudaStreamSynchronize(stream()) != cudaSuccess)
    return -1;
  if (v != 0) {
    static const int zero = 0;
    if (cudaMemcpyToSymbolAsync(g_tcc_error_flag, &zero, sizeof(int), 0, cudaMemcpyHostToDevice, stream()) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream()) != cudaSuccess)
      return -1;
  }
  return v;
}

namespace detail {

__device__ __forceinline__ void set_error() { atomicExch(&g_tcc_error_flag, 1); }

template <class T> struct is_half : std::false_type {};
template <> struct is_half<__half> : std::true_type {};
template <class T> inline constexpr bool is_half_v = is_half<std::remove_cv_t<T>>::value;
/// __half, float or double.
template <class T> inline constexpr bool is_floating_v = is_half_v<T> || std::is_floating_point_v<T>;
/// The type a stored element is computed in: float for __half, else itself.
template <class T> using compute_t = std::conditional_t<is_half_v<T>, float, T>;

/// Compute type of a binary op: float if either operand is floating (double
/// if either is double), else std::common_type.
template <class A, class B>
using binary_compute_t = std::conditional_t<
    std::is_same_v<A, double> || std::is_same_v<B, double>, double,
    std::conditional_t<is_floating_v<A> || is_floating_v<B>, float, std::common_type_t<A, B>>>;

template <class C> inline constexpr bool kWideInt = std::is_integral_v<C> && sizeof(C) >= sizeof(int);

// Integer arithmetic wraps (no signed-overflow UB), as in the CPU header.
template <class C> __host__ __device__ __forceinline__ C add_(C x, C y) {
  if constexpr (kWideInt<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(x) + static_cast<U>(y));
  } else {
    return static_cast<C>(x + y);
  }
}
template <class C> __host__ __device__ __forceinline__ C sub_(C x, C y) {
  if constexpr (kWideInt<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(x) - static_cast<U>(y));
  } else {
    return static_cast<C>(x - y);
  }
}
template <class C> __host__ __device__ __forceinline__ C mul_(C x, C y) {
  if constexpr (kWideInt<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    return static_cast<C>(x * y);
  }
}
template <class C> __host__ __device__ __forceinline__ C neg_(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(0) - static_cast<U>(x));
  } else {
    return -x;
  }
}
// Integer division truncates toward zero; x / 0 == 0; INT_MIN / -1 wraps.
template <class C> __host__ __device__ __forceinline__ C div_(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    if (y == 0)
      return C(0);
    if constexpr (std::is_signed_v<C>) {
      if (y == C(-1))
        return neg_(x);
    }
    return static_cast<C>(x / y);
  } else {
    return x / y;
  }
}

// Integer power, exact (wrapping on overflow, where the CPU header's double
// pow rounds). The device pow(double, double) is not exact for integer results
// (3^1 may give 2.9999999999999996, truncated to 2), hence no pow here. A
// negative exponent gives what the CPU header's conv(pow) gives: 1 for
// x == 1, +-1 for x == -1, the int64 saturation of +inf for x == 0, else 0.
template <class C> __host__ __device__ __forceinline__ C ipow_(C x, C y) {
  if constexpr (std::is_signed_v<C>) {
    if (y < 0) {
      if (x == 1)
        return C(1);
      if (x == -1)
        return (y & 1) ? C(-1) : C(1);
      if (x == 0)
        return static_cast<C>(INT64_MAX);
      return C(0);
    }
  }
  C r = 1, b = x;
  while (y != 0) {
    if (y & 1)
      r = mul_<C>(r, b);
    y = static_cast<C>(y >> 1);
    if (y != 0)
      b = mul_<C>(b, b);
  }
  return r;
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Device scalar helpers (also called by generated fused kernels)
//===----------------------------------------------------------------------===//

/// Load a stored element as its compute type: __half -> float, else itself.
__device__ __forceinline__ float ld(__half x) { return __half2float(x); }
__device__ __forceinline__ float ld(float x) { return x; }
template <class T> __device__ __forceinline__ T ld(T x) { return x; }

/// Numeric conversion (TO, TI: __half, float, double or an integer type).
/// Floating -> integer truncates toward zero, NaN gives 0, values beyond int64
/// saturate, then wrap modulo 2^bits (as the CPU header). To __half: round to
/// nearest even. bool outputs use cast_to_bool (x != 0) instead.
template <class TO, class TI> __device__ __forceinline__ TO conv(TI x) {
  using namespace detail;
  if constexpr (std::is_same_v<TO, TI>) {
    return x;
  } else if constexpr (is_half_v<TI>) {
    return conv<TO>(__half2float(x));
  } else if constexpr (is_half_v<TO>) {
    if constexpr (std::is_same_v<TI, double>)
      return __double2half(x);
    else
      return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_floating_point_v<TI> && std::is_integral_v<TO>) {
    if (!(x == x))
      return TO(0);
    // The CPU header's clamp to the int64 range. Device conversions saturate
    // (cvt.rzi.sat) anyway; the explicit clamp keeps host builds (tcc's CUDA
    // emulation) defined.
    if constexpr (std::is_unsigned_v<TO> && sizeof(TO) == 8) {
      if (x >= TI(9223372036854775808.0))
        return static_cast<TO>(x);
    }
    if (x >= TI(9223372036854775808.0))
      return static_cast<TO>(INT64_MAX);
    if (x < TI(-9223372036854775808.0))
      return static_cast<TO>(INT64_MIN);
    return static_cast<TO>(static_cast<int64_t>(x));
  } else {
    return static_cast<TO>(x);
  }
}

/// One element of a binary op. TA / TB are compute types (float or integers;
/// __half is accepted and read as float); the result is converted with conv.
template <BinaryOp Op, class TO, class TA, class TB> __device__ __forceinline__ TO binary_scalar(TA xa, TB yb) {
  using namespace detail;
  using A = compute_t<TA>;
  using B = compute_t<TB>;
  const A x = ld(xa);
  const B y = ld(yb);
  using C = binary_compute_t<A, B>;
  if constexpr (Op == BinaryOp::Add)
    return conv<TO>(add_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Sub)
    return conv<TO>(sub_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Mul)
    return conv<TO>(mul_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Div)
    return conv<TO>(div_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Pow) {
    if constexpr (std::is_same_v<C, float>)
      return conv<TO>(powf(x, y));
    else if constexpr (std::is_integral_v<C>)
      return conv<TO>(ipow_<C>(C(x), C(y)));
    else
      return conv<TO>(pow(static_cast<double>(x), static_cast<double>(y)));
  } else if constexpr (Op == BinaryOp::Equal)
    return conv<TO>(C(x) == C(y) ? 1 : 0);
  else if constexpr (Op == BinaryOp::Less)
    return conv<TO>(C(x) < C(y) ? 1 : 0);
  else if constexpr (Op == BinaryOp::Greater)
    return conv<TO>(C(x) > C(y) ? 1 : 0);
  else if constexpr (Op == BinaryOp::And)
    return conv<TO>((x != A(0)) && (y != B(0)) ? 1 : 0);
  else
    return conv<TO>((x != A(0)) || (y != B(0)) ? 1 : 0);
}

/// One element of a unary op. T is float or an integer type (__half is
/// accepted: computed in float, rounded back). Floating T uses float math
/// (sqrtf, expf, logf, erff, tanhf); integer T computes transcendental
/// functions in double (as the CPU header) and converts back with conv.
template <UnaryOp Op, class T> __device__ __forceinline__ T unary_scalar(T x) {
  using namespace detail;
  if constexpr (is_half_v<T>) {
    return __float2half_rn(unary_scalar<Op, float>(__half2float(x)));
  } else {
    constexpr bool kFloat = std::is_floating_point_v<T>;
    using F = std::conditional_t<kFloat, T, double>;
    if constexpr (Op == UnaryOp::Sqrt)
      return conv<T>(sqrt(F(x)));
    else if constexpr (Op == UnaryOp::Neg)
      return neg_<T>(x);
    else if constexpr (Op == UnaryOp::Exp)
      return conv<T>(exp(F(x)));
    else if constexpr (Op == UnaryOp::Log)
      return conv<T>(log(F(x)));
    else if constexpr (Op == UnaryOp::Erf)
      return conv<T>(erf(F(x)));
    else if constexpr (Op == UnaryOp::Tanh)
      return conv<T>(tanh(F(x)));
    else if constexpr (Op == UnaryOp::Sin)
      return conv<T>(sin(F(x)));
    else if constexpr (Op == UnaryOp::Cos)
      return conv<T>(cos(F(x)));
    else if constexpr (Op == UnaryOp::Sigmoid) { // stable for large |x|
      const F v = F(x);
      if (v >= F(0))
        return conv<T>(F(1) / (F(1) + exp(-v)));
      const F e = exp(v);
      return conv<T>(e / (F(1) + e));
    } else if constexpr (Op == UnaryOp::Relu) { // NaN propagates
      if constexpr (std::is_unsigned_v<T>)
        return x;
      else
        return x < T(0) ? T(0) : x;
    }
    else if constexpr (Op == UnaryOp::Reciprocal)
      return div_<T>(T(1), x);
    else if constexpr (Op == UnaryOp::Abs) {
      if constexpr (kFloat)
        return fabs(x);
      else if constexpr (std::is_signed_v<T>)
        return x < T(0) ? neg_<T>(x) : x;
      else
        return x;
    } else
      return T(x == T(0) ? 1 : 0);
  }
}

/// GELU of one element, in float (exact erf form or the tanh approximation).
/// The CPU header's formulas, rewritten without cancellation for x << 0:
/// 0.5 * (1 + erf(x / sqrt2)) = 0.5 * erfc(-x / sqrt2), and
/// 0.5 * (1 + tanh(u)) = sigmoid(2u), 1 - tanh(u)^2 = 4 sigmoid(2u) sigmoid(-2u).
__device__ __forceinline__ float gelu_scalar(float x, bool tanh_approx) {
  if (tanh_approx) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x); // sqrt(2 / pi) * (...)
    const float e = expf(-2.0f * fabsf(u));                            // in (0, 1]
    const float s = u >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);    // sigmoid(2u)
    return x * s;
  }
  return 0.5f * x * erfcf(-x * 0.7071067811865476f);
}

/// g * gelu'(x), in float (see gelu_scalar).
__device__ __forceinline__ float gelu_grad_scalar(float g, float x, bool tanh_approx) {
  float d;
  if (tanh_approx) {
    const float k = 0.7978845608028654f; // sqrt(2 / pi)
    const float u = k * (x + 0.044715f * x * x * x);
    const float e = expf(-2.0f * fabsf(u));
    const float s = u >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e); // sigmoid(2u) = 0.5 (1 + tanh u)
    const float sm = u >= 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e); // sigmoid(-2u) = 0.5 (1 - tanh u)
    // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)
    d = s + 2.0f * x * s * sm * k * (1.0f + 3.0f * 0.044715f * x * x);
  } else {
    d = 0.5f * erfcf(-x * 0.7071067811865476f) + x * expf(-0.5f * x * x) * 0.3989422804014327f; // 1 / sqrt(2 pi)
  }
  return g * d;
}

/// The flat index of coordinates `c` in a row-major shape `s` of rank `r`
/// (the generated copy loops of data-movement fusions).
__host__ __device__ inline int64_t move_lin(const int64_t *c, const int64_t *s, int r) {
  int64_t f = 0;
  for (int d = 0; d < r; ++d)
    f = f * s[d] + c[d];
  return f;
}

/// The coordinates `c` of flat index `f` in a row-major shape `s` of rank `r`.
__host__ __device__ inline void move_delin(int64_t f, const int64_t *s, int r, int64_t *c) {
  for (int d = r - 1; d >= 0; --d) {
    c[d] = f % s[d];
    f /= s[d];
  }
}

/// Eight halves (16 bytes).
struct alignas(16) half8 {
  __half h[8];
};

/// Loads 8 halves from a 16-byte-aligned p with one 16-byte load.
__device__ __forceinline__ void load8(const __half *p, float (&f)[8]) {
#ifdef TCC_CUDA_EMU
  if (!tcc_emu::check_aligned(p, 16, "load8")) { // the launch fails; no access
    for (float &x : f)
      x = NAN;
    return;
  }
#endif
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  __half2 h[4];
  memcpy(h, &u, sizeof h); // not a pointer cast: a compiler may assume u and h do not alias
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

/// Stores 8 floats as halves (round to nearest) to a 16-byte-aligned p with
/// one 16-byte store.
__device__ __forceinline__ void store8(__half *p, const float (&f)[8]) {
  __half2 h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
  uint4 u;
  memcpy(&u, h, sizeof u);
#ifdef TCC_CUDA_EMU
  if (!tcc_emu::check_aligned(p, 16, "store8")) // the launch fails; no access
    return;
#endif
  *reinterpret_cast<uint4 *>(p) = u;
}

//===----------------------------------------------------------------------===//
// Launch and indexing helpers
//===----------------------------------------------------------------------===//

namespace detail {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 8;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b > kMaxBlocks)
    b = kMaxBlocks;
  if (b < 1)
    b = 1;
  return static_cast<unsigned>(b);
}

__device__ __forceinline__ int64_t gtid() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t gstride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

inline int64_t prod(const int64_t *d, int32_t from, int32_t to) {
  int64_t n = 1;
  for (int32_t i = from; i < to; ++i)
    n *= d[i];
  return n;
}

inline void contig_strides(const Shape &s, int64_t *st) {
  int64_t acc = 1;
  for (int32_t i = s.rank - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s.dims[i];
  }
}

// Strides of `s` read as the (right-aligned, NumPy-broadcast) shape `os`:
// 0 for dims that `s` lacks or has as 1.
inline void bcast_strides(const Shape &os, const Shape &s, int64_t *st) {
  int64_t cs[8];
  contig_strides(s, cs);
  for (int32_t i = 0; i < os.rank; ++i) {
    int32_t j = i + (s.rank - os.rank);
    st[i] = (j < 0 || s.dims[j] == 1) ? 0 : cs[j];
  }
}

/// Maps the linear index of a dense row-major iteration space to K operand
/// offsets. Built by make_nd, which drops size-1 dims and merges dims that
/// are contiguous for every operand (the iteration space itself, i.e. the
/// output, is always dense).
template <int K> struct NdIndex {
  int32_t rank;
  int32_t small; // total < 2^32: decompose in 32 bits
  int64_t dims[8];
  int64_t st[K][8];
};

template <int K> inline NdIndex<K> make_nd(int32_t rank, const int64_t *dims, const int64_t (&st)[K][8]) {
  NdIndex<K> ix;
  std::memset(&ix, 0, sizeof(ix));
  int r = 0;
  int64_t total = 1;
  for (int32_t d = 0; d < rank; ++d) {
    const int64_t n = dims[d];
    total *= n;
    if (n == 1)
      continue;
    if (r > 0) {
      bool merge = true;
      for (int k = 0; k < K; ++k)
        merge = merge && ix.st[k][r - 1] == st[k][d] * n;
      if (merge) {
        ix.dims[r - 1] *= n;
        for (int k = 0; k < K; ++k)
          ix.st[k][r - 1] = st[k][d];
        continue;
      }
    }
    ix.dims[r] = n;
    for (int k = 0; k < K; ++k)
      ix.st[k][r] = st[k][d];
    ++r;
  }
  ix.rank = r;
  ix.small = total >= 0 && total <= int64_t(0xffffffffLL) ? 1 : 0;
  return ix;
}

template <int K> __device__ __forceinline__ void nd_offsets(const NdIndex<K> &ix, int64_t i, int64_t (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] = 0;
  if (ix.rank == 1) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      off[k] = i * ix.st[k][0];
    return;
  }
  if (ix.small) {
    uint32_t u = static_cast<uint32_t>(i);
#pragma unroll
    for (int d = 7; d >= 0; --d) {
      if (d < ix.rank) {
        const uint32_t n = static_cast<uint32_t>(ix.dims[d]);
        const uint32_t q = u / n;
        const uint32_t r = u - q * n;
#pragma unroll
        for (int k = 0; k < K; ++k)
          off[k] += static_cast<int64_t>(r) * ix.st[k][d];
        u = q;
      }
    }
  } else {
#pragma unroll
    for (int d = 7; d >= 0; --d) {
      if (d < ix.rank) {
        const int64_t n = ix.dims[d];
        const int64_t q = i / n;
        const int64_t r = i - q * n;
#pragma unroll
        for (int k = 0; k < K; ++k)
          off[k] += r * ix.st[k][d];
        i = q;
      }
    }
  }
}

// ---- reductions within a warp / block ----------------------------------------

struct SumOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp { // NaN operands are dropped (fmaxf), as std::max(m, x) with m first
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T, class F> __device__ __forceinline__ T warp_allreduce(T v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// All threads of the block get the reduction of v. blockDim.x must be a
/// multiple of 32 (blockDim.y == 1), every thread of the block must call it,
/// sh must hold 32 T in shared memory.
template <class T, class F> __device__ __forceinline__ T block_allreduce(T v, F f, T *sh) {
  v = warp_allreduce(v, f);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads(); // sh may still be read from a previous call
  if (lane == 0)
    sh[w] = v;
  __syncthreads();
  T r = sh[0];
  for (int i = 1; i < nw; ++i)
    r = f(r, sh[i]);
  return r;
}

} // namespace detail

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

__global__ void random_keep_kernel(uint8_t *out, const int64_t *rng, uint64_t stream, uint32_t threshold,
                                   int64_t n) {
  const uint64_t k = ::tcc::random::key((uint64_t)rng[0], (uint64_t)rng[1], stream);
  for (int64_t i = gtid(); i < n; i += gstride())
    out[i] = ::tcc::random::keep(k, (uint64_t)i, threshold) ? 1 : 0;
}

/// rng[1] += 1: the next micro-step's dropout masks.
__global__ void advance_rng_kernel(int64_t *rng) { rng[1] += 1; }

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
inline void binary(BinaryOp op, TO *out, Shape os, const TA *a, Shape as, const TB *b, Shape bs) {
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
template <class TO, class TI> inline void unary(UnaryOp op, TO *out, const TI *in, int64_t n) {
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
template <class TO, class TI> inline void cast(TO *out, const TI *in, int64_t n) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::cast_kernel<TO, TI>)(out, in, n);
}

/// out[i] = in[i] != 0 (NaN -> 1).
template <class TI> inline void cast_to_bool(uint8_t *out, const TI *in, int64_t n) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::cast_to_bool_kernel<TI>)(out, in, n);
}

/// out = c ? x : y, all three broadcast to os.
template <class TO, class TX, class TY>
inline void where(TO *out, Shape os, const uint8_t *c, Shape cs, const TX *x, Shape xs, const TY *y, Shape ys) {
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

template <class TO, class TI> inline void broadcast_to(TO *out, Shape os, const TI *in, Shape is) {
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
template <class TO, class TI> inline void copy(TO *out, const TI *in, int64_t n) {
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
template <class T> inline void fill(T *out, int64_t n, double value) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::fill_kernel<T>)(out, n, value);
}

template <class TO, class TI> inline void gelu(TO *out, const TI *in, int64_t n, bool tanh_approx) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::gelu_kernel<TO, TI>)(out, in, n, tanh_approx);
}

template <class TO, class TG, class TI>
inline void gelu_grad(TO *out, const TG *g, const TI *in, int64_t n, bool tanh_approx) {
  if (n <= 0)
    return;
  TCC_LAUNCH(detail::grid_for(n), detail::kThreads, 0, stream(), detail::gelu_grad_kernel<TO, TG, TI>)(out, g, in, n, tanh_approx);
}

/// acc[i] += float(g[i]) (gradient accumulation).
template <class TG> inline void accumulate(float *acc, const TG *g, int64_t n) {
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
template <class TO, class TI> inline void softmax(TO *out, const TI *in, Shape s, int axis, bool log) {
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
inline void layer_norm(TY *y, float *mean, float *inv_std_dev, const TX *x, Shape xs, int axis, const TS *scale,
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
inline void reduce(TO *out, const TI *in, Shape is, uint32_t axes_mask, bool mean, bool add_into = false) {
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
inline void gather(TO *out, const TD *data, Shape ds, const I *idx, int64_t num_idx, int axis) {
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
inline void gather_grad(float *out, Shape ds, const TG *grad, const I *idx, int64_t num_idx, int axis) {
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
template <class TO, class TI> inline void transpose(TO *out, const TI *in, Shape is, const int64_t *perm) {
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

/// out[i_0, ...] = in[starts[d] + i_d * steps[d], ...] (host arrays of
/// os.rank entries; steps may be negative).
template <class TO, class TI>
inline void slice(TO *out, Shape os, const TI *in, Shape is, const int64_t *starts, const int64_t *steps) {
  using namespace detail;
  const int64_t n = os.numel();
  if (n <= 0)
    return;
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
inline void slice_grad(TO *out, Shape os, const TG *g, Shape gs, const int64_t *starts, const int64_t *steps) {
  using namespace detail;
  const int64_t total = os.numel();
  if (total <= 0)
    return;
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
inline void concat(TO *out, Shape os, int axis, int n, const TI *const *ins, const int64_t *sizes) {
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
inline void sce_loss_with_grad(float *out, TO *dscores, const TS *scores, int64_t N, int64_t C, const I *labels,
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
inline void sce_loss(float *out, float *log_prob, const TS *scores, Shape ss, const I *labels, const TW *weights,
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
inline void sce_loss_grad(TO *dscores, const TD *dout, const float *log_prob, Shape ss, const I *labels,
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

//===----------------------------------------------------------------------===//
// Optimizers: multi-tensor apply (one launch for all parameters)
//===----------------------------------------------------------------------===//

/// One parameter of the optimizer step. p: fp32 master weights; g: fp32
/// accumulated gradient (zeroed by the update); s0 / s1: AdamW exp_avg /
/// exp_avg_sq (SGD: s0 = momentum buffer, s1 unused; may be nullptr when
/// unused); p16: fp16 working copy refreshed from p after the update
/// (nullptr: none).
struct ApplyTensor {
  float *p, *g, *s0, *s1;
  __half *p16;
  int64_t n;
  float weight_decay;
};

/// Elements per chunk: one chunk is handled by one block.
constexpr int64_t kApplyChunk = 2048;

/// Copies the table to device memory it cudaMallocs (synchronous; setup
/// only). Returns nullptr on failure (or n <= 0). Free with cudaFree.
inline ApplyTensor *upload_table(const ApplyTensor *rows, int n) {
  if (n <= 0)
    return nullptr;
  void *d = nullptr;
  if (cudaMalloc(&d, sizeof(ApplyTensor) * static_cast<size_t>(n)) != cudaSuccess)
    return nullptr;
  if (cudaMemcpy(d, rows, sizeof(ApplyTensor) * static_cast<size_t>(n), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return nullptr;
  }
  return static_cast<ApplyTensor *>(d);
}

/// Chunk prefix of the table: n + 1 int64 in device memory it cudaMallocs
/// (synchronous; setup only); entry t = index of tensor t's first chunk of
/// kApplyChunk elements, entry n = the total number of chunks, which is also
/// stored in *nchunks. Returns nullptr on failure. Free with cudaFree.
inline int64_t *upload_chunk_starts(const ApplyTensor *rows, int n, int64_t *nchunks) {
  if (n < 0)
    return nullptr;
  std::vector<int64_t> cs(static_cast<size_t>(n) + 1);
  int64_t c = 0;
  for (int t = 0; t < n; ++t) {
    cs[static_cast<size_t>(t)] = c;
    c += rows[t].n > 0 ? (rows[t].n + kApplyChunk - 1) / kApplyChunk : 0;
  }
  cs[static_cast<size_t>(n)] = c;
  if (nchunks)
    *nchunks = c;
  void *d = nullptr;
  if (cudaMalloc(&d, sizeof(int64_t) * cs.size()) != cudaSuccess)
    return nullptr;
  if (cudaMemcpy(d, cs.data(), sizeof(int64_t) * cs.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return nullptr;
  }
  return static_cast<int64_t *>(d);
}

/// Owns a device copy of a table and its chunk prefix.
class MultiTensor {
public:
  MultiTensor() = default;
  MultiTensor(const MultiTensor &) = delete;
  MultiTensor &operator=(const MultiTensor &) = delete;
  ~MultiTensor() { reset(); }
  /// Uploads rows (synchronous). Returns false on a CUDA error.
  bool upload(const ApplyTensor *rows, int n) {
    reset();
    ntensors_ = n;
    if (n <= 0)
      return true;
    table_ = upload_table(rows, n);
    chunk_start_ = upload_chunk_starts(rows, n, &nchunks_);
    return table_ != nullptr && chunk_start_ != nullptr;
  }
  void reset() {
    if (table_)
      cudaFree(table_);
    if (chunk_start_)
      cudaFree(chunk_start_);
    table_ = nullptr;
    chunk_start_ = nullptr;
    ntensors_ = 0;
    nchunks_ = 0;
  }
  const ApplyTensor *table() const { return table_; }
  const int64_t *chunk_start() const { return chunk_start_; }
  int ntensors() const { return ntensors_; }
  int64_t nchunks() const { return nchunks_; }

private:
  ApplyTensor *table_ = nullptr;
  int64_t *chunk_start_ = nullptr;
  int ntensors_ = 0;
  int64_t nchunks_ = 0;
};

namespace detail {

// The tensor that chunk c belongs to: the largest t with cs[t] <= c (tensors
// without elements have cs[t] == cs[t + 1] and are skipped).
__device__ __forceinline__ int find_tensor(const int64_t *cs, int ntensors, int64_t c) {
  int lo = 0, hi = ntensors - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cs[mid] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void sum_squares_kernel(const ApplyTensor *table, const int64_t *cs, int ntensors, int64_t nchunks,
                                   double *out) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int t = find_tensor(cs, ntensors, c);
    const float *g = table[t].g;
    const int64_t n = table[t].n;
    const int64_t begin = (c - cs[t]) * kApplyChunk;
    const int64_t end = begin + kApplyChunk < n ? begin + kApplyChunk : n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double v = static_cast<double>(g[i]);
      s += v * v;
    }
  }
  s = block_allreduce(s, SumOp(), sh);
  if (threadIdx.x == 0 && s != 0.0)
    atomicAdd(out, s);
}

struct AdamArgs {
  double lr;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size; // lr / (1 - beta1^step)
  float bc2_sqrt;  // sqrt(1 - beta2^step)
  float grad_mult;
};

__global__ void adamw_kernel(const ApplyTensor *table, const int64_t *cs, int ntensors, int64_t nchunks, AdamArgs a) {
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int t = find_tensor(cs, ntensors, c);
    const ApplyTensor row = table[t];
    const int64_t begin = (c - cs[t]) * kApplyChunk;
    const int64_t end = begin + kApplyChunk < row.n ? begin + kApplyChunk : row.n;
    const float decay = static_cast<float>(1.0 - a.lr * static_cast<double>(row.weight_decay));
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float gi = row.g[i] * a.grad_mult;
      float p = row.p[i] * decay;
      const float m = row.s0[i] * a.beta1 + gi * a.one_minus_beta1;
      const float v = row.s1[i] * a.beta2 + gi * gi * a.one_minus_beta2;
      const float denom = sqrtf(v) / a.bc2_sqrt + a.eps;
      p = p - a.step_size * (m / denom);
      row.p[i] = p;
      row.s0[i] = m;
      row.s1[i] = v;
      if (row.p16)
        row.p16[i] = __float2half_rn(p);
      row.g[i] = 0.0f;
    }
  }
}

struct SgdArgs {
  float neg_lr, momentum, grad_mult;
  int nesterov;
  int first_step;
};

__global__ void sgd_kernel(const ApplyTensor *table, const int64_t *cs, int ntensors, int64_t nchunks, SgdArgs a) {
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int t = find_tensor(cs, ntensors, c);
    const ApplyTensor row = table[t];
    const int64_t begin = (c - cs[t]) * kApplyChunk;
    const int64_t end = begin + kApplyChunk < row.n ? begin + kApplyChunk : row.n;
    const float wd = row.weight_decay;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float p = row.p[i];
      float d = row.g[i] * a.grad_mult;
      if (wd != 0.0f)
        d = d + p * wd;
      if (a.momentum != 0.0f) {
        const float b = a.first_step ? d : row.s0[i] * a.momentum + d;
        row.s0[i] = b;
        d = a.nesterov ? d + b * a.momentum : b;
      }
      p = p + d * a.neg_lr;
      row.p[i] = p;
      if (row.p16)
        row.p16[i] = __float2half_rn(p);
      row.g[i] = 0.0f;
    }
  }
}

inline unsigned apply_grid(int64_t nchunks) {
  return static_cast<unsigned>(nchunks < 4096 ? nchunks : 4096);
}

} // namespace detail

/// out_dev[0] += sum over all tensors of g[i]^2 (in double). The caller zeroes
/// out_dev[0] first (or use sum_squares_all).
inline void sum_squares_multi(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors,
                              int64_t nchunks, double *out_dev) {
  if (ntensors <= 0 || nchunks <= 0)
    return;
  TCC_LAUNCH(detail::apply_grid(nchunks), detail::kThreads, 0, stream(), detail::sum_squares_kernel)(
      table_dev, chunk_start_dev, ntensors, nchunks, out_dev);
}

/// Synchronous: zeroes out_dev[0] (a device double), runs sum_squares_multi,
/// waits for stream() and returns the sum (NaN on a CUDA error).
inline double sum_squares_all(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors,
                              int64_t nchunks, double *out_dev) {
  if (cudaMemsetAsync(out_dev, 0, sizeof(double), stream()) != cudaSuccess)
    return std::numeric_limits<double>::quiet_NaN();
  sum_squares_multi(table_dev, chunk_start_dev, ntensors, nchunks, out_dev);
  double v = 0.0;
  if (cudaMemcpyAsync(&v, out_dev, sizeof(double), cudaMemcpyDeviceToHost, stream()) != cudaSuccess ||
      cudaStreamSynchronize(stream()) != cudaSuccess)
    return std::numeric_limits<double>::quiet_NaN();
  return v;
}

/// torch.optim.AdamW (amsgrad off), PyTorch's order of operations as the CPU
/// adamw_update, on every tensor of the table: g *= grad_mult; p *= 1 - lr*wd;
/// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; p -= lr/bc1 * m / (sqrt(v) /
/// sqrt(bc2) + eps); then p16 = half(p) if p16, and g = 0. Hyperparameters
/// are taken in double (floats convert implicitly); the constants are formed
/// in double on the host and rounded to float, as the CPU version does.
inline void adamw_multi(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors, int64_t nchunks,
                        double lr, double beta1, double beta2, double eps, int64_t step, double grad_mult) {
  if (ntensors <= 0 || nchunks <= 0)
    return;
  detail::AdamArgs a;
  a.lr = lr;
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  a.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  a.eps = static_cast<float>(eps);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  a.step_size = static_cast<float>(lr / bc1);
  a.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  a.grad_mult = static_cast<float>(grad_mult);
  TCC_LAUNCH(detail::apply_grid(nchunks), detail::kThreads, 0, stream(), detail::adamw_kernel)(table_dev, chunk_start_dev,
                                                                                        ntensors, nchunks, a);
}

/// torch.optim.SGD (dampening 0) as the CPU sgd_update: g *= grad_mult; L2
/// weight decay (per tensor) added to the gradient; momentum buffer (s0) = d
/// on step 1; Nesterov optional; then p16 refresh and g = 0.
inline void sgd_multi(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors, int64_t nchunks,
                      double lr, double momentum, bool nesterov, int64_t step, double grad_mult) {
  if (ntensors <= 0 || nchunks <= 0)
    return;
  detail::SgdArgs a;
  a.neg_lr = static_cast<float>(-lr);
  a.momentum = static_cast<float>(momentum);
  a.grad_mult = static_cast<float>(grad_mult);
  a.nesterov = nesterov ? 1 : 0;
  a.first_step = step == 1 ? 1 : 0;
  TCC_LAUNCH(detail::apply_grid(nchunks), detail::kThreads, 0, stream(), detail::sgd_kernel)(table_dev, chunk_start_dev,
                                                                                      ntensors, nchunks, a);
}

/// The fp16 working copy: dst[i] = half(src[i]).
inline void refresh_half(__half *dst, const float *src, int64_t n) { copy(dst, src, n); }

} // namespace tcc::cuda

// Fused (flash) attention, forward and backward, on tensor cores.
#include "attention.cuh"

#endif // TCC_RUNTIME_CUDA_KERNELS_CUH
