// Standalone test of runtime/cpu/kernels.h: small cases with known answers,
// instantiated for float and double. Prints "N passed, M failed" last; exits
// non-zero on any failure.
//
//   g++ -std=c++17 -O2 -fno-exceptions -Wall -Wextra -I/work/main
//       test/runtime/kernels_test.cpp -o /tmp/kernels_test && /tmp/kernels_test
#include "runtime/cpu/kernels.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

using namespace tcc::cpu;

static int g_pass = 0, g_fail = 0;

static void check(bool ok, const char *what, const char *tn) {
  if (ok) {
    ++g_pass;
  } else {
    ++g_fail;
    std::printf("FAIL: %s [%s]\n", what, tn);
  }
}

static Shape S(std::initializer_list<int64_t> d) {
  Shape s{static_cast<int32_t>(d.size()), {}};
  int i = 0;
  for (int64_t v : d)
    s.dims[i++] = v;
  return s;
}

template <class T> static const char *tname() { return sizeof(T) == 4 ? "float" : "double"; }
template <class T> static double tol() { return sizeof(T) == 4 ? 2e-6 : 1e-12; }

template <class T> static bool close(const T *got, const std::vector<double> &want, double tl) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = want[i];
    if (std::isnan(w) ? !std::isnan(g) : std::fabs(g - w) > tl * std::max(1.0, std::fabs(w))) {
      std::printf("  [%zu] got %.12g want %.12g\n", i, g, w);
      return false;
    }
  }
  return true;
}
template <class T> static bool close(const std::vector<T> &got, const std::vector<double> &want, double tl) {
  return got.size() >= want.size() && close(got.data(), want, tl);
}
template <class A, class B> static bool equal(const std::vector<A> &got, const std::vector<B> &want) {
  if (got.size() != want.size())
    return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != static_cast<A>(want[i]))
      return false;
  return true;
}

// ---------------------------------------------------------------------------------

template <class T> static void test_binary() {
  const char *tn = tname<T>();
  {
    std::vector<T> a{1, 2, 3, 4, 5, 6}, b{10, 20, 30}, o(6);
    binary(BinaryOp::Add, o.data(), S({2, 3}), a.data(), S({2, 3}), b.data(), S({3}));
    check(close(o, {11, 22, 33, 14, 25, 36}, tol<T>()), "add [2,3]+[3]", tn);
    binary(BinaryOp::Sub, o.data(), S({2, 3}), b.data(), S({3}), a.data(), S({2, 3}));
    check(close(o, {9, 18, 27, 6, 15, 24}, tol<T>()), "sub [3]-[2,3]", tn);
  }
  {
    std::vector<T> a{2, 3}, b{1, 10, 100}, o(6);
    binary(BinaryOp::Mul, o.data(), S({2, 3}), a.data(), S({2, 1}), b.data(), S({1, 3}));
    check(close(o, {2, 20, 200, 3, 30, 300}, tol<T>()), "mul [2,1]*[1,3]", tn);
  }
  {
    std::vector<T> a{1, 2, 3, 4}, s{2}, o(4);
    binary(BinaryOp::Div, o.data(), S({2, 2}), a.data(), S({2, 2}), s.data(), S({}));
    check(close(o, {0.5, 1, 1.5, 2}, tol<T>()), "div by rank-0", tn);
    binary(BinaryOp::Pow, o.data(), S({2, 2}), a.data(), S({2, 2}), s.data(), S({}));
    check(close(o, {1, 4, 9, 16}, tol<T>()), "pow", tn);
    std::vector<T> big(6), x{1, 2, 3};
    // rank-3 output where the inner dim broadcasts a [2,3,1] operand
    std::vector<T> col{1, 2, 3, 4, 5, 6};
    binary(BinaryOp::Sub, big.data(), S({2, 3, 1}), col.data(), S({2, 3, 1}), x.data(), S({1}));
    check(close(big, {0, 1, 2, 3, 4, 5}, tol<T>()), "sub [2,3,1]-[1]", tn);
  }
  {
    std::vector<T> a{1, 2, 3}, b{2, 2, 2};
    std::vector<uint8_t> o(3);
    binary(BinaryOp::Equal, o.data(), S({3}), a.data(), S({3}), b.data(), S({3}));
    check(equal(o, std::vector<int>{0, 1, 0}), "equal", tn);
    binary(BinaryOp::Less, o.data(), S({3}), a.data(), S({3}), b.data(), S({3}));
    check(equal(o, std::vector<int>{1, 0, 0}), "less", tn);
    binary(BinaryOp::Greater, o.data(), S({3}), a.data(), S({3}), b.data(), S({3}));
    check(equal(o, std::vector<int>{0, 0, 1}), "greater", tn);
  }
}

static void test_binary_int() {
  const char *tn = "int";
  {
    std::vector<int32_t> a{7, -7, 7, 5, std::numeric_limits<int32_t>::min(), -9}, b{2, 2, -2, 0, -1, 4}, o(6);
    binary(BinaryOp::Div, o.data(), S({6}), a.data(), S({6}), b.data(), S({6}));
    check(equal(o, std::vector<int32_t>{3, -3, -3, 0, std::numeric_limits<int32_t>::min(), -2}), "int32 div", tn);
  }
  {
    std::vector<int64_t> a{7, -7, 0}, b{0}, o(3);
    binary(BinaryOp::Div, o.data(), S({3}), a.data(), S({3}), b.data(), S({1}));
    check(equal(o, std::vector<int64_t>{0, 0, 0}), "int64 div by 0", tn);
    std::vector<int64_t> c{-3};
    binary(BinaryOp::Mul, o.data(), S({3}), a.data(), S({3}), c.data(), S({}));
    check(equal(o, std::vector<int64_t>{-21, 21, 0}), "int64 mul", tn);
  }
  {
    std::vector<uint8_t> a{0, 0, 1, 1}, b{0, 1, 0, 1}, o(4);
    binary(BinaryOp::And, o.data(), S({4}), a.data(), S({4}), b.data(), S({4}));
    check(equal(o, std::vector<int>{0, 0, 0, 1}), "and", tn);
    binary(BinaryOp::Or, o.data(), S({4}), a.data(), S({4}), b.data(), S({4}));
    check(equal(o, std::vector<int>{0, 1, 1, 1}), "or", tn);
    std::vector<uint8_t> n(4);
    unary(UnaryOp::Not, n.data(), b.data(), 4);
    check(equal(n, std::vector<int>{1, 0, 1, 0}), "not", tn);
  }
  {
    std::vector<int32_t> a{-5, 5, 0}, o(3);
    unary(UnaryOp::Abs, o.data(), a.data(), 3);
    check(equal(o, std::vector<int32_t>{5, 5, 0}), "int abs", tn);
    unary(UnaryOp::Neg, o.data(), a.data(), 3);
    check(equal(o, std::vector<int32_t>{5, -5, 0}), "int neg", tn);
    unary(UnaryOp::Relu, o.data(), a.data(), 3);
    check(equal(o, std::vector<int32_t>{0, 5, 0}), "int relu", tn);
  }
  {
    std::vector<float> f{-2.7f, 2.7f, -0.5f, 300.0f, std::nanf("")};
    std::vector<int32_t> i(5);
    cast(i.data(), f.data(), 5);
    check(equal(i, std::vector<int32_t>{-2, 2, 0, 300, 0}), "cast float->int32 truncates", tn);
    std::vector<int64_t> l{3, -4};
    std::vector<double> d(2);
    cast(d.data(), l.data(), 2);
    check(d[0] == 3.0 && d[1] == -4.0, "cast int64->double", tn);
    std::vector<uint8_t> bo(5);
    std::vector<float> fb{0.0f, -0.0f, 0.5f, -2.0f, std::nanf("")};
    cast_to_bool(bo.data(), fb.data(), 5);
    check(equal(bo, std::vector<int>{0, 0, 1, 1, 1}), "cast_to_bool float", tn);
    std::vector<int64_t> ib{0, 7, -1};
    cast_to_bool(bo.data(), ib.data(), 3);
    check(bo[0] == 0 && bo[1] == 1 && bo[2] == 1, "cast_to_bool int64", tn);
    std::vector<uint8_t> b8{0, 1};
    std::vector<float> bf(2);
    cast(bf.data(), b8.data(), 2);
    check(bf[0] == 0.0f && bf[1] == 1.0f, "cast bool->float", tn);
  }
}

