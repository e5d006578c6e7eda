//===- ChunkLoss.cpp - the output projection and the loss, by chunks of rows ===//
//
// See tcc-chunk-loss in Passes.td. The match is all or nothing: every reader
// of the loss gradient must be a GEMM the chunks can compute piecewise, or
// the loss is left whole.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/PlanMemory.h"
#include "passes/fusion/FusionCostModel.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_CHUNKLOSS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isSwap2D(Operation *op) {
  auto t = dyn_cast_or_null<TransposeOp>(op);
  return t && typeOf(t.getInput()).getRank() == 2 && FusionCostModel::isSwapOfLastTwo(t);
}

/// A reader of the loss gradient `d` ([N, V]) that the chunks compute
/// piecewise from their rows of `d` and of `other`.
struct Sink {
  /// Rows: d x other ([V, E]), one row per row of d (any view of d whose
  /// last dimension is V). Terms: a sum over the rows, [E, V] = Y^T d or
  /// [V, E] = d^T Y with Y = other ([N, E] as bytes). Sum: d summed over
  /// its rows (the output projection's bias gradient, [V] as bytes).
  enum Kind { Rows, Terms, Sum } kind;
  Value other;
  /// Terms: whether the chunks' terms are [V, E] (d^T Y) rather than [E, V].
  bool classesFirst = false;
  /// The value the chunks' result replaces.
  Value replaced;
  /// Rows: `other` is the value whose transpose the GEMM read (made after
  /// the loss, as the backward pass makes an untied head's W^T); the chunks
  /// make it.
  bool swapOther = false;
};

/// What a chunked loss is made of.
struct Match {
  SoftmaxCrossEntropyLossWithGradOp loss;
  MatMulOp logits;
  /// The output projection's bias ([V], or [1, .., 1, V]) added to the
  /// product, if any, and whether it is the add's first operand.
  Value bias;
  bool biasFirst = false;
  int64_t rows, inner, classes; // N, D, V
  SmallVector<Sink> sinks;
  llvm::SetVector<Operation *> replacedOps;
};

class ChunkLossPass : public tcc::impl::ChunkLossBase<ChunkLossPass> {
public:
  using ChunkLossBase::ChunkLossBase;

  void runOnOperation() override {
    SmallVector<SoftmaxCrossEntropyLossWithGradOp> losses;
    getOperation().walk([&](SoftmaxCrossEntropyLossWithGradOp l) { losses.push_back(l); });
    for (SoftmaxCrossEntropyLossWithGradOp l : losses)
      if (std::optional<Match> m = match(l))
        if (int64_t rows = chunkRowsFor(*m); rows > 0)
          rewrite(*m, rows);
  }

private:
  /// Rows per chunk for `m`, or 0 to leave it whole.
  int64_t chunkRowsFor(const Match &m) const {
    int64_t rows = chunkRows;
    if (rows <= 0) {
      if (maxChunkElements <= 0 || m.rows * m.classes <= maxChunkElements)
        return 0;
      int64_t chunks = (m.rows * m.classes + maxChunkElements - 1) / maxChunkElements;
      rows = (m.rows + chunks - 1) / chunks;
      rows = (rows + 7) / 8 * 8;
    }
    return rows < m.rows ? rows : 0;
  }

  /// Whether `v` is available where `before` is (defined earlier in its
  /// block, or an argument).
  static bool availableAt(Value v, Operation *before) {
    Operation *def = v.getDefiningOp();
    return !def || (def->getBlock() == before->getBlock() && def->isBeforeInBlock(before));
  }

