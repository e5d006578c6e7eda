//===- TccGradients.cpp - reverse-mode gradient rules of tcc ops ----------===//
//
// One `buildGradients` per differentiable op (GradientOpInterface). Rules
// build tcc ops; gradients of broadcast operands are summed back to the
// operand's shape (`sumToShape`). A rule may build values for operands that
// turn out not to need them (an exponent, a mask); they are dead and the
// canonicalizer removes them.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// Builds the ops gradient rules are made of, at one location.
struct GradBuilder {
  OpBuilder &b;
  Location loc;

  static RankedTensorType type(Value v) {
    return cast<RankedTensorType>(v.getType());
  }
  /// A rank-0 constant of element type `elt`.
  Value scalar(Type elt, double value) {
    auto t = RankedTensorType::get({}, elt);
    return b.create<ConstantOp>(
        loc, DenseElementsAttr::get(t, ArrayRef<Attribute>{b.getFloatAttr(elt, value)}));
  }
  Value scalarLike(Value v, double value) {
    return scalar(type(v).getElementType(), value);
  }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value neg(Value x) { return b.create<NegOp>(loc, x); }
  Value exp(Value x) { return b.create<ExpOp>(loc, x); }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    if (type(x).getShape() == shape)
      return x;
    return b.create<ReshapeOp>(loc, x, shape);
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    return b.create<TransposeOp>(loc, x, b.getDenseI64ArrayAttr(perm));
  }
  /// Swaps the last two dimensions.
  Value transposeLast2(Value x) {
    int64_t rank = type(x).getRank();
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < rank; ++i)
      perm.push_back(i);
    std::swap(perm[rank - 1], perm[rank - 2]);
    return transpose(x, perm);
  }
  Value matmul(Value x, Value y) { return b.create<MatMulOp>(loc, x, y); }
  Value reduceSum(Value x, ArrayRef<int64_t> axes, bool keepdims) {
    return b.create<ReduceSumOp>(loc, x, b.getDenseI64ArrayAttr(axes),
                                 keepdims ? 1 : 0, 0);
  }
  Value reduceMean(Value x, ArrayRef<int64_t> axes, bool keepdims) {
    return b.create<ReduceMeanOp>(loc, x, b.getDenseI64ArrayAttr(axes),
                                  keepdims ? 1 : 0, 0);
  }
  Value where(Value c, Value x, Value y) {
    return b.create<WhereOp>(loc, c, x, y);
  }
  Value expand(Value x, ArrayRef<int64_t> shape) {
    if (type(x).getShape() == shape)
      return x;
    return b.create<ExpandOp>(loc, x, shape);
  }
  Value castTo(Value x, Type elt) {
    if (type(x).getElementType() == elt)
      return x;
    return b.create<CastOp>(loc, x, TypeAttr::get(elt));
  }

  /// The gradient of a value broadcast from `target`'s shape to `grad`'s:
  /// the sum over the broadcast dimensions, reshaped to `target`.
  Value sumToShape(Value grad, Type target) {
    auto gt = type(grad);
    auto tt = cast<RankedTensorType>(target);
    if (gt.getShape() == tt.getShape())
      return grad;
    int64_t offset = gt.getRank() - tt.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < gt.getRank(); ++d)
      if (d < offset || (tt.getDimSize(d - offset) == 1 && gt.getDimSize(d) != 1))
        axes.push_back(d);
    Value summed = axes.empty() ? grad : reduceSum(grad, axes, /*keepdims=*/true);
    return reshape(summed, tt.getShape());
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.sumToShape(rg[0], getLhs().getType()),
        g.sumToShape(rg[0], getRhs().getType())});
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.sumToShape(rg[0], getLhs().getType()),
        g.sumToShape(g.neg(rg[0]), getRhs().getType())});
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.sumToShape(g.mul(rg[0], getRhs()), getLhs().getType()),
        g.sumToShape(g.mul(rg[0], getLhs()), getRhs().getType())});
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b.
  og.assign({g.sumToShape(g.div(rg[0], getRhs()), getLhs().getType()),
        g.sumToShape(g.neg(g.div(g.mul(rg[0], getResult()), getRhs())),
                     getRhs().getType())});
  return success();
}

