//===- Pipeline.h - the tcc pipeline, registered once -----------*- C++ -*-===//
//
// The passes between the imported model and the planned step, in the order
// and with the options that `tcc` runs them. `tcc` builds its pass managers
// from these functions, and `tcc-opt` registers them as named pipelines
// (`--tcc-training-pipeline`, `--tcc-plan-pipeline`, `--tcc-pipeline`,
// `--tcc-kernel-pipeline`), so a
// developer can rerun on .mlir exactly what the driver ran.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_PIPELINE_H
#define TCC_PASSES_PIPELINE_H

#include "compiler/Dialect/TccOps.h"
#include "mlir/Pass/PassManager.h"

#include <string>

namespace mlir::tcc {

/// What the pipeline is built for: the driver's flags, in one place.
struct PipelineConfig {
  // The target, as tcc-set-target takes it (which refuses what it does not
  // know before any pass that depends on it runs).
  std::string target = "cuda"; // or "cpu"
  int64_t cudaArch = 90;
  std::string cpuPrecision = "f32"; // or "f64"
  // The training step.
  bool attentionFusion = true; // tcc-fuse-attention
  bool backward = true;        // the model has trainable parameters
  bool fusion = true;          // tcc-fuse-loss, tcc-chunk-loss, tcc-fuse
  /// tcc-chunk-loss: -1 chooses (chunks of at most 64M logits), 0 keeps the
  /// logits whole, N > 0 is rows per chunk.
  int64_t lossChunkRows = -1;
  /// tcc-pad-gemms (CUDA): pad misaligned GEMMs of at least this many
  /// GFLOPs; negative: off.
  double gemmPadGflops = 1.0;
  // The memory plan.
  int64_t budget = 0; // bytes; 0: no limit
  std::string rematPolicy = "greedy";
  int64_t statePerParam = 2; // AdamW 2, SGD 1
  // Host memory tiers (tcc-remat's offload options; CUDA only).
  std::string offload = "none"; // auto, optimizer, all
  double pcieGbps = 31.5;
  double hostGbps = 30.0;
  int64_t hostBudget = -1; // bytes; -1: MemAvailable
  // Saved activations copied to host memory instead of recomputed
  // (tcc-swap-activations; CUDA only): none, auto or all.
  std::string swapActivations = "none";
  // ZeRO-1: the ranks the optimizer state is sharded across (1: none).
  int64_t dataParallel = 1;
};

/// The imported model to the training step (forward and backward):
/// legalization, attention fusion, autodiff, cleanup, loss fusion and
/// chunking, the gradient sums split.
void buildTrainingPipeline(OpPassManager &pm, const PipelineConfig &config);

/// The training step to the planned step: the target recorded, mixed
/// precision (CUDA), fusion, rematerialisation within the budget, the memory
/// plan.
void buildPlanPipeline(OpPassManager &pm, const PipelineConfig &config);

/// The planned step to kernel IR (stage 6, the tcck dialect): what the CPU
/// step is emitted from (`tcc --emit=kernels`, and emitStep on a copy of the
/// planned module). The cuda target is refused, with a message, until its
/// emitter reads kernel IR.
void buildKernelPipeline(OpPassManager &pm);

/// Registers the pipelines above, and the first two in a row, with tcc-opt.
void registerTccPipelines();

} // namespace mlir::tcc

#endif // TCC_PASSES_PIPELINE_H
