//===- LowerToKernels.cpp - the planned step as tcck kernels ---------------===//
//
// tcc-lower-to-kernels (Passes.td): DialectConversion from the planned tcc
// step to tcck, one pattern set per op family. The patterns share a
// `KernelPlan`, worked out from the planned function before it is
// converted: each op's entry in the op table (label, live bytes) and the
// gradients to add into their accumulators right after it.
//
//===----------------------------------------------------------------------===//

#include "passes/LowerToKernels.h"
#include "passes/Passes.h"
#include "passes/PlanMemory.h"
#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/LoopStructure.h"
#include "passes/tiers/TierCostModel.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckOps.h"
#include "runtime/tcc_random.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_LOWERTOKERNELS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

std::string mlir::tcc::opTableLabel(Operation *op, StringRef launched) {
  std::string label = op->getName().getStringRef().str();
  SmallVector<std::string> nodes;
  auto addNode = [&](Location loc) {
    std::string n = nodeNameOf(loc);
    if (!n.empty() && !llvm::is_contained(nodes, n))
      nodes.push_back(n);
  };
  if (auto fusion = dyn_cast<FusionOp>(op)) {
    label += " (";
    llvm::raw_string_ostream ls(label);
    llvm::interleave(
        fusion.getBody().front().without_terminator(), ls,
        [&](Operation &o) {
          ls << o.getName().getStringRef();
          addNode(o.getLoc());
        },
        " ");
    ls << ")";
  }
  addNode(op->getLoc());
  if (!launched.empty())
    label = launched.str() + ": " + label;
  // A fusion of many nodes names the first few.
  constexpr size_t kNamed = 8;
  for (size_t i = 0; i < nodes.size() && i < kNamed; ++i)
    label += (i ? ", " : " ") + nodes[i];
  if (nodes.size() > kNamed)
    label += " (+" + std::to_string(nodes.size() - kNamed) + " more)";
  return label;
}

namespace {

/// What the patterns need to know about the planned function beyond the op
/// they rewrite.
struct KernelPlan {
  /// CPU: the storage type of every float (f32 or f64). CUDA (`cuda`):
  /// fp16, except the values keepsF32 names and the fp32 masters of
  /// arguments without a working copy.
  Type floatStorage;
  bool cuda = false;
  /// The planned function's arguments (the conversion appends their buffers).
  unsigned numArgs = 0;
  struct Mark {
    std::string label;
    int64_t live;
  };
  llvm::DenseMap<Operation *, Mark> marks;
  /// Result indices of the gradients added right after an op.
  llvm::DenseMap<Operation *, SmallVector<unsigned>> accumulateAfter;
  func::FuncOp func;
  SmallVector<int64_t> resultSlots;
  // CUDA only:
  /// The gradients their op adds straight into their fp32 accumulators
  /// (accumulatedInPlace): the accumulators' arena offsets.
  llvm::DenseMap<Value, int64_t> directAccumulators;
  /// Results whose accumulators are in host memory (#tcc.tiers host_grads):
  /// their offsets in the host buffer, and the number of each one's copy.
  llvm::DenseMap<unsigned, int64_t> hostGradSlots, hostCopies;
  /// The copies to the host the step's stream waits for right after an op.
  llvm::DenseMap<Operation *, SmallVector<int64_t>> waitsAfter;
  /// Result indices of the accumulators finished after an op, or at the end
  /// (tcck.grad_ready).
  llvm::DenseMap<Operation *, SmallVector<unsigned>> readyAfter;
  SmallVector<unsigned> readyAtEnd;
  /// The op results keepsF32 names, found before the conversion (it looks
  /// through the ops that made a value's operands).
  llvm::DenseSet<Value> keptF32;
  bool failed = false;
};

/// The storage type of value `v`'s elements: on the CPU, floats in the
/// target's storage type; on CUDA, as the mixed-precision plan stores them
/// (keepsF32); the rest as they are.
Type storageOf(const KernelPlan &plan, Value v) {
  Type elt = cast<RankedTensorType>(v.getType()).getElementType();
  if (!isa<FloatType>(elt))
    return elt;
  if (!plan.cuda)
    return plan.floatStorage;
  Builder b(v.getContext());
  return plan.keptF32.contains(v) ? Type(b.getF32Type()) : Type(b.getF16Type());
}

MemRefType bufferType(const KernelPlan &plan, Value v) {
  return MemRefType::get(cast<RankedTensorType>(v.getType()).getShape(), storageOf(plan, v));
}

/// The waits for copies to the host that the plan places right after `op`.
void waitForHostCopies(ConversionPatternRewriter &rewriter, const KernelPlan &plan,
                       Operation *op) {
  for (int64_t k : plan.waitsAfter.lookup(op))
    rewriter.create<tcck::WaitHostCopyOp>(op->getLoc(), rewriter.getI64IntegerAttr(k));
}

/// Adds the gradient `value`, result `i` of the step, into its accumulator:
/// in the arena, or (CUDA, host tiers) in host memory.
void accumulateResult(ConversionPatternRewriter &rewriter, const KernelPlan &plan, Location loc,
                      Value value, unsigned i) {
  if (auto host = plan.hostGradSlots.find(i); host != plan.hostGradSlots.end()) {
    rewriter.create<tcck::HostAccumulateOp>(loc, value, rewriter.getI64IntegerAttr(host->second),
                                            rewriter.getI64IntegerAttr(plan.hostCopies.lookup(i)));
    return;
  }
  rewriter.create<tcck::AccumulateOp>(loc, value, rewriter.getI64IntegerAttr(plan.resultSlots[i]));
}

/// Hands the accumulator of step result `i` to the gradient all-reduce.
void gradReady(ConversionPatternRewriter &rewriter, const KernelPlan &plan, Location loc,
               unsigned i) {
  func::FuncOp func = plan.func;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  int64_t n = cast<RankedTensorType>(ret.getOperand(i).getType()).getNumElements();
  rewriter.create<tcck::GradReadyOp>(loc, rewriter.getI64IntegerAttr(plan.resultSlots[i]),
                                     rewriter.getI64IntegerAttr(n));
}

/// A pattern of this lowering: it knows the plan. The patterns have no type
/// converter: each value's buffer type is its storage type (storageOf),
/// which on CUDA depends on the value, not only on its type; an operand is
/// the buffer its op was replaced by.
template <typename Op>
struct KernelPattern : OpConversionPattern<Op> {
  KernelPattern(MLIRContext *ctx, KernelPlan &plan) : OpConversionPattern<Op>(ctx), plan(plan) {}
  KernelPlan &plan;

