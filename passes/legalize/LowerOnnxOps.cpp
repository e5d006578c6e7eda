//===- LowerOnnxOps.cpp - the ImportOnly ops as core ops ------------------===//
//
// Today's exporters write ops that usually fold at import (masks, position
// tables). Where one is left on a value computed at run time, it becomes core
// ops here, so that autodiff, fusion and codegen never see it:
//
//   less_or_equal(a, b)      -> or(less(a, b), equal(a, b))
//   greater_or_equal(a, b)   -> or(greater(a, b), equal(a, b))
//   max(a, b) / min(a, b)    -> where(greater(a, b) / less(a, b), a, b)
//   where(is_nan(s), 0, s)   -> s, for s = softmax(x [+ mask]) (see below)
//   is_nan(x)                -> not(equal(x, x))
//   pad(x) (constant mode)   -> slices (negative pads) and a concat with
//                               constant blocks
//   trilu(x)                 -> where(constant triangle, x, 0)
//   gather_elements(x, i)    -> reduce_sum(where(i == iota, x, 0)) over a new axis
//
// An ImportOnly op that is still there afterwards is reported by
// checkImportOnlyOpsLowered.
//
//===----------------------------------------------------------------------===//

#include "passes/legalize/Patterns.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tcc;

namespace {

template <typename SourceOp, typename CompareOp>
struct OrEqual : OpRewritePattern<SourceOp> {
  using OpRewritePattern<SourceOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(SourceOp op, PatternRewriter &rw) const override {
    Value cmp = rw.create<CompareOp>(op.getLoc(), op.getLhs(), op.getRhs());
    Value eq = rw.create<EqualOp>(op.getLoc(), op.getLhs(), op.getRhs());
    rw.replaceOpWithNewOp<OrOp>(op, cmp, eq);
    return success();
  }
};

template <typename SourceOp, typename CompareOp>
struct SelectBy : OpRewritePattern<SourceOp> {
  using OpRewritePattern<SourceOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(SourceOp op, PatternRewriter &rw) const override {
    Value cmp = rw.create<CompareOp>(op.getLoc(), op.getLhs(), op.getRhs());
    auto where = rw.create<WhereOp>(op.getLoc(), cmp, op.getLhs(), op.getRhs());
    if (where.getType() != op.getType())
      return rw.notifyMatchFailure(op, "the select changes the type");
    rw.replaceOp(op, where.getResult());
    return success();
  }
};

/// Whether every element of `m` is finite whatever the inputs: a constant
/// of finite values, or where(c, a, b) of such (a padding mask from an
/// input, as HF writes it: where(keep, 0, float32's lowest)).
bool alwaysFinite(Value m) {
  DenseElementsAttr values;
  if (matchPattern(m, m_Constant(&values)))
    return isa<FloatType>(values.getElementType()) &&
           llvm::all_of(values.getValues<APFloat>(), [](const APFloat &v) { return v.isFinite(); });
  if (auto where = m.getDefiningOp<WhereOp>())
    return alwaysFinite(where.getX()) && alwaysFinite(where.getY());
  return false;
}

/// The softmax that `where` guards when it is where(is_nan(s), 0, s) with
/// s = softmax(scores [+ m]) over the last axis, as the exporters write scaled
/// dot-product attention, and when that guard can go: the scores are a matmul
/// (maybe scaled by a constant) and m, if there is one, is a constant
/// additive mask with no wholly non-finite row, or a mask whose every
/// element is finite whatever the inputs (alwaysFinite). A softmax is NaN only
/// where its row has no finite score, which then takes a non-finite
/// activation, and the step reports that as a non-finite gradient (loss
/// scaling skips the step) rather than training on it. Keeping the guard
/// would hide the softmax from tcc-fuse-attention.
SoftmaxOp droppableNaNGuard(WhereOp where) {
  // The condition: is_nan(s), or not(equal(s, s)) as is_nan is lowered.
  Value tested;
  if (auto isNaN = where.getCondition().getDefiningOp<IsNaNOp>())
    tested = isNaN.getInput();
  else if (auto notOp = where.getCondition().getDefiningOp<NotOp>())
    if (auto eq = notOp.getInput().getDefiningOp<EqualOp>(); eq && eq.getLhs() == eq.getRhs())
      tested = eq.getLhs();
  if (!tested || tested != where.getY() || !isUniformConstant(where.getX(), 0.0))
    return nullptr;
  auto softmax = where.getY().getDefiningOp<SoftmaxOp>();
  if (!softmax || where.getType() != softmax.getType())
    return nullptr;
  int64_t rank = softmax.getType().getRank();
  if (softmax.getAxis() != -1 && softmax.getAxis() != rank - 1)
    return nullptr;
  // The softmax must read scores (a matmul, maybe scaled by a constant) plus
  // at most one constant mask: a mask computed at run time, or two masks
  // added, could leave a row with no finite score.
  Value x = softmax.getInput();
  // A finite mask keeps the sum finite only where the sum cannot overflow:
  // in fp16, -65504 plus a score below -16 is -inf.
  bool wide = cast<FloatType>(softmax.getType().getElementType()).getWidth() >= 32;
  if (auto add = x.getDefiningOp<AddOp>()) {
    DenseElementsAttr mask;
    if (matchPattern(add.getRhs(), m_Constant(&mask)))
      x = add.getLhs();
    else if (matchPattern(add.getLhs(), m_Constant(&mask)))
      x = add.getRhs();
    else if (wide && alwaysFinite(add.getRhs()))
      x = add.getLhs();
    else if (wide && alwaysFinite(add.getLhs()))
      x = add.getRhs();
    else
      return nullptr;
    if (mask && !everyRowHasFinite(mask))
      return nullptr;
  }
  auto constSide = [](Value a, Value b) -> Value {
    if (matchPattern(b, m_Constant()))
      return a;
    if (matchPattern(a, m_Constant()))
      return b;
    return nullptr;
  };
  if (auto mul = x.getDefiningOp<MulOp>())
    x = constSide(mul.getLhs(), mul.getRhs());
  else if (auto div = x.getDefiningOp<DivOp>())
    x = matchPattern(div.getRhs(), m_Constant()) ? div.getLhs() : Value();
  if (!x || !x.getDefiningOp<MatMulOp>())
    return nullptr;
  return softmax;
}

/// The guard above, in either form (the mask it depends on may fold into a
/// constant only later in tcc-legalize, so the lowered form is matched too).
struct DropSoftmaxNaNGuard : OpRewritePattern<WhereOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(WhereOp op, PatternRewriter &rw) const override {
    SoftmaxOp softmax = droppableNaNGuard(op);
    if (!softmax)
      return failure();
    rw.replaceOp(op, softmax.getResult());
    return success();
  }
};