template <class T> static void test_unary() {
  const char *tn = tname<T>();
  std::vector<T> x{T(-1.5), T(0), T(0.25), T(2)}, o(4);
  std::vector<double> xd(x.begin(), x.end());
  auto ref = [&](double (*f)(double)) {
    std::vector<double> r;
    for (double v : xd)
      r.push_back(f(v));
    return r;
  };
  std::vector<T> pos{T(0.25), T(1), T(4), T(9)};
  unary(UnaryOp::Sqrt, o.data(), pos.data(), 4);
  check(close(o, {0.5, 1, 2, 3}, tol<T>()), "sqrt", tn);
  unary(UnaryOp::Log, o.data(), pos.data(), 4);
  check(close(o, {std::log(0.25), 0, std::log(4.0), std::log(9.0)}, 4 * tol<T>()), "log", tn);
  unary(UnaryOp::Reciprocal, o.data(), pos.data(), 4);
  check(close(o, {4, 1, 0.25, 1.0 / 9}, tol<T>()), "reciprocal", tn);
  unary(UnaryOp::Neg, o.data(), x.data(), 4);
  check(close(o, {1.5, 0, -0.25, -2}, tol<T>()), "neg", tn);
  unary(UnaryOp::Exp, o.data(), x.data(), 4);
  check(close(o, ref([](double v) { return std::exp(v); }), 4 * tol<T>()), "exp", tn);
  unary(UnaryOp::Erf, o.data(), x.data(), 4);
  check(close(o, ref([](double v) { return std::erf(v); }), 4 * tol<T>()), "erf", tn);
  unary(UnaryOp::Tanh, o.data(), x.data(), 4);
  check(close(o, ref([](double v) { return std::tanh(v); }), 4 * tol<T>()), "tanh", tn);
  unary(UnaryOp::Sigmoid, o.data(), x.data(), 4);
  check(close(o, ref([](double v) { return 1.0 / (1.0 + std::exp(-v)); }), 4 * tol<T>()), "sigmoid", tn);
  std::vector<T> ext{T(-1000), T(1000)};
  unary(UnaryOp::Sigmoid, o.data(), ext.data(), 2);
  check(o[0] == T(0) && o[1] == T(1), "sigmoid extremes", tn);
  unary(UnaryOp::Relu, o.data(), x.data(), 4);
  check(close(o, {0, 0, 0.25, 2}, tol<T>()), "relu", tn);
  unary(UnaryOp::Abs, o.data(), x.data(), 4);
  check(close(o, {1.5, 0, 0.25, 2}, tol<T>()), "abs", tn);
  std::vector<T> inplace = x;
  unary(UnaryOp::Neg, inplace.data(), inplace.data(), 4);
  check(close(inplace, {1.5, 0, -0.25, -2}, tol<T>()), "neg in place", tn);
}

