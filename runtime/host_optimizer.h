//===- host_optimizer.h - AdamW and SGD on the host, as the device does -*- C++ -*-===//
//
// The optimizer update for parameters whose fp32 master weights and
// optimizer state a plan keeps in host memory (tcc --offload, #tcc.tiers;
// docs/memory.md). The arithmetic is runtime/cuda/optimizer.cuh's
// adamw_kernel and sgd_kernel: fp32 throughout, the same operations in the
// same order, the constants formed in double and rounded to float as
// adamw_multi and sgd_multi form them, the fp16 working copy rounded to
// nearest even. So a parameter updated here ends where the device would put
// it: bit for bit where neither side contracts a*b + c into a fused
// multiply-add (tcc's CUDA emulation; x86-64 without -mfma), and within fp32
// rounding of it on a GPU, whose compiler does.
//
// The work is split into chunks of kHostChunk elements over `threads` threads;
// the inner loops have no branches on the data (float_to_half_rn selects,
// it does not branch), so the compiler vectorises them where math errno is
// off (-fno-math-errno: std::sqrt's errno path is a branch; a CUDA step's
// host code is built so), with an AVX2 clone on x86-64
// (bench/host_optimizer.py).
//
// Header-only, without CUDA: the CUDA step's host code and the unit test
// (test/runtime/cuda_kernels_test.cu, test_optim) include it.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_HOST_OPTIMIZER_H
#define TCC_RUNTIME_HOST_OPTIMIZER_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace tcc::host {

/// One parameter of a host update, as the device's ApplyTensor: p fp32
/// master weights; g the fp32 accumulated gradient (zeroed by the update);
/// s0 / s1 AdamW's exp_avg / exp_avg_sq (SGD: s0 the momentum buffer);
/// p16 the fp16 working copy (IEEE binary16 bits) refreshed from p, or
/// nullptr.
struct OptTensor {
  float *p, *g, *s0, *s1;
  uint16_t *p16;
  int64_t n;
  float weight_decay;
};

/// Elements one thread updates at a time.
inline constexpr int64_t kHostChunk = 16384;

/// `f` as IEEE binary16 bits, rounded to nearest even (as __float2half_rn):
/// overflow to infinity from 65520 up, subnormals rounded, NaN kept quiet.
/// Every case is computed and one selected, without branches, so that the
/// loops that call it vectorise.
inline uint16_t float_to_half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits
  // to nearest, ties to the even mantissa.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14: a half subnormal (or zero). Adding 0.5 puts the value's
  // bits at the float's ulp 2^-24, the half subnormals' spacing, so the
  // float addition rounds to nearest even; the low bits are the result.
  float v;
  std::memcpy(&v, &a, 4);
  v += 0.5f;
  uint32_t r;
  std::memcpy(&r, &v, 4);
  const uint32_t subnormal = r - 0x3f000000u;
  // Infinity, or NaN (quiet, payload dropped).
  const uint32_t special = 0x7c00u | (static_cast<uint32_t>(a > 0x7f800000u) << 9);
  auto pick = [](uint32_t cond, uint32_t yes, uint32_t no) { // cond 0 or 1, as a mask
    const uint32_t m = 0u - cond;
    return (yes & m) | (no & ~m);
  };
  uint32_t h = pick(a < 0x38800000u, subnormal, normal);
  h = pick(a >= 0x477ff000u, 0x7c00u, h); // 65520 and up: past the largest half, 65504
  h = pick(a >= 0x7f800000u, special, h);
  return static_cast<uint16_t>(sign | (h & 0xffffu));
}

/// IEEE binary16 bits as a float (exact, as __half2float).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13); // infinity, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while (!(man & 0x400u));
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// AdamW's constants, formed as the device's adamw_multi forms them.
struct AdamConstants {
  double lr;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size; // lr / (1 - beta1^step)
  float bc2_sqrt;  // sqrt(1 - beta2^step)
  float grad_mult;
};

inline AdamConstants adam_constants(double lr, double beta1, double beta2, double eps, int64_t step,
                                    double grad_mult) {
  AdamConstants a;
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
  return a;
}

/// SGD's constants, formed as the device's sgd_multi forms them.
struct SgdConstants {
  float neg_lr, momentum, grad_mult;
  bool nesterov, first_step;
};

inline SgdConstants sgd_constants(double lr, double momentum, bool nesterov, int64_t step,
                                  double grad_mult) {
  return {static_cast<float>(-lr), static_cast<float>(momentum), static_cast<float>(grad_mult),
          nesterov, step == 1};
}

