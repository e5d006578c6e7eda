//===- LowerTransformerOps.cpp - opset 23's transformer ops as core ops ---===//
//
// ONNX opset 23 gives transformers three ops of their own. tcc writes each as
// the core ops an exporter would have decomposed it into, so autodiff, fusion
// (tcc-fuse-attention recognises the attention again) and codegen need no
// new knowledge:
//
//   rms_normalization  x / sqrt(reduce_mean(x * x) + eps) * scale
//   rotary_embedding   slices of each head, x1 cos - x2 sin and x1 sin + x2 cos,
//                      concatenated (or interleaved) back
//   onnx_attention     heads split (3-D inputs), key and value heads repeated
//                      (grouped-query attention), softmax(scale Q K^T + bias) V
//                      (with softcap: cap tanh(scale Q K^T / cap) + bias),
//                      where the bias is the mask (a boolean one as 0 / -inf)
//                      plus the causal triangle
//
// The semantics are those of ONNX's reference implementation
// (onnx/reference/ops/op_attention.py and friends); the opset-23 node tests
// check them on the CPU target and through the CUDA emulation.
//
//===----------------------------------------------------------------------===//

#include "passes/legalize/Patterns.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Matchers.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// Builders for the core ops, with result types computed here (the operands
/// are verified, so inference cannot fail).
struct Build {
  PatternRewriter &rw;
  Location loc;
  Type elt;

  RankedTensorType type(Value v) const { return cast<RankedTensorType>(v.getType()); }
  Value scalar(double v) {
    auto t = RankedTensorType::get({}, elt);
    return rw.create<ConstantOp>(loc, t, DenseElementsAttr::get(t, rw.getFloatAttr(elt, v)));
  }
  Value mul(Value a, Value b) { return rw.create<MulOp>(loc, a, b); }
  Value add(Value a, Value b) { return rw.create<AddOp>(loc, a, b); }
  Value sub(Value a, Value b) { return rw.create<SubOp>(loc, a, b); }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return rw.create<ReshapeOp>(loc, RankedTensorType::get(shape, type(x).getElementType()), x,
                                rw.getDenseI64ArrayAttr(shape), rw.getI64IntegerAttr(0));
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    return rw.create<TransposeOp>(loc, x, rw.getDenseI64ArrayAttr(perm));
  }
  /// x[..., start:end:step] along `axis`.
  Value slice(Value x, int64_t axis, int64_t start, int64_t end, int64_t step = 1) {
    return rw.create<SliceOp>(loc, x, rw.getDenseI64ArrayAttr({start}),
                              rw.getDenseI64ArrayAttr({end}), rw.getDenseI64ArrayAttr({axis}),
                              rw.getDenseI64ArrayAttr({step}));
  }
  Value concat(ValueRange parts, int64_t axis) {
    return rw.create<ConcatOp>(loc, parts, rw.getI64IntegerAttr(axis));
  }
  Value unsqueeze(Value x, int64_t axis) {
    return rw.create<UnsqueezeOp>(loc, x, rw.getDenseI64ArrayAttr({axis}));
  }
};

struct LowerRMSNorm : OpRewritePattern<RMSNormalizationOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RMSNormalizationOp op, PatternRewriter &rw) const override {
    Build b{rw, op.getLoc(), op.getType().getElementType()};
    Value x = op.getInput();
    RankedTensorType t = b.type(x);
    int64_t axis = *normalizeAxis(op.getAxis(), t.getRank());
    SmallVector<int64_t> axes, reduced(t.getShape());
    for (int64_t a = axis; a < t.getRank(); ++a) {
      axes.push_back(a);
      reduced[a] = 1;
    }
    Value squares = b.mul(x, x);
    Value mean = rw.create<ReduceMeanOp>(
        op.getLoc(), RankedTensorType::get(reduced, b.elt), squares,
        rw.getDenseI64ArrayAttr(axes), rw.getI64IntegerAttr(1), rw.getI64IntegerAttr(0));
    Value rms = rw.create<SqrtOp>(
        op.getLoc(), b.add(mean, b.scalar(op.getEpsilon().convertToDouble())));
    Value y = b.mul(rw.create<DivOp>(op.getLoc(), x, rms), op.getScale());
    rw.replaceOp(op, y);
    return success();
  }
};

struct LowerRotary : OpRewritePattern<RotaryEmbeddingOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RotaryEmbeddingOp op, PatternRewriter &rw) const override {
    Build b{rw, op.getLoc(), op.getType().getElementType()};
    Value pos = op.getPositionIds();
    RotarySizes r = *rotarySizes(std::nullopt, op.getInput().getType(),
                                 op.getCosCache().getType(), pos ? pos.getType() : Type(),
                                 op.getNumHeads(), op.getRotaryEmbeddingDim());
    bool threeD = b.type(op.getInput()).getRank() == 3;
    // Work on [B, S, H, D] for 3-D input and [B, H, S, D] for 4-D; the
    // caches become [B, S, 1, R/2] or [B, 1, S, R/2] to match.
    Value x = threeD ? b.reshape(op.getInput(), {r.batch, r.seq, r.heads, r.head})
                     : op.getInput();
    auto table = [&](Value cache) {
      if (pos)
        cache = rw.create<GatherOp>(op.getLoc(), cache, pos, rw.getI64IntegerAttr(0));
      return b.unsqueeze(cache, threeD ? 2 : 1);
    };
    Value cos = table(op.getCosCache()), sin = table(op.getSinCache());
    int64_t last = 3, half = r.rotary / 2;
    Value rot = r.rotary < r.head ? b.slice(x, last, 0, r.rotary) : x;
    Value x1, x2;
    if (op.getInterleaved()) {
      x1 = b.slice(rot, last, 0, r.rotary, 2);
      x2 = b.slice(rot, last, 1, r.rotary, 2);
    } else {
      x1 = b.slice(rot, last, 0, half);
      x2 = b.slice(rot, last, half, r.rotary);
    }
    Value real = b.sub(b.mul(x1, cos), b.mul(x2, sin));
    Value imag = b.add(b.mul(x1, sin), b.mul(x2, cos));
    Value y;
    if (op.getInterleaved()) {
      SmallVector<int64_t> shape(b.type(real).getShape());
      shape.back() = r.rotary;
      y = b.reshape(b.concat({b.unsqueeze(real, 4), b.unsqueeze(imag, 4)}, 4), shape);
    } else {
      y = b.concat({real, imag}, last);
    }
    if (r.rotary < r.head)
      y = b.concat({y, b.slice(x, last, r.rotary, r.head)}, last);
    if (threeD)
      y = b.reshape(y, {r.batch, r.seq, r.heads * r.head});
    rw.replaceOp(op, y);
    return success();
  }
};

