//===- attention.cuh - fused (flash) attention for tcc's CUDA target -*- CUDA -*-===//
//
// Header-only CUDA C++17 kernels for tcc.attention, forward and backward, over
// fp16 operands with fp32 softmax statistics and tensor-core (WMMA 16x16x16,
// __half inputs, float accumulation) matrix products. The semantics are those
// of runtime/cpu/kernels.h (attention_forward / attention_backward): operands
// [B, H, S, D'] with element strides b, h, s and a contiguous last dimension,
// causal = key j visible to query i iff j <= i (top-left aligned), lse
// ([B, H, Sq], contiguous, float here) the log-sum-exp of the scores.
// Optional additive bias (e.g. a padding mask): s_ij = scale q_i.k_j +
// bias[b bs.b + h bs.h + i bs.s + j] (fp16, keys contiguous, strides 0 where
// broadcast), before the causal mask; no gradient for it. The kernels take it
// as a template flag (no cost without one): each lane reads the bias of the
// score pairs it owns straight from global memory (__ldg; half2 loads when
// the base and strides are even), adds log2(e) * bias in fp32 to the scores
// (kept in log2 units, scale * log2(e) * q.k) before the forward's online
// max / sum and before exp2(s - log2(e) lse) in both backward kernels. -inf
// entries give p = 0; padding rows / keys past Sq, Sk read a clamped (valid)
// address or nothing, and are masked as before.
// Optional soft cap c > 0 (Gemma-2): the scaled product x is c tanh(x / c)
// before the bias and the masks, and dS takes the cap's slope 1 - tanh^2;
// the kernels take it as a template flag too (CAP), so that a step without
// one pays nothing.
// Optional dropout on the probabilities (AttentionDropout): the forward's O
// takes P * M (M = keep / (1 - ratio) or 0, drawn per (query, key) from the
// step's random state as tcc.random_keep draws it), its running sum l all of
// P; the backward kernels use P * M for dV and dP * M for dS, recomputing M.
// Included at the end of kernels.cuh (stream(), TCC_LAUNCH, load8, the error
// flag); launchers go on stream() and do not synchronise.
//
// Head sizes D, Dv in 1..128: both are padded with zeros to P = 16 * P16, the
// multiple of 16 >= max(D, Dv), in shared memory, and the kernels are
// templates on P16 (1..8). Any Sq, Sk >= 1: partial tiles are zero-filled and
// masked. Operands are read and written with 16-byte accesses when the
// pointer is 16-byte aligned and the strides and the row length are multiples
// of 8 elements, else element by element. Larger head sizes are not
// supported: the launcher prints an error and sets the device error flag
// (read_and_clear_error_flag()), writing nothing.
//
// Forward (FlashAttention-2): a block of 4 warps takes 64 queries (16 per
// warp) of one (b, h) and loops over tiles of BN keys (64, or 32 when the
// shared memory of P > 112 needs it), skipping the tiles a causal mask hides.
// Per tile, each warp computes S = Q K^T with WMMA (its Q fragments stay in
// registers) into its fp32 staging area in shared memory; lane pairs own a
// row (16 rows, 32 lanes) and update its running max m and sum l (in log2
// units: exp2 of scale * log2(e) * s), write P in fp16 over S; the warp then
// computes P V with WMMA, in column chunks of BN staged through the same
// area, and the lanes add it to their fp32 O (registers, rescaled by
// exp2(m_old - m_new) per tile). Finally O / l is written as fp16 (staged
// through shared memory for coalesced stores) and lse = (m + log2 l) ln 2.
//
// Backward (FlashAttention-2, deterministic: no atomics), two kernels:
//  * dK, dV: a block of NW warps (NW = 4, or 2 for P > 80) takes 16 * NW keys
//    (16 per warp, K and V in shared memory) and loops over tiles of 32
//    queries (from the causal diagonal on): it loads Q, dO, lse and computes
//    delta_i = dO_i . O_i from global memory, then each warp computes S^T =
//    K_w Q^T, P^T = exp(scale S^T - lse), dP^T = V_w dO^T, dS^T = P^T (dP^T -
//    delta) and accumulates dV_w += P^T dO, dK_w += dS^T Q in WMMA
//    accumulators held in registers over the whole loop; dK is scaled once.
//  * dQ: a block of NW warps takes 16 * NW queries and loops over tiles of 32
//    keys (up to the causal diagonal): S = Q_w K^T, P, dP = dO_w V^T, dS, and
//    dQ_w += dS K in registers.
// The staging of S / dP per warp (fp32) is overwritten in place by P and dS
// in fp16 once the lanes have read it.
//
// Shared memory is static (<= 48 KB per block): forward 35840 bytes for
// P = 64 (BN = 64), 26624 for P = 128 (BN = 32); backward 38400 bytes for
// P = 64 (NW = 4), 40448 for P = 128 (NW = 2).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_ATTENTION_CUH
#define TCC_RUNTIME_CUDA_ATTENTION_CUH

#include "kernels.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

