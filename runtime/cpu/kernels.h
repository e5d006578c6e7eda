//===- kernels.h - reference CPU kernels for tcc's generated code -*- C++ -*-===//
//
// Header-only C++17 kernels that the C++ emitted for the CPU target calls, one
// call per tensor op. No dependencies beyond the standard library; builds with
// -fno-exceptions. All tensors are dense row-major, rank <= 8 (a rank-0 tensor
// has one element); zero-size dimensions are no-ops.
//
// Floating accumulations (matmul, gemm, reductions, softmax / layer_norm
// statistics, losses) are carried in double and stored to T.
//
// Element loops go through detail::nd_loop, which drops size-1 dimensions,
// merges dimensions that are contiguous for every operand, and hands the
// innermost dimension to a callback as (offsets, count, strides), so inner
// loops are plain strided (usually unit-stride) loops.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CPU_KERNELS_H
#define TCC_RUNTIME_CPU_KERNELS_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

// tcc_random.h sits beside this header in a step's build directory and one
// level up in the source tree.
#include "float_math.h"
#include "threads.h"

#if __has_include("tcc_random.h")
#include "tcc_random.h"
#else
#include "../tcc_random.h"
#endif

namespace tcc::cpu {

struct Shape {
  int32_t rank;
  int64_t dims[8];
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t i = 0; i < rank; ++i)
      n *= dims[i];
    return n;
  }
};

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Equal, Less, Greater, And, Or };
enum class UnaryOp { Sqrt, Neg, Exp, Log, Erf, Tanh, Sigmoid, Relu, Reciprocal, Abs, Not, Sin, Cos };

namespace detail {

// ---- shapes and strided iteration ------------------------------------------

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

inline int64_t prod(const int64_t *d, int32_t from, int32_t to) {
  int64_t n = 1;
  for (int32_t i = from; i < to; ++i)
    n *= d[i];
  return n;
}

// Visits every index of the shape `dims[0:rank]`. For K operands with strides
// st[k][*] (in elements) and base offsets base[k], calls
//   f(const int64_t *off, int64_t n, const int64_t *s)
// once per innermost run: operand k's elements of that run are at
// off[k] + i * s[k] for i in [0, n). Does nothing if any dim is 0.
template <int K, class F>
inline void nd_loop(int32_t rank, const int64_t *dims_in, const int64_t (&st_in)[K][8],
                    const int64_t (&base)[K], F &&f) {
  int64_t dims[8];
  int64_t st[K][8];
  int r = 0;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t n = dims_in[d];
    if (n == 0)
      return;
    if (n == 1)
      continue;
    if (r > 0) {
      bool merge = true;
      for (int k = 0; k < K; ++k)
        merge = merge && st[k][r - 1] == st_in[k][d] * n;
      if (merge) {
        dims[r - 1] *= n;
        for (int k = 0; k < K; ++k)
          st[k][r - 1] = st_in[k][d];
        continue;
      }
    }
    dims[r] = n;
    for (int k = 0; k < K; ++k)
      st[k][r] = st_in[k][d];
    ++r;
  }
  int64_t off[K];
  for (int k = 0; k < K; ++k)
    off[k] = base[k];
  if (r == 0) {
    int64_t z[K] = {};
    f(static_cast<const int64_t *>(off), int64_t(1), static_cast<const int64_t *>(z));
    return;
  }
  const int64_t inner = dims[r - 1];
  int64_t inner_st[K];
  for (int k = 0; k < K; ++k)
    inner_st[k] = st[k][r - 1];
  int64_t idx[8] = {};
  for (;;) {
    f(static_cast<const int64_t *>(off), inner, static_cast<const int64_t *>(inner_st));
    int d = r - 2;
    for (; d >= 0; --d) {
      for (int k = 0; k < K; ++k)
        off[k] += st[k][d];
      if (++idx[d] < dims[d])
        break;
      for (int k = 0; k < K; ++k)
        off[k] -= st[k][d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0)
      break;
  }
}

// ---- scalar helpers ----------------------------------------------------------

// Conversion without UB: floating -> integer truncates toward zero, NaN gives 0,
// values beyond int64 saturate, then wrap modulo 2^bits like an integer cast.
template <class TO, class TI> inline TO conv(TI x) {
  if constexpr (std::is_floating_point_v<TI> && std::is_integral_v<TO>) {
    double d = static_cast<double>(x);
    if (!(d == d))
      return TO(0);
    if constexpr (std::is_unsigned_v<TO> && sizeof(TO) == 8) {
      if (d >= 18446744073709551616.0)
        return std::numeric_limits<TO>::max();
      if (d >= 9223372036854775808.0)
        return static_cast<TO>(d);
    }
    int64_t v;
    if (d >= 9223372036854775808.0)
      v = std::numeric_limits<int64_t>::max();
    else if (d < -9223372036854775808.0)
      v = std::numeric_limits<int64_t>::min();
    else
      v = static_cast<int64_t>(d);
    return static_cast<TO>(v);
  } else {
    return static_cast<TO>(x);
  }
}

template <class C> inline constexpr bool kWideInt = std::is_integral_v<C> && sizeof(C) >= sizeof(int);

// Integer arithmetic wraps (no signed-overflow UB).
template <class C> inline C add_(C x, C y) {
  if constexpr (kWideInt<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(x) + static_cast<U>(y));
  } else {
    return static_cast<C>(x + y);
  }
}
template <class C> inline C sub_(C x, C y) {
  if constexpr (kWideInt<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(x) - static_cast<U>(y));
  } else {
    return static_cast<C>(x - y);
  }
}
template <class C> inline C mul_(C x, C y) {
  if constexpr (kWideInt<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    return static_cast<C>(x * y);
  }
}
template <class C> inline C neg_(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(0) - static_cast<U>(x));
  } else {
    return -x;
  }
}
// Integer division truncates toward zero; x / 0 == 0; INT_MIN / -1 wraps.
template <class C> inline C div_(C x, C y) {
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

template <class T> inline bool nonzero(T x) { return x != T(0); }

template <class TO, class TA, class TB, class F>
inline void binary_apply(F f, TO *out, const Shape &os, const TA *a, const Shape &as, const TB *b,
                         const Shape &bs) {
  int64_t st[3][8];
  contig_strides(os, st[0]);
  bcast_strides(os, as, st[1]);
  bcast_strides(os, bs, st[2]);
  const int64_t base[3] = {0, 0, 0};
  nd_loop<3>(os.rank, os.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    TO *po = out + o[0]; // the output's inner stride is always 1
    const TA *pa = a + o[1];
    const TB *pb = b + o[2];
    if (s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i)
        po[i] = f(pa[i], pb[i]);
    } else if (s[1] == 1 && s[2] == 0) {
      const TB y = *pb;
      for (int64_t i = 0; i < n; ++i)
        po[i] = f(pa[i], y);
    } else if (s[1] == 0 && s[2] == 1) {
      const TA x = *pa;
      for (int64_t i = 0; i < n; ++i)
        po[i] = f(x, pb[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        po[i] = f(pa[i * s[1]], pb[i * s[2]]);
    }
  });
}

template <class T, class F> inline void unary_apply(F f, T *out, const T *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = f(in[i]);
}

// op(A)[m,k] = a[m*a_rs + k*a_cs]; op(B)[k,n] = b[k*b_rs + n*b_cs].
// For each row m, computes acc[n] = sum_k op(A)[m,k] * op(B)[k,n] in double and
// calls store(m, acc). `acc` holds 4 * N doubles.
template <class T, class Store>
inline void mm_core(int64_t M, int64_t N, int64_t K, const T *a, int64_t a_rs, int64_t a_cs, const T *b,
                    int64_t b_rs, int64_t b_cs, double *acc, Store &&store) {
  int64_t m = 0;
  if (b_cs == 1) {
    // Four rows at a time: each row of B is loaded once for four rows of A.
    // Every acc element sums the same terms in the same order (k ascending)
    // as the one-row loop below, so the results are bit-identical.
    double *acc0 = acc, *acc1 = acc + N, *acc2 = acc + 2 * N, *acc3 = acc + 3 * N;
    for (; m + 4 <= M; m += 4) {
      const T *a0 = a + m * a_rs, *a1 = a0 + a_rs, *a2 = a1 + a_rs, *a3 = a2 + a_rs;
      for (int64_t n = 0; n < N; ++n)
        acc0[n] = acc1[n] = acc2[n] = acc3[n] = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double v0 = static_cast<double>(a0[k * a_cs]), v1 = static_cast<double>(a1[k * a_cs]),
                     v2 = static_cast<double>(a2[k * a_cs]), v3 = static_cast<double>(a3[k * a_cs]);
        const T *br = b + k * b_rs;
        for (int64_t n = 0; n < N; ++n) {
          const double bv = static_cast<double>(br[n]);
          acc0[n] += v0 * bv;
          acc1[n] += v1 * bv;
          acc2[n] += v2 * bv;
          acc3[n] += v3 * bv;
        }
      }
      store(m, static_cast<const double *>(acc0));
      store(m + 1, static_cast<const double *>(acc1));
      store(m + 2, static_cast<const double *>(acc2));
      store(m + 3, static_cast<const double *>(acc3));
    }
  }
  for (; m < M; ++m) {
    const T *ar = a + m * a_rs;
    if (b_cs == 1) { // rows of B contiguous: m-k-n order, unit-stride inner loop
      for (int64_t n = 0; n < N; ++n)
        acc[n] = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = static_cast<double>(ar[k * a_cs]);
        const T *br = b + k * b_rs;
        for (int64_t n = 0; n < N; ++n)
          acc[n] += av * static_cast<double>(br[n]);
      }
    } else { // columns of B contiguous (transB): dot products
      for (int64_t n = 0; n < N; ++n) {
        const T *bc = b + n * b_cs;
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k)
          s += static_cast<double>(ar[k * a_cs]) * static_cast<double>(bc[k * b_rs]);
        acc[n] = s;
      }
    }
    store(m, static_cast<const double *>(acc));
  }
}