LogicalResult PowOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Type elt = GradBuilder::type(getLhs()).getElementType();
  if (!isa<FloatType>(elt)) {
    og.assign({Value(), Value()});
    return success();
  }
  // d(a^e)/da = e * a^(e-1); d(a^e)/de = a^e * log(a).
  Value e = g.castTo(getRhs(), elt);
  Value em1 = g.sub(e, g.scalar(elt, 1.0));
  Value da = g.mul(g.mul(rg[0], e), b.create<PowOp>(getLoc(), getLhs(), em1));
  Value de;
  if (isa<FloatType>(GradBuilder::type(getRhs()).getElementType()))
    de = g.sumToShape(
        g.mul(g.mul(rg[0], getResult()), b.create<LogOp>(getLoc(), getLhs())),
        getRhs().getType());
  og.assign({g.sumToShape(da, getLhs().getType()), de});
  return success();
}

LogicalResult SqrtOp::buildGradients(OpBuilder &b, ValueRange rg,
                                     SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.div(g.mul(rg[0], g.scalarLike(rg[0], 0.5)), getResult())});
  return success();
}

LogicalResult NegOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.neg(rg[0])});
  return success();
}

LogicalResult ExpOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.mul(rg[0], getResult())});
  return success();
}

LogicalResult LogOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.div(rg[0], getInput())});
  return success();
}

LogicalResult ErfOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  // d erf(x)/dx = 2/sqrt(pi) * exp(-x^2).
  Value x = getInput();
  Value e = g.exp(g.neg(g.mul(x, x)));
  og.assign({g.mul(rg[0], g.mul(e, g.scalarLike(x, 2.0 / std::sqrt(M_PI))))});
  return success();
}

LogicalResult SinOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.mul(rg[0], b.create<CosOp>(getLoc(), getInput()))});
  return success();
}

LogicalResult CosOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.mul(rg[0], g.neg(b.create<SinOp>(getLoc(), getInput())))});
  return success();
}

LogicalResult TanhOp::buildGradients(OpBuilder &b, ValueRange rg,
                                     SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value t = getResult();
  og.assign({g.mul(rg[0], g.sub(g.scalarLike(t, 1.0), g.mul(t, t)))});
  return success();
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &b, ValueRange rg,
                                        SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value s = getResult();
  og.assign({g.mul(rg[0], g.mul(s, g.sub(g.scalarLike(s, 1.0), s)))});
  return success();
}

LogicalResult ReluOp::buildGradients(OpBuilder &b, ValueRange rg,
                                     SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value x = getInput();
  Value positive = b.create<GreaterOp>(getLoc(), x, g.scalarLike(x, 0.0));
  og.assign({g.where(positive, rg[0], g.scalarLike(x, 0.0))});
  return success();
}

LogicalResult ReciprocalOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value r = getResult();
  // -(g * r) * r, not -g * (r * r): r * r alone is 1/x^2, a temporary of
  // its own (it depends only on the forward pass, so it is not fused with
  // the gradient) that overflows fp16 (65504) for |x| < 3.9e-3 on the CUDA
  // target, where an RMSNorm's reciprocal square root of a small mean
  // square (Gemma-2's post-feedforward norm, ~6e-6) made it inf.
  og.assign({g.neg(g.mul(g.mul(rg[0], r), r))});
  return success();
}

LogicalResult AbsOp::buildGradients(OpBuilder &b, ValueRange rg,
                                    SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  // sign(x) * grad, with sign(0) = 0 as PyTorch.
  Value x = getInput();
  Value zero = g.scalarLike(x, 0.0);
  Value pos = b.create<GreaterOp>(getLoc(), x, zero);
  Value negative = b.create<LessOp>(getLoc(), x, zero);
  og.assign({g.where(pos, rg[0], g.where(negative, g.neg(rg[0]), zero))});
  return success();
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ValueRange rg,
                                     SmallVectorImpl<Value> &og) {
  og.assign({b.create<GeluGradOp>(getLoc(), rg[0], getInput(),
                                  getApproximateAttr())});
  return success();
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &og) {
  if (rg[1])
    return emitOpError("gradients through the lse result are not supported");
  auto grad = b.create<AttentionGradOp>(getLoc(), getQuery(), getKey(), getValue(),
                                        getResult(), getLse(), rg[0], getBias(), getRng(),
                                        getScaleAttr(), getCausalAttr(), getHeadsAttr(),
                                        getColumnsAttr(), getDropoutAttr(),
                                        getDropoutStreamAttr(), getSoftcapAttr());
  if (getColumns()) // packed: the one operand's gradient, given once
    og.assign({grad.getGrads()[0], Value(), Value()});
  else
    og.assign(grad.getGrads().begin(), grad.getGrads().end());
  if (getBias()) // tcc-fuse-attention takes a bias no parameter reaches
    og.push_back(Value());
  if (getRng()) // the random state
    og.push_back(Value());
  return success();
}

