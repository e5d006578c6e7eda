//===- FuseAttention.cpp - scaled dot-product attention -> tcc.attention ---===//
//
// See tcc-fuse-attention in Passes.td. The match starts at a softmax whose
// only reader (through views) is the probabilities-by-values matmul, and
// walks up through views, scales, fixed masks and additive biases to the
// scores' matmul (and scales on the queries and keys before it). The op
// works in the softmax's [B, H]; every operand is read as a view of it
// (frameShape). Anything else about the chain (another reader of an
// intermediate value, a bias a parameter reaches, a mask that hides every
// key of a query) leaves it alone.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"

#include <numeric>

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

/// What a constant mask becomes when tcc.attention reads it as its bias:
/// exp(-3e4) is 0 in float and double, and -3e4 is finite in fp16.
constexpr double kMaskBias = -3.0e4;

/// The values of a constant [.., Sq, Sk] mask whose [Sq, Sk] matrices are
/// all the same (one matrix, broadcast or repeated along the leading
/// dimensions), row-major; empty when `v` is not one.
template <typename T>
SmallVector<T> maskValues(Value v, int64_t sq, int64_t sk) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || attr.isSplat())
    return {};
  auto t = typeOf(v);
  if (t.getRank() < 2 || t.getDimSize(t.getRank() - 2) != sq ||
      t.getDimSize(t.getRank() - 1) != sk)
    return {};
  SmallVector<T> values;
  if constexpr (std::is_same_v<T, bool>) {
    if (!attr.getElementType().isInteger(1))
      return {};
    values.assign(attr.getValues<bool>().begin(), attr.getValues<bool>().end());
  } else {
    // A mask is S^2 values (4M at 2048 tokens) in every layer: read float
    // and double as they are stored, not one APFloat at a time.
    Type elt = attr.getElementType();
    if (elt.isF32())
      values.assign(attr.getValues<float>().begin(), attr.getValues<float>().end());
    else if (elt.isF64())
      values.assign(attr.getValues<double>().begin(), attr.getValues<double>().end());
    else if (isa<FloatType>(elt))
      for (const APFloat &f : attr.getValues<APFloat>())
        values.push_back(f.convertToDouble());
    else
      return {};
  }
  size_t matrix = static_cast<size_t>(sq * sk);
  for (size_t i = matrix; i < values.size(); ++i)
    if (values[i] != values[i % matrix])
      return {};
  values.resize(matrix);
  return values;
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

/// Reshape, Squeeze and Unsqueeze (row-major views of their operand) and
/// casts between float types. A chain of them between two values of the
/// scores' [.., Sq, Sk] shape (the same element count) maps each score to
/// itself; the fused op computes the scores and probabilities in float
/// whatever its operands' type.
bool isView(Operation *op) {
  if (auto cast = dyn_cast_or_null<CastOp>(op))
    return isa<FloatType>(getElementTypeOrSelf(cast.getInput().getType())) &&
           isa<FloatType>(cast.getTo());
  return isa_and_nonnull<ReshapeOp, SqueezeOp, UnsqueezeOp>(op);
}

/// An additive term of the scores: `value` is added to a value of type
/// `space` (broadcasting), and the scales after it multiply it by `scale`.
struct Bias {
  Value value;             // or:
  SmallVector<bool> kept;  // a fixed [Sq, Sk] mask: 0 where kept, kMaskBias elsewhere
  RankedTensorType space;
  double scale = 1.0;
};

/// What the ops between the scores' matmul and the softmax amount to.
struct ScoreChain {
  SmallVector<Operation *> ops; // readers before producers
  double scale = 1.0;
  bool causal = false;
  SmallVector<Bias> biases;
  /// A soft cap c tanh(x / c) (0: none): c is the product of the scales
  /// between the tanh and the softmax.
  double softcap = 0.0;
};

