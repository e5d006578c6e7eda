//===- AppendLoss.cpp - append a loss to a model that outputs logits ------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_APPENDLOSS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

class AppendLossPass : public tcc::impl::AppendLossBase<AppendLossPass> {
public:
  using AppendLossBase::AppendLossBase;

  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs(getOperation().getOps<func::FuncOp>());
    if (funcs.size() != 1) {
      getOperation().emitError("tcc-append-loss expects one model function");
      return signalPassFailure();
    }
    if (failed(appendLoss(funcs.front())))
      signalPassFailure();
  }

private:
  LogicalResult appendLoss(func::FuncOp func) {
    if (kind != "cross-entropy" && kind != "mse")
      return func.emitError("loss kind must be cross-entropy or mse, not \"")
             << kind << "\"";
    std::optional<unsigned> index;
    std::string names;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto n = func.getResultAttrOfType<StringAttr>(i, kOutputAttr);
      if (!n)
        continue;
      names += (names.empty() ? "" : ", ") + n.getValue().str();
      if (n.getValue() == output)
        index = i;
    }
    if (!index)
      return func.emitError("the model has no output named \"")
             << output << "\" (its outputs: " << names << ")";
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      for (StringRef attr : {kParamAttr, kInputAttr})
        if (auto n = func.getArgAttrOfType<StringAttr>(i, attr))
          if (n.getValue() == target)
            return func.emitError("the model already has an input or "
                                  "parameter named \"")
                   << target << "\"; choose another name for the "
                   << (kind == "mse" ? "targets" : "labels");

    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    Value out = ret.getOperand(*index);
    auto outType = cast<RankedTensorType>(out.getType());
    if (!isa<FloatType>(outType.getElementType()) || outType.getRank() < 1)
      return func.emitError("output \"")
             << output << "\" of type " << outType
             << " is not a floating-point tensor of rank >= 1";

    OpBuilder b(ret);
    Location loc = ret.getLoc();
    RankedTensorType targetType;
    if (kind == "mse") {
      targetType = outType;
    } else {
      targetType = RankedTensorType::get(outType.getShape().drop_back(),
                                         b.getI64Type());
    }
    unsigned argIndex = func.getNumArguments();
    func.insertArgument(
        argIndex, targetType,
        b.getDictionaryAttr(b.getNamedAttr(kInputAttr, b.getStringAttr(target))),
        loc);
    Value tgt = func.getArgument(argIndex);

    Value loss;
    if (kind == "mse") {
      Value d = b.create<SubOp>(loc, out, tgt);
      loss = b.create<ReduceMeanOp>(loc, b.create<MulOp>(loc, d, d),
                                    DenseI64ArrayAttr(), 0, 0);
    } else {
      int64_t classes = outType.getShape().back();
      int64_t rows = outType.getNumElements() / std::max<int64_t>(classes, 1);
      Value logits = b.create<ReshapeOp>(loc, out, ArrayRef<int64_t>{rows, classes});
      Value labels = b.create<ReshapeOp>(loc, tgt, ArrayRef<int64_t>{rows});
      auto sce = b.create<SoftmaxCrossEntropyLossOp>(
          loc, logits, labels, Value(), b.getStringAttr("mean"),
          b.getI64IntegerAttr(-100));
      loss = sce.getOutput();
    }

    SmallVector<Value> results{loss};
    SmallVector<Type> types{loss.getType()};
    SmallVector<DictionaryAttr> attrs{b.getDictionaryAttr(
        b.getNamedAttr(kOutputAttr, b.getStringAttr("loss")))};
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      results.push_back(ret.getOperand(i));
      types.push_back(ret.getOperand(i).getType());
      attrs.push_back(func.getResultAttrDict(i));
    }
    b.create<func::ReturnOp>(loc, results);
    ret.erase();
    func.setFunctionType(b.getFunctionType(func.getArgumentTypes(), types));
    func.setAllResultAttrs(attrs);
    if (kind == "cross-entropy")
      recordObjective(func, targetType);
    return success();
  }

  /// The appended cross-entropy reads its labels aligned with the logits
  /// (label t for position t): record it in the module's tcc.objective, so
  /// that tcc-run --data feeds the next tokens as labels. The token ids are
  /// the import's record, or the one other integer input of the labels'
  /// shape.
  void recordObjective(func::FuncOp func, RankedTensorType labelsType) {
    auto module = func->getParentOfType<ModuleOp>();
    if (!module)
      return;
    NamedAttrList fields;
    if (auto old = module->getAttrOfType<DictionaryAttr>(kObjectiveAttr))
      fields.append(old.getValue());
    Builder b(func.getContext());
    if (!fields.get("ids")) {
      StringRef ids;
      int candidates = 0;
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        auto n = func.getArgAttrOfType<StringAttr>(i, kInputAttr);
        auto t = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
        if (!n || n.getValue() == target || !t || !isa<IntegerType>(t.getElementType()) ||
            t.getShape() != labelsType.getShape())
          continue;
        ids = n.getValue();
        ++candidates;
      }
      if (candidates == 1)
        fields.set("ids", b.getStringAttr(ids));
    }
    fields.set("labels", b.getStringAttr(target));
    fields.set("labels-shift", b.getStringAttr("aligned"));
    if (!fields.get("task"))
      fields.set("task", b.getStringAttr("causal-lm"));
    module->setAttr(kObjectiveAttr, fields.getDictionary(func.getContext()));
  }
};

} // namespace