/// The sum of x[0, n) in double, in a fixed order that does not depend on
/// the thread count: four interleaved partial sums, then (s0 + s1) + (s2 +
/// s3); four chains of additions instead of one. What softmax and the
/// cross-entropy losses sum their exponentials with (the same bits fused or
/// not).
inline double sum4(const double *x, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += x[i];
    s1 += x[i + 1];
    s2 += x[i + 2];
    s3 += x[i + 3];
  }
  for (; i < n; ++i)
    s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}

/// A scratch row of at least n doubles, the calling thread's own.
inline double *scratch_row(int64_t n) {
  thread_local std::vector<double> row;
  if (static_cast<int64_t>(row.size()) < n)
    row.resize(static_cast<size_t>(n));
  return row.data();
}

/// e^x for a kernel that computes in double on behalf of T: std::exp for
/// double steps (the f64 reference), exp_f32 for float ones, whose results
/// are rounded to float anyway.
template <class T> inline double exp_for(double x) {
  if constexpr (std::is_same_v<T, float>)
    return static_cast<double>(exp_f32(static_cast<float>(x)));
  else
    return std::exp(x);
}

/// A row's exponentials e^(x[i] - m) into E[0, n) (a loop the compiler
/// vectorises for float), and their sum (sum4): softmax's and the
/// cross-entropy losses' (the same bits fused or not).
template <class T> double exp_row(const T *x, int64_t n, double m, double *E) {
  for (int64_t i = 0; i < n; ++i)
    E[i] = exp_for<T>(static_cast<double>(x[i]) - m);
  return sum4(E, n);
}

} // namespace detail

// ---- elementwise -------------------------------------------------------------

/// One element of a binary op: the scalar form that `binary` applies
/// elementwise and that fused loops call directly (same results, bit for bit).
template <BinaryOp Op, class TO, class TA, class TB> inline TO binary_scalar(TA x, TB y) {
  using C = std::common_type_t<TA, TB>;
  using namespace detail;
  if constexpr (Op == BinaryOp::Add)
    return conv<TO>(add_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Sub)
    return conv<TO>(sub_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Mul)
    return conv<TO>(mul_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Div)
    return conv<TO>(div_<C>(C(x), C(y)));
  else if constexpr (Op == BinaryOp::Pow)
    return conv<TO>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  else if constexpr (Op == BinaryOp::Equal)
    return TO(C(x) == C(y) ? 1 : 0);
  else if constexpr (Op == BinaryOp::Less)
    return TO(C(x) < C(y) ? 1 : 0);
  else if constexpr (Op == BinaryOp::Greater)
    return TO(C(x) > C(y) ? 1 : 0);
  else if constexpr (Op == BinaryOp::And)
    return TO(nonzero(x) && nonzero(y) ? 1 : 0);
  else
    return TO(nonzero(x) || nonzero(y) ? 1 : 0);
}

