//===- TccOps.cpp - tcc dialect: registration, shape inference, verifiers -===//
//
// Every op infers its result types from operands and attributes; ODS wires
// the inference into the verifier (`verifyInferredResultTypes`), so the
// checks here are the verifier for shapes and attribute values. Messages name
// the op and say which value is wrong.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::tcc;

#include "compiler/Dialect/TccOpsDialect.cpp.inc"
#include "compiler/Dialect/TccInterfaces.cpp.inc"
#include "compiler/Dialect/TccEnums.cpp.inc"

void TccDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/Dialect/TccOps.cpp.inc"
      >();
  registerAttributes();
}

Operation *TccDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}

//===----------------------------------------------------------------------===//
// Shared shape rules
//===----------------------------------------------------------------------===//

bool mlir::tcc::isComparison(EwKind kind) {
  switch (kind) {
  case EwKind::Equal:
  case EwKind::Less:
  case EwKind::Greater:
  case EwKind::LessOrEqual:
  case EwKind::GreaterOrEqual:
  case EwKind::IsNaN:
  case EwKind::And:
  case EwKind::Or:
  case EwKind::Not:
    return true;
  default:
    return false;
  }
}

bool mlir::tcc::broadcastShapes(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs,
                                SmallVectorImpl<int64_t> &result) {
  size_t rank = std::max(lhs.size(), rhs.size());
  result.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l == r || r == 1)
      result[i] = l;
    else if (l == 1)
      result[i] = r;
    else
      return false;
  }
  return true;
}

std::string mlir::tcc::nodeNameOf(Location loc) {
  if (auto n = dyn_cast<NameLoc>(loc))
    return n.getName().str();
  if (auto f = dyn_cast<FusedLoc>(loc))
    for (Location l : f.getLocations())
      if (std::string s = nodeNameOf(l); !s.empty())
        return s;
  return "";
}

std::optional<EwKind> mlir::tcc::runtimeEwKind(Operation *op) {
  auto ew = dyn_cast<ElementwiseOpInterface>(op);
  if (!ew || op->hasTrait<OpTrait::tcc::ImportOnly>())
    return std::nullopt;
  std::optional<EwKind> kind = ew.getEwKind();
  if (kind == EwKind::Identity)
    return std::nullopt;
  return kind;
}

uint32_t mlir::tcc::reductionMask(Operation *op) {
  int64_t rank = cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes");
  bool noop = cast<IntegerAttr>(op->getAttr("noop_with_empty_axes")).getInt();
  uint32_t mask = 0;
  if (!axes || axes.empty())
    mask = noop ? 0 : (rank ? (uint32_t)((1ULL << rank) - 1) : 0);
  else
    for (int64_t a : axes.asArrayRef())
      mask |= 1u << *normalizeAxis(a, rank);
  return mask;
}

std::optional<int64_t> mlir::tcc::normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

/// Emits "'<op>' op <message>" at `loc` when there is one; always fails.
static LogicalResult opError(std::optional<Location> loc, StringRef opName,
                             const Twine &message) {
  return emitOptionalError(loc, "'", opName, "' op ", message);
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, ", ");
  os << "]";
  return s;
}

static RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

static StringRef ewOpName(EwKind kind) {
  switch (kind) {
  case EwKind::Add: return AddOp::getOperationName();
  case EwKind::Sub: return SubOp::getOperationName();
  case EwKind::Mul: return MulOp::getOperationName();
  case EwKind::Div: return DivOp::getOperationName();
  case EwKind::Pow: return PowOp::getOperationName();
  case EwKind::Equal: return EqualOp::getOperationName();
  case EwKind::Less: return LessOp::getOperationName();
  case EwKind::Greater: return GreaterOp::getOperationName();
  case EwKind::And: return AndOp::getOperationName();
  case EwKind::Or: return OrOp::getOperationName();
  case EwKind::LessOrEqual: return LessOrEqualOp::getOperationName();
  case EwKind::GreaterOrEqual: return GreaterOrEqualOp::getOperationName();
  case EwKind::Max: return MaxOp::getOperationName();
  case EwKind::Min: return MinOp::getOperationName();
  default: return "tcc.elementwise";
  }
}

LogicalResult mlir::tcc::inferBroadcastOp(std::optional<Location> loc,
                                          EwKind kind, Type lhsType,
                                          Type rhsType,
                                          SmallVectorImpl<Type> &types) {
  StringRef name = ewOpName(kind);
  auto lhs = cast<RankedTensorType>(lhsType);
  auto rhs = cast<RankedTensorType>(rhsType);
  Type lhsElt = lhs.getElementType(), rhsElt = rhs.getElementType();
  // Pow is the one ONNX op whose exponent may have another type than its base.
  if (kind != EwKind::Pow && lhsElt != rhsElt)
    return opError(loc, name,
                   Twine("operands have different element types (") +
                       llvm::formatv("{0} and {1})", lhsElt, rhsElt).str());
  bool logical = kind == EwKind::And || kind == EwKind::Or;
  if (logical && !lhsElt.isInteger(1))
    return opError(loc, name, "operands must be i1 tensors");
  SmallVector<int64_t> shape;
  if (!broadcastShapes(lhs.getShape(), rhs.getShape(), shape))
    return opError(loc, name,
                   "operand shapes " + shapeStr(lhs.getShape()) + " and " +
                       shapeStr(rhs.getShape()) + " do not broadcast");
  Type elt = isComparison(kind) ? IntegerType::get(lhs.getContext(), 1) : lhsElt;
  types.push_back(tensorOf(shape, elt));
  return success();
}

