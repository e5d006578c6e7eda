//===- StoragePrecision.cpp - which values the CUDA target stores in fp32 -===//
//
// Under mixed precision (the CUDA target) every float value is stored in
// fp16 but those these rules name: the loss and what only scalar
// reductions or softmaxes read, reductions and row statistics and what is
// computed from them at their shape, a LayerNorm's statistics, attention's
// log-sum-exp, the GEMM products that go to host accumulators, and views
// and broadcasts of an fp32 value. The memory plan sizes values by them
// (valueBytes), tcc-mixed-precision casts GEMM operands by them, and the
// kernel lowering types buffers by them. (Issue 44 moves this decision
// into the IR's types.)
//
//===----------------------------------------------------------------------===//

#include "passes/PlanMemory.h"
#include "passes/fusion/FusionCostModel.h"

#include "compiler/Dialect/TccOps.h"

using namespace mlir;
using namespace mlir::tcc;

/// Whether `v` is read, directly or through views, only by reductions to one
/// element.
static bool onlyScalarReductionsRead(Value v) {
  return !v.use_empty() && llvm::all_of(v.getUsers(), [](Operation *u) {
    if (isAliasView(u))
      return onlyScalarReductionsRead(u->getResult(0));
    // A swapped value (tcc-swap-activations) is read where its copy back
    // is read; its copy back is stored as it is.
    if (isa<SwapWaitOp>(u))
      return true;
    if (isa<SwapOutOp, SwapInOp>(u))
      return onlyScalarReductionsRead(u->getResult(0));
    return isa<ReduceSumOp, ReduceMeanOp>(u) &&
           cast<RankedTensorType>(u->getResult(0).getType()).getNumElements() == 1;
  });
}

/// Whether `v` is read, directly or through views, only by softmaxes.
static bool onlySoftmaxesRead(Value v) {
  return !v.use_empty() && llvm::all_of(v.getUsers(), [](Operation *u) {
    if (isAliasView(u) || isa<SwapOutOp, SwapInOp>(u))
      return onlySoftmaxesRead(u->getResult(0));
    return isa<SwapWaitOp, SoftmaxOp, LogSoftmaxOp>(u);
  });
}

bool mlir::tcc::storedAsF32(Value v) {
  if (isa<BlockArgument>(v))
    return cast<RankedTensorType>(v.getType()).getRank() == 0;
  if (keepsF32(v))
    return true;
  Operation *def = v.getDefiningOp();
  while (def && isAliasView(def)) {
    Value in = def->getOperand(0);
    if (keepsF32(in))
      return true;
    def = in.getDefiningOp();
  }
  return def && isStaticConstant(def);
}

/// Whether `v` is a row statistic: a reduction's result that keeps its
/// last axis as 1 (a norm's mean or variance, a sum in a norm's backward
/// pass), or computed elementwise at its shape from one (1/sqrt(var + eps),
/// -0.5 * sum * rstd^3 / D). Looks through at most `depth` elementwise ops.
/// (The memory plan asks for every value it sizes, many times: a value
/// whose last axis is longer than 1 is not one, at once.)
static bool isRowStatistic(Value v, int depth = 6) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
  if (shape.empty() || shape.back() != 1)
    return false;
  // In a fusion's body, an argument is the fusion's input.
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto fusion = dyn_cast_or_null<FusionOp>(arg.getOwner()->getParentOp()))
      v = fusion.getInputs()[arg.getArgNumber()];
  Operation *op = v.getDefiningOp();
  if (!op)
    return false;
  // A fusion's result is the value its body yields.
  if (auto fusion = dyn_cast<FusionOp>(op))
    return isRowStatistic(cast<YieldOp>(fusion.getBody().front().getTerminator())
                              .getValues()[cast<OpResult>(v).getResultNumber()],
                          depth);
  if (isa<ReduceSumOp, ReduceMeanOp>(op))
    return true;
  // A cast stores what it is cast to (tcc-mixed-precision's fp16 operand
  // of a GEMM).
  if (depth == 0 || !FusionCostModel::isElementwise(op) || isa<CastOp>(op))
    return false;
  return llvm::any_of(op->getOperands(), [&](Value u) {
    return u.getType() == v.getType() && isRowStatistic(u, depth - 1);
  });
}

bool mlir::tcc::keepsF32(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  if (!isa<FloatType>(t.getElementType()))
    return false;
  if (t.getRank() == 0)
    return true;
  Operation *op = v.getDefiningOp();
  if (!op)
    return false;
  // A swapped value's bytes in host memory and back are the original's.
  if (isa<SwapOutOp, SwapInOp>(op))
    return keepsF32(op->getOperand(0));
  // What only reductions to one element read (a composite loss: the squared
  // errors of an MSE, a per-token loss before its mean), directly or through
  // views, is the loss's input, computed in fp32 as the loss is (fp16
  // overflows past 65504). Only for values of elementwise code: GEMMs and
  // copies write fp16, and a view is stored as its root.
  // So is what only softmaxes read (an unfused attention's scores with
  // their masks added), computed in fp32 as the softmax is: an additive
  // mask's sentinel (float32's lowest, Keras' -1e9) is finite there, where
  // fp16 makes it -inf, and a query whose keys are all masked (Keras' padded
  // queries) would get NaN where float32 gives a uniform row.
  if (!isAliasView(op) && (onlyScalarReductionsRead(v) || onlySoftmaxesRead(v)) &&
      (FusionCostModel::isElementwise(op) ||
       (isa<FusionOp>(op) && (cast<FusionOp>(op).getKind() == FusionKind::Loop ||
                               cast<FusionOp>(op).getKind() == FusionKind::Reduction))))
    return true;
  // A GEMM product that goes to an accumulator in host memory (#tcc.tiers)
  // is written in fp32, as a device accumulator takes it in place
  // (accumulatedInPlace): rounding it to fp16 first would make the host
  // tier's gradients differ from the device's, and the copy down counts 4
  // bytes an element either way (TierCostModel).
  if (v.hasOneUse() && isGradientToHost(*v.use_begin()) && isPlainGemm(op))
    return true;
  // A fusion's result is stored as the value its body yields would be.
  if (auto fusion = dyn_cast<FusionOp>(op))
    return keepsF32(cast<YieldOp>(fusion.getBody().front().getTerminator())
                        .getValues()[cast<OpResult>(v).getResultNumber()]);
  if (isa<ReduceSumOp, ReduceMeanOp, SoftmaxCrossEntropyLossOp, GatherGradOp>(op))
    return true;
  // What is computed from a row statistic at its shape is one too, kept in
  // fp32 as the statistic is (and as PyTorch's autocast keeps a norm): a
  // norm's backward multiplies a sum of the loss-scaled gradient by
  // rstd^3, which overflows fp16 long before the gradient does.
  if (FusionCostModel::isElementwise(op) && isRowStatistic(v))
    return true;
  if (isa<LayerNormalizationOp>(op))
    return cast<OpResult>(v).getResultNumber() > 0;
  if (isa<AttentionOp>(op)) // the log-sum-exp
    return cast<OpResult>(v).getResultNumber() == 1;
  // Broadcasts, transposes and views of an fp32 value stay fp32: the
  // backward pass's seed (the loss scale, 65536 by default, past fp16's
  // 65504) reaches elementwise ops through them.
  if (isa<ExpandOp, TransposeOp, ReshapeOp, SqueezeOp, UnsqueezeOp, IdentityOp>(op))
    return keepsF32(op->getOperand(0));
  return false;
}
