// Numerical test of runtime/cuda/kernels.cuh and runtime/cuda/gemm.cuh
// against the CPU reference runtime/cpu/kernels.h, on random data. Needs a
// GPU. Prints "N passed, M failed" last; exits non-zero on any failure.
//
//   /usr/local/cuda/bin/nvcc -std=c++17 -arch=sm_90 -O2 -I/work/main/runtime test/runtime/cuda_kernels_test.cu -o cuda_kernels_test -lcublasLt -lcudart
//
// Exit status 77 without a device (a ctest SKIP_RETURN_CODE). An optional
// argument runs one section (binary, unary_cast, where, softmax, layer_norm,
// reduce, gather, movement, sce, gelu, optim, matmul, graph, attention,
// perf); "perf" prints timings only.
#include "cpu/kernels.h"
#include "cuda/gemm.cuh"
#include "cuda/gemm.cu" // one unit: the definitions too
#include "cuda/kernels.cuh"
#include "host_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace cpu = tcc::cpu;
namespace gpu = tcc::cuda;
using half = __half;

static int g_pass = 0, g_fail = 0;

#define CK(x)                                                                                                   \
  do {                                                                                                          \
    cudaError_t e_ = (x);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                    \
      std::printf("CUDA error %s at line %d: %s\n", cudaGetErrorString(e_), __LINE__, #x);                     \
      std::exit(2);                                                                                             \
    }                                                                                                           \
  } while (0)

static std::mt19937 g_rng(12345);