  /// A view of result `k` of `op` at its planned offset.
  Value resultView(ConversionPatternRewriter &rewriter, Operation *op, unsigned k) const {
    auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("tcc.offsets");
    int64_t at = offsets && k < offsets.size() ? offsets[k] : -1;
    if (at < 0) {
      op->emitOpError("has a result without a slot in the memory plan");
      plan.failed = true;
      at = 0;
    }
    return rewriter.create<tcck::ViewOp>(op->getLoc(), bufferType(plan, op->getResult(k)),
                                         rewriter.getI64IntegerAttr(at));
  }

  /// CUDA: the fp32 accumulator that result `k` of `op` is added into by
  /// the op itself (accumulatedInPlace), as a view; else null.
  Value directAccumulator(ConversionPatternRewriter &rewriter, Operation *op, unsigned k) const {
    auto it = plan.directAccumulators.find(op->getResult(k));
    if (it == plan.directAccumulators.end())
      return Value();
    auto t = cast<RankedTensorType>(op->getResult(k).getType());
    return rewriter.create<tcck::ViewOp>(op->getLoc(),
                                         MemRefType::get(t.getShape(), rewriter.getF32Type()),
                                         rewriter.getI64IntegerAttr(it->second));
  }

  /// After the kernels of `op`, whose results are now `views`: the
  /// gradients added into their accumulators right after it, and its entry
  /// in the op table.
  void finish(ConversionPatternRewriter &rewriter, Operation *op, ValueRange views) const {
    auto ret = cast<func::ReturnOp>(plan.func.getBody().front().getTerminator());
    waitForHostCopies(rewriter, plan, op);
    for (unsigned i : plan.accumulateAfter.lookup(op)) {
      Value root = viewRoot(ret.getOperand(i));
      auto r = dyn_cast<OpResult>(root);
      if (!r || r.getOwner() != op || r.getResultNumber() >= views.size()) {
        op->emitOpError("makes a gradient whose bytes it does not hold");
        plan.failed = true;
        continue;
      }
      accumulateResult(rewriter, plan, op->getLoc(), views[r.getResultNumber()], i);
    }
    for (unsigned i : plan.readyAfter.lookup(op))
      gradReady(rewriter, plan, op->getLoc(), i);
    auto mark = plan.marks.find(op);
    if (mark == plan.marks.end())
      return;
    // The buffers the op read (its operands, as they were lowered) and
    // wrote: what tcc-run --check-numerics looks at.
    SmallVector<Value> ins;
    for (Value v : op->getOperands())
      if (Value b = rewriter.getRemappedValue(v); b && isa<MemRefType>(b.getType()))
        ins.push_back(b);
    SmallVector<Value> outs(llvm::make_filter_range(
        views, [](Value v) { return isa<MemRefType>(v.getType()); }));
    rewriter.create<tcck::MarkOp>(op->getLoc(), mark->second.label, mark->second.live, ins, outs);
  }

  /// Replaces `op` by `views` after finishing it.
  void done(ConversionPatternRewriter &rewriter, Operation *op, ValueRange views) const {
    finish(rewriter, op, views);
    rewriter.replaceOp(op, views);
  }