  static std::optional<Match> match(SoftmaxCrossEntropyLossWithGradOp loss) {
    Match m;
    m.loss = loss;
    if (loss.getWeights() || (loss.getReduction() != "mean" && loss.getReduction() != "sum"))
      return std::nullopt;
    auto scores = typeOf(loss.getScores());
    if (scores.getRank() != 2)
      return std::nullopt;
    m.rows = scores.getDimSize(0);
    m.classes = scores.getDimSize(1);
    // The scores: a GEMM (through views) that nothing else reads.
    Value s = loss.getScores();
    while (auto r = s.getDefiningOp<ReshapeOp>()) {
      if (!s.hasOneUse())
        return std::nullopt;
      m.replacedOps.insert(r);
      s = r.getInput();
    }
    // A bias added to the product, one value per class (nn.Linear's).
    if (auto add = s.getDefiningOp<AddOp>()) {
      m.biasFirst = !add.getLhs().getDefiningOp<MatMulOp>();
      Value product = m.biasFirst ? add.getRhs() : add.getLhs();
      m.bias = m.biasFirst ? add.getLhs() : add.getRhs();
      auto bt = typeOf(m.bias);
      if (!s.hasOneUse() || bt.getRank() == 0 || bt.getShape().back() != m.classes ||
          bt.getNumElements() != m.classes || typeOf(product) != typeOf(s) ||
          !availableAt(m.bias, loss))
        return std::nullopt;
      m.replacedOps.insert(add);
      s = product;
    }
    m.logits = s.getDefiningOp<MatMulOp>();
    if (!m.logits || !s.hasOneUse() || m.logits->getBlock() != loss->getBlock())
      return std::nullopt;
    auto x = typeOf(m.logits.getLhs()), w = typeOf(m.logits.getRhs());
    if (w.getRank() != 2 || x.getRank() < 2 || w.getDimSize(1) != m.classes ||
        x.getNumElements() != m.rows * w.getDimSize(0))
      return std::nullopt;
    m.inner = w.getDimSize(0);
    m.replacedOps.insert(m.logits);
    if (!availableAt(loss.getGrad(), loss))
      return std::nullopt;
    if (failed(collectSinks(loss.getDscores(), m)))
      return std::nullopt;
    return m;
  }

  /// Classifies every reader of `d` (the gradient, or a view of it) as a sink.
  static LogicalResult collectSinks(Value d, Match &m) {
    Operation *at = m.loss;
    // [N, cols]: a view of the gradient read whole, or a Y.
    auto rowsOf = [&](Value v, int64_t cols) {
      return typeOf(v).getRank() == 2 && typeOf(v).getDimSize(0) == m.rows &&
             typeOf(v).getDimSize(1) == cols;
    };
    auto isY = [&](Value y) {
      return rowsOf(y, typeOf(y).getDimSize(1)) && availableAt(viewRoot(y), at);
    };
    // A [E, V] or [V, E] sum of terms is replaced by the chunks' sum, or its
    // transpose when that is its only reader.
    auto terms = [&](Operation *mm, Value y, bool classesFirst) {
      Sink sink{Sink::Terms, y, classesFirst, mm->getResult(0)};
      m.replacedOps.insert(mm);
      Value r = mm->getResult(0);
      if (r.hasOneUse() && isSwap2D(*r.getUsers().begin())) {
        Operation *t = *r.getUsers().begin();
        sink.classesFirst = !classesFirst;
        sink.replaced = t->getResult(0);
        m.replacedOps.insert(t);
      }
      m.sinks.push_back(sink);
    };
    for (OpOperand &use : d.getUses()) {
      Operation *user = use.getOwner();
      auto shape = typeOf(d).getShape();
      if (auto r = dyn_cast<ReshapeOp>(user)) {
        m.replacedOps.insert(r);
        if (failed(collectSinks(r.getResult(), m)))
          return failure();
        continue;
      }
      if (auto mm = dyn_cast<MatMulOp>(user)) {
        auto other = typeOf(use.getOperandNumber() == 0 ? mm.getRhs() : mm.getLhs());
        if (use.getOperandNumber() == 0 && shape.back() == m.classes && shape.size() >= 2 &&
            other.getRank() == 2 && other.getDimSize(0) == m.classes &&
            mm.getLhs() != mm.getRhs()) {
          Sink sink{Sink::Rows, mm.getRhs(), false, mm.getResult()};
          Operation *def = mm.getRhs().getDefiningOp();
          if (!availableAt(mm.getRhs(), at) && isSwap2D(def) &&
              availableAt(def->getOperand(0), at)) {
            sink.other = def->getOperand(0);
            sink.swapOther = true;
            if (mm.getRhs().hasOneUse())
              m.replacedOps.insert(def);
          }
          if (availableAt(sink.other, at)) {
            m.sinks.push_back(sink);
            m.replacedOps.insert(mm);
            continue;
          }
        }
        // [E, N] x d, the [E, N] a transpose of Y.
        if (use.getOperandNumber() == 1 && rowsOf(d, m.classes) && isSwap2D(mm.getLhs().getDefiningOp())) {
          Value y = mm.getLhs().getDefiningOp<TransposeOp>().getInput();
          if (isY(y)) {
            if (mm.getLhs().hasOneUse())
              m.replacedOps.insert(mm.getLhs().getDefiningOp());
            terms(mm, y, /*classesFirst=*/false);
            continue;
          }
        }
        return failure();
      }
      // The bias gradient: d summed over every dimension but the classes'.
      if (auto sum = dyn_cast<ReduceSumOp>(user); sum && m.bias && sumsAllButLast(sum) &&
                                                 shape.back() == m.classes) {
        // Its [V] view (keepdims leaves [1, .., 1, V]) is what the chunks make.
        Sink sink{Sink::Sum, Value(), false, sum.getResult()};
        Value r = sum.getResult();
        if (r.hasOneUse())
          if (auto view = dyn_cast<ReshapeOp>(*r.getUsers().begin());
              view && typeOf(view.getResult()).getRank() == 1) {
            sink.replaced = view.getResult();
            m.replacedOps.insert(view);
          }
        m.sinks.push_back(sink);
        m.replacedOps.insert(sum);
        continue;
      }
      // d^T, read as the first operand of [V, N] x Y.
      if (isSwap2D(user) && rowsOf(d, m.classes)) {
        m.replacedOps.insert(user);
        for (OpOperand &tu : user->getResult(0).getUses()) {
          auto mm = dyn_cast<MatMulOp>(tu.getOwner());
          if (!mm || tu.getOperandNumber() != 0 || mm.getLhs() == mm.getRhs() ||
              !isY(mm.getRhs()))
            return failure();
          terms(mm, mm.getRhs(), /*classesFirst=*/true);
        }
        continue;
      }
      return failure();
    }
    return success();
  }

