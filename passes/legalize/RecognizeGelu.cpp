//===- RecognizeGelu.cpp - erf / tanh GELU chains -> gelu -----------------===//
//
// torch.onnx.export writes F.gelu as
//
//   erf:   Mul(Mul(x, Add(Erf(Div(x, 1.4142135)), 1)), 0.5)
//   tanh:  Mul(0.5, Mul(x, Add(1, Tanh(Mul(0.7978845, Add(x, Mul(0.044715,
//          Mul(x, Mul(x, x)))))))))
//
// (any operand order of the commutative ops). Rooted at the outer Mul.
//
//===----------------------------------------------------------------------===//

#include "passes/legalize/Patterns.h"

#include "compiler/Dialect/TccOps.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// If `op` is a binary `OpTy` one of whose operands is a uniform constant
/// `c`, the other operand; else null. The op's result must have one use
/// unless it is the root.
template <typename OpTy>
static Value otherThanConstant(Value v, double c, bool root = false) {
  auto op = v.getDefiningOp<OpTy>();
  if (!op || (!root && !op->hasOneUse()))
    return nullptr;
  for (int i = 0; i < 2; ++i)
    if (isUniformConstant(op->getOperand(i), c))
      return op->getOperand(1 - i);
  return nullptr;
}

/// If `v` is Mul(x, other) or Mul(other, x) with one use, `other`.
static Value mulPartner(Value v, Value x) {
  auto op = v.getDefiningOp<MulOp>();
  if (!op || !op->hasOneUse())
    return nullptr;
  if (op.getLhs() == x)
    return op.getRhs();
  if (op.getRhs() == x)
    return op.getLhs();
  return nullptr;
}

static Value oneUse(Value v) { return v && v.hasOneUse() ? v : nullptr; }

struct RecognizeGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp root, PatternRewriter &rw) const override {
    Value inner = otherThanConstant<MulOp>(root.getResult(), 0.5, /*root=*/true);
    auto prod = inner ? inner.getDefiningOp<MulOp>() : nullptr;
    if (!prod || !prod->hasOneUse())
      return rw.notifyMatchFailure(root, "not Mul(Mul(x, ...), 0.5)");
    for (int i = 0; i < 2; ++i) {
      Value x = prod->getOperand(i);
      Value onePlus = oneUse(prod->getOperand(1 - i));
      Value f = onePlus ? otherThanConstant<AddOp>(onePlus, 1.0) : nullptr;
      if (!f || !f.hasOneUse())
        continue;
      if (auto erf = f.getDefiningOp<ErfOp>()) {
        Value a = erf.getInput();
        bool scaled = otherThanConstant<DivOp>(a, std::sqrt(2.0)) == x ||
                      otherThanConstant<MulOp>(a, 1.0 / std::sqrt(2.0)) == x;
        auto div = a.getDefiningOp<DivOp>();
        if (div && !(div.getLhs() == x && isUniformConstant(div.getRhs(), std::sqrt(2.0))))
          scaled = false;
        if (scaled)
          return replace(root, x, "none", rw);
      }
      if (auto tanh = f.getDefiningOp<TanhOp>()) {
        Value u = otherThanConstant<MulOp>(tanh.getInput(), std::sqrt(2.0 / M_PI));
        auto sum = u ? u.getDefiningOp<AddOp>() : nullptr;
        if (!sum || !sum->hasOneUse())
          continue;
        for (int j = 0; j < 2; ++j) {
          if (sum->getOperand(j) != x)
            continue;
          Value cube = otherThanConstant<MulOp>(sum->getOperand(1 - j), 0.044715);
          if (!cube)
            continue;
          Value sq = mulPartner(cube, x);
          bool isCube = (sq && mulPartner(sq, x) == x) ||
                        (cube.getDefiningOp<PowOp>() &&
                         cube.getDefiningOp<PowOp>().getLhs() == x &&
                         isUniformConstant(cube.getDefiningOp<PowOp>().getRhs(), 3.0));
          if (isCube)
            return replace(root, x, "tanh", rw);
        }
      }
    }
    return rw.notifyMatchFailure(root, "not an erf or tanh GELU chain");
  }

  static LogicalResult replace(MulOp root, Value x, StringRef approximate,
                               PatternRewriter &rw) {
    if (x.getType() != root.getType())
      return rw.notifyMatchFailure(root, "the chain broadcasts x");
    rw.replaceOpWithNewOp<GeluOp>(root, x, rw.getStringAttr(approximate));
    return success();
  }
};

} // namespace

void mlir::tcc::populateGeluRecognitionPatterns(RewritePatternSet &patterns) {
  patterns.add<RecognizeGelu>(patterns.getContext());
}
