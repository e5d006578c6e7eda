//===- PlanMemory.cpp - one arena, offsets reused by lifetime -------------===//

#include "passes/PlanMemory.h"
#include "passes/Passes.h"
#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/FusionCostModel.h"
#include "passes/tiers/TierCostModel.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdio>

namespace mlir::tcc {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

bool mlir::tcc::isAliasView(Operation *op) {
  return isa<ReshapeOp, SqueezeOp, UnsqueezeOp, IdentityOp>(op);
}

/// Whether `v`, a value of a fusion body, depends on `on` (through the
/// body's ops; each op visited once).
static bool dependsOn(Value v, Operation *on, llvm::DenseSet<Operation *> &seen) {
  Operation *def = v.getDefiningOp();
  if (!def || !seen.insert(def).second)
    return false;
  if (def == on)
    return true;
  return llvm::any_of(def->getOperands(), [&](Value o) { return dependsOn(o, on, seen); });
}

/// The operands whose buffer result `result` of `op` may take over when one
/// dies at `op`, best first (see inPlaceOperand).
static SmallVector<unsigned> inPlaceOperands(Operation *op, unsigned result,
                                             int64_t floatBytes) {
  if (isa<SoftmaxCrossEntropyLossWithGradOp>(op))
    return result == 1 ? SmallVector<unsigned>{0} : SmallVector<unsigned>{};
  auto fusion = dyn_cast<FusionOp>(op);
  // Loop fusions on CUDA: each thread reads all of an element's operands
  // before it stores the element's results, and a row fusion's passes end
  // with a barrier (the row reduction), so a result written in the last
  // pass (one that depends on every reduction) may overwrite an operand of
  // its own type. GEMM and copy fusions read other elements.
  if (!fusion || floatBytes != kMixedPrecision)
    return {};
  Block &body = fusion.getBody().front();
  Value yielded = body.getTerminator()->getOperand(result);
  for (Operation &o : body.without_terminator()) {
    if (isa<ReduceSumOp, ReduceMeanOp>(o)) {
      // A row value (a reduction's result's shape) is stored before the
      // passes that read the row again; only full-size results qualify.
      llvm::DenseSet<Operation *> seen;
      if (o.getOperand(0).getType() != yielded.getType() || !dependsOn(yielded, &o, seen))
        return {};
    } else if (!FusionCostModel::isElementwise(&o)) {
      return {};
    }
  }
  SmallVector<unsigned> operands;
  for (auto [k, in] : llvm::enumerate(op->getOperands()))
    if (in.getType() == op->getResult(result).getType())
      operands.push_back(k);
  return operands;
}

bool mlir::tcc::diesAt(Value v, int64_t at,
                       const llvm::DenseMap<Operation *, int64_t> &index) {
  return llvm::all_of(v.getUsers(), [&](Operation *u) {
    if (isAliasView(u))
      return diesAt(u->getResult(0), at, index);
    return index.lookup(u) <= at;
  });
}

std::optional<unsigned>
mlir::tcc::inPlaceOperand(Operation *op, unsigned result,
                          llvm::function_ref<Value(Value)> bufferOf,
                          llvm::function_ref<bool(Value)> isTemporary,
                          const llvm::DenseMap<Operation *, int64_t> &index, int64_t floatBytes) {
  const int64_t at = index.lookup(op);
  for (unsigned operand : inPlaceOperands(op, result, floatBytes)) {
    Value in = op->getOperand(operand);
    Value root = bufferOf(in);
    // The buffer is free only if every value it holds dies here. `root` owns
    // it, but an earlier in-place result may hold it now (root -> r1 -> ...):
    // root's own readers all come before r1's op, so what must die here is
    // the value the operand views (r1 and its views), too. Checking only
    // root let a fusion overwrite r1 while r1 was still to be read (issue 44:
    // GPT-NeoX's parallel residual, the output gradient that the MLP branch's
    // LayerNorm-backward fusion accumulated over before the attention
    // branch's GEMMs read it).
    if (!isTemporary(root) || !diesAt(root, at, index) || !diesAt(viewRoot(in), at, index) ||
        valueBytes(root, floatBytes) != valueBytes(op->getResult(result), floatBytes) ||
        llvm::any_of(op->getResults().take_front(result),
                     [&](Value earlier) { return bufferOf(earlier) == root; }))
      continue;
    return operand;
  }
  return std::nullopt;
}

Value mlir::tcc::viewRoot(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isAliasView(def))
      break;
    v = def->getOperand(0);
  }
  return v;
}