/// is_nan(x) -> not(equal(x, x)), which is true exactly for NaN.
struct LowerIsNaN : OpRewritePattern<IsNaNOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(IsNaNOp op, PatternRewriter &rw) const override {
    Value eq = rw.create<EqualOp>(op.getLoc(), op.getInput(), op.getInput());
    rw.replaceOpWithNewOp<NotOp>(op, eq);
    return success();
  }
};

Value splatConstant(PatternRewriter &rw, Location loc, RankedTensorType type,
                    Attribute fill) {
  return rw.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, fill));
}

struct PadAsConcat : OpRewritePattern<PadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PadOp op, PatternRewriter &rw) const override {
    auto type = cast<RankedTensorType>(op.getInput().getType());
    std::optional<ArrayRef<int64_t>> axes;
    if (auto a = op.getAxesAttr())
      axes = a.asArrayRef();
    FailureOr<SmallVector<std::pair<int64_t, int64_t>>> pads =
        resolvePads(std::nullopt, type.getRank(), op.getPads(), axes);
    if (failed(pads))
      return failure();
    Type elt = type.getElementType();
    Attribute fill;
    if (auto v = op.getValueAttr())
      fill = cast<DenseElementsAttr>(v).getValues<Attribute>()[0];
    else if (isa<FloatType>(elt))
      fill = rw.getFloatAttr(elt, 0.0);
    else
      fill = rw.getIntegerAttr(elt, 0);
    Location loc = op.getLoc();
    Value x = op.getInput();
    for (int64_t axis = 0; axis < type.getRank(); ++axis) {
      auto [before, after] = (*pads)[axis];
      auto cur = cast<RankedTensorType>(x.getType());
      int64_t dim = cur.getDimSize(axis);
      if (before < 0 || after < 0) {
        int64_t start = before < 0 ? -before : 0;
        int64_t end = after < 0 ? dim + after : dim;
        x = rw.create<SliceOp>(loc, x, rw.getDenseI64ArrayAttr({start}),
                               rw.getDenseI64ArrayAttr({end}),
                               rw.getDenseI64ArrayAttr({axis}), DenseI64ArrayAttr());
        cur = cast<RankedTensorType>(x.getType());
      }
      SmallVector<Value> parts;
      auto block = [&](int64_t n) {
        SmallVector<int64_t> shape(cur.getShape());
        shape[axis] = n;
        parts.push_back(splatConstant(rw, loc, RankedTensorType::get(shape, elt), fill));
      };
      if (before > 0)
        block(before);
      parts.push_back(x);
      if (after > 0)
        block(after);
      if (parts.size() > 1)
        x = rw.create<ConcatOp>(loc, parts, rw.getI64IntegerAttr(axis));
    }
    if (x.getType() != op.getType())
      return rw.notifyMatchFailure(op, "the decomposition changes the type");
    rw.replaceOp(op, x);
    return success();
  }
};

