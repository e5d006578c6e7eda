//===- TccFolders.cpp - constant folding of tcc ops -----------------------===//
//
// Folders evaluate ops whose operands are constants. They are what makes the
// shape subgraphs of exported models (Shape -> Gather -> Unsqueeze -> Concat
// -> Reshape, Cast/Equal/Not of constant masks) disappear at import time; the
// importer calls them as it creates each op, and `-canonicalize` runs them
// again on IR read from text.
//
// Values are evaluated in int64 (integers, i1) or double (floats) and rounded
// to the result type at the end. Results larger than `kMaxFoldElements` are
// not folded unless they are splats, so the IR never grows by much.
//
//===----------------------------------------------------------------------===//

#include "llvm/Support/CheckedArithmetic.h"
#include "compiler/Dialect/TccOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/APFloat.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tcc;


/// The largest non-splat result a folder creates.
static constexpr int64_t kMaxFoldElements = 1 << 22;

/// Whether a shape has more than kMaxFoldElements elements, computed with
/// checked products (one that overflows int64 is more), or a dynamic size.
static bool tooLargeToFold(ShapedType t) {
  int64_t n = 1;
  for (int64_t d : t.getShape()) {
    if (d < 0)
      return true;
    std::optional<int64_t> m = llvm::checkedMul(n, d);
    if (!m || *m > kMaxFoldElements)
      return true;
    n = *m;
  }
  return false;
}

namespace {
/// A constant tensor's values, widened: int64 for integer element types
/// (i1 included), double for floats. A splat stores one value.
struct ConstTensor {
  RankedTensorType type;
  bool isFloat = false;
  bool splat = false;
  std::vector<int64_t> ints;
  std::vector<double> floats;

  static std::optional<ConstTensor> get(Attribute attr) {
    auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
    if (!dense)
      return std::nullopt;
    ConstTensor c;
    c.type = cast<RankedTensorType>(dense.getType());
    c.isFloat = isa<FloatType>(c.type.getElementType());
    c.splat = dense.isSplat();
    if (!c.splat && tooLargeToFold(c.type))
      return std::nullopt;
    bool isUnsigned = c.type.getElementType().isUnsignedInteger() ||
                      c.type.getElementType().isInteger(1);
    auto push = [&](auto range) {
      for (auto v : range) {
        if constexpr (std::is_same_v<decltype(v), APFloat>) {
          bool lost;
          v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
          c.floats.push_back(v.convertToDouble());
        } else {
          c.ints.push_back(isUnsigned ? (int64_t)v.getZExtValue()
                                      : v.getSExtValue());
        }
        if (c.splat)
          break;
      }
    };
    if (c.isFloat)
      push(dense.getValues<APFloat>());
    else
      push(dense.getValues<APInt>());
    return c;
  }