/// One element of a unary op (see binary_scalar). Floating T uses T's own
/// <cmath> overloads; integer T computes transcendental functions in double.
template <UnaryOp Op, class T> inline T unary_scalar(T x) {
  using namespace detail;
  constexpr bool kFloat = std::is_floating_point_v<T>;
  using F = std::conditional_t<kFloat, T, double>;
  if constexpr (Op == UnaryOp::Sqrt)
    return conv<T>(std::sqrt(F(x)));
  else if constexpr (Op == UnaryOp::Neg)
    return neg_<T>(x);
  else if constexpr (Op == UnaryOp::Exp)
    return conv<T>(std::exp(F(x)));
  else if constexpr (Op == UnaryOp::Log)
    return conv<T>(std::log(F(x)));
  else if constexpr (Op == UnaryOp::Erf)
    return conv<T>(std::erf(F(x)));
  else if constexpr (Op == UnaryOp::Tanh)
    return conv<T>(std::tanh(F(x)));
  else if constexpr (Op == UnaryOp::Sin)
    return conv<T>(std::sin(F(x)));
  else if constexpr (Op == UnaryOp::Cos)
    return conv<T>(std::cos(F(x)));
  else if constexpr (Op == UnaryOp::Sigmoid && std::is_same_v<T, float>) {
    // exp_f32 of -|x|, so that the loop vectorises: 1 / (1 + e) for x >= 0,
    // e / (1 + e) below (stable for large |x|; NaN gives NaN).
    const float e = exp_f32(-std::fabs(x));
    const float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
  } else if constexpr (Op == UnaryOp::Sigmoid) { // stable for large |x|
    F v = F(x);
    if (v >= F(0))
      return conv<T>(F(1) / (F(1) + std::exp(-v)));
    F e = std::exp(v);
    return conv<T>(e / (F(1) + e));
  } else if constexpr (Op == UnaryOp::Relu) // NaN propagates
    return x < T(0) ? T(0) : x;
  else if constexpr (Op == UnaryOp::Reciprocal)
    return div_<T>(T(1), x);
  else if constexpr (Op == UnaryOp::Abs) {
    if constexpr (kFloat)
      return std::fabs(x);
    else if constexpr (std::is_signed_v<T>)
      return x < T(0) ? neg_<T>(x) : x;
    else
      return x;
  } else
    return T(x == T(0) ? 1 : 0);
}