LogicalResult IdentityOp::buildGradients(OpBuilder &, ValueRange rg,
                                         SmallVectorImpl<Value> &og) {
  og.assign({rg[0]});
  return success();
}

LogicalResult WhereOp::buildGradients(OpBuilder &b, ValueRange rg,
                                      SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value zero = g.scalarLike(rg[0], 0.0);
  og.assign({Value(),
        g.sumToShape(g.where(getCondition(), rg[0], zero), getX().getType()),
        g.sumToShape(g.where(getCondition(), zero, rg[0]), getY().getType())});
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ValueRange rg,
                                     SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Type in = GradBuilder::type(getInput()).getElementType();
  og.assign({isa<FloatType>(in) ? g.castTo(rg[0], in) : Value()});
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::buildGradients(OpBuilder &b, ValueRange rg,
                                       SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  // Promote 1-D operands to matrices as numpy.matmul does, differentiate
  // the matrix product, then undo the promotion and the batch broadcast.
  auto at = GradBuilder::type(getLhs()), bt = GradBuilder::type(getRhs());
  bool aVec = at.getRank() == 1, bVec = bt.getRank() == 1;
  Value a = aVec ? g.reshape(getLhs(), {1, at.getDimSize(0)}) : getLhs();
  Value bm = bVec ? g.reshape(getRhs(), {bt.getDimSize(0), 1}) : getRhs();
  auto a2 = GradBuilder::type(a), b2 = GradBuilder::type(bm);
  SmallVector<int64_t> gShape(GradBuilder::type(getResult()).getShape());
  if (aVec)
    gShape.insert(gShape.end() - (bVec ? 0 : 1), 1);
  if (bVec)
    gShape.push_back(1);
  Value grad = g.reshape(rg[0], gShape);
  Value da = g.matmul(grad, g.transposeLast2(bm));
  Value db;
  if (a2.getRank() > 2 && b2.getRank() == 2) {
    // A batch of rows times one matrix (a Linear layer): the matrix's
    // gradient is one GEMM over all rows, [K, P] x [P, N], rather than a
    // batched product summed over the batch.
    int64_t k = a2.getShape().back(), n = b2.getShape().back();
    int64_t p = a2.getNumElements() / std::max<int64_t>(k, 1);
    db = g.matmul(g.transposeLast2(g.reshape(a, {p, k})), g.reshape(grad, {p, n}));
  } else {
    db = g.sumToShape(g.matmul(g.transposeLast2(a), grad), b2);
  }
  og.assign({g.reshape(g.sumToShape(da, a2), at.getShape()),
        g.reshape(db, bt.getShape())});
  return success();
}

LogicalResult GemmOp::buildGradients(OpBuilder &b, ValueRange rg,
                                     SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value grad = rg[0];
  double alpha = getAlpha().convertToDouble();
  double beta = getBeta().convertToDouble();
  Value ga = alpha == 1.0 ? grad : g.mul(grad, g.scalarLike(grad, alpha));
  // op(A) = A or A^T; d op(A) = alpha G op(B)^T, d op(B) = alpha op(A)^T G.
  Value opBT = getTransB() ? getB() : g.transposeLast2(getB());
  Value opAT = getTransA() ? getA() : g.transposeLast2(getA());
  Value dOpA = g.matmul(ga, opBT);
  Value dOpB = g.matmul(opAT, ga);
  og.assign({getTransA() ? g.transposeLast2(dOpA) : dOpA,
        getTransB() ? g.transposeLast2(dOpB) : dOpB, Value()});
  if (getC()) {
    Value gc = beta == 1.0 ? grad : g.mul(grad, g.scalarLike(grad, beta));
    og[2] = g.sumToShape(gc, getC().getType());
  } else {
    og.pop_back();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization and reductions
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ValueRange rg,
                                        SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value y = getResult();
  int64_t axis = *normalizeAxis(getAxis(), GradBuilder::type(y).getRank());
  Value dot = g.reduceSum(g.mul(rg[0], y), {axis}, /*keepdims=*/true);
  og.assign({g.mul(y, g.sub(rg[0], dot))});
  return success();
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value y = getResult();
  int64_t axis = *normalizeAxis(getAxis(), GradBuilder::type(y).getRank());
  Value total = g.reduceSum(rg[0], {axis}, /*keepdims=*/true);
  og.assign({g.sub(rg[0], g.mul(g.exp(y), total))});
  return success();
}

LogicalResult LayerNormalizationOp::buildGradients(OpBuilder &b, ValueRange rg,
                                                   SmallVectorImpl<Value> &og) {
  if (rg[1] || rg[2])
    return emitOpError("gradients through the mean and inv_std_dev results "
                       "are not supported");
  GradBuilder g{b, getLoc()};
  Value x = getInput(), dy = rg[0];
  auto xt = GradBuilder::type(x);
  int64_t axis = *normalizeAxis(getAxis(), xt.getRank());
  SmallVector<int64_t> axes;
  for (int64_t d = axis; d < xt.getRank(); ++d)
    axes.push_back(d);
  Value mean = g.castTo(getMean(), xt.getElementType());
  Value rstd = g.castTo(getInvStdDev(), xt.getElementType());
  // xhat = (x - mean) * rstd; dx = rstd * (dxhat - mean(dxhat) -
  // xhat * mean(dxhat * xhat)) with dxhat = dy * scale.
  Value xhat = g.mul(g.sub(x, mean), rstd);
  Value dxhat = g.mul(dy, getScale());
  Value m1 = g.reduceMean(dxhat, axes, /*keepdims=*/true);
  Value m2 = g.reduceMean(g.mul(dxhat, xhat), axes, /*keepdims=*/true);
  Value dx = g.mul(rstd, g.sub(g.sub(dxhat, m1), g.mul(xhat, m2)));
  og.assign({dx, g.sumToShape(g.mul(dy, xhat), getScale().getType())});
  if (getBias())
    og.push_back(g.sumToShape(dy, getBias().getType()));
  return success();
}

/// The gradient of a reduction: the result's gradient, with the reduced
/// dimensions put back as 1s, broadcast over the input (and divided by the
/// count for a mean).
static Value reductionGrad(GradBuilder &g, Value input, Value result, Value grad,
                           std::optional<ArrayRef<int64_t>> axesAttr,
                           int64_t noopWithEmptyAxes, bool mean) {
  auto in = GradBuilder::type(input);
  int64_t rank = in.getRank();
  if ((!axesAttr || axesAttr->empty()) && noopWithEmptyAxes)
    return grad;
  SmallVector<bool> reduced(rank, !axesAttr || axesAttr->empty());
  if (axesAttr)
    for (int64_t a : *axesAttr)
      reduced[*normalizeAxis(a, rank)] = true;
  SmallVector<int64_t> kept;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    kept.push_back(reduced[d] ? 1 : in.getDimSize(d));
    if (reduced[d])
      count *= in.getDimSize(d);
  }
  Value expanded = g.expand(g.reshape(grad, kept), in.getShape());
  if (mean)
    expanded = g.mul(expanded, g.scalarLike(grad, 1.0 / (double)count));
  return expanded;
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({reductionGrad(g, getInput(), getResult(), rg[0], getAxes(),
                      getNoopWithEmptyAxes(), /*mean=*/true)});
  return success();
}

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({reductionGrad(g, getInput(), getResult(), rg[0], getAxes(),
                      getNoopWithEmptyAxes(), /*mean=*/false)});
  return success();
}

