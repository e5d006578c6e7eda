//===- CudaEmitter.h - the CUDA target's step emitter -----------*- C++ -*-===//
//
// The CUDA target's emitter: CUDA C++ over a device arena with mixed
// precision (each buffer's element type is its storage type: fp16, or fp32
// where the plan keeps it), one generated kernel per fused loop, the CUDA
// kernel library (runtime/cuda/kernels.cuh), cuBLASLt GEMMs
// (runtime/cuda/gemm.cuh) and the fixed half's hooks (runtime/cuda/
// step_host.cu). Its kernels are CudaKernels.cpp's; the generated half of
// the step around them and tcc-translate's unit are CudaStep.cpp's.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_CUDA_CUDAEMITTER_H
#define TCC_CODEGEN_CUDA_CUDAEMITTER_H

#include "codegen/EmitterImpl.h"

namespace mlir::tcc::codegen {

/// The CUDA units' launch-size helper, in step.cu and in tcc-translate's unit.
inline constexpr const char *kCudaGridFor =
    "inline unsigned grid_for(int64_t n) {\n"
    "  return (unsigned)std::min<int64_t>(std::max<int64_t>((n + 255) / 256, 1), 65535LL * 32);\n"
    "}\n\n";

class CudaEmitter final : public Emitter {
public:
  CudaEmitter(func::FuncOp kernels, TargetAttr target, const StepEmitOptions &options)
      : Emitter(kernels, target, options) {}

  /// tcc-translate --tcck-to-cu.
  FailureOr<std::string> translate() override;

private:
  LogicalResult emitKernel(Operation *op) override;
  std::string assemble(const Frame &f) override;
  std::string markText(size_t k) const override {
    return "  if (g_prof) { if (int rc_ = prof_mark(" + std::to_string(k) + ")) return rc_; }\n";
  }
  std::string zeroText(uint64_t offset, const std::string &bytes) const override {
    return "  cudaMemsetAsync(arena + " + std::to_string(offset) + "ULL, 0, " + bytes +
           ", stream());\n";
  }
  std::string storageType(Value v) const override;
  /// Fused code computes every float in fp32.
  std::string computeType(Type elt) const override {
    return isa<FloatType>(elt) ? "float" : ctype(elt);
  }
  std::string convert(const std::string &ty, const std::string &x) const override {
    return "conv<" + ty + ">(" + x + ")";
  }
  StringRef targetName() const override { return "CUDA"; }
  /// CUDA kernels set the device error flag, read after the step.
  std::string checkedCall(const std::string &call) const override { return "  " + call + ";\n"; }
  std::string floatType(bool working) const override { return working ? "__half" : "float"; }
  std::string lossScratch() const override { return ", g_scratch"; }
  std::string attentionKernel(const AttentionShape &s, Value bias, bool softcap) override {
    // Cap defaults to 0: a step without a soft cap names the prebuilt launcher.
    return llvm::formatv("<{0}, {1}{2}>", (std::max(s.d, s.dv) + 15) / 16, bias ? 1 : 0,
                         softcap ? ", 1" : "")
        .str();
  }
  LogicalResult bindWorkingCopy(Frame &f, unsigned i, Value arg) override;
  FailureOr<Buffer> hostParamBuffer(Frame &f, unsigned i, Value arg) override;
  std::string applyRow(const ApplyRowFields &r) const override;
  std::string shardRow(const ShardRowFields &r) const override;

  // Kernels (CudaKernels.cpp).
  /// A library call, with the CUDA target's own: accumulating reduces,
  /// the loss with its gradient (over the step's scratch), and no Gemm.
  LogicalResult emitCall(tcck::CallOp call);
  /// A fused elementwise loop: one grid-stride kernel.
  LogicalResult emitLoop(tcck::LoopOp loop);
  /// A fused loop with row reductions (softmax, LayerNorm and their
  /// backward passes): one warp per row (one block for rows over 1024);
  /// `lf`, its structure as the lowering recorded it.
  LogicalResult emitRowLoop(tcck::LoopOp loop, const LoopFusion &lf);
  class RowLoopWriter;
  /// A copy loop: the general copy loop as a kernel.
  LogicalResult emitCopyLoop(tcck::CopyLoopOp loop);
  /// A GEMM: cuBLASLt (into fp16, or added into an fp32 accumulator), or a
  /// dot product for two vectors.
  LogicalResult emitMatMul(tcck::MatMulOp mm);
  /// A GEMM with an epilogue as one cuBLASLt matmul (bias, then a tanh
  /// GELU or a residual; tcc-fuse's cublaslt-epilogues).
  LogicalResult emitCublasLtEpilogue(tcck::MatMulOp mm);
  /// The fp16 working copy of argument `arg` at arena offset `at`, declared
  /// in the body (CudaStep.cpp).
  Buffer workingCopy(Value arg, int64_t at);
  /// "__restrict__ " for a kernel pointer to `v`, one of a kernel's `ins`
  /// or `outs`, unless an input and an output share their bytes there (a
  /// result the plan writes over a dying operand, tcc::inPlaceOperand).
  std::string restrictFor(ValueRange ins, ValueRange outs, Value v);
  /// Appends a generated kernel's text, named `name`, and declares it;
  /// returns the name to launch: that of an earlier kernel whose text is
  /// the same but for its name and its first line (the op and location it
  /// came from), which is then not added again (a model's layers make the
  /// same kernels, and nvcc compiles each once).
  std::string addKernel(const std::string &text, const std::string &name);
  /// ZeRO-1: the flat spaces' table and each trainable parameter's place in
  /// them, and their part of the StepDesc (CudaStep.cpp).
  void shardTables(const Frame &f);

  unsigned nextGemm = 0;
  uint64_t constBytes = 0;   // static constants, after the arena
  std::string constTable;    // {host array, bytes, device offset}
  std::string kernels;       // __global__ functions (step_kernels.cu)
  std::string kernelDecls;   // their declarations, in step.cu
  /// Each kernel added, by its text without its first line and with its
  /// name as "@": the kernel's name.
  llvm::StringMap<std::string> kernelNames;
  std::string shadowRefresh; // fp16 copies of the parameters
  std::string seedFill;      // sets the backward seed (outside the graph)
  /// The kernel or library call launched since the last mark (the op table
  /// names it).
  std::string launched;
  /// The copies of gradients to host accumulators (HostGradRow
  /// initializers, in the order the micro-step queues them).
  std::string hostGradTable;
  int hostGradCount = 0;
  /// The swapped activations (SwapRow initializers, by swap number).
  std::string swapTable;
  int swapCount = 0;
  // ZeRO-1: the shard tables, and their part of the StepDesc.
  std::string shards, shardDesc;
};

} // namespace mlir::tcc::codegen

#endif // TCC_CODEGEN_CUDA_CUDAEMITTER_H
