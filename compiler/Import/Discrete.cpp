//===- Discrete.cpp - rounding, signs, indices and selections as tcc ops ---===//
//
// Sign, Floor, Ceil, Round, Mod, ArgMax, ArgMin, OneHot and TopK, written as
// the tcc ops ONNX defines them by: comparisons, selects, a truncating cast
// and Composer::extremum's max tree.
//
// - trunc(x) is a cast to int64 and back, for |x| < 2^p (p the type's
//   mantissa bits); from 2^p on every float is an integer and passes
//   through, as do NaN and the infinities. Floor, Ceil and Round
//   (half to even) correct it with comparisons.
// - Mod: r = a - b * trunc(a / b) (a where b is infinite), the sign of a
//   (fmod = 1); fmod = 0 (integers, and floats since opset 18's tests) adds
//   b where r != 0 and r's sign differs from b's (Python's %). Integer
//   division truncates.
// - ArgMax/ArgMin: the lowest (select_last_index: highest) position equal to
//   the maximum, or NaN (NumPy's argmax returns the first NaN).
// - TopK: k rounds of ArgMax over what is not taken yet (ties in index
//   order, as ONNX says), the values gathered from the input at the indices.
// - OneHot: (indices, negative ones wrapped, unsqueezed at `axis`) == iota.
//
// Gradients are PyTorch's: none through the casts and comparisons, so Sign,
// Floor, Ceil and Round have gradient 0 and Mod's are 1 and -trunc(a / b)
// (-floor for fmod = 0); TopK's values are a gather, so the gradient lands
// on the chosen elements, as torch.topk's does. One difference: an element
// of magnitude 2^p or more passes through Floor, Ceil and Round with
// gradient 1 (tcc has no op that stops a gradient).
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Composer.h"
#include "compiler/Import/Composites.h"

#include "llvm/ADT/APFloat.h"

#include <onnx/onnx_pb.h>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// TopK's largest k (k rounds of a max tree over the axis each).
constexpr int64_t kMaxTopK = 64;

/// A rank-0 constant at `elt`'s extreme: -inf or the type's minimum
/// (`negative`), +inf or its maximum.
Value extremeScalar(Composer &c, Type elt, bool negative) {
  auto type = RankedTensorType::get({}, elt);
  Attribute a;
  if (auto ft = dyn_cast<FloatType>(elt)) {
    a = FloatAttr::get(ft, APFloat::getInf(ft.getFloatSemantics(), negative));
  } else {
    auto it = cast<IntegerType>(elt);
    unsigned w = it.getWidth();
    APInt v = it.isUnsigned() ? (negative ? APInt::getMinValue(w) : APInt::getMaxValue(w))
                              : (negative ? APInt::getSignedMinValue(w) : APInt::getSignedMaxValue(w));
    a = IntegerAttr::get(it, v);
  }
  return c.constant(DenseElementsAttr::get(type, ArrayRef<Attribute>(a)));
}

/// 0, 1, ..., n - 1 along `axis` of a rank-`rank` int64 tensor (size 1
/// elsewhere).
Value iota(Composer &c, int64_t n, int64_t axis, int64_t rank) {
  SmallVector<int64_t> shape(rank, 1), values(n);
  shape[axis] = n;
  for (int64_t i = 0; i < n; ++i)
    values[i] = i;
  auto type = RankedTensorType::get(shape, c.builder().getI64Type());
  return c.constant(DenseElementsAttr::get(type, ArrayRef<int64_t>(values)));
}

/// The number held by a one-element compile-time constant (integer or float).
std::optional<double> constNumber(Value v) {
  if (std::optional<SmallVector<int64_t>> ints = constInts(v); ints && ints->size() == 1)
    return static_cast<double>((*ints)[0]);
  DenseFPElementsAttr fp;
  if (v && matchPattern(v, m_Constant(&fp)) && fp.getNumElements() == 1)
    return (*fp.getValues<APFloat>().begin()).convertToDouble();
  return std::nullopt;
}