template <class T> static void test_movement() {
  const char *tn = tname<T>();
  {
    std::vector<uint8_t> c{1, 0};
    std::vector<T> x{1, 2, 3}, y{-1}, o(6);
    where(o.data(), S({2, 3}), c.data(), S({2, 1}), x.data(), S({3}), y.data(), S({}));
    check(close(o, {1, 2, 3, -1, -1, -1}, tol<T>()), "where broadcast", tn);
  }
  {
    std::vector<T> in{1, 2, 3}, o(24);
    broadcast_to(o.data(), S({2, 3, 4}), in.data(), S({3, 1}));
    std::vector<double> want;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
          want.push_back(j + 1);
    check(close(o, want, tol<T>()), "broadcast_to [3,1]->[2,3,4]", tn);
    std::vector<T> row{5, 6}, o2(4);
    broadcast_to(o2.data(), S({2, 2}), row.data(), S({2}));
    check(close(o2, {5, 6, 5, 6}, tol<T>()), "broadcast_to [2]->[2,2]", tn);
  }
  {
    std::vector<T> a{1, 2, 3}, o(3, T(9));
    copy(o.data(), a.data(), 3);
    check(close(o, {1, 2, 3}, tol<T>()), "copy", tn);
    copy(a.data(), a.data(), 3);
    check(close(a, {1, 2, 3}, tol<T>()), "copy in place", tn);
    fill(o.data(), 3, T(7));
    check(close(o, {7, 7, 7}, tol<T>()), "fill", tn);
  }
  {
    // transpose [2,3,4] perm [2,0,1] -> [4,2,3]
    std::vector<T> in(24), o(24);
    for (int i = 0; i < 24; ++i)
      in[i] = T(i);
    const int64_t perm[3] = {2, 0, 1};
    transpose(o.data(), in.data(), S({2, 3, 4}), perm);
    std::vector<double> want;
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          want.push_back(i * 12 + j * 4 + k);
    check(close(o, want, tol<T>()), "transpose 3-D", tn);
    const int64_t perm2[3] = {0, 2, 1};
    transpose(o.data(), in.data(), S({2, 3, 4}), perm2);
    want.clear();
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 3; ++j)
          want.push_back(i * 12 + j * 4 + k);
    check(close(o, want, tol<T>()), "transpose 3-D (0,2,1)", tn);
  }
  {
    // in [2,5] = 0..9; starts {1,4}, steps {1,-2} -> out [1,3] = in[1,4], in[1,2], in[1,0]
    std::vector<T> in(10), o(3);
    for (int i = 0; i < 10; ++i)
      in[i] = T(i);
    const int64_t starts[2] = {1, 4}, steps[2] = {1, -2};
    slice(o.data(), S({1, 3}), in.data(), S({2, 5}), starts, steps);
    check(close(o, {9, 7, 5}, tol<T>()), "slice negative step", tn);
    std::vector<T> g{1, 2, 3}, gi(10, T(42));
    slice_grad(gi.data(), S({2, 5}), g.data(), S({1, 3}), starts, steps);
    check(close(gi, {0, 0, 0, 0, 0, 3, 0, 2, 0, 1}, tol<T>()), "slice_grad negative step", tn);
    // step 2 along dim 1 of all rows
    const int64_t st2[2] = {0, 1}, sp2[2] = {1, 2};
    std::vector<T> o2(4);
    slice(o2.data(), S({2, 2}), in.data(), S({2, 5}), st2, sp2);
    check(close(o2, {1, 3, 6, 8}, tol<T>()), "slice step 2", tn);
  }
  {
    // concat on axis 1: [2,1,2] ++ [2,2,2] -> [2,3,2]
    std::vector<T> a{1, 2, 3, 4}, b{10, 11, 12, 13, 14, 15, 16, 17}, o(12);
    const T *ins[2] = {a.data(), b.data()};
    const int64_t sizes[2] = {1, 2};
    concat(o.data(), S({2, 3, 2}), 1, 2, ins, sizes);
    check(close(o, {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17}, tol<T>()), "concat middle axis", tn);
  }
  {
    // gather: data [3,2], axis 0, indices {-1, 0}
    std::vector<T> d{1, 2, 3, 4, 5, 6}, o(4);
    std::vector<int64_t> idx{-1, 0};
    int rc = gather(o.data(), d.data(), S({3, 2}), idx.data(), 2, 0);
    check(rc == 0 && close(o, {5, 6, 1, 2}, tol<T>()), "gather axis 0 negative", tn);
    std::vector<int32_t> idx1{1, -2, 1};
    std::vector<T> o1(9);
    rc = gather(o1.data(), d.data(), S({3, 2}), idx1.data(), 3, 1);
    check(rc == 0 && close(o1, {2, 1, 2, 4, 3, 4, 6, 5, 6}, tol<T>()), "gather axis 1 int32", tn);
    std::vector<int64_t> bad{0, 3};
    check(gather(o.data(), d.data(), S({3, 2}), bad.data(), 2, 0) == 1, "gather out of range (3)", tn);
    std::vector<int64_t> bad2{-4};
    check(gather(o.data(), d.data(), S({3, 2}), bad2.data(), 1, 0) == 1, "gather out of range (-4)", tn);
    // gather_grad: data [3,2], indices {0, 2, 0, -3}
    std::vector<int64_t> rep{0, 2, 0, -3};
    std::vector<T> g{1, 2, 3, 4, 5, 6, 7, 8}, gd(6, T(99));
    rc = gather_grad(gd.data(), S({3, 2}), g.data(), rep.data(), 4, 0);
    check(rc == 0 && close(gd, {13, 16, 0, 0, 3, 4}, tol<T>()), "gather_grad repeated indices", tn);
    std::vector<int32_t> rep1{1, 1};
    std::vector<T> g1{1, 2, 3, 4, 5, 6};
    rc = gather_grad(gd.data(), S({3, 2}), g1.data(), rep1.data(), 2, 1);
    check(rc == 0 && close(gd, {0, 3, 0, 7, 0, 11}, tol<T>()), "gather_grad axis 1", tn);
    check(gather_grad(gd.data(), S({3, 2}), g.data(), bad.data(), 2, 0) == 1, "gather_grad out of range", tn);
  }
}