/// x86-64 hosts: each chunk loop is compiled for AVX2 besides the baseline,
/// and the loader picks AVX2 where the CPU has it (GCC's target_clones).
/// Not AVX-512 and not FMA: both let GCC contract a*b + c into one rounding
/// where the compile mode allows it (GNU C++ does), and every clone must
/// compute the device's bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDA_ARCH__)
#define TCC_HOST_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TCC_HOST_CLONES
#endif

/// Elements [begin, end) of `t`: adamw_kernel's loop body.
/// Elements [begin, end) of `t`: adamw_kernel's loop body, then the fp16
/// copy (a second pass: one loop of both does not vectorise as well, 49 ms
/// against 40 for 16M elements on one core, bench/host_optimizer.py).
TCC_HOST_CLONES inline void adamw_range(const OptTensor &t, int64_t begin, int64_t end, const AdamConstants &a) {
  const float decay = static_cast<float>(1.0 - a.lr * static_cast<double>(t.weight_decay));
  float *__restrict p = t.p, *__restrict g = t.g, *__restrict m = t.s0, *__restrict v = t.s1;
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * a.grad_mult;
    float pi = p[i] * decay;
    const float mi = m[i] * a.beta1 + gi * a.one_minus_beta1;
    const float vi = v[i] * a.beta2 + gi * gi * a.one_minus_beta2;
    const float denom = std::sqrt(vi) / a.bc2_sqrt + a.eps;
    pi = pi - a.step_size * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    g[i] = 0.0f;
  }
  if (uint16_t *__restrict h = t.p16)
    for (int64_t i = begin; i < end; ++i)
      h[i] = float_to_half_rn(p[i]);
}

/// Elements [begin, end) of `t`: sgd_kernel's loop body.
TCC_HOST_CLONES inline void sgd_range(const OptTensor &t, int64_t begin, int64_t end, const SgdConstants &a) {
  const float wd = t.weight_decay;
  for (int64_t i = begin; i < end; ++i) {
    float p = t.p[i];
    float d = t.g[i] * a.grad_mult;
    if (wd != 0.0f)
      d = d + p * wd;
    if (a.momentum != 0.0f) {
      const float b = a.first_step ? d : t.s0[i] * a.momentum + d;
      t.s0[i] = b;
      d = a.nesterov ? d + b * a.momentum : b;
    }
    p = p + d * a.neg_lr;
    t.p[i] = p;
    t.g[i] = 0.0f;
  }
  if (t.p16)
    for (int64_t i = begin; i < end; ++i)
      t.p16[i] = float_to_half_rn(t.p[i]);
}

/// Runs `body(row, begin, end)` over every chunk of every tensor, on
/// `threads` threads (at least 1; the calling thread is one of them), each
/// taking every threads-th chunk. The chunks are disjoint, so the result
/// does not depend on the thread count.
template <class Body>
void for_each_chunk(const OptTensor *rows, int n, int threads, Body body) {
  std::vector<std::pair<int, int64_t>> chunks; // (tensor, first element)
  for (int t = 0; t < n; ++t)
    for (int64_t b = 0; b < rows[t].n; b += kHostChunk)
      chunks.push_back({t, b});
  const int workers = std::max(1, std::min<int>(threads, static_cast<int>(chunks.size())));
  auto run = [&](int w) {
    for (size_t c = static_cast<size_t>(w); c < chunks.size(); c += static_cast<size_t>(workers)) {
      const OptTensor &r = rows[chunks[c].first];
      const int64_t b = chunks[c].second;
      body(r, b, std::min(r.n, b + kHostChunk));
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w)
    pool.emplace_back(run, w);
  run(0);
  for (std::thread &t : pool)
    t.join();
}

/// torch.optim.AdamW on every tensor of `rows`, as the device's adamw_multi.
inline void adamw(const OptTensor *rows, int n, const AdamConstants &a, int threads) {
  for_each_chunk(rows, n, threads,
                 [&](const OptTensor &t, int64_t b, int64_t e) { adamw_range(t, b, e, a); });
}

/// torch.optim.SGD on every tensor of `rows`, as the device's sgd_multi.
inline void sgd(const OptTensor *rows, int n, const SgdConstants &a, int threads) {
  for_each_chunk(rows, n, threads,
                 [&](const OptTensor &t, int64_t b, int64_t e) { sgd_range(t, b, e, a); });
}

/// The threads a host update uses by default: the machine's.
inline int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

} // namespace tcc::host

#endif // TCC_RUNTIME_HOST_OPTIMIZER_H
