//===- CheckImportContract.cpp - the importer's contract ------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CheckedArithmetic.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_CHECKIMPORTCONTRACT
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// The most bytes one tensor may take (256 TiB): with this bound the
/// planner's sums of sizes and offsets cannot overflow int64.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;

/// Whether a static shape's elements, at 8 bytes each, fit kMaxTensorBytes
/// (checked, without computing an overflowing product).
bool fitsPlan(RankedTensorType t) {
  int64_t bytes = 8;
  for (int64_t d : t.getShape()) {
    std::optional<int64_t> b = llvm::checkedMul(bytes, d);
    if (!b || *b > kMaxTensorBytes)
      return false;
    bytes = *b;
  }
  return true;
}

/// Reports every break of the import contract (see Passes.td); changes
/// nothing.
class CheckImportContractPass
    : public tcc::impl::CheckImportContractBase<CheckImportContractPass> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    if (funcs.size() != 1 || funcs.front().isExternal()) {
      module.emitError("expected exactly one func.func with a body (the "
                       "model), found ")
          << funcs.size();
      return signalPassFailure();
    }
    if (failed(checkSignature(funcs.front())) |
        failed(checkBody(funcs.front())))
      signalPassFailure();
  }

private:
  static LogicalResult checkSignature(func::FuncOp func) {
    bool ok = true;
    llvm::StringSet<> names;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto param = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
      auto input = func.getArgAttrOfType<StringAttr>(i, kInputAttr);
      if (!param == !input) {
        func.emitError() << "argument " << i << " of @" << func.getSymName()
                         << (param ? " has both tcc.param and tcc.input"
                                   : " has neither tcc.param nor tcc.input");
        ok = false;
        continue;
      }
      StringRef name = param ? param.getValue() : input.getValue();
      if (!names.insert(name).second) {
        func.emitError() << "argument name \"" << name << "\" is used twice";
        ok = false;
      }
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      if (!type || !type.hasStaticShape()) {
        func.emitError() << "argument \"" << name
                         << "\" is not a statically shaped tensor";
        ok = false;
      } else if (!fitsPlan(type)) {
        func.emitError() << "argument \"" << name << "\" has shape " << type
                         << ", more elements than tcc can plan (at most 2^45)";
        ok = false;
      } else if (param && !isa<FloatType>(type.getElementType())) {
        func.emitError() << "parameter \"" << name
                         << "\" is not a floating-point tensor";
        ok = false;
      }
    }
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      if (!func.getResultAttrOfType<StringAttr>(i, kOutputAttr)) {
        func.emitError() << "result " << i << " of @" << func.getSymName()
                         << " has no tcc.output name";
        ok = false;
      }
    return success(ok);
  }

  /// An integer Div whose divisor is a constant holding a zero: ONNX leaves
  /// the result undefined, and the kernels would give 0 without a word.
  static LogicalResult checkIntegerDivisor(DivOp div) {
    auto type = dyn_cast<RankedTensorType>(div.getType());
    DenseElementsAttr divisor;
    if (!type || !isa<IntegerType>(type.getElementType()) ||
        !matchPattern(div.getRhs(), m_Constant(&divisor)) ||
        !isa<IntegerType>(divisor.getElementType()))
      return success();
    for (const APInt &v : divisor.getValues<APInt>())
      if (v.isZero())
        return div.emitError("integer division by zero: the divisor is a constant that "
                             "holds 0 (ONNX leaves the result undefined)");
    return success();
  }

  static LogicalResult checkBody(func::FuncOp func) {
    bool ok = true;
    func.walk([&](Operation *op) {
      if (op == func.getOperation() || isa<func::ReturnOp>(op))
        return;
      if (!isa<TccDialect>(op->getDialect())) {
        op->emitError("op outside the tcc dialect in an imported model");
        ok = false;
        return;
      }
      if (auto div = dyn_cast<DivOp>(op); div && failed(checkIntegerDivisor(div)))
        ok = false;
      for (Type t : op->getResultTypes()) {
        auto rt = dyn_cast<RankedTensorType>(t);
        if (!rt || !rt.hasStaticShape()) {
          op->emitError("result type ") << t << " is not statically shaped";
          ok = false;
        } else if (!fitsPlan(rt)) {
          op->emitError("result type ") << t
                                        << " has more elements than tcc can plan (at most 2^45)";
          ok = false;
        }
      }
    });
    return success(ok);
  }
};

} // namespace