// Naive batched matmul reference for a [B1..., M, K] x [B2..., K, N] (ranks >= 2).
template <class T> static void test_linalg() {
  const char *tn = tname<T>();
  {
    std::vector<T> a{1, 2, 3, 4, 5, 6}, b{7, 8, 9, 10, 11, 12}, o(4);
    matmul(o.data(), a.data(), S({2, 3}), b.data(), S({3, 2}));
    check(close(o, {58, 64, 139, 154}, tol<T>()), "matmul 2x3 * 3x2", tn);
    std::vector<T> v{1, 2, 3}, w{4, 5, 6}, s(1);
    matmul(s.data(), v.data(), S({3}), w.data(), S({3}));
    check(close(s, {32}, tol<T>()), "matmul 1-D . 1-D", tn);
    std::vector<T> o2(2);
    matmul(o2.data(), v.data(), S({3}), b.data(), S({3, 2}));
    check(close(o2, {58, 64}, tol<T>()), "matmul [3] x [3,2]", tn);
    matmul(o2.data(), a.data(), S({2, 3}), w.data(), S({3}));
    check(close(o2, {32, 77}, tol<T>()), "matmul [2,3] x [3]", tn);
  }
  {
    // a [2,1,2,3] x b [3,3,2] -> [2,3,2,2]
    std::vector<T> a(12), b(18), o(24);
    for (int i = 0; i < 12; ++i)
      a[i] = T(i % 5 - 2);
    for (int i = 0; i < 18; ++i)
      b[i] = T(i % 7 - 3);
    matmul(o.data(), a.data(), S({2, 1, 2, 3}), b.data(), S({3, 3, 2}));
    std::vector<double> want;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int m = 0; m < 2; ++m)
          for (int n = 0; n < 2; ++n) {
            double s = 0;
            for (int k = 0; k < 3; ++k)
              s += double(a[i * 6 + m * 3 + k]) * double(b[j * 6 + k * 2 + n]);
            want.push_back(s);
          }
    check(close(o, want, tol<T>()), "matmul batch broadcast [2,1,2,3]x[3,3,2]", tn);
    // batched matrix times 1-D vector: [2,2,3] x [3] -> [2,2]
    std::vector<T> v{1, -1, 2}, o3(4);
    matmul(o3.data(), a.data(), S({2, 2, 3}), v.data(), S({3}));
    std::vector<double> w3;
    for (int r = 0; r < 4; ++r)
      w3.push_back(double(a[r * 3]) - double(a[r * 3 + 1]) + 2 * double(a[r * 3 + 2]));
    check(close(o3, w3, tol<T>()), "matmul [2,2,3] x [3]", tn);
    // 1-D vector times batched matrix: [3] x [3,3,2] -> [3,2]
    std::vector<T> o4(6);
    matmul(o4.data(), v.data(), S({3}), b.data(), S({3, 3, 2}));
    std::vector<double> w4;
    for (int j = 0; j < 3; ++j)
      for (int n = 0; n < 2; ++n)
        w4.push_back(double(b[j * 6 + n]) - double(b[j * 6 + 2 + n]) + 2 * double(b[j * 6 + 4 + n]));
    check(close(o4, w4, tol<T>()), "matmul [3] x [3,3,2]", tn);
  }
  {
    // Transposed operands read through strides equal the materialized
    // transposes bit for bit: a [2,5,3] read as [2,3,5], b [7,5] as [5,7]
    // (broadcast over the batch); 5 rows exercise the 4-row and 1-row paths.
    std::vector<T> a(30), b(35), at(30), bt(35), o1(2 * 3 * 7), o2(2 * 3 * 7);
    for (int i = 0; i < 30; ++i)
      a[i] = T((i * 7 % 11) - 5) / T(3);
    for (int i = 0; i < 35; ++i)
      b[i] = T((i * 5 % 13) - 6) / T(7);
    for (int bb = 0; bb < 2; ++bb)
      for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 3; ++c)
          at[bb * 15 + c * 5 + r] = a[bb * 15 + r * 3 + c];
    for (int r = 0; r < 7; ++r)
      for (int c = 0; c < 5; ++c)
        bt[c * 7 + r] = b[r * 5 + c];
    matmul(o1.data(), a.data(), S({2, 5, 3}), b.data(), S({7, 5}), true, true);
    matmul(o2.data(), at.data(), S({2, 3, 5}), bt.data(), S({5, 7}));
    check(o1 == o2, "matmul with both operands transposed == materialized transposes", tn);
    matmul(o1.data(), at.data(), S({2, 3, 5}), b.data(), S({7, 5}), false, true);
    check(o1 == o2, "matmul with a transposed rhs == materialized transpose", tn);
    matmul(o1.data(), a.data(), S({2, 5, 3}), bt.data(), S({5, 7}), true, false);
    check(o1 == o2, "matmul with a transposed lhs == materialized transpose", tn);
  }
  {
    // gemm M=2, N=3, K=4 with all transpose combinations and several C shapes.
    const int64_t M = 2, N = 3, K = 4;
    std::vector<double> A(M * K), B(K * N);
    for (int i = 0; i < M * K; ++i)
      A[i] = (i * 3 % 7) - 3;
    for (int i = 0; i < K * N; ++i)
      B[i] = (i * 5 % 11) - 5;
    const double alpha = 0.5, beta = -2;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int cm = 0; cm < 4; ++cm) {
          std::vector<T> a(M * K), b(K * N);
          for (int m = 0; m < M; ++m)
            for (int k = 0; k < K; ++k)
              a[ta ? k * M + m : m * K + k] = T(A[m * K + k]);
          for (int k = 0; k < K; ++k)
            for (int n = 0; n < N; ++n)
              b[tb ? n * K + k : k * N + n] = T(B[k * N + n]);
          // cm: 0 = nullptr, 1 = C[N], 2 = C[1,1], 3 = C[M,1]
          std::vector<T> c{T(1), T(2), T(3)};
          Shape cs = cm == 1 ? S({N}) : cm == 2 ? S({1, 1}) : cm == 3 ? S({M, 1}) : S({});
          std::vector<T> o(M * N);
          gemm(o.data(), a.data(), b.data(), M, N, K, ta != 0, tb != 0, alpha, beta, cm ? c.data() : nullptr, cs);
          std::vector<double> want;
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
              double s = 0;
              for (int k = 0; k < K; ++k)
                s += A[m * K + k] * B[k * N + n];
              double cv = cm == 1 ? c[n] : cm == 2 ? c[0] : cm == 3 ? c[m] : 0;
              want.push_back(alpha * s + beta * cv);
            }
          char what[96];
          std::snprintf(what, sizeof what, "gemm transA=%d transB=%d C-mode=%d", ta, tb, cm);
          check(close(o, want, tol<T>()), what, tn);
        }
    // hand-computed: [[1,2],[3,4]] x [[5,6],[7,8]] + C[M,N]
    std::vector<T> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{1, 1, 1, 1}, o(4);
    gemm(o.data(), a.data(), b.data(), 2, 2, 2, false, false, 1.0, 1.0, c.data(), S({2, 2}));
    check(close(o, {20, 23, 44, 51}, tol<T>()), "gemm hand 2x2 + C", tn);
  }
}

template <class T> static void test_norm() {
  const char *tn = tname<T>();
  {
    // softmax over axis 1 of [2,3,2]
    std::vector<T> x(12), o(12), lo(12);
    for (int i = 0; i < 12; ++i)
      x[i] = T((i * 7 % 5) - 2 + 0.25 * i);
    softmax(o.data(), x.data(), S({2, 3, 2}), 1, false);
    softmax(lo.data(), x.data(), S({2, 3, 2}), 1, true);
    std::vector<double> want(12), lwant(12);
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 2; ++c) {
        double s = 0;
        for (int l = 0; l < 3; ++l)
          s += std::exp(double(x[a * 6 + l * 2 + c]));
        for (int l = 0; l < 3; ++l) {
          want[a * 6 + l * 2 + c] = std::exp(double(x[a * 6 + l * 2 + c])) / s;
          lwant[a * 6 + l * 2 + c] = double(x[a * 6 + l * 2 + c]) - std::log(s);
        }
      }
    check(close(o, want, 2 * tol<T>()), "softmax middle axis", tn);
    check(close(lo, lwant, 2 * tol<T>()), "log_softmax middle axis", tn);
    // last axis, with large values (max subtraction)
    std::vector<T> big{1000, 1001, 1002}, ob(3);
    softmax(ob.data(), big.data(), S({1, 3}), 1, false);
    double e0 = 1, e1 = std::exp(1.0), e2 = std::exp(2.0), z = e0 + e1 + e2;
    check(close(ob, {e0 / z, e1 / z, e2 / z}, 2 * tol<T>()), "softmax last axis large values", tn);
    softmax(ob.data(), big.data(), S({1, 3}), 1, true);
    check(close(ob, {-std::log(z), 1 - std::log(z), 2 - std::log(z)}, 2 * tol<T>()), "log_softmax last axis", tn);
  }
  {
    // layer_norm: x [2,2,3], axis 1 -> normalize over [2,3]; scale [3] broadcast, bias [2,3]
    std::vector<T> x{1, 2, 3, 4, 5, 6, -1, 0, 1, 0, 0, 6}, sc{1, 2, 3}, bi{0, 0, 0, 1, 1, 1};
    std::vector<T> y(12), mean(2), isd(2);
    const double eps = 1e-5;
    layer_norm(y.data(), mean.data(), isd.data(), x.data(), S({2, 2, 3}), 1, sc.data(), S({3}), bi.data(),
               S({2, 3}), eps);
    std::vector<double> wy, wm, wi;
    for (int o = 0; o < 2; ++o) {
      double mu = 0, var = 0;
      for (int i = 0; i < 6; ++i)
        mu += double(x[o * 6 + i]);
      mu /= 6;
      for (int i = 0; i < 6; ++i)
        var += (double(x[o * 6 + i]) - mu) * (double(x[o * 6 + i]) - mu);
      var /= 6;
      double inv = 1 / std::sqrt(var + eps);
      wm.push_back(mu);
      wi.push_back(inv);
      for (int i = 0; i < 6; ++i)
        wy.push_back((double(x[o * 6 + i]) - mu) * inv * double(sc[i % 3]) + double(bi[i]));
    }
    check(close(mean, {3.5, 1.0}, tol<T>()), "layer_norm mean (hand)", tn);
    check(close(isd, wi, 2 * tol<T>()), "layer_norm inv_std_dev", tn);
    check(close(y, wy, 4 * tol<T>()), "layer_norm y (scale [3], bias [2,3])", tn);
    // no bias, scale of the full normalized shape
    std::vector<T> sc6{1, 1, 1, 2, 2, 2};
    layer_norm(y.data(), mean.data(), isd.data(), x.data(), S({2, 2, 3}), 1, sc6.data(), S({2, 3}),
               static_cast<const T *>(nullptr), S({}), eps);
    std::vector<double> wy2;
    for (int o = 0; o < 2; ++o)
      for (int i = 0; i < 6; ++i)
        wy2.push_back((double(x[o * 6 + i]) - wm[o]) * wi[o] * (i < 3 ? 1 : 2));
    check(close(y, wy2, 4 * tol<T>()), "layer_norm no bias", tn);
  }
  {
    // reduce [2,3,4] over axes 0 and 2 -> [3]
    std::vector<T> x(24), o(3);
    for (int i = 0; i < 24; ++i)
      x[i] = T(i);
    reduce(o.data(), x.data(), S({2, 3, 4}), 0b101u, false);
    std::vector<double> w(3, 0.0);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
          w[j] += i * 12 + j * 4 + k;
    check(close(o, w, tol<T>()), "reduce sum axes {0,2}", tn);
    reduce(o.data(), x.data(), S({2, 3, 4}), 0b101u, true);
    check(close(o, {w[0] / 8, w[1] / 8, w[2] / 8}, tol<T>()), "reduce mean axes {0,2}", tn);
    std::vector<T> o6(6);
    reduce(o6.data(), x.data(), S({2, 3, 4}), 0b100u, false);
    check(close(o6, {6, 22, 38, 54, 70, 86}, tol<T>()), "reduce sum last axis", tn);
    std::vector<T> o8(8);
    reduce(o8.data(), x.data(), S({2, 3, 4}), 0b010u, true);
    check(close(o8, {4, 5, 6, 7, 16, 17, 18, 19}, tol<T>()), "reduce mean middle axis", tn);
    std::vector<T> all(1);
    reduce(all.data(), x.data(), S({2, 3, 4}), 0b111u, false);
    check(close(all, {276}, tol<T>()), "reduce all", tn);
    std::vector<T> cp(24);
    reduce(cp.data(), x.data(), S({2, 3, 4}), 0u, false);
    check(close(cp.data(), std::vector<double>(x.begin(), x.end()), tol<T>()), "reduce mask 0 copies", tn);
  }
}

