//===- attention.h - tcc.attention on the CPU -------------------*- C++ -*-===//
//
// The fused attention's kernels (tcc.attention, tcc.attention_grad): the
// double reference, which the f64 steps and the tests use, and the fp32
// path on the CBLAS library, per head and block of queries (docs/cpu.md).
// kernels.h includes this header at its end; it reads kernels.h's shapes,
// helpers, thread pool and BLAS declarations.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_CPU_ATTENTION_H
#define TCC_RUNTIME_CPU_ATTENTION_H

#include "kernels.h"

namespace tcc::cpu {

/// Sizes of a fused attention (tcc.attention): B x H heads, Sq queries and Sk
/// keys, head sizes D (queries, keys) and Dv (values, outputs).
struct AttentionDims {
  int64_t B, H, Sq, Sk, D, Dv;
};
/// Element strides of an attention operand [B, H, S, D'] along b, h and s; its
/// last dimension is contiguous.
struct AttentionStrides {
  int64_t b, h, s;
};
/// Dropout on the probabilities (tcc.attention's `dropout`): probability
/// (q, k) of head (b, h) is kept as tcc.random_keep keeps element
/// ((b H + h) Sq + q) Sk + k of the [B, H, Sq, Sk] probabilities
/// (runtime/tcc_random.h), and a kept one is multiplied by `scale`
/// (1 / (1 - ratio)). No random state: no dropout.
struct AttentionDropout {
  const int64_t *rng = nullptr; // [seed, counter]
  uint64_t stream = 0;
  uint32_t threshold = 0; // ceil(ratio * 2^24)
  double scale = 1.0;
};

namespace detail {
/// The dropout factor of probability (i, j) of head bh = b H + h: 0, or the
/// scale; 1 without dropout.
inline double attn_drop(const AttentionDropout &dr, uint64_t key, int64_t bh, int64_t i, int64_t j,
                        const AttentionDims &d) {
  if (!dr.rng)
    return 1.0;
  const uint64_t idx = random::probability_index(bh, d.Sq, d.Sk, i, j);
  return random::keep(key, idx, dr.threshold) ? dr.scale : 0.0;
}
inline uint64_t attn_drop_key(const AttentionDropout &dr) {
  return dr.rng ? random::key((uint64_t)dr.rng[0], (uint64_t)dr.rng[1], dr.stream) : 0;
}
inline int64_t attn_off(const AttentionStrides &st, int64_t b, int64_t h, int64_t s) {
  return b * st.b + h * st.h + s * st.s;
}
/// A score with tcc.attention's soft cap c > 0: c tanh(x / c) of the scaled
/// product x (x itself without one); `slope` gets the derivative by x,
/// 1 - tanh^2 (1 without a cap).
template <class F> inline F attn_cap(F x, double softcap, F &slope) {
  if (softcap <= 0.0) {
    slope = F(1);
    return x;
  }
  const F c = static_cast<F>(softcap), t = std::tanh(x / c);
  slope = F(1) - t * t;
  return c * t;
}
/// Keys that query i sees: all, or (causal, top-left aligned as a
/// tril(ones(Sq, Sk)) mask is) keys 0..i.
inline int64_t attn_keys(int64_t i, int64_t Sk, bool causal) { return causal ? std::min(Sk, i + 1) : Sk; }
} // namespace detail

#ifdef TCC_CPU_BLAS
namespace detail {
/// Rows of queries an fp32 attention handles at once: its scores are a
/// rows x keys scratch matrix (at most about 4 MB); causal blocks are short,
/// so that a block's GEMMs stop at the last key its last query sees.
inline int64_t attn_block_rows(const AttentionDims &d, bool causal) {
  const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(d.Sk, 1));
  return std::max<int64_t>(1, std::min({d.Sq, causal ? int64_t(64) : int64_t(256), cap}));
}

/// The scores of query rows [i0, i0 + rows) of head (b, h) against keys
/// [0, nk): s = scale q k^T (soft-capped) + bias, by sgemm; `s` is rows x nk,
/// and with a soft cap `slope` (rows x nk) gets the cap's derivatives.
inline void attn_scores_f32(float *s, int64_t i0, int64_t rows, int64_t nk, int64_t b, int64_t h,
                            const float *q, AttentionStrides qs, const float *k, AttentionStrides ks,
                            const float *bias, AttentionStrides bs, const AttentionDims &d, double scale,
                            double softcap, float *slope) {
  cblas_sgemm(101, 111, 112, static_cast<int>(rows), static_cast<int>(nk), static_cast<int>(d.D),
              static_cast<float>(scale), q + attn_off(qs, b, h, i0), static_cast<int>(qs.s),
              k + attn_off(ks, b, h, 0), static_cast<int>(ks.s), 0.0f, s, static_cast<int>(nk));
  if (softcap > 0.0)
    for (int64_t e = 0; e < rows * nk; ++e) {
      float g;
      s[e] = attn_cap(s[e], softcap, g);
      if (slope)
        slope[e] = g;
    }
  if (bias)
    for (int64_t r = 0; r < rows; ++r) {
      const float *bi = bias + attn_off(bs, b, h, i0 + r);
      float *sr = s + r * nk;
      for (int64_t j = 0; j < nk; ++j)
        sr[j] += bi[j];
    }
}

/// Whether the fp32 attention can run on sgemm: strides and sizes that fit
/// CBLAS's int leading dimensions.
inline bool attn_blas_ok(const AttentionDims &d, std::initializer_list<AttentionStrides> ops) {
  constexpr int64_t kIntMax = 2147483647;
  if (d.Sq <= 0 || d.Sk <= 0 || d.D <= 0 || d.Dv <= 0 || d.Sq > kIntMax || d.Sk > kIntMax || d.D > kIntMax ||
      d.Dv > kIntMax)
    return false;
  for (const AttentionStrides &st : ops)
    if (st.s < std::max(d.D, d.Dv) || st.s > kIntMax)
      return false;
  return true;
}

/// attention_forward in fp32 on the CBLAS library: per head and block of
/// queries, the scores by one sgemm, the softmax in float (sums in double),
/// the output by a second sgemm.
inline void attention_forward_f32(float *o, AttentionStrides os, float *lse, const float *q,
                                  AttentionStrides qs, const float *k, AttentionStrides ks, const float *v,
                                  AttentionStrides vs, const float *bias, AttentionStrides bs,
                                  const AttentionDims &d, double scale, bool causal,
                                  const AttentionDropout &drop, double softcap) {
  const uint64_t dkey = attn_drop_key(drop);
  const int64_t R = attn_block_rows(d, causal);
  parallel_for(d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> s(static_cast<size_t>(R * d.Sk));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      for (int64_t i0 = 0; i0 < d.Sq; i0 += R) {
        const int64_t rows = std::min(R, d.Sq - i0);
        const int64_t nk = attn_keys(i0 + rows - 1, d.Sk, causal);
        attn_scores_f32(s.data(), i0, rows, nk, b, h, q, qs, k, ks, bias, bs, d, scale, softcap, nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r, n = attn_keys(i, d.Sk, causal);
          float *sr = s.data() + r * nk;
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < n; ++j)
            m = std::max(m, sr[j]);
          double sum = 0.0;
          for (int64_t j = 0; j < n; ++j) {
            sr[j] = std::exp(sr[j] - m);
            sum += sr[j];
          }
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j < n; ++j)
            sr[j] *= inv;
          if (drop.rng)
            for (int64_t j = 0; j < n; ++j)
              sr[j] *= static_cast<float>(attn_drop(drop, dkey, b * d.H + h, i, j, d));
          for (int64_t j = n; j < nk; ++j)
            sr[j] = 0.0f;
          lse[(b * d.H + h) * d.Sq + i] = static_cast<float>(static_cast<double>(m) + std::log(sum));
        }
        cblas_sgemm(101, 111, 111, static_cast<int>(rows), static_cast<int>(d.Dv), static_cast<int>(nk), 1.0f,
                    s.data(), static_cast<int>(nk), v + attn_off(vs, b, h, 0), static_cast<int>(vs.s), 0.0f,
                    o + attn_off(os, b, h, i0), static_cast<int>(os.s));
      }
    }
  });
}