  /// Views of all of `op`'s results, in order.
  SmallVector<Value> resultViews(ConversionPatternRewriter &rewriter, Operation *op) const {
    SmallVector<Value> views;
    for (unsigned k = 0; k < op->getNumResults(); ++k)
      views.push_back(resultView(rewriter, op, k));
    return views;
  }
};

//===----------------------------------------------------------------------===//
// Constants and views
//===----------------------------------------------------------------------===//

/// A constant: read-only data (tcck.global) or, for a large uniform one, a
/// view filled at each step.
template <typename Op>
struct ConstantLowering : KernelPattern<Op> {
  using KernelPattern<Op>::KernelPattern;
  LogicalResult matchAndRewrite(Op op, typename Op::Adaptor, ConversionPatternRewriter &rewriter)
      const override {
    DenseElementsAttr value;
    if constexpr (std::is_same_v<Op, ShapeOp>) {
      OpFoldResult folded = op.fold(typename ShapeOp::FoldAdaptor({}, op));
      value = dyn_cast_or_null<DenseElementsAttr>(dyn_cast_if_present<Attribute>(folded));
    } else if constexpr (std::is_same_v<Op, ConstantOfShapeOp>) {
      if (auto dense = dyn_cast<DenseElementsAttr>(op.getValue()))
        value = DenseElementsAttr::get(op.getType(), dense.template getValues<Attribute>()[0]);
    } else {
      value = dyn_cast<DenseElementsAttr>(op.getValue());
    }
    if (!value)
      return op.emitOpError("the step needs a dense value");
    Value v;
    if (isStaticConstant(op)) {
      // CUDA keeps float constants in fp32, as their static arrays are.
      MemRefType type = bufferType(this->plan, op.getResult());
      if (this->plan.cuda && isa<FloatType>(type.getElementType()))
        type = MemRefType::get(type.getShape(), rewriter.getF32Type());
      v = rewriter.create<tcck::GlobalOp>(op.getLoc(), type, value);
    } else {
      v = this->resultView(rewriter, op, 0);
      auto splat = value.template getSplatValue<Attribute>();
      rewriter.create<tcck::FillOp>(op.getLoc(), v, cast<TypedAttr>(splat));
    }
    this->done(rewriter, op, v);
    return success();
  }
};

/// Reshape, squeeze, unsqueeze, identity: the operand's bytes, in its
/// storage type.
struct AliasLowering : ConversionPattern {
  AliasLowering(MLIRContext *ctx, KernelPlan &plan)
      : ConversionPattern(MatchAnyOpTypeTag(), 1, ctx), plan(plan) {}
  KernelPlan &plan;
  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                                ConversionPatternRewriter &rewriter) const override {
    if (!isa<TccDialect>(op->getDialect()) || !isAliasView(op))
      return failure();
    Value alias = rewriter.create<tcck::AliasOp>(
        op->getLoc(),
        MemRefType::get(cast<RankedTensorType>(op->getResult(0).getType()).getShape(),
                        cast<MemRefType>(operands[0].getType()).getElementType()),
        operands[0]);
    waitForHostCopies(rewriter, plan, op);
    rewriter.replaceOp(op, alias);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Elementwise and library kernels
//===----------------------------------------------------------------------===//

struct ElementwiseLowering : ConversionPattern {
  ElementwiseLowering(MLIRContext *ctx, KernelPlan &plan)
      : ConversionPattern(MatchAnyOpTypeTag(), 1, ctx), plan(plan), helper(ctx, plan) {}
  KernelPlan &plan;
  KernelPattern<FusionOp> helper; // its view and finishing helpers
  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                                ConversionPatternRewriter &rewriter) const override {
    std::optional<EwKind> kind = runtimeEwKind(op);
    if (!kind || isa<tcck::TcckDialect>(op->getParentOp()->getDialect()))
      return failure();
    Value out = helper.resultView(rewriter, op, 0);
    rewriter.create<tcck::ElementwiseOp>(op->getLoc(), stringifyEwKind(*kind), out, operands);
    helper.done(rewriter, op, out);
    return success();
  }
};

int64_t rankOf(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }

/// The loss's reduction as the runtime numbers it.
int64_t lossReduction(StringRef r) { return r == "none" ? 0 : r == "sum" ? 1 : 2; }

/// Every op that is one library call: its callee, inputs (adapted operands
/// in the kernel's order) and options.
struct LibraryLowering : ConversionPattern {
  LibraryLowering(MLIRContext *ctx, KernelPlan &plan)
      : ConversionPattern(MatchAnyOpTypeTag(), 1, ctx), helper(ctx, plan) {}
  KernelPattern<FusionOp> helper;

  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                                ConversionPatternRewriter &rewriter) const override {
    if (isa<tcck::TcckDialect>(op->getParentOp()->getDialect()))
      return failure();
    Builder b(op->getContext());
    SmallVector<NamedAttribute> options;
    auto opt = [&](StringRef name, Attribute a) { options.push_back(b.getNamedAttr(name, a)); };
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    SmallVector<Value> ins(operands.begin(), operands.end());
    // The buffer of `v`, one of the op's operands.
    auto adapted = [&](Value v) {
      return operands[llvm::find(op->getOperands(), v) - op->getOperands().begin()];
    };
    using tcck::LibraryCall;
    std::optional<LibraryCall> callee =
        llvm::TypeSwitch<Operation *, std::optional<LibraryCall>>(op)
            .Case<GeluOp>([&](GeluOp g) {
              opt("tanh", b.getBoolAttr(g.getApproximate() == "tanh"));
              return LibraryCall::Gelu;
            })
            .Case<GeluGradOp>([&](GeluGradOp g) {
              opt("tanh", b.getBoolAttr(g.getApproximate() == "tanh"));
              return LibraryCall::GeluGrad;
            })
            .Case<CastOp>([&](CastOp) { return LibraryCall::Cast; })
            .Case<WhereOp>([&](WhereOp) { return LibraryCall::Where; })
            .Case<SoftmaxOp, LogSoftmaxOp>([&](Operation *o) {
              int64_t axis = *normalizeAxis(cast<IntegerAttr>(o->getAttr("axis")).getInt(),
                                            rankOf(o->getOperand(0)));
              opt("axis", i64(axis));
              opt("log", b.getBoolAttr(isa<LogSoftmaxOp>(o)));
              return LibraryCall::Softmax;
            })
            .Case<LayerNormalizationOp>([&](LayerNormalizationOp ln) {
              opt("axis", i64(*normalizeAxis(ln.getAxis(), rankOf(ln.getInput()))));
              opt("epsilon", b.getF64FloatAttr(ln.getEpsilon().convertToDouble()));
              return LibraryCall::LayerNorm;
            })
            .Case<ReduceMeanOp, ReduceSumOp>([&](Operation *o) {
              ins.resize(1);
              opt("mask", i64(reductionMask(o)));
              opt("mean", b.getBoolAttr(isa<ReduceMeanOp>(o)));
              // CUDA: a bias's gradient, summed into its accumulator.
              if (helper.plan.directAccumulators.count(o->getResult(0)))
                opt("accumulate", b.getUnitAttr());
              return LibraryCall::Reduce;
            })
            .Case<GatherOp>([&](GatherOp g) {
              opt("axis", i64(*normalizeAxis(g.getAxis(), rankOf(g.getData()))));
              return LibraryCall::Gather;
            })
            .Case<GatherGradOp>([&](GatherGradOp g) {
              opt("axis", i64(*normalizeAxis(g.getAxis(), rankOf(g.getResult()))));
              return LibraryCall::GatherGrad;
            })
            .Case<TransposeOp>([&](TransposeOp t) {
              opt("perm", b.getDenseI64ArrayAttr(t.getPermutation()));
              return LibraryCall::Transpose;
            })
            .Case<ConcatOp>([&](ConcatOp c) {
              opt("axis", i64(*normalizeAxis(c.getAxis(), rankOf(c.getResult()))));
              return LibraryCall::Concat;
            })
            .Case<ExpandOp>([&](ExpandOp) {
              ins.resize(1);
              return LibraryCall::BroadcastTo;
            })
            .Case<RandomKeepOp>([&](RandomKeepOp r) {
              opt("stream", i64(r.getStream()));
              opt("threshold", i64(::tcc::random::threshold(r.getRatio().convertToDouble())));
              return LibraryCall::RandomKeep;
            })
            .Case<GemmOp>([&](GemmOp g) {
              opt("trans_a", b.getBoolAttr(g.getTransA()));
              opt("trans_b", b.getBoolAttr(g.getTransB()));
              opt("alpha", b.getF64FloatAttr(g.getAlpha().convertToDouble()));
              opt("beta", b.getF64FloatAttr(g.getBeta().convertToDouble()));
              return LibraryCall::Gemm;
            })
            .Case<SoftmaxCrossEntropyLossOp, SoftmaxCrossEntropyLossWithGradOp,
                  SoftmaxCrossEntropyLossGradOp>([&](Operation *o) -> std::optional<LibraryCall> {
              auto ignore = o->getAttrOfType<IntegerAttr>("ignore_index");
              if (ignore)
                opt("ignore_index", i64(ignore.getInt()));
              opt("reduction", i64(lossReduction(
                                   o->getAttrOfType<StringAttr>("reduction").getValue())));
              // Inputs in the kernel's order, the optional weights last.
              ins.clear();
              auto add = [&](Value v) { ins.push_back(adapted(v)); };
              if (auto l = dyn_cast<SoftmaxCrossEntropyLossOp>(o)) {
                add(l.getScores()), add(l.getLabels());
                if (l.getWeights())
                  add(l.getWeights());
                return LibraryCall::SceLoss;
              }
              if (auto l = dyn_cast<SoftmaxCrossEntropyLossWithGradOp>(o)) {
                add(l.getScores()), add(l.getLabels()), add(l.getGrad());
                if (l.getWeights())
                  add(l.getWeights());
                return LibraryCall::SceLossWithGrad;
              }
              auto l = cast<SoftmaxCrossEntropyLossGradOp>(o);
              add(l.getGrad()), add(l.getLogProb()), add(l.getLabels());
              if (l.getWeights())
                add(l.getWeights());
              return LibraryCall::SceLossGrad;
            })
            .Case<AttentionOp, AttentionGradOp>([&](Operation *o) -> std::optional<LibraryCall> {
              AttentionShape s = attentionShape(o);
              opt("shape", b.getDenseI64ArrayAttr({s.b, s.h, s.sq, s.sk, s.d, s.dv}));
              opt("columns", b.getDenseI64ArrayAttr(s.columns));
              opt("token_major", b.getBoolAttr(s.tokenMajor));
              opt("packed", b.getBoolAttr(s.packed));
              opt("scale", o->getAttr("scale"));
              opt("causal", o->getAttr("causal"));
              if (auto cap = o->getAttrOfType<FloatAttr>("softcap");
                  cap && cap.getValueAsDouble() > 0.0)
                opt("softcap", cap);
              ins.clear();
              auto add = [&](Value v) { ins.push_back(adapted(v)); };
              for (int i = 0; i < 3; ++i)
                add(o->getOperand(i));
              Value bias, rng;
              if (auto a = dyn_cast<AttentionOp>(o)) {
                bias = a.getBias(), rng = a.getRng();
              } else {
                auto g = cast<AttentionGradOp>(o);
                add(g.getResult()), add(g.getGrad()), add(g.getLse());
                bias = g.getBias(), rng = g.getRng();
              }
              if (bias) {
                opt("bias", b.getUnitAttr());
                add(bias);
              }
              auto ratio = o->getAttrOfType<FloatAttr>("dropout");
              auto stream = o->getAttrOfType<IntegerAttr>("dropout_stream");
              if (ratio && stream && rng) {
                opt("dropout", b.getF64FloatAttr(ratio.getValueAsDouble()));
                opt("dropout_stream", stream);
                add(rng);
              }
              return isa<AttentionOp>(o) ? LibraryCall::AttentionForward
                                         : LibraryCall::AttentionBackward;
            })
            .Default([](Operation *) { return std::nullopt; });
    if (!callee)
      return failure();
    SmallVector<Value> outs;
    if (Value acc = helper.directAccumulator(rewriter, op, 0))
      outs.push_back(acc);
    else
      outs = helper.resultViews(rewriter, op);
    rewriter.create<tcck::CallOp>(op->getLoc(), *callee, outs, ins,
                                  b.getDictionaryAttr(options));
    helper.done(rewriter, op, outs);
    return success();
  }
};