// Direct SoftmaxCrossEntropyLoss formula, in double.
template <class T, class I>
static std::vector<double> sce_ref(const std::vector<T> &sc, int64_t N, int64_t C, int64_t D,
                                   const std::vector<I> &lab, const T *w, int red, bool hi, int64_t ii) {
  std::vector<double> per(N * D, 0.0);
  double tot = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t l = lab[n * D + d];
      if (hi && l == ii)
        continue;
      double m = -1e300, s = 0;
      for (int64_t c = 0; c < C; ++c)
        m = std::max(m, double(sc[(n * C + c) * D + d]));
      for (int64_t c = 0; c < C; ++c)
        s += std::exp(double(sc[(n * C + c) * D + d]) - m);
      double lp = double(sc[(n * C + l) * D + d]) - m - std::log(s);
      double wl = w ? double(w[l]) : 1.0;
      per[n * D + d] = -wl * lp;
      tot += -wl * lp;
      wsum += wl;
    }
  if (red == 0)
    return per;
  if (red == 1)
    return {tot};
  return {tot / wsum};
}

template <class T> static void test_sce() {
  const char *tn = tname<T>();
  // [N=3, C=4] and [N=2, C=3, d=2]
  struct Case {
    int64_t N, C, D;
    Shape ss;
    std::vector<int64_t> labels;
  };
  std::vector<Case> cases = {{3, 4, 1, S({3, 4}), {2, 0, 3}}, {2, 3, 2, S({2, 3, 2}), {1, 2, 0, 1}}};
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case &cs = cases[ci];
    std::vector<T> sc(cs.N * cs.C * cs.D);
    for (size_t i = 0; i < sc.size(); ++i)
      sc[i] = T(0.3 * double((i * 5) % 7) - 0.8);
    std::vector<T> w(cs.C);
    for (int64_t c = 0; c < cs.C; ++c)
      w[c] = T(0.5 + 0.25 * c);
    for (int use_w = 0; use_w < 2; ++use_w)
      for (int hi = 0; hi < 2; ++hi)
        for (int red = 0; red < 3; ++red) {
          // ignore_index matches the second label when enabled
          const int64_t ii = cs.labels[1];
          std::vector<T> out(cs.N * cs.D), lp(sc.size());
          const T *wp = use_w ? w.data() : nullptr;
          int rc = sce_loss(out.data(), lp.data(), sc.data(), cs.ss, cs.labels.data(), wp, red, hi != 0, ii);
          std::vector<double> want = sce_ref(sc, cs.N, cs.C, cs.D, cs.labels, wp, red, hi != 0, ii);
          char what[96];
          std::snprintf(what, sizeof what, "sce_loss case %zu weights=%d ignore=%d red=%d", ci, use_w, hi, red);
          check(rc == 0 && close(out, want, 4 * tol<T>()), what, tn);
        }
    // log_prob is the log_softmax over axis 1
    std::vector<T> out(1), lp(sc.size()), lpw(sc.size());
    sce_loss(out.data(), lp.data(), sc.data(), cs.ss, cs.labels.data(), static_cast<const T *>(nullptr), 1, false,
             int64_t(-100));
    softmax(lpw.data(), sc.data(), cs.ss, 1, true);
    check(close(lp.data(), std::vector<double>(lpw.begin(), lpw.end()), tol<T>()), "sce_loss log_prob", tn);
  }
  {
    // hand-computed: N=1, C=2, scores [0, 0], label 1 -> loss log 2
    std::vector<T> sc{0, 0}, out(1), lp(2);
    std::vector<int32_t> lab{1};
    sce_loss(out.data(), lp.data(), sc.data(), S({1, 2}), lab.data(), static_cast<const T *>(nullptr), 2, false,
             int64_t(0));
    check(close(out, {std::log(2.0)}, tol<T>()), "sce_loss hand log 2", tn);
    std::vector<int32_t> bad{2};
    check(sce_loss(out.data(), lp.data(), sc.data(), S({1, 2}), bad.data(), static_cast<const T *>(nullptr), 2,
                   false, int64_t(0)) == 1,
          "sce_loss out-of-range label", tn);
    std::vector<int32_t> neg{-1};
    check(sce_loss(out.data(), lp.data(), sc.data(), S({1, 2}), neg.data(), static_cast<const T *>(nullptr), 2,
                   false, int64_t(0)) == 1,
          "sce_loss negative label", tn);
    // -1 ignored: ok, and mean over nothing is NaN
    check(sce_loss(out.data(), lp.data(), sc.data(), S({1, 2}), neg.data(), static_cast<const T *>(nullptr), 2,
                   true, int64_t(-1)) == 0 &&
              std::isnan(double(out[0])),
          "sce_loss all ignored mean is NaN", tn);
    std::vector<T> g(2, T(5)), dout{1};
    check(sce_loss_grad(g.data(), dout.data(), lp.data(), S({1, 2}), bad.data(), static_cast<const T *>(nullptr), 2,
                        false, int64_t(0)) == 1,
          "sce_loss_grad out-of-range label", tn);
  }
}

