//===- FuseAttention.cpp - scaled dot-product attention -> tcc.attention ---===//
//
// See tcc-fuse-attention in Passes.td. The match starts at a softmax whose
// only reader is the probabilities-by-values matmul, and walks up through
// scales, at most one causal mask and at most one additive bias to the
// scores' matmul (and a scale on the queries before it); anything else about
// the chain (another reader of an intermediate value, a mask that is not the
// causal triangle, a bias a parameter reaches, broadcast batch dimensions)
// leaves it alone.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_FUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A masked score at most this (after the scales that follow the mask) is
/// a zero probability: exp(-1e4) underflows to 0 in double, and the scores'
/// own range is far above it.
constexpr double kMaskedAtMost = -1.0e4;

/// The values of a constant [.., Sq, Sk] mask whose leading dimensions are 1
/// (one [Sq, Sk] matrix), row-major; empty when `v` is not one.
template <typename T>
SmallVector<T> maskValues(Value v, int64_t sq, int64_t sk) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || attr.isSplat())
    return {};
  auto t = typeOf(v);
  if (t.getRank() < 2 || t.getDimSize(t.getRank() - 2) != sq ||
      t.getDimSize(t.getRank() - 1) != sk)
    return {};
  for (int64_t d = 0; d + 2 < t.getRank(); ++d)
    if (t.getDimSize(d) != 1)
      return {};
  if constexpr (std::is_same_v<T, bool>) {
    if (!attr.getElementType().isInteger(1))
      return {};
    return SmallVector<bool>(attr.getValues<bool>());
  } else {
    if (!isa<FloatType>(attr.getElementType()))
      return {};
    SmallVector<double> values;
    for (const APFloat &f : attr.getValues<APFloat>())
      values.push_back(f.convertToDouble());
    return values;
  }
}

/// Whether element `i` of a row-major [Sq, Sk] matrix is above the diagonal
/// (a key after the query: what a causal mask hides).
bool aboveDiagonal(int64_t i, int64_t sk) { return i % sk > i / sk; }

/// The defining op of `v` if it is an `OpTy` whose only reader is `user`.
template <typename OpTy> OpTy onlyFeeding(Value v, Operation *user) {
  auto op = v.getDefiningOp<OpTy>();
  if (!op || !v.hasOneUse() || *v.user_begin() != user)
    return nullptr;
  return op;
}

/// What the ops between the scores' matmul and the softmax amount to.
struct ScoreChain {
  SmallVector<Operation *> ops; // readers before producers
  double scale = 1.0;
  bool causal = false;
  /// What a masked score is once the scales after the mask apply.
  double maskedValue = 0.0;
  /// An additive bias broadcast to the scores (a padding mask).
  Value bias;
};

/// Whether `bias` broadcasts to the scores `probs` ([.., Sq, Sk]) along
/// every dimension but the keys'.
bool isKeyBias(Value bias, RankedTensorType probs) {
  auto t = typeOf(bias);
  if (t.getRank() > probs.getRank() || t.getRank() == 0 ||
      t.getElementType() != probs.getElementType() ||
      t.getShape().back() != probs.getShape().back())
    return false;
  int64_t offset = probs.getRank() - t.getRank();
  for (int64_t d = 0; d + 1 < t.getRank(); ++d)
    if (t.getDimSize(d) != 1 && t.getDimSize(d) != probs.getDimSize(d + offset))
      return false;
  return true;
}

/// If `op` multiplies or divides a value by a scalar constant (a finite,
/// non-zero one), the factor and that value.
std::optional<std::pair<double, Value>> scaling(Operation *op) {
  for (unsigned i = 0; i < 2; ++i) {
    if (!isa<MulOp>(op) && !(isa<DivOp>(op) && i == 1))
      continue;
    Value c = op->getOperand(i);
    std::optional<double> f = splatFloatValue(c);
    if (f && *f != 0.0 && std::isfinite(*f) && typeOf(c).getNumElements() == 1)
      return std::make_pair(isa<DivOp>(op) ? 1.0 / *f : *f, op->getOperand(1 - i));
  }
  return std::nullopt;
}