LogicalResult mlir::tcc::inferReduceOp(std::optional<Location> loc,
                                       Type inputType,
                                       std::optional<ArrayRef<int64_t>> axes,
                                       int64_t keepdims,
                                       int64_t noopWithEmptyAxes,
                                       SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(inputType);
  int64_t rank = input.getRank();
  if (keepdims != 0 && keepdims != 1)
    return emitOptionalError(loc, "reduction: keepdims must be 0 or 1, got ",
                             keepdims);
  llvm::SmallVector<bool> reduced(rank, false);
  if (!axes || axes->empty()) {
    if (noopWithEmptyAxes) {
      types.push_back(input);
      return success();
    }
    reduced.assign(rank, true);
  } else {
    for (int64_t a : *axes) {
      std::optional<int64_t> n = normalizeAxis(a, rank);
      if (!n)
        return emitOptionalError(loc, "reduction: axis ", a,
                                 " is out of range for rank ", rank);
      if (reduced[*n])
        return emitOptionalError(loc, "reduction: axis ", a,
                                 " appears more than once");
      reduced[*n] = true;
    }
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      shape.push_back(input.getDimSize(i));
    else if (keepdims)
      shape.push_back(1);
  }
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Per-op inference and verifiers
//===----------------------------------------------------------------------===//

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto c = cast<RankedTensorType>(adaptor.getCondition().getType());
  auto x = cast<RankedTensorType>(adaptor.getX().getType());
  auto y = cast<RankedTensorType>(adaptor.getY().getType());
  if (x.getElementType() != y.getElementType())
    return opError(loc, getOperationName(),
                   "x and y have different element types");
  SmallVector<int64_t> s1, s2;
  if (!broadcastShapes(c.getShape(), x.getShape(), s1) ||
      !broadcastShapes(s1, y.getShape(), s2))
    return opError(loc, getOperationName(),
                   "shapes " + shapeStr(c.getShape()) + ", " +
                       shapeStr(x.getShape()) + " and " +
                       shapeStr(y.getShape()) + " do not broadcast");
  types.push_back(tensorOf(s2, x.getElementType()));
  return success();
}

LogicalResult CastOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  types.push_back(tensorOf(input.getShape(), adaptor.getTo()));
  return success();
}