/// Slices and their gradients, and splits (one slice per part): the
/// resolved starts and steps.
template <typename Op>
struct SliceLowering : KernelPattern<Op> {
  using KernelPattern<Op>::KernelPattern;
  LogicalResult matchAndRewrite(Op op, typename Op::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Builder b(op.getContext());
    Value in = adaptor.getOperands()[0];
    auto slice = [&](Value out, ArrayRef<int64_t> starts, ArrayRef<int64_t> steps,
                     tcck::LibraryCall callee) {
      rewriter.create<tcck::CallOp>(
          op.getLoc(), callee, ValueRange{out}, ValueRange{in},
          b.getDictionaryAttr({b.getNamedAttr("starts", b.getDenseI64ArrayAttr(starts)),
                               b.getNamedAttr("steps", b.getDenseI64ArrayAttr(steps))}));
    };
    if constexpr (std::is_same_v<Op, SplitOp>) {
      int64_t rank = rankOf(op.getInput());
      int64_t axis = *normalizeAxis(op.getAxis(), rank);
      int64_t offset = 0;
      SmallVector<Value> views;
      for (auto [k, r] : llvm::enumerate(op.getResults())) {
        SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
        starts[axis] = offset;
        offset += cast<RankedTensorType>(r.getType()).getDimSize(axis);
        views.push_back(this->resultView(rewriter, op, k));
        slice(views.back(), starts, steps, tcck::LibraryCall::Slice);
      }
      this->done(rewriter, op, views);
    } else {
      bool grad = std::is_same_v<Op, SliceGradOp>;
      Value r = op->getResult(0);
      ArrayRef<int64_t> full = cast<RankedTensorType>((grad ? r : op->getOperand(0)).getType())
                                   .getShape();
      auto optional = [&](StringRef n) -> std::optional<ArrayRef<int64_t>> {
        if (auto a = op->template getAttrOfType<DenseI64ArrayAttr>(n))
          return a.asArrayRef();
        return std::nullopt;
      };
      SmallVector<SliceDim> dims;
      if (failed(resolveSlice(op.getLoc(), full,
                              op->template getAttrOfType<DenseI64ArrayAttr>("starts"),
                              op->template getAttrOfType<DenseI64ArrayAttr>("ends"),
                              optional("axes"), optional("steps"), dims)))
        return failure();
      SmallVector<int64_t> starts, steps;
      for (const SliceDim &d : dims) {
        starts.push_back(d.start);
        steps.push_back(d.step);
      }
      Value out = this->resultView(rewriter, op, 0);
      slice(out, starts, steps, grad ? tcck::LibraryCall::SliceGrad : tcck::LibraryCall::Slice);
      this->done(rewriter, op, out);
    }
    return success();
  }
};