  /// Whether `sum` reduces every dimension of its input but the last.
  static bool sumsAllButLast(ReduceSumOp sum) {
    int64_t rank = typeOf(sum.getInput()).getRank();
    std::optional<ArrayRef<int64_t>> axes = sum.getAxes();
    if (!axes || rank < 2)
      return false;
    llvm::SmallDenseSet<int64_t> reduced;
    for (int64_t a : *axes) {
      std::optional<int64_t> n = normalizeAxis(a, rank);
      if (!n || *n == rank - 1)
        return false;
      reduced.insert(*n);
    }
    return static_cast<int64_t>(reduced.size()) == rank - 1;
  }

  static void rewrite(Match &m, int64_t chunkRows) {
    SoftmaxCrossEntropyLossWithGradOp loss = m.loss;
    OpBuilder b(loss);
    Location loc = loss.getLoc(), mmLoc = m.logits.getLoc();
    llvm::DenseMap<Value, Value> reshaped; // root -> its [rows, cols] view
    auto reshape = [&](Value v, ArrayRef<int64_t> shape) -> Value {
      v = viewRoot(v);
      if (typeOf(v).getShape() == shape)
        return v;
      Value &view = reshaped[v];
      if (!view || typeOf(view).getShape() != shape)
        view = b.create<ReshapeOp>(v.getLoc(), v, shape);
      return view;
    };
    Value x = reshape(m.logits.getLhs(), {m.rows, m.inner});
    Value w = m.logits.getRhs(), labels = loss.getLabels(), seed = loss.getGrad();
    Type fp = typeOf(seed).getElementType();
    // "mean" divides by the labels that count, over all rows.
    Value count, chunkSeed = seed;
    if (loss.getReduction() == "mean") {
      auto scalar = RankedTensorType::get({}, fp);
      if (std::optional<int64_t> ignore = loss.getIgnoreIndex()) {
        Type lt = typeOf(labels).getElementType();
        Value ignored = b.create<ConstantOp>(
            loc, DenseElementsAttr::get(RankedTensorType::get({}, lt),
                                        ArrayRef<Attribute>{b.getIntegerAttr(lt, *ignore)}));
        Value counted = b.create<NotOp>(loc, b.create<EqualOp>(loc, labels, ignored));
        count = b.create<ReduceSumOp>(loc, b.create<CastOp>(loc, counted, TypeAttr::get(fp)),
                                      b.getDenseI64ArrayAttr({0}), 0, 0);
      } else {
        count = b.create<ConstantOp>(
            loc, DenseElementsAttr::get(scalar, ArrayRef<Attribute>{b.getFloatAttr(fp, m.rows)}));
      }
      chunkSeed = b.create<DivOp>(loc, seed, count);
    }
    Value bias = m.bias;
    if (bias && typeOf(bias).getRank() != 1)
      bias = b.create<ReshapeOp>(bias.getLoc(), bias, b.getDenseI64ArrayAttr({m.classes}));
    SmallVector<Value> others;
    for (Sink &s : m.sinks) {
      if (s.kind == Sink::Sum)
        others.push_back(Value());
      else if (s.kind == Sink::Terms)
        others.push_back(reshape(s.other, {m.rows, typeOf(s.other).getDimSize(1)}));
      else if (s.swapOther)
        others.push_back(b.create<TransposeOp>(s.replaced.getLoc(), s.other,
                                               b.getDenseI64ArrayAttr({1, 0})));
      else
        others.push_back(s.other);
    }

    SmallVector<SmallVector<Value>> pieces(m.sinks.size());
    SmallVector<Value> sums(m.sinks.size());
    Value total;
    auto accumulate = [&](Value &sum, Value term, Location at) {
      sum = sum ? b.create<AddOp>(at, sum, term).getResult() : term;
    };
    for (int64_t r0 = 0; r0 < m.rows; r0 += chunkRows) {
      int64_t r1 = std::min(m.rows, r0 + chunkRows);
      auto rowsOf = [&](Value v, Location at) -> Value {
        return b.create<SliceOp>(at, v, ArrayRef<int64_t>{r0}, ArrayRef<int64_t>{r1},
                                 b.getDenseI64ArrayAttr({0}), DenseI64ArrayAttr());
      };
      Value scores = b.create<MatMulOp>(mmLoc, rowsOf(x, mmLoc), w);
      if (bias)
        scores = m.biasFirst ? b.create<AddOp>(mmLoc, bias, scores) : b.create<AddOp>(mmLoc, scores, bias);
      auto chunk = b.create<SoftmaxCrossEntropyLossWithGradOp>(
          loc, scores, rowsOf(labels, loc), chunkSeed, Value(), b.getStringAttr("sum"),
          loss.getIgnoreIndexAttr());
      Value d = chunk.getDscores();
      for (auto [k, s] : llvm::enumerate(m.sinks)) {
        Location at = s.replaced.getLoc();
        if (s.kind == Sink::Rows) {
          pieces[k].push_back(b.create<MatMulOp>(at, d, others[k]));
          continue;
        }
        if (s.kind == Sink::Sum) {
          accumulate(sums[k], b.create<ReduceSumOp>(at, d, b.getDenseI64ArrayAttr({0}), 0, 0), at);
          continue;
        }
        Value y = rowsOf(others[k], at);
        auto swap = [&](Value v) {
          return b.create<TransposeOp>(at, v, b.getDenseI64ArrayAttr({1, 0}));
        };
        Value term = s.classesFirst ? b.create<MatMulOp>(at, swap(d), y)
                                    : b.create<MatMulOp>(at, swap(y), d);
        accumulate(sums[k], term, at);
      }
      accumulate(total, chunk.getOutput(), loc);
    }

    for (auto [k, s] : llvm::enumerate(m.sinks)) {
      Value result = sums[k];
      if (s.kind == Sink::Rows)
        result = b.create<ConcatOp>(s.replaced.getLoc(), pieces[k], 0);
      if (typeOf(result) != typeOf(s.replaced))
        result = b.create<ReshapeOp>(s.replaced.getLoc(), result, typeOf(s.replaced).getShape());
      s.replaced.replaceAllUsesWith(result);
    }
    if (count)
      total = b.create<DivOp>(loc, total, count);
    loss.getOutput().replaceAllUsesWith(total);

    // The whole-batch ops are dead now: erase them, readers first.
    m.replacedOps.insert(loss);
    bool erased = true;
    while (erased) {
      erased = false;
      for (Operation *op : m.replacedOps)
        if (op && op->use_empty()) {
          m.replacedOps.remove(op);
          // The views only it read go with it.
          for (Value in : op->getOperands())
            if (auto view = in.getDefiningOp<ReshapeOp>())
              m.replacedOps.insert(view);
          op->erase();
          erased = true;
          break;
        }
    }
  }
};

} // namespace