Operation *mlir::tcc::gradientAccumulatedAfter(Value v) {
  Operation *def = viewRoot(v).getDefiningOp();
  return def && !isStaticConstant(def) ? def : nullptr;
}

bool mlir::tcc::isEarlyAccumulation(OpOperand &use) {
  auto ret = dyn_cast<func::ReturnOp>(use.getOwner());
  if (!ret)
    return false;
  auto func = dyn_cast<func::FuncOp>(ret->getParentOp());
  return func && func.getResultAttr(use.getOperandNumber(), kGradAttr) &&
         gradientAccumulatedAfter(use.get());
}

bool mlir::tcc::isGradientToHost(OpOperand &use) {
  auto ret = dyn_cast<func::ReturnOp>(use.getOwner());
  auto func = ret ? dyn_cast<func::FuncOp>(ret->getParentOp()) : nullptr;
  TiersAttr tiers = func ? TiersAttr::of(func) : nullptr;
  if (!tiers || tiers.getHostGrads().empty())
    return false;
  auto name = func.getResultAttrOfType<StringAttr>(use.getOperandNumber(), kGradAttr);
  if (!name)
    return false;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttrOfType<StringAttr>(i, kParamAttr) == name)
      return tiers.gradOnHost(i);
  return false;
}

int64_t mlir::tcc::bufferNeededUntil(OpOperand &use, int64_t from,
                                     const llvm::DenseMap<Operation *, int64_t> &index) {
  if (!isEarlyAccumulation(use))
    return index.lookup(use.getOwner());
  if (isGradientToHost(use))
    return std::min(from + kHostCopyLagOps, index.lookup(use.getOwner()));
  return from;
}

bool mlir::tcc::accumulatedInPlace(Value v, int64_t floatBytes) {
  if (floatBytes != kMixedPrecision ||
      !isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
    return false;
  Operation *def = v.getDefiningOp();
  // The return reads it, maybe through views that nothing else reads.
  Value r = v;
  while (r.hasOneUse() && isAliasView(*r.getUsers().begin()))
    r = r.getUsers().begin()->getResult(0);
  if (!r.hasOneUse() || !isEarlyAccumulation(*r.use_begin()) ||
      isGradientToHost(*r.use_begin()))
    return false;
  if (isa_and_nonnull<ReduceSumOp>(def)) // a bias's gradient: the sums add into it
    return true;
  if (r != v) // GEMM products: no views
    return false;
  return isPlainGemm(def);
}

bool mlir::tcc::isPlainGemm(Operation *def) {
  // A GEMM fusion's transposes are the GEMM's flags; an epilogue would
  // make it write something else.
  auto matmul = dyn_cast_or_null<MatMulOp>(def);
  if (auto fusion = dyn_cast_or_null<FusionOp>(def)) {
    std::optional<GemmFusion> g = asGemmFusion(fusion);
    if (!g || !g->epilogue.empty())
      return false;
    matmul = g->matmul;
  }
  auto rank2 = [](Value x) { return cast<RankedTensorType>(x.getType()).getRank() == 2; };
  return matmul && rank2(matmul.getLhs()) && rank2(matmul.getRhs());
}

bool mlir::tcc::isStaticConstant(Operation *op) {
  if (!isa<ConstantOp, ConstantOfShapeOp, ShapeOp>(op))
    return false;
  auto t = cast<RankedTensorType>(op->getResult(0).getType());
  // Uniform constants larger than this are filled into an arena slot; the
  // rest are arrays in the library.
  if (auto c = dyn_cast<ConstantOp>(op))
    if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue()))
      return !(dense.isSplat() && t.getNumElements() > 64);
  if (isa<ConstantOfShapeOp>(op))
    return t.getNumElements() <= 64;
  return true;
}

int64_t mlir::tcc::bufferBytes(Type type, int64_t floatBytes) {
  auto t = cast<RankedTensorType>(type);
  Type elt = t.getElementType();
  int64_t bytes = isa<FloatType>(elt) ? floatBytes
                  : elt.isInteger(1)  ? 1
                                      : elt.getIntOrFloatBitWidth() / 8;
  return t.getNumElements() * bytes;
}

std::optional<int64_t> mlir::tcc::numberStepOps(Block &body,
                                               llvm::DenseMap<Operation *, int64_t> &index) {
  int64_t n = 0;
  for (Operation &op : body)
    index[&op] = n++;
  Operation *ret = body.getTerminator();
  Operation *lossOp = ret->getNumOperands() ? ret->getOperand(0).getDefiningOp() : nullptr;
  if (!lossOp)
    return std::nullopt;
  return index[lossOp] + 1;
}

