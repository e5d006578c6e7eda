//===- PlanMemory.h - what the memory planner decides -----------*- C++ -*-===//
#ifndef TCC_PASSES_PLANMEMORY_H
#define TCC_PASSES_PLANMEMORY_H

#include "mlir/IR/Operation.h"

namespace mlir::tcc {

/// Byte alignment of every arena slot.
inline constexpr int64_t kArenaAlignment = 64;

/// Whether `op` is a constant the library keeps in read-only data rather than
/// in the arena (small or non-uniform constants); its result has no slot.
bool isStaticConstant(Operation *op);

/// Bytes a value of `type` takes on a target whose floats are `floatBytes`.
int64_t bufferBytes(Type type, int64_t floatBytes);

} // namespace mlir::tcc

#endif // TCC_PASSES_PLANMEMORY_H
