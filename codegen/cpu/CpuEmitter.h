//===- CpuEmitter.h - the CPU target's step emitter -------------*- C++ -*-===//
//
// The CPU target's emitter: C++ that calls the reference kernels of
// runtime/cpu/kernels.h, one call per kernel and one loop nest per fused
// loop, over a host arena. Its kernels are CpuKernels.cpp's; the source
// around them (the tcc_step ABI's functions, apply) and tcc-translate's
// function are CpuStep.cpp's.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_CPU_CPUEMITTER_H
#define TCC_CODEGEN_CPU_CPUEMITTER_H

#include "codegen/EmitterImpl.h"

namespace mlir::tcc::codegen {

class CpuEmitter final : public Emitter {
public:
  CpuEmitter(func::FuncOp kernels, TargetAttr target, const StepEmitOptions &options)
      : Emitter(kernels, target, options) {}

  /// tcc-translate --tcck-to-cpp.
  FailureOr<std::string> translate() override;

private:
  LogicalResult emitKernel(Operation *op) override;
  std::string assemble(const Frame &f) override;
  std::string markText(size_t k) const override {
    return "  TCC_MARK(" + std::to_string(k) + ");\n";
  }
  std::string zeroText(uint64_t offset, const std::string &bytes) const override {
    return "  std::memset(arena + " + std::to_string(offset) + "ULL, 0, " + bytes + ");\n";
  }
  std::string convert(const std::string &ty, const std::string &x) const override {
    return "detail::conv<" + ty + ">(" + x + ")";
  }
  StringRef targetName() const override { return "CPU"; }
  /// The CPU step returns a kernel's index error.
  std::string checkedCall(const std::string &call) const override {
    return "  if (int rc = " + call + ") return rc;\n";
  }
  std::string floatType(bool) const override { return "F"; }
  LogicalResult bindWorkingCopy(Frame &f, unsigned i, Value arg) override;
  FailureOr<Buffer> hostParamBuffer(Frame &f, unsigned i, Value arg) override;
  std::string applyRow(const ApplyRowFields &r) const override;
  std::string shardRow(const ShardRowFields &r) const override;

  /// A fused loop kernel: one loop nest over its space (CpuKernels.cpp).
  LogicalResult emitLoop(tcck::LoopOp loop);
  class LoopWriter;
  /// A split or concat with the views and transposes of its parts: one
  /// copy loop.
  LogicalResult emitCopyLoop(tcck::CopyLoopOp loop);
  /// A GEMM whose elementwise epilogue runs on each product element as it
  /// is stored.
  LogicalResult emitGemmEpilogue(tcck::MatMulOp mm);
};

} // namespace mlir::tcc::codegen

#endif // TCC_CODEGEN_CPU_CPUEMITTER_H
