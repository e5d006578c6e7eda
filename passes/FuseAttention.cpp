//===- FuseAttention.cpp - scaled dot-product attention -> tcc.attention ---===//
//
// See tcc-fuse-attention in Passes.td. The match starts at a softmax whose
// only reader is the probabilities-by-values matmul, and walks up through an
// optional causal mask and an optional scale to the scores' matmul; anything
// else about the chain (another reader of an intermediate value, a mask that
// is not the causal triangle, broadcast batch dimensions) leaves it alone.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_FUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The value of a splat floating-point constant.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !isa<FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

/// Whether `v` is a constant i1 [.., Sq, Sk] mask (leading dimensions 1)
/// that is true exactly above the diagonal: the keys a causal query must not
/// see, as masked_fill(~tril(ones(T, T)), -inf) writes them.
bool isAboveDiagonalMask(Value v, int64_t sq, int64_t sk) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.getElementType().isInteger(1))
    return false;
  auto t = typeOf(v);
  if (t.getRank() < 2 || t.getDimSize(t.getRank() - 2) != sq ||
      t.getDimSize(t.getRank() - 1) != sk)
    return false;
  for (int64_t d = 0; d + 2 < t.getRank(); ++d)
    if (t.getDimSize(d) != 1)
      return false;
  if (attr.isSplat())
    return false;
  int64_t i = 0;
  for (bool masked : attr.getValues<bool>()) {
    if (masked != (i % sk > i / sk))
      return false;
    ++i;
  }
  return true;
}

/// The defining op of `v` if it is an `OpTy` whose only reader is `user`.
template <typename OpTy> OpTy onlyFeeding(Value v, Operation *user) {
  auto op = v.getDefiningOp<OpTy>();
  if (!op || !v.hasOneUse() || *v.user_begin() != user)
    return nullptr;
  return op;
}

struct FuseAttentionPass : tcc::impl::FuseAttentionBase<FuseAttentionPass> {
  using FuseAttentionBase::FuseAttentionBase;

  /// Rewrites the attention that ends in `softmax`, if there is one.
  bool tryFuse(SoftmaxOp softmax) {
    auto probsType = typeOf(softmax.getResult());
    if (probsType.getRank() != 4 ||
        *normalizeAxis(softmax.getAxis(), 4) != 3 || !softmax->hasOneUse())
      return false;
    auto pv = dyn_cast<MatMulOp>(*softmax->user_begin());
    if (!pv || pv.getLhs() != softmax.getResult())
      return false;
    int64_t batch = probsType.getDimSize(0), heads = probsType.getDimSize(1);
    int64_t sq = probsType.getDimSize(2), sk = probsType.getDimSize(3);

    SmallVector<Operation *> chain{pv, softmax};
    Value x = softmax.getInput();
    Operation *reader = softmax;
    bool causal = false;
    if (auto where = onlyFeeding<WhereOp>(x, reader)) {
      std::optional<double> fill = splatValue(where.getX());
      if (!fill || !std::isinf(*fill) || *fill > 0 ||
          !isAboveDiagonalMask(where.getCondition(), sq, sk) ||
          typeOf(where.getY()) != probsType)
        return false;
      causal = true;
      chain.push_back(where);
      x = where.getY();
      reader = where;
    }
    double scale = 1.0;
    if (auto mul = onlyFeeding<MulOp>(x, reader)) {
      std::optional<double> c = splatValue(mul.getRhs());
      Value scores = mul.getLhs();
      if (!c) {
        c = splatValue(mul.getLhs());
        scores = mul.getRhs();
      }
      if (!c || typeOf(scores) != probsType)
        return false;
      scale = *c;
      chain.push_back(mul);
      x = scores;
      reader = mul;
    } else if (auto div = onlyFeeding<DivOp>(x, reader)) {
      std::optional<double> c = splatValue(div.getRhs());
      if (!c || *c == 0.0 || typeOf(div.getLhs()) != probsType)
        return false;
      scale = 1.0 / *c;
      chain.push_back(div);
      x = div.getLhs();
      reader = div;
    }
    auto qk = onlyFeeding<MatMulOp>(x, reader);
    if (!qk)
      return false;
    chain.push_back(qk);
    Value q = qk.getLhs(), kt = qk.getRhs(), v = pv.getRhs();
    auto qt = typeOf(q), ktt = typeOf(kt), vt = typeOf(v);
    // No broadcasting of the batch and head dimensions, one element type.
    if (qt.getRank() != 4 || ktt.getRank() != 4 || vt.getRank() != 4 ||
        qt.getShape().take_front(2) != ArrayRef<int64_t>{batch, heads} ||
        ktt.getShape().take_front(2) != ArrayRef<int64_t>{batch, heads} ||
        vt.getShape().take_front(2) != ArrayRef<int64_t>{batch, heads} ||
        qt.getElementType() != vt.getElementType() ||
        qt.getElementType() != probsType.getElementType())
      return false;
    int64_t d = qt.getDimSize(3), dv = vt.getDimSize(3);
    if (d > maxHeadSize || dv > maxHeadSize)
      return false;

    OpBuilder b(pv);
    Location loc = softmax.getLoc();
    // The key's transpose is named after the op that made k^T (it folds
    // into it when that is a transpose too).
    Location kLoc = kt.getDefiningOp() ? kt.getDefiningOp()->getLoc() : loc;
    auto k = b.create<TransposeOp>(kLoc, kt, b.getDenseI64ArrayAttr({0, 1, 3, 2}));
    auto attention = b.create<AttentionOp>(loc, q, k.getResult(), v, b.getF64FloatAttr(scale),
                                           b.getBoolAttr(causal));
    pv.getResult().replaceAllUsesWith(attention.getResult());
    SmallVector<Operation *> constants; // the scale, the mask and its fill
    for (Operation *op : chain)
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && def->hasTrait<OpTrait::ConstantLike>() && !llvm::is_contained(constants, def))
          constants.push_back(def);
    for (Operation *op : chain) // readers before producers
      op->erase();
    for (Operation *c : constants)
      if (c->use_empty())
        c->erase();
    return true;
  }

  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp softmax : softmaxes)
      tryFuse(softmax);
  }
};

} // namespace