template <class TO, class TA, class TB>
void binary(BinaryOp op, TO *out, const Shape &os, const TA *a, const Shape &as, const TB *b, const Shape &bs) {
  using namespace detail;
  switch (op) {
#define TCC_BINARY_CASE(K)                                                                     \
  case BinaryOp::K:                                                                          \
    binary_apply([](TA x, TB y) { return binary_scalar<BinaryOp::K, TO>(x, y); }, out, os, a, as, b, bs); \
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

template <class T> void unary(UnaryOp op, T *out, const T *in, int64_t n) {
  using namespace detail;
  switch (op) {
#define TCC_UNARY_CASE(K)                                                                      \
  case UnaryOp::K:                                                                           \
    unary_apply([](T x) { return unary_scalar<UnaryOp::K>(x); }, out, in, n);               \
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

template <class TO, class TI> void cast(TO *out, const TI *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = detail::conv<TO>(in[i]);
}

template <class TI> void cast_to_bool(uint8_t *out, const TI *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = in[i] != TI(0) ? 1 : 0; // NaN -> 1, as NumPy
}

template <class T>
void where(T *out, const Shape &os, const uint8_t *c, const Shape &cs, const T *x, const Shape &xs, const T *y,
           const Shape &ys) {
  int64_t st[4][8];
  detail::contig_strides(os, st[0]);
  detail::bcast_strides(os, cs, st[1]);
  detail::bcast_strides(os, xs, st[2]);
  detail::bcast_strides(os, ys, st[3]);
  const int64_t base[4] = {0, 0, 0, 0};
  detail::nd_loop<4>(os.rank, os.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    T *po = out + o[0];
    const uint8_t *pc = c + o[1];
    const T *px = x + o[2];
    const T *py = y + o[3];
    for (int64_t i = 0; i < n; ++i)
      po[i] = pc[i * s[1]] ? px[i * s[2]] : py[i * s[3]];
  });
}

template <class T> void broadcast_to(T *out, const Shape &os, const T *in, const Shape &is) {
  int64_t st[2][8];
  detail::contig_strides(os, st[0]);
  detail::bcast_strides(os, is, st[1]);
  const int64_t base[2] = {0, 0};
  detail::nd_loop<2>(os.rank, os.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    T *po = out + o[0];
    const T *pi = in + o[1];
    if (s[1] == 0) {
      std::fill_n(po, n, *pi);
    } else if (s[1] == 1) {
      std::copy_n(pi, n, po);
    } else {
      for (int64_t i = 0; i < n; ++i)
        po[i] = pi[i * s[1]];
    }
  });
}

template <class T> void copy(T *out, const T *in, int64_t n) {
  if (out == in || n <= 0)
    return;
  std::memmove(static_cast<void *>(out), static_cast<const void *>(in), static_cast<size_t>(n) * sizeof(T));
}

template <class T> void fill(T *out, int64_t n, T value) {
  if (n > 0)
    std::fill_n(out, n, value);
}

/// Dropout's keep mask (runtime/tcc_random.h): out[i] = 1 when element i of
/// dropout `stream` is kept in the micro-step whose random state is
/// rng = [seed, counter]; `threshold` is ceil(ratio * 2^24).
inline void random_keep(uint8_t *out, const int64_t *rng, uint64_t stream, uint32_t threshold,
                        int64_t n) {
  const uint64_t k = random::key((uint64_t)rng[0], (uint64_t)rng[1], stream);
  for (int64_t i = 0; i < n; ++i)
    out[i] = random::keep(k, (uint64_t)i, threshold) ? 1 : 0;
}

// ---- linear algebra ----------------------------------------------------------

/// A row of a product handed to a GEMM epilogue: `n` accumulators (double)
/// of the output elements starting at flat index `base`. Type-erased (a
/// callable's address and a trampoline), so every epilogue shares one
/// instantiation of the matmul.
struct RowStore {
  void *callable;
  void (*call)(void *callable, int64_t base, const double *row, int64_t n);
  template <class F> static RowStore of(F &f) {
    return {&f, [](void *c, int64_t base, const double *row, int64_t n) { (*static_cast<F *>(c))(base, row, n); }};
  }
};

#ifdef TCC_CPU_BLAS
// The fp32 step's GEMMs go to the CBLAS library tcc was configured with
// (OpenBLAS on Debian; docs/cpu.md says why), linked into step.so. Declared
// here rather than included: the one routine is standard CBLAS, and each
// library puts cblas.h somewhere else. 101 = CblasRowMajor, 111/112 =
// CblasNoTrans/CblasTrans.
extern "C" void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
// OpenBLAS (CMake's TCC_CPU_BLAS_LIBRARY finds it by that name) runs each
// call on one thread: the step's own pool (threads.h) splits the GEMMs, so
// the library's threads never spin beside the pool's, and a multi-threaded
// call's split cannot make results depend on the thread count.
extern "C" void openblas_set_num_threads(int);
namespace detail {
inline void blas_one_thread() {
  static const bool once = (openblas_set_num_threads(1), true);
  (void)once;
}
} // namespace detail
#endif

namespace detail {

/// Rows [m0, m0 + rows) of op(A) x op(B) for one matrix pair (op(A) is M x
/// K, op(B) K x N; lda and ldb the stored matrices' row strides), by the
/// CBLAS library's sgemm in row blocks small enough for a scratch buffer,
/// each row then widened to double and handed to `call` (where a fused
/// epilogue reads it: the same float products the unfused step stores).
/// `out` non-null: no epilogue, the rows go straight to out + po.
inline void blas_rows(int64_t m0, int64_t rows, int64_t N, int64_t K, const float *a, int64_t lda, bool ta,
                      const float *b, int64_t ldb, bool tb, float *out, int64_t po,
                      void (*call)(void *, int64_t, const double *, int64_t), void *callable) {
#ifdef TCC_CPU_BLAS
  const float *am = ta ? a + m0 : a + m0 * lda;
  if (out) {
    cblas_sgemm(101, ta ? 112 : 111, tb ? 112 : 111, static_cast<int>(rows), static_cast<int>(N),
                static_cast<int>(K), 1.0f, am, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
                out + po + m0 * N, static_cast<int>(N));
    return;
  }
  // About 8 MB of scratch: at least 64 rows (a vocabulary-sized N).
  const int64_t block = std::min(rows, std::max<int64_t>(64, (int64_t(1) << 21) / N));
  thread_local std::vector<float> scratch;
  thread_local std::vector<double> wide;
  if (static_cast<int64_t>(scratch.size()) < block * N)
    scratch.resize(static_cast<size_t>(block * N));
  if (static_cast<int64_t>(wide.size()) < N)
    wide.resize(static_cast<size_t>(N));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t mb = std::min(block, rows - r0);
    cblas_sgemm(101, ta ? 112 : 111, tb ? 112 : 111, static_cast<int>(mb), static_cast<int>(N),
                static_cast<int>(K), 1.0f, ta ? am + r0 : am + r0 * lda, static_cast<int>(lda), b,
                static_cast<int>(ldb), 0.0f, scratch.data(), static_cast<int>(N));
    for (int64_t m = 0; m < mb; ++m) {
      const float *r = scratch.data() + m * N;
      for (int64_t n = 0; n < N; ++n)
        wide[n] = static_cast<double>(r[n]);
      call(callable, po + (m0 + r0 + m) * N, wide.data(), N);
    }
  }
#else
  (void)m0, (void)rows, (void)N, (void)K, (void)a, (void)lda, (void)ta, (void)b, (void)ldb, (void)tb,
      (void)out, (void)po, (void)call, (void)callable;
#endif
}

} // namespace detail

/// numpy matmul of op(a) and op(b), where op(x) swaps x's last two
/// dimensions when `ta` / `tb` (the shapes are the stored ones); a
/// transposed operand is read through strides, with the same summation order
/// as the materialized transpose (bit-identical results). Each row of the
/// product goes to `store`, which rounds it to T and writes it, or computes a
/// fused epilogue on it first (tcc-fuse's GEMM epilogues).
template <class T>
void matmul_rows(const T *a, const Shape &as, const T *b, const Shape &bs, bool ta, bool tb, RowStore store);

template <class T>
void matmul_into(T *out, const T *a, const Shape &as, const T *b, const Shape &bs, bool ta, bool tb,
                 RowStore store);

template <class T>
void matmul(T *out, const T *a, const Shape &as, const T *b, const Shape &bs, bool ta = false,
            bool tb = false) {
  auto plain = [out](int64_t base, const double *row, int64_t n) {
    for (int64_t k = 0; k < n; ++k)
      out[base + k] = static_cast<T>(row[k]);
  };
  matmul_into(out, a, as, b, bs, ta, tb, RowStore::of(plain));
}

template <class T>
void matmul_rows(const T *a, const Shape &as, const T *b, const Shape &bs, bool ta, bool tb, RowStore store) {
  matmul_into<T>(nullptr, a, as, b, bs, ta, tb, store);
}

/// The one body of matmul and matmul_rows: `out` non-null when the rows are
/// only stored (no epilogue), which lets a BLAS write them in place.
template <class T>
void matmul_into(T *out, const T *a, const Shape &as, const T *b, const Shape &bs, bool ta, bool tb,
                 RowStore store) {
  const bool a1 = as.rank == 1, b1 = bs.rank == 1;
  ta = ta && !a1;
  tb = tb && !b1;
  const int64_t M = a1 ? 1 : as.dims[as.rank - (ta ? 1 : 2)];
  const int64_t K = as.dims[as.rank - (ta ? 2 : 1)];
  const int64_t N = b1 ? 1 : bs.dims[bs.rank - (tb ? 2 : 1)];
  // Batch shapes (dims before the matrix dims), broadcast against each other.
  Shape ab{a1 ? 0 : as.rank - 2, {}}, bb{b1 ? 0 : bs.rank - 2, {}};
  for (int32_t i = 0; i < ab.rank; ++i)
    ab.dims[i] = as.dims[i];
  for (int32_t i = 0; i < bb.rank; ++i)
    bb.dims[i] = bs.dims[i];
  Shape ob{std::max(ab.rank, bb.rank), {}};
  for (int32_t i = 0; i < ob.rank; ++i) {
    int32_t ia = i - (ob.rank - ab.rank), ib = i - (ob.rank - bb.rank);
    int64_t da = ia >= 0 ? ab.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
    ob.dims[i] = da == 1 ? db : da;
  }
  if (ob.numel() == 0 || M == 0 || N == 0)
    return;
  int64_t st[3][8];
  detail::contig_strides(ob, st[0]);
  detail::bcast_strides(ob, ab, st[1]);
  detail::bcast_strides(ob, bb, st[2]);
  for (int32_t i = 0; i < ob.rank; ++i) {
    st[0][i] *= M * N;
    st[1][i] *= M * K;
    st[2][i] *= K * N;
  }
  if constexpr (std::is_same_v<T, float>) {
#ifdef TCC_CPU_BLAS
    detail::blas_one_thread();
    constexpr int64_t kIntMax = 2147483647;
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    if (K > 0 && M <= kIntMax && N <= kIntMax && K <= kIntMax && lda <= kIntMax && ldb <= kIntMax) {
      // The matrix pairs (offsets of a, b and the product), then the pool's
      // threads over pairs and blocks of 64 rows of each product: one
      // sgemm call per block whatever the thread count (a BLAS may take
      // another path, and sum in another order, for another shape), so the
      // results do not depend on it.
      std::vector<int64_t> pairs;
      const int64_t base0[3] = {0, 0, 0};
      detail::nd_loop<3>(ob.rank, ob.dims, st, base0, [&](const int64_t *o, int64_t nb, const int64_t *s) {
        for (int64_t i = 0; i < nb; ++i)
          for (int k = 0; k < 3; ++k)
            pairs.push_back(o[k] + i * s[k]);
      });
      const int64_t P = static_cast<int64_t>(pairs.size() / 3);
      constexpr int64_t kRows = 64;
      const int64_t parts = (M + kRows - 1) / kRows;
      parallel_for(P * parts, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          const int64_t p = t / parts, part = t % parts;
          const int64_t m0 = part * kRows, m1 = std::min(M, m0 + kRows);
          detail::blas_rows(m0, m1 - m0, N, K, a + pairs[3 * p + 1], std::max<int64_t>(lda, 1), ta,
                            b + pairs[3 * p + 2], std::max<int64_t>(ldb, 1), tb, out, pairs[3 * p],
                            store.call, store.callable);
        }
      });
      return;
    }
#endif
  }
  std::vector<double> acc(4 * static_cast<size_t>(N));
  // A transposed B is packed into rows first (once per distinct B matrix):
  // the row-of-B loop vectorizes, dot products over columns do not. The
  // products and their order are the same either way.
  std::vector<T> packed(tb ? static_cast<size_t>(K * N) : 0);
  const T *packedFrom = nullptr;
  const int64_t base[3] = {0, 0, 0};
  detail::nd_loop<3>(ob.rank, ob.dims, st, base, [&](const int64_t *o, int64_t nb, const int64_t *s) {
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t po = o[0] + i * s[0];
      const T *pb = b + o[2] + i * s[2];
      if (tb) {
        if (pb != packedFrom) {
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
              packed[k * N + n] = pb[n * K + k];
          packedFrom = pb;
        }
        pb = packed.data();
      }
      detail::mm_core<T>(M, N, K, a + o[1] + i * s[1], ta ? 1 : K, ta ? M : 1, pb, N, 1, acc.data(),
                         [&](int64_t m, const double *r) { store.call(store.callable, po + m * N, r, N); });
    }
  });
}