/// Dropout that drops nothing (inference, or a zero ratio): a copy and a
/// mask of ones.
struct DropoutLowering : KernelPattern<DropoutOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(DropoutOp d, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value out = resultView(rewriter, d, 0);
    rewriter.create<tcck::CopyOp>(d.getLoc(), out, adaptor.getInput());
    Value mask = resultView(rewriter, d, 1);
    auto maskType = cast<MemRefType>(mask.getType()).getElementType();
    rewriter.create<tcck::FillOp>(d.getLoc(), mask, rewriter.getIntegerAttr(maskType, 1));
    done(rewriter, d, {out, mask});
    return success();
  }
};

//===----------------------------------------------------------------------===//
// GEMMs and fusions
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Activation swapping (CUDA)
//===----------------------------------------------------------------------===//

int64_t hostOffset(Operation *op) {
  return op->getAttrOfType<IntegerAttr>(kHostOffsetAttr).getInt();
}

/// The copy out; the value in host memory has no device buffer, so the
/// swap's result stands for the value's own (only tcc.swap_in reads it,
/// by its host offset).
struct SwapOutLowering : KernelPattern<SwapOutOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(SwapOutOp s, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.create<tcck::SwapOutOp>(s.getLoc(), adaptor.getValue(),
                                     rewriter.getI64IntegerAttr(hostOffset(s)), s.getSwapAttr());
    done(rewriter, s, adaptor.getValue());
    return success();
  }
};

struct SwapInLowering : KernelPattern<SwapInOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(SwapInOp s, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value out = resultView(rewriter, s, 0);
    rewriter.create<tcck::SwapInOp>(s.getLoc(), out, rewriter.getI64IntegerAttr(hostOffset(s)),
                                    s.getSwapAttr());
    done(rewriter, s, out);
    return success();
  }
};

struct SwapWaitLowering : KernelPattern<SwapWaitOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(SwapWaitOp w, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (w.isSwapIn())
      rewriter.create<tcck::WaitSwapInOp>(w.getLoc(), w.getSwapAttr());
    else
      rewriter.create<tcck::WaitSwapOutOp>(w.getLoc(), w.getSwapAttr());
    // The waits for copies to the host the plan places after this op.
    finish(rewriter, w, {});
    rewriter.eraseOp(w);
    return success();
  }
};