/// attention_backward in fp32 on the CBLAS library: per head and block of
/// queries, P recomputed from the scores and lse, dP = dout v^T, then
/// dv += (P M)^T dout, dq = dS k and dk += dS^T q, each one sgemm.
inline void attention_backward_f32(float *dq, AttentionStrides dqs, float *dk, AttentionStrides dks,
                                   float *dv, AttentionStrides dvs, const float *q, AttentionStrides qs,
                                   const float *k, AttentionStrides ks, const float *v, AttentionStrides vs,
                                   const float *o, AttentionStrides os, const float *dout,
                                   AttentionStrides dos, const float *lse, const float *bias,
                                   AttentionStrides bs, const AttentionDims &d, double scale, bool causal,
                                   const AttentionDropout &drop, double softcap) {
  const uint64_t dkey = attn_drop_key(drop);
  const int64_t R = attn_block_rows(d, causal);
  parallel_for(d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> p(static_cast<size_t>(R * d.Sk)), dp(static_cast<size_t>(R * d.Sk)),
        pm(drop.rng ? static_cast<size_t>(R * d.Sk) : 0),
        slope(softcap > 0.0 ? static_cast<size_t>(R * d.Sk) : 0);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      {
        for (int64_t j = 0; j < d.Sk; ++j) {
          std::fill_n(dk + attn_off(dks, b, h, j), d.D, 0.0f);
          std::fill_n(dv + attn_off(dvs, b, h, j), d.Dv, 0.0f);
        }
        for (int64_t i0 = 0; i0 < d.Sq; i0 += R) {
          const int64_t rows = std::min(R, d.Sq - i0);
          const int64_t nk = attn_keys(i0 + rows - 1, d.Sk, causal);
          attn_scores_f32(p.data(), i0, rows, nk, b, h, q, qs, k, ks, bias, bs, d, scale, softcap,
                          softcap > 0.0 ? slope.data() : nullptr);
          cblas_sgemm(101, 111, 112, static_cast<int>(rows), static_cast<int>(nk), static_cast<int>(d.Dv),
                      1.0f, dout + attn_off(dos, b, h, i0), static_cast<int>(dos.s),
                      v + attn_off(vs, b, h, 0), static_cast<int>(vs.s), 0.0f, dp.data(),
                      static_cast<int>(nk));
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r, n = attn_keys(i, d.Sk, causal);
            const float l = lse[(b * d.H + h) * d.Sq + i];
            const float *gi = dout + attn_off(dos, b, h, i), *oi = o + attn_off(os, b, h, i);
            double delta = 0.0;
            for (int64_t c = 0; c < d.Dv; ++c)
              delta += static_cast<double>(gi[c]) * static_cast<double>(oi[c]);
            const float dl = static_cast<float>(delta), sc = static_cast<float>(scale);
            float *pr = p.data() + r * nk, *dr = dp.data() + r * nk;
            float *mr = drop.rng ? pm.data() + r * nk : nullptr;
            const float *cr = softcap > 0.0 ? slope.data() + r * nk : nullptr;
            for (int64_t j = 0; j < n; ++j) {
              const float pj = std::exp(pr[j] - l);
              float g = dr[j];
              if (mr) {
                const float mf = static_cast<float>(attn_drop(drop, dkey, b * d.H + h, i, j, d));
                mr[j] = pj * mf;
                g *= mf;
              }
              pr[j] = pj;
              dr[j] = pj * (g - dl) * sc * (cr ? cr[j] : 1.0f); // dS
            }
            for (int64_t j = n; j < nk; ++j) {
              pr[j] = dr[j] = 0.0f;
              if (mr)
                mr[j] = 0.0f;
            }
          }
          const float *pmat = drop.rng ? pm.data() : p.data();
          cblas_sgemm(101, 112, 111, static_cast<int>(nk), static_cast<int>(d.Dv), static_cast<int>(rows),
                      1.0f, pmat, static_cast<int>(nk), dout + attn_off(dos, b, h, i0),
                      static_cast<int>(dos.s), 1.0f, dv + attn_off(dvs, b, h, 0), static_cast<int>(dvs.s));
          cblas_sgemm(101, 111, 111, static_cast<int>(rows), static_cast<int>(d.D), static_cast<int>(nk),
                      1.0f, dp.data(), static_cast<int>(nk), k + attn_off(ks, b, h, 0),
                      static_cast<int>(ks.s), 0.0f, dq + attn_off(dqs, b, h, i0), static_cast<int>(dqs.s));
          cblas_sgemm(101, 112, 111, static_cast<int>(nk), static_cast<int>(d.D), static_cast<int>(rows),
                      1.0f, dp.data(), static_cast<int>(nk), q + attn_off(qs, b, h, i0),
                      static_cast<int>(qs.s), 1.0f, dk + attn_off(dks, b, h, 0), static_cast<int>(dks.s));
        }
      }
    }
  });
}
} // namespace detail
#endif