// sce_loss_grad vs central finite differences of sce_loss (double).
static void test_sce_grad_fd() {
  const char *tn = "double";
  const int64_t N = 2, C = 3, D = 2;
  const Shape ss = S({N, C, D});
  std::vector<double> sc(N * C * D);
  for (size_t i = 0; i < sc.size(); ++i)
    sc[i] = 0.37 * double((i * 5) % 7) - 0.9 + 0.01 * double(i);
  std::vector<int64_t> lab{1, 2, 0, 1};
  std::vector<double> w{0.5, 1.25, 2.0};
  for (int use_w = 0; use_w < 2; ++use_w)
    for (int hi = 0; hi < 2; ++hi)
      for (int red = 0; red < 3; ++red) {
        const double *wp = use_w ? w.data() : nullptr;
        const int64_t ii = 2; // ignores position (0, d=1) when enabled
        // loss seen by FD: sum_p dout[p] * loss[p] for none, dout * loss otherwise
        std::vector<double> dout = red == 0 ? std::vector<double>{0.7, -1.3, 0.4, 2.0} : std::vector<double>{1.7};
        auto L = [&](const std::vector<double> &s) {
          std::vector<double> out(N * D), lp(s.size());
          sce_loss(out.data(), lp.data(), s.data(), ss, lab.data(), wp, red, hi != 0, ii);
          double t = 0;
          for (size_t i = 0; i < dout.size(); ++i)
            t += dout[i] * out[i];
          return t;
        };
        std::vector<double> out(N * D), lp(sc.size()), g(sc.size(), 99.0);
        sce_loss(out.data(), lp.data(), sc.data(), ss, lab.data(), wp, red, hi != 0, ii);
        int rc = sce_loss_grad(g.data(), dout.data(), lp.data(), ss, lab.data(), wp, red, hi != 0, ii);
        std::vector<double> fd(sc.size());
        const double h = 1e-5;
        for (size_t i = 0; i < sc.size(); ++i) {
          std::vector<double> p = sc, m = sc;
          p[i] += h;
          m[i] -= h;
          fd[i] = (L(p) - L(m)) / (2 * h);
        }
        char what[96];
        std::snprintf(what, sizeof what, "sce_loss_grad vs FD weights=%d ignore=%d red=%d", use_w, hi, red);
        check(rc == 0 && close(g, fd, 1e-7), what, tn);
      }
}

template <class T> static void test_zero_size() {
  const char *tn = tname<T>();
  const T sentinel = T(-123);
  std::vector<T> buf(8, sentinel), a(8, T(1)), b(8, T(2));
  binary(BinaryOp::Add, buf.data(), S({0, 3}), a.data(), S({0, 3}), b.data(), S({3}));
  unary(UnaryOp::Exp, buf.data(), a.data(), 0);
  copy(buf.data(), a.data(), 0);
  fill(buf.data(), 0, T(5));
  broadcast_to(buf.data(), S({0, 3}), a.data(), S({3}));
  softmax(buf.data(), a.data(), S({0, 3}), 1, false);
  softmax(buf.data(), a.data(), S({2, 0, 3}), 1, true);
  const int64_t perm[2] = {1, 0};
  transpose(buf.data(), a.data(), S({3, 0}), perm);
  const int64_t starts[2] = {0, 0}, steps[2] = {1, 1};
  slice(buf.data(), S({0, 2}), a.data(), S({2, 2}), starts, steps);
  std::vector<int64_t> idx{0};
  int rc = gather(buf.data(), a.data(), S({2, 2}), idx.data(), 0, 0);
  rc |= gather(buf.data(), a.data(), S({2, 0}), idx.data(), 1, 0);
  const T *ins[2] = {a.data(), b.data()};
  const int64_t sizes[2] = {0, 0};
  concat(buf.data(), S({2, 0, 3}), 1, 2, ins, sizes);
  matmul(buf.data(), a.data(), S({0, 3}), b.data(), S({3, 2}));
  matmul(buf.data(), a.data(), S({0, 2, 3}), b.data(), S({3, 2}));
  gemm(buf.data(), a.data(), b.data(), 0, 3, 2, false, false, 1.0, 1.0, b.data(), S({3}));
  std::vector<T> mean(2, sentinel);
  layer_norm(buf.data(), mean.data(), mean.data(), a.data(), S({0, 4}), 1, b.data(), S({4}), b.data(), S({4}),
             1e-5);
  std::vector<int64_t> lab{0};
  std::vector<T> lp(8, sentinel);
  rc |= sce_loss(buf.data(), lp.data(), a.data(), S({0, 3}), lab.data(), static_cast<const T *>(nullptr), 0, false,
                 int64_t(0));
  bool untouched = rc == 0;
  for (T v : buf)
    untouched = untouched && v == sentinel;
  check(untouched, "zero-size ops are no-ops", tn);
  // K = 0: matmul/gemm produce zeros / beta * C
  std::vector<T> o(6, sentinel);
  matmul(o.data(), a.data(), S({2, 0}), b.data(), S({0, 3}));
  check(close(o, {0, 0, 0, 0, 0, 0}, tol<T>()), "matmul K=0 gives zeros", tn);
  std::vector<T> c{1, 2, 3};
  gemm(o.data(), a.data(), b.data(), 2, 3, 0, false, false, 1.0, 2.0, c.data(), S({3}));
  check(close(o, {2, 4, 6, 2, 4, 6}, tol<T>()), "gemm K=0 gives beta*C", tn);
  // reducing a zero-size axis: sum 0, mean NaN
  std::vector<T> r(2, sentinel);
  reduce(r.data(), a.data(), S({2, 0}), 0b10u, false);
  check(close(r, {0, 0}, tol<T>()), "reduce over zero-size axis sums to 0", tn);
  reduce(r.data(), a.data(), S({2, 0}), 0b10u, true);
  check(std::isnan(double(r[0])) && std::isnan(double(r[1])), "reduce mean over zero-size axis is NaN", tn);
  // gather_grad into zero-size data
  std::vector<T> gg(2, sentinel);
  check(gather_grad(gg.data(), S({0, 2}), a.data(), idx.data(), 0, 0) == 0 && gg[0] == sentinel,
        "gather_grad zero-size", tn);
  // rank-0 tensors
  std::vector<T> s0{T(3)}, s1{T(4)}, so(1);
  binary(BinaryOp::Mul, so.data(), S({}), s0.data(), S({}), s1.data(), S({}));
  check(close(so, {12}, tol<T>()), "rank-0 binary", tn);
  reduce(so.data(), s0.data(), S({}), 0u, true);
  check(close(so, {3}, tol<T>()), "rank-0 reduce", tn);
}