  int64_t count() const { return splat ? 1 : type.getNumElements(); }
  double f(int64_t i) const {
    i = splat ? 0 : i;
    return isFloat ? floats[i] : (double)ints[i];
  }
  int64_t n(int64_t i) const {
    i = splat ? 0 : i;
    return isFloat ? (int64_t)floats[i] : ints[i];
  }
};

/// Builds result values of `type` one element at a time.
struct ConstBuilder {
  RankedTensorType type;
  bool isFloat;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  explicit ConstBuilder(RankedTensorType type)
      : type(type), isFloat(isa<FloatType>(type.getElementType())) {}
  void pushF(double v) {
    if (isFloat)
      floats.push_back(v);
    else
      ints.push_back((int64_t)v);
  }
  void pushN(int64_t v) {
    if (isFloat)
      floats.push_back((double)v);
    else
      ints.push_back(v);
  }
  /// Appends element `i` of `c`, converting like ONNX's Cast.
  void push(const ConstTensor &c, int64_t i) {
    if (c.isFloat)
      pushF(c.f(i));
    else
      pushN(c.n(i));
  }
  DenseElementsAttr build(bool splatResult = false) const {
    RankedTensorType storage = type;
    Type elt = type.getElementType();
    size_t count = isFloat ? floats.size() : ints.size();
    if (splatResult || (int64_t)count != type.getNumElements()) {
      if (count != 1)
        return {};
      storage = RankedTensorType::get({}, elt);
    }
    DenseElementsAttr attr;
    if (auto ft = dyn_cast<FloatType>(elt)) {
      SmallVector<APFloat> values;
      for (double d : floats) {
        APFloat v(d);
        bool lost;
        v.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
        values.push_back(v);
      }
      attr = DenseElementsAttr::get(storage, values);
    } else {
      unsigned width = elt.getIntOrFloatBitWidth();
      SmallVector<APInt> values;
      for (int64_t v : ints)
        values.push_back(width == 1 ? APInt(1, v != 0)
                                    : APInt(width, (uint64_t)v, /*signed=*/true));
      attr = DenseElementsAttr::get(storage, values);
    }
    if (storage != type)
      attr = DenseElementsAttr::get(type, attr.getSplatValue<Attribute>());
    return attr;
  }
};
} // namespace

/// Row-major strides of `shape`.
static SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Index into a tensor of `shape` (broadcast into `out`) of the element at
/// linear index `linear` of `out`.
static int64_t broadcastIndex(int64_t linear, ArrayRef<int64_t> out,
                              ArrayRef<int64_t> shape) {
  int64_t idx = 0, stride = 1;
  int64_t offset = out.size() - shape.size();
  for (int64_t d = (int64_t)out.size() - 1; d >= 0; --d) {
    int64_t coord = linear % out[d];
    linear /= out[d];
    if (d >= offset) {
      int64_t dim = shape[d - offset];
      if (dim != 1)
        idx += coord * stride;
      stride *= dim;
    }
  }
  return idx;
}

static double evalFloat(EwKind kind, double a, double b) {
  switch (kind) {
  case EwKind::Add: return a + b;
  case EwKind::Sub: return a - b;
  case EwKind::Mul: return a * b;
  case EwKind::Div: return a / b;
  case EwKind::Pow: return std::pow(a, b);
  case EwKind::Equal: return a == b;
  case EwKind::Less: return a < b;
  case EwKind::Greater: return a > b;
  case EwKind::Sqrt: return std::sqrt(a);
  case EwKind::Neg: return -a;
  case EwKind::Exp: return std::exp(a);
  case EwKind::Log: return std::log(a);
  case EwKind::Erf: return std::erf(a);
  case EwKind::Tanh: return std::tanh(a);
  case EwKind::Sigmoid: return 1.0 / (1.0 + std::exp(-a));
  case EwKind::Relu: return a > 0 ? a : 0.0;
  case EwKind::Reciprocal: return 1.0 / a;
  case EwKind::Abs: return std::fabs(a);
  case EwKind::Identity: return a;
  case EwKind::And: return a != 0 && b != 0;
  case EwKind::Or: return a != 0 || b != 0;
  case EwKind::Not: return a == 0;
  case EwKind::LessOrEqual: return a <= b;
  case EwKind::GreaterOrEqual: return a >= b;
  case EwKind::Max: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  case EwKind::Min: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  case EwKind::Sin: return std::sin(a);
  case EwKind::Cos: return std::cos(a);
  case EwKind::IsNaN: return std::isnan(a);
  }
  return 0;
}