/// The [b, h] of a value of the scores' leading dimensions `lead` (or of an
/// operand broadcast into them, `lead` then being the result's) in the
/// attention's [B, H] `frame`, given the value's own leading dimensions
/// right-aligned: the frame's where they are the whole of `lead`, 1 where
/// the value is broadcast along all of them; std::nullopt otherwise.
std::optional<std::array<int64_t, 2>> frameLead(ArrayRef<int64_t> own, ArrayRef<int64_t> lead,
                                                 std::array<int64_t, 2> frame) {
  if (own.size() > lead.size() || std::accumulate(lead.begin(), lead.end(), int64_t{1}, std::multiplies<>()) !=
                                       frame[0] * frame[1])
    return std::nullopt;
  SmallVector<int64_t> aligned(lead.size() - own.size(), 1);
  llvm::append_range(aligned, own);
  if (lead == ArrayRef<int64_t>(frame))
    return std::array<int64_t, 2>{aligned[0], aligned[1]};
  if (ArrayRef<int64_t>(aligned) == lead)
    return frame;
  if (llvm::all_of(aligned, [](int64_t d) { return d == 1; }))
    return std::array<int64_t, 2>{1, 1};
  return std::nullopt;
}

/// `value`'s shape in the frame: [b, h] (frameLead) and its last two
/// dimensions.
std::optional<SmallVector<int64_t, 4>> frameShape(ShapedType t, RankedTensorType space,
                                                  std::array<int64_t, 2> frame) {
  if (t.getRank() < 2 || space.getRank() < 2)
    return std::nullopt;
  std::optional<std::array<int64_t, 2>> lead =
      frameLead(t.getShape().drop_back(2), space.getShape().drop_back(2), frame);
  if (!lead)
    return std::nullopt;
  return SmallVector<int64_t, 4>{(*lead)[0], (*lead)[1], t.getDimSize(t.getRank() - 2),
                                 t.getDimSize(t.getRank() - 1)};
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

/// A fixed mask on the scores: which keys each query keeps, the largest
/// value a hidden score is given, and the scores it reads.
struct FixedMask {
  SmallVector<bool> kept;        // [Sq, Sk], row-major
  double fill = 0.0;
  Value scores;
  SmallVector<Operation *> ops;  // readers before producers
  bool additive = false;         // scores + m alone: m is exact as a bias
};

/// If `op` is a fixed mask of the scores: where(c, x, fill) or
/// where(c, fill, x) with `c` a constant boolean [.., Sq, Sk] and `fill` a
/// scalar; x + m with `m` a constant that is 0 where kept and at most -1e4
/// where hidden; or x * k + m (Keras: `k` a constant of 0s and 1s, `m` 0
/// where `k` is 1 and at most -1e4 where it is 0). The [Sq, Sk] matrices of
/// a constant must all be the same (maskValues).
std::optional<FixedMask> fixedMask(Operation *op, int64_t sq, int64_t sk) {
  FixedMask mask;
  mask.ops.push_back(op);
  if (auto where = dyn_cast<WhereOp>(op)) {
    bool fillFirst = matchPattern(where.getX(), m_Constant());
    Value fillValue = fillFirst ? where.getX() : where.getY();
    std::optional<double> fill = splatFloatValue(fillValue);
    SmallVector<bool> cond = maskValues<bool>(where.getCondition(), sq, sk);
    if (!fill || cond.empty() || typeOf(fillValue).getNumElements() != 1)
      return std::nullopt;
    mask.scores = fillFirst ? where.getY() : where.getX();
    mask.fill = *fill;
    for (bool c : cond)
      mask.kept.push_back(c != fillFirst);
    return mask;
  }
  auto add = dyn_cast<AddOp>(op);
  if (!add)
    return std::nullopt;
  bool lhsConstant = matchPattern(add.getLhs(), m_Constant());
  Value x = lhsConstant ? add.getRhs() : add.getLhs();
  SmallVector<double> m = maskValues<double>(lhsConstant ? add.getLhs() : add.getRhs(), sq, sk);
  if (m.empty())
    return std::nullopt;
  SmallVector<double> k;
  if (auto mul = x.getDefiningOp<MulOp>(); mul && x.hasOneUse()) {
    bool kFirst = matchPattern(mul.getLhs(), m_Constant());
    k = maskValues<double>(kFirst ? mul.getLhs() : mul.getRhs(), sq, sk);
    if (!k.empty() && llvm::all_of(k, [](double v) { return v == 0.0 || v == 1.0; })) {
      mask.ops.push_back(mul);
      x = kFirst ? mul.getRhs() : mul.getLhs();
    } else {
      k.clear();
    }
  }
  mask.additive = k.empty();
  mask.scores = x;
  mask.fill = -std::numeric_limits<double>::infinity();
  for (auto [i, value] : llvm::enumerate(m)) {
    bool kept = k.empty() ? value == 0.0 : k[i] == 1.0;
    if (kept ? value != 0.0 : !(value <= kMaskedAtMost))
      return std::nullopt;
    mask.kept.push_back(kept);
    if (!kept)
      mask.fill = std::max(mask.fill, value);
  }
  return mask;
}

/// Whether a [Sq, Sk] mask keeps exactly what a causal one does.
bool isCausal(ArrayRef<bool> kept, int64_t sk) {
  for (auto [i, k] : llvm::enumerate(kept))
    if (k == aboveDiagonal(i, sk))
      return false;
  return true;
}

/// Whether every query of a [Sq, Sk] mask keeps a key.
bool everyQueryKeeps(ArrayRef<bool> kept, int64_t sk) {
  for (size_t row = 0; row < kept.size(); row += sk)
    if (llvm::none_of(kept.slice(row, sk), [](bool k) { return k; }))
      return false;
  return true;
}

/// A fixed [Sq, Sk] mask as tcc.attention's bias: 0 where kept, kMaskBias
/// elsewhere.
Value maskConstant(OpBuilder &b, Location loc, ArrayRef<bool> kept, int64_t sq, int64_t sk,
                   Type elt) {
  auto type = RankedTensorType::get({sq, sk}, elt);
  SmallVector<APFloat> values;
  for (bool k : kept) {
    APFloat value(k ? 0.0 : kMaskBias);
    bool lost = false;
    value.convert(cast<FloatType>(elt).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    values.push_back(value);
  }
  return b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, values));
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
      attention.getDropoutAttr(), attention.getDropoutStreamAttr(), attention.getSoftcapAttr());
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
    int64_t sq = probsType.getDimSize(rank - 2), sk = probsType.getDimSize(rank - 1);
    // The op's [B, H]: the softmax's, or [1, B*H] for [B*H, Sq, Sk] scores.
    std::array<int64_t, 2> frame = rank == 4
                                       ? std::array<int64_t, 2>{probsType.getDimSize(0),
                                                                probsType.getDimSize(1)}
                                       : std::array<int64_t, 2>{1, probsType.getDimSize(0)};
    // A value of the scores' shape: [.., Sq, Sk] and as many elements
    // (views may regroup the leading dimensions).
    auto scoresLike = [&](Value v) {
      auto t = typeOf(v);
      return t.getRank() >= 2 && t.getDimSize(t.getRank() - 2) == sq &&
             t.getDimSize(t.getRank() - 1) == sk &&
             t.getNumElements() == probsType.getNumElements();
    };

    // Down from the softmax to the product with the values: views, and
    // dropout in tcc-legalize's form, where(keep, probs * 1/(1 - p), 0) with
    // `keep` a random_keep of the probabilities' shape. The op regenerates
    // the same mask (the flat index of the probabilities, whichever view
    // they are in), so the mask may have other readers.
    SmallVector<Operation *> down; // producers before readers
    auto skipViews = [&](Value v) {
      while (v.hasOneUse() && isView(*v.user_begin())) {
        down.push_back(*v.user_begin());
        v = down.back()->getResult(0);
      }
      return v;
    };
    RandomKeepOp keep;
    Value probs = skipViews(softmax.getResult());
    if (!probs.hasOneUse() || !scoresLike(probs))
      return {};
    if (auto mul = dyn_cast<MulOp>(*probs.user_begin())) {
      auto type = typeOf(probs);
      std::optional<std::pair<double, Value>> scaled = scaling(mul);
      auto where = mul->hasOneUse() ? dyn_cast<WhereOp>(*mul->user_begin()) : WhereOp();
      if (!scaled || scaled->second != probs || !where || where.getX() != mul.getResult() ||
          !where->hasOneUse() || typeOf(mul.getResult()) != type ||
          typeOf(where.getResult()) != type)
        return {};
      keep = where.getCondition().getDefiningOp<RandomKeepOp>();
      std::optional<double> zero = splatFloatValue(where.getY());
      // The scale as the model's float type stores 1 / (1 - p): within its
      // rounding (fp16's 2^-11, float's 2^-24; 1e-6 covers both the float
      // and double forms tcc-legalize writes).
      double tolerance = type.getElementType().getIntOrFloatBitWidth() <= 16 ? 1e-3 : 1e-6;
      if (!keep || !zero || *zero != 0.0 ||
          typeOf(keep.getResult()).getShape() != type.getShape() ||
          std::abs(scaled->first * (1.0 - keep.getRatio().convertToDouble()) - 1.0) > tolerance)
        return {};
      down.push_back(mul);
      down.push_back(where);
      probs = skipViews(where.getResult());
    }
    if (!probs.hasOneUse() || !scoresLike(probs))
      return {};
    auto pv = dyn_cast<MatMulOp>(*probs.user_begin());
    if (!pv || pv.getLhs() != probs)
      return {};

    // Up from the softmax: views, scales, causal masks, fixed masks and
    // additive biases, in any order.
    ScoreChain chain;
    chain.ops = {pv};
    llvm::append_range(chain.ops, llvm::reverse(down));
    chain.ops.push_back(softmax);
    func::FuncOp func = softmax->getParentOfType<func::FuncOp>();
    std::optional<llvm::DenseSet<Value>> trainable;
    // What the fixed masks keep together: a query every key of which some
    // mask hides gets a uniform row from masks that replace scores (where,
    // Keras'), which the op's bias and causal flag cannot give.
    SmallVector<bool> keptByAll(static_cast<size_t>(sq * sk), true);
    Value x = softmax.getInput();
    Operation *reader = softmax;
    while (Operation *def = x.getDefiningOp()) {
      if (!x.hasOneUse())
        break;
      if (isView(def)) {
        chain.ops.push_back(def);
        reader = def;
        x = def->getOperand(0);
        continue;
      }
      if (!scoresLike(x) || isa<MatMulOp>(def))
        break;
      // A mask or a bias counts with the scales after it: chain.scale so far.
      double after = chain.scale;
      Value in;
      if (isa<MulOp, DivOp>(def)) {
        std::optional<std::pair<double, Value>> scaled = scaling(def);
        if (!scaled)
          return {};
        chain.scale *= scaled->first;
        in = scaled->second;
      } else if (isa<TanhOp>(def)) {
        // A soft cap, c tanh(x / c) (Gemma-2): the scales after the tanh
        // are c, all of them together the op's scale. Masks and biases
        // inside the tanh are not the op's.
        if (chain.softcap > 0.0 || chain.scale <= 0.0)
          return {};
        chain.softcap = chain.scale;
        in = def->getOperand(0);
      } else if (chain.softcap > 0.0) {
        return {};
      } else if (std::optional<FixedMask> mask = fixedMask(def, sq, sk);
                 mask && after > 0.0 && scoresLike(mask->scores)) {
        // A fixed mask: the causal flag (a second causal mask changes
        // nothing), an additive constant as it is, any other (a local
        // window) as a bias of 0 and kMaskBias.
        if (!(mask->fill * after <= kMaskedAtMost))
          return {};
        for (auto [all, kept] : llvm::zip(keptByAll, mask->kept))
          all = all && kept;
        if (isCausal(mask->kept, sk))
          chain.causal = true;
        else if (mask->additive)
          chain.biases.push_back({def->getOperand(mask->scores == def->getOperand(0) ? 1 : 0), {},
                                  typeOf(x), after});
        else
          chain.biases.push_back({Value(), mask->kept, typeOf(x), 1.0});
        llvm::append_range(chain.ops, llvm::ArrayRef(mask->ops).drop_back());
        def = mask->ops.back();
        in = mask->scores;
      } else if (isa<AddOp>(def)) {
        // An additive bias (a padding mask, ALiBi): the scores are the
        // operand that continues the chain.
        Value lhs = def->getOperand(0), rhs = def->getOperand(1);
        bool lhsScores = typeOf(lhs) == typeOf(x) && lhs.hasOneUse() &&
                         isa_and_nonnull<MatMulOp, MulOp, DivOp, WhereOp, AddOp, ReshapeOp,
                                         SqueezeOp, UnsqueezeOp, CastOp>(lhs.getDefiningOp());
        Value scores = lhsScores ? lhs : rhs;
        Value bias = lhsScores ? rhs : lhs;
        if (!trainable)
          trainable = trainableValues(func);
        if (typeOf(scores) != typeOf(x) || trainable->contains(bias))
          return {};
        chain.biases.push_back({bias, {}, typeOf(x), after});
        in = scores;
      } else {
        return {};
      }
      chain.ops.push_back(def);
      reader = def;
      x = in;
    }
    if (!everyQueryKeeps(keptByAll, sk))
      return {};
    auto qk = onlyFeeding<MatMulOp>(x, reader);
    if (!qk || !scoresLike(x))
      return {};
    chain.ops.push_back(qk);
    Value q = qk.getLhs(), kt = qk.getRhs(), v = pv.getRhs();
    // A scale on the queries (nn.MultiheadAttention's q / sqrt(d)) or on the
    // transposed keys (Falcon scales both by d^-1/4).
    for (Value *operand : {&q, &kt}) {
      Operation *def = operand->getDefiningOp();
      if (!def || !operand->hasOneUse() || !isa<MulOp, DivOp>(def))
        continue;
      if (std::optional<std::pair<double, Value>> scaled = scaling(def);
          scaled && scaled->first > 0.0 && typeOf(scaled->second) == typeOf(*operand)) {
        chain.scale *= scaled->first;
        chain.ops.push_back(def);
        *operand = scaled->second;
      }
    }
    if (chain.scale <= 0.0)
      return {};

    // Every operand in the frame: q, k and v [B or 1, H or 1, S, D] (a
    // broadcast one is expanded: multi-query attention), the biases
    // [B or 1, H or 1, Sq or 1, Sk].
    // One float type for q, k, v and the result (casts around the softmax
    // aside); a bias of another is cast to it.
    auto qt = typeOf(q), vt = typeOf(v);
    auto qkType = typeOf(qk.getResult()), pvType = typeOf(pv.getResult());
    Type elt = qt.getElementType();
    if (qt.getRank() < 2 || typeOf(kt).getRank() < 2 || !isa<FloatType>(elt) ||
        vt.getElementType() != elt || typeOf(kt).getElementType() != elt ||
        pvType.getElementType() != elt ||
        llvm::any_of(chain.biases, [&](const Bias &bias) {
          // A bias added in another type (a float32 mask on fp16 scores cast
          // up for the softmax) would overflow in the op's: -1e9 is -inf in
          // fp16, and a row of them NaN.
          return bias.value && typeOf(bias.value).getElementType() != elt;
        }))
      return {};
    std::optional<SmallVector<int64_t, 4>> qShape = frameShape(qt, qkType, frame),
                                           ktShape = frameShape(typeOf(kt), qkType, frame),
                                           vShape = frameShape(vt, pvType, frame);
    if (!qShape || !ktShape || !vShape)
      return {};
    int64_t d = (*qShape)[3], dv = (*vShape)[3];
    if ((*qShape)[2] != sq || (*ktShape)[2] != d || (*ktShape)[3] != sk || (*vShape)[2] != sk ||
        d > maxHeadSize || dv > maxHeadSize)
      return {};
    SmallVector<SmallVector<int64_t, 4>> biasShapes;
    for (const Bias &bias : chain.biases) {
      ShapedType t = bias.value ? ShapedType(typeOf(bias.value))
                                : RankedTensorType::get({sq, sk}, elt);
      std::optional<SmallVector<int64_t, 4>> shape = frameShape(t, bias.space, frame);
      if (!shape || ((*shape)[2] != 1 && (*shape)[2] != sq) || (*shape)[3] != sk)
        return {};
      biasShapes.push_back(*shape);
    }

    OpBuilder b(pv);
    Location loc = softmax.getLoc();
    auto reshaped = [&](Value val, ArrayRef<int64_t> shape) -> Value {
      if (typeOf(val).getShape() == shape)
        return val;
      return b.create<ReshapeOp>(val.getLoc(), val, b.getDenseI64ArrayAttr(shape));
    };
    auto expanded = [&](Value val) -> Value {
      auto t = typeOf(val);
      SmallVector<int64_t> shape{frame[0], frame[1], t.getDimSize(2), t.getDimSize(3)};
      if (t.getShape() == ArrayRef<int64_t>(shape))
        return val;
      return b.create<ExpandOp>(val.getLoc(), RankedTensorType::get(shape, t.getElementType()),
                                val, b.getDenseI64ArrayAttr(shape));
    };
    // The key's transpose is named after the op that made k^T (it folds
    // into it when that is a transpose too).
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, typeOf(kt).getRank()));
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    Location kLoc = kt.getDefiningOp() ? kt.getDefiningOp()->getLoc() : loc;
    Value k = b.create<TransposeOp>(kLoc, kt, b.getDenseI64ArrayAttr(perm));
    SmallVector<int64_t, 4> kShape{(*ktShape)[0], (*ktShape)[1], sk, d};
    Value q4 = expanded(reshaped(q, *qShape)), k4 = expanded(reshaped(k, kShape)),
          v4 = expanded(reshaped(v, *vShape)); // in this order
    Value bias4;
    for (auto [bias, shape] : llvm::zip(chain.biases, biasShapes)) {
      Value term = bias.value ? bias.value : maskConstant(b, loc, bias.kept, sq, sk, elt);
      term = reshaped(term, shape);
      if (bias.scale != 1.0) {
        auto scalarType = RankedTensorType::get({}, elt);
        Value c = b.create<ConstantOp>(
            loc, scalarType, DenseElementsAttr::get(scalarType, b.getFloatAttr(elt, bias.scale)));
        term = b.create<MulOp>(loc, term, c);
      }
      bias4 = bias4 ? b.create<AddOp>(loc, bias4, term).getResult() : term;
    }
    auto attention = b.create<AttentionOp>(
        loc, q4, k4, v4, bias4, keep ? keep.getState() : Value(), b.getF64FloatAttr(chain.scale),
        b.getBoolAttr(chain.causal), IntegerAttr(), DenseI64ArrayAttr(),
        keep ? keep.getRatioAttr() : FloatAttr(), keep ? keep.getStreamAttr() : IntegerAttr(),
        chain.softcap > 0.0 ? b.getF64FloatAttr(chain.softcap) : FloatAttr());
    Value result = reshaped(attention.getResult(), pvType.getShape());
    pv.getResult().replaceAllUsesWith(result);
    SmallVector<Operation *> constants; // the scales, the masks and their fills
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
