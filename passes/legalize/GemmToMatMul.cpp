//===- GemmToMatMul.cpp - Gemm as matmul + elementwise --------------------===//

#include "passes/legalize/Patterns.h"

#include "compiler/Dialect/TccOps.h"

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// alpha * op(A) op(B) + beta * C  ->  matmul(op(A), op(B)) [* alpha] [+ [beta *] C].
struct GemmToMatMul : OpRewritePattern<GemmOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GemmOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Type elt = op.getType().getElementType();
    auto scalar = [&](double v) -> Value {
      auto t = RankedTensorType::get({}, elt);
      return rw.create<ConstantOp>(
          loc, DenseElementsAttr::get(t, ArrayRef<Attribute>{rw.getFloatAttr(elt, v)}));
    };
    auto transposed = [&](Value v) -> Value {
      return rw.create<TransposeOp>(loc, v, rw.getDenseI64ArrayAttr({1, 0}));
    };
    Value a = op.getTransA() ? transposed(op.getA()) : op.getA();
    Value b = op.getTransB() ? transposed(op.getB()) : op.getB();
    Value y = rw.create<MatMulOp>(loc, a, b);
    double alpha = op.getAlpha().convertToDouble();
    double beta = op.getBeta().convertToDouble();
    if (alpha != 1.0)
      y = rw.create<MulOp>(loc, y, scalar(alpha));
    if (Value c = op.getC(); c && beta != 0.0) {
      if (beta != 1.0)
        c = rw.create<MulOp>(loc, c, scalar(beta));
      y = rw.create<AddOp>(loc, y, c);
    }
    if (y.getType() != op.getType())
      return rw.notifyMatchFailure(op, "the decomposition changes the type");
    rw.replaceOp(op, y);
    return success();
  }
};

} // namespace

void mlir::tcc::populateGemmLegalizationPatterns(RewritePatternSet &patterns) {
  patterns.add<GemmToMatMul>(patterns.getContext());
}
