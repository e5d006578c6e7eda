//===- StepEmitter.h - the step's source for the CPU and CUDA targets -*- C++ -*-===//
//
// Emits the training step (or, for a model without parameters, the forward
// pass) behind the C ABI of runtime/tcc_step.h. Its body is the step lowered
// to kernels (tcc-lower-to-kernels, the tcck dialect), which the emitter runs
// on a copy of the module and then reads alone: the kernel function's
// signature and #tcc.layout give the frame (the tables, init), @apply the
// optimizer.
//
// The module's #tcc.target chooses:
//  * target "cpu": C++ that calls the reference kernels of
//    runtime/cpu/kernels.h, one call per kernel and one loop nest per fused
//    loop, over a host arena (codegen/cpu/CpuKernels.cpp). The test target that CI runs end to end and the numerical
//    reference for the CUDA target.
//  * target "cuda": CUDA C++ over a device arena with mixed precision (the
//    plan made with float-bytes = 2): one generated kernel per elementwise
//    fusion, runtime/cuda/kernels.cuh for the other ops, cuBLASLt GEMMs
//    (runtime/cuda/gemm.cuh), a multi-tensor optimizer, and the device
//    functions of the ABI (codegen/cuda/CudaKernels.cpp for the kernels).
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_STEPEMITTER_H
#define TCC_CODEGEN_STEPEMITTER_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace mlir::tcc {

/// The target comes from the module's #tcc.target: CUDA, or the CPU with
/// floats stored as f32 or, for gradient checks against finite differences,
/// f64.
struct StepEmitOptions {
  /// The model file's name and absolute path, recorded in the step's info
  /// table (the runtime's --save reads the model from there).
  std::string modelName;
  std::string modelPath;
  /// The --mem-budget the plan was made for (0: none), recorded for the
  /// runtime's check.
  int64_t memBudget = 0;
  /// The optimizer `tcc_step_apply` implements: "adamw" or "sgd".
  std::string optimizer = "adamw";
  /// Whether the library embeds the initial weights (weights.bin); without,
  /// tcc_step_init zeroes the parameters (tcc --no-weights).
  bool embedWeights = true;
  /// How the loss reads the step's inputs (tcc_step_info.objective):
  /// emitStep fills it from the module's tcc.objective ("" without one).
  std::string objective;
};

/// The module's tcc.objective as the step records it:
/// "task=causal-lm;ids=NAME;labels=NAME;mask=NAME;labels-shift=shifted"
/// (the fields it has, in this order), or "".
std::string objectiveString(ModuleOp module);

struct EmittedStep {
  std::string source;
  /// CUDA: the generated kernels, a unit of their own (step_kernels.cu),
  /// which `source` declares and launches; compiled in parallel with it.
  std::string kernelSource;
  /// "cpu" (source is C++, step.cpp) or "cuda" (CUDA C++, step.cu).
  std::string target = "cpu";
  /// Parameter names in the step's order: the initial-weights blob
  /// (`weights.bin`, which the source includes) holds them in this order.
  std::vector<std::string> params;
  uint64_t arenaBytes = 0;
};

/// Emits the step; failures are diagnostics on the offending op.
FailureOr<EmittedStep> emitStep(ModuleOp module, const StepEmitOptions &options);

/// tcc-translate --tcck-to-cpp: the CPU kernels of a module's one function in
/// kernel IR (tcc-lower-to-kernels' output, the tcck dialect), as the C++
/// function `int <name>(char *arena, double grad_scale, T *arg0, ...)` that
/// the CPU step's micro-step body is: the same text emitStep writes for each
/// kernel, the arguments as parameters instead of arena slots. Failures are
/// diagnostics on the op.
FailureOr<std::string> translateKernelsToCpp(ModuleOp module);

/// tcc-translate --tcck-to-cu: the same for a module whose target is cuda: a
/// CUDA unit with the step's generated kernels and the micro-step body as the
/// function `int <name>(char *arena, double grad_scale, T *arg0, ...)`, over
/// the fixed half's declarations (step_prelude.cuh). The constants it reads
/// lie after the arena (the kernel function's #tcc.layout gives its size),
/// where the frame copies them.
FailureOr<std::string> translateKernelsToCu(ModuleOp module);

} // namespace mlir::tcc

#endif // TCC_CODEGEN_STEPEMITTER_H