template <class T>
void gemm(T *out, const T *a, const T *b, int64_t M, int64_t N, int64_t K, bool transA, bool transB, double alpha,
          double beta, const T *c, const Shape &cs) {
  if (M <= 0 || N <= 0)
    return;
  int64_t crs = 0, ccs = 0;
  const bool use_c = c != nullptr && beta != 0.0;
  if (use_c) {
    const Shape mn{2, {M, N}};
    int64_t st[8];
    detail::bcast_strides(mn, cs, st);
    crs = st[0];
    ccs = st[1];
  }
  std::vector<double> acc(4 * static_cast<size_t>(N));
  const int64_t a_rs = transA ? 1 : K, a_cs = transA ? M : 1;
  const int64_t b_rs = transB ? 1 : N, b_cs = transB ? K : 1;
  detail::mm_core<T>(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, acc.data(), [&](int64_t m, const double *r) {
    T *po = out + m * N;
    if (use_c) {
      const T *pc = c + m * crs;
      for (int64_t n = 0; n < N; ++n)
        po[n] = static_cast<T>(alpha * r[n] + beta * static_cast<double>(pc[n * ccs]));
    } else {
      for (int64_t n = 0; n < N; ++n)
        po[n] = static_cast<T>(alpha * r[n]);
    }
  });
}

// ---- normalization -----------------------------------------------------------

template <class T> void softmax(T *out, const T *in, const Shape &s, int axis, bool log) {
  const int64_t outer = detail::prod(s.dims, 0, axis);
  const int64_t L = s.dims[axis];
  const int64_t inner = detail::prod(s.dims, axis + 1, s.rank);
  if (outer == 0 || L == 0 || inner == 0)
    return;
  if (inner == 1) {
    parallel_for(outer, std::max<int64_t>(1, 16384 / L), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T *x = in + o * L;
        T *y = out + o * L;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t l = 0; l < L; ++l)
          m = std::max(m, static_cast<double>(x[l]));
        double *E = detail::scratch_row(L);
        const double sum = detail::exp_row(x, L, m, E);
        if (log) {
          const double ls = std::log(sum);
          for (int64_t l = 0; l < L; ++l)
            y[l] = static_cast<T>(static_cast<double>(x[l]) - m - ls);
        } else {
          const double inv = 1.0 / sum;
          for (int64_t l = 0; l < L; ++l)
            y[l] = static_cast<T>(E[l] * inv);
        }
      }
    });
    return;
  }
  // Middle axis: statistics for a row of `inner` positions at once, so every
  // loop runs over contiguous memory.
  std::vector<double> mx(static_cast<size_t>(inner)), sm(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T *x = in + o * L * inner;
    T *y = out + o * L * inner;
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<double>::infinity());
    std::fill(sm.begin(), sm.end(), 0.0);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < inner; ++i)
        mx[i] = std::max(mx[i], static_cast<double>(x[l * inner + i]));
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < inner; ++i)
        sm[i] += detail::exp_for<T>(static_cast<double>(x[l * inner + i]) - mx[i]);
    if (log) {
      for (int64_t i = 0; i < inner; ++i)
        sm[i] = mx[i] + std::log(sm[i]);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t i = 0; i < inner; ++i)
          y[l * inner + i] = static_cast<T>(static_cast<double>(x[l * inner + i]) - sm[i]);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        sm[i] = 1.0 / sm[i];
      for (int64_t l = 0; l < L; ++l)
        for (int64_t i = 0; i < inner; ++i)
          y[l * inner + i] = static_cast<T>(detail::exp_for<T>(static_cast<double>(x[l * inner + i]) - mx[i]) * sm[i]);
    }
  }
}

