//===- Reports.h - tcc's --fusion-report and --memory-report -----*- C++ -*-===//
//
// The JSON reports of a planned step (docs/usage.md lists their fields): the
// fusion decisions, and the memory plan with its categories, the
// recomputation, the host tiers' estimate and the activation-swap
// estimate.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_COMPILER_TCC_REPORTS_H
#define TCC_COMPILER_TCC_REPORTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::tcc {

/// --fusion-report: the fusion pass's decisions on `func`, to `path`.
LogicalResult writeFusionReport(func::FuncOp func, StringRef path);

/// --memory-report: the memory plan of `func` under `budget` (0: none),
/// with --pcie-gbps for the activation-swap estimate, to `path`.
LogicalResult writeMemoryReport(func::FuncOp func, int64_t budget, double pcieGbps, StringRef path);

} // namespace mlir::tcc

#endif // TCC_COMPILER_TCC_REPORTS_H
