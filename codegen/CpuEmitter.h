//===- CpuEmitter.h - C++ source for the CPU target -------------*- C++ -*-===//
//
// Emits the training step (or, for a model without parameters, the forward
// pass) as C++ that calls the reference kernels of runtime/cpu/kernels.h,
// one call per op, over a single arena laid out by the emitter, behind the C
// ABI of runtime/tcc_step.h. This is the CPU target: the test target that CI
// runs end to end and the numerical reference for the CUDA target.
//
// Input: a module holding `@micro_step` (after tcc-build-backward) or the
// imported `@main`. Every buffer gets its own arena slot for now; memory
// planning (offset reuse) comes with the planner.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_CPUEMITTER_H
#define TCC_CODEGEN_CPUEMITTER_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace mlir::tcc {

struct CpuEmitOptions {
  /// Compute and store floating-point values in double instead of float
  /// (for gradient checks against finite differences).
  bool useDouble = false;
  /// The model file's name and absolute path, recorded in the step's info
  /// table (the runtime's --save reads the model from there).
  std::string modelName;
  std::string modelPath;
  /// The --mem-budget the plan was made for (0: none), recorded for the
  /// runtime's check.
  int64_t memBudget = 0;
  /// The optimizer `tcc_step_apply` implements: "adamw" or "sgd".
  std::string optimizer = "adamw";
  /// "cpu": C++ over runtime/cpu/kernels.h on a host arena. "cuda": CUDA C++
  /// over runtime/cuda/{kernels,gemm}.cuh on a device arena, mixed precision
  /// (the plan must have been made with float-bytes = 2), one kernel per
  /// fusion, cuBLASLt GEMMs.
  std::string target = "cpu";
  /// Whether the library embeds the initial weights (weights.bin); without,
  /// tcc_step_init zeroes the parameters (tcc --no-weights).
  bool embedWeights = true;
};

struct CpuStep {
  std::string source;
  /// "cpu" (source is C++, step.cpp) or "cuda" (CUDA C++, step.cu).
  std::string target = "cpu";
  /// Parameter names in the step's order: the initial-weights blob
  /// (`weights.bin`, which the source includes) holds them in this order.
  std::vector<std::string> params;
  uint64_t arenaBytes = 0;
};

/// Emits the step; failures are diagnostics on the offending op.
FailureOr<CpuStep> emitCpuStep(ModuleOp module, const CpuEmitOptions &options);

} // namespace mlir::tcc

#endif // TCC_CODEGEN_CPUEMITTER_H