static std::vector<float> randf(size_t n, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto &x : v)
    x = d(g_rng);
  return v;
}
static std::vector<int64_t> randi(size_t n, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<int64_t> v(n);
  for (auto &x : v)
    x = d(g_rng);
  return v;
}
static std::vector<half> to_half(const std::vector<float> &v) {
  std::vector<half> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = __float2half_rn(v[i]);
  return h;
}
static std::vector<float> from_half(const std::vector<half> &h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i)
    v[i] = __half2float(h[i]);
  return v;
}
static std::vector<float> round_half(const std::vector<float> &v) { return from_half(to_half(v)); }
template <class TO, class TI> static std::vector<TO> conv_vec(const std::vector<TI> &v) {
  std::vector<TO> o(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    o[i] = static_cast<TO>(v[i]);
  return o;
}

template <class T> struct DevBuf {
  T *p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t n_) : n(n_) {
    CK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
    CK(cudaMemset(p, 0xff, (n ? n : 1) * sizeof(T))); // garbage, to catch unwritten outputs
  }
  explicit DevBuf(const std::vector<T> &h) : DevBuf(h.size()) {
    if (n)
      CK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf &) = delete;
  std::vector<T> get() const {
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<T> h(n);
    if (n)
      CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

static std::vector<float> getf(const DevBuf<half> &b) { return from_half(b.get()); }


static void check(bool ok, const std::string &what) {
  if (ok) {
    ++g_pass;
  } else {
    ++g_fail;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

template <class G, class W>
static bool close(const std::vector<G> &got, const std::vector<W> &want, double atol, double rtol,
                  const std::string &what) {
  if (got.size() != want.size()) {
    std::printf("  %s: size %zu vs %zu\n", what.c_str(), got.size(), want.size());
    return false;
  }
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool ok = std::isnan(w) ? std::isnan(g)
                                  : (std::isinf(w) ? g == w : std::fabs(g - w) <= atol + rtol * std::fabs(w));
    if (!ok && bad++ < 5)
      std::printf("  %s [%zu] got %.9g want %.9g\n", what.c_str(), i, g, w);
  }
  return bad == 0;
}
template <class G, class W> static bool same(const std::vector<G> &got, const std::vector<W> &want, const std::string &what) {
  if (got.size() != want.size())
    return false;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (static_cast<int64_t>(got[i]) != static_cast<int64_t>(want[i]) && bad++ < 5)
      std::printf("  %s [%zu] got %lld want %lld\n", what.c_str(), i, (long long)got[i], (long long)want[i]);
  return bad == 0;
}
static void expect_close(const std::vector<float> &got, const std::vector<float> &want, double atol, double rtol,
                         const std::string &what) {
  check(close(got, want, atol, rtol, what), what);
}

static cpu::Shape CS(std::initializer_list<int64_t> d) {
  cpu::Shape s{static_cast<int32_t>(d.size()), {}};
  int i = 0;
  for (int64_t v : d)
    s.dims[i++] = v;
  return s;
}
static gpu::Shape GS(const cpu::Shape &c) {
  gpu::Shape s{c.rank, {}};
  for (int i = 0; i < c.rank; ++i)
    s.dims[i] = c.dims[i];
  return s;
}

static const char *bname(int op) {
  static const char *n[] = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or"};
  return n[op];
}
static const char *uname_(int op) {
  static const char *n[] = {"Sqrt", "Neg", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu", "Reciprocal", "Abs", "Not"};
  return n[op];
}

// ---------------------------------------------------------------------------------

static void test_binary() {
  struct Case {
    cpu::Shape o, a, b;
  };
  const Case cases[] = {
      {CS({4, 3, 5}), CS({4, 1, 5}), CS({3, 1})},
      {CS({2, 3}), CS({2, 3}), CS({})},
      {CS({6, 7, 8, 9}), CS({6, 7, 8, 9}), CS({9})},
      {CS({5, 1, 7}), CS({5, 1, 1}), CS({1, 7})},
      {CS({100000}), CS({100000}), CS({100000})},
  };
  for (const Case &c : cases) {
    const size_t no = c.o.numel(), na = c.a.numel(), nb = c.b.numel();
    std::vector<float> a = round_half(randf(na, -3, 3)), b = round_half(randf(nb, 0.2f, 2.5f));
    for (size_t i = 0; i < na; i += 7)
      a[i] = 0.0f;
    if (nb > 1)
      b[1] = a[1 % na]; // an equal pair
    DevBuf<float> da(a), db(b);
    DevBuf<half> ha(to_half(a)), hb(to_half(b));
    for (int op = 0; op < 10; ++op) {
      const auto bop = static_cast<cpu::BinaryOp>(op);
      const auto gop = static_cast<gpu::BinaryOp>(op);
      const std::string nm = std::string("binary ") + bname(op) + " no=" + std::to_string(no);
      if (op < 5) {
        std::vector<float> want(no);
        cpu::binary(bop, want.data(), c.o, a.data(), c.a, b.data(), c.b);
        DevBuf<float> out(no);
        gpu::binary(gop, out.p, GS(c.o), da.p, GS(c.a), db.p, GS(c.b));
        expect_close(out.get(), want, 1e-6, 2e-6, nm + " f32");
        DevBuf<half> hout(no);
        gpu::binary(gop, hout.p, GS(c.o), ha.p, GS(c.a), hb.p, GS(c.b));
        expect_close(getf(hout), round_half(want), 1e-3, 2e-3, nm + " f16");
        DevBuf<float> mout(no); // mixed: half a, float b
        gpu::binary(gop, mout.p, GS(c.o), ha.p, GS(c.a), db.p, GS(c.b));
        expect_close(mout.get(), want, 1e-6, 2e-6, nm + " f16*f32->f32");
      } else {
        std::vector<uint8_t> want(no);
        cpu::binary(bop, want.data(), c.o, a.data(), c.a, b.data(), c.b);
        DevBuf<uint8_t> out(no);
        gpu::binary(gop, out.p, GS(c.o), ha.p, GS(c.a), hb.p, GS(c.b));
        check(same(out.get(), want, nm), nm + " f16->bool");
      }
    }
  }
  // integers: wrap, division by zero, INT_MIN / -1
  {
    std::vector<int64_t> a = randi(1000, -50, 50), b = randi(1000, -3, 3);
    a[0] = std::numeric_limits<int64_t>::min();
    b[0] = -1;
    a[1] = std::numeric_limits<int64_t>::max();
    b[1] = 2;
    DevBuf<int64_t> da(a), db(b);
    for (int op = 0; op < 10; ++op) {
      if (op == 4)
        continue; // pow: below
      std::vector<int64_t> want(1000);
      cpu::binary(static_cast<cpu::BinaryOp>(op), want.data(), CS({1000}), a.data(), CS({1000}), b.data(), CS({1000}));
      DevBuf<int64_t> out(1000);
      gpu::binary(static_cast<gpu::BinaryOp>(op), out.p, gpu::Shape{1, {1000}}, da.p, gpu::Shape{1, {1000}}, db.p,
                  gpu::Shape{1, {1000}});
      check(same(out.get(), want, "int64"), std::string("binary int64 ") + bname(op));
    }
    std::vector<int64_t> e = randi(1000, -2, 5), want(1000);
    for (size_t i = 0; i < 1000; ++i)
      if (b[i] == 0 && e[i] < 0)
        e[i] = 1;
    DevBuf<int64_t> de(e);
    cpu::binary(cpu::BinaryOp::Pow, want.data(), CS({1000}), b.data(), CS({1000}), e.data(), CS({1000}));
    DevBuf<int64_t> out(1000);
    gpu::binary(gpu::BinaryOp::Pow, out.p, gpu::Shape{1, {1000}}, db.p, gpu::Shape{1, {1000}}, de.p,
                gpu::Shape{1, {1000}});
    check(same(out.get(), want, "int64 pow"), "binary int64 Pow");
    std::vector<int32_t> a32 = conv_vec<int32_t>(a), b32 = conv_vec<int32_t>(b), w32(1000);
    a32[0] = std::numeric_limits<int32_t>::min();
    DevBuf<int32_t> da32(a32), db32(b32);
    cpu::binary(cpu::BinaryOp::Div, w32.data(), CS({1000}), a32.data(), CS({1000}), b32.data(), CS({1000}));
    DevBuf<int32_t> o32(1000);
    gpu::binary(gpu::BinaryOp::Div, o32.p, gpu::Shape{1, {1000}}, da32.p, gpu::Shape{1, {1000}}, db32.p,
                gpu::Shape{1, {1000}});
    check(same(o32.get(), w32, "int32 div"), "binary int32 Div");
  }
}

static void test_unary_cast() {
  const size_t n = 5000;
  std::vector<float> x = round_half(randf(n, -6, 6));
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 100.0f;
  x[3] = -100.0f;
  x[4] = std::nanf("");
  DevBuf<float> dx(x);
  DevBuf<half> hx(to_half(x));
  for (int op = 0; op < 11; ++op) {
    std::vector<float> want(n);
    std::vector<float> xin = x;
    if (op == 0 || op == 3) // sqrt / log of |x|
      for (auto &v : xin)
        v = std::fabs(v);
    DevBuf<float> din(xin);
    DevBuf<half> hin(to_half(xin));
    cpu::unary(static_cast<cpu::UnaryOp>(op), want.data(), xin.data(), n);
    DevBuf<float> out(n);
    gpu::unary(static_cast<gpu::UnaryOp>(op), out.p, din.p, n);
    expect_close(out.get(), want, 1e-6, 4e-6, std::string("unary f32 ") + uname_(op));
    DevBuf<half> hout(n);
    gpu::unary(static_cast<gpu::UnaryOp>(op), hout.p, hin.p, n);
    expect_close(getf(hout), round_half(want), 1e-6, 2e-3, std::string("unary f16 ") + uname_(op));
  }
  {
    std::vector<int64_t> v = randi(n, -1000, 1000), want(n);
    v[0] = 0;
    DevBuf<int64_t> dv(v);
    for (int op : {1, 7, 8, 9, 10, 0, 2}) {
      std::vector<int64_t> vin = v;
      if (op == 0)
        for (auto &e : vin)
          e = std::llabs(e);
      if (op == 2)
        for (auto &e : vin)
          e = e % 20;
      DevBuf<int64_t> din(vin);
      cpu::unary(static_cast<cpu::UnaryOp>(op), want.data(), vin.data(), n);
      DevBuf<int64_t> out(n);
      gpu::unary(static_cast<gpu::UnaryOp>(op), out.p, din.p, n);
      check(same(out.get(), want, "int64 unary"), std::string("unary int64 ") + uname_(op));
    }
  }
  // casts
  {
    std::vector<float> f{-2.7f, 2.7f, -0.5f, 300.0f, std::nanf(""), 1e20f, -1e20f, 65504.0f, 70000.0f, 1.0f / 3.0f};
    DevBuf<float> df(f);
    std::vector<int64_t> w64(f.size());
    cpu::cast(w64.data(), f.data(), f.size());
    DevBuf<int64_t> o64(f.size());
    gpu::cast(o64.p, df.p, f.size());
    check(same(o64.get(), w64, "cast f32->i64"), "cast f32->i64");
    std::vector<int32_t> w32(f.size());
    cpu::cast(w32.data(), f.data(), f.size());
    DevBuf<int32_t> o32(f.size());
    gpu::cast(o32.p, df.p, f.size());
    check(same(o32.get(), w32, "cast f32->i32"), "cast f32->i32");
    std::vector<uint8_t> w8(f.size());
    cpu::cast(w8.data(), f.data(), f.size());
    DevBuf<uint8_t> o8(f.size());
    gpu::cast(o8.p, df.p, f.size());
    check(same(o8.get(), w8, "cast f32->u8"), "cast f32->u8");
    DevBuf<half> oh(f.size());
    gpu::cast(oh.p, df.p, f.size());
    expect_close(getf(oh), round_half(f), 0, 0, "cast f32->f16");
    DevBuf<uint8_t> ob(f.size());
    gpu::cast_to_bool(ob.p, df.p, f.size());
    std::vector<uint8_t> wb(f.size());
    cpu::cast_to_bool(wb.data(), f.data(), f.size());
    check(same(ob.get(), wb, "cast_to_bool"), "cast_to_bool f32");
    std::vector<int64_t> iv{3, -4, 0, 1LL << 40};
    DevBuf<int64_t> di(iv);
    DevBuf<float> ofl(iv.size());
    gpu::cast(ofl.p, di.p, iv.size());
    expect_close(ofl.get(), conv_vec<float>(iv), 0, 0, "cast i64->f32");
    DevBuf<half> ohl(iv.size());
    gpu::cast(ohl.p, di.p, 3);
    auto gh = getf(ohl);
    gh.resize(3);
    expect_close(gh, std::vector<float>{3, -4, 0}, 0, 0, "cast i64->f16");
  }
  // fill, copy
  {
    DevBuf<half> h(1000);
    gpu::fill(h.p, 1000, 0.1);
    expect_close(getf(h), std::vector<float>(1000, __half2float(__float2half_rn(0.1f))), 0, 0, "fill f16");
    DevBuf<int64_t> l(10);
    gpu::fill(l.p, 10, -3.0);
    check(same(l.get(), std::vector<int64_t>(10, -3), "fill i64"), "fill i64");
    DevBuf<float> f(1000);
    gpu::copy(f.p, h.p, 1000);
    expect_close(f.get(), getf(h), 0, 0, "copy f16->f32");
    DevBuf<float> f2(1000);
    gpu::copy(f2.p, f.p, 1000);
    expect_close(f2.get(), f.get(), 0, 0, "copy f32->f32");
  }
}

static void test_where_bcast() {
  const cpu::Shape os = CS({3, 4, 5}), cs_ = CS({4, 1}), xs = CS({3, 1, 5}), ys = CS({});
  std::vector<uint8_t> c = conv_vec<uint8_t>(randi(cs_.numel(), 0, 1));
  std::vector<float> x = round_half(randf(xs.numel())), y{7.0f}, want(os.numel());
  cpu::where(want.data(), os, c.data(), cs_, x.data(), xs, y.data(), ys);
  DevBuf<uint8_t> dc(c);
  DevBuf<half> hx(to_half(x));
  DevBuf<float> dy(y);
  DevBuf<half> out(os.numel());
  gpu::where(out.p, GS(os), dc.p, GS(cs_), hx.p, GS(xs), dy.p, GS(ys));
  expect_close(getf(out), want, 0, 0, "where");
  std::vector<float> bw(os.numel());
  cpu::broadcast_to(bw.data(), os, x.data(), xs);
  DevBuf<float> bout(os.numel());
  gpu::broadcast_to(bout.p, GS(os), hx.p, GS(xs));
  expect_close(bout.get(), bw, 0, 0, "broadcast_to");
}

static void test_softmax() {
  struct Case {
    cpu::Shape s;
    int axis;
  };
  const Case cases[] = {{CS({7, 33}), 1}, {CS({3, 2000}), 1}, {CS({4, 5, 6}), 1}, {CS({5, 1024}), 1},
                        {CS({9, 3}), 0},  {CS({2, 3, 50000}), 2}, {CS({64, 1}), 1}};
  for (const Case &c : cases) {
    const size_t n = c.s.numel();
    std::vector<float> x = round_half(randf(n, -8, 8));
    DevBuf<float> dx(x);
    DevBuf<half> hx(to_half(x));
    for (int log = 0; log < 2; ++log) {
      std::vector<float> want(n);
      cpu::softmax(want.data(), x.data(), c.s, c.axis, log != 0);
      const std::string nm = std::string(log ? "log_softmax" : "softmax") + " n=" + std::to_string(n) + " axis=" +
                             std::to_string(c.axis);
      DevBuf<float> out(n);
      gpu::softmax(out.p, dx.p, GS(c.s), c.axis, log != 0);
      expect_close(out.get(), want, 1e-6, 2e-5, nm + " f32");
      DevBuf<half> hout(n);
      gpu::softmax(hout.p, hx.p, GS(c.s), c.axis, log != 0);
      expect_close(getf(hout), want, 1e-4, 2e-3, nm + " f16");
    }
  }
}

static void test_layer_norm() {
  struct Case {
    cpu::Shape x;
    int axis;
    cpu::Shape s;
    bool bias;
  };
  const Case cases[] = {{CS({6, 100}), 1, CS({100}), true},
                        {CS({2, 3, 64}), 1, CS({3, 64}), true},
                        {CS({2, 3, 64}), 1, CS({64}), false},
                        {CS({5, 4096}), 1, CS({4096}), true},
                        {CS({3, 7}), 1, CS({1}), true},
                        {CS({1000, 768}), 1, CS({768}), true}};
  for (const Case &c : cases) {
    const int64_t n = c.x.numel();
    const int64_t rows = cpu::detail::prod(c.x.dims, 0, c.axis);
    std::vector<float> x = round_half(randf(n, -3, 5)), s = round_half(randf(c.s.numel(), 0.5, 1.5)),
                       b = round_half(randf(c.s.numel()));
    std::vector<float> want(n), wm(rows), wr(rows);
    cpu::layer_norm(want.data(), wm.data(), wr.data(), x.data(), c.x, c.axis, s.data(), c.s,
                    c.bias ? b.data() : nullptr, c.s, 1e-5);
    const std::string nm = "layer_norm n=" + std::to_string(n);
    DevBuf<float> dx(x), ds(s), db(b), out(n), m(rows), r(rows);
    gpu::layer_norm(out.p, m.p, r.p, dx.p, GS(c.x), c.axis, ds.p, GS(c.s), c.bias ? db.p : nullptr, GS(c.s), 1e-5);
    expect_close(out.get(), want, 2e-5, 2e-5, nm + " f32 y");
    expect_close(m.get(), wm, 1e-5, 1e-5, nm + " f32 mean");
    expect_close(r.get(), wr, 1e-5, 1e-5, nm + " f32 rstd");
    DevBuf<half> hx(to_half(x)), hout(n);
    gpu::layer_norm(hout.p, m.p, r.p, hx.p, GS(c.x), c.axis, ds.p, GS(c.s), c.bias ? db.p : nullptr, GS(c.s), 1e-5);
    expect_close(getf(hout), want, 3e-3, 3e-3, nm + " f16 y");
  }
}

static void test_reduce() {
  {
    const cpu::Shape s = CS({3, 4, 5, 6});
    std::vector<float> x = round_half(randf(s.numel()));
    DevBuf<float> dx(x);
    DevBuf<half> hx(to_half(x));
    for (uint32_t mask = 0; mask < 16; ++mask) {
      for (int mean = 0; mean < 2; ++mean) {
        std::vector<float> want(s.numel());
        cpu::reduce(want.data(), x.data(), s, mask, mean != 0);
        int64_t on = 1;
        for (int d = 0; d < 4; ++d)
          if (!(mask & (1u << d)))
            on *= s.dims[d];
        want.resize(on);
        const std::string nm = "reduce mask=" + std::to_string(mask) + (mean ? " mean" : " sum");
        DevBuf<float> out(on);
        gpu::reduce(out.p, dx.p, GS(s), mask, mean != 0);
        expect_close(out.get(), want, 1e-5, 1e-5, nm + " f32");
        DevBuf<half> hout(on);
        gpu::reduce(hout.p, hx.p, GS(s), mask, mean != 0);
        expect_close(getf(hout), want, 2e-3, 2e-3, nm + " f16");
      }
    }
  }
  struct Case {
    cpu::Shape s;
    uint32_t mask;
  };
  const Case cases[] = {{CS({10, 5000}), 2u},   {CS({100, 64}), 2u},   {CS({8192, 768}), 1u}, {CS({2, 1, 300}), 5u},
                        {CS({7, 0, 3}), 2u},    {CS({2, 3}), 4u | 1u}, {CS({}), 1u},          {CS({4, 1000, 3}), 2u},
                        {CS({1, 5, 1}), 7u},    {CS({3, 100000}), 2u}, {CS({1000000}), 1u},   {CS({50, 3000, 4}), 2u},
                        {CS({40, 300, 30, 5}), 5u}, {CS({7, 20000, 3}), 5u}, {CS({700, 5000}), 2u}, {CS({5000, 10}), 1u}};
  for (const Case &c : cases) {
    std::vector<float> x = randf(c.s.numel() ? c.s.numel() : 1, 0.0f, 1.0f);
    for (int mean = 0; mean < 2; ++mean) {
      int64_t on = 1;
      for (int d = 0; d < c.s.rank; ++d)
        if (!(c.mask & (1u << d)))
          on *= c.s.dims[d];
      std::vector<float> want(std::max<int64_t>(on, c.s.numel()) + 1);
      cpu::reduce(want.data(), x.data(), c.s, c.mask, mean != 0);
      want.resize(on);
      DevBuf<float> dx(x), out(on), out2(on);
      const std::string nm = "reduce n=" + std::to_string(c.s.numel()) + " mask=" + std::to_string(c.mask) + (mean ? " mean" : " sum");
      gpu::reduce(out.p, dx.p, GS(c.s), c.mask, mean != 0);
      expect_close(out.get(), want, 1e-4, 2e-5, nm);
      gpu::reduce(out2.p, dx.p, GS(c.s), c.mask, mean != 0);
      expect_close(out2.get(), out.get(), 0, 0, nm + " deterministic");
      DevBuf<half> hx(to_half(x));
      std::vector<float> xr = round_half(x), wh(std::max<int64_t>(on, c.s.numel()) + 1);
      cpu::reduce(wh.data(), xr.data(), c.s, c.mask, mean != 0);
      wh.resize(on);
      gpu::reduce(out2.p, hx.p, GS(c.s), c.mask, mean != 0);
      expect_close(out2.get(), wh, 1e-4, 2e-5, nm + " f16 in");
      if (!mean) {
        // add_into: the sums of fp16 input added into an fp32 accumulator
        // (a bias's gradient), whichever kernel the shape takes.
        std::vector<float> acc0 = randf(on ? on : 1, -3.0f, 3.0f), wacc(on);
        acc0.resize(on);
        for (int64_t i = 0; i < on; ++i)
          wacc[i] = acc0[i] + wh[i];
        DevBuf<float> acc(acc0);
        gpu::reduce(acc.p, hx.p, GS(c.s), c.mask, false, /*add_into=*/true);
        expect_close(acc.get(), wacc, 1e-4, 2e-5, nm + " f16 in, added into");
      }
    }
  }
  {
    std::vector<int64_t> x = randi(600, -100, 100), want(600);
    cpu::reduce(want.data(), x.data(), CS({20, 30}), 1u, false);
    want.resize(30);
    DevBuf<int64_t> dx(x), out(30);
    gpu::reduce(out.p, dx.p, gpu::Shape{2, {20, 30}}, 1u, false);
    check(same(out.get(), want, "reduce int64"), "reduce int64");
  }
}

// dot: the product of two fp16 vectors, accumulated in fp32 (a MatMul of two
// vectors on the CUDA target), against a double sum of the same fp16 values.
static void test_dot() {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(33), int64_t(1000), int64_t(100000)}) {
    std::vector<float> x = round_half(randf(n ? n : 1)), y = round_half(randf(n ? n : 1));
    double want = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      want += double(x[i]) * double(y[i]);
      mag += std::fabs(double(x[i]) * double(y[i]));
    }
    DevBuf<half> hx(to_half(x)), hy(to_half(y));
    DevBuf<float> out(1);
    gpu::dot(out.p, hx.p, hy.p, n);
    const float got = out.get()[0];
    check(std::fabs(double(got) - want) <= 1e-5 * mag + 1e-6,
          "dot n=" + std::to_string(n) + ": got " + std::to_string(got) + ", want " + std::to_string(want));
  }
}

static void test_gather() {
  const cpu::Shape ds = CS({5, 6, 7});
  std::vector<float> d = round_half(randf(ds.numel()));
  DevBuf<float> dd(d);
  for (int axis = 0; axis < 3; ++axis) {
    const int64_t A = ds.dims[axis];
    std::vector<int64_t> idx = randi(9, -A, A - 1);
    const int64_t outer = cpu::detail::prod(ds.dims, 0, axis), inner = cpu::detail::prod(ds.dims, axis + 1, 3);
    const size_t on = outer * 9 * inner;
    std::vector<float> want(on);
    check(cpu::gather(want.data(), d.data(), ds, idx.data(), 9, axis) == 0, "cpu gather ok");
    DevBuf<int64_t> di(idx);
    DevBuf<half> out(on);
    gpu::gather(out.p, dd.p, GS(ds), di.p, 9, axis);
    expect_close(getf(out), want, 0, 0, "gather axis=" + std::to_string(axis));
    check(gpu::read_and_clear_error_flag() == 0, "gather no error");
    // grad
    std::vector<float> g = round_half(randf(on)), gw(ds.numel());
    check(cpu::gather_grad(gw.data(), ds, g.data(), idx.data(), 9, axis) == 0, "cpu gather_grad ok");
    DevBuf<half> dg(to_half(g));
    DevBuf<float> gout(ds.numel());
    gpu::gather_grad(gout.p, GS(ds), dg.p, di.p, 9, axis);
    expect_close(gout.get(), gw, 1e-6, 1e-6, "gather_grad axis=" + std::to_string(axis));
    std::vector<int32_t> idx32 = conv_vec<int32_t>(idx);
    DevBuf<int32_t> di32(idx32);
    DevBuf<float> out32(on);
    gpu::gather(out32.p, dd.p, GS(ds), di32.p, 9, axis);
    expect_close(out32.get(), want, 0, 0, "gather int32 idx axis=" + std::to_string(axis));
  }
  check(gpu::read_and_clear_error_flag() == 0, "no error flag");
  std::vector<int64_t> bad{0, 6};
  DevBuf<int64_t> db(bad);
  DevBuf<float> out(2 * 6 * 7);
  gpu::gather(out.p, dd.p, GS(ds), db.p, 2, 0);
  check(gpu::read_and_clear_error_flag() == 1, "gather out of range sets flag");
  check(gpu::read_and_clear_error_flag() == 0, "flag cleared");
  // embedding-sized
  {
    const cpu::Shape es = CS({50000, 64});
    std::vector<float> e = randf(es.numel());
    std::vector<int64_t> idx = randi(4096, 0, 49999);
    std::vector<float> want(4096 * 64);
    cpu::gather(want.data(), e.data(), es, idx.data(), 4096, 0);
    DevBuf<float> de(e), o(4096 * 64);
    DevBuf<int64_t> di(idx);
    gpu::gather(o.p, de.p, GS(es), di.p, 4096, 0);
    expect_close(o.get(), want, 0, 0, "gather embedding");
  }
}

static void test_movement() {
  {
    const cpu::Shape s = CS({2, 3, 4, 5});
    std::vector<float> x = round_half(randf(s.numel()));
    DevBuf<float> dx(x);
    const int64_t perms[][4] = {{0, 2, 1, 3}, {3, 2, 1, 0}, {0, 1, 3, 2}, {1, 0, 2, 3}, {0, 1, 2, 3}};
    for (const auto &p : perms) {
      std::vector<float> want(s.numel());
      cpu::transpose(want.data(), x.data(), s, p);
      DevBuf<half> out(s.numel());
      gpu::transpose(out.p, dx.p, GS(s), p);
      expect_close(getf(out), want, 0, 0, "transpose");
    }
  }
  {
    const cpu::Shape is = CS({6, 7, 8}), os = CS({2, 3, 4});
    const int64_t starts[] = {1, 6, 0}, steps[] = {2, -2, 2};
    std::vector<float> x = round_half(randf(is.numel())), want(os.numel());
    cpu::slice(want.data(), os, x.data(), is, starts, steps);
    DevBuf<float> dx(x), out(os.numel());
    gpu::slice(out.p, GS(os), dx.p, GS(is), starts, steps);
    expect_close(out.get(), want, 0, 0, "slice");
    std::vector<float> g = round_half(randf(os.numel())), gw(is.numel());
    cpu::slice_grad(gw.data(), is, g.data(), os, starts, steps);
    DevBuf<half> dg(to_half(g));
    DevBuf<float> gout(is.numel());
    gpu::slice_grad(gout.p, GS(is), dg.p, GS(os), starts, steps);
    expect_close(gout.get(), gw, 0, 0, "slice_grad");
  }
  // Slices of the last axis only, step 1 (rows copied: tcc-pad-gemms' pads
  // and slices), from its start and from inside it, into fp16 and fp32.
  for (int64_t lo : {0, 3}) {
    const cpu::Shape is = CS({5, 3, 21}), os = CS({5, 3, 13});
    const int64_t starts[] = {0, 0, lo}, steps[] = {1, 1, 1};
    std::vector<float> x = round_half(randf(is.numel())), want(os.numel());
    cpu::slice(want.data(), os, x.data(), is, starts, steps);
    DevBuf<half> dx(to_half(x)), out(os.numel());
    gpu::slice(out.p, GS(os), dx.p, GS(is), starts, steps);
    expect_close(getf(out), want, 0, 0, "slice (last axis)");
    std::vector<float> g = round_half(randf(os.numel())), gw(is.numel());
    cpu::slice_grad(gw.data(), is, g.data(), os, starts, steps);
    DevBuf<half> dg(to_half(g)), gout(is.numel());
    gpu::fill(gout.p, is.numel(), 7.0); // every element is written, the padding with 0
    gpu::slice_grad(gout.p, GS(is), dg.p, GS(os), starts, steps);
    expect_close(getf(gout), gw, 0, 0, "slice_grad (last axis: zero padding)");
    DevBuf<float> gout32(is.numel());
    gpu::slice_grad(gout32.p, GS(is), dg.p, GS(os), starts, steps);
    expect_close(gout32.get(), gw, 0, 0, "slice_grad (last axis, fp16 -> fp32)");
  }
  {
    const int64_t sizes[] = {3, 1, 5};
    const cpu::Shape os = CS({4, 9, 6});
    std::vector<std::vector<float>> parts;
    std::vector<const float *> hp;
    for (int i = 0; i < 3; ++i) {
      parts.push_back(round_half(randf(4 * sizes[i] * 6)));
      hp.push_back(parts.back().data());
    }
    std::vector<float> want(os.numel());
    cpu::concat(want.data(), os, 1, 3, hp.data(), sizes);
    DevBuf<half> p0(to_half(parts[0])), p1(to_half(parts[1])), p2(to_half(parts[2]));
    const half *dp[] = {p0.p, p1.p, p2.p};
    DevBuf<float> out(os.numel());
    gpu::concat(out.p, GS(os), 1, 3, dp, sizes);
    expect_close(out.get(), want, 0, 0, "concat");
  }
}

static void test_sce() {
  struct Case {
    cpu::Shape s;
  };
  const Case cases[] = {{CS({5, 7})}, {CS({3, 4, 6})}, {CS({64, 1000})}, {CS({2, 5, 3, 2})}};
  for (const Case &c : cases) {
    const int64_t N = c.s.dims[0], C = c.s.dims[1], D = cpu::detail::prod(c.s.dims, 2, c.s.rank);
    const size_t n = c.s.numel(), P = N * D;
    std::vector<float> x = round_half(randf(n, -4, 4)), w = round_half(randf(C, 0.5, 2));
    std::vector<int64_t> lab = randi(P, 0, C - 1);
    lab[0] = -100; // ignored
    DevBuf<float> dx(x), dw(w);
    DevBuf<half> hx(to_half(x));
    DevBuf<int64_t> dl(lab);
    for (int red = 0; red < 3; ++red) {
      for (int weighted = 0; weighted < 2; ++weighted) {
        const std::string nm = "sce n=" + std::to_string(n) + " red=" + std::to_string(red) + " w=" +
                               std::to_string(weighted);
        std::vector<float> lp(n), loss(red == 0 ? P : 1);
        check(cpu::sce_loss(loss.data(), lp.data(), x.data(), c.s, lab.data(), weighted ? w.data() : nullptr, red, true,
                            -100) == 0,
              "cpu sce ok");
        DevBuf<float> glp(n), gloss(loss.size());
        gpu::sce_loss(gloss.p, glp.p, hx.p, GS(c.s), dl.p, weighted ? dw.p : nullptr, red, true, -100);
        expect_close(glp.get(), lp, 1e-5, 1e-5, nm + " log_prob");
        expect_close(gloss.get(), loss, 1e-5, 1e-5, nm + " loss");
        std::vector<float> dout = randf(loss.size(), 0.5, 1.5), gw(n);
        check(cpu::sce_loss_grad(gw.data(), dout.data(), lp.data(), c.s, lab.data(), weighted ? w.data() : nullptr,
                                 red, true, -100) == 0,
              "cpu sce grad ok");
        DevBuf<float> ddout(dout);
        DevBuf<float> gg(n);
        gpu::sce_loss_grad(gg.p, ddout.p, glp.p, GS(c.s), dl.p, weighted ? dw.p : nullptr, red, true, -100);
        expect_close(gg.get(), gw, 1e-6, 1e-5, nm + " grad f32");
        DevBuf<half> hg(n);
        gpu::sce_loss_grad(hg.p, ddout.p, glp.p, GS(c.s), dl.p, weighted ? dw.p : nullptr, red, true, -100);
        expect_close(getf(hg), gw, 1e-4, 2e-3, nm + " grad f16");
      }
    }
    check(gpu::read_and_clear_error_flag() == 0, "sce no error");
  }
  {
    // all ignored, mean: NaN
    std::vector<float> x = randf(6);
    std::vector<int32_t> lab{-1, -1};
    DevBuf<float> dx(x), lp(6), loss(1);
    DevBuf<int32_t> dl(lab);
    gpu::sce_loss(loss.p, lp.p, dx.p, gpu::Shape{2, {2, 3}}, dl.p, static_cast<const float *>(nullptr), 2, true, -1);
    check(std::isnan(loss.get()[0]), "sce mean of nothing is NaN");
    std::vector<int32_t> bad{0, 3};
    DevBuf<int32_t> db(bad);
    gpu::sce_loss(loss.p, lp.p, dx.p, gpu::Shape{2, {2, 3}}, db.p, static_cast<const float *>(nullptr), 1, false, 0);
    check(gpu::read_and_clear_error_flag() == 1, "sce bad label sets flag");
  }
}

static void test_gelu_acc() {
  const size_t n = 10000;
  std::vector<float> x = round_half(randf(n, -6, 6)), g = round_half(randf(n));
  DevBuf<float> dx(x), dg(g);
  DevBuf<half> hx(to_half(x));
  for (int t = 0; t < 2; ++t) {
    std::vector<float> want(n), gw(n);
    cpu::gelu(want.data(), x.data(), n, t != 0);
    cpu::gelu_grad(gw.data(), g.data(), x.data(), n, t != 0);
    DevBuf<float> o(n), og(n);
    gpu::gelu(o.p, dx.p, n, t != 0);
    gpu::gelu_grad(og.p, dg.p, dx.p, n, t != 0);
    expect_close(o.get(), want, 1e-6, 1e-5, std::string("gelu tanh=") + std::to_string(t));
    expect_close(og.get(), gw, 1e-6, 1e-5, std::string("gelu_grad tanh=") + std::to_string(t));
    DevBuf<half> ho(n);
    gpu::gelu(ho.p, hx.p, n, t != 0);
    expect_close(getf(ho), want, 1e-4, 1e-3, std::string("gelu f16 tanh=") + std::to_string(t));
  }
  std::vector<float> acc = randf(n), want = acc;
  for (size_t i = 0; i < n; ++i)
    want[i] += x[i];
  DevBuf<float> dacc(acc);
  gpu::accumulate(dacc.p, hx.p, n);
  expect_close(dacc.get(), want, 0, 0, "accumulate");
}

static void test_optim() {
  // 40000: several of the host update's chunks (kHostChunk) in one tensor.
  const int64_t sizes[] = {5000, 1, 0, 3000, 2048, 4097, 40000};
  const int nt = 7;
  std::vector<std::vector<float>> p, g, m, v;
  std::vector<DevBuf<float> *> bufs;
  std::vector<DevBuf<half> *> hbufs;
  std::vector<gpu::ApplyTensor> rows;
  for (int t = 0; t < nt; ++t) {
    p.push_back(randf(sizes[t]));
    g.push_back(randf(sizes[t]));
    m.push_back(randf(sizes[t], -0.1f, 0.1f));
    v.push_back(randf(sizes[t], 0.0f, 0.1f));
  }
  // adamw, sgd nesterov, sgd plain step 1; then adamw again from p = 0 with
  // lr 0.5, so p after the step is the update itself and every bit of the
  // quotient m / denom shows (from p of about 1 the update is below p's ulp).
  std::vector<std::vector<float>> pz;
  for (int t = 0; t < nt; ++t)
    pz.push_back(std::vector<float>(static_cast<size_t>(sizes[t]), 0.0f));
  for (int opt = 0; opt < 4; ++opt) {
    const bool adam = opt == 0 || opt == 3;
    const double lr = opt == 3 ? 0.5 : opt == 0 ? 1e-3 : 0.1;
    const std::vector<std::vector<float>> &p0 = opt == 3 ? pz : p;
    double ss_want = 0.0;
    rows.clear();
    for (int t = 0; t < nt; ++t) {
      bufs.push_back(new DevBuf<float>(p0[t]));
      auto *pp = bufs.back();
      bufs.push_back(new DevBuf<float>(g[t]));
      auto *gg = bufs.back();
      bufs.push_back(new DevBuf<float>(m[t]));
      auto *mm = bufs.back();
      bufs.push_back(new DevBuf<float>(v[t]));
      auto *vv = bufs.back();
      hbufs.push_back(new DevBuf<half>(sizes[t]));
      rows.push_back({pp->p, gg->p, mm->p, vv->p, t == 1 ? nullptr : hbufs.back()->p, sizes[t], t == 3 ? 0.0f : 0.01f});
      for (float e : g[t])
        ss_want += double(e) * double(e);
    }
    gpu::MultiTensor mt;
    check(mt.upload(rows.data(), nt), "upload");
    DevBuf<double> acc(1);
    const double ss = gpu::sum_squares_all(mt.table(), mt.chunk_start(), mt.ntensors(), mt.nchunks(), acc.p);
    check(std::fabs(ss - ss_want) <= 1e-9 * ss_want, "sum_squares_all");
    const double mult = 0.5;
    if (adam)
      gpu::adamw_multi(mt.table(), mt.chunk_start(), nt, mt.nchunks(), lr, 0.9, 0.999, 1e-8, 3, mult);
    else
      gpu::sgd_multi(mt.table(), mt.chunk_start(), nt, mt.nchunks(), lr, 0.9, opt == 1, opt == 1 ? 3 : 1, mult);
    for (int t = 0; t < nt; ++t) {
      std::vector<float> pw = p0[t], gw = g[t], mw = m[t], vw = v[t];
      const double wd = t == 3 ? 0.0 : 0.01;
      if (adam)
        cpu::adamw_update(pw.data(), gw.data(), mw.data(), vw.data(), sizes[t], lr, 0.9, 0.999, 1e-8, double(float(wd)),
                          3, mult);
      else
        cpu::sgd_update(pw.data(), gw.data(), mw.data(), sizes[t], lr, 0.9, double(float(wd)), opt == 1,
                        opt == 1 ? 3 : 1, mult);
      const std::string nm = std::string(adam ? "adamw" : "sgd") + (opt == 3 ? " from 0" : "") + " t=" + std::to_string(t);
      const int base = static_cast<int>(bufs.size()) - 4 * (nt - t);
      expect_close(bufs[base]->get(), pw, 1e-7, 1e-6, nm + " p");
      expect_close(bufs[base + 1]->get(), std::vector<float>(sizes[t], 0.0f), 0, 0, nm + " g zeroed");
      expect_close(bufs[base + 2]->get(), mw, 1e-7, 1e-6, nm + " m");
      if (adam)
        expect_close(bufs[base + 3]->get(), vw, 1e-9, 1e-6, nm + " v");
      if (t != 1) // p16 = half(p) of the device's p (p may sit on a rounding boundary)
        expect_close(getf(*hbufs[hbufs.size() - nt + t]), round_half(bufs[base]->get()), 0, 0, nm + " p16");
    }
    // The host update (runtime/host_optimizer.h, for state kept in host
    // memory) on the same inputs, on 3 threads: the device's arithmetic, so
    // bit for bit in the emulation; on a GPU within fp32 rounding (nvcc
    // contracts a*b + c into FMAs).
#ifdef TCC_CUDA_EMU
    const double hatol = 0, hrtol = 0;
#else
    const double hatol = 1e-7, hrtol = 1e-6;
#endif
    {
      std::vector<std::vector<float>> hp = p0, hg = g, hm = m, hv = v;
      std::vector<std::vector<uint16_t>> h16(nt);
      std::vector<tcc::host::OptTensor> hrows;
      for (int t = 0; t < nt; ++t) {
        h16[t].assign(static_cast<size_t>(sizes[t]), 0);
        hrows.push_back({hp[t].data(), hg[t].data(), hm[t].data(), hv[t].data(),
                         t == 1 ? nullptr : h16[t].data(), sizes[t], t == 3 ? 0.0f : 0.01f});
      }
      const double mult = 0.5;
      if (adam)
        tcc::host::adamw(hrows.data(), nt, tcc::host::adam_constants(lr, 0.9, 0.999, 1e-8, 3, mult), 3);
      else
        tcc::host::sgd(hrows.data(), nt, tcc::host::sgd_constants(lr, 0.9, opt == 1, opt == 1 ? 3 : 1, mult), 3);
      for (int t = 0; t < nt; ++t) {
        const std::string nm = std::string("host ") + (adam ? "adamw" : "sgd") + (opt == 3 ? " from 0" : "") + " t=" + std::to_string(t);
        const int base = static_cast<int>(bufs.size()) - 4 * (nt - t);
        expect_close(hp[t], bufs[base]->get(), hatol, hrtol, nm + " p = device p");
        expect_close(hg[t], std::vector<float>(sizes[t], 0.0f), 0, 0, nm + " g zeroed");
        expect_close(hm[t], bufs[base + 2]->get(), hatol, hrtol, nm + " m = device m");
        if (adam)
          expect_close(hv[t], bufs[base + 3]->get(), hatol, hrtol, nm + " v = device v");
        if (t != 1) { // the working copy: half(p) of the host's own p
          std::vector<half> got(h16[t].size());
          std::memcpy(got.data(), h16[t].data(), 2 * h16[t].size());
          expect_close(from_half(got), round_half(hp[t]), 0, 0, nm + " p16");
        }
      }
    }
  }
  // float_to_half_rn against the toolkit's (or the emulation's)
  // __float2half_rn over a sweep of float bit patterns: every sign and
  // exponent, the mantissas near each rounding boundary.
  {
    int64_t bad = 0, n = 0;
    uint32_t first_bad = 0;
    for (uint64_t x = 0; x <= 0xffffffffull; x += 4093) {
      for (uint32_t d : {0u, 0xfffu, 0x1000u, 0x1001u, 0x2fffu, 0x3000u}) {
        const uint32_t bits = static_cast<uint32_t>(x) ^ d;
        float f;
        std::memcpy(&f, &bits, 4);
        const half want = __float2half_rn(f);
        uint16_t w;
        std::memcpy(&w, &want, 2);
        const uint16_t got = tcc::host::float_to_half_rn(f);
        const bool nan = (w & 0x7c00u) == 0x7c00u && (w & 0x3ffu);
        ++n;
        if (nan ? !((got & 0x7c00u) == 0x7c00u && (got & 0x3ffu)) : got != w) {
          if (!bad++)
            first_bad = bits;
        }
      }
    }
    char what[160];
    std::snprintf(what, sizeof what, "host float_to_half_rn = __float2half_rn (%lld floats, %lld differ, first 0x%08x)",
                  static_cast<long long>(n), static_cast<long long>(bad), first_bad);
    check(bad == 0, what);
  }
  // half_to_float (the host's sum of gradients copied down in fp16) against
  // __half2float over every binary16 pattern (NaNs: any NaN).
  {
    int bad = 0;
    uint32_t first_bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint16_t bits = static_cast<uint16_t>(h);
      half x;
      std::memcpy(&x, &bits, 2);
      const float want = __half2float(x), got = tcc::host::half_to_float(bits);
      uint32_t w, g;
      std::memcpy(&w, &want, 4);
      std::memcpy(&g, &got, 4);
      if (std::isnan(want) ? !std::isnan(got) : w != g) {
        if (!bad++)
          first_bad = h;
      }
    }
    char what[160];
    std::snprintf(what, sizeof what, "host half_to_float = __half2float (65536 halves, %d differ, first 0x%04x)", bad,
                  first_bad);
    check(bad == 0, what);
  }
  for (auto *b : bufs)
    delete b;
  for (auto *b : hbufs)
    delete b;
}

