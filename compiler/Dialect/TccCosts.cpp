//===- TccCosts.cpp - FLOP estimates of tcc ops (CostOpInterface) ---------===//
//
// One `getFlops` per op that has a cost of its own; the elementwise classes
// define theirs in TccOps.td from their `flops` parameter. tcc-remat ranks
// recompute candidates by these numbers and `tcc --memory-report` sums them,
// so the two agree on what a FLOP is. The weights are relative, not a
// timing model: a copy or a cheap elementwise op costs 1 per element, a
// transcendental one 4, GELU 8, a row statistic (softmax, LayerNorm, a
// reduction) 6 per input element, a matrix product 2MNK.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccOps.h"

using namespace mlir;
using namespace mlir::tcc;

int64_t mlir::tcc::elementsOf(Value v) {
  return std::max<int64_t>(cast<RankedTensorType>(v.getType()).getNumElements(), 1);
}

int64_t mlir::tcc::estimateFlops(Operation *op) {
  if (auto cost = dyn_cast<CostOpInterface>(op))
    return cost.getFlops();
  if (op->getNumResults() == 0 || op->hasTrait<OpTrait::ConstantLike>())
    return 0;
  int64_t n = 0;
  for (Value v : op->getResults())
    n = std::max(n, elementsOf(v));
  for (Value v : op->getOperands())
    n = std::max(n, elementsOf(v));
  return n;
}

/// A row statistic: 6 operations per element of its input.
static int64_t rowStatisticFlops(Value input) { return 6 * elementsOf(input); }

// Elementwise ops of their own kind.
int64_t WhereOp::getFlops() { return elementsOf(getResult()); }
int64_t CastOp::getFlops() { return elementsOf(getResult()); }
int64_t GeluOp::getFlops() { return 8 * elementsOf(getResult()); }
int64_t GeluGradOp::getFlops() { return 8 * elementsOf(getResult()); }
bool GeluGradOp::isRecomputable() { return false; }

// Copies and views: one per element moved.
int64_t ReshapeOp::getFlops() { return elementsOf(getResult()); }
int64_t TransposeOp::getFlops() { return elementsOf(getResult()); }
int64_t UnsqueezeOp::getFlops() { return elementsOf(getResult()); }
int64_t SqueezeOp::getFlops() { return elementsOf(getResult()); }
int64_t SliceOp::getFlops() { return elementsOf(getResult()); }
int64_t ConcatOp::getFlops() { return elementsOf(getResult()); }
int64_t ExpandOp::getFlops() { return elementsOf(getResult()); }
// A split copies its whole input, whichever result is wanted.
int64_t SplitOp::getFlops() { return elementsOf(getInput()); }

int64_t MatMulOp::getFlops() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  return 2 * elementsOf(getResult()) * lhs.getShape().back();
}

int64_t SoftmaxOp::getFlops() { return rowStatisticFlops(getInput()); }
int64_t LogSoftmaxOp::getFlops() { return rowStatisticFlops(getInput()); }
int64_t LayerNormalizationOp::getFlops() { return rowStatisticFlops(getInput()); }
int64_t ReduceMeanOp::getFlops() { return rowStatisticFlops(getInput()); }
int64_t ReduceSumOp::getFlops() { return rowStatisticFlops(getInput()); }

// Dropout's mask: a hash per element of the step's random state, which is
// always live, so a recomputed mask is the forward pass's.
int64_t RandomKeepOp::getFlops() { return 4 * elementsOf(getResult()); }

int64_t AttentionOp::getFlops() { return *attentionFlops(*this); }
int64_t AttentionGradOp::getFlops() { return *attentionFlops(*this); }
bool AttentionGradOp::isRecomputable() { return false; }

// Gathers read indices, which tcc-remat does not recompute, and the loss and
// the backward-only ops are never forward values kept for the backward pass.
int64_t GatherOp::getFlops() { return elementsOf(getResult()); }
bool GatherOp::isRecomputable() { return false; }
int64_t GatherGradOp::getFlops() { return elementsOf(getResult()); }
bool GatherGradOp::isRecomputable() { return false; }
int64_t SliceGradOp::getFlops() { return elementsOf(getResult()); }
bool SliceGradOp::isRecomputable() { return false; }
int64_t SoftmaxCrossEntropyLossOp::getFlops() {
  return rowStatisticFlops(getOperand(0));
}
bool SoftmaxCrossEntropyLossOp::isRecomputable() { return false; }
int64_t SoftmaxCrossEntropyLossGradOp::getFlops() {
  return rowStatisticFlops(getOperand(0));
}
bool SoftmaxCrossEntropyLossGradOp::isRecomputable() { return false; }
int64_t SoftmaxCrossEntropyLossWithGradOp::getFlops() {
  return rowStatisticFlops(getOperand(0));
}
bool SoftmaxCrossEntropyLossWithGradOp::isRecomputable() { return false; }

/// The ops of a fusion's body that its kernel computes: a transpose inside
/// a GEMM fusion is read through the GEMM's transpose flag, not computed.
static auto computedOps(FusionOp fusion) {
  Block &body = fusion.getBody().front();
  bool gemm = llvm::any_of(body, [](Operation &op) { return isa<MatMulOp>(op); });
  return llvm::make_filter_range(body.without_terminator(), [gemm](Operation &op) {
    return !(gemm && isa<TransposeOp>(op));
  });
}

int64_t FusionOp::getFlops() {
  int64_t total = 0;
  for (Operation &op : computedOps(*this))
    total += estimateFlops(&op);
  return total;
}

// A fusion is recomputed whole, so every op it computes must be recomputable.
bool FusionOp::isRecomputable() {
  return llvm::all_of(computedOps(*this), [](Operation &op) {
    auto cost = dyn_cast<CostOpInterface>(op);
    return cost && cost.isRecomputable() && op.getNumResults() > 0 &&
           !op.hasTrait<OpTrait::ConstantLike>();
  });
}