/// The rounding of a float tensor `x`: trunc through int64 where |x| < 2^p.
struct Rounding {
  Composer &c;
  Value x;
  Type elt;
  Value small, clamped, truncated; // |x| < 2^p; x there, else 0; trunc(clamped)

  Rounding(Composer &c, Value x) : c(c), x(x) {
    elt = cast<RankedTensorType>(x.getType()).getElementType();
    auto ft = cast<FloatType>(elt);
    double big = std::ldexp(1.0, APFloat::semanticsPrecision(ft.getFloatSemantics()) - 1);
    small = c.less(c.make<AbsOp>({x}), c.scalar(big, elt));
    clamped = c.where(small, x, c.scalar(0.0, elt));
    truncated = truncOf(clamped);
  }
  Value castTo(Value v, Type to) {
    return c.make<CastOp>({v}, {c.builder().getNamedAttr("to", TypeAttr::get(to))});
  }
  Value truncOf(Value v) { return castTo(castTo(v, c.builder().getI64Type()), elt); }
  /// floor(v) for v of magnitude below 2^p.
  Value floorOf(Value v, Value t) {
    Value above = c.greater(t, v);
    return c.where(above, c.sub(t, c.scalar(1.0, elt)), t);
  }
  Value floor() { return c.where(small, floorOf(clamped, truncated), x); }
  Value ceil() {
    Value below = c.less(truncated, clamped);
    return c.where(small, c.where(below, c.add(truncated, c.scalar(1.0, elt)), truncated), x);
  }
  Value trunc() { return c.where(small, truncated, x); }
  /// Half to even: f = floor(x), d = x - f (exact); up where d > 1/2, or
  /// d = 1/2 and f is odd.
  Value round() {
    Value f = floorOf(clamped, truncated);
    Value d = c.sub(clamped, f);
    Value half = c.scalar(0.5, elt);
    Value h = c.mul(f, half);
    Value fh = floorOf(h, truncOf(h));
    Value parity = c.sub(f, c.add(fh, fh)); // 0 or 1
    Value odd = c.greater(parity, half);
    Value tie = c.make<AndOp>({c.make<EqualOp>({d, half}), odd});
    Value up = c.make<OrOp>({c.greater(d, half), tie});
    return c.where(small, c.where(up, c.add(f, c.scalar(1.0, elt)), f), x);
  }
};

/// The first (`last`: the final) position along `axis` where `hit` holds,
/// as int64 with the axis kept (n where none does, -1 for `last`).
Value position(Composer &c, Value hit, int64_t axis, bool last) {
  auto type = cast<RankedTensorType>(hit.getType());
  int64_t n = type.getDimSize(axis);
  Value at = iota(c, n, axis, type.getRank());
  Value none = c.scalar(last ? -1.0 : static_cast<double>(n), c.builder().getI64Type());
  return c.extremum(c.where(hit, at, none), {axis}, /*isMin=*/!last);
}

/// Where `v` equals `m`, or is NaN.
Value equalOrNaN(Composer &c, Value v, Value m) {
  Value hit = c.make<EqualOp>({v, m});
  if (isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
    hit = c.make<OrOp>({hit, c.make<IsNaNOp>({v})});
  return hit;
}

} // namespace

bool mlir::tcc::isDiscreteOp(StringRef op) {
  return llvm::is_contained({"Sign", "Floor", "Ceil", "Round", "Mod", "ArgMax", "ArgMin",
                             "OneHot", "TopK"},
                            op);
}