static void test_matmul() {
  DevBuf<uint8_t> ws(32 << 20);
  gpu::set_workspace(ws.p, 32 << 20);
  struct Case {
    cpu::Shape a;
    bool ta;
    cpu::Shape b;
    bool tb;
  };
  const Case cases[] = {
      {CS({2, 3, 5, 8}), false, CS({8, 7}), false},   // fold
      {CS({2, 3, 5, 8}), false, CS({7, 8}), true},    // fold, trans_b
      {CS({64, 128}), false, CS({128, 256}), false},  // plain
      {CS({4, 8, 5}), true, CS({8, 6}), false},       // trans_a, b unbatched: stride 0
      {CS({4, 5, 8}), false, CS({4, 8, 6}), false},   // strided batch
      {CS({4, 8, 5}), true, CS({4, 6, 8}), true},     // strided batch, both transposed
      {CS({5, 8}), false, CS({4, 8, 6}), false},      // a unbatched: stride 0
      {CS({2, 1, 5, 8}), false, CS({1, 3, 8, 6}), false}, // loop
      {CS({8}), false, CS({8, 6}), false},            // rank-1 a
      {CS({3, 5, 8}), false, CS({8}), false},         // rank-1 b
      {CS({8}), false, CS({8}), false},               // dot
      {CS({3, 1, 7}), false, CS({2, 7, 9}), false},   // batch broadcast 3 vs 2 fails -> skip
      {CS({2, 5, 0}), false, CS({0, 3}), false},      // K = 0
      {CS({16, 100, 64}), false, CS({16, 64, 100}), false},
      {CS({6, 33, 17}), false, CS({6, 17, 9}), false}, // odd sizes (alignment)
  };
  int id = 0;
  for (const Case &c : cases) {
    const std::string nm = "matmul #" + std::to_string(id);
    // reference: materialize op(a), op(b), use cpu::matmul on floats
    auto materialize = [](const std::vector<float> &x, const cpu::Shape &s, bool t, cpu::Shape &os) {
      if (!t || s.rank < 2) {
        os = s;
        return x;
      }
      os = s;
      std::swap(os.dims[s.rank - 1], os.dims[s.rank - 2]);
      int64_t perm[8];
      for (int i = 0; i < s.rank; ++i)
        perm[i] = i;
      std::swap(perm[s.rank - 1], perm[s.rank - 2]);
      std::vector<float> y(x.size());
      cpu::transpose(y.data(), x.data(), s, perm);
      return y;
    };
    std::vector<float> a = round_half(randf(c.a.numel())), b = round_half(randf(c.b.numel()));
    cpu::Shape oa, ob;
    std::vector<float> ma = materialize(a, c.a, c.ta, oa), mb = materialize(b, c.b, c.tb, ob);
    if (id == 11) { // non-broadcastable batch: must fail
      DevBuf<half> ha(to_half(a)), hb(to_half(b)), out(64);
      const int st = gpu::matmul(id, out.p, ha.p, GS(c.a), c.ta, hb.p, GS(c.b), c.tb);
      check(st != 0, nm + " bad batch rejected");
      std::printf("  (expected) %s\n", gpu::last_error());
      ++id;
      continue;
    }
    // output size
    const int64_t M = oa.rank == 1 ? 1 : oa.dims[oa.rank - 2], N = ob.rank == 1 ? 1 : ob.dims[ob.rank - 1];
    int64_t nbatch = 1;
    {
      const int ar = oa.rank >= 2 ? oa.rank - 2 : 0, br = ob.rank >= 2 ? ob.rank - 2 : 0;
      const int r = std::max(ar, br);
      for (int i = 0; i < r; ++i) {
        const int ia = i - (r - ar), ib = i - (r - br);
        const int64_t da = ia >= 0 ? oa.dims[ia] : 1, db = ib >= 0 ? ob.dims[ib] : 1;
        nbatch *= da == 1 ? db : da;
      }
    }
    const size_t on = nbatch * M * N;
    std::vector<float> want(on);
    cpu::matmul(want.data(), ma.data(), oa, mb.data(), ob);
    DevBuf<half> ha(to_half(a)), hb(to_half(b)), out(on);
    for (int rep = 0; rep < 2; ++rep) { // second call: cached plan
      CK(cudaMemset(out.p, 0xff, on * 2));
      const int st = gpu::matmul(id, out.p, ha.p, GS(c.a), c.ta, hb.p, GS(c.b), c.tb);
      check(st == 0, nm + " status");
      if (st != 0)
        std::printf("  %s\n", gpu::last_error());
      expect_close(getf(out), want, 2e-2, 2e-3, nm + " values rep=" + std::to_string(rep));
    }
    ++id;
  }
  // misaligned operand (offset by one element) on a cached id
  {
    std::vector<float> a = round_half(randf(1 + 2 * 5 * 8)), b = round_half(randf(8 * 7));
    DevBuf<half> ha(to_half(a)), hb(to_half(b)), out(2 * 5 * 7 + 1);
    std::vector<float> want(70);
    cpu::matmul(want.data(), a.data() + 1, CS({2, 5, 8}), b.data(), CS({8, 7}));
    const int st = gpu::matmul(0, out.p + 1, ha.p + 1, gpu::Shape{3, {2, 5, 8}}, false, hb.p, gpu::Shape{2, {8, 7}}, false);
    check(st == 0, "matmul misaligned status");
    auto got = getf(out);
    got.erase(got.begin());
    expect_close(got, want, 2e-2, 2e-3, "matmul misaligned values");
  }
  // Epilogues (matmul_epilogue): out = act(a op(b) + bias [+ residual]), the
  // GELU's input as the auxiliary output; [2, 24, 40] x [40, 64] (b stored
  // transposed), as a GPT's linear layers run.
  for (int kind = 0; kind < 4; ++kind) { // bias, bias+residual, GELU, GELU+aux
    const int64_t B = 2, T = 24, K = 40, N = 64, R = B * T;
    const bool gelu = kind >= 2, with_aux = kind == 3, with_res = kind == 1;
    std::vector<float> a = round_half(randf(R * K)), w = round_half(randf(N * K, -0.3f, 0.3f));
    std::vector<float> bias = round_half(randf(N)), res = round_half(randf(R * N));
    std::vector<float> pre(R * N), want(R * N);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += double(a[r * K + k]) * double(w[n * K + k]);
        pre[r * N + n] = static_cast<float>(acc + bias[n] + (with_res ? res[r * N + n] : 0.0f));
      }
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = gelu ? cpu::gelu_scalar(pre[i], true) : pre[i];
    DevBuf<half> ha(to_half(a)), hw(to_half(w)), hb(to_half(bias)), hr(to_half(res)), out(R * N), aux(R * N);
    const std::string nm = "matmul_epilogue kind " + std::to_string(kind);
    for (int rep = 0; rep < 2; ++rep) { // second call: cached plan
      const int st = gpu::matmul_epilogue(100 + kind, out.p, ha.p, gpu::Shape{3, {B, T, K}}, false, hw.p,
                                          gpu::Shape{2, {N, K}}, true, hb.p, with_res ? hr.p : nullptr,
                                          with_aux ? aux.p : nullptr, gelu);
      check(st == 0, nm + " status");
      if (st != 0)
        std::printf("  %s\n", gpu::last_error());
      expect_close(getf(out), want, 2e-2, 5e-3, nm + " values rep=" + std::to_string(rep));
      if (with_aux)
        expect_close(getf(aux), pre, 2e-2, 5e-3, nm + " auxiliary output rep=" + std::to_string(rep));
    }
  }
  // matmul_acc: a weight's gradient added straight into its fp32
  // accumulator (cuBLASLt with fp32 C = D, beta 1): acc += op(a) op(b), for
  // each transpose combination; called twice (the second with its cached
  // plan) the product is added twice. Values beyond fp16's range stay
  // finite in the fp32 accumulator.
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const int64_t M = 24, N = 40, K = 256;
    std::vector<float> a = round_half(randf(M * K, -100.0f, 100.0f)), b = round_half(randf(K * N, -100.0f, 100.0f));
    std::vector<float> acc0 = randf(M * N, -1e5f, 1e5f);
    std::vector<double> prod(M * N, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k)
          prod[i * N + j] += double(ta ? a[k * M + i] : a[i * K + k]) * double(tb ? b[j * K + k] : b[k * N + j]);
    double largest = 0.0;
    for (double x : prod)
      largest = std::max(largest, std::fabs(x));
    check(largest > 65504.0, "matmul_acc: the product leaves fp16's range");
    DevBuf<half> ha(to_half(a)), hb(to_half(b));
    DevBuf<float> acc(acc0);
    const gpu::Shape as = ta ? gpu::Shape{2, {K, M}} : gpu::Shape{2, {M, K}};
    const gpu::Shape bs = tb ? gpu::Shape{2, {N, K}} : gpu::Shape{2, {K, N}};
    for (int rep = 1; rep <= 2; ++rep) {
      const std::string nm = "matmul_acc ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                             " call " + std::to_string(rep);
      const int st = gpu::matmul_acc(120 + t, acc.p, ha.p, as, ta, hb.p, bs, tb);
      check(st == 0, nm + " status");
      if (st != 0)
        std::printf("  %s\n", gpu::last_error());
      std::vector<float> want(M * N);
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = static_cast<float>(double(acc0[i]) + rep * prod[i]);
      expect_close(acc.get(), want, 1e-5 * largest, 1e-4, nm + " values");
    }
  }
  {
    DevBuf<half> x(8);
    DevBuf<float> acc(8);
    const int st = gpu::matmul_acc(124, acc.p, x.p, gpu::Shape{3, {1, 2, 4}}, false, x.p, gpu::Shape{2, {4, 2}}, false);
    check(st != 0, "matmul_acc rejects a rank-3 operand");
  }
  gpu::set_workspace(nullptr, 0);
}

