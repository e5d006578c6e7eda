//===- StepBuilder.h - compile an emitted step into step.so -----*- C++ -*-===//
#ifndef TCC_CODEGEN_STEPBUILDER_H
#define TCC_CODEGEN_STEPBUILDER_H

#include "codegen/CpuEmitter.h"
#include "mlir/IR/Location.h"

#include <string>

namespace mlir::tcc {

struct StepBuildOptions {
  /// The C++ compiler; empty means $CXX, then c++, then g++.
  std::string compiler;
  /// Keep the build folder (source, weights, command) and report where.
  bool keepTemps = false;
};

/// Writes the step's source, the runtime headers and `weights` (the initial
/// parameter bytes, in the step's parameter order) into a temporary folder,
/// compiles them into a shared library and moves it to `outPath` (through a
/// temporary file beside it, so `outPath` is either the old file or the
/// complete new one). Failures are diagnostics at `loc`.
LogicalResult buildCpuStepLibrary(const CpuStep &step, llvm::StringRef weights,
                                  llvm::StringRef outPath, Location loc,
                                  const StepBuildOptions &options);

/// Writes the source and runtime headers into `dir` (for --emit=source).
LogicalResult writeCpuStepSources(const CpuStep &step, llvm::StringRef dir,
                                  Location loc);

} // namespace mlir::tcc

#endif // TCC_CODEGEN_STEPBUILDER_H