//===----------------------------------------------------------------------===//
// Indexing and shapes
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::buildGradients(OpBuilder &b, ValueRange rg,
                                       SmallVectorImpl<Value> &og) {
  auto data = GradBuilder::type(getData());
  og.assign({b.create<GatherGradOp>(getLoc(), rg[0], getIndices(), getAxis(),
                               data.getShape()),
        Value()});
  return success();
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ValueRange rg,
                                        SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.reshape(rg[0], GradBuilder::type(getInput()).getShape())});
  return success();
}

LogicalResult UnsqueezeOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.reshape(rg[0], GradBuilder::type(getInput()).getShape())});
  return success();
}

LogicalResult SqueezeOp::buildGradients(OpBuilder &b, ValueRange rg,
                                        SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.reshape(rg[0], GradBuilder::type(getInput()).getShape())});
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  int64_t rank = GradBuilder::type(getInput()).getRank();
  SmallVector<int64_t> perm = getPermutation(), inverse(rank);
  for (int64_t i = 0; i < rank; ++i)
    inverse[perm[i]] = i;
  og.assign({g.transpose(rg[0], inverse)});
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ValueRange rg,
                                      SmallVectorImpl<Value> &og) {
  auto in = GradBuilder::type(getInput());
  og.assign({b.create<SliceGradOp>(getLoc(), rg[0], in.getShape(), getStarts(),
                              getEnds(), getAxesAttr(), getStepsAttr())});
  return success();
}