int64_t mlir::tcc::swappedActivationBytes(func::FuncOp func) {
  int64_t bytes = 0;
  func.walk([&](SwapOutOp out) { bytes += valueBytes(out.getValue(), kMixedPrecision); });
  return bytes;
}

int64_t mlir::tcc::valueBytes(Value v, int64_t floatBytes) {
  if (floatBytes == kMixedPrecision && keepsF32(v))
    return bufferBytes(v.getType(), 4);
  return bufferBytes(v.getType(), floatBytes);
}

static int64_t aligned(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

std::string mlir::tcc::describePlanned(Operation *op) {
  std::string s = op->getName().getStringRef().str();
  if (auto fusion = dyn_cast<FusionOp>(op)) {
    s += " (";
    llvm::raw_string_ostream os(s);
    llvm::interleave(
        fusion.getBody().front().without_terminator(), os,
        [&](Operation &o) { os << o.getName().getStringRef(); }, " ");
    os << ")";
  }
  std::string node = nodeNameOf(op->getLoc());
  return node.empty() ? s : s + " " + node;
}

std::string mlir::tcc::describePlanned(Value v) {
  if (Operation *def = v.getDefiningOp()) {
    std::string s = describePlanned(def);
    if (def->getNumResults() > 1)
      s += " #" + std::to_string(cast<OpResult>(v).getResultNumber());
    return s;
  }
  return "argument #" + std::to_string(cast<BlockArgument>(v).getArgNumber());
}

namespace {

/// A temporary: its size and the op indices between which it is live.
struct Interval {
  Value value;
  int64_t bytes, start, end;
  int64_t offset = -1;
};

/// Assigns offsets to intervals, largest first, each at the lowest aligned
/// address not used by an already-placed interval whose lifetime overlaps.
/// Returns the size of the region.
static int64_t assignOffsets(std::vector<Interval> &intervals) {
  std::vector<Interval *> order;
  for (Interval &i : intervals)
    order.push_back(&i);
  // Largest first; ties by start (deterministic plans).
  llvm::stable_sort(order, [](const Interval *a, const Interval *b) {
    if (a->bytes != b->bytes)
      return a->bytes > b->bytes;
    return a->start < b->start;
  });
  std::vector<Interval *> placed;
  int64_t top = 0;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (Interval *it : order) {
    busy.clear();
    for (Interval *p : placed)
      if (p->start <= it->end && it->start <= p->end)
        busy.push_back({p->offset, p->offset + aligned(p->bytes)});
    llvm::sort(busy);
    int64_t size = std::max<int64_t>(aligned(it->bytes), kArenaAlignment);
    int64_t candidate = 0;
    for (auto [lo, hi] : busy) {
      if (candidate + size <= lo)
        break;
      candidate = std::max(candidate, hi);
    }
    it->offset = candidate;
    top = std::max(top, candidate + size);
    placed.push_back(it);
  }
  return top;
}

/// What collectTemporaries finds.
struct Temporaries {
  llvm::DenseMap<Operation *, int64_t> index; // the body's ops, numbered
  int64_t numOps = 0;
  std::vector<Interval> intervals;
  llvm::DenseMap<Value, size_t> intervalOf;
  /// The value whose buffer a view or an in-place result shares.
  llvm::DenseMap<Value, Value> rootOf;
  /// The first op of the backward pass; -1 without one.
  int64_t firstBackward = -1;
  Value root(Value v) const {
    auto it = rootOf.find(v);
    return it == rootOf.end() ? v : it->second;
  }
};

/// The temporaries of `func`'s body and their lifetimes: every result
/// that needs a buffer of its own (not a view, not a constant kept in the
/// library, not a gradient added straight into its accumulator, not a
/// result written over a dying operand), live from its op to its last use
/// through views. planFunction places them; memoryTimeline reports them.
static Temporaries collectTemporaries(func::FuncOp func, int64_t floatBytes) {
  Temporaries t;
  Block &body = func.getBody().front();
  auto &index = t.index;
  auto &intervals = t.intervals;
  auto &intervalOf = t.intervalOf;
  auto &rootOf = t.rootOf;
  for (Operation &op : body)
    index[&op] = t.numOps++;
  // In a training step the forward pass ends with the op that makes the
  // loss (result 0); tcc-build-backward appends the backward pass after it.
  if (func.getSymName() == kMicroStepName && func.getNumResults() > 0)
    if (Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp())
      t.firstBackward = index.lookup(lossOp) + 1;
  // A view (reshape, squeeze, unsqueeze, identity) is its operand's bytes:
  // it gets no buffer of its own, and keeps its root buffer alive.
  auto root = [&](Value v) { return t.root(v); };
  auto lastUse = [&](Value r, int64_t from) {
    int64_t end = from;
    for (OpOperand &use : r.getUses())
      end = std::max(end, bufferNeededUntil(use, from, index));
    return end;
  };
  for (Operation &op : body.without_terminator()) {
    if (isStaticConstant(&op))
      continue;
    if (isAliasView(&op)) {
      Value r = op.getResult(0), base = root(op.getOperand(0));
      rootOf[r] = base;
      auto it = intervalOf.find(base);
      if (it != intervalOf.end())
        intervals[it->second].end =
            std::max(intervals[it->second].end, lastUse(r, index[&op]));
      continue;
    }
    // A value swapped out lies in host memory (planFunction places it).
    if (isa<SwapOutOp>(op))
      continue;
    for (auto [k, r] : llvm::enumerate(op.getResults())) {
      // A gradient its op adds into its accumulator has no buffer.
      if (accumulatedInPlace(r, floatBytes))
        continue;
      // A result written over an operand that dies here takes its buffer.
      if (std::optional<unsigned> operand = inPlaceOperand(
              &op, k, root, [&](Value v) { return intervalOf.count(v) != 0; }, index,
              floatBytes)) {
        Value base = root(op.getOperand(*operand));
        rootOf[r] = base;
        Interval &in = intervals[intervalOf.lookup(base)];
        in.end = std::max(in.end, lastUse(r, index[&op]));
        continue;
      }
      intervalOf[r] = intervals.size();
      intervals.push_back({r, valueBytes(r, floatBytes),
                           index[&op], lastUse(r, index[&op])});
    }
  }
  return t;
}

} // namespace

int64_t mlir::tcc::planFunction(func::FuncOp func, int64_t floatBytes,
                              int64_t statePerParam, int64_t ranks) {
  Builder b(func.getContext());
  Block &body = func.getBody().front();
  const bool mixed = floatBytes == kMixedPrecision;
  // Master weights, accumulators, optimizer state, float inputs and outputs
  // are fp32 under mixed precision; the body works on fp16 shadows.
  const int64_t persistentFloatBytes = mixed ? 4 : floatBytes;
  int64_t cursor = 0;
  auto take = [&](int64_t bytes) {
    int64_t at = cursor;
    cursor += std::max<int64_t>(aligned(bytes), kArenaAlignment);
    return at;
  };

  // Persistent slots, in a fixed order.
  SmallVector<int64_t> params, grads, state, inputs, results;
  int64_t paramBytes = 0, gradBytes = 0, stateBytes = 0, inputBytes = 0,
          outputBytes = 0;
  // What #tcc.tiers keeps in host memory, in a host buffer of its own: the
  // offsets line up with `params`, `grads` and `state` (-1: on the device).
  TiersAttr tiers = TiersAttr::of(func);
  SmallVector<int64_t> hostParams, hostGrads, hostState;
  int64_t hostCursor = 0, hostParamBytes = 0, hostGradBytes = 0, hostStateBytes = 0;
  auto takeHost = [&](int64_t bytes, int64_t &category) {
    int64_t at = hostCursor;
    hostCursor += std::max<int64_t>(aligned(bytes), kArenaAlignment);
    category += bytes;
    return at;
  };
  auto stateOnHost = [&](unsigned arg) { return tiers && tiers.stateOnHost(arg); };
  auto gradOnHost = [&](unsigned arg) { return tiers && tiers.gradOnHost(arg); };
  // A parameter's gradient may be several results (tcc-split-gradient-sums):
  // all of them are added into its one accumulator.
  llvm::StringMap<SmallVector<unsigned>> gradResult;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto n = func.getResultAttrOfType<StringAttr>(i, kGradAttr))
      gradResult[n.getValue()].push_back(i);
  llvm::DenseMap<Value, int64_t> argSlot;
  auto trainable = [&](unsigned i) {
    auto n = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
    return n && gradResult.count(n.getValue());
  };
  // ZeRO-1 (#tcc.shards): the trainable parameters first, back to back, and
  // later their accumulators in the same order, so that both are one flat
  // space of the same element indices, padded to `ranks` aligned chunks.
  const bool sharded = ranks > 1 && statePerParam > 0 && !tiers &&
                       llvm::any_of(llvm::seq(func.getNumArguments()), trainable);
  const int64_t chunkAlign = kArenaAlignment / persistentFloatBytes;
  int64_t flatElems = 0, chunkElems = 0, flatParams = -1, flatGrads = -1;
  auto padFlat = [&](int64_t start) {
    if (flatElems == 0) {
      int64_t used = (cursor - start) / persistentFloatBytes;
      chunkElems = (used + ranks * chunkAlign - 1) / (ranks * chunkAlign) * chunkAlign;
      flatElems = chunkElems * ranks;
    }
    cursor = start + flatElems * persistentFloatBytes;
  };
  if (!sharded) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      Value arg = func.getArgument(i);
      int64_t bytes = bufferBytes(arg.getType(), persistentFloatBytes);
      if (!func.getArgAttr(i, kParamAttr))
        continue;
      if (stateOnHost(i)) {
        // The body reads its fp16 working copy (the shadow below).
        params.push_back(-1);
        hostParams.push_back(takeHost(bytes, hostParamBytes));
        continue;
      }
      params.push_back(argSlot[arg] = take(bytes));
      hostParams.push_back(-1);
      paramBytes += bytes;
    }
  } else {
    flatParams = cursor;
    for (bool flat : {true, false}) {
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        if (!func.getArgAttr(i, kParamAttr) || trainable(i) != flat)
          continue;
        Value arg = func.getArgument(i);
        int64_t bytes = bufferBytes(arg.getType(), persistentFloatBytes);
        argSlot[arg] = take(bytes);
        paramBytes += bytes;
      }
      if (flat)
        padFlat(flatParams);
    }
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (func.getArgAttr(i, kParamAttr)) {
        params.push_back(argSlot.lookup(func.getArgument(i)));
        hostParams.push_back(-1);
      }
  }
  llvm::SmallDenseSet<unsigned> hostGradResults;
  SmallVector<int64_t> resultSlots(func.getNumResults(), -1);
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto n = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
    if (!n)
      continue;
    int64_t bytes = bufferBytes(func.getArgument(i).getType(), persistentFloatBytes);
    auto it = gradResult.find(n.getValue());
    if (it == gradResult.end()) {
      grads.push_back(-1);
      hostGrads.push_back(-1);
      for (int64_t k = 0; k < statePerParam; ++k) {
        state.push_back(-1);
        hostState.push_back(-1);
      }
      continue;
    }
    if (stateOnHost(i)) {
      for (int64_t k = 0; k < statePerParam; ++k) {
        state.push_back(-1);
        hostState.push_back(takeHost(bytes, hostStateBytes));
      }
    }
    if (gradOnHost(i)) {
      // Each micro-step's gradient is a temporary copied to the host.
      grads.push_back(-1);
      hostGrads.push_back(takeHost(bytes, hostGradBytes));
      hostGradResults.insert(it->second.begin(), it->second.end());
      continue;
    }
    hostGrads.push_back(-1);
    if (sharded && flatGrads < 0)
      flatGrads = cursor;
    grads.push_back(take(bytes));
    for (unsigned r : it->second)
      resultSlots[r] = grads.back();
    gradBytes += bytes;
    if (stateOnHost(i))
      continue;
    for (int64_t k = 0; k < statePerParam; ++k) {
      // Sharded: the rank's chunks of state, below.
      state.push_back(sharded ? -1 : take(bytes));
      hostState.push_back(-1);
      stateBytes += sharded ? 0 : bytes;
    }
  }
  // Swapped activations (tcc-swap-activations): each tcc.swap_out's bytes
  // in the host buffer, after the tiers', for its tcc.swap_in to read back.
  int64_t hostSwapBytes = 0;
  for (Operation &op : body)
    if (auto out = dyn_cast<SwapOutOp>(op)) {
      IntegerAttr at =
          b.getI64IntegerAttr(takeHost(valueBytes(out.getValue(), floatBytes), hostSwapBytes));
      out->setAttr(kHostOffsetAttr, at);
      for (Operation *in : out.getHost().getUsers())
        in->setAttr(kHostOffsetAttr, at);
    }
  // ZeRO-1: one chunk per state kind, and the chunk the gradients are
  // reduce-scattered into.
  ShardsAttr shards;
  if (sharded) {
    padFlat(flatGrads);
    SmallVector<int64_t> shardState;
    const int64_t chunkBytes = chunkElems * persistentFloatBytes;
    for (int64_t k = 0; k < statePerParam; ++k) {
      shardState.push_back(take(chunkBytes));
      stateBytes += chunkBytes;
    }
    int64_t shardGrads = take(chunkBytes);
    gradBytes += chunkBytes;
    shards = ShardsAttr::get(b.getContext(), ranks, persistentFloatBytes, flatElems, chunkElems,
                             flatParams, flatGrads, shardGrads,
                             b.getDenseI64ArrayAttr(shardState));
  }
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    if (!func.getArgAttr(i, kInputAttr))
      continue;
    int64_t bytes = bufferBytes(func.getArgument(i).getType(), persistentFloatBytes);
    inputs.push_back(argSlot[func.getArgument(i)] = take(bytes));
    inputBytes += bytes;
  }
  // The slot of the argument marked `attr` (-1 if none), its bytes counted
  // in `category`.
  auto markedArgSlot = [&](StringRef attr, int64_t &category) -> int64_t {
    int64_t slot = -1;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (func.getArgAttr(i, attr)) {
        int64_t bytes = bufferBytes(func.getArgument(i).getType(), persistentFloatBytes);
        slot = argSlot[func.getArgument(i)] = take(bytes);
        category += bytes;
      }
    return slot;
  };
  // The backward pass's seed (loss scale / accumulation), set by the step.
  int64_t seedSlot = markedArgSlot(kSeedAttr, inputBytes);
  // The random state of dropout ([seed, counter]): persistent, like the
  // optimizer state, and checkpointed with it.
  int64_t rngSlot = markedArgSlot(kRngAttr, stateBytes);
  // Mixed precision: fp16 working copies of float parameters and inputs
  // (what the body reads), and the GEMM library's workspace.
  SmallVector<int64_t> shadows(func.getNumArguments(), -1);
  int64_t shadowBytes = 0, workspace = -1, workspaceBytes = 0;
  if (mixed) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      Value arg = func.getArgument(i);
      // keepsF32: scalars (the seed among them) are read from their masters.
      if (keepsF32(arg) ||
          !isa<FloatType>(cast<RankedTensorType>(arg.getType()).getElementType()))
        continue;
      int64_t bytes = bufferBytes(arg.getType(), 2);
      shadows[i] = argSlot[arg] = take(bytes);
      shadowBytes += bytes;
    }
    // cuBLASLt wants its workspace 256-byte aligned (the arena itself is).
    workspaceBytes = kGemmWorkspaceBytes;
    cursor = (cursor + 255) / 256 * 256;
    workspace = take(workspaceBytes);
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    if (resultSlots[i] >= 0 || hostGradResults.count(i))
      continue;
    int64_t bytes = bufferBytes(func.getResultTypes()[i], persistentFloatBytes);
    resultSlots[i] = take(bytes);
    outputBytes += bytes;
  }
  int64_t persistent = cursor;

  // Temporaries: live from their op to their last use.
  Temporaries temps = collectTemporaries(func, floatBytes);
  auto &intervals = temps.intervals;
  auto &intervalOf = temps.intervalOf;
  const int64_t n = temps.numOps, firstBackward = temps.firstBackward;
  auto root = [&](Value v) { return temps.root(v); };
  int64_t temporaries = assignOffsets(intervals);
  int64_t unshared = 0;
  for (const Interval &i : intervals)
    unshared += std::max<int64_t>(aligned(i.bytes), kArenaAlignment);

  // Forward values still needed by the backward pass (the activations a
  // training step keeps).
  int64_t saved = 0;
  if (firstBackward >= 0)
    for (const Interval &i : intervals)
      if (i.start < firstBackward && i.end >= firstBackward)
        saved += i.bytes;

  // Where the temporaries peak: the op at which the most bytes are live,
  // and the largest values live there (what a user over budget asks about).
  SmallVector<int64_t> liveDelta(n + 1, 0);
  for (const Interval &i : intervals) {
    liveDelta[i.start] += i.bytes;
    liveDelta[i.end + 1] -= i.bytes;
  }
  int64_t peakAt = -1, peakLive = 0, live = 0;
  for (int64_t k = 0; k < n; ++k)
    if ((live += liveDelta[k]) > peakLive)
      peakLive = live, peakAt = k;
  SmallVector<Attribute> peakValues;
  std::string peakOp;
  if (peakAt >= 0) {
    std::vector<const Interval *> atPeak;
    for (const Interval &i : intervals)
      if (i.start <= peakAt && peakAt <= i.end)
        atPeak.push_back(&i);
    llvm::stable_sort(atPeak, [](const Interval *a, const Interval *b) {
      return a->bytes > b->bytes;
    });
    peakOp = describePlanned(&*std::next(body.begin(), peakAt));
    for (const Interval *i : ArrayRef(atPeak).take_front(kPeakValuesReported)) {
      bool kept = firstBackward >= 0 && i->start < firstBackward && i->end >= firstBackward;
      peakValues.push_back(b.getDictionaryAttr({
          b.getNamedAttr("bytes", b.getI64IntegerAttr(i->bytes)),
          b.getNamedAttr("op", b.getStringAttr(describePlanned(i->value))),
          b.getNamedAttr("kept_for_backward", b.getBoolAttr(kept)),
      }));
    }
  }

  for (Operation &op : body.without_terminator()) {
    SmallVector<int64_t> offsets;
    for (Value r : op.getResults()) {
      Value base = root(r);
      auto it = intervalOf.find(base);
      if (it != intervalOf.end())
        offsets.push_back(persistent + intervals[it->second].offset);
      else if (argSlot.count(base))
        offsets.push_back(argSlot.lookup(base));
      else
        offsets.push_back(-1); // a view of a constant kept in the library
    }
    op.setAttr("tcc.offsets", b.getDenseI64ArrayAttr(offsets));
  }
  int64_t arenaBytes = persistent + temporaries;
  // A CUDA step also holds its constants (after the arena), the device
  // buffer its next micro-batch's inputs are uploaded into while the current
  // one runs (runtime/cuda/staging.cuh) and the CUDA runtime's own
  // allocations; the budget covers them.
  int64_t reserve = 0;
  if (mixed) {
    for (Operation &op : body.without_terminator())
      if (isStaticConstant(&op))
        reserve += aligned(std::max<int64_t>(bufferBytes(op.getResult(0).getType(), 4), 1));
    reserve += aligned(inputBytes) + kCudaRuntimeReserveBytes;
  }
  // The fp16 working copies and the GEMM workspace exist on CUDA only.
  if (!mixed) {
    shadows.clear();
    shadowBytes = 0;
    workspace = -1;
    workspaceBytes = 0;
  }
  func->setAttr(LayoutAttr::kAttrName,
                LayoutAttr::get(b.getContext(), arenaBytes, arenaBytes + reserve, reserve,
                                b.getDenseI64ArrayAttr(params), b.getDenseI64ArrayAttr(grads),
                                b.getDenseI64ArrayAttr(state), b.getDenseI64ArrayAttr(inputs),
                                b.getDenseI64ArrayAttr(resultSlots), paramBytes, gradBytes,
                                stateBytes, inputBytes, outputBytes, temporaries, unshared,
                                saved, seedSlot, rngSlot, peakLive, peakOp,
                                b.getArrayAttr(peakValues), b.getDenseI64ArrayAttr(shadows),
                                shadowBytes, workspace, workspaceBytes, hostCursor,
                                hostCursor ? b.getDenseI64ArrayAttr(hostParams) : nullptr,
                                hostCursor ? b.getDenseI64ArrayAttr(hostGrads) : nullptr,
                                hostCursor ? b.getDenseI64ArrayAttr(hostState) : nullptr,
                                hostParamBytes, hostGradBytes, hostStateBytes, shards));
  return arenaBytes + reserve;
}

