//===- Reports.h - tcc's summary and JSON reports ---------------*- C++ -*-===//
//
// What tcc understood of a model (--emit=summary), and the JSON reports of a
// planned step (docs/usage.md lists their fields): the
// fusion decisions, and the memory plan with its categories, the
// recomputation, the host tiers' estimate and the activation-swap
// estimate.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_COMPILER_TCC_REPORTS_H
#define TCC_COMPILER_TCC_REPORTS_H

#include "compiler/Import/OnnxImporter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::tcc {

/// --emit=summary: what tcc understood of the model at `modelPath`, imported
/// as `module`: inputs, objective, outputs, parameters, buffers, op counts,
/// dropout.
void printSummary(ModuleOp module, StringRef modelPath, const ImportStats &stats,
                  llvm::raw_ostream &os);

/// --fusion-report: the fusion pass's decisions on `func`, to `path`.
LogicalResult writeFusionReport(func::FuncOp func, StringRef path);

/// --memory-report: the memory plan of `func` under `budget` (0: none),
/// with --pcie-gbps for the activation-swap estimate, to `path`.
LogicalResult writeMemoryReport(func::FuncOp func, int64_t budget, double pcieGbps, StringRef path);

} // namespace mlir::tcc

#endif // TCC_COMPILER_TCC_REPORTS_H