/// Whether `op` masks the scores `x` causally: where(j > i, fill, x),
/// where(j <= i, x, fill) or x + m with m 0 on and below the diagonal and
/// `fill` above; sets the fill.
bool causalMask(Operation *op, Value x, int64_t sq, int64_t sk, double &fill) {
  if (auto where = dyn_cast<WhereOp>(op)) {
    bool fillFirst = where.getY() == x;
    if (!fillFirst && where.getX() != x)
      return false;
    Value fillValue = fillFirst ? where.getX() : where.getY();
    std::optional<double> f = splatFloatValue(fillValue);
    SmallVector<bool> mask = maskValues<bool>(where.getCondition(), sq, sk);
    if (!f || mask.empty() || typeOf(fillValue).getNumElements() != 1)
      return false;
    for (auto [i, hidden] : llvm::enumerate(mask))
      if ((fillFirst ? hidden : !hidden) != aboveDiagonal(i, sk))
        return false;
    fill = *f;
    return true;
  }
  if (auto add = dyn_cast<AddOp>(op)) {
    Value m = add.getLhs() == x ? add.getRhs() : add.getLhs();
    SmallVector<double> values = maskValues<double>(m, sq, sk);
    if (values.empty())
      return false;
    fill = -std::numeric_limits<double>::infinity(); // the largest masked value
    for (auto [i, value] : llvm::enumerate(values)) {
      if (aboveDiagonal(i, sk) ? !(value <= kMaskedAtMost) : value != 0.0)
        return false;
      if (aboveDiagonal(i, sk))
        fill = std::max(fill, value);
    }
    return true;
  }
  return false;
}

/// If `v` ([B, H, S, D]) is x ([B, S, H*D]) reshaped to [B, S, H, D] and
/// transposed by transposes that compose to (0, 2, 1, 3), x.
Value tokenMajorSource(Value v) {
  SmallVector<int64_t> perm{0, 1, 2, 3}; // v's dimensions in terms of the reshape's
  while (auto t = v.getDefiningOp<TransposeOp>()) {
    SmallVector<int64_t> p = t.getPermutation();
    for (int64_t &i : perm)
      i = p[i];
    v = t.getInput();
  }
  auto r = v.getDefiningOp<ReshapeOp>();
  if (!r || perm != ArrayRef<int64_t>{0, 2, 1, 3})
    return {};
  auto in = typeOf(r.getInput()), out = typeOf(r.getResult());
  if (in.getRank() != 3 || out.getRank() != 4 || in.getDimSize(0) != out.getDimSize(0) ||
      in.getDimSize(1) != out.getDimSize(1) ||
      in.getDimSize(2) != out.getDimSize(2) * out.getDimSize(3))
    return {};
  return r.getInput();
}

/// Erases the ops of `work` that no longer have a reader, and then those
/// that fed them (views and splits only). An op is in `work` at most once,
/// and only while it is alive: it is taken out before it is erased, and
/// only the producers of an erased op's operands (which that op read) go in.
void eraseDead(llvm::SetVector<Operation *> work) {
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!op->use_empty() || !isa<TransposeOp, ReshapeOp, SplitOp>(op))
      continue;
    for (Value in : op->getOperands())
      if (Operation *def = in.getDefiningOp())
        work.insert(def);
    op->erase();
  }
}