struct MatMulLowering : KernelPattern<MatMulOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(MatMulOp m, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value acc = directAccumulator(rewriter, m, 0);
    Value out = acc ? acc : resultView(rewriter, m, 0);
    rewriter.create<tcck::MatMulOp>(m.getLoc(), ValueRange{out}, adaptor.getLhs(),
                                    adaptor.getRhs(), ValueRange{}, false, false, bool(acc),
                                    ArrayAttr(), tcck::CublasLtAttr());
    done(rewriter, m, out);
    return success();
  }
};

struct FusionLowering : KernelPattern<FusionOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(FusionOp fusion, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = fusion.getLoc();
    if (fusion.getNumResults() == 0) {
      done(rewriter, fusion, {});
      return success();
    }
    Value acc = directAccumulator(rewriter, fusion, 0);
    SmallVector<Value> outs = acc ? SmallVector<Value>{acc} : resultViews(rewriter, fusion);
    ValueRange ins = adaptor.getInputs();
    auto inputOf = [&](Value outer) {
      unsigned k = llvm::find(fusion.getInputs(), outer) - fusion.getInputs().begin();
      return ins[k];
    };
    switch (fusion.getKind()) {
    case FusionKind::Move:
      if (failed(lowerCopyFusion(rewriter, fusion, ins, outs)))
        return failure();
      break;
    case FusionKind::Gemm: {
      std::optional<GemmFusion> g = asGemmFusion(fusion);
      if (!g)
        return fusion.emitOpError("is a 'gemm' fusion that is not one GEMM of its inputs with "
                                  "an epilogue");
      if (g->epilogue.empty()) {
        rewriter.create<tcck::MatMulOp>(loc, outs, inputOf(g->lhs), inputOf(g->rhs),
                                        ValueRange{}, g->transLhs, g->transRhs, bool(acc),
                                        ArrayAttr(), tcck::CublasLtAttr());
        break;
      }
      if (acc)
        return fusion.emitOpError("adds a GEMM with an epilogue into an accumulator");
      if (failed(lowerGemmEpilogue(rewriter, fusion, *g, ins, outs, inputOf(g->lhs),
                                   inputOf(g->rhs), plan.cuda)))
        return failure();
      break;
    }
    case FusionKind::Loop:
    case FusionKind::Reduction: {
      if (failed(lowerLoopFusion(rewriter, fusion, ins, outs)))
        return failure();
      break;
    }
    }
    done(rewriter, fusion, outs);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The step's results
//===----------------------------------------------------------------------===//

/// At the end of the step: the gradients not added yet go into their
/// accumulators, the outputs into their slots; the random state advances.
struct ReturnLowering : KernelPattern<func::ReturnOp> {
  using KernelPattern::KernelPattern;
  LogicalResult matchAndRewrite(func::ReturnOp ret, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    func::FuncOp func = plan.func;
    Location loc = ret.getLoc();
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      Value v = adaptor.getOperands()[i];
      auto slot = rewriter.getI64IntegerAttr(plan.resultSlots[i]);
      if (func.getResultAttr(i, kGradAttr)) {
        if (!gradientAccumulatedAfter(ret.getOperand(i)))
          accumulateResult(rewriter, plan, loc, v, i);
      } else if (cast<MemRefType>(v.getType()).getNumElements() > 0) {
        rewriter.create<tcck::StoreOp>(loc, v, slot);
      }
    }
    for (unsigned i : plan.readyAtEnd)
      gradReady(rewriter, plan, loc, i);
    for (unsigned i = 0; i < plan.numArgs; ++i)
      if (func.getArgAttr(i, kRngAttr))
        rewriter.create<tcck::AdvanceRngOp>(
            loc, rewriter.getRemappedValue(func.getBody().getArgument(i)));
    rewriter.replaceOpWithNewOp<func::ReturnOp>(ret, adaptor.getOperands());
    return success();
  }
};