/// Integer evaluation; std::nullopt where the result is undefined (division
/// by zero) or not an integer operation, so the op is left alone.
static std::optional<int64_t> evalInt(EwKind kind, int64_t a, int64_t b) {
  switch (kind) {
  case EwKind::Add: return (int64_t)((uint64_t)a + (uint64_t)b);
  case EwKind::Sub: return (int64_t)((uint64_t)a - (uint64_t)b);
  case EwKind::Mul: return (int64_t)((uint64_t)a * (uint64_t)b);
  case EwKind::Div:
    if (b == 0 || (a == INT64_MIN && b == -1))
      return std::nullopt;
    return a / b;
  case EwKind::Pow: {
    if (b < 0)
      return std::nullopt;
    int64_t r = 1;
    for (int64_t i = 0; i < b && i < 64; ++i)
      r = (int64_t)((uint64_t)r * (uint64_t)a);
    return r;
  }
  case EwKind::Equal: return a == b;
  case EwKind::Less: return a < b;
  case EwKind::Greater: return a > b;
  case EwKind::And: return a != 0 && b != 0;
  case EwKind::Or: return a != 0 || b != 0;
  case EwKind::Not: return a == 0;
  case EwKind::LessOrEqual: return a <= b;
  case EwKind::GreaterOrEqual: return a >= b;
  case EwKind::Max: return std::max(a, b);
  case EwKind::Min: return std::min(a, b);
  case EwKind::Neg: return (int64_t)(0 - (uint64_t)a);
  case EwKind::Relu: return a > 0 ? a : 0;
  case EwKind::Abs: return a < 0 ? -a : a;
  case EwKind::Identity: return a;
  default: return std::nullopt;
  }
}

OpFoldResult mlir::tcc::foldElementwise(EwKind kind, Type resultType,
                                        ArrayRef<Attribute> operands) {
  auto type = cast<RankedTensorType>(resultType);
  SmallVector<ConstTensor> in;
  for (Attribute a : operands) {
    std::optional<ConstTensor> c = ConstTensor::get(a);
    if (!c)
      return {};
    in.push_back(std::move(*c));
  }
  bool allSplat = llvm::all_of(in, [](const ConstTensor &c) { return c.splat; });
  if (!allSplat && tooLargeToFold(type))
    return {};
  // Operands are evaluated in floating point when any is a float, except for
  // a float exponent of an integer base (Pow), which stays integer-typed.
  bool floatMath = in[0].isFloat || (in.size() > 1 && in[1].isFloat);
  int64_t count = allSplat ? 1 : type.getNumElements();
  ConstBuilder out(type);
  for (int64_t i = 0; i < count; ++i) {
    int64_t ia = allSplat ? 0 : broadcastIndex(i, type.getShape(), in[0].type.getShape());
    int64_t ib = 0;
    if (in.size() > 1 && !allSplat)
      ib = broadcastIndex(i, type.getShape(), in[1].type.getShape());
    if (floatMath) {
      double a = in[0].f(ia), b = in.size() > 1 ? in[1].f(ib) : 0.0;
      out.pushF(evalFloat(kind, a, b));
    } else {
      std::optional<int64_t> r =
          evalInt(kind, in[0].n(ia), in.size() > 1 ? in[1].n(ib) : 0);
      if (!r)
        return {};
      out.pushN(*r);
    }
  }
  return out.build(allSplat);
}

//===----------------------------------------------------------------------===//
// Folders of the non-elementwise ops
//===----------------------------------------------------------------------===//

