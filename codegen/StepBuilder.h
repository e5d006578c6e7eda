//===- StepBuilder.h - compile an emitted step into step.so -----*- C++ -*-===//
#ifndef TCC_CODEGEN_STEPBUILDER_H
#define TCC_CODEGEN_STEPBUILDER_H

#include "codegen/StepEmitter.h"
#include "mlir/IR/Location.h"

#include <string>
#include <vector>

namespace mlir::tcc {

struct StepBuildOptions {
  /// The C++ compiler; empty means $CXX, then c++, then g++.
  std::string compiler;
  /// Keep the build folder (source, weights, command) and report where.
  bool keepTemps = false;
  /// CUDA target: nvcc (empty: $CUDACXX, /usr/local/cuda/bin/nvcc, then
  /// nvcc on PATH) and the GPU architecture it compiles for (sm_<arch>).
  std::string nvcc;
  std::string cudaArch = "90";
  /// CUDA target: build with the host compiler against tcc's CUDA emulation
  /// (runtime/cuda/emu), so the step runs on the CPU, for tests.
  bool cudaEmulation = false;
  /// CPU target: the CBLAS library linked into the step for its fp32 GEMMs
  /// (runtime/cpu/kernels.h's TCC_CPU_BLAS); empty: the reference GEMM.
  std::string cpuBlas;
};

/// The CBLAS library tcc was configured with (CMake's
/// TCC_CPU_BLAS_LIBRARY), when it is still there; "" otherwise.
std::string configuredCpuBlas();

/// One compiler run of a step's build, in its build folder: the arguments
/// after the compiler's name, and the log it writes.
struct BuildCommand {
  std::vector<std::string> args;
  std::string log;
  std::string object; // what a compile writes
  bool link = false;  // after the compiles, which run in parallel
  bool optional = false; // its failure costs only time (the precompiled prelude)
};

/// What build.sh in an --emit=source folder runs, and tcc too: a step's
/// generated half (step.cu or step.cpp) and its fixed half, linked. The
/// fixed half is runtime/cuda's step_host.cu, step_comm.cu, gemm.cu and
/// kernels.cu for the CUDA target and runtime/cpu/kernels.cpp for the CPU
/// target, or
/// `prebuiltFixed`: their objects, compiled before with the same compiler
/// and flags.
std::vector<BuildCommand> stepBuildCommands(const EmittedStep &step,
                                            const StepBuildOptions &options,
                                            llvm::ArrayRef<std::string> prebuiltFixed);

/// The name of the compiled fixed half's variant: "cpu", "cuda-emu",
/// "cuda-sm_90".
std::string prebuiltRuntimeVariant(const EmittedStep &step, const StepBuildOptions &options);

/// Writes the step's source, the runtime headers and `weights` (the initial
/// parameter bytes, in the step's parameter order) into a temporary folder,
/// compiles them into a shared library and moves it to `outPath` (through a
/// temporary file beside it, so `outPath` is either the old file or the
/// complete new one). Failures are diagnostics at `loc`.
LogicalResult buildStepLibrary(const EmittedStep &step, llvm::StringRef weights,
                                  llvm::StringRef outPath, Location loc,
                                  const StepBuildOptions &options);

/// tcc --with-eval: appends the evaluation step library `evalLib` to the
/// training step library `trainLib` (both built by buildStepLibrary), then
/// its size (8 bytes, little-endian) and runtime/tcc_step.h's
/// TCC_STEP_EVAL_MAGIC, and renames `trainLib` to `outPath`. The dynamic
/// loader maps only what the first image's program headers name, so the
/// bytes after it travel with step.so unread; tcc-run
/// (runtime/lib/evaluator.cpp) reads them. Failures are diagnostics at
/// `loc`; `outPath` is then untouched.
LogicalResult packEvaluationStep(llvm::StringRef trainLib, llvm::StringRef evalLib,
                                 llvm::StringRef outPath, Location loc);

/// Writes the source, the runtime headers and build.sh (which builds
/// step.so there with the same command tcc uses) into `dir`.
LogicalResult writeStepSources(const EmittedStep &step, llvm::StringRef dir,
                                  Location loc,
                                  const StepBuildOptions &options = {});

} // namespace mlir::tcc

#endif // TCC_CODEGEN_STEPBUILDER_H