/// Rewrites a head-major `attention` whose query, key and value are views of
/// [B, S, H*D] tensors into the token-major or packed layout (see
/// tcc.attention), when all three are.
void toTokenMajor(AttentionOp attention) {
  Value sources[3];
  for (int i = 0; i < 3; ++i)
    if (!(sources[i] = tokenMajorSource(attention->getOperand(i))))
      return;
  auto resultType = typeOf(attention.getResult());
  int64_t b = resultType.getDimSize(0), h = resultType.getDimSize(1),
          sq = resultType.getDimSize(2), dv = resultType.getDimSize(3);
  int64_t d = typeOf(attention.getQuery()).getDimSize(3);
  // The thirds of one split of a fused projection: read it whole.
  auto split = sources[0].getDefiningOp<SplitOp>();
  std::array<int64_t, 3> columns{};
  bool packed = split && split->getNumResults() == 3 && d == dv &&
                *normalizeAxis(split.getAxis(), 3) == 2 &&
                typeOf(split.getInput()).getDimSize(2) == 3 * h * d;
  for (int i = 0; packed && i < 3; ++i) {
    auto r = dyn_cast<OpResult>(sources[i]);
    packed = r && r.getOwner() == split.getOperation() &&
             llvm::none_of(llvm::seq(0, i), [&](int j) { return sources[j] == sources[i]; });
    if (packed)
      columns[i] = r.getResultNumber() * h * d;
  }
  OpBuilder builder(attention);
  Location loc = attention.getLoc();
  SmallVector<Value> operands(sources, sources + 3);
  if (packed)
    operands.assign(3, split.getInput());
  auto tm = builder.create<AttentionOp>(
      loc, operands[0], operands[1], operands[2], attention.getBias(), attention.getRng(),
      attention.getScaleAttr(), attention.getCausalAttr(), builder.getI64IntegerAttr(h),
      packed ? builder.getDenseI64ArrayAttr(columns) : DenseI64ArrayAttr(),
      attention.getDropoutAttr(), attention.getDropoutStreamAttr());
  // The result's readers: [B, S, H*Dv] is what a transpose to [B, S, H, Dv]
  // and a reshape back make of it; anyone else reads a view or a copy.
  Value split4, headMajor;
  auto splitHeads = [&] {
    if (!split4)
      split4 = builder.create<ReshapeOp>(loc, tm.getResult(),
                                         builder.getDenseI64ArrayAttr({b, sq, h, dv}));
    return split4;
  };
  for (OpOperand &use : llvm::make_early_inc_range(attention.getResult().getUses())) {
    auto t = dyn_cast<TransposeOp>(use.getOwner());
    if (t && ArrayRef<int64_t>(t.getPermutation()) == ArrayRef<int64_t>{0, 2, 1, 3}) {
      for (OpOperand &tu : llvm::make_early_inc_range(t.getResult().getUses())) {
        auto r = dyn_cast<ReshapeOp>(tu.getOwner());
        if (r && r.getType() == tm.getResult().getType()) {
          r.getResult().replaceAllUsesWith(tm.getResult());
          r->erase();
        } else {
          tu.set(splitHeads());
        }
      }
      t->erase();
      continue;
    }
    if (!headMajor)
      headMajor = builder.create<TransposeOp>(loc, splitHeads(),
                                              builder.getDenseI64ArrayAttr({0, 2, 1, 3}));
    use.set(headMajor);
  }
  attention.getLse().replaceAllUsesWith(tm.getLse());
  llvm::SetVector<Operation *> dead;
  for (Value operand : attention->getOperands())
    if (Operation *def = operand.getDefiningOp())
      dead.insert(def);
  attention->erase();
  eraseDead(dead);
}

struct FuseAttentionPass : tcc::impl::FuseAttentionBase<FuseAttentionPass> {
  using FuseAttentionBase::FuseAttentionBase;