// mean / inv_std_dev may be nullptr (optional ONNX outputs). scale nullptr = 1.
// With an empty normalized shape, mean and inv_std_dev are NaN.
template <class T>
void layer_norm(T *y, T *mean, T *inv_std_dev, const T *x, const Shape &xs, int axis, const T *scale,
                const Shape &ss, const T *bias, const Shape &bs, double eps) {
  const int64_t outer = detail::prod(xs.dims, 0, axis);
  const int64_t inner = detail::prod(xs.dims, axis, xs.rank);
  if (outer == 0)
    return;
  // Offsets of scale / bias per normalized element (identity when same size).
  Shape ns{xs.rank - axis, {}};
  for (int32_t i = 0; i < ns.rank; ++i)
    ns.dims[i] = xs.dims[axis + i];
  std::vector<int64_t> soff, boff;
  auto build = [&](const Shape &ps, std::vector<int64_t> &offs) {
    offs.resize(static_cast<size_t>(inner));
    int64_t st[2][8];
    detail::contig_strides(ns, st[0]);
    detail::bcast_strides(ns, ps, st[1]);
    const int64_t base[2] = {0, 0};
    detail::nd_loop<2>(ns.rank, ns.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
      for (int64_t i = 0; i < n; ++i)
        offs[static_cast<size_t>(o[0] + i)] = o[1] + i * s[1];
    });
  };
  const bool scale_direct = scale == nullptr || ss.numel() == inner;
  const bool bias_direct = bias == nullptr || bs.numel() == inner;
  if (!scale_direct)
    build(ss, soff);
  if (!bias_direct)
    build(bs, boff);
  parallel_for(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      const T *xr = x + o * inner;
      T *yr = y + o * inner;
      double sum = 0.0;
      for (int64_t i = 0; i < inner; ++i)
        sum += static_cast<double>(xr[i]);
      const double mu = sum / static_cast<double>(inner);
      double sq = 0.0;
      for (int64_t i = 0; i < inner; ++i) {
        const double d = static_cast<double>(xr[i]) - mu;
        sq += d * d;
      }
      const double var = sq / static_cast<double>(inner);
      const double inv = 1.0 / std::sqrt(var + eps);
      if (mean)
        mean[o] = static_cast<T>(mu);
      if (inv_std_dev)
        inv_std_dev[o] = static_cast<T>(inv);
      for (int64_t i = 0; i < inner; ++i) {
        double v = (static_cast<double>(xr[i]) - mu) * inv;
        if (scale)
          v *= static_cast<double>(scale_direct ? scale[i] : scale[soff[static_cast<size_t>(i)]]);
        if (bias)
          v += static_cast<double>(bias_direct ? bias[i] : bias[boff[static_cast<size_t>(i)]]);
        yr[i] = static_cast<T>(v);
      }
    }
  });
}

// ---- reductions and data movement -------------------------------------------

// Mean over an empty set of elements is NaN (as NumPy); a sum is 0.
template <class T> void reduce(T *out, const T *in, const Shape &is, uint32_t axes_mask, bool mean) {
  uint32_t mask = 0;
  for (int32_t d = 0; d < is.rank; ++d)
    mask |= axes_mask & (1u << d);
  if (mask == 0) {
    copy(out, in, is.numel());
    return;
  }
  // Output strides as seen from the input's index space (0 on reduced axes).
  int64_t st[2][8];
  detail::contig_strides(is, st[0]);
  int64_t on = 1, count = 1;
  for (int32_t d = is.rank - 1; d >= 0; --d) {
    if (mask & (1u << d)) {
      st[1][d] = 0;
      count *= is.dims[d];
    } else {
      st[1][d] = on;
      on *= is.dims[d];
    }
  }
  if (on == 0)
    return;
  std::vector<double> acc(static_cast<size_t>(on), 0.0);
  double *pa = acc.data();
  const int64_t base[2] = {0, 0};
  detail::nd_loop<2>(is.rank, is.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    const T *pi = in + o[0];
    double *po = pa + o[1];
    if (s[1] == 0) {
      double t = 0.0;
      for (int64_t i = 0; i < n; ++i)
        t += static_cast<double>(pi[i]);
      *po += t;
    } else {
      for (int64_t i = 0; i < n; ++i)
        po[i * s[1]] += static_cast<double>(pi[i]);
    }
  });
  const double f = mean ? 1.0 / static_cast<double>(count) : 1.0;
  for (int64_t i = 0; i < on; ++i)
    out[i] = detail::conv<T>(mean ? (count == 0 ? std::numeric_limits<double>::quiet_NaN() : pa[i] * f) : pa[i]);
}

namespace detail {
template <class I> inline bool norm_index(I raw, int64_t n, int64_t &v) {
  v = static_cast<int64_t>(raw);
  if (v < 0)
    v += n;
  return v >= 0 && v < n;
}
} // namespace detail

template <class T, class I> int gather(T *out, const T *data, const Shape &ds, const I *idx, int64_t num_idx, int axis) {
  const int64_t outer = detail::prod(ds.dims, 0, axis);
  const int64_t A = ds.dims[axis];
  const int64_t inner = detail::prod(ds.dims, axis + 1, ds.rank);
  int64_t v;
  for (int64_t j = 0; j < num_idx; ++j)
    if (!detail::norm_index(idx[j], A, v))
      return 1;
  if (inner == 0)
    return 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T *src = data + o * A * inner;
    T *dst = out + o * num_idx * inner;
    for (int64_t j = 0; j < num_idx; ++j) {
      detail::norm_index(idx[j], A, v);
      std::copy_n(src + v * inner, inner, dst + j * inner);
    }
  }
  return 0;
}

template <class T, class I>
int gather_grad(T *out, const Shape &ds, const T *grad, const I *idx, int64_t num_idx, int axis) {
  fill(out, ds.numel(), T(0));
  const int64_t outer = detail::prod(ds.dims, 0, axis);
  const int64_t A = ds.dims[axis];
  const int64_t inner = detail::prod(ds.dims, axis + 1, ds.rank);
  int64_t v;
  for (int64_t j = 0; j < num_idx; ++j)
    if (!detail::norm_index(idx[j], A, v))
      return 1;
  for (int64_t o = 0; o < outer; ++o) {
    T *dst = out + o * A * inner;
    const T *src = grad + o * num_idx * inner;
    for (int64_t j = 0; j < num_idx; ++j) {
      detail::norm_index(idx[j], A, v);
      T *d = dst + v * inner;
      const T *g = src + j * inner;
      for (int64_t i = 0; i < inner; ++i)
        d[i] += g[i];
    }
  }
  return 0;
}

template <class T> void transpose(T *out, const T *in, const Shape &is, const int64_t *perm) {
  Shape os{is.rank, {}};
  int64_t ist[8], st[2][8];
  detail::contig_strides(is, ist);
  for (int32_t i = 0; i < is.rank; ++i) {
    os.dims[i] = is.dims[perm[i]];
    st[1][i] = ist[perm[i]];
  }
  detail::contig_strides(os, st[0]);
  const int64_t base[2] = {0, 0};
  detail::nd_loop<2>(os.rank, os.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    T *po = out + o[0];
    const T *pi = in + o[1];
    for (int64_t i = 0; i < n; ++i)
      po[i] = pi[i * s[1]];
  });
}

template <class T>
void slice(T *out, const Shape &os, const T *in, const Shape &is, const int64_t *starts, const int64_t *steps) {
  int64_t ist[8], st[2][8];
  detail::contig_strides(is, ist);
  detail::contig_strides(os, st[0]);
  int64_t b = 0;
  for (int32_t d = 0; d < os.rank; ++d) {
    b += starts[d] * ist[d];
    st[1][d] = steps[d] * ist[d];
  }
  const int64_t base[2] = {0, b};
  detail::nd_loop<2>(os.rank, os.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    T *po = out + o[0];
    const T *pi = in + o[1];
    for (int64_t i = 0; i < n; ++i)
      po[i] = pi[i * s[1]];
  });
}

