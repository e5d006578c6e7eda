//===- RecognizeLayerNorm.cpp - decomposed LayerNorm -> layer_normalization ===//
//
// torch.onnx.export before opset 17 writes nn.LayerNorm as
//
//   mean = ReduceMean(x, axes)            d = Sub(x, mean)
//   var  = ReduceMean(Pow(d, 2), axes)    s = Sqrt(Add(var, eps))
//   y    = Add(Mul(Div(d, s), gamma), beta)
//
// over the trailing axes. The pattern is rooted at the final Add.
//
//===----------------------------------------------------------------------===//

#include "passes/legalize/Patterns.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::tcc;

bool mlir::tcc::isUniformConstant(Value v, double value) {
  std::optional<double> got = splatFloatValue(v);
  return got && std::abs(*got - value) <= 1e-6 * std::abs(value) + 1e-12;
}

namespace {

/// The op defining `v`, if it is an `OpTy` whose result has exactly
/// `uses` uses.
template <typename OpTy>
static OpTy definedBy(Value v, unsigned uses = 1) {
  auto op = v.getDefiningOp<OpTy>();
  if (!op)
    return nullptr;
  unsigned n = std::distance(v.use_begin(), v.use_end());
  return n == uses ? op : nullptr;
}

/// The trailing axes a keepdims reduction reduces, as the first one; -1 when
/// the axes are not a trailing block.
static int64_t trailingAxis(ReduceMeanOp op) {
  auto in = cast<RankedTensorType>(op.getInput().getType());
  int64_t rank = in.getRank();
  auto axes = op.getAxes();
  if (!axes || axes->empty() || op.getKeepdims() != 1)
    return -1;
  SmallVector<int64_t> sorted;
  for (int64_t a : *axes)
    sorted.push_back(*normalizeAxis(a, rank));
  llvm::sort(sorted);
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != rank - (int64_t)sorted.size() + (int64_t)i)
      return -1;
  return sorted.front();
}

struct RecognizeLayerNorm : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp root, PatternRewriter &rw) const override {
    // y = Add(Mul(n, gamma), beta), either operand order.
    MulOp scaled;
    Value beta;
    for (int i = 0; i < 2 && !scaled; ++i)
      if ((scaled = definedBy<MulOp>(root->getOperand(i))))
        beta = root->getOperand(1 - i);
    if (!scaled)
      return rw.notifyMatchFailure(root, "not Add(Mul(...), beta)");
    DivOp normalized;
    Value gamma;
    for (int i = 0; i < 2 && !normalized; ++i)
      if ((normalized = definedBy<DivOp>(scaled->getOperand(i))))
        gamma = scaled->getOperand(1 - i);
    if (!normalized)
      return rw.notifyMatchFailure(root, "not Mul(Div(...), gamma)");
    auto centered = definedBy<SubOp>(normalized.getLhs(), 2);
    auto sqrt = definedBy<SqrtOp>(normalized.getRhs());
    if (!centered || !sqrt)
      return rw.notifyMatchFailure(root, "not Div(Sub, Sqrt)");
    auto addEps = definedBy<AddOp>(sqrt.getInput());
    if (!addEps)
      return rw.notifyMatchFailure(root, "not Sqrt(Add(var, eps))");
    ReduceMeanOp var;
    Value eps;
    for (int i = 0; i < 2 && !var; ++i)
      if ((var = definedBy<ReduceMeanOp>(addEps->getOperand(i))))
        eps = addEps->getOperand(1 - i);
    DenseElementsAttr epsAttr;
    if (!var || !matchPattern(eps, m_Constant(&epsAttr)) || !epsAttr.isSplat())
      return rw.notifyMatchFailure(root, "no variance plus constant epsilon");
    auto square = var.getInput().getDefiningOp();
    if (!square || !square->hasOneUse())
      return rw.notifyMatchFailure(root, "the variance's input is used elsewhere");
    bool isSquare =
        (isa<PowOp>(square) && square->getOperand(0) == centered.getResult() &&
         isUniformConstant(square->getOperand(1), 2.0)) ||
        (isa<MulOp>(square) && square->getOperand(0) == centered.getResult() &&
         square->getOperand(1) == centered.getResult());
    if (!isSquare)
      return rw.notifyMatchFailure(root, "the variance is not of (x - mean)^2");
    Value x = centered.getLhs();
    auto mean = definedBy<ReduceMeanOp>(centered.getRhs());
    if (!mean || mean.getInput() != x)
      return rw.notifyMatchFailure(root, "the mean is not of x");
    int64_t axis = trailingAxis(mean);
    if (axis < 0 || trailingAxis(var) != axis || var.getAxes()->size() != mean.getAxes()->size())
      return rw.notifyMatchFailure(root, "the reductions are not over the same trailing axes");

    // gamma and beta must broadcast onto the normalized shape only.
    auto xt = cast<RankedTensorType>(x.getType());
    ArrayRef<int64_t> normShape = xt.getShape().drop_front(axis);
    for (Value v : {gamma, beta}) {
      auto t = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> out;
      if (t.getElementType() != xt.getElementType() ||
          t.getRank() > (int64_t)normShape.size() ||
          !broadcastShapes(normShape, t.getShape(), out) ||
          ArrayRef<int64_t>(out) != normShape)
        return rw.notifyMatchFailure(root, "gamma/beta do not fit the normalized shape");
    }
    if (root.getType() != xt)
      return rw.notifyMatchFailure(root, "the result is broadcast beyond x");

    double epsilon = epsAttr.getSplatValue<APFloat>().convertToDouble();
    auto ln = rw.create<LayerNormalizationOp>(
        root.getLoc(), x, gamma, beta, rw.getI64IntegerAttr(axis),
        rw.getF32FloatAttr((float)epsilon), rw.getI64IntegerAttr(1));
    rw.replaceOp(root, ln.getResult());
    return success();
  }
};

} // namespace

void mlir::tcc::populateLayerNormRecognitionPatterns(RewritePatternSet &patterns) {
  patterns.add<RecognizeLayerNorm>(patterns.getContext());
}