LogicalResult CastOp::verify() {
  Type to = getTo();
  if (!isa<FloatType, IntegerType>(to))
    return emitOpError("cannot cast to ") << to
                                          << ": only float and integer types";
  return success();
}

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = cast<RankedTensorType>(adaptor.getRhs().getType());
  StringRef name = getOperationName();
  if (lhs.getElementType() != rhs.getElementType())
    return opError(loc, name, "operands have different element types");
  if (lhs.getRank() < 1 || rhs.getRank() < 1)
    return opError(loc, name, "operands must have rank >= 1");
  SmallVector<int64_t> a(lhs.getShape()), b(rhs.getShape());
  bool lhsVec = a.size() == 1, rhsVec = b.size() == 1;
  if (lhsVec)
    a.insert(a.begin(), 1);
  if (rhsVec)
    b.push_back(1);
  int64_t k1 = a.back(), k2 = b[b.size() - 2];
  if (k1 != k2)
    return opError(loc, name,
                   "contraction dimensions differ: " + shapeStr(lhs.getShape()) +
                       " x " + shapeStr(rhs.getShape()));
  SmallVector<int64_t> batch;
  if (!broadcastShapes(ArrayRef(a).drop_back(2), ArrayRef(b).drop_back(2), batch))
    return opError(loc, name,
                   "batch dimensions do not broadcast: " +
                       shapeStr(lhs.getShape()) + " x " +
                       shapeStr(rhs.getShape()));
  SmallVector<int64_t> shape(batch);
  if (!lhsVec)
    shape.push_back(a[a.size() - 2]);
  if (!rhsVec)
    shape.push_back(b.back());
  types.push_back(tensorOf(shape, lhs.getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  auto a = cast<RankedTensorType>(adaptor.getA().getType());
  auto b = cast<RankedTensorType>(adaptor.getB().getType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return opError(loc, name, "A and B must be matrices");
  if (a.getElementType() != b.getElementType())
    return opError(loc, name, "A and B have different element types");
  int64_t ta = adaptor.getTransA(), tb = adaptor.getTransB();
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return opError(loc, name, "transA and transB must be 0 or 1");
  int64_t m = a.getDimSize(ta ? 1 : 0), k = a.getDimSize(ta ? 0 : 1);
  int64_t kb = b.getDimSize(tb ? 1 : 0), n = b.getDimSize(tb ? 0 : 1);
  if (k != kb)
    return opError(loc, name,
                   "inner dimensions differ: op(A) is " + shapeStr({m, k}) +
                       ", op(B) is " + shapeStr({kb, n}));
  if (Value c = adaptor.getC()) {
    auto ct = cast<RankedTensorType>(c.getType());
    SmallVector<int64_t> out;
    if (ct.getElementType() != a.getElementType() ||
        !broadcastShapes({m, n}, ct.getShape(), out) ||
        out != SmallVector<int64_t>{m, n})
      return opError(loc, name,
                     "C of shape " + shapeStr(ct.getShape()) +
                         " does not broadcast to " + shapeStr({m, n}));
  }
  types.push_back(tensorOf({m, n}, a.getElementType()));
  return success();
}

static LogicalResult inferSoftmaxLike(std::optional<Location> loc,
                                      StringRef name, Value input, int64_t axis,
                                      SmallVectorImpl<Type> &types) {
  auto t = cast<RankedTensorType>(input.getType());
  if (!normalizeAxis(axis, t.getRank()))
    return opError(loc, name,
                   "axis " + Twine(axis) + " is out of range for rank " +
                       Twine(t.getRank()));
  types.push_back(t);
  return success();
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferSoftmaxLike(loc, getOperationName(), adaptor.getInput(),
                          adaptor.getAxis(), types);
}

LogicalResult LogSoftmaxOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferSoftmaxLike(loc, getOperationName(), adaptor.getInput(),
                          adaptor.getAxis(), types);
}

/// The element type ONNX's `stash_type` names (a TensorProto data type).
static Type stashType(MLIRContext *ctx, int64_t stash) {
  switch (stash) {
  case 1: return Float32Type::get(ctx);
  case 10: return Float16Type::get(ctx);
  case 11: return Float64Type::get(ctx);
  case 16: return BFloat16Type::get(ctx);
  default: return nullptr;
  }
}

LogicalResult LayerNormalizationOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  auto x = cast<RankedTensorType>(adaptor.getInput().getType());
  std::optional<int64_t> axis = normalizeAxis(adaptor.getAxis(), x.getRank());
  if (!axis)
    return opError(loc, name,
                   "axis " + Twine(adaptor.getAxis()) +
                       " is out of range for rank " + Twine(x.getRank()));
  Type stash = stashType(ctx, adaptor.getStashType());
  if (!stash)
    return opError(loc, name,
                   "stash_type " + Twine(adaptor.getStashType()) +
                       " is not a floating-point type");
  ArrayRef<int64_t> normalized = x.getShape().drop_front(*axis);
  for (Value v : {adaptor.getScale(), adaptor.getBias()}) {
    if (!v)
      continue;
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> out;
    if (t.getElementType() != x.getElementType() ||
        !broadcastShapes(normalized, t.getShape(), out) ||
        ArrayRef<int64_t>(out) != normalized)
      return opError(loc, name,
                     "scale/bias of shape " + shapeStr(t.getShape()) +
                         " does not broadcast to the normalized shape " +
                         shapeStr(normalized));
  }
  SmallVector<int64_t> statShape(x.getShape());
  for (int64_t i = *axis; i < x.getRank(); ++i)
    statShape[i] = 1;
  types.push_back(x);
  types.push_back(tensorOf(statShape, stash));
  types.push_back(tensorOf(statShape, stash));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto data = cast<RankedTensorType>(adaptor.getData().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  std::optional<int64_t> axis = normalizeAxis(adaptor.getAxis(), data.getRank());
  if (!axis)
    return opError(loc, getOperationName(),
                   "axis " + Twine(adaptor.getAxis()) +
                       " is out of range for rank " + Twine(data.getRank()));
  SmallVector<int64_t> shape(data.getShape().take_front(*axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(*axis + 1));
  types.push_back(tensorOf(shape, data.getElementType()));
  return success();
}

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  ArrayRef<int64_t> target = adaptor.getShape();
  bool allowZero = adaptor.getAllowzero() != 0;
  SmallVector<int64_t> shape;
  int64_t inferAt = -1, known = 1;
  for (auto [i, dim] : llvm::enumerate(target)) {
    int64_t d = dim;
    if (d == -1) {
      if (inferAt >= 0)
        return opError(loc, name, "shape " + shapeStr(target) +
                                      " has more than one -1");
      inferAt = i;
      shape.push_back(1);
      continue;
    }
    if (d < -1)
      return opError(loc, name, "shape " + shapeStr(target) +
                                    " has a negative dimension");
    if (d == 0 && !allowZero) {
      if ((int64_t)i >= input.getRank())
        return opError(loc, name,
                       "shape " + shapeStr(target) + " copies dimension " +
                           Twine(i) + " that the input does not have");
      d = input.getDimSize(i);
    }
    shape.push_back(d);
    std::optional<int64_t> k = llvm::checkedMul(known, d);
    if (!k)
      return opError(loc, name, "shape " + shapeStr(target) +
                                    " has more elements than an int64 counts");
    known = *k;
  }
  int64_t total = input.getNumElements();
  if (inferAt >= 0) {
    if (known == 0 || total % known != 0)
      return opError(loc, name,
                     "cannot reshape " + shapeStr(input.getShape()) + " to " +
                         shapeStr(target));
    shape[inferAt] = total / known;
    known = total;
  }
  if (known != total)
    return opError(loc, name,
                   "cannot reshape " + shapeStr(input.getShape()) + " (" +
                       Twine(total) + " elements) to " + shapeStr(shape) +
                       " (" + Twine(known) + " elements)");
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t rank = input.getRank();
  SmallVector<int64_t> perm = transposePermutation(adaptor.getPerm(), rank);
  SmallVector<bool> seen(rank, false);
  if ((int64_t)perm.size() != rank)
    return opError(loc, getOperationName(),
                   "perm " + shapeStr(perm) + " is not a permutation of rank " +
                       Twine(rank));
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return opError(loc, getOperationName(),
                     "perm " + shapeStr(perm) +
                         " is not a permutation of rank " + Twine(rank));
    seen[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  ArrayRef<int64_t> axes = adaptor.getAxes();
  int64_t outRank = input.getRank() + axes.size();
  SmallVector<bool> inserted(outRank, false);
  for (int64_t a : axes) {
    std::optional<int64_t> n = normalizeAxis(a, outRank);
    if (!n || inserted[*n])
      return opError(loc, getOperationName(),
                     "axes " + shapeStr(axes) + " are invalid for result rank " +
                         Twine(outRank));
    inserted[*n] = true;
  }
  SmallVector<int64_t> shape;
  int64_t next = 0;
  for (int64_t i = 0; i < outRank; ++i)
    shape.push_back(inserted[i] ? 1 : input.getDimSize(next++));
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t rank = input.getRank();
  SmallVector<bool> removed(rank, false);
  if (auto axes = adaptor.getAxes()) {
    for (int64_t a : *axes) {
      std::optional<int64_t> n = normalizeAxis(a, rank);
      if (!n || removed[*n])
        return opError(loc, getOperationName(),
                       "axes " + shapeStr(*axes) + " are invalid for rank " +
                           Twine(rank));
      if (input.getDimSize(*n) != 1)
        return opError(loc, getOperationName(),
                       "cannot squeeze axis " + Twine(a) + " of size " +
                           Twine(input.getDimSize(*n)));
      removed[*n] = true;
    }
  } else {
    for (int64_t i = 0; i < rank; ++i)
      removed[i] = input.getDimSize(i) == 1;
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i)
    if (!removed[i])
      shape.push_back(input.getDimSize(i));
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult mlir::tcc::resolveSlice(std::optional<Location> loc, ArrayRef<int64_t> shape,
                           ArrayRef<int64_t> starts, ArrayRef<int64_t> ends,
                           std::optional<ArrayRef<int64_t>> axesAttr,
                           std::optional<ArrayRef<int64_t>> stepsAttr,
                           SmallVectorImpl<SliceDim> &dims) {
  StringRef name = SliceOp::getOperationName();
  int64_t rank = shape.size();
  dims.clear();
  for (int64_t d : shape)
    dims.push_back({0, 1, d});
  size_t n = starts.size();
  if (ends.size() != n || (axesAttr && axesAttr->size() != n) ||
      (stepsAttr && stepsAttr->size() != n))
    return opError(loc, name,
                   "starts, ends, axes and steps must have the same length");
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < n; ++i) {
    int64_t a = axesAttr ? (*axesAttr)[i] : (int64_t)i;
    std::optional<int64_t> axis = normalizeAxis(a, rank);
    if (!axis || seen[*axis])
      return opError(loc, name,
                     "axis " + Twine(a) + " is out of range or repeated");
    seen[*axis] = true;
    int64_t step = stepsAttr ? (*stepsAttr)[i] : 1;
    if (step == 0)
      return opError(loc, name, "steps must not be 0");
    int64_t dim = shape[*axis];
    int64_t start = starts[i], end = ends[i];
    // Negative bounds count from the end; what is still out of range clamps.
    if (start < 0)
      start += dim;
    if (end < 0)
      end += dim;
    int64_t size;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      size = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      size = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    dims[*axis] = {start, step, size};
  }
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  SmallVector<SliceDim> dims;
  if (failed(resolveSlice(loc, input.getShape(), adaptor.getStarts(),
                          adaptor.getEnds(), adaptor.getAxes(),
                          adaptor.getSteps(), dims)))
    return failure();
  SmallVector<int64_t> shape;
  for (const SliceDim &d : dims)
    shape.push_back(d.size);
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  std::optional<int64_t> axis = normalizeAxis(adaptor.getAxis(), input.getRank());
  if (!axis)
    return opError(loc, getOperationName(),
                   "axis " + Twine(adaptor.getAxis()) +
                       " is out of range for rank " + Twine(input.getRank()));
  int64_t total = 0;
  for (int64_t s : adaptor.getSplit()) {
    if (s < 0)
      return opError(loc, getOperationName(), "split sizes must be >= 0");
    total += s;
  }
  if (total != input.getDimSize(*axis))
    return opError(loc, getOperationName(),
                   "split sizes " + shapeStr(adaptor.getSplit()) + " add up to " +
                       Twine(total) + ", not to the axis size " +
                       Twine(input.getDimSize(*axis)));
  for (int64_t s : adaptor.getSplit()) {
    SmallVector<int64_t> shape(input.getShape());
    shape[*axis] = s;
    types.push_back(tensorOf(shape, input.getElementType()));
  }
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  if (adaptor.getInputs().empty())
    return opError(loc, name, "needs at least one input");
  auto first = cast<RankedTensorType>(adaptor.getInputs().front().getType());
  std::optional<int64_t> axis = normalizeAxis(adaptor.getAxis(), first.getRank());
  if (!axis)
    return opError(loc, name,
                   "axis " + Twine(adaptor.getAxis()) +
                       " is out of range for rank " + Twine(first.getRank()));
  SmallVector<int64_t> shape(first.getShape());
  shape[*axis] = 0;
  for (Value v : adaptor.getInputs()) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() != first.getElementType() ||
        t.getRank() != first.getRank())
      return opError(loc, name, "inputs differ in element type or rank");
    for (int64_t i = 0; i < t.getRank(); ++i)
      if (i != *axis && t.getDimSize(i) != first.getDimSize(i))
        return opError(loc, name,
                       "input shapes " + shapeStr(first.getShape()) + " and " +
                           shapeStr(t.getShape()) +
                           " differ outside the concatenation axis");
    shape[*axis] += t.getDimSize(*axis);
  }
  types.push_back(tensorOf(shape, first.getElementType()));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  SmallVector<int64_t> shape;
  if (llvm::any_of(adaptor.getShape(), [](int64_t d) { return d < 0; }) ||
      !broadcastShapes(input.getShape(), adaptor.getShape(), shape))
    return opError(loc, getOperationName(),
                   "cannot expand " + shapeStr(input.getShape()) + " to " +
                       shapeStr(adaptor.getShape()));
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  auto type = dyn_cast<RankedTensorType>(adaptor.getValue().getType());
  if (!type || !type.hasStaticShape())
    return opError(loc, getOperationName(),
                   "value must be a statically shaped tensor");
  types.push_back(type);
  return success();
}