template <class T>
void slice_grad(T *out, const Shape &is, const T *g, const Shape &gs, const int64_t *starts, const int64_t *steps) {
  fill(out, is.numel(), T(0));
  int64_t ist[8], st[2][8];
  detail::contig_strides(is, ist);
  detail::contig_strides(gs, st[0]);
  int64_t b = 0;
  for (int32_t d = 0; d < gs.rank; ++d) {
    b += starts[d] * ist[d];
    st[1][d] = steps[d] * ist[d];
  }
  const int64_t base[2] = {0, b};
  detail::nd_loop<2>(gs.rank, gs.dims, st, base, [&](const int64_t *o, int64_t n, const int64_t *s) {
    const T *pg = g + o[0];
    T *po = out + o[1];
    for (int64_t i = 0; i < n; ++i)
      po[i * s[1]] += pg[i];
  });
}

template <class T> void concat(T *out, const Shape &os, int axis, int n, const T *const *ins, const int64_t *axis_sizes) {
  const int64_t outer = detail::prod(os.dims, 0, axis);
  const int64_t inner = detail::prod(os.dims, axis + 1, os.rank);
  if (inner == 0)
    return;
  T *dst = out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int i = 0; i < n; ++i) {
      const int64_t blk = axis_sizes[i] * inner;
      std::copy_n(ins[i] + o * blk, blk, dst);
      dst += blk;
    }
  }
}

// ---- losses --------------------------------------------------------------------

namespace detail {
// Label of position (n, d): class in [0, C), -1 if ignored, -2 if out of range.
template <class I> inline int64_t sce_label(I raw, int64_t C, bool has_ignore, int64_t ignore_index) {
  const int64_t l = static_cast<int64_t>(raw);
  if (has_ignore && l == ignore_index)
    return -1;
  return (l >= 0 && l < C) ? l : -2;
}
} // namespace detail

template <class T, class I>
int sce_loss(T *out, T *log_prob, const T *scores, const Shape &ss, const I *labels, const T *weights, int reduction,
             bool has_ignore, int64_t ignore_index) {
  const int64_t N = ss.dims[0], C = ss.dims[1];
  const int64_t D = detail::prod(ss.dims, 2, ss.rank);
  softmax(log_prob, scores, ss, 1, true);
  double total = 0.0, wsum = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t d = 0; d < D; ++d) {
      const int64_t l = detail::sce_label(labels[n * D + d], C, has_ignore, ignore_index);
      if (l == -2)
        return 1;
      double loss = 0.0;
      if (l >= 0) {
        const double w = weights ? static_cast<double>(weights[l]) : 1.0;
        loss = -w * static_cast<double>(log_prob[(n * C + l) * D + d]);
        wsum += w;
        total += loss;
      }
      if (reduction == 0)
        out[n * D + d] = static_cast<T>(loss);
    }
  }
  if (reduction == 1)
    out[0] = static_cast<T>(total);
  else if (reduction == 2)
    out[0] = static_cast<T>(wsum == 0.0 ? std::numeric_limits<double>::quiet_NaN() : total / wsum);
  return 0;
}

// Ignored positions get an exact 0 gradient.
template <class T, class I>
int sce_loss_grad(T *dscores, const T *dout, const T *log_prob, const Shape &ss, const I *labels, const T *weights,
                  int reduction, bool has_ignore, int64_t ignore_index) {
  const int64_t N = ss.dims[0], C = ss.dims[1];
  const int64_t D = detail::prod(ss.dims, 2, ss.rank);
  double wsum = 0.0;
  for (int64_t p = 0; p < N * D; ++p) {
    const int64_t l = detail::sce_label(labels[p], C, has_ignore, ignore_index);
    if (l == -2)
      return 1;
    if (l >= 0)
      wsum += weights ? static_cast<double>(weights[l]) : 1.0;
  }
  if (N == 0 || C == 0 || D == 0)
    return 0;
  double s_all = 0.0;
  if (reduction == 1)
    s_all = static_cast<double>(dout[0]);
  else if (reduction == 2)
    s_all = static_cast<double>(dout[0]) / wsum;
  std::vector<double> ws(static_cast<size_t>(D));
  std::vector<int64_t> lab(static_cast<size_t>(D));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t d = 0; d < D; ++d) {
      const int64_t l = detail::sce_label(labels[n * D + d], C, has_ignore, ignore_index);
      lab[static_cast<size_t>(d)] = l;
      if (l >= 0) {
        const double w = weights ? static_cast<double>(weights[l]) : 1.0;
        const double s = reduction == 0 ? static_cast<double>(dout[n * D + d]) : s_all;
        ws[static_cast<size_t>(d)] = w * s;
      } else {
        ws[static_cast<size_t>(d)] = 0.0;
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      const T *lp = log_prob + (n * C + c) * D;
      T *g = dscores + (n * C + c) * D;
      for (int64_t d = 0; d < D; ++d) {
        const int64_t l = lab[static_cast<size_t>(d)];
        if (l < 0) {
          g[d] = T(0);
          continue;
        }
        const double p = detail::exp_for<T>(static_cast<double>(lp[d])) - (c == l ? 1.0 : 0.0);
        g[d] = static_cast<T>(p * ws[static_cast<size_t>(d)]);
      }
    }
  }
  return 0;
}

