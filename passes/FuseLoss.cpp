//===- FuseLoss.cpp - a cross-entropy loss and its gradient in one op -----===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_FUSELOSS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

class FuseLossPass : public tcc::impl::FuseLossBase<FuseLossPass> {
public:
  void runOnOperation() override {
    SmallVector<SoftmaxCrossEntropyLossGradOp> grads;
    getOperation().walk([&](SoftmaxCrossEntropyLossGradOp g) { grads.push_back(g); });
    for (SoftmaxCrossEntropyLossGradOp g : grads)
      fuse(g);
  }

private:
  static void fuse(SoftmaxCrossEntropyLossGradOp g) {
    auto loss = g.getLogProb().getDefiningOp<SoftmaxCrossEntropyLossOp>();
    if (!loss || !loss.getLogProb().hasOneUse() || loss->getBlock() != g->getBlock())
      return;
    if (cast<RankedTensorType>(loss.getScores().getType()).getRank() != 2 ||
        loss.getReduction() == "none" || g.getReduction() != loss.getReduction() ||
        g.getLabels() != loss.getLabels() || g.getWeights() != loss.getWeights() ||
        g.getIgnoreIndex() != loss.getIgnoreIndex())
      return;
    // The seed must be available where the loss is computed (it is the
    // step's argument; anything defined after the loss is left alone).
    Value seed = g.getGrad();
    if (Operation *def = seed.getDefiningOp())
      if (def->getBlock() != loss->getBlock() || !def->isBeforeInBlock(loss))
        return;
    OpBuilder b(loss);
    auto fused = b.create<SoftmaxCrossEntropyLossWithGradOp>(
        loss.getLoc(), loss.getScores(), loss.getLabels(), seed,
        loss.getWeights(), loss.getReductionAttr(), loss.getIgnoreIndexAttr());
    loss.getOutput().replaceAllUsesWith(fused.getOutput());
    g.getResult().replaceAllUsesWith(fused.getDscores());
    g.erase();
    loss.erase();
  }
};

} // namespace