/// Whether `op` has been planned (tcc-plan-memory's `tcc.offsets`): then it
/// is not folded. Its result has its own slot and, on CUDA, its own storage
/// type (an identity cast of an fp32 constant makes an fp16 value), and the
/// lowering to kernels, whose conversion folds what it can, must keep it.
bool mlir::tcc::keepsItsSlot(Operation *op) { return op->hasAttr("tcc.offsets"); }

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult ConstantOfShapeOp::fold(FoldAdaptor) {
  if (keepsItsSlot(*this))
    return {};
  auto dense = dyn_cast<DenseElementsAttr>(getValue());
  if (!dense)
    return {};
  return DenseElementsAttr::get(getType(), dense.getValues<Attribute>()[0]);
}

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  auto input = cast<RankedTensorType>(getInput().getType());
  int64_t rank = input.getRank();
  auto clampIdx = [&](int64_t i) {
    if (i < 0)
      i += rank;
    return std::clamp<int64_t>(i, 0, rank);
  };
  int64_t start = clampIdx(getStart().value_or(0));
  int64_t end = clampIdx(getEnd().value_or(rank));
  ConstBuilder out(getType());
  for (int64_t i = start; i < end; ++i)
    out.pushN(input.getDimSize(i));
  return out.build();
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  if (getInput().getType() == getType())
    return getInput();
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getInput());
  if (!c)
    return {};
  ConstBuilder out(getType());
  bool toBool = getType().getElementType().isInteger(1);
  for (int64_t i = 0; i < c->count(); ++i) {
    if (toBool)
      out.pushN(c->f(i) != 0.0);
    else
      out.push(*c, i);
  }
  return out.build(c->splat);
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  // A uniform condition selects one side, when that side already has the
  // result's type.
  if (auto cond = dyn_cast_or_null<DenseElementsAttr>(adaptor.getCondition())) {
    if (cond.isSplat()) {
      Value chosen = cond.getSplatValue<bool>() ? getX() : getY();
      if (chosen.getType() == getType())
        return chosen;
    }
  }
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getCondition());
  std::optional<ConstTensor> x = ConstTensor::get(adaptor.getX());
  std::optional<ConstTensor> y = ConstTensor::get(adaptor.getY());
  if (!c || !x || !y || tooLargeToFold(getType()))
    return {};
  ConstBuilder out(getType());
  ArrayRef<int64_t> shape = getType().getShape();
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    bool pick = c->n(broadcastIndex(i, shape, c->type.getShape())) != 0;
    const ConstTensor &src = pick ? *x : *y;
    out.push(src, broadcastIndex(i, shape, src.type.getShape()));
  }
  return out.build();
}

