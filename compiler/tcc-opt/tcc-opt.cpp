//===- tcc-opt.cpp - runs tcc passes on MLIR text ---------------------------===//
//
// MlirOptMain with only the dialects tcc uses and tcc's passes and pipelines
// (the ones `tcc` runs, passes/Pipeline.h), plus the upstream canonicalizer
// and CSE, which run the tcc folders.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccDialect.h"
#include "compiler/Kernel/TcckDialect.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::tcc::registerTccPasses();
  mlir::tcc::registerTccPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();

  mlir::DialectRegistry registry;
  registry.insert<mlir::tcc::TccDialect, mlir::tcck::TcckDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "tcc optimizer driver\n", registry));
}
