//===- LowerToKernels.h - what the kernel lowering shares -------*- C++ -*-===//
#ifndef TCC_PASSES_LOWERTOKERNELS_H
#define TCC_PASSES_LOWERTOKERNELS_H

#include "compiler/Dialect/TccOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"

#include <string>

namespace mlir::tcc {

/// What the step's op table says an op is: the code it runs (`launched`,
/// the kernel or library call on CUDA, "" on the CPU), the op (a fusion's
/// ops) and the ONNX nodes it came from (the first eight).
std::string opTableLabel(Operation *op, StringRef launched = "");

/// The step's optimizer as kernel IR (LowerOptimizer.cpp): the function
/// @apply (marked tcck.apply), inserted after the planned training step
/// `step`, with one tcck.update per trainable parameter (tcck.shard_update
/// for a sharded plan), from the memory plan `layout`. Masters are stored in
/// `storage` on the CPU, f32 on CUDA (`cuda`), with fp16 working copies.
LogicalResult buildApply(func::FuncOp step, LayoutAttr layout, bool cuda, Type storage);

/// The kernel module's @apply (the module of `op`, or `op` itself), or null.
func::FuncOp applyFunction(Operation *op);

} // namespace mlir::tcc

#endif // TCC_PASSES_LOWERTOKERNELS_H