/// Folds an op that only reinterprets the shape: the identity when types
/// match, a reshaped constant when the input is one.
static OpFoldResult foldReshapeLike(Value input, Attribute inputAttr,
                                    RankedTensorType resultType) {
  if (input.getType() == resultType)
    return input;
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(inputAttr))
    return dense.reshape(resultType);
  return {};
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  return foldReshapeLike(getInput(), adaptor.getInput(), getType());
}
OpFoldResult UnsqueezeOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  return foldReshapeLike(getInput(), adaptor.getInput(), getType());
}
OpFoldResult SqueezeOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  return foldReshapeLike(getInput(), adaptor.getInput(), getType());
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  auto inType = cast<RankedTensorType>(getInput().getType());
  int64_t rank = inType.getRank();
  SmallVector<int64_t> perm = getPermutation();
  auto isIdentity = [rank](ArrayRef<int64_t> p) {
    for (int64_t i = 0; i < rank; ++i)
      if (p[i] != i)
        return false;
    return true;
  };
  if (isIdentity(perm))
    return getInput();
  // transpose(transpose(x)) = x when the permutations cancel: the backward
  // pass of `x @ W^T` reads W through two transposes. Other compositions are
  // left alone: a last-two-dimension swap on either side may fold into a GEMM
  // as a transpose flag, which a composed permutation would hide.
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    SmallVector<int64_t> innerPerm = inner.getPermutation();
    SmallVector<int64_t> composed;
    for (int64_t i = 0; i < rank; ++i)
      composed.push_back(innerPerm[perm[i]]);
    if (isIdentity(composed))
      return inner.getInput();
  }
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getInput());
  if (!c)
    return {};
  if (c->splat)
    return DenseElementsAttr::get(
        getType(), cast<DenseElementsAttr>(adaptor.getInput()).getSplatValue<Attribute>());
  SmallVector<int64_t> inStrides = stridesOf(inType.getShape());
  ArrayRef<int64_t> outShape = getType().getShape();
  ConstBuilder out(getType());
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    int64_t rem = i, src = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      src += (rem % outShape[d]) * inStrides[perm[d]];
      rem /= outShape[d];
    }
    out.push(*c, src);
  }
  return out.build();
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  if (getInputs().size() == 1 && getInputs()[0].getType() == getType())
    return getInputs()[0];
  SmallVector<ConstTensor> in;
  for (Attribute a : adaptor.getInputs()) {
    std::optional<ConstTensor> c = ConstTensor::get(a);
    if (!c)
      return {};
    in.push_back(std::move(*c));
  }
  if (tooLargeToFold(getType()))
    return {};
  int64_t axis = *normalizeAxis(getAxis(), getType().getRank());
  ArrayRef<int64_t> shape = getType().getShape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (int64_t d = axis + 1; d < (int64_t)shape.size(); ++d)
    inner *= shape[d];
  ConstBuilder out(getType());
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor &c : in) {
      int64_t chunk = c.type.getDimSize(axis) * inner;
      for (int64_t j = 0; j < chunk; ++j)
        out.push(c, o * chunk + j);
    }
  return out.build();
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  std::optional<ConstTensor> data = ConstTensor::get(adaptor.getData());
  std::optional<ConstTensor> idx = ConstTensor::get(adaptor.getIndices());
  if (!data || !idx || tooLargeToFold(getType()))
    return {};
  auto dataType = cast<RankedTensorType>(getData().getType());
  int64_t axis = *normalizeAxis(getAxis(), dataType.getRank());
  int64_t outer = 1, inner = 1, dim = dataType.getDimSize(axis);
  for (int64_t d = 0; d < axis; ++d)
    outer *= dataType.getDimSize(d);
  for (int64_t d = axis + 1; d < dataType.getRank(); ++d)
    inner *= dataType.getDimSize(d);
  int64_t numIdx = idx->type.getNumElements();
  ConstBuilder out(getType());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < numIdx; ++k) {
      int64_t j = idx->n(k);
      if (j < 0)
        j += dim;
      if (j < 0 || j >= dim)
        return {}; // out of range: left for the verifier of a later stage
      for (int64_t in = 0; in < inner; ++in)
        out.push(*data, (o * dim + j) * inner + in);
    }
  return out.build();
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  auto inType = cast<RankedTensorType>(getInput().getType());
  SmallVector<SliceDim> dims;
  if (failed(resolveSlice(std::nullopt, inType.getShape(), getStarts(),
                          getEnds(), getAxes(), getSteps(), dims)))
    return {};
  bool identity = inType == getType() &&
                  llvm::all_of(dims, [](const SliceDim &d) {
                    return d.start == 0 && d.step == 1;
                  });
  if (identity)
    return getInput();
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getInput());
  if (!c || tooLargeToFold(getType()))
    return {};
  SmallVector<int64_t> inStrides = stridesOf(inType.getShape());
  ArrayRef<int64_t> outShape = getType().getShape();
  ConstBuilder out(getType());
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    int64_t rem = i, src = 0;
    for (int64_t d = (int64_t)outShape.size() - 1; d >= 0; --d) {
      int64_t coord = rem % outShape[d];
      rem /= outShape[d];
      src += (dims[d].start + coord * dims[d].step) * inStrides[d];
    }
    out.push(*c, src);
  }
  return out.build();
}

OpFoldResult ExpandOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  if (getInput().getType() == getType())
    return getInput();
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getInput());
  if (!c)
    return {};
  if (c->splat)
    return DenseElementsAttr::get(
        getType(), cast<DenseElementsAttr>(adaptor.getInput()).getSplatValue<Attribute>());
  if (tooLargeToFold(getType()))
    return {};
  ConstBuilder out(getType());
  for (int64_t i = 0; i < getType().getNumElements(); ++i)
    out.push(*c, broadcastIndex(i, getType().getShape(), c->type.getShape()));
  return out.build();
}