namespace tcc::cuda {

/// Sizes of a fused attention: B x H heads, Sq queries and Sk keys, head
/// sizes D (queries, keys) and Dv (values, outputs).
struct AttentionDims {
  int64_t B, H, Sq, Sk, D, Dv;
};
/// Element strides of an attention operand [B, H, S, D'] along b, h and s;
/// its last dimension is contiguous.
struct AttentionStrides {
  int64_t b, h, s;
};
/// Dropout on the probabilities (tcc.attention's `dropout`): probability
/// (q, k) of head (b, h) is kept as tcc.random_keep keeps element
/// ((b H + h) Sq + q) Sk + k of the [B, H, Sq, Sk] probabilities
/// (runtime/tcc_random.h), and a kept one is multiplied by `scale`
/// (1 / (1 - ratio)). rng (device memory, [seed, counter]) null: no dropout.
struct AttentionDropout {
  const int64_t *rng = nullptr;
  uint64_t stream = 0;
  uint32_t threshold = 0; // ceil(ratio * 2^24)
  float scale = 1.0f;
};

namespace detail {
namespace attn {

namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kSmemLimit = 48 * 1024; // static shared memory per block
constexpr int kMaxP16 = 8;            // head sizes up to 128

// Operands that may use 16-byte accesses (bits of Args::vec).
enum : unsigned { kVecQ = 1, kVecK = 2, kVecV = 4, kVecO = 8, kVecDO = 16, kVecDQ = 32, kVecDK = 64, kVecDV = 128 };

/// Everything a kernel reads: operand bases, strides and sizes.
struct Args {
  const __half *q, *k, *v, *o, *dout;
  const __half *bias; // additive [B, H, Sq, Sk] term (strides bs; keys contiguous), or null
  __half *out, *dq, *dk, *dv; // out: the forward's o
  const float *lse_in;
  float *lse_out;
  AttentionStrides qs, ks, vs, os, dos, dqs, dks, dvs, bs;
  int H, Sq, Sk, D, Dv;
  int causal;
  float scale;      // for dQ, dK
  float scale_log2; // scale * log2(e): scores in log2 units
  float cap_in;     // CAP: scale / softcap, the tanh's argument per unit of q.k
  float cap_log2;   // CAP: softcap * log2(e)
  unsigned vec;     // kVec* bits
  int bias2;        // the bias allows 4-byte (half2) loads of even keys
  AttentionDropout drop;
};

/// The score in log2 units of the product v = q.k: scale log2(e) v, or with
/// a soft cap c (CAP), c log2(e) tanh(scale v / c); `slope` gets the cap's
/// derivative 1 - tanh^2 (CAP only).
template <bool CAP> __device__ __forceinline__ float score_log2(const Args &a, float v, float &slope) {
  if constexpr (!CAP) {
    return v * a.scale_log2;
  } else {
    const float t = tanhf(v * a.cap_in);
    slope = 1.0f - t * t;
    return t * a.cap_log2;
  }
}

/// The dropout key of the kernel's micro-step (0 without dropout).
__device__ __forceinline__ uint64_t drop_key(const Args &a) {
  return a.drop.rng ? ::tcc::random::key(static_cast<uint64_t>(a.drop.rng[0]), static_cast<uint64_t>(a.drop.rng[1]),
                                         a.drop.stream)
                    : 0;
}
/// Dropout's factor of probability (q, k) of head bh = b H + h: 0 or the
/// scale (with dropout only).
__device__ __forceinline__ float drop_factor(const Args &a, uint64_t key, int64_t bh, int q, int k) {
  const uint64_t idx = ::tcc::random::probability_index(static_cast<uint64_t>(bh), static_cast<uint64_t>(a.Sq),
                                                       static_cast<uint64_t>(a.Sk), static_cast<uint64_t>(q),
                                                       static_cast<uint64_t>(k));
  return ::tcc::random::keep(key, idx, a.drop.threshold) ? a.drop.scale : 0.0f;
}

/// A block's static shared memory (aligned for WMMA and 16-byte accesses).
template <int N> struct alignas(128) SmemBuf {
  unsigned char b[N];
};

__host__ __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

__device__ __forceinline__ const __half *base(const __half *p, const AttentionStrides &st, int64_t b, int64_t h,
                                              int64_t s) {
  return p + b * st.b + h * st.h + s * st.s;
}
__device__ __forceinline__ __half *base(__half *p, const AttentionStrides &st, int64_t b, int64_t h, int64_t s) {
  return p + b * st.b + h * st.h + s * st.s;
}

__device__ __forceinline__ uint4 ld16(const __half *p) {
#ifdef TCC_CUDA_EMU
  if (!tcc_emu::check_aligned(p, 16, "attention 16-byte load")) // the launch fails; no access
    return uint4{0u, 0u, 0u, 0u};
#endif
  return *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ void st16(__half *p, const uint4 &u) {
#ifdef TCC_CUDA_EMU
  if (!tcc_emu::check_aligned(p, 16, "attention 16-byte store")) // the launch fails; no access
    return;
#endif
  *reinterpret_cast<uint4 *>(p) = u;
}

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

/// (bias[key], bias[key + 1]) of one bias row, key even; entries at or past
/// n are 0 (the callers mask them). pair: 4-byte loads allowed (row even).
__device__ __forceinline__ __half2 bias_ld2(const __half *row, int key, int n, bool pair) {
  if (pair && key + 1 < n)
    return __ldg(reinterpret_cast<const __half2 *>(row + key));
  __half2 v;
  v.x = key < n ? __ldg(row + key) : __float2half(0.0f);
  v.y = key + 1 < n ? __ldg(row + key + 1) : __float2half(0.0f);
  return v;
}
/// s[2i], s[2i + 1] += log2(e) * (bias[4i + 2hh], bias[4i + 2hh + 1]) for
/// i < N / 4: the lane's pairs of the scores of one bias row; entries at or
/// past n (>= 1) get bias[n - 1], the caller masks them. pair: 4-byte loads
/// allowed.
template <int N>
__device__ __forceinline__ void add_bias_row(float (&s)[N / 2], const __half *row, int hh, int n, bool pair) {
  if (pair && n >= N) { // the common case: whole tile, half2 loads
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float2 f = __half22float2(__ldg(reinterpret_cast<const __half2 *>(row + 4 * i + 2 * hh)));
      s[2 * i] += f.x * kLog2e;
      s[2 * i + 1] += f.y * kLog2e;
    }
  } else { // element loads; keys past n read the last one (masked by the caller)
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
      s[i] += __half2float(__ldg(row + imin(4 * (i >> 1) + 2 * hh + (i & 1), n - 1))) * kLog2e;
  }
}

/// Copies rows [0, rows) x columns [0, cols) of a global operand (row stride
/// rs elements) into a ROWS x P shared tile (row stride LD), zero-filling the
/// rest. vec: 16-byte accesses (src, rs and cols multiples of 8 elements).
/// Every thread of the block (NT) calls it.
template <int ROWS, int P16, int LD, int NT>
__device__ __forceinline__ void load_tile(__half *dst, const __half *src, int64_t rs, int rows, int cols, bool vec) {
  constexpr int P = P16 * 16;
  if (vec) {
    constexpr int CH = P / 8;
#pragma unroll 4
    for (int e = threadIdx.x; e < ROWS * CH; e += NT) {
      const int r = e / CH, c = (e - r * CH) * 8;
      uint4 u = {0u, 0u, 0u, 0u};
      if (r < rows && c < cols)
        u = ld16(src + r * rs + c);
      *reinterpret_cast<uint4 *>(dst + r * LD + c) = u;
    }
  } else {
    const __half z = __float2half(0.0f);
    for (int e = threadIdx.x; e < ROWS * P; e += NT) {
      const int r = e / P, c = e - r * P;
      dst[r * LD + c] = (r < rows && c < cols) ? src[r * rs + c] : z;
    }
  }
}

/// Writes rows [0, rows) x columns [0, cols) of a shared tile (fp32 or fp16,
/// row stride LD) to a global fp16 operand (row stride rs), rounding to
/// nearest. Every thread of the block calls it.
template <int ROWS, int P16, int LD, int NT, class TS>
__device__ __forceinline__ void store_tile(__half *dst, int64_t rs, const TS *src, int rows, int cols, bool vec) {
  constexpr int P = P16 * 16;
  if (vec) {
    constexpr int CH = P / 8;
#pragma unroll 4
    for (int e = threadIdx.x; e < ROWS * CH; e += NT) {
      const int r = e / CH, c = (e - r * CH) * 8;
      if (r < rows && c < cols) {
        uint4 u;
        if constexpr (std::is_same_v<TS, __half>) {
          u = *reinterpret_cast<const uint4 *>(src + r * LD + c);
        } else {
          __half2 h2[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            h2[i] = __floats2half2_rn(src[r * LD + c + 2 * i], src[r * LD + c + 2 * i + 1]);
          memcpy(&u, h2, sizeof u);
        }
        st16(dst + r * rs + c, u);
      }
    }
  } else {
    for (int e = threadIdx.x; e < ROWS * P; e += NT) {
      const int r = e / P, c = e - r * P;
      if (r < rows && c < cols)
        dst[r * rs + c] = __float2half_rn(to_f(src[r * LD + c]));
    }
  }
}

/// dl[i] = dO_i . O_i (fp32) for the ROWS rows of a tile (0 for rows >= rows),
/// from global memory; NT / ROWS consecutive threads share a row.
template <int ROWS, int NT>
__device__ __forceinline__ void row_delta(float *dl, const __half *o, int64_t ors, const __half *g, int64_t grs,
                                          int rows, int cols, bool vec) {
  constexpr int TPR = NT / ROWS;
  static_assert(TPR * ROWS == NT && TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0, "threads per row");
  const int i = threadIdx.x / TPR, part = threadIdx.x % TPR;
  float s = 0.0f;
  if (i < rows) {
    const __half *oi = o + i * ors, *gi = g + i * grs;
    if (vec) {
      for (int c = part * 8; c < cols; c += TPR * 8) {
        float fo[8], fg[8];
        load8(oi + c, fo);
        load8(gi + c, fg);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          s += fo[e] * fg[e];
      }
    } else {
      for (int c = part; c < cols; c += TPR)
        s += __half2float(oi[c]) * __half2float(gi[c]);
    }
  }
#pragma unroll
  for (int off = TPR / 2; off > 0; off >>= 1)
    s += __shfl_xor_sync(0xffffffffu, s, off);
  if (part == 0)
    dl[i] = s;
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

template <int P16> struct FwdCfg {
  static constexpr int NW = 4, NT = 32 * NW, BM = 16 * NW; // queries per block
  static constexpr int P = 16 * P16, LD = P + 8;            // shared row stride of Q, K, V, O (halves)
  static constexpr int main_bytes(int bn) { return 2 * bn * LD * 2 + NW * 16 * (bn + 4) * 4; }
  static constexpr int BN = main_bytes(64) <= kSmemLimit ? 64 : 32; // keys per tile
  static constexpr int LDS = BN + 4;                                // S staging row stride (floats)
  static constexpr int LDP = 2 * LDS;                               // P over S (halves)
  static constexpr int K_OFF = 0, V_OFF = BN * LD * 2, S_OFF = 2 * BN * LD * 2;
  static constexpr int STAGE = BM * LD * 2; // Q at the start, O at the end (halves)
  static constexpr int SMEM = main_bytes(BN) > STAGE ? main_bytes(BN) : STAGE;
  static_assert(SMEM <= kSmemLimit, "forward attention shared memory");
};

template <int P16, bool BIAS, bool CAP>
__global__ void __launch_bounds__(FwdCfg<P16>::NT) attn_fwd_kernel(Args a) {
  using C = FwdCfg<P16>;
  constexpr int BN = C::BN, BM = C::BM, LD = C::LD, LDS = C::LDS, LDP = C::LDP, P = C::P, NT = C::NT;
  constexpr int NJ = BN / 16; // accumulator tiles per key tile / per O chunk
  __shared__ SmemBuf<C::SMEM> smem_buf;
  unsigned char *const smem = smem_buf.b;
  __half *const Ks = reinterpret_cast<__half *>(smem + C::K_OFF);
  __half *const Vs = reinterpret_cast<__half *>(smem + C::V_OFF);
  __half *const Stage = reinterpret_cast<__half *>(smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, hh = lane & 1; // the lane's row of the warp's 16, its half of the columns
  float *const Sw = reinterpret_cast<float *>(smem + C::S_OFF) + warp * 16 * LDS;
  __half *const Pw = reinterpret_cast<__half *>(Sw);

  const int Sq = a.Sq, Sk = a.Sk;
  const bool causal = a.causal != 0;
  const int q0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * BM; // the longest causal rows first
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int qw = q0 + warp * 16; // the warp's first query
  const int row = qw + r;        // the lane's query
  const int64_t bh = b * a.H + h;
  const uint64_t dkey = drop_key(a);
  // BIAS: the lane's bias row (the last query's for the padding rows past Sq,
  // whose results are not written).
  const __half *brow = nullptr;
  if constexpr (BIAS)
    brow = a.bias + b * a.bs.b + h * a.bs.h + static_cast<int64_t>(imin(row, Sq - 1)) * a.bs.s;

  // Q: staged through shared memory into the warp's fragments.
  load_tile<BM, P16, LD, NT>(Stage, base(a.q, a.qs, b, h, q0), a.qs.s, imin(BM, Sq - q0), a.D, a.vec & kVecQ);
  __syncthreads();
  FragA qf[P16];
#pragma unroll
  for (int kk = 0; kk < P16; ++kk)
    wmma::load_matrix_sync(qf[kk], Stage + warp * 16 * LD + kk * 16, LD);
  __syncthreads(); // K and V overwrite the staged Q

  float o[P / 2]; // columns 4t + 2hh, 4t + 2hh + 1 of the lane's row: o[2t], o[2t + 1]
#pragma unroll
  for (int t = 0; t < P / 2; ++t)
    o[t] = 0.0f;
  float m = -INFINITY; // running max of the row (log2 units)
  float l = 0.0f;      // this lane's share of the running sum (relative to m)

  const int kend = causal ? imin(Sk, imin(q0 + BM, Sq)) : Sk;
  for (int k0 = 0; k0 < kend; k0 += BN) {
    if (k0 > 0)
      __syncthreads(); // every warp is done with the previous K, V
    load_tile<BN, P16, LD, NT>(Ks, base(a.k, a.ks, b, h, k0), a.ks.s, imin(BN, Sk - k0), a.D, a.vec & kVecK);
    load_tile<BN, P16, LD, NT>(Vs, base(a.v, a.vs, b, h, k0), a.vs.s, imin(BN, Sk - k0), a.Dv, a.vec & kVecV);
    __syncthreads();
    if (causal && k0 > qw + 15)
      continue; // the warp's queries see none of these keys (warp-uniform)

    // S = Q K^T (16 x BN) into the staging area.
    {
      FragC acc[NJ];
#pragma unroll
      for (int j = 0; j < NJ; ++j)
        wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
      for (int kk = 0; kk < P16; ++kk)
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          FragBCol kf;
          wmma::load_matrix_sync(kf, Ks + j * 16 * LD + kk * 16, LD);
          wmma::mma_sync(acc[j], qf[kk], kf, acc[j]);
        }
#pragma unroll
      for (int j = 0; j < NJ; ++j)
        wmma::store_matrix_sync(Sw + j * 16, acc[j], LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the lane's row: columns 4i + 2hh, 4i + 2hh + 1.
    float s[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 4; ++i) {
      const float2 v = *reinterpret_cast<const float2 *>(Sw + r * LDS + 4 * i + 2 * hh);
      float unused;
      s[2 * i] = score_log2<CAP>(a, v.x, unused);
      s[2 * i + 1] = score_log2<CAP>(a, v.y, unused);
    }
    if constexpr (BIAS) // + log2(e) bias (keys past Sk: masked below)
      add_bias_row<BN>(s, brow + k0, hh, Sk - k0, a.bias2 != 0);
    if (k0 + BN > Sk || (causal && k0 + BN - 1 > qw)) { // some keys masked (warp-uniform)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        const int key = k0 + 4 * (i >> 1) + 2 * hh + (i & 1);
        if (key >= Sk || (causal && key > row))
          s[i] = -INFINITY;
      }
    }
    float mt = -INFINITY;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i)
      mt = fmaxf(mt, s[i]);
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    const float mn = fmaxf(m, mt);
    const float mu = mn == -INFINITY ? 0.0f : mn; // a row with no key yet: p = 0, alpha = 0
    const float alpha = exp2f(m - mu);
    m = mn;
    float ls = 0.0f;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      s[i] = exp2f(s[i] - mu);
      ls += s[i];
    }
    l = l * alpha + ls;
#pragma unroll
    for (int t = 0; t < P / 2; ++t)
      o[t] *= alpha;
    if (a.drop.rng) { // dropout: O takes the dropped probabilities, l all of them
#pragma unroll
      for (int i = 0; i < BN / 2; ++i)
        s[i] *= drop_factor(a, dkey, bh, row, k0 + 4 * (i >> 1) + 2 * hh + (i & 1));
    }
    __syncwarp(); // every lane has read S: P overwrites it
#pragma unroll
    for (int i = 0; i < BN / 4; ++i)
      *reinterpret_cast<__half2 *>(Pw + r * LDP + 4 * i + 2 * hh) = __floats2half2_rn(s[2 * i], s[2 * i + 1]);
    __syncwarp();
    FragA pf[NJ];
#pragma unroll
    for (int kk = 0; kk < NJ; ++kk)
      wmma::load_matrix_sync(pf[kk], Pw + kk * 16, LDP);
    __syncwarp(); // P is in registers: the staging area takes P V

    // O += P V, in chunks of BN columns staged through the same area.
#pragma unroll
    for (int c0 = 0; c0 < P; c0 += BN) {
      FragC acc[NJ];
#pragma unroll
      for (int j = 0; j < NJ; ++j)
        if (c0 + 16 * j < P)
          wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
      for (int kk = 0; kk < NJ; ++kk)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
          if (c0 + 16 * j < P) {
            FragBRow vf;
            wmma::load_matrix_sync(vf, Vs + kk * 16 * LD + c0 + j * 16, LD);
            wmma::mma_sync(acc[j], pf[kk], vf, acc[j]);
          }
#pragma unroll
      for (int j = 0; j < NJ; ++j)
        if (c0 + 16 * j < P)
          wmma::store_matrix_sync(Sw + j * 16, acc[j], LDS, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < BN / 4; ++i)
        if (c0 + 4 * i < P) {
          const float2 v = *reinterpret_cast<const float2 *>(Sw + r * LDS + 4 * i + 2 * hh);
          o[c0 / 2 + 2 * i] += v.x;
          o[c0 / 2 + 2 * i + 1] += v.y;
        }
      __syncwarp();
    }
  }

  // O / l (fp16) staged for coalesced stores; lse = (m + log2 l) ln 2.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  const float inv = 1.0f / l;
  __syncthreads(); // every warp is done with K, V and its staging
#pragma unroll
  for (int t = 0; t < P / 4; ++t)
    *reinterpret_cast<__half2 *>(Stage + (warp * 16 + r) * LD + 4 * t + 2 * hh) =
        __floats2half2_rn(o[2 * t] * inv, o[2 * t + 1] * inv);
  if (hh == 0 && row < Sq)
    a.lse_out[bh * Sq + row] = (m + log2f(l)) * kLn2;
  __syncthreads();
  store_tile<BM, P16, LD, NT>(base(a.out, a.os, b, h, q0), a.os.s, Stage, imin(BM, Sq - q0), a.Dv, a.vec & kVecO);
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// Both backward kernels: a block of NW warps owns R = 16 NW rows (keys for
/// dK/dV, queries for dQ), loaded once, and loops over tiles of BT rows of
/// the other side.
template <int P16> struct BwdCfg {
  static constexpr int P = 16 * P16, LD = P + 8;
  static constexpr int BT = 32, LDT = BT + 8; // staging row stride: BT + 8 floats, or as halves P / dS
  static constexpr int bytes(int nw) { return 2 * 16 * nw * LD * 2 + 2 * BT * LD * 2 + nw * 16 * LDT * 4 + 2 * 64 * 4; }
  static constexpr int NW = bytes(4) <= kSmemLimit ? 4 : 2;
  static constexpr int NT = 32 * NW, R = 16 * NW;
  static constexpr int R0 = 0, R1 = R * LD * 2, T0 = 2 * R * LD * 2, T1 = T0 + BT * LD * 2;
  static constexpr int S_OFF = T1 + BT * LD * 2, STAT = S_OFF + NW * 16 * LDT * 4;
  static constexpr int LDO = P + 4; // fp32 output staging
  // Blocks per SM the dK/dV kernel is compiled for: 4 (128 registers, no
  // spills on sm_90) up to P = 64; its accumulators need more beyond.
  static constexpr int DKDV_MIN_BLOCKS = P16 <= 4 ? 4 : 1;
  static constexpr int SMEM = bytes(NW) > R * LDO * 4 ? bytes(NW) : R * LDO * 4;
  static_assert(SMEM <= kSmemLimit, "backward attention shared memory");
  // dK/dV with a bias: its BT x R tile (fp16, row stride LDB: lanes 2 rows
  // apart on other banks) after the rest.
  static constexpr int LDB = R + 8, B_OFF = bytes(NW);
  static constexpr int SMEM_BIAS = B_OFF + BT * LDB * 2 > R * LDO * 4 ? B_OFF + BT * LDB * 2 : R * LDO * 4;
  static_assert(SMEM_BIAS <= kSmemLimit, "backward attention shared memory with a bias");
  static_assert(NT / BT >= 1 && NT / R == 2, "threads per row of the delta pass");
};

/// Writes a warp's 16 x P fp32 accumulators (scaled by `mult`) through
/// shared memory to a global operand; every thread of the block calls it.
/// Sw (16 x 16*NJ fp32, row stride LDT) = A_w B^T over P16 * 16 columns:
/// A_w the warp's 16 rows, B the tile's first 16 * NJ rows (fp16, row stride
/// LD, in shared memory). The backward kernels' four products (S, dP and
/// their transposes). Ends with __syncwarp: every lane may read Sw.
template <int P16, int NJ, int LD, int LDT>
__device__ __forceinline__ void warp_abt(float *Sw, const __half *Aw, const __half *B) {
  FragC acc[NJ];
#pragma unroll
  for (int j = 0; j < NJ; ++j)
    wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
  for (int kk = 0; kk < P16; ++kk) {
    FragA af;
    wmma::load_matrix_sync(af, Aw + kk * 16, LD);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      FragBCol bf;
      wmma::load_matrix_sync(bf, B + j * 16 * LD + kk * 16, LD);
      wmma::mma_sync(acc[j], af, bf, acc[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < NJ; ++j)
    wmma::store_matrix_sync(Sw + j * 16, acc[j], LDT, wmma::mem_row_major);
  __syncwarp();
}

template <int P16, int R, int NT, int LDO>
__device__ __forceinline__ void store_acc(FragC (&acc)[P16], float mult, float *stage, __half *dst, int64_t rs,
                                          int rows, int cols, bool vec) {
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int n = 0; n < P16; ++n) {
#pragma unroll
    for (int i = 0; i < acc[n].num_elements; ++i)
      acc[n].x[i] *= mult;
    wmma::store_matrix_sync(stage + warp * 16 * LDO + n * 16, acc[n], LDO, wmma::mem_row_major);
  }
  __syncthreads();
  store_tile<R, P16, LDO, NT>(dst, rs, stage, rows, cols, vec);
  __syncthreads();
}

template <int P16, bool BIAS, bool CAP>
__global__ void __launch_bounds__(BwdCfg<P16>::NT, BwdCfg<P16>::DKDV_MIN_BLOCKS) attn_bwd_dkdv_kernel(Args a) {
  using C = BwdCfg<P16>;
  constexpr int NT = C::NT, R = C::R, BT = C::BT, LD = C::LD, LDT = C::LDT, LDB = C::LDB;
  constexpr int NJ = BT / 16;
  __shared__ SmemBuf<BIAS ? C::SMEM_BIAS : C::SMEM> smem_buf;
  unsigned char *const smem = smem_buf.b;
  __half *const Bs = reinterpret_cast<__half *>(smem + C::B_OFF); // BIAS: the tile's bias [query][key]
  __half *const Ks = reinterpret_cast<__half *>(smem + C::R0);
  __half *const Vs = reinterpret_cast<__half *>(smem + C::R1);
  __half *const Qs = reinterpret_cast<__half *>(smem + C::T0);
  __half *const Gs = reinterpret_cast<__half *>(smem + C::T1); // dO
  float *const lse2s = reinterpret_cast<float *>(smem + C::STAT);
  float *const dls = lse2s + 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, hh = lane & 1;
  float *const Sw = reinterpret_cast<float *>(smem + C::S_OFF) + warp * 16 * LDT;
  __half *const Pw = reinterpret_cast<__half *>(Sw); // P^T, 16 x BT halves (row stride LDT)
  __half *const DSw = Pw + 16 * LDT;                 // dS^T

  const int Sq = a.Sq, Sk = a.Sk;
  const bool causal = a.causal != 0;
  const int k0 = static_cast<int>(blockIdx.x) * R; // causal: the first blocks have the most queries
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int kw = k0 + warp * 16; // the warp's first key
  const int key = kw + r;        // the lane's key
  const int64_t bh = b * a.H + h;
  const int64_t lse_base = bh * static_cast<int64_t>(Sq);
  const uint64_t dkey = drop_key(a);

  load_tile<R, P16, LD, NT>(Ks, base(a.k, a.ks, b, h, k0), a.ks.s, imin(R, Sk - k0), a.D, a.vec & kVecK);
  load_tile<R, P16, LD, NT>(Vs, base(a.v, a.vs, b, h, k0), a.vs.s, imin(R, Sk - k0), a.Dv, a.vec & kVecV);

  FragC dk[P16], dv[P16];
#pragma unroll
  for (int n = 0; n < P16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }

  for (int q0 = causal ? k0 / BT * BT : 0; q0 < Sq; q0 += BT) {
    __syncthreads(); // every warp is done with the previous Q, dO, statistics
    const int rows = imin(BT, Sq - q0);
    load_tile<BT, P16, LD, NT>(Qs, base(a.q, a.qs, b, h, q0), a.qs.s, rows, a.D, a.vec & kVecQ);
    load_tile<BT, P16, LD, NT>(Gs, base(a.dout, a.dos, b, h, q0), a.dos.s, rows, a.Dv, a.vec & kVecDO);
    for (int i = threadIdx.x; i < BT; i += NT)
      lse2s[i] = i < rows ? a.lse_in[lse_base + q0 + i] * kLog2e : 0.0f;
    row_delta<BT, NT>(dls, base(a.o, a.os, b, h, q0), a.os.s, base(a.dout, a.dos, b, h, q0), a.dos.s, rows, a.Dv,
                      (a.vec & (kVecO | kVecDO)) == (kVecO | kVecDO));
    if constexpr (BIAS) { // the bias of the tile's queries and the block's keys (0 past Sq, Sk)
      constexpr int CPR = R / 2; // key pairs per row: the thread's pair is fixed
      static_assert(NT % CPR == 0, "bias tile rows per pass");
      const int kj = 2 * (threadIdx.x % CPR), keys = imin(R, Sk - k0);
      const bool pair = a.bias2 != 0;
      const __half *bt = a.bias + b * a.bs.b + h * a.bs.h + static_cast<int64_t>(q0) * a.bs.s + k0;
#pragma unroll 2
      for (int qi = threadIdx.x / CPR; qi < BT; qi += NT / CPR)
        *reinterpret_cast<__half2 *>(Bs + qi * LDB + kj) =
            bias_ld2(bt + static_cast<int64_t>(imin(qi, rows - 1)) * a.bs.s, kj, qi < rows ? keys : 0, pair);
    }
    __syncthreads();
    if (causal && q0 + BT - 1 < kw)
      continue; // no query of the tile sees the warp's keys (warp-uniform)

    // S^T = K_w Q^T (16 x BT).
    warp_abt<P16, NJ, LD, LDT>(Sw, Ks + warp * 16 * LD, Qs);
    // P^T: the lane's key row, queries 4i + 2hh, 4i + 2hh + 1.
    float p[BT / 2];
    float slope[CAP ? BT / 2 : 1]; // CAP: the soft cap's derivative at each score
#pragma unroll
    for (int i = 0; i < BT / 4; ++i) {
      const float2 sv = *reinterpret_cast<const float2 *>(Sw + r * LDT + 4 * i + 2 * hh);
      const float2 lv = *reinterpret_cast<const float2 *>(lse2s + 4 * i + 2 * hh);
      float s0 = score_log2<CAP>(a, sv.x, slope[CAP ? 2 * i : 0]),
            s1 = score_log2<CAP>(a, sv.y, slope[CAP ? 2 * i + 1 : 0]);
      if constexpr (BIAS) { // + log2(e) bias of queries q0 + 4i + 2hh (+ 1) and the lane's key
        const __half *bl = Bs + (4 * i + 2 * hh) * LDB + warp * 16 + r;
        s0 += __half2float(bl[0]) * kLog2e;
        s1 += __half2float(bl[LDB]) * kLog2e;
      }
      p[2 * i] = exp2f(s0 - lv.x);
      p[2 * i + 1] = exp2f(s1 - lv.y);
    }
    // Some pairs masked (warp-uniform): queries past Sq, keys past Sk (the
    // padding rows of the tile, whose lse-based p could be inf), causal.
    if (q0 + BT > Sq || kw + 16 > Sk || (causal && q0 < kw + 15)) {
#pragma unroll
      for (int i = 0; i < BT / 2; ++i) {
        const int q = q0 + 4 * (i >> 1) + 2 * hh + (i & 1);
        if (q >= Sq || key >= Sk || (causal && key > q))
          p[i] = 0.0f;
      }
    }
    __syncwarp(); // every lane has read S^T: dP^T overwrites it

    // dP^T = V_w dO^T (16 x BT).
    warp_abt<P16, NJ, LD, LDT>(Sw, Vs + warp * 16 * LD, Gs);
    float ds[BT / 2];
#pragma unroll
    for (int i = 0; i < BT / 4; ++i) {
      const float2 dp = *reinterpret_cast<const float2 *>(Sw + r * LDT + 4 * i + 2 * hh);
      const float2 dl = *reinterpret_cast<const float2 *>(dls + 4 * i + 2 * hh);
      // Dropout: dP and dV see the dropped probabilities (factors f).
      float f0 = 1.0f, f1 = 1.0f;
      if (a.drop.rng) {
        f0 = drop_factor(a, dkey, bh, q0 + 4 * i + 2 * hh, key);
        f1 = drop_factor(a, dkey, bh, q0 + 4 * i + 2 * hh + 1, key);
      }
      // Scaled before it is rounded to fp16 (scale < 1 keeps it further
      // from fp16's range with a large loss scale).
      ds[2 * i] = p[2 * i] * (dp.x * f0 - dl.x) * a.scale;
      ds[2 * i + 1] = p[2 * i + 1] * (dp.y * f1 - dl.y) * a.scale;
      if constexpr (CAP) {
        ds[2 * i] *= slope[2 * i];
        ds[2 * i + 1] *= slope[2 * i + 1];
      }
      p[2 * i] *= f0;
      p[2 * i + 1] *= f1;
    }
    __syncwarp(); // every lane has read dP^T: P^T, dS^T (fp16) overwrite it
#pragma unroll
    for (int i = 0; i < BT / 4; ++i) {
      *reinterpret_cast<__half2 *>(Pw + r * LDT + 4 * i + 2 * hh) = __floats2half2_rn(p[2 * i], p[2 * i + 1]);
      *reinterpret_cast<__half2 *>(DSw + r * LDT + 4 * i + 2 * hh) = __floats2half2_rn(ds[2 * i], ds[2 * i + 1]);
    }
    __syncwarp();

    // dV_w += P^T dO, dK_w += dS^T Q.
#pragma unroll
    for (int kk = 0; kk < NJ; ++kk) {
      FragA pa, sa;
      wmma::load_matrix_sync(pa, Pw + kk * 16, LDT);
      wmma::load_matrix_sync(sa, DSw + kk * 16, LDT);
#pragma unroll
      for (int n = 0; n < P16; ++n) {
        FragBRow gb, qb;
        wmma::load_matrix_sync(gb, Gs + kk * 16 * LD + n * 16, LD);
        wmma::mma_sync(dv[n], pa, gb, dv[n]);
        wmma::load_matrix_sync(qb, Qs + kk * 16 * LD + n * 16, LD);
        wmma::mma_sync(dk[n], sa, qb, dk[n]);
      }
    }
  }

  __syncthreads(); // every warp is done with the shared tiles: they take the outputs
  float *const stage = reinterpret_cast<float *>(smem);
  const int rows = imin(R, Sk - k0);
  store_acc<P16, R, NT, C::LDO>(dk, 1.0f, stage, base(a.dk, a.dks, b, h, k0), a.dks.s, rows, a.D,
                                a.vec & kVecDK);
  store_acc<P16, R, NT, C::LDO>(dv, 1.0f, stage, base(a.dv, a.dvs, b, h, k0), a.dvs.s, rows, a.Dv, a.vec & kVecDV);
}

template <int P16, bool BIAS, bool CAP>
__global__ void __launch_bounds__(BwdCfg<P16>::NT) attn_bwd_dq_kernel(Args a) {
  using C = BwdCfg<P16>;
  constexpr int NT = C::NT, R = C::R, BT = C::BT, LD = C::LD, LDT = C::LDT;
  constexpr int NJ = BT / 16;
  __shared__ SmemBuf<C::SMEM> smem_buf;
  unsigned char *const smem = smem_buf.b;
  __half *const Qs = reinterpret_cast<__half *>(smem + C::R0);
  __half *const Gs = reinterpret_cast<__half *>(smem + C::R1); // dO
  __half *const Ks = reinterpret_cast<__half *>(smem + C::T0);
  __half *const Vs = reinterpret_cast<__half *>(smem + C::T1);
  float *const lse2s = reinterpret_cast<float *>(smem + C::STAT);
  float *const dls = lse2s + 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, hh = lane & 1;
  float *const Sw = reinterpret_cast<float *>(smem + C::S_OFF) + warp * 16 * LDT;
  __half *const DSw = reinterpret_cast<__half *>(Sw); // dS, 16 x BT halves (row stride LDT)

  const int Sq = a.Sq, Sk = a.Sk;
  const bool causal = a.causal != 0;
  const int q0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * R; // the longest causal rows first
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int qw = q0 + warp * 16; // the warp's first query
  const int row = qw + r;        // the lane's query
  const int rows = imin(R, Sq - q0);
  const int64_t bh = b * a.H + h;
  const uint64_t dkey = drop_key(a);
  // BIAS: the lane's bias row (the last query's for the padding rows past Sq).
  const __half *brow = nullptr;
  if constexpr (BIAS)
    brow = a.bias + b * a.bs.b + h * a.bs.h + static_cast<int64_t>(imin(row, Sq - 1)) * a.bs.s;

  load_tile<R, P16, LD, NT>(Qs, base(a.q, a.qs, b, h, q0), a.qs.s, rows, a.D, a.vec & kVecQ);
  load_tile<R, P16, LD, NT>(Gs, base(a.dout, a.dos, b, h, q0), a.dos.s, rows, a.Dv, a.vec & kVecDO);
  for (int i = threadIdx.x; i < R; i += NT)
    lse2s[i] = i < rows ? a.lse_in[bh * static_cast<int64_t>(Sq) + q0 + i] * kLog2e : 0.0f;
  row_delta<R, NT>(dls, base(a.o, a.os, b, h, q0), a.os.s, base(a.dout, a.dos, b, h, q0), a.dos.s, rows, a.Dv,
                   (a.vec & (kVecO | kVecDO)) == (kVecO | kVecDO));
  __syncthreads();
  const float lse2 = lse2s[warp * 16 + r], dl = dls[warp * 16 + r];

  FragC dq[P16];
#pragma unroll
  for (int n = 0; n < P16; ++n)
    wmma::fill_fragment(dq[n], 0.0f);

  const int kend = causal ? imin(Sk, imin(q0 + R, Sq)) : Sk;
  for (int k0 = 0; k0 < kend; k0 += BT) {
    if (k0 > 0)
      __syncthreads(); // every warp is done with the previous K, V
    load_tile<BT, P16, LD, NT>(Ks, base(a.k, a.ks, b, h, k0), a.ks.s, imin(BT, Sk - k0), a.D, a.vec & kVecK);
    load_tile<BT, P16, LD, NT>(Vs, base(a.v, a.vs, b, h, k0), a.vs.s, imin(BT, Sk - k0), a.Dv, a.vec & kVecV);
    __syncthreads();
    if (causal && k0 > qw + 15)
      continue; // the warp's queries see none of these keys (warp-uniform)

    // S = Q_w K^T (16 x BT).
    warp_abt<P16, NJ, LD, LDT>(Sw, Qs + warp * 16 * LD, Ks);
    float p[BT / 2];
    float slope[CAP ? BT / 2 : 1]; // CAP: the soft cap's derivative at each score
#pragma unroll
    for (int i = 0; i < BT / 4; ++i) {
      const float2 sv = *reinterpret_cast<const float2 *>(Sw + r * LDT + 4 * i + 2 * hh);
      p[2 * i] = score_log2<CAP>(a, sv.x, slope[CAP ? 2 * i : 0]);
      p[2 * i + 1] = score_log2<CAP>(a, sv.y, slope[CAP ? 2 * i + 1 : 0]);
    }
    if constexpr (BIAS) // + log2(e) bias (keys past Sk: masked below)
      add_bias_row<BT>(p, brow + k0, hh, Sk - k0, a.bias2 != 0);
#pragma unroll
    for (int i = 0; i < BT / 2; ++i)
      p[i] = exp2f(p[i] - lse2);
    if (k0 + BT > Sk || (causal && k0 + BT - 1 > qw)) { // some keys masked (warp-uniform)
#pragma unroll
      for (int i = 0; i < BT / 2; ++i) {
        const int kj = k0 + 4 * (i >> 1) + 2 * hh + (i & 1);
        if (kj >= Sk || (causal && kj > row))
          p[i] = 0.0f;
      }
    }
    __syncwarp(); // every lane has read S: dP overwrites it

    // dP = dO_w V^T (16 x BT).
    warp_abt<P16, NJ, LD, LDT>(Sw, Gs + warp * 16 * LD, Vs);
    float ds[BT / 2];
#pragma unroll
    for (int i = 0; i < BT / 4; ++i) {
      const float2 dp = *reinterpret_cast<const float2 *>(Sw + r * LDT + 4 * i + 2 * hh);
      float f0 = 1.0f, f1 = 1.0f; // dropout's factors
      if (a.drop.rng) {
        f0 = drop_factor(a, dkey, bh, row, k0 + 4 * i + 2 * hh);
        f1 = drop_factor(a, dkey, bh, row, k0 + 4 * i + 2 * hh + 1);
      }
      ds[2 * i] = p[2 * i] * (dp.x * f0 - dl) * a.scale; // scaled before fp16, as for dK
      ds[2 * i + 1] = p[2 * i + 1] * (dp.y * f1 - dl) * a.scale;
      if constexpr (CAP) {
        ds[2 * i] *= slope[2 * i];
        ds[2 * i + 1] *= slope[2 * i + 1];
      }
    }
    __syncwarp(); // every lane has read dP: dS (fp16) overwrites it
#pragma unroll
    for (int i = 0; i < BT / 4; ++i)
      *reinterpret_cast<__half2 *>(DSw + r * LDT + 4 * i + 2 * hh) = __floats2half2_rn(ds[2 * i], ds[2 * i + 1]);
    __syncwarp();

    // dQ_w += dS K.
#pragma unroll
    for (int kk = 0; kk < NJ; ++kk) {
      FragA sa;
      wmma::load_matrix_sync(sa, DSw + kk * 16, LDT);
#pragma unroll
      for (int n = 0; n < P16; ++n) {
        FragBRow kb;
        wmma::load_matrix_sync(kb, Ks + kk * 16 * LD + n * 16, LD);
        wmma::mma_sync(dq[n], sa, kb, dq[n]);
      }
    }
  }

  __syncthreads(); // every warp is done with the shared tiles: they take the output
  store_acc<P16, R, NT, C::LDO>(dq, 1.0f, reinterpret_cast<float *>(smem), base(a.dq, a.dqs, b, h, q0), a.dqs.s,
                                rows, a.D, a.vec & kVecDQ);
}

static __global__ void attn_error_kernel() { set_error(); }

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

/// Whether an operand allows 16-byte accesses: a 16-byte aligned base, and
/// strides and row length in multiples of 8 elements.
inline bool vec_ok(const void *p, const AttentionStrides &s, int64_t cols) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && s.b % 8 == 0 && s.h % 8 == 0 && s.s % 8 == 0 && cols % 8 == 0;
}

/// Checks the sizes; false (after reporting: a message on stderr and the
/// device error flag) for sizes the kernels do not support, or when there is
/// nothing to compute.
inline bool check(const char *what, const AttentionDims &d) {
  if (d.B <= 0 || d.H <= 0 || d.Sq <= 0 || d.Sk <= 0)
    return false; // nothing to do (Sk == 0 is not an attention tcc emits)
  if (d.D < 1 || d.D > 16 * kMaxP16 || d.Dv < 1 || d.Dv > 16 * kMaxP16 || d.B > 65535 || d.H > 65535 ||
      d.Sq > INT32_MAX - 64 || d.Sk > INT32_MAX - 64) {
    std::fprintf(stderr,
                 "tcc::cuda::%s: unsupported sizes B=%lld H=%lld Sq=%lld Sk=%lld D=%lld Dv=%lld (head sizes must be "
                 "1..%d, B and H <= 65535)\n",
                 what, static_cast<long long>(d.B), static_cast<long long>(d.H), static_cast<long long>(d.Sq),
                 static_cast<long long>(d.Sk), static_cast<long long>(d.D), static_cast<long long>(d.Dv),
                 16 * kMaxP16);
    TCC_LAUNCH(1, 1, 0, stream(), attn_error_kernel)();
    return false;
  }
  return true;
}

inline Args make_args(const AttentionDims &d, float scale, bool causal, const __half *bias,
                      const AttentionStrides &bs, float softcap) {
  Args a{};
  if (softcap > 0.0f) {
    a.cap_in = scale / softcap;
    a.cap_log2 = softcap * kLog2e;
  }
  if (bias) {
    a.bias = bias;
    a.bs = bs;
    a.bias2 = reinterpret_cast<uintptr_t>(bias) % 4 == 0 && bs.b % 2 == 0 && bs.h % 2 == 0 && bs.s % 2 == 0;
  }
  a.H = static_cast<int>(d.H);
  a.Sq = static_cast<int>(d.Sq);
  a.Sk = static_cast<int>(d.Sk);
  a.D = static_cast<int>(d.D);
  a.Dv = static_cast<int>(d.Dv);
  a.causal = causal ? 1 : 0;
  a.scale = scale;
  a.scale_log2 = scale * kLog2e;
  return a;
}

inline int p16_of(const AttentionDims &d) {
  const int64_t p = d.D > d.Dv ? d.D : d.Dv;
  return static_cast<int>((p + 15) / 16);
}

// Bias: 1 or 0 when the caller knows whether there is one (only that
// kernel is compiled), -1 to decide from a.bias at run time. CAP: whether
// the kernels apply a soft cap (the launcher checked that it matches).
template <int P16, int Bias, bool CAP> void launch_forward(const Args &a, const AttentionDims &d) {
  using C = FwdCfg<P16>;
  const dim3 grid(static_cast<unsigned>((d.Sq + C::BM - 1) / C::BM), static_cast<unsigned>(d.H),
                  static_cast<unsigned>(d.B));
  if (Bias == 1 || (Bias < 0 && a.bias)) {
    if constexpr (Bias != 0)
      TCC_LAUNCH(grid, C::NT, 0, stream(), attn_fwd_kernel<P16, true, CAP>)(a);
  } else {
    if constexpr (Bias != 1)
      TCC_LAUNCH(grid, C::NT, 0, stream(), attn_fwd_kernel<P16, false, CAP>)(a);
  }
}

template <int P16, int Bias, bool CAP> void launch_backward(const Args &a, const AttentionDims &d) {
  using C = BwdCfg<P16>;
  const dim3 gk(static_cast<unsigned>((d.Sk + C::R - 1) / C::R), static_cast<unsigned>(d.H),
                static_cast<unsigned>(d.B));
  const dim3 gq(static_cast<unsigned>((d.Sq + C::R - 1) / C::R), static_cast<unsigned>(d.H),
                static_cast<unsigned>(d.B));
  if (Bias == 1 || (Bias < 0 && a.bias)) {
    if constexpr (Bias != 0) {
      TCC_LAUNCH(gk, C::NT, 0, stream(), attn_bwd_dkdv_kernel<P16, true, CAP>)(a);
      TCC_LAUNCH(gq, C::NT, 0, stream(), attn_bwd_dq_kernel<P16, true, CAP>)(a);
    }
  } else {
    if constexpr (Bias != 1) {
      TCC_LAUNCH(gk, C::NT, 0, stream(), attn_bwd_dkdv_kernel<P16, false, CAP>)(a);
      TCC_LAUNCH(gq, C::NT, 0, stream(), attn_bwd_dq_kernel<P16, false, CAP>)(a);
    }
  }
}

/// Whether a launcher compiled with Cap (0: no soft cap, 1: one) can run
/// `softcap`; a mismatch is the caller's bug: it sets the device error flag.
inline bool cap_matches(int cap, float softcap, const char *what) {
  if ((softcap > 0.0f) == (cap == 1))
    return true;
  std::fprintf(stderr, "tcc::cuda::%s: compiled %s a soft cap, called with softcap %g\n", what,
               cap == 1 ? "with" : "without", static_cast<double>(softcap));
  TCC_LAUNCH(1, 1, 0, stream(), attn_error_kernel)();
  return false;
}

/// Launches `launch` for padded head size `p16` (1..8), or, when P16 (the
/// caller's compile-time choice) is not 0, only for P16: a generated step
/// names its size, so only its kernels are compiled. A mismatch is the
/// caller's bug: it sets the device error flag.
template <int P16, class F> void dispatch_p16(int p16, const char *what, F launch) {
  if constexpr (P16 != 0) {
    if (p16 != P16) {
      std::fprintf(stderr, "tcc::cuda::%s: compiled for padded head size %d, called with %d\n", what,
                   16 * P16, 16 * p16);
      TCC_LAUNCH(1, 1, 0, stream(), attn_error_kernel)();
      return;
    }
    launch(std::integral_constant<int, P16>());
  } else {
    switch (p16) {
    case 1: launch(std::integral_constant<int, 1>()); break;
    case 2: launch(std::integral_constant<int, 2>()); break;
    case 3: launch(std::integral_constant<int, 3>()); break;
    case 4: launch(std::integral_constant<int, 4>()); break;
    case 5: launch(std::integral_constant<int, 5>()); break;
    case 6: launch(std::integral_constant<int, 6>()); break;
    case 7: launch(std::integral_constant<int, 7>()); break;
    default: launch(std::integral_constant<int, 8>()); break;
    }
  }
}

} // namespace attn
} // namespace detail

// The launchers are templates, so that the kernels are compiled only in a
// translation unit that calls them, not in every one that includes
// kernels.cuh. Called as plain functions they dispatch on the head size and
// the bias at run time (every kernel compiled); a generated step names both,
// attention_forward<P16, Bias>(...) with P16 = ceil(max(D, Dv) / 16) and
// Bias 0 or 1, so that only the three kernels it runs are compiled.

/// o = softmax(scale * q k^T [+ bias] [+ causal mask]) v (fp16), and lse
/// ([B, H, Sq], contiguous, fp32) = the rows' log-sum-exp of the scores.
/// bias: null, or an additive [B, H, Sq, Sk] fp16 term with strides bs along
/// b, h, the query (0 where broadcast; keys contiguous). softcap > 0 (with
/// Cap = 1 only): the scaled product x is softcap tanh(x / softcap).
template <int P16 = 0, int Bias = -1, int Cap = 0>
void attention_forward(__half *o, AttentionStrides os, float *lse, const __half *q, AttentionStrides qs,
                              const __half *k, AttentionStrides ks, const __half *v, AttentionStrides vs,
                              const __half *bias, AttentionStrides bs, const AttentionDims &d, float scale,
                              bool causal, const AttentionDropout &drop = {}, float softcap = 0.0f) {
  namespace A = detail::attn;
  if (!A::check("attention_forward", d) || !A::cap_matches(Cap, softcap, "attention_forward"))
    return;
  A::Args a = A::make_args(d, scale, causal, bias, bs, softcap);
  a.drop = drop;
  a.q = q, a.k = k, a.v = v, a.out = o, a.lse_out = lse;
  a.qs = qs, a.ks = ks, a.vs = vs, a.os = os;
  a.vec = (A::vec_ok(q, qs, d.D) ? A::kVecQ : 0u) | (A::vec_ok(k, ks, d.D) ? A::kVecK : 0u) |
          (A::vec_ok(v, vs, d.Dv) ? A::kVecV : 0u) | (A::vec_ok(o, os, d.Dv) ? A::kVecO : 0u);
  A::dispatch_p16<P16>(A::p16_of(d), "attention_forward",
                       [&](auto p) { A::launch_forward<decltype(p)::value, Bias, Cap == 1>(a, d); });
}

/// The gradients of attention_forward (dq, dk, dv in fp16) from q, k, v, the
/// forward's o and lse, and dout (the same bias as the forward, or null; no
/// gradient for it): with P = exp(scale q k^T + bias - lse),
/// dP = dout v^T and delta_i = dout_i . o_i, dq = scale (P * (dP - delta)) k,
/// dk = scale (P * (dP - delta))^T q, dv = P^T dout (with a soft cap, dS =
/// P * (dP - delta) times the cap's slope). Two kernels (dK/dV, then dQ), no
/// atomics: the result does not depend on the schedule.
template <int P16 = 0, int Bias = -1, int Cap = 0>
void attention_backward(__half *dq, AttentionStrides dqs, __half *dk, AttentionStrides dks, __half *dv,
                               AttentionStrides dvs, const __half *q, AttentionStrides qs, const __half *k,
                               AttentionStrides ks, const __half *v, AttentionStrides vs, const __half *o,
                               AttentionStrides os, const __half *dout, AttentionStrides dos, const float *lse,
                               const __half *bias, AttentionStrides bs, const AttentionDims &d, float scale,
                               bool causal, const AttentionDropout &drop = {}, float softcap = 0.0f) {
  namespace A = detail::attn;
  if (!A::check("attention_backward", d) || !A::cap_matches(Cap, softcap, "attention_backward"))
    return;
  A::Args a = A::make_args(d, scale, causal, bias, bs, softcap);
  a.drop = drop;
  a.q = q, a.k = k, a.v = v, a.o = o, a.dout = dout, a.lse_in = lse;
  a.dq = dq, a.dk = dk, a.dv = dv;
  a.qs = qs, a.ks = ks, a.vs = vs, a.os = os, a.dos = dos, a.dqs = dqs, a.dks = dks, a.dvs = dvs;
  a.vec = (A::vec_ok(q, qs, d.D) ? A::kVecQ : 0u) | (A::vec_ok(k, ks, d.D) ? A::kVecK : 0u) |
          (A::vec_ok(v, vs, d.Dv) ? A::kVecV : 0u) | (A::vec_ok(o, os, d.Dv) ? A::kVecO : 0u) |
          (A::vec_ok(dout, dos, d.Dv) ? A::kVecDO : 0u) | (A::vec_ok(dq, dqs, d.D) ? A::kVecDQ : 0u) |
          (A::vec_ok(dk, dks, d.D) ? A::kVecDK : 0u) | (A::vec_ok(dv, dvs, d.Dv) ? A::kVecDV : 0u);
  A::dispatch_p16<P16>(A::p16_of(d), "attention_backward",
                       [&](auto p) { A::launch_backward<decltype(p)::value, Bias, Cap == 1>(a, d); });
}

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_ATTENTION_CUH