LogicalResult ConstantOfShapeOp::inferReturnTypes(MLIRContext *,
                                                  std::optional<Location> loc,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &types) {
  ElementsAttr value = adaptor.getValue();
  if (value.getNumElements() != 1)
    return opError(loc, getOperationName(), "value must have one element");
  if (llvm::any_of(adaptor.getShape(), [](int64_t d) { return d < 0; }))
    return opError(loc, getOperationName(),
                   "shape " + shapeStr(adaptor.getShape()) +
                       " has a negative dimension");
  types.push_back(tensorOf(adaptor.getShape(), value.getElementType()));
  return success();
}

LogicalResult ShapeOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  int64_t rank = cast<RankedTensorType>(adaptor.getInput().getType()).getRank();
  auto clampIdx = [&](int64_t i) {
    if (i < 0)
      i += rank;
    return std::clamp<int64_t>(i, 0, rank);
  };
  int64_t start = clampIdx(adaptor.getStart().value_or(0));
  int64_t end = clampIdx(adaptor.getEnd().value_or(rank));
  types.push_back(tensorOf({std::max<int64_t>(end - start, 0)},
                           IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  types.push_back(input);
  types.push_back(tensorOf(input.getShape(), IntegerType::get(ctx, 1)));
  return success();
}

LogicalResult DropoutOp::verify() {
  double ratio = getRatio().convertToDouble();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return emitOpError("ratio must be in [0, 1), got ") << ratio;
  return success();
}

LogicalResult RandomKeepOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  if (llvm::any_of(adaptor.getShape(), [](int64_t d) { return d < 0; }))
    return opError(loc, getOperationName(), "shape has a negative dimension");
  types.push_back(tensorOf(adaptor.getShape(), IntegerType::get(ctx, 1)));
  return success();
}