/// sce_loss and sce_loss_grad on [N, C] scores for reduction 1 (sum) or 2
/// (mean) in one pass per row, without storing the log-probabilities: out[0]
/// is the loss, dscores its gradient scaled by dout[0]. Each log-probability
/// is rounded to T exactly as softmax(log) stores it, so the results equal
/// the two kernels' bit for bit.
template <class T, class I>
int sce_loss_with_grad(T *out, T *dscores, const T *scores, int64_t N, int64_t C, const I *labels, const T *weights,
                       const T *dout, int reduction, bool has_ignore, int64_t ignore_index) {
  double wsum = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = detail::sce_label(labels[n], C, has_ignore, ignore_index);
    if (l == -2)
      return 1;
    if (l >= 0)
      wsum += weights ? static_cast<double>(weights[l]) : 1.0;
  }
  const double g = static_cast<double>(dout[0]);
  const double scale = reduction == 2 ? g / wsum : g;
  // Each row's term, on the step's threads; their sum in row order.
  std::vector<double> terms(static_cast<size_t>(N), 0.0);
  parallel_for(N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const T *s = scores + n * C;
      T *d = dscores + n * C;
      const int64_t l = detail::sce_label(labels[n], C, has_ignore, ignore_index);
      if (l < 0) {
        std::fill_n(d, C, T(0));
        continue;
      }
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < C; ++c)
        m = std::max(m, static_cast<double>(s[c]));
      const double sum = detail::exp_row(s, C, m, detail::scratch_row(C));
      const double ls = std::log(sum);
      // Each log-probability rounded to T, as softmax(log) stores it.
      auto logp = [&](int64_t c) {
        return static_cast<double>(static_cast<T>(static_cast<double>(s[c]) - m - ls));
      };
      const double w = weights ? static_cast<double>(weights[l]) : 1.0;
      terms[static_cast<size_t>(n)] = -w * logp(l);
      const double ws = w * scale;
      // softmax - onehot(l), scaled; the label's element apart (an integer
      // comparison in the loop would keep it from being vectorised), and
      // computed first: d may be s itself (the plan puts the gradient in
      // place of the logits).
      auto grad = [&](int64_t c, double onehot) {
        return static_cast<T>((detail::exp_for<T>(logp(c)) - onehot) * ws);
      };
      const T at_label = grad(l, 1.0);
      for (int64_t c = 0; c < C; ++c)
        d[c] = grad(c, 0.0);
      d[l] = at_label;
    }
  });
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n)
    total += terms[static_cast<size_t>(n)];
  out[0] = static_cast<T>(reduction == 1 ? total
                          : wsum == 0.0  ? std::numeric_limits<double>::quiet_NaN()
                                         : total / wsum);
  return 0;
}

//===----------------------------------------------------------------------===//
// Optimizers (the `apply` entry point), with PyTorch's order of operations
//===----------------------------------------------------------------------===//

/// Sum of squares of `g`, in double (for the global gradient norm).
template <class T> double sum_squares(const T *g, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i)
    s += double(g[i]) * double(g[i]);
  return s;
}

/// torch.optim.AdamW (amsgrad off) on one tensor, after the gradient was
/// scaled by `clip_scale` (clip_grad_norm_'s clamped coefficient).
template <class T>
void adamw_update(T *p, T *g, T *m, T *v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t step,
                  double clip_scale) {
  const T decay = T(1.0 - lr * weight_decay);
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  const T step_size = T(lr / bc1);
  const T bc2_sqrt = T(std::sqrt(bc2));
  const T b1 = T(beta1), b2 = T(beta2), one_b1 = T(1.0 - beta1),
          one_b2 = T(1.0 - beta2), e = T(eps), cs = T(clip_scale);
  parallel_for(n, 32768, [&](int64_t lo, int64_t hi) {
    // The pointers and constants as locals: read through the lambda's
    // captures, the compiler reloads them after every store and does not
    // vectorise the loop.
    T *P = p, *M = m, *V = v;
    const T *G = g;
    const T d_ = decay, s_ = step_size, bc_ = bc2_sqrt, b1_ = b1, b2_ = b2, ob1 = one_b1, ob2 = one_b2,
            e_ = e, cs_ = cs; // a clip scale of 1 changes no gradient
    for (int64_t i = lo; i < hi; ++i) {
      T gi = G[i] * cs_;
      T pi = P[i] * d_;
      T mi = M[i] * b1_ + gi * ob1;
      T vi = V[i] * b2_ + gi * gi * ob2;
      M[i] = mi;
      V[i] = vi;
      T denom = std::sqrt(vi) / bc_ + e_;
      P[i] = pi - s_ * (mi / denom);
    }
  });
}

/// torch.optim.SGD (dampening 0) on one tensor: L2 weight decay added to the
/// gradient, momentum buffer initialised to the first gradient, Nesterov
/// optional.
template <class T>
void sgd_update(T *p, T *g, T *buf, int64_t n, double lr, double momentum,
                double weight_decay, bool nesterov, int64_t step,
                double clip_scale) {
  const T wd = T(weight_decay), mom = T(momentum), neg_lr = T(-lr),
          cs = T(clip_scale);
  for (int64_t i = 0; i < n; ++i) {
    T d = clip_scale == 1.0 ? g[i] : g[i] * cs;
    if (weight_decay != 0.0)
      d = d + p[i] * wd;
    if (momentum != 0.0) {
      buf[i] = step == 1 ? d : buf[i] * mom + d;
      d = nesterov ? d + buf[i] * mom : buf[i];
    }
    p[i] = p[i] + d * neg_lr;
  }
}

//===----------------------------------------------------------------------===//
// GELU (exact erf form, or the tanh approximation) and its derivative
//===----------------------------------------------------------------------===//

/// One element of GELU (computed in double; float has its own below).
template <class T> inline T gelu_scalar(T in, bool tanh_approx) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  double x = double(in);
  return T(tanh_approx ? 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)))
                       : 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
}

/// One element of GELU's gradient: g * gelu'(x) (computed in double; float
/// has its own below).
template <class T> inline T gelu_grad_scalar(T g, T in, bool tanh_approx) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  double x = double(in), d;
  if (tanh_approx) {
    double t = std::tanh(k * (x + 0.044715 * x * x * x));
    d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
  } else {
    d = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
        x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846);
  }
  return T(double(g) * d);
}

// GELU in float: x Phi(x), or x / (1 + exp(-2u)) for the tanh form, from
// float_math.h (why, and how exact, there).
template <> inline float gelu_scalar<float>(float x, bool tanh_approx) {
  float aside;
  return x * (tanh_approx ? detail::tanh_gate_f32(x, aside) : detail::normal_cdf_f32(x, aside));
}

template <> inline float gelu_grad_scalar<float>(float g, float x, bool tanh_approx) {
  float d;
  if (tanh_approx) {
    float e;
    const float s = detail::tanh_gate_f32(x, e);
    // d/dx x s(u(x)) = s + x s (1 - s) 2 u'(x), s (1 - s) = s^2 e.
    d = s + x * (s * s * e) * (2.0f * 0.797884560802865356f) * (1.0f + 0.134145f * (x * x));
  } else {
    float gauss;
    const float phi = detail::normal_cdf_f32(x, gauss);
    d = phi + x * gauss * 0.398942280401432678f; // Phi(x) + x exp(-x^2/2) / sqrt(2 pi)
  }
  return g * d;
}

template <class T> void gelu(T *out, const T *in, int64_t n, bool tanh_approx) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = gelu_scalar(in[i], tanh_approx);
}

template <class T>
void gelu_grad(T *out, const T *g, const T *in, int64_t n, bool tanh_approx) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = gelu_grad_scalar(g[i], in[i], tanh_approx);
}

} // namespace tcc::cpu

// tcc.attention's kernels, which use all of the above.
#include "attention.h"

#endif // TCC_RUNTIME_CPU_KERNELS_H
