//===- SplitGradientSums.cpp - a gradient's terms as results of their own ===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_SPLITGRADIENTSUMS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

class SplitGradientSumsPass
    : public tcc::impl::SplitGradientSumsBase<SplitGradientSumsPass> {
public:
  void runOnOperation() override {
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        split(func);
  }

private:
  /// Appends to `terms` the terms of the sum `v`, which only the return reads.
  static void termsOf(Value v, SmallVectorImpl<Value> &terms,
                      SmallVectorImpl<Operation *> &sums) {
    auto add = v.getDefiningOp<AddOp>();
    if (!add || !v.hasOneUse() || add.getLhs().getType() != v.getType() ||
        add.getRhs().getType() != v.getType() || add.getLhs() == add.getRhs()) {
      terms.push_back(v);
      return;
    }
    sums.push_back(add);
    termsOf(add.getLhs(), terms, sums);
    termsOf(add.getRhs(), terms, sums);
  }

  static void split(func::FuncOp func) {
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> attrs;
    SmallVector<Operation *> sums;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      DictionaryAttr attr = func.getResultAttrDict(i);
      SmallVector<Value> terms;
      if (func.getResultAttr(i, kGradAttr))
        termsOf(ret.getOperand(i), terms, sums);
      else
        terms.push_back(ret.getOperand(i));
      for (Value t : terms) {
        results.push_back(t);
        attrs.push_back(attr);
      }
    }
    if (sums.empty())
      return;
    OpBuilder b(ret);
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    for (Operation *sum : sums) // outermost first: each is unread now
      sum->erase();
    func.setFunctionType(b.getFunctionType(func.getArgumentTypes(), ValueRange(results).getTypes()));
    func.setAllResultAttrs(attrs);
  }
};

} // namespace
