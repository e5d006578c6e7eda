//===- tensor_values.cpp - reading a tensor's elements on the host --------===//

#include "runtime/lib/tensor_values.h"
#include "runtime/lib/text.h"

#include "runtime/npy.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"
#include "runtime/posix_io.h"
#include "runtime/npy.h"

#include <cmath>
#include <cstring>

namespace tcc::run {

using tcc::step::DTypeInfo;

/// Whether an .npy descr denotes `d` ('=' is native order, i.e. little-endian
/// here; one-byte types have no byte order, so '<' and '=' are fine too).
bool descrMatches(const std::string &descr, const DTypeInfo &d) {
  if (descr == d.descr)
    return true;
  if (descr.size() != 3)
    return false;
  std::string body = descr.substr(1);
  if (body != std::string(d.descr + 1))
    return false;
  char order = descr[0];
  return order == '=' || (d.size == 1 && (order == '<' || order == '|'));
}

double halfToDouble(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(mant | 0x400, exp - 25);
  return sign ? -v : v;
}

/// Calls `f(T())` with T the element type of a float dtype (f32 or f64);
/// does nothing for other dtypes.

/// Whether every element of the float tensor `d` in `arena` is finite (other
/// element types are).
bool allFinite(const tcc_tensor_desc &d, const char *arena) {
  bool finite = true;
  withFloatType(d.dtype, [&](auto zero) {
    using T = decltype(zero);
    for (uint64_t k = 0; finite && k < d.bytes / sizeof(T); ++k) {
      T v;
      std::memcpy(&v, arena + d.offset + sizeof(T) * k, sizeof(T));
      finite = std::isfinite(v);
    }
  });
  return finite;
}

/// Divides the float tensor `d` in `arena` by `divisor` (exactly when it is
/// a power of two, else rounded once).
void divideTensor(const tcc_tensor_desc &d, char *arena, double divisor) {
  withFloatType(d.dtype, [&](auto zero) {
    using T = decltype(zero);
    char *p = arena + d.offset;
    for (uint64_t k = 0; k < d.bytes / sizeof(T); ++k) {
      T v;
      std::memcpy(&v, p + sizeof(T) * k, sizeof(T));
      v = static_cast<T>(v / divisor);
      std::memcpy(p + sizeof(T) * k, &v, sizeof(T));
    }
  });
}

/// For a device (CUDA) step, which reads its float inputs as fp16: "" if
/// every element of input `d` at `data` is within fp16's finite range (or
/// not finite already), else what is wrong and what to do. `which` names the
/// micro-batch.
std::string checkFp16Range(const tcc_tensor_desc &d, const char *data,
                           const std::string &which) {
  double worst = 0.0;
  withFloatType(d.dtype, [&](auto zero) {
    using T = decltype(zero);
    for (uint64_t k = 0; k < d.bytes / sizeof(T); ++k) {
      T v;
      std::memcpy(&v, data + sizeof(T) * k, sizeof(T));
      if (std::isfinite(v) && std::fabs(static_cast<double>(v)) > 65504.0 &&
          std::fabs(static_cast<double>(v)) > std::fabs(worst))
        worst = static_cast<double>(v);
    }
  });
  if (worst == 0.0)
    return "";
  return "the input \"" + std::string(d.name) + "\" of " + which + " holds " +
         format("%g", worst) +
         ", beyond fp16's largest finite value (65504): a --target=cuda step "
         "reads its float inputs as fp16, where it would be infinite; scale "
         "the data, or compile the step with --target=cpu";
}

/// The first element at `p`, as a double.
double elementAsDouble(const void *p, int32_t dtype) {
  switch (dtype) {
  case TCC_DTYPE_F32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case TCC_DTYPE_F64: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case TCC_DTYPE_F16: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return halfToDouble(v);
  }
  case TCC_DTYPE_I64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return static_cast<double>(v);
  }
  case TCC_DTYPE_I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case TCC_DTYPE_U8:
  case TCC_DTYPE_BOOL:
    return *static_cast<const uint8_t *>(p);
  case TCC_DTYPE_I8:
    return *static_cast<const int8_t *>(p);
  }
  return 0;
}

} // namespace tcc::run