struct LowerAttention : OpRewritePattern<OnnxAttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(OnnxAttentionOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Build b{rw, loc, op.getType().getElementType()};
    AttentionSizes s = *onnxAttentionSizes(std::nullopt, op.getQuery().getType(),
                                           op.getKey().getType(), op.getValue().getType(),
                                           op.getQNumHeads(), op.getKvNumHeads());
    bool threeD = b.type(op.getQuery()).getRank() == 3;
    auto heads = [&](Value v, int64_t seq, int64_t h, int64_t d) {
      return threeD ? b.transpose(b.reshape(v, {s.batch, seq, h, d}), {0, 2, 1, 3}) : v;
    };
    Value q = heads(op.getQuery(), s.qSeq, s.qHeads, s.head);
    Value k = heads(op.getKey(), s.kvSeq, s.kvHeads, s.head);
    Value v = heads(op.getValue(), s.kvSeq, s.kvHeads, s.vHead);
    // Grouped-query attention: each key/value head serves `group` query heads
    // in a row (np.repeat along the head axis, as HF's repeat_kv).
    if (int64_t group = s.qHeads / s.kvHeads; group > 1) {
      auto repeat = [&](Value t, int64_t d) {
        Value u = b.unsqueeze(t, 2);
        Value e = rw.create<ExpandOp>(
            loc, RankedTensorType::get({s.batch, s.kvHeads, group, s.kvSeq, d}, b.elt), u,
            rw.getDenseI64ArrayAttr({s.batch, s.kvHeads, group, s.kvSeq, d}));
        return b.reshape(e, {s.batch, s.qHeads, s.kvSeq, d});
      };
      k = repeat(k, s.head);
      v = repeat(v, s.vHead);
    }
    double scale = op.getScale() ? op.getScale()->convertToDouble()
                                 : 1.0 / std::sqrt((double)s.head);
    Value scores = rw.create<MatMulOp>(loc, q, b.transpose(k, {0, 1, 3, 2}));
    scores = b.mul(scores, b.scalar(scale));
    if (double cap = op.getSoftcap().convertToDouble(); cap > 0.0) // cap tanh(s / cap)
      scores = b.mul(rw.create<TanhOp>(loc, b.mul(scores, b.scalar(1.0 / cap))),
                     b.scalar(cap));
    // One additive bias: the mask (a boolean one as 0 / -inf) plus the causal
    // triangle, folded to a constant where the mask is one.
    const double inf = std::numeric_limits<double>::infinity();
    Value bias;
    if (Value mask = op.getAttnMask()) {
      if (b.type(mask).getElementType().isInteger(1))
        mask = rw.createOrFold<WhereOp>(loc, mask, b.scalar(0.0), b.scalar(-inf));
      bias = mask;
    }
    if (op.getIsCausal()) {
      // Key j is seen by query i when j <= i (no past keys: the top left).
      SmallVector<Attribute> tri;
      for (int64_t i = 0; i < s.qSeq; ++i)
        for (int64_t j = 0; j < s.kvSeq; ++j)
          tri.push_back(rw.getFloatAttr(b.elt, j <= i ? 0.0 : -inf));
      auto t = RankedTensorType::get({s.qSeq, s.kvSeq}, b.elt);
      Value causal = rw.create<ConstantOp>(loc, t, DenseElementsAttr::get(t, tri));
      bias = bias ? rw.createOrFold<AddOp>(loc, bias, causal) : causal;
    }
    if (bias)
      scores = b.add(scores, bias);
    Value p = rw.create<SoftmaxOp>(loc, scores, rw.getI64IntegerAttr(-1));
    // A row whose every key is masked is 0 in ONNX, NaN from a softmax; a
    // constant bias with something finite in every row cannot do that.
    DenseElementsAttr constBias;
    if (bias && !(matchPattern(bias, m_Constant(&constBias)) && everyRowHasFinite(constBias))) {
      Value nan = rw.create<IsNaNOp>(loc, p);
      p = rw.create<WhereOp>(loc, nan, b.scalar(0.0), p);
    }
    Value y = rw.create<MatMulOp>(loc, p, v);
    if (threeD)
      y = b.reshape(b.transpose(y, {0, 2, 1, 3}), {s.batch, s.qSeq, s.qHeads * s.vHead});
    if (y.getType() != op.getType())
      return rw.notifyMatchFailure(op, "the decomposition changes the type");
    rw.replaceOp(op, y);
    return success();
  }
};

} // namespace

void mlir::tcc::populateTransformerOpLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerRMSNorm, LowerRotary, LowerAttention>(patterns.getContext());
}