/// o = softmax(scale * q k^T [+ bias] [+ causal mask]) v, and lse = the
/// rows' log-sum-exp of the scores ([B, H, Sq], contiguous), which the
/// backward pass uses to recompute the probabilities. `bias` (may be null)
/// is an additive [B, H, Sq, Sk] term read through `bs` (its strides along
/// b, h and the query; 0 where it is broadcast; keys contiguous), such as a
/// padding mask. With dropout, o = (P * keep / (1 - ratio)) v, and lse is
/// still that of the scores. With `softcap` c > 0 the scaled product x is
/// c tanh(x / c) before the bias (Gemma-2). In double.
template <class T>
void attention_forward(T *o, AttentionStrides os, T *lse, const T *q, AttentionStrides qs, const T *k,
                       AttentionStrides ks, const T *v, AttentionStrides vs, const T *bias, AttentionStrides bs,
                       const AttentionDims &d, double scale, bool causal, const AttentionDropout &drop = {},
                       double softcap = 0.0) {
#ifdef TCC_CPU_BLAS
  if constexpr (std::is_same_v<T, float>)
    if (detail::attn_blas_ok(d, {os, qs, ks, vs})) {
      detail::blas_one_thread();
      detail::attention_forward_f32(o, os, lse, q, qs, k, ks, v, vs, bias, bs, d, scale, causal, drop,
                                    softcap);
      return;
    }
#endif
  const uint64_t dkey = detail::attn_drop_key(drop);
  std::vector<double> s(static_cast<size_t>(d.Sk)), acc(static_cast<size_t>(d.Dv));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.Sq; ++i) {
        const T *qi = q + detail::attn_off(qs, b, h, i);
        const T *bi = bias ? bias + detail::attn_off(bs, b, h, i) : nullptr;
        const int64_t n = detail::attn_keys(i, d.Sk, causal);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          const T *kj = k + detail::attn_off(ks, b, h, j);
          double dot = 0.0;
          for (int64_t c = 0; c < d.D; ++c)
            dot += static_cast<double>(qi[c]) * static_cast<double>(kj[c]);
          double slope;
          s[j] = detail::attn_cap(scale * dot, softcap, slope) + (bi ? static_cast<double>(bi[j]) : 0.0);
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j)
          sum += std::exp(s[j] - m);
        const double l = m + std::log(sum);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - l) * detail::attn_drop(drop, dkey, b * d.H + h, i, j, d);
          const T *vj = v + detail::attn_off(vs, b, h, j);
          for (int64_t c = 0; c < d.Dv; ++c)
            acc[c] += p * static_cast<double>(vj[c]);
        }
        T *oi = o + detail::attn_off(os, b, h, i);
        for (int64_t c = 0; c < d.Dv; ++c)
          oi[c] = static_cast<T>(acc[c]);
        lse[(b * d.H + h) * d.Sq + i] = static_cast<T>(l);
      }
}