struct TriluAsWhere : OpRewritePattern<TriluOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TriluOp op, PatternRewriter &rw) const override {
    ArrayRef<int64_t> shape = op.getType().getShape();
    int64_t rows = shape[shape.size() - 2], cols = shape.back();
    SmallVector<bool> keep;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        keep.push_back(triluKeeps(op.getUpper() != 0, op.getK(), r, c));
    auto maskType = RankedTensorType::get({rows, cols}, rw.getI1Type());
    Location loc = op.getLoc();
    Value mask = rw.create<ConstantOp>(loc, maskType, DenseElementsAttr::get(maskType, keep));
    Type elt = op.getType().getElementType();
    Attribute zero = isa<FloatType>(elt) ? Attribute(rw.getFloatAttr(elt, 0.0))
                                         : Attribute(rw.getIntegerAttr(elt, 0));
    Value zeros = splatConstant(rw, loc, RankedTensorType::get({}, elt), zero);
    rw.replaceOpWithNewOp<WhereOp>(op, op.getType(), mask, op.getInput(), zeros);
    return success();
  }
};

/// gather_elements(data, idx, axis) on run-time values, as a select and a
/// sum over a new axis: with D = data's size along `axis` and k = idx's,
///   result[.., i, ..] = sum_j where(j == idx[.., i, ..], data[.., j, ..], 0)
/// (data sliced to idx's sizes on the other axes, negative indices wrapped).
/// It costs k x D selects per row, which suits the small class counts of an
/// expanded NLL loss; tcc's own cross-entropy op is what models use.
struct GatherElementsAsSelect : OpRewritePattern<GatherElementsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatherElementsOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    auto dataType = cast<RankedTensorType>(op.getData().getType());
    auto idxType = cast<RankedTensorType>(op.getIndices().getType());
    int64_t rank = dataType.getRank();
    int64_t axis = *normalizeAxis(op.getAxis(), rank);
    int64_t dim = dataType.getDimSize(axis);
    if (dim == 0 || idxType.getNumElements() * dim > (int64_t(1) << 26))
      return rw.notifyMatchFailure(op, "too large to lower as a select");
    // data restricted to idx's sizes on every other axis.
    Value data = op.getData();
    SmallVector<int64_t> starts, ends, axes;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && idxType.getDimSize(d) != dataType.getDimSize(d)) {
        if (idxType.getDimSize(d) > dataType.getDimSize(d))
          return rw.notifyMatchFailure(op, "indices larger than data on another axis");
        starts.push_back(0);
        ends.push_back(idxType.getDimSize(d));
        axes.push_back(d);
      }
    if (!axes.empty())
      data = rw.create<SliceOp>(loc, data, rw.getDenseI64ArrayAttr(starts),
                                rw.getDenseI64ArrayAttr(ends), rw.getDenseI64ArrayAttr(axes),
                                DenseI64ArrayAttr());
    Type idxElt = idxType.getElementType();
    auto scalarIdx = [&](int64_t v) -> Value {
      auto t = RankedTensorType::get({}, idxElt);
      return rw.create<ConstantOp>(loc, t, DenseElementsAttr::get(t, rw.getIntegerAttr(idxElt, v)));
    };
    Value idx = op.getIndices();
    Value negative = rw.create<LessOp>(loc, idx, scalarIdx(0));
    Value wrapped = rw.create<AddOp>(loc, idx, scalarIdx(dim));
    idx = rw.create<WhereOp>(loc, negative, wrapped, idx);
    // [.., k, 1, ..] against iota [1, .., D, ..] over the new axis axis+1.
    Value idxU = rw.create<UnsqueezeOp>(loc, idx, rw.getDenseI64ArrayAttr({axis + 1}));
    SmallVector<int64_t> iotaShape(rank + 1, 1);
    iotaShape[axis + 1] = dim;
    SmallVector<Attribute> iota;
    for (int64_t j = 0; j < dim; ++j)
      iota.push_back(rw.getIntegerAttr(idxElt, j));
    auto iotaType = RankedTensorType::get(iotaShape, idxElt);
    Value iotaV = rw.create<ConstantOp>(loc, iotaType, DenseElementsAttr::get(iotaType, iota));
    Value hit = rw.create<EqualOp>(loc, idxU, iotaV);
    Value dataU = rw.create<UnsqueezeOp>(loc, data, rw.getDenseI64ArrayAttr({axis}));
    Type elt = dataType.getElementType();
    auto zeroType = RankedTensorType::get({}, elt);
    Attribute zero = isa<FloatType>(elt) ? Attribute(rw.getFloatAttr(elt, 0.0))
                                         : Attribute(rw.getIntegerAttr(elt, 0));
    Value zeros = rw.create<ConstantOp>(loc, zeroType, DenseElementsAttr::get(zeroType, zero));
    Value picked = rw.create<WhereOp>(loc, hit, dataU, zeros);
    Value sum = rw.create<ReduceSumOp>(loc, op.getType(), picked,
                                       rw.getDenseI64ArrayAttr({axis + 1}),
                                       rw.getI64IntegerAttr(0), rw.getI64IntegerAttr(0));
    rw.replaceOp(op, sum);
    return success();
  }
};

} // namespace

