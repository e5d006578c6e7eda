//===- cuda_fp16.h - __half for tcc's CUDA emulation -------------*- C++ -*-===//
//
// Stands in for the toolkit's cuda_fp16.h when tcc's CUDA code is built for
// the host (see tcc_cuda_emu.h): IEEE binary16 storage, conversions that
// round to nearest even (GCC's _Float16), and the intrinsics tcc's kernels
// use.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CUDA_EMU_FP16_H
#define TCC_CUDA_EMU_FP16_H

#include "tcc_cuda_emu.h"

#include <cstdint>
#include <cstring>

namespace tcc_emu {
/// Every binary16 value as float (exact), so that loads cost a lookup, not
/// libgcc's software conversion.
inline const float *half_to_float_table() {
  static const float *table = [] {
    float *t = new float[65536];
    for (uint32_t i = 0; i < 65536; ++i) {
      const uint16_t bits = static_cast<uint16_t>(i);
      _Float16 h;
      std::memcpy(&h, &bits, 2);
      t[i] = static_cast<float>(h);
    }
    return t;
  }();
  return table;
}
} // namespace tcc_emu

struct __half {
  unsigned short x_;
  __half() = default;
  __half(float f) { set(static_cast<_Float16>(f)); }
  __half(double d) { set(static_cast<_Float16>(d)); }
  operator float() const { return tcc_emu::half_to_float_table()[x_]; }

private:
  void set(_Float16 h) { std::memcpy(&x_, &h, 2); }
};
static_assert(sizeof(__half) == 2, "__half is two bytes");

struct __half2 {
  __half x, y;
};

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline float2 __half22float2(__half2 h) { return float2{static_cast<float>(h.x), static_cast<float>(h.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
inline bool __hisinf(__half h) { return std::isinf(static_cast<float>(h)); }
inline bool __hisnan(__half h) { return std::isnan(static_cast<float>(h)); }

#endif // TCC_CUDA_EMU_FP16_H
