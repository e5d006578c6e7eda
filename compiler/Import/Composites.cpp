//===- Composites.cpp - ONNX ops written as several tcc ops ---------------===//

#include "compiler/Import/Composites.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/STLExtras.h"

#include <onnx/onnx_pb.h>

#include <optional>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// Each composite op and the attributes it knows.
struct Composite {
  const char *onnx;
  const char *attrs[3]; // unused entries null
  bool knows(StringRef attr) const {
    return llvm::any_of(attrs, [&](const char *a) { return a && attr == a; });
  }
};
const Composite kComposites[] = {
    {"Clip", {"min", "max"}},
    {"LeakyRelu", {"alpha"}},
    {"PRelu", {}},
    {"ThresholdedRelu", {"alpha"}},
    {"Elu", {"alpha"}},
    {"Selu", {"alpha", "gamma"}},
    {"Celu", {"alpha"}},
    {"HardSigmoid", {"alpha", "beta"}},
    {"HardSwish", {}},
    {"Softsign", {}},
    {"GlobalAveragePool", {}},
    {"ReduceSumSquare", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceL1", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceL2", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"Tile", {}},
    {"CumSum", {"exclusive", "reverse"}},
};

const Composite *lookup(StringRef op) {
  for (const Composite &c : kComposites)
    if (op == c.onnx)
      return &c;
  return nullptr;
}

const onnx::AttributeProto *findAttr(const onnx::NodeProto &node, StringRef name) {
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
    Operation *c = b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, ArrayRef<Attribute>(a)));
    built.push_back(c);
    return c->getResult(0);
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

/// The integers of a compile-time constant tensor, if `v` is one.
std::optional<SmallVector<int64_t>> constInts(Value v) {
  DenseIntElementsAttr dense;
  if (!v || !matchPattern(v, m_Constant(&dense)))
    return std::nullopt;
  SmallVector<int64_t> out;
  for (const APInt &x : dense.getValues<APInt>())
    out.push_back(x.getSExtValue());
  return out;
}

} // namespace

bool mlir::tcc::isCompositeOp(StringRef onnxOp) { return lookup(onnxOp) != nullptr; }