namespace {

class PlanMemoryPass : public tcc::impl::PlanMemoryBase<PlanMemoryPass> {
public:
  using PlanMemoryBase::PlanMemoryBase;

  void runOnOperation() override {
    FailureOr<int64_t> resolved = resolveFloatBytes(getOperation(), floatBytesOption);
    if (failed(resolved))
      return signalPassFailure();
    floatBytes = *resolved;
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>())
      if (failed(plan(func)))
        return signalPassFailure();
  }

private:
  int64_t floatBytes = 4;

  LogicalResult plan(func::FuncOp func) {
    if (dataParallel < 1)
      return func.emitError("tcc-plan-memory: data-parallel=")
             << static_cast<int64_t>(dataParallel) << " is not a number of ranks (1 or more)";
    if (dataParallel > 1 && TiersAttr::of(func))
      return func.emitError("--data-parallel (ZeRO-1) and host memory tiers (--offload) "
                            "do not combine yet");
    int64_t arenaBytes = planFunction(func, floatBytes, statePerParam, dataParallel);
    int64_t limit = budget;
    if (limit > 0 && arenaBytes > limit)
      return reportOverBudget(func, limit);
    return success();
  }
};

} // namespace

FailureOr<int64_t> mlir::tcc::resolveFloatBytes(Operation *module, int64_t option) {
  TargetAttr target = TargetAttr::of(module);
  if (option > 0 && target && option != target.getFloatBytes())
    return module->emitError("float-bytes=")
           << option << " contradicts the module's target " << target << " ("
           << target.getFloatBytes() << " bytes per float)";
  if (option > 0)
    return option;
  return target ? target.getFloatBytes() : 4;
}