FailureOr<SmallVector<Value>> mlir::tcc::buildDiscrete(OpBuilder &builder, Location loc,
                                                      const onnx::NodeProto &node,
                                                      ArrayRef<Value> operands) {
  StringRef opType = node.op_type();
  auto attrI = [&](StringRef name, int64_t dflt) { return attrInt(node, name, dflt); };
  Value x = operands[0];
  auto type = cast<RankedTensorType>(x.getType());
  Type elt = type.getElementType();
  const int64_t rank = type.getRank();
  const bool isFloat = isa<FloatType>(elt);
  if (elt.isInteger(1) && opType != "OneHot")
    return emitError(loc) << opType << " does not take booleans; this input is " << type;

  // What is checked before anything is built.
  if ((opType == "Floor" || opType == "Ceil" || opType == "Round") && !isFloat)
    return emitError(loc) << opType << " needs a floating-point input; this one is " << type;
  std::optional<int64_t> axis;
  if (opType == "ArgMax" || opType == "ArgMin" || opType == "TopK") {
    int64_t a = attrI("axis", opType == "TopK" ? -1 : 0);
    axis = normalizeAxis(a, rank);
    if (!axis || type.getDimSize(*axis) < 1)
      return emitError(loc) << opType << "'s axis " << a << " is out of range (or empty) for "
                            << type;
  }
  int64_t k = 0;
  if (opType == "TopK") {
    std::optional<SmallVector<int64_t>> ks = constInts(operands.size() > 1 ? operands[1] : Value());
    if (!ks || ks->size() != 1)
      return emitError(loc) << "TopK's K must be a one-element compile-time constant (tcc "
                               "compiles static shapes)";
    k = (*ks)[0];
    if (k < 1 || k > type.getDimSize(*axis) || k > kMaxTopK)
      return emitError(loc) << "TopK with K = " << k << " over an axis of "
                            << type.getDimSize(*axis) << " is not supported (1 to " << kMaxTopK
                            << ", at most the axis: tcc writes it as K rounds of a max)";
    if (node.output_size() != 2)
      return emitError(loc) << "TopK needs both its outputs";
  }
  int64_t depth = 0, onehotAxis = 0;
  if (opType == "OneHot") {
    if (operands.size() != 3 || !operands[1] || !operands[2])
      return emitError(loc) << "OneHot needs its indices, depth and values";
    std::optional<double> d = constNumber(operands[1]);
    if (!d || *d < 1)
      return emitError(loc) << "OneHot's depth must be a compile-time constant of at least 1";
    depth = static_cast<int64_t>(*d);
    auto vt = cast<RankedTensorType>(operands[2].getType());
    if (vt.getNumElements() != 2)
      return emitError(loc) << "OneHot's values must hold two elements (off, on); they are " << vt;
    int64_t a = attrI("axis", -1);
    std::optional<int64_t> n = normalizeAxis(a, rank + 1);
    if (!n)
      return emitError(loc) << "OneHot's axis " << a << " is out of range for an output of rank "
                            << rank + 1;
    onehotAxis = *n;
    if (elt.isInteger(1))
      return emitError(loc) << "OneHot's indices must be numbers; these are " << type;
  }
  if (opType == "Mod") {
    if (operands.size() != 2 || !operands[1])
      return emitError(loc) << "Mod needs two inputs";
    if (cast<RankedTensorType>(operands[1].getType()).getElementType() != elt)
      return emitError(loc) << "Mod's inputs must have one element type";
  }

  Composer c(builder, loc);
  Type i64 = builder.getI64Type();
  auto zero = [&]() { return c.scalar(0.0, elt); };
  SmallVector<Value> results;
  if (opType == "Sign") {
    Value positive = c.greater(x, zero());
    Value s = elt.isUnsignedInteger() ? c.where(positive, c.scalar(1.0, elt), zero())
                                      : c.where(positive, c.scalar(1.0, elt),
                                                c.where(c.less(x, zero()), c.scalar(-1.0, elt), zero()));
    if (isFloat)
      s = c.where(c.make<IsNaNOp>({x}), x, s);
    results.push_back(s);
  } else if (opType == "Floor" || opType == "Ceil" || opType == "Round") {
    Rounding r(c, x);
    results.push_back(opType == "Floor" ? r.floor() : opType == "Ceil" ? r.ceil() : r.round());
  } else if (opType == "Mod") {
    Value a = x, b = operands[1];
    const bool fmod = attrI("fmod", 0) != 0;
    Value q = c.div(a, b);
    if (isFloat)
      q = Rounding(c, q).trunc();
    Value r = c.sub(a, c.mul(b, q));
    if (isFloat) // an infinite b leaves a (not a - inf * 0)
      r = c.where(c.make<EqualOp>({c.make<AbsOp>({b}), extremeScalar(c, elt, false)}), a, r);
    if (!fmod && !elt.isUnsignedInteger()) {
      Value rNeg = c.less(r, zero()), bNeg = c.less(b, zero());
      Value differ = c.make<OrOp>({c.make<AndOp>({rNeg, c.make<NotOp>({bNeg})}),
                                   c.make<AndOp>({c.make<NotOp>({rNeg}), bNeg})});
      Value nonzero = c.make<NotOp>({c.make<EqualOp>({r, zero()})});
      r = c.where(c.make<AndOp>({nonzero, differ}), c.add(r, b), r);
    }
    results.push_back(r);
  } else if (opType == "ArgMax" || opType == "ArgMin") {
    Value m = c.extremum(x, {*axis}, opType == "ArgMin");
    Value idx = position(c, equalOrNaN(c, x, m), *axis, attrI("select_last_index", 0) != 0);
    if (!attrI("keepdims", 1) && idx) {
      SmallVector<int64_t> shape(type.getShape());
      shape.erase(shape.begin() + *axis);
      idx = c.reshape(idx, shape);
    }
    results.push_back(idx);
  } else if (opType == "OneHot") {
    Value idx = elt == i64 ? x : c.make<CastOp>({x}, {builder.getNamedAttr("to", TypeAttr::get(i64))});
    Value negative = c.less(idx, c.scalar(0.0, i64));
    idx = c.where(negative, c.add(idx, c.scalar(static_cast<double>(depth), i64)), idx);
    idx = c.attrShape(UnsqueezeOp::getOperationName(), idx, "axes", {onehotAxis});
    Value hit = c.make<EqualOp>({idx, iota(c, depth, onehotAxis, rank + 1)});
    Value values = operands[2];
    Value off = c.reshape(c.slice(c.reshape(values, {2}), 0, 0, 1), {});
    Value on = c.reshape(c.slice(c.reshape(values, {2}), 0, 1, 2), {});
    results.push_back(c.where(hit, on, off));
  } else { // TopK
    const bool largest = attrI("largest", 1) != 0;
    Value fill = extremeScalar(c, elt, /*negative=*/largest);
    Value taken, at = iota(c, type.getDimSize(*axis), *axis, rank);
    SmallVector<Value> picks;
    for (int64_t j = 0; j < k; ++j) {
      Value cur = taken ? c.where(taken, fill, x) : x;
      Value hit = equalOrNaN(c, cur, c.extremum(cur, {*axis}, !largest));
      if (taken)
        hit = c.make<AndOp>({hit, c.make<NotOp>({taken})});
      Value pick = position(c, hit, *axis, /*last=*/false);
      Value chosen = c.make<EqualOp>({at, pick});
      taken = taken ? c.make<OrOp>({taken, chosen}) : chosen;
      picks.push_back(pick);
    }
    Value indices = picks.size() == 1
                        ? picks[0]
                        : c.make<ConcatOp>(picks, {builder.getNamedAttr("axis", builder.getI64IntegerAttr(*axis))});
    Value values = c.make<GatherElementsOp>(
        {x, indices}, {builder.getNamedAttr("axis", builder.getI64IntegerAttr(*axis))});
    results = {values, indices};
  }
  for (Value &r : results) {
    FailureOr<Value> kept = c.finish(r);
    if (failed(kept))
      return failure();
  }
  return results;
}
