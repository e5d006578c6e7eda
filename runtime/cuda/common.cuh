//===- common.cuh - what every unit of a CUDA step shares ----------*- CUDA -*-===//
//
// The parts of tcc's CUDA kernel library (kernels.cuh) that the generated
// half and the fixed half of a step (step_host.h) both use: Shape, the op
// enums, stream(), the index-error flag, the device scalar helpers that
// generated kernels call, and the launch and reduction helpers.
//
// The __device__ variables here have internal linkage: each unit has its
// own (the fixed half reads the generated half's error flag through
// StepDesc::read_error_flag).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_COMMON_CUH
#define TCC_RUNTIME_CUDA_COMMON_CUH

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

// One flag per translation unit: a CUDA unit compiled without -rdc has its
// own device variables, so the flag, and the functions that read it, have
// internal linkage. A step reads its own unit's flag and the prebuilt
// launchers' (kernels.cu, read_and_clear_prebuilt_error_flag).
static __device__ int g_tcc_error_flag = 0;

/// Device address of this unit's error flag (an int, 0 or 1).
static inline int *error_flag_device() {
  void *p = nullptr;
  if (cudaGetSymbolAddress(&p, g_tcc_error_flag) != cudaSuccess)
    return nullptr;
  return static_cast<int *>(p);
}

/// Synchronous: waits for stream(), returns the flag (1 after an index error
/// in gather / gather_grad / sce_loss / sce_loss_grad since the last call, or
/// -1 if a CUDA call failed) and clears it.
static inline int read_and_clear_error_flag() {
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

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_COMMON_CUH