/// The step function's arguments get their buffers: each tensor argument
/// k of n is replaced by a new argument n + k of type `types[k]` (the
/// kernels' view of it), with its attributes. The pass erases the old
/// arguments and sets the result types once the body is converted. (The
/// buffer types depend on the argument, not only on its type, so this is
/// not a type converter's signature conversion.)
struct SignatureLowering : OpConversionPattern<func::FuncOp> {
  SignatureLowering(MLIRContext *ctx, ArrayRef<Type> types, bool &done)
      : OpConversionPattern(ctx), types(types.begin(), types.end()), done(done) {}
  SmallVector<Type> types;
  bool &done;
  LogicalResult matchAndRewrite(func::FuncOp func, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    unsigned n = func.getNumArguments();
    if (done || types.size() != n)
      return failure();
    rewriter.modifyOpInPlace(func, [&] {
      for (unsigned k = 0; k < n; ++k)
        func.insertArgument(n + k, types[k], func.getArgAttrDict(k), func.getArgument(k).getLoc());
    });
    for (unsigned k = 0; k < n; ++k)
      rewriter.replaceUsesOfBlockArgument(func.getArgument(k), func.getArgument(n + k));
    done = true;
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The contract and the pass
//===----------------------------------------------------------------------===//

/// CUDA: where the step's gradients go besides the arena's accumulators.
/// Accumulators in host memory (#tcc.tiers host_grads) get each gradient by
/// a copy, numbered in the order the micro-step queues them; the step's
/// stream waits for copy k kHostCopyLagOps ops after it is queued, before
/// the plan can reuse its buffer. Each device accumulator is handed to the
/// gradient all-reduce right after its last write (tcck.grad_ready).
void planCudaAccumulators(KernelPlan &plan, LayoutAttr layout) {
  func::FuncOp func = plan.func;
  Block &block = func.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  llvm::StringMap<int64_t> hostGradOffset;
  if (DenseI64ArrayAttr hg = layout.getHostGrads()) {
    int64_t p = 0;
    for (unsigned a = 0; a < func.getNumArguments(); ++a)
      if (auto n = func.getArgAttrOfType<StringAttr>(a, kParamAttr)) {
        if (p < hg.size() && hg[p] >= 0)
          hostGradOffset[n.getValue()] = hg[p];
        ++p;
      }
  }
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    if (auto n = func.getResultAttrOfType<StringAttr>(i, kGradAttr))
      if (auto it = hostGradOffset.find(n.getValue()); it != hostGradOffset.end())
        plan.hostGradSlots[i] = it->second;

  // The copies, in the order the micro-step queues them, and their waits.
  int64_t copies = 0;
  SmallVector<std::pair<int64_t, int64_t>> pending; // (copy, ops to go)
  for (Operation &op : block.without_terminator()) {
    for (auto &[k, togo] : pending)
      if (--togo == 0)
        plan.waitsAfter[&op].push_back(k);
    llvm::erase_if(pending, [](auto &w) { return w.second == 0; });
    for (unsigned i : plan.accumulateAfter.lookup(&op))
      if (plan.hostGradSlots.count(i)) {
        plan.hostCopies[i] = copies;
        pending.push_back({copies++, kHostCopyLagOps});
      }
  }
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    if (plan.hostGradSlots.count(i) && !gradientAccumulatedAfter(ret.getOperand(i)))
      plan.hostCopies[i] = copies++;

  // By parameter: the last op that adds into its device accumulator, or
  // null (the end of the step).
  llvm::MapVector<StringRef, std::pair<Operation *, unsigned>> lastWrite;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    auto n = func.getResultAttrOfType<StringAttr>(i, kGradAttr);
    if (!n || hostGradOffset.count(n.getValue()))
      continue;
    Operation *def = gradientAccumulatedAfter(ret.getOperand(i));
    auto [it, fresh] = lastWrite.insert({n.getValue(), {def, i}});
    if (!fresh && it->second.first && (!def || it->second.first->isBeforeInBlock(def)))
      it->second = {def, i};
  }
  for (auto &[name, at] : lastWrite)
    (at.first ? plan.readyAfter[at.first] : plan.readyAtEnd).push_back(at.second);
}

/// Whether the target has a kernel for `op`; reports the op otherwise.
LogicalResult checkContract(Operation &op, bool cuda) {
  StringRef target = cuda ? "CUDA" : "CPU";
  if (runtimeEwKind(&op) || isAliasView(&op))
    return success();
  if (auto d = dyn_cast<DropoutOp>(op)) {
    if (d.getTraining() && !d.getRatio().isZero())
      return d.emitOpError("dropout with a non-zero ratio in training mode is not supported by "
                           "the ")
             << target << " target yet";
    return success();
  }
  if (cuda && isa<GemmOp>(op))
    return op.emitOpError("reaches the CUDA target's lowering; tcc-legalize lowers Gemm to "
                          "matmul first");
  if (isa<SwapOutOp, SwapInOp, SwapWaitOp>(op)) {
    if (!cuda)
      return op.emitOpError("swaps activations to host memory, which only the CUDA target does");
    if (!isa<SwapWaitOp>(op) && !op.getAttrOfType<IntegerAttr>(kHostOffsetAttr))
      return op.emitOpError("has no place in the host buffer (tcc.host_offset): run "
                            "tcc-plan-memory first");
    return success();
  }
  if (isa<ConstantOp, ConstantOfShapeOp, ShapeOp>(op)) {
    Attribute value = op.getAttr("value");
    if (!isa<ShapeOp>(op) && !isa_and_nonnull<DenseElementsAttr>(value))
      return op.emitOpError("the step emitter needs a dense value");
    return success();
  }
  if (isa<GeluOp, GeluGradOp, AttentionOp, AttentionGradOp, FusionOp, CastOp, WhereOp, MatMulOp,
          GemmOp, SoftmaxOp, LogSoftmaxOp, LayerNormalizationOp, ReduceMeanOp, ReduceSumOp,
          GatherOp, GatherGradOp, TransposeOp, SliceOp, SliceGradOp, SplitOp, ConcatOp, ExpandOp,
          RandomKeepOp, SoftmaxCrossEntropyLossOp, SoftmaxCrossEntropyLossWithGradOp,
          SoftmaxCrossEntropyLossGradOp>(op))
    return success();
  return op.emitOpError("the ") << target << " target cannot lower this op yet";
}

class LowerToKernelsPass : public mlir::tcc::impl::LowerToKernelsBase<LowerToKernelsPass> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    TargetAttr target = TargetAttr::of(module);
    if (!target) {
      module.emitError("tcc-lower-to-kernels needs the module's target (tcc-set-target)");
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp func : funcs)
      if (failed(lower(func, target)))
        return signalPassFailure();
  }