/// What is wrong with a dropout's parameters (tcc.random_keep's, or
/// tcc.attention's on its probabilities): the random state must be a
/// tensor<2xi64> [seed, counter], the ratio in (0, 1), the stream >= 0. ""
/// if nothing.
static std::string dropoutError(Value state, FloatAttr ratio, IntegerAttr stream) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  auto t = cast<RankedTensorType>(state.getType());
  double p = ratio.getValueAsDouble();
  if (t.getShape() != ArrayRef<int64_t>{2} || !t.getElementType().isInteger(64))
    os << "the random state must be a tensor<2xi64> ([seed, counter]), got " << t;
  else if (!(p > 0.0 && p < 1.0))
    os << "the dropout ratio must be in (0, 1), got " << p;
  else if (stream.getInt() < 0)
    os << "the dropout stream must be non-negative, got " << stream.getInt();
  return msg;
}

LogicalResult RandomKeepOp::verify() {
  std::string err = dropoutError(getState(), getRatioAttr(), getStreamAttr());
  return err.empty() ? success() : emitOpError(err);
}

LogicalResult SoftmaxCrossEntropyLossOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  auto scores = cast<RankedTensorType>(adaptor.getScores().getType());
  auto labels = cast<RankedTensorType>(adaptor.getLabels().getType());
  if (scores.getRank() < 2)
    return opError(loc, name, "scores must have rank >= 2 ([N, C, ...])");
  SmallVector<int64_t> expected{scores.getDimSize(0)};
  llvm::append_range(expected, scores.getShape().drop_front(2));
  if (labels.getShape() != ArrayRef<int64_t>(expected))
    return opError(loc, name,
                   "labels of shape " + shapeStr(labels.getShape()) +
                       " do not match scores " + shapeStr(scores.getShape()) +
                       " (expected " + shapeStr(expected) + ")");
  if (Value w = adaptor.getWeights()) {
    auto wt = cast<RankedTensorType>(w.getType());
    if (wt.getShape() != ArrayRef<int64_t>{scores.getDimSize(1)} ||
        wt.getElementType() != scores.getElementType())
      return opError(loc, name,
                     "weights must be a [C] = " +
                         shapeStr({scores.getDimSize(1)}) +
                         " tensor of the scores' element type");
  }
  StringRef reduction = adaptor.getReduction();
  if (reduction == "none")
    types.push_back(tensorOf(expected, scores.getElementType()));
  else
    types.push_back(tensorOf({}, scores.getElementType()));
  types.push_back(scores);
  return success();
}

