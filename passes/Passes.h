//===- Passes.h - tcc passes ------------------------------------*- C++ -*-===//
#ifndef TCC_PASSES_PASSES_H
#define TCC_PASSES_PASSES_H

#include "compiler/Dialect/TccDialect.h"
#include "compiler/Kernel/TcckDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::tcc {

/// The float values of `func` that a trainable parameter (an argument with
/// tcc.param and without tcc.frozen) reaches: what tcc-build-backward
/// differentiates.
llvm::DenseSet<Value> trainableValues(func::FuncOp func);

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::tcc

#endif // TCC_PASSES_PASSES_H
