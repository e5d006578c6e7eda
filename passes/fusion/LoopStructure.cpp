//===- LoopStructure.cpp - the loop nest of a fused loop kernel ------------===//

#include "passes/fusion/LoopStructure.h"
#include "passes/fusion/FusionCostModel.h"

#include "compiler/Dialect/TccOps.h"

using namespace mlir;
using namespace mlir::tcc;

FailureOr<LoopFusion> mlir::tcc::classifyLoopFusion(FusionOp fusion) {
  return classifyLoopFusion(fusion.getBody().front(),
                            cast<RankedTensorType>(fusion.getResult(0).getType()).getShape(),
                            fusion);
}

FailureOr<LoopFusion> mlir::tcc::classifyLoopFusion(Block &body, ArrayRef<int64_t> resultShape,
                                                   Operation *owner) {
  using Kind = LoopFusion::Kind;
  auto tensor = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  LoopFusion lf;
  SmallVector<int64_t> &shape = lf.shape;
  for (Operation &op : body.without_terminator())
    if (isa<ReduceSumOp, ReduceMeanOp>(op)) {
      auto in = tensor(op.getOperand(0)).getShape();
      shape.assign(in.begin(), in.end());
      break;
    }
  if (llvm::none_of(body.without_terminator(), [](Operation &op) {
        return isa<ReduceSumOp, ReduceMeanOp>(op);
      })) {
    shape.assign(resultShape.begin(), resultShape.end());
  }
  lf.rowShape = FusionCostModel::rowShape(shape);
  SmallVector<int64_t> &rowShape = lf.rowShape;

  // Classify the body's ops and give each value its pass (stage).
  llvm::DenseMap<Operation *, Kind> &kind = lf.kind;
  llvm::DenseMap<Value, int64_t> &stage = lf.stage;
  bool &rows = lf.rows;
  int64_t &lastPass = lf.lastPass;
  for (Operation &op : body.without_terminator()) {
    auto stageOf = [&](Value v) { return stage.lookup(v); };
    int64_t st = 0;
    for (Value v : op.getOperands())
      st = std::max(st, stageOf(v));
    Value r = op.getResult(0);
    if (isa<ReduceSumOp, ReduceMeanOp>(op)) {
      if (tensor(op.getOperand(0)).getShape() != ArrayRef(shape))
        return op.emitOpError("reduces a value of another shape than the fusion's loop");
      if (FusionCostModel::isRowReduction(&op, shape)) {
        kind[&op] = Kind::RowReduction;
        stage[r] = st + 1;
        rows = true;
      } else {
        kind[&op] = Kind::Reduction;
      }
      lastPass = std::max(lastPass, st);
      continue;
    }
    if (tensor(r).getShape() == ArrayRef(shape)) {
      kind[&op] = Kind::Element;
      lastPass = std::max(lastPass, st);
    } else if (!rowShape.empty() && tensor(r).getShape() == ArrayRef(rowShape)) {
      kind[&op] = Kind::Row;
      rows = true;
    } else {
      return op.emitOpError("has a shape that is neither the fusion's loop's "
                            "nor its rows'");
    }
    stage[r] = st;
  }
  for (Value v : body.getTerminator()->getOperands())
    if (!v.getDefiningOp())
      return owner->emitOpError("yields a body argument");
  return lf;
}

/// The values pass `pass` of a loop fusion computes: the operands of the
/// reductions it feeds and the element values it writes (`isResult`), with
/// the element values (and body arguments) they are computed from.
llvm::DenseSet<Value> mlir::tcc::passValues(Block &body, const LoopFusion &lf, int64_t pass,
                                            llvm::function_ref<bool(Value)> isResult) {
  using Kind = LoopFusion::Kind;
  llvm::DenseSet<Value> needed;
  SmallVector<Value> work;
  for (Operation &op : body.without_terminator()) {
    Kind kd = lf.kind.lookup(&op);
    if ((kd == Kind::RowReduction || kd == Kind::Reduction) &&
        lf.stage.lookup(op.getOperand(0)) == pass)
      work.push_back(op.getOperand(0));
    if (kd == Kind::Element && lf.stage.lookup(op.getResult(0)) == pass &&
        isResult(op.getResult(0)))
      work.push_back(op.getResult(0));
  }
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!needed.insert(v).second)
      continue;
    if (Operation *def = v.getDefiningOp())
      if (lf.kind.lookup(def) == Kind::Element)
        for (Value operand : def->getOperands())
          work.push_back(operand);
  }
  return needed;
}