FailureOr<Value> mlir::tcc::buildComposite(OpBuilder &builder, Location loc,
                                           const onnx::NodeProto &node, int64_t opset,
                                           ArrayRef<Value> operands) {
  StringRef opType = node.op_type();
  const Composite *spec = lookup(opType);
  assert(spec && "buildComposite on an op that is not a composite");
  for (const onnx::AttributeProto &a : node.attribute())
    if (!spec->knows(a.name()) ||
        (opType == "Clip" && opset >= 11) ||
        (a.name() == "axes" && opset >= 18))
      return emitError(loc) << "attribute \"" << a.name() << "\" of " << opType
                            << " is not supported at opset " << opset;
  if (node.output_size() != 1 || operands.empty() || !operands[0])
    return emitError(loc) << opType << " needs its input and one output";
  auto attrF = [&](StringRef name, double dflt) {
    const onnx::AttributeProto *a = findAttr(node, name);
    return a ? static_cast<double>(a->f()) : dflt;
  };
  auto attrI = [&](StringRef name, int64_t dflt) {
    const onnx::AttributeProto *a = findAttr(node, name);
    return a ? static_cast<int64_t>(a->i()) : dflt;
  };

  Value x = operands[0];
  auto type = cast<RankedTensorType>(x.getType());
  Type elt = type.getElementType();
  Value in1 = operands.size() > 1 ? operands[1] : Value();
  Value in2 = operands.size() > 2 ? operands[2] : Value();
  bool isActivation = opType != "Clip" && opType != "Tile" && !opType.starts_with("Reduce") &&
                      opType != "GlobalAveragePool" && opType != "CumSum";
  if (isActivation && !isa<FloatType>(elt))
    return emitError(loc) << opType << " needs a floating-point input; this one is " << type;

  // What is checked before anything is built.
  if (opType == "Clip")
    for (Value bound : {in1, in2})
      if (bound && cast<RankedTensorType>(bound.getType()).getNumElements() != 1)
        return emitError(loc) << "Clip's bounds must be scalars; this one is " << bound.getType();
  if (opType == "PRelu" && !in1)
    return emitError(loc) << "PRelu needs its slope input";
  if (opType == "Celu" && attrF("alpha", 1.0) == 0)
    return emitError(loc) << "Celu's alpha must not be 0";
  if (opType == "GlobalAveragePool" && type.getRank() < 3)
    return emitError(loc) << "GlobalAveragePool needs an input of rank 3 or more (N, C, D1...); "
                             "this one is "
                          << type;
  std::optional<int64_t> cumAxis;
  if (opType == "CumSum") {
    std::optional<SmallVector<int64_t>> axis = constInts(in1);
    if (!axis || axis->size() != 1)
      return emitError(loc) << "CumSum's axis must be a compile-time scalar";
    cumAxis = normalizeAxis((*axis)[0], type.getRank());
    if (!cumAxis)
      return emitError(loc) << "CumSum's axis " << (*axis)[0] << " is out of range for " << type;
    int64_t n = type.getDimSize(*cumAxis), rest = 1;
    for (int64_t d = *cumAxis + 1; d < type.getRank(); ++d)
      rest *= type.getDimSize(d);
    if (n > 8192 || n * n * rest > (int64_t(1) << 26))
      return emitError(loc) << "CumSum over an axis of " << n << " elements of " << type
                            << " is not supported: tcc writes it as a masked sum of n x n "
                               "products (at most 8192 along the axis and 2^26 products a row)";
  }
  std::optional<SmallVector<int64_t>> repeats;
  if (opType == "Tile") {
    repeats = constInts(in1);
    if (!repeats)
      return emitError(loc) << "Tile's repeats must be a compile-time constant (tcc compiles static "
                               "shapes)";
    if (static_cast<int64_t>(repeats->size()) != type.getRank() ||
        llvm::any_of(*repeats, [](int64_t r) { return r < 1; }))
      return emitError(loc) << "Tile's repeats must hold one count of at least 1 per dimension of "
                            << type;
  }

  // Statements, not nested calls: the ops come out in reading order.
  Composer c(builder, loc);
  Value zeroValue, oneValue;
  auto zero = [&]() { return zeroValue ? zeroValue : (zeroValue = c.scalar(0.0, elt)); };
  auto one = [&]() { return oneValue ? oneValue : (oneValue = c.scalar(1.0, elt)); };
  // x > 0 ? x : f(x'), x' = min(x, 0) written as a select on that same
  // condition, so that x = 0 takes f's side: the gradient there is f's
  // (PyTorch's for Elu, Selu and Celu).
  auto negativeBranch = [&](auto f) {
    Value positive = c.greater(x, zero());
    Value negativePart = c.where(positive, zero(), x);
    Value fx = f(negativePart);
    return c.where(positive, x, fx);
  };
  auto expMinus1 = [&](Value v, double alpha) { // alpha * (exp(v) - 1)
    Value e = c.make<ExpOp>({v});
    Value em1 = c.sub(e, one());
    return c.mul(c.scalar(alpha, elt), em1);
  };
  // alpha * x + beta clamped to [0, 1]; the corners take the constant.
  auto hardSigmoid = [&](double alpha, double beta) {
    Value ax = c.mul(x, c.scalar(alpha, elt));
    Value y = c.add(ax, c.scalar(beta, elt));
    Value belowOne = c.less(y, one());
    Value upper = c.where(belowOne, y, one());
    Value positive = c.greater(y, zero());
    return c.where(positive, upper, zero());
  };
  // The reductions' axes: an attribute before opset 18, then a constant input.
  auto reduceAttrs = [&]() -> std::optional<SmallVector<NamedAttribute>> {
    SmallVector<NamedAttribute> attrs;
    std::optional<SmallVector<int64_t>> axes;
    if (opset >= 18) {
      if (in1) {
        axes = constInts(in1);
        if (!axes) {
          emitError(loc) << opType << "'s axes must be a compile-time constant";
          return std::nullopt;
        }
      }
    } else if (const onnx::AttributeProto *a = findAttr(node, "axes")) {
      axes = SmallVector<int64_t>(a->ints().begin(), a->ints().end());
    }
    if (axes)
      attrs.push_back(builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(*axes)));
    attrs.push_back(builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(attrI("keepdims", 1))));
    attrs.push_back(builder.getNamedAttr("noop_with_empty_axes",
                                         builder.getI64IntegerAttr(attrI("noop_with_empty_axes", 0))));
    return attrs;
  };

  Value result;
  if (opType == "Clip") {
    // min(max(x, lo), hi), as ONNX defines it (lo > hi gives hi); x on a
    // bound takes the bound (gradient 0 there, as PyTorch's clamp), and NaN
    // stays NaN.
    Value lo = in1, hi = in2;
    if (opset < 11) {
      if (findAttr(node, "min"))
        lo = c.scalar(attrF("min", 0), elt);
      if (findAttr(node, "max"))
        hi = c.scalar(attrF("max", 0), elt);
    }
    if (!lo && !hi)
      return c.finish(x);
    result = x;
    if (lo) {
      Value below = c.make<LessOrEqualOp>({result, lo});
      result = c.where(below, lo, result);
    }
    if (hi) {
      Value above = c.make<GreaterOrEqualOp>({result, hi});
      result = c.where(above, hi, result);
    }
  } else if (opType == "LeakyRelu" || opType == "PRelu") {
    Value slope = opType == "PRelu" ? in1 : c.scalar(attrF("alpha", 0.01), elt);
    Value positive = c.greater(x, zero());
    Value scaled = c.mul(x, slope);
    result = c.where(positive, x, scaled);
    if (result && result.getType() != x.getType()) {
      (void)c.finish(Value());
      return emitError(loc) << "PRelu's slope " << in1.getType()
                            << " does not broadcast to its input " << x.getType()
                            << " (unidirectionally)";
    }
  } else if (opType == "ThresholdedRelu") {
    Value above = c.greater(x, c.scalar(attrF("alpha", 1.0), elt));
    result = c.where(above, x, zero());
  } else if (opType == "Elu") {
    double alpha = attrF("alpha", 1.0);
    result = negativeBranch([&](Value v) { return expMinus1(v, alpha); });
  } else if (opType == "Selu") {
    double alpha = attrF("alpha", 1.67326319217681884765625);
    Value elu = negativeBranch([&](Value v) { return expMinus1(v, alpha); });
    result = c.mul(c.scalar(attrF("gamma", 1.05070102214813232421875), elt), elu);
  } else if (opType == "Celu") {
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): one of the two is 0.
    double alpha = attrF("alpha", 1.0);
    result = negativeBranch([&](Value v) {
      Value scaled = c.div(v, c.scalar(alpha, elt));
      return expMinus1(scaled, alpha);
    });
  } else if (opType == "HardSigmoid") {
    result = hardSigmoid(attrF("alpha", 0.2), attrF("beta", 0.5));
  } else if (opType == "HardSwish") {
    Value gate = hardSigmoid(1.0 / 6.0, 0.5);
    result = c.mul(x, gate);
  } else if (opType == "Softsign") {
    Value magnitude = c.make<AbsOp>({x});
    Value denominator = c.add(one(), magnitude);
    result = c.div(x, denominator);
  } else if (opType == "GlobalAveragePool") {
    SmallVector<int64_t> axes;
    for (int64_t d = 2; d < type.getRank(); ++d)
      axes.push_back(d);
    result = c.make<ReduceMeanOp>({x}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
                                        builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
  } else if (opType.starts_with("Reduce")) {
    std::optional<SmallVector<NamedAttribute>> attrs = reduceAttrs();
    if (!attrs) {
      (void)c.finish(Value());
      return failure();
    }
    Value term = opType == "ReduceL1" ? c.make<AbsOp>({x}) : c.mul(x, x);
    result = c.make<ReduceSumOp>({term}, *attrs);
    if (opType == "ReduceL2")
      result = c.make<SqrtOp>({result});
  } else if (opType == "CumSum") {
    // out[.., i, ..] = sum over j of x[.., j, ..] * M[j, i], M a constant
    // 0/1 mask (j <= i; j < i when exclusive; reversed when reverse): exact
    // for integers (position ids from a mask), and differentiable as a
    // product and a sum. x gains the axis i after its axis j; M is [n, n]
    // followed by ones for x's later axes, so it broadcasts.
    int64_t axis = *cumAxis, n = type.getDimSize(axis);
    bool exclusive = attrI("exclusive", 0) != 0, reverse = attrI("reverse", 0) != 0;
    SmallVector<int64_t> maskShape = {n, n};
    for (int64_t d = axis + 1; d < type.getRank(); ++d)
      maskShape.push_back(1);
    auto maskType = RankedTensorType::get(maskShape, elt);
    SmallVector<Attribute> bits;
    bits.reserve(n * n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i) {
        bool in = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
        bits.push_back(isa<FloatType>(elt) ? Attribute(FloatAttr::get(elt, in ? 1.0 : 0.0))
                                           : Attribute(IntegerAttr::get(elt, in ? 1 : 0)));
      }
    Value mask = c.constant(DenseElementsAttr::get(maskType, bits));
    Value xj = c.make<UnsqueezeOp>(
        {x}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({axis + 1}))});
    Value products = c.mul(xj, mask);
    result = c.make<ReduceSumOp>(
        {products}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({axis})),
                     builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(0))});
  } else { // Tile: x reshaped to [1, d0, 1, d1, ...], expanded, merged.
    if (llvm::all_of(*repeats, [](int64_t r) { return r == 1; }))
      return c.finish(x);
    SmallVector<int64_t> split, expanded, merged;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      split.append({1, type.getDimSize(d)});
      expanded.append({(*repeats)[d], type.getDimSize(d)});
      merged.push_back((*repeats)[d] * type.getDimSize(d));
    }
    Value v = c.make<ReshapeOp>({x}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(split))});
    v = c.make<ExpandOp>({v}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(expanded))});
    result = c.make<ReshapeOp>({v}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(merged))});
  }
  return c.finish(result);
}