LogicalResult DropoutOp::fold(FoldAdaptor, SmallVectorImpl<OpFoldResult> &results) {
  if (keepsItsSlot(*this))
    return failure();
  if (getTraining() && !getRatio().isZero())
    return failure();
  results.push_back(getInput());
  auto maskType = cast<RankedTensorType>(getMask().getType());
  results.push_back(DenseElementsAttr::get(maskType, true));
  return success();
}

//===----------------------------------------------------------------------===//
// Folders of the ImportOnly ops (TccImportOps.cpp)
//===----------------------------------------------------------------------===//

OpFoldResult IsNaNOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  return foldElementwise(EwKind::IsNaN, getType(), adaptor.getOperands());
}

OpFoldResult PadOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  auto inType = cast<RankedTensorType>(getInput().getType());
  if (inType == getType() && llvm::all_of(getPads(), [](int64_t p) { return p == 0; }))
    return getInput();
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getInput());
  if (!c || tooLargeToFold(getType()))
    return {};
  std::optional<ArrayRef<int64_t>> axes;
  if (auto a = getAxesAttr())
    axes = a.asArrayRef();
  FailureOr<SmallVector<std::pair<int64_t, int64_t>>> pads =
      resolvePads(std::nullopt, inType.getRank(), getPads(), axes);
  if (failed(pads))
    return {};
  std::optional<ConstTensor> fill;
  if (auto v = getValueAttr())
    fill = ConstTensor::get(v);
  SmallVector<int64_t> inStrides = stridesOf(inType.getShape());
  ArrayRef<int64_t> outShape = getType().getShape();
  ConstBuilder out(getType());
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    int64_t rem = i, src = 0;
    bool inside = true;
    for (int64_t d = (int64_t)outShape.size() - 1; d >= 0; --d) {
      int64_t coord = rem % outShape[d] - (*pads)[d].first;
      rem /= outShape[d];
      if (coord < 0 || coord >= inType.getDimSize(d))
        inside = false;
      else
        src += coord * inStrides[d];
    }
    if (inside)
      out.push(*c, src);
    else if (fill)
      out.push(*fill, 0);
    else
      out.pushN(0);
  }
  return out.build();
}

OpFoldResult GatherElementsOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  std::optional<ConstTensor> data = ConstTensor::get(adaptor.getData());
  std::optional<ConstTensor> idx = ConstTensor::get(adaptor.getIndices());
  if (!data || !idx || tooLargeToFold(getType()))
    return {};
  auto dataType = cast<RankedTensorType>(getData().getType());
  int64_t axis = *normalizeAxis(getAxis(), dataType.getRank());
  SmallVector<int64_t> dataStrides = stridesOf(dataType.getShape());
  ArrayRef<int64_t> outShape = getType().getShape();
  int64_t dim = dataType.getDimSize(axis);
  ConstBuilder out(getType());
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    int64_t rem = i, src = 0;
    for (int64_t d = (int64_t)outShape.size() - 1; d >= 0; --d) {
      int64_t coord = rem % outShape[d];
      rem /= outShape[d];
      if (d == axis) {
        coord = idx->n(i);
        if (coord < 0)
          coord += dim;
        if (coord < 0 || coord >= dim)
          return {}; // out of range: left alone
      } else if (coord >= dataType.getDimSize(d)) {
        return {};
      }
      src += coord * dataStrides[d];
    }
    out.push(*data, src);
  }
  return out.build();
}

OpFoldResult TriluOp::fold(FoldAdaptor adaptor) {
  if (keepsItsSlot(*this))
    return {};
  std::optional<ConstTensor> c = ConstTensor::get(adaptor.getInput());
  if (!c || tooLargeToFold(getType()))
    return {};
  ArrayRef<int64_t> shape = getType().getShape();
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  ConstBuilder out(getType());
  for (int64_t i = 0; i < getType().getNumElements(); ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    if (triluKeeps(getUpper() != 0, getK(), row, col))
      out.push(*c, i);
    else
      out.pushN(0);
  }
  return out.build();
}
