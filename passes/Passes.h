//===- Passes.h - tcc passes ------------------------------------*- C++ -*-===//
#ifndef TCC_PASSES_PASSES_H
#define TCC_PASSES_PASSES_H

#include "compiler/Dialect/TccDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::tcc {

/// Argument and result attribute names that tie the model function to the
/// ONNX graph's names.
inline constexpr llvm::StringLiteral kParamAttr = "tcc.param";
inline constexpr llvm::StringLiteral kFrozenAttr = "tcc.frozen";
inline constexpr llvm::StringLiteral kInputAttr = "tcc.input";
inline constexpr llvm::StringLiteral kOutputAttr = "tcc.output";
inline constexpr llvm::StringLiteral kGradAttr = "tcc.grad";
/// The training step's last argument: the gradient of the loss that seeds the
/// backward pass (a scalar the runtime sets to loss scale / accumulation, so
/// every gradient in the step is of loss * seed).
inline constexpr llvm::StringLiteral kSeedAttr = "tcc.loss_seed";
/// The argument that holds the step's random state, tensor<2xi64>
/// [seed, counter], which tcc.random_keep (dropout) reads; tcc-legalize adds
/// it to a function with training-mode dropout, the memory plan gives it a
/// persistent slot, and the step advances the counter after each micro-step.
inline constexpr llvm::StringLiteral kRngAttr = "tcc.rng";
/// The float values of `func` that a trainable parameter (an argument with
/// tcc.param and without tcc.frozen) reaches: what tcc-build-backward
/// differentiates.
llvm::DenseSet<Value> trainableValues(func::FuncOp func);

/// The name of the training step function that tcc-build-backward makes.
inline constexpr llvm::StringLiteral kMicroStepName = "micro_step";

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::tcc

#endif // TCC_PASSES_PASSES_H