  /// Rewrites the attention that ends in `softmax`, if there is one.
  AttentionOp tryFuse(SoftmaxOp softmax) {
    auto probsType = typeOf(softmax.getResult());
    int64_t rank = probsType.getRank();
    if ((rank != 3 && rank != 4) || *normalizeAxis(softmax.getAxis(), rank) != rank - 1 ||
        !softmax->hasOneUse())
      return {};
    // Dropout on the probabilities, as tcc-legalize writes it: where(keep,
    // probs * 1/(1 - p), 0) with `keep` a random_keep of the probabilities'
    // shape. The op regenerates the same mask (the flat index of the
    // [B, H, Sq, Sk] or [B*H, Sq, Sk] probabilities), so the mask may have
    // other readers.
    SmallVector<Operation *> dropout; // readers before producers
    RandomKeepOp keep;
    Value probs = softmax.getResult();
    if (auto mul = dyn_cast<MulOp>(*softmax->user_begin())) {
      std::optional<std::pair<double, Value>> scaled = scaling(mul);
      auto where = mul->hasOneUse() ? dyn_cast<WhereOp>(*mul->user_begin()) : WhereOp();
      if (!scaled || scaled->second != probs || !where || where.getX() != mul.getResult() ||
          !where->hasOneUse() || typeOf(mul.getResult()) != probsType ||
          typeOf(where.getResult()) != probsType)
        return {};
      keep = where.getCondition().getDefiningOp<RandomKeepOp>();
      std::optional<double> zero = splatFloatValue(where.getY());
      // The scale as the model's float type stores 1 / (1 - p): within its
      // rounding (fp16's 2^-11, float's 2^-24; 1e-6 covers both the float
      // and double forms tcc-legalize writes).
      double tolerance = probsType.getElementType().getIntOrFloatBitWidth() <= 16 ? 1e-3 : 1e-6;
      if (!keep || !zero || *zero != 0.0 ||
          typeOf(keep.getResult()).getShape() != probsType.getShape() ||
          std::abs(scaled->first * (1.0 - keep.getRatio().convertToDouble()) - 1.0) > tolerance)
        return {};
      dropout = {where, mul};
      probs = where.getResult();
    }
    if (!probs.hasOneUse())
      return {};
    auto pv = dyn_cast<MatMulOp>(*probs.user_begin());
    if (!pv || pv.getLhs() != probs)
      return {};
    int64_t sq = probsType.getDimSize(rank - 2), sk = probsType.getDimSize(rank - 1);

    // Up from the softmax: scales and at most one causal mask, in any order.
    ScoreChain chain;
    chain.ops = {pv};
    llvm::append_range(chain.ops, dropout);
    chain.ops.push_back(softmax);
    Value x = softmax.getInput();
    Operation *reader = softmax;
    double scaleAfterMask = 1.0;
    bool scaleSeen = false;
    while (Operation *def = x.getDefiningOp()) {
      if (!x.hasOneUse() || typeOf(x) != probsType || isa<MatMulOp>(def))
        break;
      Value in;
      double fill = 0.0;
      if (isa<MulOp, DivOp>(def)) {
        std::optional<std::pair<double, Value>> scaled = scaling(def);
        if (!scaled)
          return {};
        scaleSeen = true;
        chain.scale *= scaled->first;
        if (!chain.causal)
          scaleAfterMask *= scaled->first;
        in = scaled->second;
      } else if (isa<WhereOp, AddOp>(def)) {
        // A causal mask: the scores are the operand that is not a constant.
        unsigned first = isa<WhereOp>(def) ? 1 : 0;
        Value scores = matchPattern(def->getOperand(first), m_Constant())
                           ? def->getOperand(first + 1)
                           : def->getOperand(first);
        if (!chain.causal && typeOf(scores) == probsType &&
            causalMask(def, scores, sq, sk, fill)) {
          chain.causal = true;
          chain.maskedValue = fill;
          in = scores;
        } else if (isa<AddOp>(def) && !chain.bias && !scaleSeen) {
          // An additive bias (a padding mask), added after every scale: the
          // scores are the operand that continues the chain.
          Value lhs = def->getOperand(0), rhs = def->getOperand(1);
          bool lhsScores = typeOf(lhs) == probsType && lhs.hasOneUse() &&
                           isa_and_nonnull<MatMulOp, MulOp, DivOp, WhereOp>(lhs.getDefiningOp());
          scores = lhsScores ? lhs : rhs;
          Value bias = lhsScores ? rhs : lhs;
          if (typeOf(scores) != probsType || !isKeyBias(bias, probsType) ||
              trainableValues(softmax->getParentOfType<func::FuncOp>()).contains(bias))
            return {};
          chain.bias = bias;
          in = scores;
        } else {
          return {};
        }
      } else {
        return {};
      }
      chain.ops.push_back(def);
      reader = def;
      x = in;
    }
    if (chain.scale <= 0.0 ||
        (chain.causal && !(chain.maskedValue * scaleAfterMask <= kMaskedAtMost)))
      return {};
    auto qk = onlyFeeding<MatMulOp>(x, reader);
    if (!qk || typeOf(x) != probsType)
      return {};
    chain.ops.push_back(qk);
    Value q = qk.getLhs(), kt = qk.getRhs(), v = pv.getRhs();
    // A scale on the queries (nn.MultiheadAttention's q / sqrt(d)).
    if (Operation *def = q.getDefiningOp(); def && q.hasOneUse() && isa<MulOp, DivOp>(def)) {
      if (std::optional<std::pair<double, Value>> scaled = scaling(def);
          scaled && scaled->first > 0.0 && typeOf(scaled->second) == typeOf(q)) {
        chain.scale *= scaled->first;
        chain.ops.push_back(def);
        q = scaled->second;
      }
    }
    auto qt = typeOf(q), ktt = typeOf(kt), vt = typeOf(v);
    // No broadcasting of the batch and head dimensions, one element type.
    ArrayRef<int64_t> batch = probsType.getShape().drop_back(2);
    if (qt.getRank() != rank || ktt.getRank() != rank || vt.getRank() != rank ||
        qt.getShape().drop_back(2) != batch || ktt.getShape().drop_back(2) != batch ||
        vt.getShape().drop_back(2) != batch || qt.getElementType() != vt.getElementType() ||
        qt.getElementType() != probsType.getElementType())
      return {};
    int64_t d = qt.getDimSize(rank - 1), dv = vt.getDimSize(rank - 1);
    if (d > maxHeadSize || dv > maxHeadSize)
      return {};

    OpBuilder b(pv);
    Location loc = softmax.getLoc();
    // As a rank-4 view: [BH, S, D] attention (nn.MultiheadAttention) is
    // [1, BH, S, D], a [.., Sk] bias [B or 1, H or 1, Sq or 1, Sk].
    auto as4d = [&](Value val) -> Value {
      auto t = typeOf(val);
      if (t.getRank() == 4)
        return val;
      SmallVector<int64_t> shape(4 - t.getRank(), 1);
      llvm::append_range(shape, t.getShape());
      return b.create<ReshapeOp>(val.getLoc(), val, b.getDenseI64ArrayAttr(shape));
    };
    SmallVector<int64_t> perm{0, 1, 2};
    if (rank == 4)
      perm.push_back(3);
    std::swap(perm[rank - 1], perm[rank - 2]);
    // The key's transpose is named after the op that made k^T (it folds
    // into it when that is a transpose too).
    Location kLoc = kt.getDefiningOp() ? kt.getDefiningOp()->getLoc() : loc;
    Value k = b.create<TransposeOp>(kLoc, kt, b.getDenseI64ArrayAttr(perm));
    Value q4 = as4d(q), k4 = as4d(k), v4 = as4d(v); // in this order
    Value bias4 = chain.bias ? as4d(chain.bias) : Value();
    auto attention = b.create<AttentionOp>(
        loc, q4, k4, v4, bias4, keep ? keep.getState() : Value(), b.getF64FloatAttr(chain.scale),
        b.getBoolAttr(chain.causal), IntegerAttr(), DenseI64ArrayAttr(),
        keep ? keep.getRatioAttr() : FloatAttr(), keep ? keep.getStreamAttr() : IntegerAttr());
    Value result = attention.getResult();
    if (rank == 3)
      result = b.create<ReshapeOp>(loc, result,
                                   b.getDenseI64ArrayAttr(typeOf(pv.getResult()).getShape()));
    pv.getResult().replaceAllUsesWith(result);
    SmallVector<Operation *> constants; // the scales, the mask and its fill
    for (Operation *op : chain.ops)
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && def->hasTrait<OpTrait::ConstantLike>() && !llvm::is_contained(constants, def))
          constants.push_back(def);
    for (Operation *op : chain.ops) // readers before producers
      op->erase();
    for (Operation *c : constants)
      if (c->use_empty())
        c->erase();
    if (keep && keep->use_empty())
      keep->erase();
    return attention;
  }

  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp softmax : softmaxes)
      if (AttentionOp attention = tryFuse(softmax))
        toTokenMajor(attention);
  }
};

} // namespace