LogicalResult SoftmaxCrossEntropyLossOp::verify() {
  StringRef r = getReduction();
  if (r != "none" && r != "sum" && r != "mean")
    return emitOpError("reduction must be \"none\", \"sum\" or \"mean\", got \"")
           << r << "\"";
  return success();
}

LogicalResult GatherGradOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  ArrayRef<int64_t> shape = adaptor.getShape();
  std::optional<int64_t> axis = normalizeAxis(adaptor.getAxis(), shape.size());
  if (!axis)
    return opError(loc, getOperationName(), "axis is out of range");
  SmallVector<int64_t> expected(shape.take_front(*axis));
  llvm::append_range(expected, indices.getShape());
  llvm::append_range(expected, shape.drop_front(*axis + 1));
  if (grad.getShape() != ArrayRef<int64_t>(expected))
    return opError(loc, getOperationName(),
                   "grad of shape " + shapeStr(grad.getShape()) +
                       " is not what gathering from " + shapeStr(shape) +
                       " gives (" + shapeStr(expected) + ")");
  types.push_back(tensorOf(shape, grad.getElementType()));
  return success();
}

LogicalResult SliceGradOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  SmallVector<SliceDim> dims;
  if (failed(resolveSlice(loc, adaptor.getShape(), adaptor.getStarts(),
                          adaptor.getEnds(), adaptor.getAxes(),
                          adaptor.getSteps(), dims)))
    return failure();
  SmallVector<int64_t> sliced;
  for (const SliceDim &d : dims)
    sliced.push_back(d.size);
  if (grad.getShape() != ArrayRef<int64_t>(sliced))
    return opError(loc, getOperationName(),
                   "grad of shape " + shapeStr(grad.getShape()) +
                       " is not the slice's shape " + shapeStr(sliced));
  types.push_back(tensorOf(adaptor.getShape(), grad.getElementType()));
  return success();
}

LogicalResult SoftmaxCrossEntropyLossGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  auto logp = cast<RankedTensorType>(adaptor.getLogProb().getType());
  auto labels = cast<RankedTensorType>(adaptor.getLabels().getType());
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  if (logp.getRank() < 2)
    return opError(loc, getOperationName(), "log_prob must have rank >= 2");
  SmallVector<int64_t> expected{logp.getDimSize(0)};
  llvm::append_range(expected, logp.getShape().drop_front(2));
  if (labels.getShape() != ArrayRef<int64_t>(expected))
    return opError(loc, getOperationName(), "labels do not match log_prob");
  bool none = adaptor.getReduction() == "none";
  if (none ? grad.getShape() != ArrayRef<int64_t>(expected) : grad.getRank() != 0)
    return opError(loc, getOperationName(),
                   "grad must be a scalar, or have the labels' shape for "
                   "reduction \"none\"");
  types.push_back(logp);
  return success();
}

LogicalResult SoftmaxCrossEntropyLossWithGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  auto scores = cast<RankedTensorType>(adaptor.getScores().getType());
  auto labels = cast<RankedTensorType>(adaptor.getLabels().getType());
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  if (scores.getRank() != 2)
    return opError(loc, name, "scores must be [N, C]");
  if (labels.getShape() != ArrayRef<int64_t>{scores.getDimSize(0)})
    return opError(loc, name, "labels must be [N] for scores " +
                                  shapeStr(scores.getShape()));
  if (adaptor.getReduction() != "mean" && adaptor.getReduction() != "sum")
    return opError(loc, name, "reduction must be \"mean\" or \"sum\"");
  if (grad.getRank() != 0 || grad.getElementType() != scores.getElementType())
    return opError(loc, name, "grad must be a scalar of the scores' type");
  if (Value w = adaptor.getWeights())
    if (cast<RankedTensorType>(w.getType()).getShape() !=
        ArrayRef<int64_t>{scores.getDimSize(1)})
      return opError(loc, name, "weights must be [C]");
  types.push_back(tensorOf({}, scores.getElementType()));
  types.push_back(scores);
  return success();
}

LogicalResult GeluOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult GeluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  if (adaptor.getGrad().getType() != adaptor.getInput().getType())
    return opError(loc, getOperationName(),
                   "grad and input must have the same type");
  types.push_back(adaptor.getInput().getType());
  return success();
}

