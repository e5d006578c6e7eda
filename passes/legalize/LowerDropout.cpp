//===- LowerDropout.cpp - training-mode dropout -> random_keep + where ----===//
//
// Dropout with ratio p > 0 in training mode becomes
//
//   %keep = tcc.random_keep %rng {ratio = p, stream = k, shape = ...}
//   %y    = tcc.where %keep, (x * 1/(1-p)), 0
//
// with %rng the function's random-state argument (added here, marked
// tcc.rng) and k the dropout's position among the function's dropouts. The
// gradient then follows from where's and mul's rules, and since the mask is
// a function of (state, k, index) alone, whoever needs it again (the
// backward pass, a recomputation) can regenerate it.
//
//===----------------------------------------------------------------------===//

#include "passes/legalize/Patterns.h"

#include "compiler/Dialect/TccOps.h"
#include "passes/Passes.h"

using namespace mlir;
using namespace mlir::tcc;

/// The function's random-state argument, added at the end if it has none.
static Value randomState(func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kRngAttr))
      return func.getArgument(i);
  Builder b(func.getContext());
  func.insertArgument(func.getNumArguments(),
                      RankedTensorType::get({2}, b.getI64Type()),
                      b.getDictionaryAttr(b.getNamedAttr(kRngAttr, b.getUnitAttr())),
                      func.getLoc());
  return func.getArgument(func.getNumArguments() - 1);
}

/// A rank-0 constant of element type `elt`.
static Value scalar(OpBuilder &b, Location loc, Type elt, double value) {
  auto t = RankedTensorType::get({}, elt);
  return b.create<ConstantOp>(
      loc, DenseElementsAttr::get(t, ArrayRef<Attribute>{b.getFloatAttr(elt, value)}));
}

void mlir::tcc::lowerTrainingDropout(func::FuncOp func) {
  SmallVector<DropoutOp> dropouts;
  func.walk([&](DropoutOp d) {
    if (d.getTraining() && !d.getRatio().isZero())
      dropouts.push_back(d);
  });
  if (dropouts.empty())
    return;
  Value rng = randomState(func);
  // New streams follow any the function already draws from (a second run
  // of the pass, or hand-written IR), so no two dropouts share a mask.
  int64_t first = 0;
  func.walk([&](Operation *op) {
    if (auto keep = dyn_cast<RandomKeepOp>(op))
      first = std::max(first, keep.getStreamAttr().getInt() + 1);
    else if (auto s = op->getAttrOfType<IntegerAttr>("dropout_stream"))
      first = std::max(first, s.getInt() + 1);
  });
  for (auto [k, d] : llvm::enumerate(dropouts)) {
    int64_t stream = first + static_cast<int64_t>(k);
    OpBuilder b(d);
    Location loc = d.getLoc();
    auto t = cast<RankedTensorType>(d.getInput().getType());
    double ratio = d.getRatio().convertToDouble();
    Value keep = b.create<RandomKeepOp>(loc, rng, d.getRatioAttr(),
                                        b.getI64IntegerAttr(stream),
                                        b.getDenseI64ArrayAttr(t.getShape()));
    Value scaled = b.create<MulOp>(loc, d.getInput(),
                                   scalar(b, loc, t.getElementType(), 1.0 / (1.0 - ratio)));
    Value y = b.create<WhereOp>(loc, keep, scaled, scalar(b, loc, t.getElementType(), 0.0));
    d.getOutput().replaceAllUsesWith(y);
    d.getMask().replaceAllUsesWith(keep);
    d.erase();
  }
}