static void test_graph_capture() {
  // The step is meant to be captured: launchers and cached matmuls must be capturable.
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  gpu::stream() = s;
  std::vector<float> a = round_half(randf(4 * 8 * 16)), b = round_half(randf(16 * 8));
  DevBuf<half> ha(to_half(a)), hb(to_half(b)), out(4 * 8 * 8);
  DevBuf<float> sm(4 * 8 * 8), red(8);
  gpu::matmul(100, out.p, ha.p, gpu::Shape{3, {4, 8, 16}}, false, hb.p, gpu::Shape{2, {16, 8}}, false); // plan
  CK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const int st = gpu::matmul(100, out.p, ha.p, gpu::Shape{3, {4, 8, 16}}, false, hb.p, gpu::Shape{2, {16, 8}}, false);
  gpu::softmax(sm.p, out.p, gpu::Shape{2, {32, 8}}, 1, false);
  gpu::reduce(red.p, sm.p, gpu::Shape{2, {32, 8}}, 1u, false);
  CK(cudaStreamEndCapture(s, &graph));
  check(st == 0, "matmul in capture");
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  std::vector<float> want(32 * 8), sw(32 * 8), rw(8);
  cpu::matmul(want.data(), a.data(), CS({4, 8, 16}), b.data(), CS({16, 8}));
  want = round_half(want);
  cpu::softmax(sw.data(), want.data(), CS({32, 8}), 1, false);
  cpu::reduce(rw.data(), sw.data(), CS({32, 8}), 1u, false);
  expect_close(red.get(), rw, 1e-3, 1e-3, "graph replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // A copy stream forked from the capture and joined again, as a step with
  // gradient accumulators in host memory captures its copies to pinned
  // staging (host_tier.cuh: copy_grad, join_copies).
  cudaStream_t down;
  cudaEvent_t fork, joined;
  float *pinned = nullptr;
  CK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  CK(cudaMallocHost(reinterpret_cast<void **>(&pinned), 8 * sizeof(float)));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  gpu::reduce(red.p, sm.p, gpu::Shape{2, {32, 8}}, 1u, false);
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(down, fork, 0));
  CK(cudaMemcpyAsync(pinned, red.p, 8 * sizeof(float), cudaMemcpyDeviceToHost, down));
  CK(cudaEventRecord(joined, down));
  CK(cudaStreamWaitEvent(s, joined, 0));
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  std::fill(pinned, pinned + 8, 0.0f);
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  expect_close(std::vector<float>(pinned, pinned + 8), rw, 1e-3, 1e-3, "graph replay: a forked copy to pinned memory");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  CK(cudaFreeHost(pinned));
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(joined));
  CK(cudaStreamDestroy(down));
  gpu::stream() = 0;
  CK(cudaStreamDestroy(s));
}