private:
  LogicalResult lower(func::FuncOp func, TargetAttr target) {
    MLIRContext *ctx = &getContext();
    LayoutAttr layout = LayoutAttr::of(func);
    if (!layout)
      return func.emitError("tcc-lower-to-kernels needs the memory plan (tcc-plan-memory)");
    Block &block = func.getBody().front();
    bool contract = true;
    for (Operation &op : block.without_terminator())
      contract &= succeeded(checkContract(op, target.isCuda()));
    if (!contract)
      return failure();

    // The optimizer's update (a training step's), as @apply beside it.
    if (func.getSymName() == kMicroStepName &&
        failed(buildApply(func, layout, target.isCuda(), target.getStorage())))
      return failure();

    KernelPlan plan;
    plan.func = func;
    plan.floatStorage = target.getStorage();
    plan.cuda = target.isCuda();
    plan.numArgs = func.getNumArguments();
    plan.resultSlots.assign(layout.getResults().asArrayRef().begin(),
                            layout.getResults().asArrayRef().end());
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    if (plan.resultSlots.size() != ret.getNumOperands())
      return func.emitError("the memory plan does not match the function");
    // The op table: every op that runs code, with the plan's live bytes.
    int64_t floatBytes = plan.cuda ? kMixedPrecision : target.getStorage().isF64() ? 8 : 4;
    MemoryTimeline timeline = memoryTimeline(func, floatBytes, /*placeOffsets=*/false);
    std::vector<int64_t> live = timeline.liveBytes();
    int64_t persistent = layout.getArenaBytes() - layout.getTemporaryBytes();
    for (auto [k, op] : llvm::enumerate(timeline.ops))
      if (!isa<func::ReturnOp, ConstantOp, SwapWaitOp>(op) && !isAliasView(op))
        plan.marks[op] = {opTableLabel(op), persistent + live[k]};
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      if (!func.getResultAttr(i, kGradAttr))
        continue;
      if (Value root = viewRoot(ret.getOperand(i));
          plan.cuda && accumulatedInPlace(root, kMixedPrecision))
        plan.directAccumulators[root] = plan.resultSlots[i]; // its op adds it
      else if (Operation *def = gradientAccumulatedAfter(ret.getOperand(i)))
        plan.accumulateAfter[def].push_back(i);
    }
    if (plan.cuda) {
      planCudaAccumulators(plan, layout);
      for (Operation &op : block.without_terminator())
        for (Value r : op.getResults())
          if (keepsF32(r))
            plan.keptF32.insert(r);
    }

    // The arguments' buffers: on CUDA, the fp16 working copy of a float
    // parameter or input that has one (tcc.layout's shadows), else the fp32
    // master; on the CPU, the target's storage type.
    Builder builder(ctx);
    ArrayRef<int64_t> shadows;
    if (DenseI64ArrayAttr sh = layout.getShadows())
      shadows = sh.asArrayRef();
    SmallVector<Type> argTypes;
    for (BlockArgument arg : func.getArguments()) {
      auto t = cast<RankedTensorType>(arg.getType());
      Type elt = t.getElementType();
      if (plan.cuda && isa<FloatType>(elt))
        elt = arg.getArgNumber() < shadows.size() && shadows[arg.getArgNumber()] >= 0
                  ? Type(builder.getF16Type())
                  : Type(builder.getF32Type());
      else if (isa<FloatType>(elt))
        elt = plan.floatStorage;
      argTypes.push_back(MemRefType::get(t.getShape(), elt));
    }

    auto isTensor = [](Type t) { return isa<RankedTensorType>(t); };
    bool signatureDone = false;
    ConversionTarget legal(*ctx);
    legal.addLegalDialect<tcck::TcckDialect>();
    legal.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp) { return signatureDone; });
    legal.addDynamicallyLegalOp<func::ReturnOp>(
        [&](func::ReturnOp r) { return llvm::none_of(r.getOperandTypes(), isTensor); });

    RewritePatternSet patterns(ctx);
    patterns.add<SignatureLowering>(ctx, argTypes, signatureDone);
    patterns.add<ConstantLowering<ConstantOp>, ConstantLowering<ConstantOfShapeOp>,
                 ConstantLowering<ShapeOp>, SliceLowering<SliceOp>, SliceLowering<SliceGradOp>,
                 SliceLowering<SplitOp>, DropoutLowering, MatMulLowering, FusionLowering,
                 ReturnLowering, AliasLowering, ElementwiseLowering, LibraryLowering,
                 SwapOutLowering, SwapInLowering, SwapWaitLowering>(ctx, plan);
    if (failed(applyFullConversion(func, legal, std::move(patterns))) || plan.failed)
      return failure();
    // The old arguments are unused now; the results' types are the buffers
    // the step returns.
    unsigned n = argTypes.size();
    llvm::BitVector old(2 * n);
    old.set(0, n);
    func.eraseArguments(old);
    // An fp16 working copy's slot holds the fp32 master.
    for (auto [i, t] : llvm::enumerate(argTypes))
      if (plan.cuda && cast<MemRefType>(t).getElementType().isF16())
        func.setArgAttr(i, tcck::kSlotAttr, TypeAttr::get(builder.getF32Type()));
    func.setType(FunctionType::get(
        ctx, argTypes, func.getBody().front().getTerminator()->getOperandTypes()));

    // The backward pass starts from d(loss) = the step's gradient scale.
    OpBuilder b(ctx);
    b.setInsertionPointToStart(&func.getBody().front());
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (func.getArgAttr(i, kSeedAttr))
        b.create<tcck::SeedOp>(func.getLoc(), func.getArgument(i));
    if (plan.cuda)
      placeHostAwaits(func, layout);
    return success();
  }
};

} // namespace