MemoryTimeline mlir::tcc::memoryTimeline(func::FuncOp func, int64_t floatBytes,
                                         bool placeOffsets) {
  Temporaries temps = collectTemporaries(func, floatBytes);
  if (placeOffsets)
    assignOffsets(temps.intervals);
  MemoryTimeline t;
  for (Operation &op : func.getBody().front())
    t.ops.push_back(&op);
  t.firstBackward = temps.firstBackward;
  for (const Interval &i : temps.intervals)
    t.temporaries.push_back({i.value, i.bytes, i.start, i.end, i.offset});
  return t;
}

std::vector<int64_t> MemoryTimeline::liveBytes() const {
  std::vector<int64_t> live(ops.size() + 1, 0);
  for (const PlannedTemporary &v : temporaries) {
    live[v.start] += v.bytes;
    live[v.end + 1] -= v.bytes;
  }
  for (size_t k = 1; k < live.size(); ++k)
    live[k] += live[k - 1];
  live.pop_back();
  return live;
}

/// "20230071040 bytes (18.8 GiB)": exact for scripts, readable for people.
static std::string sizeText(int64_t bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::string s = std::to_string(bytes) + " bytes";
  if (u > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%.1f %s)", v, units[u]);
    s += buf;
  }
  return s;
}

LogicalResult mlir::tcc::reportOverBudget(func::FuncOp func, int64_t budget) {
  LayoutAttr layout = LayoutAttr::of(func);
  if (!layout)
    return func.emitError("the step is over its budget of ") << budget << " bytes";
  // One short line, then what the step holds, what would fit and what to
  // try, each a note.
  InFlightDiagnostic diag = func.emitError()
                            << "the step needs " << sizeText(layout.getPlannedBytes())
                            << " but the budget is " << sizeText(budget);
  auto h = [](int64_t bytes) {
    std::string s = sizeText(bytes);
    size_t paren = s.find(" (");
    return paren == std::string::npos ? s : s.substr(paren + 2, s.size() - paren - 3);
  };
  diag.attachNote() << "it holds: parameters " << h(layout.getParamBytes()) << ", gradients "
                    << h(layout.getGradBytes()) << ", optimizer state " << h(layout.getStateBytes())
                    << ", inputs " << h(layout.getInputBytes()) << ", outputs "
                    << h(layout.getOutputBytes())
                    << (layout.getWorkspaceBytes() > 0
                            ? ", fp16 working copies " + h(layout.getShadowBytes()) +
                                  ", GEMM workspace " + h(layout.getWorkspaceBytes())
                            : std::string())
                    << (layout.getDeviceReserveBytes() > 0
                            ? ", constants, input staging and CUDA runtime reserve " +
                                  h(layout.getDeviceReserveBytes())
                            : std::string())
                    << ", activations and temporaries " << h(layout.getTemporaryBytes())
                    << " (" << h(layout.getSavedActivationBytes())
                    << " of them forward values kept for the backward pass)";
  diag.attachNote() << "the smallest budget this plan meets is "
                    << sizeText(layout.getPlannedBytes())
                    << (func->hasAttr("tcc.remat_decisions")
                            ? " after rematerialising " +
                                  std::to_string(func->getAttrOfType<ArrayAttr>(
                                                         "tcc.remat_decisions")
                                                     .size()) +
                                  " forward values"
                            : std::string())
                    << (layout.getHostBytes() > 0
                            ? ", with " + h(layout.getHostBytes()) +
                                  " of master weights, optimizer state and gradient "
                                  "accumulators in host memory"
                            : std::string());
  if (std::string peak = describePeak(layout); !peak.empty())
    diag.attachNote() << peak.substr(2); // without its leading "; "
  if (!TiersAttr::of(func) && TargetAttr::of(func) && TargetAttr::of(func).isCuda() &&
      layout.getStateBytes() > 0)
    diag.attachNote() << "--offload=auto may keep optimizer state in host memory instead";
  return diag;
}

std::string mlir::tcc::describePeak(LayoutAttr layout) {
  ArrayAttr values = layout ? layout.getPeakValues() : nullptr;
  if (!values || values.empty())
    return "";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "; activations and temporaries peak at " << layout.getPeakOp() << " with "
     << layout.getPeakLiveBytes() << " bytes live, the largest";
  for (auto [k, a] : llvm::enumerate(values.getAsRange<DictionaryAttr>()))
    os << (k ? ", " : " ") << a.getAs<IntegerAttr>("bytes").getInt() << " from "
       << a.getAs<StringAttr>("op").getValue()
       << (a.getAs<BoolAttr>("kept_for_backward").getValue() ? " (kept for the backward pass)"
                                                             : "");
  return s;
}