/// Checks attention's operands in their layout (see tcc.attention) and
/// returns its sizes, and the result's and the log-sum-exp's types.
static LogicalResult inferAttention(std::optional<Location> loc, StringRef name, Value query,
                                    Value key, Value value, Value bias,
                                    std::optional<int64_t> heads,
                                    std::optional<ArrayRef<int64_t>> columns,
                                    AttentionShape &shape, RankedTensorType &result,
                                    RankedTensorType &lse) {
  auto q = cast<RankedTensorType>(query.getType()), k = cast<RankedTensorType>(key.getType()),
       v = cast<RankedTensorType>(value.getType());
  if (q.getElementType() != k.getElementType() || q.getElementType() != v.getElementType())
    return opError(loc, name, "query, key and value must have one element type");
  if (columns && !heads)
    return opError(loc, name, "columns (the packed layout) needs heads");
  int64_t b, h, sq, sk, d, dv;
  if (!heads) {
    if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
      return opError(loc, name, "query, key and value must be [B, H, S, D] tensors");
    b = q.getDimSize(0);
    if (q.getShape().take_front(2) != k.getShape().take_front(2) ||
        q.getShape().take_front(2) != v.getShape().take_front(2))
      return opError(loc, name, "query, key and value must have the same [B, H]");
    h = q.getDimSize(1), sq = q.getDimSize(2), sk = k.getDimSize(2);
    d = q.getDimSize(3);
    dv = v.getDimSize(3);
    if (d != k.getDimSize(3))
      return opError(loc, name, "query and key head sizes differ");
    if (sk != v.getDimSize(2))
      return opError(loc, name, "key and value lengths differ");
  } else {
    h = *heads;
    if (q.getRank() != 3 || k.getRank() != 3 || v.getRank() != 3)
      return opError(loc, name, "with heads, query, key and value must be [B, S, H*D] tensors");
    b = q.getDimSize(0);
    if (h <= 0)
      return opError(loc, name, "heads must be positive");
    if (k.getDimSize(0) != b || v.getDimSize(0) != b)
      return opError(loc, name, "query, key and value must have the same B");
    sq = q.getDimSize(1), sk = k.getDimSize(1);
    if (sk != v.getDimSize(1))
      return opError(loc, name, "key and value lengths differ");
    if (columns) {
      // One [B, S, 3*H*D] tensor, three column ranges that tile it.
      int64_t c = q.getDimSize(2);
      if (query != key || query != value)
        return opError(loc, name, "with columns, query, key and value must be one value");
      SmallVector<int64_t> sorted(*columns);
      llvm::sort(sorted);
      if (c % (3 * h) != 0 || sorted.size() != 3 || sorted[0] != 0 || sorted[1] != c / 3 ||
          sorted[2] != 2 * c / 3)
        return opError(loc, name,
                       "columns must be 0, C/3 and 2C/3 in some order, with C a multiple of "
                       "3 * heads");
      d = dv = c / (3 * h);
    } else {
      if (q.getDimSize(2) % h != 0 || v.getDimSize(2) % h != 0)
        return opError(loc, name, "the query's and value's widths must be multiples of heads");
      d = q.getDimSize(2) / h;
      dv = v.getDimSize(2) / h;
      if (k.getDimSize(2) != q.getDimSize(2))
        return opError(loc, name, "query and key head sizes differ");
    }
  }
  if (bias) {
    auto bt = cast<RankedTensorType>(bias.getType());
    std::array<int64_t, 4> want{b, h, sq, sk};
    bool ok = bt.getRank() == 4 && bt.getElementType() == q.getElementType() &&
              bt.getDimSize(3) == want[3];
    for (int i = 0; ok && i < 3; ++i)
      ok = bt.getDimSize(i) == want[i] || bt.getDimSize(i) == 1;
    if (!ok)
      return opError(loc, name, "bias must be [B or 1, H or 1, Sq or 1, Sk] of the query's type");
  }
  shape = {b, h, sq, sk, d, dv, heads.has_value(), columns.has_value(), {0, 0, 0}};
  if (columns)
    llvm::copy(*columns, shape.columns.begin());
  result = heads ? tensorOf({b, sq, h * dv}, q.getElementType())
                 : tensorOf({b, h, sq, dv}, q.getElementType());
  lse = tensorOf({b, h, sq}, q.getElementType());
  return success();
}

/// The options of tcc.attention and tcc.attention_grad: a `softcap`, if any,
/// positive; dropout on the probabilities: `dropout`, `dropout_stream` and the
/// random state operand all present (ratio in (0, 1), stream >= 0, a
/// tensor<2xi64> state), or none.
static LogicalResult checkAttentionOptions(std::optional<Location> loc, StringRef name, Value rng,
                                           FloatAttr ratio, IntegerAttr stream, FloatAttr softcap) {
  if (softcap && !(softcap.getValueAsDouble() > 0.0))
    return opError(loc, name, "softcap must be positive");
  if (!rng && !ratio && !stream)
    return success();
  if (!rng || !ratio || !stream)
    return opError(loc, name, "dropout needs all of `dropout`, `dropout_stream` and the rng operand");
  std::string err = dropoutError(rng, ratio, stream);
  return err.empty() ? success() : opError(loc, name, err);
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  AttentionShape shape;
  RankedTensorType result, lse;
  if (failed(inferAttention(loc, getOperationName(), adaptor.getQuery(), adaptor.getKey(),
                            adaptor.getValue(), adaptor.getBias(), adaptor.getHeads(),
                            adaptor.getColumns(), shape, result, lse)) ||
      failed(checkAttentionOptions(loc, getOperationName(), adaptor.getRng(),
                                   adaptor.getDropoutAttr(), adaptor.getDropoutStreamAttr(),
                                   adaptor.getSoftcapAttr())))
    return failure();
  types.append({result, lse});
  return success();
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  AttentionShape shape;
  RankedTensorType result, lse;
  if (failed(inferAttention(loc, getOperationName(), adaptor.getQuery(), adaptor.getKey(),
                            adaptor.getValue(), adaptor.getBias(), adaptor.getHeads(),
                            adaptor.getColumns(), shape, result, lse)) ||
      failed(checkAttentionOptions(loc, getOperationName(), adaptor.getRng(),
                                   adaptor.getDropoutAttr(), adaptor.getDropoutStreamAttr(),
                                   adaptor.getSoftcapAttr())))
    return failure();
  if (adaptor.getResult().getType() != result || adaptor.getGrad().getType() != result)
    return opError(loc, getOperationName(),
                   "result and grad must have the forward result's type");
  if (adaptor.getLse().getType() != lse)
    return opError(loc, getOperationName(), "lse must be [B, H, Sq] of the query's type");
  types.push_back(adaptor.getQuery().getType());
  if (!adaptor.getColumns()) // packed: one gradient
    types.append({adaptor.getKey().getType(), adaptor.getValue().getType()});
  return success();
}