// Fused attention (gpu::attention_forward / attention_backward, fp16 with
// WMMA) against the CPU reference in double, on the same fp16 inputs. The
// backward takes the reference o (rounded to fp16) and lse (to float), so
// each pass is checked on its own. Per tensor: max |err| <= tol * max |ref|.
namespace {
struct AttnView {
  int64_t off;               // first element in its buffer
  cpu::AttentionStrides st;  // element strides (b, h, s)
};
// Operand layouts: 0 dense [B, H, S, D]; 1 q, k, v (and dq, dk, dv) as
// [B, S, H, D] views of packed [B, S, 3, H, D] buffers, o and dout as
// [B, S, H, D] (Sq == Sk, D == Dv); 2 [B, H, S, D] with gaps (row stride
// D + 3, odd b and h strides) at an odd element offset: element-wise
// accesses, and the gaps of the outputs must stay unwritten.
struct AttnLayout {
  AttnView q, k, v, o;
  int64_t qkv_size, o_size; // buffer elements: q/k/v (and dq/dk/dv), o/dout
  bool packed;              // q, k, v share one buffer
};
AttnLayout attn_layout(int kind, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv) {
  AttnLayout l{};
  auto dense = [&](int64_t S, int64_t Dx, int64_t off, int64_t gap) {
    const int64_t s = Dx + gap, h = S * s + (gap ? 5 : 0), b = H * h + (gap ? 1 : 0);
    return AttnView{off, {b, h, s}};
  };
  auto size_of = [&](const AttnView &v, int64_t S, int64_t Dx) {
    return v.off + (B - 1) * v.st.b + (H - 1) * v.st.h + (S - 1) * v.st.s + Dx;
  };
  if (kind == 1) {
    const int64_t s3 = 3 * H * D;
    l.q = {0, {Sq * s3, D, s3}};
    l.k = {H * D, {Sq * s3, D, s3}};
    l.v = {2 * H * D, {Sq * s3, D, s3}};
    l.o = {0, {Sq * H * Dv, Dv, H * Dv}};
    l.qkv_size = B * Sq * s3;
    l.o_size = B * Sq * H * Dv;
    l.packed = true;
    return l;
  }
  const int64_t gap = kind == 2 ? 3 : 0, off = kind == 2 ? 1 : 0;
  l.q = dense(Sq, D, off, gap);
  l.k = dense(Sk, D, off, gap);
  l.v = dense(Sk, Dv, off, gap);
  l.o = dense(Sq, Dv, off, gap);
  l.qkv_size = std::max(size_of(l.q, Sq, D), std::max(size_of(l.k, Sk, D), size_of(l.v, Sk, Dv)));
  l.o_size = size_of(l.o, Sq, Dv);
  l.packed = false;
  return l;
}
gpu::AttentionStrides gst(const cpu::AttentionStrides &s) { return {s.b, s.h, s.s}; }

/// Max |got - want|, max |want| and whether every got value is finite, over
/// the [B, H, S, Dx] view.
struct AttnErr {
  double err = 0, ref = 0;
  bool finite = true;
};
AttnErr attn_compare(const std::vector<float> &got, const std::vector<double> &want, const AttnView &v, int64_t B,
                     int64_t H, int64_t S, int64_t Dx) {
  AttnErr e;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < Dx; ++c) {
          const size_t i = static_cast<size_t>(v.off + b * v.st.b + h * v.st.h + s * v.st.s + c);
          if (!std::isfinite(got[i]))
            e.finite = false;
          e.err = std::max(e.err, std::fabs(static_cast<double>(got[i]) - want[i]));
          e.ref = std::max(e.ref, std::fabs(want[i]));
        }
  return e;
}
/// Marks the elements of a view in `mask`.
void attn_mark(std::vector<char> &mask, const AttnView &v, int64_t B, int64_t H, int64_t S, int64_t Dx) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < Dx; ++c)
          mask[static_cast<size_t>(v.off + b * v.st.b + h * v.st.h + s * v.st.s + c)] = 1;
}
/// Whether every element outside the marked ones is still 0xffff (DevBuf's fill).
bool attn_untouched(const std::vector<half> &got, const std::vector<char> &mask) {
  for (size_t i = 0; i < got.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, &got[i], 2);
    if (!mask[i] && bits != 0xffff)
      return false;
  }
  return true;
}
} // namespace

