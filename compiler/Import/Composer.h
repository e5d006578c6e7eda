//===- Composer.h - build a composition of tcc ops ----------------*- C++ -*-===//
//
// The builder the importer's compositions (Composites.cpp, Conv.cpp) write
// their ops with: each op's result type inferred and verified as it is
// built, and everything erased again after the first failure, so that a
// node that cannot be written leaves nothing behind.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_COMPILER_IMPORT_COMPOSER_H
#define TCC_COMPILER_IMPORT_COMPOSER_H

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/STLExtras.h"

#include <onnx/onnx_pb.h>

namespace mlir::tcc {

/// The attribute `name` of an ONNX node, or null when the node has none.
inline const onnx::AttributeProto *findAttr(const onnx::NodeProto &node, llvm::StringRef name) {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

/// Builds ops one after another, each with its result type inferred and
/// verified. After the first failure (a diagnostic at the node) every call
/// returns null; finish() then erases what was built.
class Composer {
public:
  Composer(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  Value op(StringRef name, ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    if (failedAlready || llvm::any_of(operands, [](Value v) { return !v; }))
      return fail();
    OperationState state(loc, name);
    state.addOperands(operands);
    state.addAttributes(attrs);
    state.addTypes(b.getNoneType());
    Operation *op = b.create(state);
    built.push_back(op);
    SmallVector<Type> types;
    auto infer = cast<InferTypeOpInterface>(op);
    if (failed(infer.inferReturnTypes(b.getContext(), loc, op->getOperands(),
                                      op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                      op->getRegions(), types)) ||
        types.size() != 1)
      return fail();
    op->getResult(0).setType(types[0]);
    if (failed(verify(op)))
      return fail();
    return op->getResult(0);
  }
  template <typename OpT>
  Value make(ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    return op(OpT::getOperationName(), operands, attrs);
  }

  /// A rank-0 constant `v` of element type `elt`.
  Value scalar(double v, Type elt) {
    if (failedAlready)
      return fail();
    auto type = RankedTensorType::get({}, elt);
    Attribute a;
    if (auto ft = dyn_cast<FloatType>(elt))
      a = FloatAttr::get(ft, v);
    else if (auto it = dyn_cast<IntegerType>(elt))
      a = IntegerAttr::get(it, static_cast<int64_t>(v));
    else
      return fail();
    return constant(DenseElementsAttr::get(type, ArrayRef<Attribute>(a)));
  }

  /// A constant tensor.
  Value constant(DenseElementsAttr value) {
    if (failedAlready)
      return fail();
    Operation *op = b.create<ConstantOp>(loc, value.getType(), value);
    built.push_back(op);
    return op->getResult(0);
  }

  Value where(Value cond, Value x, Value y) { return make<WhereOp>({cond, x, y}); }
  Value greater(Value x, Value y) { return make<GreaterOp>({x, y}); }
  Value less(Value x, Value y) { return make<LessOp>({x, y}); }
  Value mul(Value x, Value y) { return make<MulOp>({x, y}); }
  Value add(Value x, Value y) { return make<AddOp>({x, y}); }
  Value sub(Value x, Value y) { return make<SubOp>({x, y}); }
  Value div(Value x, Value y) { return make<DivOp>({x, y}); }

  /// Keeps the result (success) or erases everything built (failure).
  FailureOr<Value> finish(Value result) {
    if (!failedAlready && result)
      return result;
    for (Operation *op : llvm::reverse(built))
      op->erase();
    built.clear();
    return failure();
  }

private:
  Value fail() {
    failedAlready = true;
    return Value();
  }

  OpBuilder &b;
  Location loc;
  SmallVector<Operation *> built;
  bool failedAlready = false;
};

} // namespace mlir::tcc

#endif // TCC_COMPILER_IMPORT_COMPOSER_H