LogicalResult SplitOp::buildGradients(OpBuilder &b, ValueRange rg,
                                      SmallVectorImpl<Value> &og) {
  // The pieces without a gradient contribute zeros.
  SmallVector<Value> pieces;
  for (auto [r, grad] : llvm::zip(getResults(), rg)) {
    if (grad) {
      pieces.push_back(grad);
      continue;
    }
    auto t = GradBuilder::type(r);
    pieces.push_back(b.create<ConstantOp>(
        getLoc(), DenseElementsAttr::get(
                      t, ArrayRef<Attribute>{b.getFloatAttr(t.getElementType(), 0.0)})));
  }
  og.assign({b.create<ConcatOp>(getLoc(), pieces, getAxis())});
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ValueRange rg,
                                       SmallVectorImpl<Value> &og) {
  int64_t rank = GradBuilder::type(getResult()).getRank();
  int64_t axis = *normalizeAxis(getAxis(), rank);
  int64_t offset = 0;
  og.clear();
  for (Value in : getInputs()) {
    int64_t size = GradBuilder::type(in).getDimSize(axis);
    og.push_back(b.create<SliceOp>(getLoc(), rg[0],
                                   ArrayRef<int64_t>{offset},
                                   ArrayRef<int64_t>{offset + size},
                                   b.getDenseI64ArrayAttr({axis}),
                                   DenseI64ArrayAttr()));
    offset += size;
  }
  return success();
}

LogicalResult ExpandOp::buildGradients(OpBuilder &b, ValueRange rg,
                                       SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  og.assign({g.sumToShape(rg[0], getInput().getType())});
  return success();
}

//===----------------------------------------------------------------------===//
// Training-specific
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::buildGradients(OpBuilder &b, ValueRange rg,
                                        SmallVectorImpl<Value> &og) {
  if (getTraining() && !getRatio().isZero())
    return emitOpError("dropout with a non-zero ratio in training mode is "
                       "differentiated after tcc-legalize lowers it to "
                       "random_keep and where");
  og.assign({rg[0]});
  return success();
}

LogicalResult SoftmaxCrossEntropyLossOp::buildGradients(
    OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &og) {
  GradBuilder g{b, getLoc()};
  Value dScores;
  if (rg[0])
    dScores = b.create<SoftmaxCrossEntropyLossGradOp>(
        getLoc(), rg[0], getLogProb(), getLabels(), getWeights(),
        getReductionAttr(), getIgnoreIndexAttr());
  if (rg[1]) {
    // Through log_prob: the log-softmax rule over the class axis.
    Value total = g.reduceSum(rg[1], {1}, /*keepdims=*/true);
    Value viaLogProb = g.sub(rg[1], g.mul(g.exp(getLogProb()), total));
    dScores = dScores ? g.add(dScores, viaLogProb) : viaLogProb;
  }
  og.assign({dScores, Value()});
  if (getWeights())
    og.push_back(Value());
  return success();
}
