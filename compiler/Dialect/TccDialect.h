//===- TccDialect.h - the tcc dialect ---------------------------*- C++ -*-===//
#ifndef TCC_COMPILER_DIALECT_TCCDIALECT_H
#define TCC_COMPILER_DIALECT_TCCDIALECT_H

#include "mlir/IR/Dialect.h"

#include "compiler/Dialect/TccOpsDialect.h.inc"

namespace mlir::tcc {

// The dialect's conventions on a model function, which the importer writes
// and the passes, emitters and driver read.

/// Argument and result attribute names that tie the model function to the
/// ONNX graph's names.
inline constexpr llvm::StringLiteral kParamAttr = "tcc.param";
inline constexpr llvm::StringLiteral kFrozenAttr = "tcc.frozen";
inline constexpr llvm::StringLiteral kInputAttr = "tcc.input";
inline constexpr llvm::StringLiteral kOutputAttr = "tcc.output";
inline constexpr llvm::StringLiteral kGradAttr = "tcc.grad";
/// On the module: how the loss reads the graph's inputs, a dictionary of
/// strings (task = "causal-lm" | "masked-lm", ids / labels / mask = an input's
/// name, labels-shift = "shifted" | "aligned"), from the model's
/// tcc.objective metadata (python/tcc_export.py) or tcc-append-loss; the step
/// records it for tcc-run --data.
inline constexpr llvm::StringLiteral kObjectiveAttr = "tcc.objective";
/// The training step's last argument: the gradient of the loss that seeds the
/// backward pass (a scalar the runtime sets to loss scale / accumulation, so
/// every gradient in the step is of loss * seed).
inline constexpr llvm::StringLiteral kSeedAttr = "tcc.loss_seed";
/// The argument that holds the step's random state, tensor<2xi64>
/// [seed, counter], which tcc.random_keep (dropout) reads; tcc-legalize adds
/// it to a function with training-mode dropout, the memory plan gives it a
/// persistent slot, and the step advances the counter after each micro-step.
inline constexpr llvm::StringLiteral kRngAttr = "tcc.rng";
/// The name of the training step function that tcc-build-backward makes.
inline constexpr llvm::StringLiteral kMicroStepName = "micro_step";

} // namespace mlir::tcc

#endif // TCC_COMPILER_DIALECT_TCCDIALECT_H
