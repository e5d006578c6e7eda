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
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>

#include <onnx/onnx_pb.h>

namespace mlir::tcc {

/// The attribute `name` of an ONNX node, or null when the node has none.
inline const onnx::AttributeProto *findAttr(const onnx::NodeProto &node, llvm::StringRef name) {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

/// Attribute `name`'s integer (float) value, or `dflt` when the node has none.
inline int64_t attrInt(const onnx::NodeProto &node, llvm::StringRef name, int64_t dflt) {
  const onnx::AttributeProto *a = findAttr(node, name);
  return a ? static_cast<int64_t>(a->i()) : dflt;
}
inline double attrFloat(const onnx::NodeProto &node, llvm::StringRef name, double dflt) {
  const onnx::AttributeProto *a = findAttr(node, name);
  return a ? static_cast<double>(a->f()) : dflt;
}

/// The integers of a compile-time constant tensor, if `v` is one.
inline std::optional<SmallVector<int64_t>> constInts(Value v) {
  DenseIntElementsAttr dense;
  if (!v || !matchPattern(v, m_Constant(&dense)))
    return std::nullopt;
  SmallVector<int64_t> out;
  for (const APInt &x : dense.getValues<APInt>())
    out.push_back(x.getSExtValue());
  return out;
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
    return foldConstant(op);
  }

  /// `op`'s result, or, when every operand is a constant and the op folds
  /// (shape arithmetic), the constant it folds to: the importer's rule for
  /// single ops, so that a composite on constants is a constant too.
  Value foldConstant(Operation *op) {
    SmallVector<Attribute> operands;
    for (Value v : op->getOperands()) {
      Attribute a;
      if (!matchPattern(v, m_Constant(&a)))
        return op->getResult(0);
      operands.push_back(a);
    }
    SmallVector<OpFoldResult> folded;
    if (failed(op->fold(operands, folded)) || folded.size() != 1)
      return op->getResult(0);
    Value replacement = llvm::dyn_cast_if_present<Value>(folded[0]);
    if (!replacement) {
      auto dense = llvm::dyn_cast_if_present<DenseElementsAttr>(
          llvm::dyn_cast_if_present<Attribute>(folded[0]));
      if (!dense || dense.getType() != op->getResult(0).getType())
        return op->getResult(0);
      replacement = constant(dense);
    }
    built.erase(llvm::find(built, op));
    op->erase();
    return replacement;
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

  Value attrShape(StringRef opName, Value x, StringRef attr, ArrayRef<int64_t> values) {
    return op(opName, {x}, {b.getNamedAttr(attr, b.getDenseI64ArrayAttr(values))});
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return attrShape(ReshapeOp::getOperationName(), x, "shape", shape);
  }

  /// Elements [begin, end) of `x` along `axis`.
  Value slice(Value x, int64_t axis, int64_t begin, int64_t end) {
    return make<SliceOp>({x}, {b.getNamedAttr("starts", b.getDenseI64ArrayAttr({begin})),
                               b.getNamedAttr("ends", b.getDenseI64ArrayAttr({end})),
                               b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis}))});
  }

  /// The maximum (`isMin`: minimum) of `x` over `axes` (normalized, each of
  /// at least one element), the axes kept as size 1: a tree of elementwise
  /// maxima of halves (an odd last element joins by broadcasting), O(n)
  /// work, exact, and differentiable to the element chosen.
  Value extremum(Value x, ArrayRef<int64_t> axes, bool isMin) {
    return tree(x, axes, [&](Value a, Value b) { return pick(a, b, isMin); });
  }
  /// `x` reduced over `axes` (normalized, each of at least one element, kept
  /// as size 1) by `combine`, an associative elementwise op, as a tree of
  /// halves: max, min (extremum), product (ReduceProd).
  Value tree(Value x, ArrayRef<int64_t> axes, llvm::function_ref<Value(Value, Value)> combine) {
    if (!x)
      return fail();
    auto type = cast<RankedTensorType>(x.getType());
    Value m = x;
    for (int64_t axis : axes)
      for (int64_t n = type.getDimSize(axis); n > 1 && m; n /= 2) {
        int64_t h = n / 2;
        Value first = slice(m, axis, 0, h), second = slice(m, axis, h, 2 * h);
        Value folded = combine(first, second);
        if (n % 2)
          folded = combine(folded, slice(m, axis, n - 1, n));
        m = folded;
      }
    return m;
  }
  Value pick(Value x, Value y, bool isMin) {
    return isMin ? make<MinOp>({x, y}) : make<MaxOp>({x, y});
  }

  OpBuilder &builder() { return b; }

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
