//===- float_math.h - exp, Phi and GELU's gate in float, no libm -*- C++ -*-===//
//
// The exponentials of an f32 CPU step (runtime/cpu/kernels.h: GELU and its
// gradient, sigmoid, softmax, the cross-entropy losses) in float arithmetic
// with no call into the C library, so that the compiler vectorises the loops
// that call them: std::exp, std::erf and std::tanh are calls a loop cannot be
// vectorised across, and tcc's kernels called them in double, 18-25 ns an
// element (docs/cpu.md). f64 steps keep the C library in double.
//
// GELU's two forms are written so that no difference of nearly equal
// numbers is taken:
//   erf:  Phi(x) = 1 - erfc(x / sqrt 2) / 2 for x >= 0, erfc(-x / sqrt 2) / 2
//         below, erfc(z) = exp(-z^2) P(1 / (1 + z / 2)) for z >= 0, with P
//         a degree-11 polynomial fitted here for relative error (5e-9 in
//         exact arithmetic) on z in [0, 9.3], where float's erfc ends;
//   tanh: 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)).
// Against long double (test/runtime/kernels_test.cpp): GELU within 8 ulp
// (erf) and 15 (tanh) for x >= -3, where the argument of exp, rounded to
// float, costs the most; 4e-9 absolute below, where the double forms, which
// take 1 + erf and 1 + tanh, lose their digits; the gradient within 2 ulp of
// max(1, |gelu'(x)|). NaN gives NaN.
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_CPU_FLOAT_MATH_H
#define TCC_RUNTIME_CPU_FLOAT_MATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tcc::cpu::detail {

/// exp(y) in float: y = k ln 2 + r, |r| <= ln 2 / 2, 2^k from
/// its bits and e^r by its Taylor series to r^7 (relative error below 5e-9
/// before rounding; within 2 ulp of std::exp, test/runtime/kernels_test.cpp).
/// From 88.38 it is inf (std::exp from 88.73, past FLT_MAX: 2^k stops at
/// 2^127), below -87.3 0 (where the result would be subnormal), NaN for
/// NaN. Every select is a comparison's, which the step's -fno-trapping-math
/// lets the vectoriser if-convert.
inline float exp_f32(float y) {
  const float lo = -87.3f, hi = 88.7f;
  const float c = y > lo ? (y < hi ? y : hi) : lo; // NaN: lo (a finite k)
  // Round to nearest by adding and subtracting 1.5 * 2^23.
  const float k = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln 2 in two parts: k * 0.693359375 is exact for |k| <= 2^11.
  const float r = (c - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = ((int32_t)k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y >= lo ? p * scale : (y < lo ? 0.0f : y);
}

/// Phi(x), the standard normal CDF, and exp(-x^2 / 2) beside it.
inline float normal_cdf_f32(float x, float &gauss) {
  const float z = std::fabs(x) * 0.707106781186547524f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 1.628209837e-02f;
  p = p * t - 6.985726953e-02f;
  p = p * t + 4.817691818e-02f;
  p = p * t + 2.442353517e-01f;
  p = p * t - 5.742298961e-01f;
  p = p * t + 4.219864309e-01f;
  p = p * t - 1.315436512e-01f;
  p = p * t + 2.474021763e-01f;
  p = p * t + 2.313962132e-01f;
  p = p * t + 2.842187583e-01f;
  p = p * t + 2.819271088e-01f;
  p = p * t + 5.777279512e-06f;
  gauss = exp_f32(-0.5f * (x * x));
  const float half_erfc = 0.5f * gauss * p;
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

/// 1 / (1 + exp(-2u)), GELU's tanh form's 0.5 (1 + tanh u), and exp(-2u)
/// beside it, held below exp(80) so that s (1 - s) = s^2 exp(-2u) stays
/// finite (s is 0 there: below float's smallest normal).
inline float tanh_gate_f32(float x, float &e) {
  const float u = 0.797884560802865356f * (x + 0.044715f * (x * x * x));
  const float m = -2.0f * u;
  e = exp_f32(m < 80.0f ? m : 80.0f);
  return m < 80.0f ? 1.0f / (1.0f + e) : 0.0f;
}

} // namespace tcc::cpu::detail

#endif // TCC_RUNTIME_CPU_FLOAT_MATH_H