// Bias kinds of the attention cases (an additive fp16 term on the scores).
enum AttnBias {
  kNoBias,    // null
  kPadMask,   // [B, 1, 1, Sk] padding mask: 0, or -10000 on the last keys of some batches (never all)
  kDense,     // [B, H, Sq, Sk] ~ N(0, 1), dense strides
  kHeads,     // [1, H, Sq, Sk] ~ N(0, 1) (bs.b = 0), at an odd element offset (no half2 loads)
  kInfMask,   // [B, 1, 1, Sk]: -inf (fp16 overflow of -3.4e38) on scattered keys, never key 0
  kDenseInf,  // [B, H, Sq, Sk] ~ N(0, 1) with -inf on scattered keys of each row, never key 0
};

static void test_attention() {
  struct Case {
    int64_t B, H, Sq, Sk, D, Dv;
    bool causal;
    int layout;
    AttnBias bias = kNoBias;
    double drop = 0.0; // dropout ratio on the probabilities
    double softcap = 0.0; // the soft cap (launchers with Cap = 1)
  };
  const Case cases[] = {
      {1, 1, 1, 1, 8, 8, false, 0},          {1, 1, 1, 1, 8, 8, true, 0},
      {2, 3, 16, 16, 8, 8, false, 0},        {2, 3, 16, 16, 8, 8, true, 0},
      {2, 3, 37, 37, 64, 64, false, 0},      {2, 3, 37, 37, 64, 64, true, 0},
      {1, 2, 100, 100, 128, 128, false, 0},  {1, 2, 100, 100, 128, 128, true, 0},
      {2, 3, 128, 128, 64, 64, true, 1},     {2, 3, 128, 128, 64, 64, false, 1},
      {1, 2, 100, 100, 40, 40, true, 1},     {1, 1, 128, 128, 128, 128, true, 1},
      {1, 2, 20, 50, 40, 24, false, 0},      {1, 2, 50, 20, 40, 24, false, 0},
      {1, 2, 20, 50, 40, 24, true, 0},       {1, 2, 50, 20, 40, 24, true, 0},
      {2, 1, 37, 37, 40, 24, true, 2},       {1, 2, 20, 50, 40, 24, false, 2},
      {2, 2, 37, 37, 13, 13, true, 0},       {1, 2, 70, 70, 100, 72, true, 2},
      {1, 1, 16, 16, 64, 64, true, 2},
      // Head sizes 80 (the largest 4-warp backward) and 96 (2 warps, the
      // forward still on 64-key tiles), several tiles, keys past the last
      // full tile (review of session 7).
      {1, 1, 130, 70, 80, 80, true, 0},      {1, 1, 70, 200, 96, 96, true, 0},
      {1, 1, 70, 200, 96, 96, false, 0},     {1, 2, 129, 129, 32, 32, true, 0},
      // Additive bias: padding masks (odd Sk: element loads; even: half2),
      // dense N(0, 1) with Sq != Sk, broadcast over b, -inf entries.
      {3, 3, 37, 37, 64, 64, false, 0, kPadMask},   {3, 3, 37, 37, 64, 64, true, 0, kPadMask},
      {2, 3, 128, 128, 64, 64, true, 1, kPadMask},  {2, 2, 70, 70, 128, 128, false, 2, kPadMask},
      {2, 2, 20, 50, 8, 8, false, 0, kDense},       {2, 2, 50, 20, 8, 8, true, 0, kDense},
      {1, 2, 70, 100, 128, 128, false, 0, kDense},  {1, 2, 100, 70, 128, 128, true, 0, kDense},
      {2, 2, 45, 130, 64, 64, false, 0, kDense},    {2, 2, 130, 45, 64, 64, true, 0, kDense},
      {2, 3, 40, 72, 64, 64, false, 0, kHeads},     {2, 3, 72, 40, 40, 24, true, 2, kHeads},
      {2, 2, 37, 100, 64, 64, false, 0, kInfMask},  {2, 2, 100, 37, 64, 64, true, 0, kInfMask},
      {1, 2, 50, 70, 40, 24, false, 0, kDenseInf},  {2, 1, 66, 66, 8, 8, true, 0, kDenseInf},
      // Dropout on the probabilities: the masks of tcc.random_keep, drawn in
      // every kernel (dense, packed and gapped layouts, a padding mask and a
      // dense bias, Sq != Sk, head sizes 24 to 128, several tiles).
      {2, 3, 37, 37, 64, 64, true, 0, kNoBias, 0.2},   {1, 2, 100, 70, 128, 128, false, 0, kPadMask, 0.5},
      {2, 3, 128, 128, 64, 64, true, 1, kNoBias, 0.1}, {2, 2, 20, 50, 40, 24, false, 2, kDense, 0.3},
      {1, 1, 130, 70, 80, 80, true, 0, kNoBias, 0.1},
      // Soft caps (Gemma-2), small enough that tanh saturates: every kernel,
      // with a bias, dropout, packed and gapped layouts and several tiles.
      {2, 3, 37, 37, 64, 64, true, 0, kNoBias, 0.0, 0.5},  {1, 2, 100, 70, 128, 128, false, 0, kPadMask, 0.0, 1.0},
      {2, 3, 128, 128, 64, 64, true, 1, kNoBias, 0.0, 0.3}, {2, 2, 20, 50, 40, 24, false, 2, kDense, 0.3, 2.0},
  };
  static const char *const bias_names[] = {"", " pad-mask", " bias[B,H,Sq,Sk]", " bias[1,H,Sq,Sk]", " -inf-mask",
                                           " bias[B,H,Sq,Sk]-inf"};
  // fp16 inputs, P / dS and outputs: ~1e-3 relative; the floor covers
  // gradients that are zero in exact arithmetic (a single key).
  const double tol = 5e-3, lse_tol = 1e-4, floor = 0.1;
  for (const Case &c : cases) {
    const int64_t B = c.B, H = c.H, Sq = c.Sq, Sk = c.Sk, D = c.D, Dv = c.Dv;
    char nm[160];
    char dropName[32] = "";
    if (c.drop > 0)
      std::snprintf(dropName, sizeof dropName, " dropout %.1f", c.drop);
    if (c.softcap > 0)
      std::snprintf(dropName + std::strlen(dropName), sizeof dropName - std::strlen(dropName), " softcap %.1f",
                    c.softcap);
    std::snprintf(nm, sizeof nm, "attention B=%lld H=%lld Sq=%lld Sk=%lld D=%lld Dv=%lld %s %s%s%s", (long long)B,
                  (long long)H, (long long)Sq, (long long)Sk, (long long)D, (long long)Dv,
                  c.causal ? "causal" : "full", c.layout == 0 ? "dense" : c.layout == 1 ? "packed-qkv" : "gaps",
                  bias_names[c.bias], dropName);
    // Dropout: the random state [seed, counter] on the host and the device.
    const std::vector<int64_t> rng_host{12345, 7};
    DevBuf<int64_t> rng_dev(rng_host);
    cpu::AttentionDropout cdrop;
    gpu::AttentionDropout gdrop;
    if (c.drop > 0) {
      const uint32_t threshold = ::tcc::random::threshold(c.drop);
      cdrop = {rng_host.data(), 3, threshold, 1.0 / (1.0 - c.drop)};
      gdrop = {rng_dev.p, 3, threshold, static_cast<float>(1.0 / (1.0 - c.drop))};
    }
    const AttnLayout L = attn_layout(c.layout, B, H, Sq, Sk, D, Dv);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    // q, k ~ N(0, 1.5^2): scores ~ N(0, 2.25^2) after scaling; v, dout ~ N(0, 1).
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto randn = [&](size_t n, float sd) {
      std::vector<float> x(n);
      for (auto &e : x)
        e = sd * nd(g_rng);
      return round_half(x);
    };
    std::vector<float> hq, hk, hv, hg = randn(static_cast<size_t>(L.o_size), 1.0f);
    if (L.packed) {
      hq = randn(static_cast<size_t>(L.qkv_size), 1.5f);
      for (int64_t b = 0; b < B; ++b) // v ~ N(0, 1)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t s = 0; s < Sk; ++s)
            for (int64_t e = 0; e < Dv; ++e)
              hq[static_cast<size_t>(L.v.off + b * L.v.st.b + h * L.v.st.h + s * L.v.st.s + e)] /= 1.5f;
      hk = hv = hq;
    } else {
      hq = randn(static_cast<size_t>(L.qkv_size), 1.5f);
      hk = randn(static_cast<size_t>(L.qkv_size), 1.5f);
      hv = randn(static_cast<size_t>(L.qkv_size), 1.0f);
    }
    auto dbl = [](const std::vector<float> &x) { return std::vector<double>(x.begin(), x.end()); };
    const std::vector<double> dq_in = dbl(hq), dk_in = dbl(hk), dv_in = dbl(hv), dg_in = dbl(hg);
    const cpu::AttentionDims cd{B, H, Sq, Sk, D, Dv};
    const gpu::AttentionDims gd{B, H, Sq, Sk, D, Dv};

    // The bias (fp16 values), its offset and strides.
    std::vector<float> hb;
    int64_t b_off = 0;
    cpu::AttentionStrides bst{0, 0, 0};
    const float ninf = -3.4e38f; // -inf once rounded to fp16
    switch (c.bias) {
    case kNoBias: break;
    case kPadMask:
    case kInfMask:
      bst = {Sk, 0, 0};
      hb.assign(static_cast<size_t>(B * Sk), 0.0f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 1; j < Sk; ++j) {
          if (c.bias == kPadMask && j >= Sk - b * Sk / (B + 1)) // batch b: its last b Sk / (B + 1) keys
            hb[static_cast<size_t>(b * Sk + j)] = -10000.0f;
          if (c.bias == kInfMask && (j * 7 + b * 3) % 5 < 2) // 2 keys in 5
            hb[static_cast<size_t>(b * Sk + j)] = ninf;
        }
      break;
    case kDense:
    case kDenseInf:
      bst = {H * Sq * Sk, Sq * Sk, Sk};
      hb = randn(static_cast<size_t>(B * H * Sq * Sk), 1.0f);
      if (c.bias == kDenseInf)
        for (int64_t e = 0; e < B * H * Sq; ++e)
          for (int64_t j = 1; j < Sk; ++j)
            if ((j * 5 + e * 3) % 7 < 3) // 3 keys in 7, shifting with the row
              hb[static_cast<size_t>(e * Sk + j)] = ninf;
      break;
    case kHeads:
      b_off = 1;
      bst = {0, Sq * Sk, Sk};
      hb = randn(static_cast<size_t>(1 + H * Sq * Sk), 1.0f);
      break;
    }
    hb = round_half(hb);
    if (c.bias == kInfMask || c.bias == kDenseInf)
      check(std::any_of(hb.begin(), hb.end(), [](float x) { return std::isinf(x) && x < 0; }),
            std::string(nm) + " has -inf bias entries");
    const std::vector<double> db_in = dbl(hb);
    const double *cbias = c.bias == kNoBias ? nullptr : db_in.data() + b_off;
    DevBuf<half> bbias(hb.empty() ? std::vector<half>(1) : to_half(hb));
    const half *gbias = c.bias == kNoBias ? nullptr : bbias.p + b_off;

    // Forward.
    std::vector<double> o_ref(static_cast<size_t>(L.o_size)), lse_ref(static_cast<size_t>(B * H * Sq));
    cpu::attention_forward(o_ref.data() + L.o.off, L.o.st, lse_ref.data(), dq_in.data() + L.q.off, L.q.st,
                           dk_in.data() + L.k.off, L.k.st, dv_in.data() + L.v.off, L.v.st, cbias, bst, cd, scale,
                           c.causal, cdrop, c.softcap);
    DevBuf<half> bq(to_half(hq)), bk(to_half(hk)), bv(to_half(hv)), bo(static_cast<size_t>(L.o_size));
    DevBuf<float> blse(static_cast<size_t>(B * H * Sq));
    const half *pq = bq.p + L.q.off;
    const half *pk = (L.packed ? bq.p : bk.p) + L.k.off;
    const half *pv = (L.packed ? bq.p : bv.p) + L.v.off;
    if (c.softcap > 0)
      gpu::attention_forward<0, -1, 1>(bo.p + L.o.off, gst(L.o.st), blse.p, pq, gst(L.q.st), pk, gst(L.k.st), pv,
                                       gst(L.v.st), gbias, gst(bst), gd, static_cast<float>(scale), c.causal, gdrop,
                                       static_cast<float>(c.softcap));
    else
      gpu::attention_forward(bo.p + L.o.off, gst(L.o.st), blse.p, pq, gst(L.q.st), pk, gst(L.k.st), pv, gst(L.v.st),
                             gbias, gst(bst), gd, static_cast<float>(scale), c.causal, gdrop);
    const std::vector<half> o_half = bo.get();
    const AttnErr eo = attn_compare(from_half(o_half), o_ref, L.o, B, H, Sq, Dv);
    const std::vector<float> lse_got = blse.get();
    double lse_err = 0, lse_max = 1;
    bool lse_finite = true;
    for (size_t i = 0; i < lse_got.size(); ++i) {
      lse_finite = lse_finite && std::isfinite(lse_got[i]);
      lse_err = std::max(lse_err, std::fabs(lse_got[i] - lse_ref[i]));
      lse_max = std::max(lse_max, std::fabs(lse_ref[i]));
    }
    std::vector<char> omask(static_cast<size_t>(L.o_size), 0);
    attn_mark(omask, L.o, B, H, Sq, Dv);

    // Backward, from the reference o (fp16) and lse (float).
    std::vector<float> o_in(o_ref.begin(), o_ref.end());
    o_in = round_half(o_in);
    std::vector<float> lse_in(lse_ref.begin(), lse_ref.end());
    const std::vector<double> do_in = dbl(o_in), dlse_in(lse_in.begin(), lse_in.end());
    std::vector<double> gq(static_cast<size_t>(L.qkv_size)), gk(static_cast<size_t>(L.qkv_size)),
        gv(static_cast<size_t>(L.qkv_size));
    std::vector<double> &gk_ = L.packed ? gq : gk, &gv_ = L.packed ? gq : gv;
    cpu::attention_backward(gq.data() + L.q.off, L.q.st, gk_.data() + L.k.off, L.k.st, gv_.data() + L.v.off, L.v.st,
                            dq_in.data() + L.q.off, L.q.st, dk_in.data() + L.k.off, L.k.st, dv_in.data() + L.v.off,
                            L.v.st, do_in.data() + L.o.off, L.o.st, dg_in.data() + L.o.off, L.o.st, dlse_in.data(),
                            cbias, bst, cd, scale, c.causal, cdrop, c.softcap);
    DevBuf<half> bo_in(to_half(o_in)), bg(to_half(hg)), bdq(static_cast<size_t>(L.qkv_size)),
        bdk(static_cast<size_t>(L.packed ? 1 : L.qkv_size)), bdv(static_cast<size_t>(L.packed ? 1 : L.qkv_size));
    DevBuf<float> blse_in(lse_in);
    half *pdq = bdq.p + L.q.off;
    half *pdk = (L.packed ? bdq.p : bdk.p) + L.k.off;
    half *pdv = (L.packed ? bdq.p : bdv.p) + L.v.off;
    if (c.softcap > 0)
      gpu::attention_backward<0, -1, 1>(pdq, gst(L.q.st), pdk, gst(L.k.st), pdv, gst(L.v.st), pq, gst(L.q.st), pk,
                                        gst(L.k.st), pv, gst(L.v.st), bo_in.p + L.o.off, gst(L.o.st), bg.p + L.o.off,
                                        gst(L.o.st), blse_in.p, gbias, gst(bst), gd, static_cast<float>(scale),
                                        c.causal, gdrop, static_cast<float>(c.softcap));
    else
      gpu::attention_backward(pdq, gst(L.q.st), pdk, gst(L.k.st), pdv, gst(L.v.st), pq, gst(L.q.st), pk, gst(L.k.st),
                              pv, gst(L.v.st), bo_in.p + L.o.off, gst(L.o.st), bg.p + L.o.off, gst(L.o.st),
                              blse_in.p, gbias, gst(bst), gd, static_cast<float>(scale), c.causal, gdrop);
    const std::vector<half> dq_half = bdq.get();
    const std::vector<half> dk_half = L.packed ? dq_half : bdk.get(), dv_half = L.packed ? dq_half : bdv.get();
    const AttnErr edq = attn_compare(from_half(dq_half), gq, L.q, B, H, Sq, D);
    const AttnErr edk = attn_compare(from_half(dk_half), gk_, L.k, B, H, Sk, D);
    const AttnErr edv = attn_compare(from_half(dv_half), gv_, L.v, B, H, Sk, Dv);
    std::vector<char> qmask(static_cast<size_t>(L.qkv_size), 0), kmask, vmask;
    attn_mark(qmask, L.q, B, H, Sq, D);
    if (L.packed) {
      attn_mark(qmask, L.k, B, H, Sk, D);
      attn_mark(qmask, L.v, B, H, Sk, Dv);
    } else {
      kmask.assign(static_cast<size_t>(L.qkv_size), 0);
      vmask.assign(static_cast<size_t>(L.qkv_size), 0);
      attn_mark(kmask, L.k, B, H, Sk, D);
      attn_mark(vmask, L.v, B, H, Sk, Dv);
    }
    const bool untouched = attn_untouched(o_half, omask) && attn_untouched(dq_half, qmask) &&
                           (L.packed || (attn_untouched(dk_half, kmask) && attn_untouched(dv_half, vmask)));

    std::printf("  %s: max err o %.2e (of %.2f) lse %.2e dq %.2e (of %.2f) dk %.2e (of %.2f) dv %.2e (of %.2f)\n", nm,
                eo.err, eo.ref, lse_err, edq.err, edq.ref, edk.err, edk.ref, edv.err, edv.ref);
    const std::string n(nm);
    check(eo.finite && eo.err <= tol * std::max(eo.ref, floor), n + " o");
    check(lse_finite && lse_err <= lse_tol * lse_max, n + " lse");
    check(edq.finite && edq.err <= tol * std::max(edq.ref, floor), n + " dq");
    check(edk.finite && edk.err <= tol * std::max(edk.ref, floor), n + " dk");
    check(edv.finite && edv.err <= tol * std::max(edv.ref, floor), n + " dv");
    check(untouched, n + " writes nothing outside its outputs");
    check(gpu::read_and_clear_error_flag() == 0, n + " no error flag");
  }
  // Head sizes over 128 are not supported: reported, nothing written.
  {
    std::printf("  (expected) an unsupported-size message for D=Dv=136:\n");
    std::fflush(stdout);
    const int64_t S = 4, D = 136;
    DevBuf<half> x(S * D), o(S * D);
    DevBuf<float> lse(S);
    const gpu::AttentionStrides st{S * D, S * D, D};
    gpu::attention_forward(o.p, st, lse.p, x.p, st, x.p, st, x.p, st, nullptr, st, gpu::AttentionDims{1, 1, S, S, D, D},
                           0.1f, true);
    check(gpu::read_and_clear_error_flag() == 1, "attention D=136 sets the error flag");
    std::vector<half> got = o.get();
    check(attn_untouched(got, std::vector<char>(got.size(), 0)), "attention D=136 writes nothing");
  }
}


