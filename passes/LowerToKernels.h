//===- LowerToKernels.h - what the kernel lowering shares -------*- C++ -*-===//
#ifndef TCC_PASSES_LOWERTOKERNELS_H
#define TCC_PASSES_LOWERTOKERNELS_H

#include "mlir/IR/Operation.h"

#include <string>

namespace mlir::tcc {

/// What the step's op table says an op is: the code it runs (`launched`,
/// the kernel or library call on CUDA, "" on the CPU), the op (a fusion's
/// ops) and the ONNX nodes it came from (the first eight).
std::string opTableLabel(Operation *op, StringRef launched = "");

} // namespace mlir::tcc

#endif // TCC_PASSES_LOWERTOKERNELS_H
