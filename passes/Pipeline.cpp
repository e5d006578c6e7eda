//===- Pipeline.cpp - the tcc pipeline, registered once -------------------===//

#include "passes/Pipeline.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::tcc;

void mlir::tcc::buildTrainingPipeline(OpPassManager &pm, const PipelineConfig &config) {
  pm.addPass(createLegalize());
  if (config.attentionFusion)
    pm.addPass(createFuseAttention());
  if (config.backward)
    pm.addPass(createBuildBackward());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (config.fusion) {
    pm.addPass(createFuseLoss());
    ChunkLossOptions chunk;
    if (config.lossChunkRows == 0)
      chunk.maxChunkElements = 0;
    else if (config.lossChunkRows > 0)
      chunk.chunkRows = config.lossChunkRows;
    pm.addPass(createChunkLoss(chunk));
  }
  if (config.backward)
    pm.addPass(createSplitGradientSums());
}

void mlir::tcc::buildPlanPipeline(OpPassManager &pm, const PipelineConfig &config) {
  const bool cuda = config.target == stringifyTargetKind(TargetKind::Cuda);
  SetTargetOptions target;
  target.target = config.target;
  target.arch = config.cudaArch;
  if (!cuda)
    target.precision = config.cpuPrecision;
  pm.addPass(createSetTarget(target));
  if (cuda)
    pm.addPass(createMixedPrecision());
  if (cuda && config.gemmPadGflops >= 0) {
    PadGemmsOptions pad;
    pad.minGflops = config.gemmPadGflops;
    pm.addPass(createPadGemms(pad));
    pm.addPass(createCSEPass());
  }
  // Fusion first, so that rematerialisation plans exactly what is emitted
  // (and recomputes whole fused kernels).
  if (config.fusion) {
    // Reductions across rows are lowered by the CPU emitter only so far;
    // CUDA fuses row reductions, and the GEMM epilogues cuBLASLt runs.
    FuseOptions fuse;
    fuse.reductions = true;
    fuse.rowReductionsOnly = cuda;
    fuse.moves = true;
    fuse.gemmEpilogues = true;
    fuse.cublasLtEpilogues = cuda;
    pm.addPass(createFuse(fuse));
  }
  if (config.budget > 0 || config.rematPolicy != "greedy" || config.offload != "none") {
    RematOptions remat;
    remat.policy = config.rematPolicy;
    remat.budget = config.budget;
    remat.statePerParam = config.statePerParam;
    remat.offload = config.offload;
    remat.pcieGbps = config.pcieGbps;
    remat.hostGbps = config.hostGbps;
    remat.hostBudget = config.hostBudget;
    remat.dataParallel = config.dataParallel;
    pm.addPass(createRemat(remat));
  }
  if (cuda && config.swapActivations != "none") {
    SwapActivationsOptions swap;
    swap.mode = config.swapActivations;
    swap.budget = config.budget;
    swap.pcieGbps = config.pcieGbps;
    swap.hostBudget = config.hostBudget;
    swap.statePerParam = config.statePerParam;
    swap.dataParallel = config.dataParallel;
    pm.addPass(createSwapActivations(swap));
  }
  PlanMemoryOptions plan;
  plan.budget = config.budget;
  plan.statePerParam = config.statePerParam;
  plan.dataParallel = config.dataParallel;
  pm.addPass(createPlanMemory(plan));
}