/// Whether every row along the last axis of the constant `c` (broadcast
/// against nothing: its own rows) has a finite element.
bool mlir::tcc::everyRowHasFinite(DenseElementsAttr c) {
  auto type = cast<RankedTensorType>(c.getType());
  if (!isa<FloatType>(type.getElementType()))
    return false;
  int64_t cols = type.getRank() ? type.getShape().back() : 1;
  if (cols == 0)
    return false;
  if (c.isSplat())
    return std::isfinite(c.getSplatValue<APFloat>().convertToDouble());
  int64_t i = 0;
  bool rowOk = false;
  for (const APFloat &v : c.getValues<APFloat>()) {
    rowOk |= std::isfinite(v.convertToDouble());
    if (++i % cols == 0) {
      if (!rowOk)
        return false;
      rowOk = false;
    }
  }
  return true;
}

void mlir::tcc::populateOnnxOpLoweringPatterns(RewritePatternSet &patterns) {
  MLIRContext *ctx = patterns.getContext();
  patterns.add<OrEqual<LessOrEqualOp, LessOp>, OrEqual<GreaterOrEqualOp, GreaterOp>,
               SelectBy<MaxOp, GreaterOp>, SelectBy<MinOp, LessOp>, PadAsConcat,
               TriluAsWhere, GatherElementsAsSelect>(ctx);
  patterns.add<DropSoftmaxNaNGuard, LowerIsNaN>(ctx);
}

LogicalResult mlir::tcc::checkImportOnlyOpsLowered(func::FuncOp func) {
  bool ok = true;
  func.walk([&](Operation *op) {
    if (!op->hasTrait<OpTrait::tcc::ImportOnly>())
      return;
    op->emitError() << "'" << op->getName().getStringRef()
                    << "' on a value computed at run time is not supported yet in "
                       "this form: tcc folds it when its operands are compile-time "
                       "constants, and tcc-legalize has no lowering for this one";
    ok = false;
  });
  return success(ok);
}
