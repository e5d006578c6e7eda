/*===- tcc_random.h - the random numbers of dropout ---------------*- C++ -*-===*
 *
 * Dropout's keep mask is a pure function of the step's random state
 * [seed, counter] (the state tensor TCC_STEP_DROPOUT_STATE of tcc_step.h, so
 * checkpoints carry it), the dropout's stream number (tcc numbers
 * a step's dropouts in order) and the element's flat index:
 *
 *   key(seed, counter, stream) = mix(seed ^ mix(counter * G ^ mix(stream + C)))
 *   bits(key, i)               = mix(key + i * G) >> 40        (24 bits)
 *   keep                       = bits >= threshold(ratio)
 *   threshold(ratio)           = ceil(ratio * 2^24)
 *
 * with mix the SplitMix64 finaliser and G, C the constants below. The step
 * advances `counter` by one after every micro-step, so each micro-step draws
 * new masks, and anything that recomputes a mask within a micro-step (the
 * backward pass, rematerialisation) gets the same one without storing it.
 * The same functions run on the CPU, in CUDA kernels and in the tests'
 * reference (test/e2e/dropout_reference.py), so every target draws the same
 * masks.
 *
 *===----------------------------------------------------------------------===*/
#ifndef TCC_RUNTIME_TCC_RANDOM_H
#define TCC_RUNTIME_TCC_RANDOM_H

#include <stdint.h>

#if defined(__CUDACC__)
#define TCC_RANDOM_FN __host__ __device__ __forceinline__
#else
#define TCC_RANDOM_FN inline
#endif

namespace tcc::random {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kStreamOffset = 0x632be59bd9b4e019ULL;

/// The SplitMix64 finaliser: a bijection of 64-bit words that mixes every
/// input bit into every output bit.
TCC_RANDOM_FN uint64_t mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z;
}

/// One dropout's key in one micro-step.
TCC_RANDOM_FN uint64_t key(uint64_t seed, uint64_t counter, uint64_t stream) {
  return mix(seed ^ mix(counter * kGolden ^ mix(stream + kStreamOffset)));
}

/// 24 uniformly distributed bits for element `i`.
TCC_RANDOM_FN uint32_t bits(uint64_t k, uint64_t i) {
  return static_cast<uint32_t>(mix(k + i * kGolden) >> 40);
}

/// The keep threshold of a dropout ratio in [0, 1): ceil(ratio * 2^24).
inline uint32_t threshold(double ratio) {
  double t = ratio * 16777216.0;
  uint32_t u = static_cast<uint32_t>(t);
  return u + (static_cast<double>(u) < t ? 1u : 0u);
}

/// The flat index of probability (q, k) of head bh = b H + h in attention
/// probabilities [B, H, Sq, Sk] (or [B*H, Sq, Sk]): the element whose
/// random_keep decision a fused attention's dropout draws.
TCC_RANDOM_FN uint64_t probability_index(uint64_t bh, uint64_t sq, uint64_t sk, uint64_t q,
                                         uint64_t k) {
  return (bh * sq + q) * sk + k;
}

/// Whether element `i` is kept; `threshold` is threshold(ratio).
TCC_RANDOM_FN bool keep(uint64_t k, uint64_t i, uint32_t threshold) {
  return bits(k, i) >= threshold;
}

} // namespace tcc::random

#endif // TCC_RUNTIME_TCC_RANDOM_H