/// The gradients of attention_forward (none for the bias): with
/// P = exp(scale q k^T + bias - lse),
/// dP = dout v^T and delta_i = dout_i . o_i,
///   dq = scale (P * (dP - delta)) k,  dk = scale (P * (dP - delta))^T q,
///   dv = P^T dout.  With dropout (factors M: keep / (1 - ratio) or 0),
/// dv = (P * M)^T dout and dP = (dout v^T) * M; delta is unchanged (o is the
/// dropped output). With a soft cap, dS is also multiplied by the cap's
/// slope 1 - tanh^2(x / c). In double.
template <class T>
void attention_backward(T *dq, AttentionStrides dqs, T *dk, AttentionStrides dks, T *dv, AttentionStrides dvs,
                        const T *q, AttentionStrides qs, const T *k, AttentionStrides ks, const T *v,
                        AttentionStrides vs, const T *o, AttentionStrides os, const T *dout, AttentionStrides dos,
                        const T *lse, const T *bias, AttentionStrides bs, const AttentionDims &d, double scale,
                        bool causal, const AttentionDropout &drop = {}, double softcap = 0.0) {
#ifdef TCC_CPU_BLAS
  if constexpr (std::is_same_v<T, float>)
    if (detail::attn_blas_ok(d, {dqs, dks, dvs, qs, ks, vs, os, dos})) {
      detail::blas_one_thread();
      detail::attention_backward_f32(dq, dqs, dk, dks, dv, dvs, q, qs, k, ks, v, vs, o, os, dout, dos, lse,
                                     bias, bs, d, scale, causal, drop, softcap);
      return;
    }
#endif
  const uint64_t dkey = detail::attn_drop_key(drop);
  const size_t nk = static_cast<size_t>(d.Sk);
  std::vector<double> gq(static_cast<size_t>(d.D)), gk(nk * static_cast<size_t>(d.D)),
      gv(nk * static_cast<size_t>(d.Dv));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      std::fill(gk.begin(), gk.end(), 0.0);
      std::fill(gv.begin(), gv.end(), 0.0);
      for (int64_t i = 0; i < d.Sq; ++i) {
        const T *qi = q + detail::attn_off(qs, b, h, i);
        const T *oi = o + detail::attn_off(os, b, h, i);
        const T *gi = dout + detail::attn_off(dos, b, h, i);
        const T *bi = bias ? bias + detail::attn_off(bs, b, h, i) : nullptr;
        const double l = static_cast<double>(lse[(b * d.H + h) * d.Sq + i]);
        double delta = 0.0;
        for (int64_t c = 0; c < d.Dv; ++c)
          delta += static_cast<double>(gi[c]) * static_cast<double>(oi[c]);
        std::fill(gq.begin(), gq.end(), 0.0);
        const int64_t n = detail::attn_keys(i, d.Sk, causal);
        for (int64_t j = 0; j < n; ++j) {
          const T *kj = k + detail::attn_off(ks, b, h, j);
          const T *vj = v + detail::attn_off(vs, b, h, j);
          double dot = 0.0, dp = 0.0;
          for (int64_t c = 0; c < d.D; ++c)
            dot += static_cast<double>(qi[c]) * static_cast<double>(kj[c]);
          for (int64_t c = 0; c < d.Dv; ++c)
            dp += static_cast<double>(gi[c]) * static_cast<double>(vj[c]);
          double slope;
          const double capped = detail::attn_cap(scale * dot, softcap, slope);
          const double p = std::exp(capped + (bi ? static_cast<double>(bi[j]) : 0.0) - l);
          const double mf = detail::attn_drop(drop, dkey, b * d.H + h, i, j, d);
          const double ds = p * (dp * mf - delta) * scale * slope;
          double *gkj = gk.data() + j * d.D, *gvj = gv.data() + j * d.Dv;
          for (int64_t c = 0; c < d.D; ++c) {
            gq[c] += ds * static_cast<double>(kj[c]);
            gkj[c] += ds * static_cast<double>(qi[c]);
          }
          for (int64_t c = 0; c < d.Dv; ++c)
            gvj[c] += p * mf * static_cast<double>(gi[c]);
        }
        T *dqi = dq + detail::attn_off(dqs, b, h, i);
        for (int64_t c = 0; c < d.D; ++c)
          dqi[c] = static_cast<T>(gq[c]);
      }
      for (int64_t j = 0; j < d.Sk; ++j) {
        T *dkj = dk + detail::attn_off(dks, b, h, j);
        T *dvj = dv + detail::attn_off(dvs, b, h, j);
        for (int64_t c = 0; c < d.D; ++c)
          dkj[c] = static_cast<T>(gk[j * d.D + c]);
        for (int64_t c = 0; c < d.Dv; ++c)
          dvj[c] = static_cast<T>(gv[j * d.Dv + c]);
      }
    }
}

} // namespace tcc::cpu

#endif // TCC_RUNTIME_CPU_ATTENTION_H