AttentionShape mlir::tcc::attentionShape(Operation *op) {
  auto heads = op->getAttrOfType<IntegerAttr>("heads");
  auto columns = op->getAttrOfType<DenseI64ArrayAttr>("columns");
  AttentionShape shape{};
  RankedTensorType result, lse;
  // The op verified: this only reads the sizes (no diagnostics).
  (void)inferAttention(std::nullopt, "", op->getOperand(0), op->getOperand(1), op->getOperand(2),
                       Value(), heads ? std::optional<int64_t>(heads.getInt()) : std::nullopt,
                       columns ? std::optional<ArrayRef<int64_t>>(columns.asArrayRef())
                               : std::nullopt,
                       shape, result, lse);
  return shape;
}

std::optional<double> mlir::tcc::splatFloatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !isa<FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

std::optional<int64_t> mlir::tcc::attentionFlops(Operation *op) {
  if (!isa<AttentionOp, AttentionGradOp>(op))
    return std::nullopt;
  AttentionShape s = attentionShape(op);
  int64_t scores = s.b * s.h * s.sq * s.sk;
  bool causal = op->getAttrOfType<BoolAttr>("causal").getValue();
  if (causal)
    scores /= 2;
  // Forward: q k^T and p v, and the softmax. Backward: q k^T again,
  // dout v^T, p^T dout, ds k and ds^T q, and the elementwise work.
  if (isa<AttentionOp>(op))
    return scores * (2 * s.d + 2 * s.dv + 5);
  return scores * (6 * s.d + 4 * s.dv + 8);
}

LogicalResult FusionOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but its body has "
                               << body.getNumArguments() << " arguments";
  for (auto [input, arg] : llvm::zip(getInputs(), body.getArguments()))
    if (input.getType() != arg.getType())
      return emitOpError("input of type ")
             << input.getType() << " feeds a body argument of type " << arg.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with tcc.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ") << yield.getValues().getTypes()
                                  << " but declares results " << getResultTypes();
  for (Operation &op : body.without_terminator())
    if (!isa<TccDialect>(op.getDialect()) || op.getNumRegions() != 0)
      return op.emitOpError("cannot be inside a tcc.fusion");
  // The kind against the body: what makes it that kind of kernel.
  auto count = [&](auto isOne) {
    return llvm::count_if(body.without_terminator(), isOne);
  };
  int64_t gemms = count([](Operation &op) { return isa<MatMulOp>(op); });
  int64_t moves = count([](Operation &op) { return isa<SplitOp, ConcatOp>(op); });
  int64_t reductions = count([](Operation &op) { return isa<ReduceSumOp, ReduceMeanOp>(op); });
  StringRef kind = stringifyFusionKind(getKind());
  auto wrongKind = [&](StringRef what) {
    return emitOpError("is a '") << kind << "' fusion but its body " << what;
  };
  switch (getKind()) {
  case FusionKind::Gemm:
    if (gemms != 1)
      return wrongKind("has ") << gemms << " tcc.matmul ops (a GEMM fusion has one)";
    break;
  case FusionKind::Move:
    if (moves == 0)
      return wrongKind("has no tcc.split or tcc.concat");
    break;
  case FusionKind::Reduction:
    if (reductions == 0)
      return wrongKind("has no reduction");
    break;
  case FusionKind::Loop:
    if (reductions != 0)
      return wrongKind("has a reduction (a 'reduction' fusion)");
    break;
  }
  if (getKind() != FusionKind::Gemm && gemms != 0)
    return wrongKind("has a tcc.matmul (only a 'gemm' fusion has one)");
  if (getKind() != FusionKind::Move && moves != 0)
    return wrongKind("has a tcc.split or tcc.concat (a 'move' fusion)");
  return success();
}

SmallVector<int64_t> mlir::tcc::transposePermutation(std::optional<ArrayRef<int64_t>> perm,
                                                    int64_t rank) {
  if (perm)
    return SmallVector<int64_t>(perm->begin(), perm->end());
  SmallVector<int64_t> reversed;
  for (int64_t i = rank - 1; i >= 0; --i)
    reversed.push_back(i);
  return reversed;
}

SmallVector<int64_t> TransposeOp::getPermutation() {
  return transposePermutation(getPerm(), cast<RankedTensorType>(getInput().getType()).getRank());
}

#define GET_OP_CLASSES
#include "compiler/Dialect/TccOps.cpp.inc"