// Timings (informational; no checks): bandwidth-bound kernels at GPT-2-small sizes.
template <class F> static void timeit(const char *name, double bytes, F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(a));
  const int reps = 20;
  for (int i = 0; i < reps; ++i)
    f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  const double us = 1000.0 * ms / reps;
  std::printf("  perf %-40s %9.1f us %8.1f GB/s\n", name, us, bytes / (us * 1e3));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

static void test_perf() {
  const int64_t R = 8192, H = 768;
  DevBuf<half> x(R * H), y(R * H), bias(H), big(R * 4 * H);
  DevBuf<float> f(R * H), rows(R), colsum(4 * H), m(R), r(R), sc(H);
  gpu::fill(x.p, R * H, 0.5);
  gpu::fill(bias.p, H, 0.25);
  gpu::fill(sc.p, H, 1.0);
  gpu::fill(big.p, R * 4 * H, 0.1);
  const gpu::Shape s2{2, {R, H}}, sb{1, {H}};
  timeit("binary add [8192,768]+[768] f16", R * H * 4.0, [&] { gpu::binary(gpu::BinaryOp::Add, y.p, s2, x.p, s2, bias.p, sb); });
  timeit("binary mul [8192,768]*[8192,768] f16", R * H * 6.0, [&] { gpu::binary(gpu::BinaryOp::Mul, y.p, s2, x.p, s2, x.p, s2); });
  timeit("unary exp f16", R * H * 4.0, [&] { gpu::unary(gpu::UnaryOp::Exp, y.p, x.p, R * H); });
  timeit("gelu f16 [8192,3072]", R * 4 * H * 4.0, [&] { gpu::gelu(big.p, big.p, R * 4 * H, true); });
  timeit("reduce axis0 [8192,768] f16->f32", R * H * 2.0, [&] { gpu::reduce(colsum.p, x.p, s2, 1u, false); });
  timeit("reduce axis1 [8192,768] f16->f32", R * H * 2.0, [&] { gpu::reduce(rows.p, x.p, s2, 2u, false); });
  timeit("reduce all [8192,768] f16->f32", R * H * 2.0, [&] { gpu::reduce(rows.p, x.p, s2, 3u, false); });
  timeit("reduce axis0 [8192,3072] f16->f32", R * H * 8.0, [&] { gpu::reduce(colsum.p, big.p, gpu::Shape{2, {R, 4 * H}}, 1u, false); });
  timeit("layer_norm [8192,768] f16", R * H * 4.0, [&] { gpu::layer_norm(y.p, m.p, r.p, x.p, s2, 1, sc.p, sb, sc.p, sb, 1e-5); });
  const gpu::Shape ss{2, {8 * 12 * 512, 512}};
  DevBuf<half> att(8 * 12 * 512 * 512), att2(8 * 12 * 512 * 512);
  gpu::fill(att.p, 8 * 12 * 512 * 512, 0.1);
  timeit("softmax [49152,512] f16", 8 * 12 * 512 * 512 * 4.0, [&] { gpu::softmax(att2.p, att.p, ss, 1, false); });
  const int64_t perm[] = {0, 2, 1, 3};
  timeit("transpose [8,512,12,64] 0213 f16", R * H * 4.0, [&] { gpu::transpose(y.p, x.p, gpu::Shape{4, {8, 512, 12, 64}}, perm); });
  const int64_t perm2[] = {1, 0};
  timeit("transpose [8192,768] 10 f16", R * H * 4.0, [&] { gpu::transpose(y.p, x.p, s2, perm2); });
  std::vector<int64_t> idx = randi(R, 0, 50256);
  DevBuf<int64_t> di(idx);
  DevBuf<float> wte_g(50257 * H);
  timeit("gather_grad [50257,768] <- 8192 rows", 50257.0 * H * 4 + R * H * 6.0,
         [&] { gpu::gather_grad(wte_g.p, gpu::Shape{2, {50257, H}}, x.p, di.p, R, 0); });
  {
    // tcc-pad-gemms' copies around GPT-2's output projection, per 1024-row
    // loss chunk: the logits' gradient padded from 50257 to 50264 columns,
    // and the padded logits sliced back.
    const int64_t C = 1024, V = 50257, Vp = 50264;
    DevBuf<half> narrow(C * V), wide(C * Vp);
    const int64_t z[] = {0, 0}, one[] = {1, 1};
    timeit("slice_grad pad [1024,50257]->[1024,50264] f16", C * (V + Vp) * 2.0,
           [&] { gpu::slice_grad(wide.p, gpu::Shape{2, {C, Vp}}, narrow.p, gpu::Shape{2, {C, V}}, z, one); });
    timeit("slice [1024,50264]->[1024,50257] f16", C * (V + V) * 2.0,
           [&] { gpu::slice(narrow.p, gpu::Shape{2, {C, V}}, wide.p, gpu::Shape{2, {C, Vp}}, z, one); });
  }
  DevBuf<half> wte(50257 * H);
  timeit("gather [50257,768] -> 8192 rows f16", R * H * 4.0, [&] { gpu::gather(y.p, wte.p, gpu::Shape{2, {50257, H}}, di.p, R, 0); });
  timeit("accumulate f16->f32 [8192,768]", R * H * 10.0, [&] { gpu::accumulate(f.p, x.p, R * H); });
  {
    const int nt = 8;
    const int64_t per = 6 << 20;
    std::vector<DevBuf<float> *> bs;
    std::vector<DevBuf<half> *> hs;
    std::vector<gpu::ApplyTensor> rows_;
    for (int t = 0; t < nt; ++t) {
      for (int k = 0; k < 4; ++k) {
        bs.push_back(new DevBuf<float>(per));
        CK(cudaMemset(bs.back()->p, 0, per * 4));
      }
      hs.push_back(new DevBuf<half>(per));
      rows_.push_back({bs[4 * t]->p, bs[4 * t + 1]->p, bs[4 * t + 2]->p, bs[4 * t + 3]->p, hs.back()->p, per, 0.01f});
    }
    gpu::MultiTensor mt;
    mt.upload(rows_.data(), nt);
    DevBuf<double> acc(1);
    const double n = double(nt) * per;
    timeit("sum_squares_all 50M", n * 4, [&] { gpu::sum_squares_all(mt.table(), mt.chunk_start(), nt, mt.nchunks(), acc.p); });
    timeit("adamw_multi 50M", n * 22, [&] { gpu::adamw_multi(mt.table(), mt.chunk_start(), nt, mt.nchunks(), 1e-3, 0.9, 0.999, 1e-8, 1, 1.0); });
    for (auto *b : bs)
      delete b;
    for (auto *h : hs)
      delete h;
  }
  DevBuf<half> w(H * 4 * H);
  gpu::fill(w.p, H * 4 * H, 0.01);
  timeit("matmul [8192,768]x[768,3072] (GB/s column = TFLOP/s*1e-3)", 2.0 * R * H * 4 * H / 1e3,
         [&] { gpu::matmul(200, big.p, x.p, s2, false, w.p, gpu::Shape{2, {H, 4 * H}}, false); });

  // Attention at GPT-2 small (B=8, H=12, S=1024, D=64, causal): fused
  // (WMMA flash attention) against unfused kernels (cuBLASLt batched
  // matmuls + softmax, without the causal mask; the backward's softmax
  // gradient as elementwise sub/mul and a row reduce). The GB/s column
  // reads as TFLOP/s: the causal half of the 4 (forward) / 10 (backward,
  // with the recomputed S) B*H*S*S*D flops for the fused kernels, all of
  // the 4 / 8 for the unfused ones.
  {
    const int64_t AB = 8, AH = 12, AS = 1024, AD = 64, BH = AB * AH;
    const int64_t nqkv = BH * AS * AD, nss = BH * AS * AS;
    DevBuf<half> q(nqkv), k(nqkv), v(nqkv), o(nqkv), dout(nqkv), dq(nqkv), dk(nqkv), dv(nqkv);
    DevBuf<float> lse(BH * AS), delta(BH * AS);
    gpu::fill(q.p, nqkv, 0.3);
    gpu::fill(k.p, nqkv, -0.2);
    gpu::fill(v.p, nqkv, 0.5);
    gpu::fill(dout.p, nqkv, 0.1);
    const gpu::AttentionStrides st{AH * AS * AD, AS * AD, AD};
    const gpu::AttentionDims ad{AB, AH, AS, AS, AD, AD};
    const float sc = 0.125f;
    const double f1 = double(BH) * AS * AS * AD / 1e3; // flops of one S*S*D product per head, / 1e3
    timeit("attention fwd fused causal [8,12,1024,64]", 2.0 * f1, [&] {
      gpu::attention_forward(o.p, st, lse.p, q.p, st, k.p, st, v.p, st, nullptr, st, ad, sc, true);
    });
    timeit("attention bwd fused causal [8,12,1024,64]", 5.0 * f1, [&] {
      gpu::attention_backward(dq.p, st, dk.p, st, dv.p, st, q.p, st, k.p, st, v.p, st, o.p, st, dout.p, st, lse.p,
                              nullptr, st, ad, sc, true);
    });
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    DevBuf<uint8_t> ws(32 << 20);
    gpu::set_workspace(ws.p, 32 << 20);
    DevBuf<half> s(nss), p(nss), dp(nss);
    const gpu::Shape qs3{3, {BH, AS, AD}}, ss3{3, {BH, AS, AS}}, rows{3, {BH, AS, 1}};
    timeit("attention fwd unfused [8,12,1024,64]", 4.0 * f1, [&] {
      gpu::matmul(300, s.p, q.p, qs3, false, k.p, qs3, true);
      gpu::softmax(p.p, s.p, ss3, 2, false);
      gpu::matmul(301, o.p, p.p, ss3, false, v.p, qs3, false);
    });
    timeit("attention bwd unfused [8,12,1024,64]", 8.0 * f1, [&] {
      gpu::matmul(302, dv.p, p.p, ss3, true, dout.p, qs3, false);          // dV = P^T dO
      gpu::matmul(303, dp.p, dout.p, qs3, false, v.p, qs3, true);          // dP = dO V^T
      gpu::binary(gpu::BinaryOp::Mul, dq.p, qs3, dout.p, qs3, o.p, qs3);   // dO * O
      gpu::reduce(delta.p, dq.p, qs3, 4u, false);                          // delta = rowsum
      gpu::binary(gpu::BinaryOp::Sub, dp.p, ss3, dp.p, ss3, delta.p, rows); // dP - delta
      gpu::binary(gpu::BinaryOp::Mul, dp.p, ss3, dp.p, ss3, p.p, ss3);     // dS (scale folded)
      gpu::matmul(304, dq.p, dp.p, ss3, false, k.p, qs3, false);           // dQ = dS K
      gpu::matmul(305, dk.p, dp.p, ss3, true, q.p, qs3, false);            // dK = dS^T Q
    });
    gpu::set_workspace(nullptr, 0);
  }
}

int main(int argc, char **argv) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 77;
  }
  const std::string only = argc > 1 ? argv[1] : "";
  auto run = [&](const char *name, void (*f)()) {
    if (!only.empty() && only != name)
      return;
    const int before = g_fail;
    f();
    CK(cudaDeviceSynchronize());
    std::printf("%-12s %s\n", name, g_fail == before ? "ok" : "FAILED");
    std::fflush(stdout);
  };
  run("binary", test_binary);
  run("unary_cast", test_unary_cast);
  run("where", test_where_bcast);
  run("softmax", test_softmax);
  run("layer_norm", test_layer_norm);
  run("reduce", test_reduce);
  run("dot", test_dot);
  run("gather", test_gather);
  run("movement", test_movement);
  run("sce", test_sce);
  run("gelu", test_gelu_acc);
  run("optim", test_optim);
  run("matmul", test_matmul);
  run("graph", test_graph_capture);
  run("attention", test_attention);
#ifndef TCC_CUDA_EMU // the CPU emulation checks the kernels' results; timing them means nothing
  run("perf", test_perf);
#else
  if (only == "perf")
    test_perf();
#endif
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