namespace {

/// The pipelines' options on the tcc-opt command line, named as tcc's flags.
struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
  Option<std::string> target{*this, "target", llvm::cl::desc("cuda or cpu"),
                             llvm::cl::init("cuda")};
  Option<int64_t> cudaArch{*this, "cuda-arch",
                           llvm::cl::desc("the CUDA target's compute capability"),
                           llvm::cl::init(90)};
  Option<std::string> cpuPrecision{*this, "cpu-precision",
                                   llvm::cl::desc("the CPU target's float type: f32 or f64"),
                                   llvm::cl::init("f32")};
  Option<bool> attentionFusion{*this, "attention-fusion",
                               llvm::cl::desc("fuse attention into tcc.attention"),
                               llvm::cl::init(true)};
  Option<bool> backward{*this, "backward",
                        llvm::cl::desc("build the backward pass (the model trains)"),
                        llvm::cl::init(true)};
  Option<bool> fusion{*this, "fusion", llvm::cl::desc("fuse ops into kernels"),
                      llvm::cl::init(true)};
  Option<int64_t> lossChunkRows{
      *this, "loss-chunk-rows",
      llvm::cl::desc("rows of the logits per chunk: -1 chooses, 0 keeps them whole"),
      llvm::cl::init(-1)};
  Option<double> gemmPadGflops{
      *this, "gemm-pad-gflops",
      llvm::cl::desc("CUDA: pad misaligned GEMMs of at least this many GFLOPs (negative: off)"),
      llvm::cl::init(1.0)};
  Option<int64_t> budget{*this, "budget", llvm::cl::desc("the memory budget in bytes (0: none)"),
                         llvm::cl::init(0)};
  Option<std::string> rematPolicy{*this, "remat-policy",
                                  llvm::cl::desc("greedy, checkpoint-every-layer or checkpoint-sqrt"),
                                  llvm::cl::init("greedy")};
  Option<int64_t> statePerParam{*this, "state-per-param",
                                llvm::cl::desc("optimizer state tensors per parameter (AdamW 2, SGD 1)"),
                                llvm::cl::init(2)};
  Option<std::string> offload{*this, "offload",
                              llvm::cl::desc("none, auto, optimizer or all (host memory tiers)"),
                              llvm::cl::init("none")};
  Option<double> pcieGbps{*this, "pcie-gbps", llvm::cl::desc("host-device GB/s per direction"),
                          llvm::cl::init(31.5)};
  Option<double> hostGbps{*this, "host-gbps", llvm::cl::desc("host memory GB/s"),
                          llvm::cl::init(30.0)};
  Option<int64_t> hostBudget{*this, "host-budget",
                             llvm::cl::desc("host bytes the plan may use (-1: MemAvailable)"),
                             llvm::cl::init(-1)};
  Option<std::string> swapActivations{
      *this, "swap-activations",
      llvm::cl::desc("none, auto or all (saved activations in host memory instead of recomputed)"),
      llvm::cl::init("none")};
  Option<int64_t> dataParallel{*this, "data-parallel",
                               llvm::cl::desc("ranks the optimizer state is sharded across (ZeRO-1)"),
                               llvm::cl::init(1)};

  PipelineConfig config() const {
    PipelineConfig c;
    c.target = target;
    c.cudaArch = cudaArch;
    c.cpuPrecision = cpuPrecision;
    c.attentionFusion = attentionFusion;
    c.backward = backward;
    c.fusion = fusion;
    c.lossChunkRows = lossChunkRows;
    c.gemmPadGflops = gemmPadGflops;
    c.budget = budget;
    c.rematPolicy = rematPolicy;
    c.statePerParam = statePerParam;
    c.offload = offload;
    c.pcieGbps = pcieGbps;
    c.hostGbps = hostGbps;
    c.hostBudget = hostBudget;
    c.swapActivations = swapActivations;
    c.dataParallel = dataParallel;
    return c;
  }
};

} // namespace

void mlir::tcc::buildKernelPipeline(OpPassManager &pm) { pm.addPass(createLowerToKernels()); }

void mlir::tcc::registerTccPipelines() {
  PassPipelineRegistration<PipelineOptions>(
      "tcc-training-pipeline", "tcc's passes from the imported model to the training step",
      [](OpPassManager &pm, const PipelineOptions &o) { buildTrainingPipeline(pm, o.config()); });
  PassPipelineRegistration<PipelineOptions>(
      "tcc-plan-pipeline", "tcc's passes from the training step to the planned step",
      [](OpPassManager &pm, const PipelineOptions &o) { buildPlanPipeline(pm, o.config()); });
  PassPipelineRegistration<PipelineOptions>(
      "tcc-pipeline", "tcc's passes from the imported model to the planned step (both above)",
      [](OpPassManager &pm, const PipelineOptions &o) {
        buildTrainingPipeline(pm, o.config());
        buildPlanPipeline(pm, o.config());
      });
  PassPipelineRegistration<>("tcc-kernel-pipeline",
                             "tcc's passes from the planned step to kernel IR (the tcck dialect)",
                             [](OpPassManager &pm) { buildKernelPipeline(pm); });
}