/// The kernels that split their work across the step's threads
/// (runtime/cpu/threads.h) give the same bits at 1 and at 3 threads; with a
/// BLAS (the kernels-blas-test build), the fp32 GEMMs and attention on it
/// agree with the double-accumulating reference kernels.
static void test_threads() {
  const char *tn = "float";
  uint64_t seed = 7;
  auto rnd = [&]() {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<double>(seed >> 40) / double(1 << 24) - 0.5);
  };
  auto fill = [&](std::vector<float> &v) {
    for (float &x : v)
      x = rnd();
  };
  const int64_t B = 2, H = 3, Sq = 70, Sk = 70, D = 16;
  std::vector<float> q(B * H * Sq * D), k(B * H * Sk * D), v(B * H * Sk * D), dout(B * H * Sq * D);
  fill(q), fill(k), fill(v), fill(dout);
  const AttentionStrides st{H * Sq * D, Sq * D, D};
  const AttentionDims dims{B, H, Sq, Sk, D, D};
  std::vector<float> a(64 * 200), bm(200 * 300), x(96 * 500), scores(50 * 1000);
  fill(a), fill(bm), fill(x), fill(scores);
  std::vector<int64_t> labels(50);
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<int64_t>(i * 37 % 1000);
  struct Result {
    std::vector<float> mm, mmt, o, lse, dq, dk, dv, ln, sm, loss, dscores;
  };
  auto run = [&](int threads) {
    ThreadPool::get().resize(threads);
    Result r;
    r.mm.resize(64 * 300);
    matmul(r.mm.data(), a.data(), S({64, 200}), bm.data(), S({200, 300}));
    r.mmt.resize(200 * 200);
    matmul(r.mmt.data(), a.data(), S({64, 200}), a.data(), S({64, 200}), true, false);
    r.o.resize(q.size()), r.lse.resize(B * H * Sq);
    attention_forward(r.o.data(), st, r.lse.data(), q.data(), st, k.data(), st, v.data(), st,
                      static_cast<const float *>(nullptr), AttentionStrides{}, dims, 0.25, true);
    r.dq.resize(q.size()), r.dk.resize(k.size()), r.dv.resize(v.size());
    attention_backward(r.dq.data(), st, r.dk.data(), st, r.dv.data(), st, q.data(), st, k.data(), st,
                       v.data(), st, r.o.data(), st, dout.data(), st, r.lse.data(),
                       static_cast<const float *>(nullptr), AttentionStrides{}, dims, 0.25, true);
    r.ln.resize(x.size());
    layer_norm(r.ln.data(), static_cast<float *>(nullptr), static_cast<float *>(nullptr), x.data(),
               S({96, 500}), 1, static_cast<const float *>(nullptr), S({}),
               static_cast<const float *>(nullptr), S({}), 1e-5);
    r.sm.resize(x.size());
    softmax(r.sm.data(), x.data(), S({96, 500}), 1, false);
    r.loss.resize(1), r.dscores.resize(scores.size());
    const float one = 1.0f;
    sce_loss_with_grad(r.loss.data(), r.dscores.data(), scores.data(), 50, 1000, labels.data(),
                       static_cast<const float *>(nullptr), &one, 2, false, int64_t(0));
    return r;
  };
  const Result r1 = run(1), r3 = run(3);
  ThreadPool::get().resize(1);
  auto same = [](const std::vector<float> &x, const std::vector<float> &y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  check(same(r1.mm, r3.mm) && same(r1.mmt, r3.mmt), "matmul: 1 and 3 threads bit-identical", tn);
  check(same(r1.o, r3.o) && same(r1.lse, r3.lse), "attention forward: 1 and 3 threads bit-identical", tn);
  check(same(r1.dq, r3.dq) && same(r1.dk, r3.dk) && same(r1.dv, r3.dv),
        "attention backward: 1 and 3 threads bit-identical", tn);
  check(same(r1.ln, r3.ln) && same(r1.sm, r3.sm), "layer_norm, softmax: 1 and 3 threads bit-identical", tn);
  check(same(r1.loss, r3.loss) && same(r1.dscores, r3.dscores),
        "sce_loss_with_grad: 1 and 3 threads bit-identical", tn);
  {
    // In place, as the memory plan may put the gradient over the logits.
    std::vector<float> inplace = scores, loss(1);
    const float one = 1.0f;
    sce_loss_with_grad(loss.data(), inplace.data(), inplace.data(), 50, 1000, labels.data(),
                       static_cast<const float *>(nullptr), &one, 2, false, int64_t(0));
    check(same(loss, r1.loss) && same(inplace, r1.dscores),
          "sce_loss_with_grad in place: the same bits", tn);
  }
  // Against the double reference kernels on the same (float) inputs.
  auto wide = [](const std::vector<float> &f) { return std::vector<double>(f.begin(), f.end()); };
  std::vector<double> mm(64 * 300);
  {
    std::vector<double> ad = wide(a), bd = wide(bm);
    matmul(mm.data(), ad.data(), S({64, 200}), bd.data(), S({200, 300}));
  }
  check(close(r1.mm, mm, 1e-5), "fp32 matmul against the double reference", tn);
  std::vector<double> qd = wide(q), kd = wide(k), vd = wide(v), gd = wide(dout);
  std::vector<double> o(q.size()), lse(B * H * Sq), dq(q.size()), dk(k.size()), dv(v.size());
  attention_forward(o.data(), st, lse.data(), qd.data(), st, kd.data(), st, vd.data(), st,
                    static_cast<const double *>(nullptr), AttentionStrides{}, dims, 0.25, true);
  attention_backward(dq.data(), st, dk.data(), st, dv.data(), st, qd.data(), st, kd.data(), st, vd.data(),
                     st, o.data(), st, gd.data(), st, lse.data(), static_cast<const double *>(nullptr),
                     AttentionStrides{}, dims, 0.25, true);
  check(close(r1.o, o, 1e-5) && close(r1.lse, lse, 1e-5), "fp32 attention forward against the double reference",
        tn);
  check(close(r1.dq, dq, 1e-5) && close(r1.dk, dk, 1e-5) && close(r1.dv, dv, 1e-5),
        "fp32 attention backward against the double reference", tn);
  // With a soft cap small enough that tanh saturates (the slope 1 - tanh^2
  // far from 1), on the scale of these scores.
  const double cap = 0.05;
  std::vector<float> oc(q.size()), lc(B * H * Sq), dqc(q.size()), dkc(k.size()), dvc(v.size());
  attention_forward(oc.data(), st, lc.data(), q.data(), st, k.data(), st, v.data(), st,
                    static_cast<const float *>(nullptr), AttentionStrides{}, dims, 0.25, true, AttentionDropout{},
                    cap);
  attention_backward(dqc.data(), st, dkc.data(), st, dvc.data(), st, q.data(), st, k.data(), st, v.data(), st,
                     oc.data(), st, dout.data(), st, lc.data(), static_cast<const float *>(nullptr),
                     AttentionStrides{}, dims, 0.25, true, AttentionDropout{}, cap);
  attention_forward(o.data(), st, lse.data(), qd.data(), st, kd.data(), st, vd.data(), st,
                    static_cast<const double *>(nullptr), AttentionStrides{}, dims, 0.25, true, AttentionDropout{},
                    cap);
  attention_backward(dq.data(), st, dk.data(), st, dv.data(), st, qd.data(), st, kd.data(), st, vd.data(),
                     st, o.data(), st, gd.data(), st, lse.data(), static_cast<const double *>(nullptr),
                     AttentionStrides{}, dims, 0.25, true, AttentionDropout{}, cap);
  check(!close(oc, wide(r1.o), 1e-3), "the soft cap changes the attention", tn);
  check(close(oc, o, 1e-5) && close(lc, lse, 1e-5), "fp32 soft-capped attention forward against the double "
        "reference", tn);
  check(close(dqc, dq, 1e-5) && close(dkc, dk, 1e-5) && close(dvc, dv, 1e-5),
        "fp32 soft-capped attention backward against the double reference", tn);
}

