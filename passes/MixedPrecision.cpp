//===- MixedPrecision.cpp - fp16 operands for the CUDA target's GEMMs ------===//

#include "passes/PlanMemory.h"
#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

class MixedPrecisionPass
    : public tcc::impl::MixedPrecisionBase<MixedPrecisionPass> {
public:
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<MatMulOp, AttentionOp, AttentionGradOp>(op) ||
          (isa<ConcatOp>(op) && !keepsF32(op->getResult(0))))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      // One cast per value and op: tcc.attention's packed layout reads one
      // value as query, key and value, and must go on reading one.
      llvm::SmallDenseMap<Value, Value> casts;
      for (OpOperand &use : op->getOpOperands()) {
        // The attention kernels read fp16 tensors and the fp32 log-sum-exp.
        if (auto grad = dyn_cast<AttentionGradOp>(op);
            grad && use.get() == grad.getLse())
          continue;
        Value v = use.get();
        auto t = cast<RankedTensorType>(v.getType());
        if (!isa<FloatType>(t.getElementType()) || !storedAsF32(v))
          continue;
        Value &c = casts[v];
        if (!c) {
          OpBuilder b(op);
          c = b.create<CastOp>(op->getLoc(), t, v, TypeAttr::get(t.getElementType()));
        }
        use.set(c);
      }
    }
  }
};

} // namespace
