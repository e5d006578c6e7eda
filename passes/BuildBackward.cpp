//===- BuildBackward.cpp - reverse-mode autodiff of the model -------------===//
//
// The pass only walks the graph and accumulates; what each op contributes is
// its GradientOpInterface rule (compiler/Dialect/TccGradients.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_BUILDBACKWARD
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

static bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

llvm::DenseSet<Value> mlir::tcc::trainableValues(func::FuncOp func) {
  llvm::DenseSet<Value> active;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kParamAttr) && !func.getArgAttr(i, kFrozenAttr))
      active.insert(func.getArgument(i));
  for (Operation &op : func.getBody().front().without_terminator())
    if (llvm::any_of(op.getOperands(), [&](Value v) { return active.contains(v); }))
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          active.insert(r);
  return active;
}

namespace {

class BuildBackwardPass
    : public tcc::impl::BuildBackwardBase<BuildBackwardPass> {
public:
  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs(getOperation().getOps<func::FuncOp>());
    if (funcs.size() != 1) {
      getOperation().emitError("tcc-build-backward expects one model function");
      return signalPassFailure();
    }
    if (failed(buildBackward(funcs.front())))
      signalPassFailure();
  }

private:
  /// The index of the scalar floating-point output that is the loss.
  static FailureOr<unsigned> findLoss(func::FuncOp func) {
    SmallVector<unsigned> candidates;
    std::string outputs;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto t = cast<RankedTensorType>(func.getResultTypes()[i]);
      auto name = func.getResultAttrOfType<StringAttr>(i, kOutputAttr);
      if (!outputs.empty())
        outputs += ", ";
      outputs += (name ? name.getValue().str() : "?") + " " +
                 llvm::formatv("{0}", t).str();
      if (t.getRank() == 0 && isa<FloatType>(t.getElementType()))
        candidates.push_back(i);
    }
    if (candidates.size() == 1)
      return candidates.front();
    InFlightDiagnostic diag = func.emitError();
    if (candidates.empty())
      diag << "the model has no scalar loss output (its outputs: " << outputs
           << "); append one with --loss=cross-entropy:OUTPUT:LABELS or "
              "--loss=mse:OUTPUT:TARGET";
    else
      diag << "the model has " << candidates.size()
           << " scalar outputs (" << outputs
           << "); tcc needs exactly one loss";
    return failure();
  }

  LogicalResult buildBackward(func::FuncOp func) {
    FailureOr<unsigned> lossIndex = findLoss(func);
    if (failed(lossIndex))
      return failure();
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value loss = ret.getOperand(*lossIndex);

    llvm::DenseSet<Value> active = trainableValues(func);
    SmallVector<Operation *> forward = llvm::to_vector(
        llvm::map_range(body.without_terminator(), [](Operation &op) { return &op; }));

    // Reverse sweep: each op on a path from a parameter to the loss adds its
    // operands' gradients.
    OpBuilder b(ret);
    llvm::DenseMap<Value, Value> grads;
    auto accumulate = [&](Value v, Value g, Location loc) {
      auto it = grads.find(v);
      if (it == grads.end())
        grads[v] = g;
      else
        it->second = b.create<AddOp>(loc, it->second, g);
    };
    // The seed is an argument, not the constant 1: the runtime sets it to
    // loss scale / accumulation, so fp16 gradients are scaled from the start
    // of the backward pass, and no folding can remove it.
    func.insertArgument(func.getNumArguments(), loss.getType(),
                        b.getDictionaryAttr(b.getNamedAttr(kSeedAttr, b.getUnitAttr())),
                        loss.getLoc());
    Value seed = func.getArgument(func.getNumArguments() - 1);
    if (active.contains(loss))
      grads[loss] = seed;
    for (Operation *op : llvm::reverse(forward)) {
      if (llvm::none_of(op->getResults(), [&](Value r) { return grads.count(r); }))
        continue;
      if (llvm::none_of(op->getOperands(), [&](Value v) { return active.contains(v); }))
        continue;
      auto rule = dyn_cast<GradientOpInterface>(op);
      if (!rule)
        return op->emitOpError("has no gradient rule, but it is on a path "
                               "from a trainable parameter to the loss");
      SmallVector<Value> resultGrads;
      for (Value r : op->getResults())
        resultGrads.push_back(grads.lookup(r));
      SmallVector<Value> operandGrads;
      if (failed(rule.buildGradients(b, resultGrads, operandGrads)))
        return failure();
      if (operandGrads.size() != op->getNumOperands())
        return op->emitOpError("gradient rule returned ")
               << operandGrads.size() << " gradients for "
               << op->getNumOperands() << " operands";
      for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
        if (!active.contains(operand))
          continue;
        Value g = operandGrads[i];
        // A rule may give an operand that occurs more than once its whole
        // gradient at its first occurrence (tcc.attention's packed layout).
        auto givenEarlier = [&, i = i, operand = operand] {
          for (unsigned j = 0; j < i; ++j)
            if (op->getOperand(j) == operand && operandGrads[j])
              return true;
          return false;
        };
        if (!g && givenEarlier())
          continue;
        if (!g)
          return op->emitOpError("gradient rule does not differentiate operand #")
                 << i << ", which depends on a trainable parameter";
        if (g.getType() != operand.getType())
          return op->emitOpError("gradient rule built a gradient of type ")
                 << g.getType() << " for operand #" << i << " of type "
                 << operand.getType();
        accumulate(operand, g, op->getLoc());
      }
    }

    // The step's results: the loss first, the other outputs, the gradients.
    SmallVector<Value> results{loss};
    SmallVector<DictionaryAttr> resultAttrs{func.getResultAttrDict(*lossIndex)};
    SmallVector<Type> resultTypes{loss.getType()};
    for (unsigned i = 0; i < ret.getNumOperands(); ++i)
      if (i != *lossIndex) {
        results.push_back(ret.getOperand(i));
        resultAttrs.push_back(func.getResultAttrDict(i));
        resultTypes.push_back(ret.getOperand(i).getType());
      }
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
      if (!name || func.getArgAttr(i, kFrozenAttr))
        continue;
      Value arg = func.getArgument(i);
      Value g = grads.lookup(arg);
      if (!g) {
        func.emitWarning() << "parameter \"" << name.getValue()
                           << "\" does not reach the loss; its gradient is zero";
        auto t = cast<RankedTensorType>(arg.getType());
        g = b.create<ConstantOp>(
            func.getLoc(),
            DenseElementsAttr::get(t, ArrayRef<Attribute>{b.getFloatAttr(t.getElementType(), 0.0)}));
      }
      results.push_back(g);
      resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(kGradAttr, name)));
      resultTypes.push_back(g.getType());
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    func.setFunctionType(b.getFunctionType(func.getArgumentTypes(), resultTypes));
    func.setAllResultAttrs(resultAttrs);
    func.setSymName(kMicroStepName);
    return success();
  }
};

} // namespace