/// GELU and its gradient in float (kernels.h's float forms, without libm)
/// against long double references written without cancellation: Phi(x) =
/// erfc(-x / sqrt 2) / 2, and the tanh form's 1 / (1 + exp(-2u)).
static void test_gelu_float() {
  typedef long double LD;
  const LD k = 0.797884560802865356L, pi = 3.14159265358979323846L;
  auto gate = [&](LD x, bool th) {
    return th ? 1 / (1 + expl(-2 * k * (x + 0.044715L * x * x * x))) : erfcl(-x / sqrtl(2.0L)) / 2;
  };
  auto slope = [&](LD x, bool th) {
    LD s = gate(x, th);
    return th ? s + x * 2 * s * (1 - s) * k * (1 + 0.134145L * x * x)
              : s + x * expl(-x * x / 2) / sqrtl(2 * pi);
  };
  // Error in units of the last place of max(|want|, floor).
  auto ulps = [](float got, LD want, LD floor) {
    float m = (float)std::max(fabsl(want), floor);
    return (double)(fabsl((LD)got - want) / (LD)(std::nextafter(m, INFINITY) - m));
  };
  for (bool th : {false, true}) {
    double rel = 0, tail = 0, grad = 0;
    for (double xd = -20; xd <= 20; xd += 1e-5) {
      float x = (float)xd;
      LD want = x * gate(x, th);
      float got = gelu_scalar(x, th);
      if (x >= -3)
        rel = std::max(rel, ulps(got, want, 1e-37L));
      else
        tail = std::max(tail, (double)fabsl((LD)got - want));
      grad = std::max(grad, ulps(gelu_grad_scalar(1.0f, x, th), slope(x, th), 1.0L));
    }
    std::printf("  gelu float (%s): %.2f ulp for x >= -3, %.2g absolute below; gradient %.2f ulp of "
                "max(1, |gelu'|)\n", th ? "tanh" : "erf", rel, tail, grad);
    check(rel <= 20, "float GELU within 20 ulp for x >= -3", th ? "tanh" : "erf");
    check(tail <= 1e-8, "float GELU within 1e-8 below x = -3", th ? "tanh" : "erf");
    check(grad <= 2, "float GELU gradient within 2 ulp of max(1, |gelu'|)", th ? "tanh" : "erf");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    check(std::isnan(gelu_scalar(nan, th)) && std::isnan(gelu_grad_scalar(1.0f, nan, th)),
          "float GELU of NaN is NaN", th ? "tanh" : "erf");
    check(gelu_scalar(-100.0f, th) == 0.0f && gelu_scalar(100.0f, th) == 100.0f &&
              gelu_grad_scalar(1.0f, 100.0f, th) == 1.0f && gelu_grad_scalar(1.0f, -100.0f, th) == 0.0f,
          "float GELU at +-100", th ? "tanh" : "erf");
  }
}

/// exp_f32 and the float sigmoid (softmax, the losses and SiLU of f32
/// steps) against long double.
static void test_exp_float() {
  auto ulps = [](float got, long double want) {
    float m = (float)fabsl(want);
    return (double)(fabsl((long double)got - want) / (long double)(std::nextafter(m, INFINITY) - m));
  };
  double e = 0, sg = 0;
  for (double x = -87.3; x < 88.3; x += 1e-4)
    e = std::max(e, ulps(detail::exp_f32((float)x), expl((long double)(float)x)));
  for (double x = -80; x < 80; x += 1e-4) {
    long double v = (long double)(float)x;
    sg = std::max(sg, ulps(unary_scalar<UnaryOp::Sigmoid>((float)x), 1 / (1 + expl(-v))));
  }
  std::printf("  exp_f32 within %.2f ulp on [-87.3, 88.3]; float sigmoid within %.2f ulp on [-80, 80]\n", e, sg);
  check(e <= 2, "exp_f32 within 2 ulp of exp", "float");
  check(sg <= 3, "float sigmoid within 3 ulp", "float");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  check(detail::exp_f32(0.0f) == 1.0f && detail::exp_f32(-100.0f) == 0.0f &&
            std::isinf(detail::exp_f32(100.0f)) && std::isnan(detail::exp_f32(nan)) &&
            std::isnan(unary_scalar<UnaryOp::Sigmoid>(nan)) &&
            unary_scalar<UnaryOp::Sigmoid>(-200.0f) == 0.0f &&
            unary_scalar<UnaryOp::Sigmoid>(200.0f) == 1.0f,
        "exp_f32 and sigmoid at 0, +-100, +-200 and NaN", "float");
}

int main() {
  test_gelu_float();
  test_exp_float();
  test_binary<float>();
  test_binary<double>();
  test_binary_int();
  test_unary<float>();
  test_unary<double>();
  test_movement<float>();
  test_movement<double>();
  test_linalg<float>();
  test_linalg<double>();
  test_norm<float>();
  test_norm<double>();
  test_sce<float>();
  test_sce<double>();
  test_sce_grad_fd();
  test_zero_size<float>();
  test_zero_size<double>();
  test_threads();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
