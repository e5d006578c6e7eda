//===- tensor_values.h - reading a tensor's elements on the host --*- C++ -*-===//
//
// The element-level helpers the runtime needs on a tensor in the host
// mirror: matching an .npy dtype, fp16 to double, finiteness, division (the
// loss scale), one element as a double.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_TENSOR_VALUES_H
#define TCC_RUNTIME_LIB_TENSOR_VALUES_H

#include "runtime/step_table.h"
#include "runtime/tcc_step.h"

#include <cstdint>
#include <string>

namespace tcc::run {

/// Whether an .npy descr denotes `d` ('=' is native order, i.e. little-endian
/// here; one-byte types have no byte order, so '<' and '=' are fine too).
bool descrMatches(const std::string &descr, const tcc::step::DTypeInfo &d);
/// An IEEE binary16 value.
double halfToDouble(uint16_t h);
/// Whether every element of the float tensor `d` in `arena` is finite.
bool allFinite(const tcc_tensor_desc &d, const char *arena);
/// Divides the float tensor `d` in `arena` by `divisor`, in its own type.
void divideTensor(const tcc_tensor_desc &d, char *arena, double divisor);
/// For a device (CUDA) step, which reads its float inputs as fp16: "" if
/// every element of input `d` at `data` is within fp16's finite range (or
/// not finite already), else what is wrong and what to do. `which` names the
/// micro-batch.
std::string checkFp16Range(const tcc_tensor_desc &d, const char *data, const std::string &which);
/// The element at `p`, of type `dtype`, as a double.
double elementAsDouble(const void *p, int32_t dtype);

template <typename F> void withFloatType(int32_t dtype, F &&f) {
  if (dtype == TCC_DTYPE_F32)
    f(float());
  else if (dtype == TCC_DTYPE_F64)
    f(double());
}

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_TENSOR_VALUES_H
