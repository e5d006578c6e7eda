//===- Remat.cpp - recompute forward values to meet the memory budget -----===//
//
// The cost model (which values are candidates and how they score) is
// `RematCostModel`; the transformation is `rematerialize`/`undo`; the search
// (greedy, replanning after each try) is the pass.
//
//===----------------------------------------------------------------------===//

#include "passes/PlanMemory.h"
#include "passes/Passes.h"
#include "passes/fusion/FusionCostModel.h"
#include "passes/tiers/TierCostModel.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/ScopeExit.h"

#include <cmath>
#include <map>
#include <set>

namespace mlir::tcc {
#define GEN_PASS_DEF_REMAT
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// What recomputing a value costs and frees.
struct Candidate {
  Operation *op;
  int64_t bytes;   // bytes of the op's results that the backward pass keeps
  int64_t flops;   // work to recompute them
  bool gemm;       // a matrix product: tried only after every cheaper one
  int result = -1; // >= 0: only this result of a multi-output fusion
  SmallVector<Operation *> tail; // for `result`: the ops that recompute it (tailOf)
  double score() const { return (double)bytes / (double)std::max<int64_t>(flops, 1); }
};

/// Which forward ops may be recomputed, and at what cost. Matrix products
/// are the expensive work: they are candidates only after every cheaper
/// choice has been tried. Gathers (indices) and the loss never are.
struct RematCostModel {
  /// FLOPs to recompute `op` (CostOpInterface, the model --memory-report
  /// uses too), or std::nullopt when it is not a candidate.
  std::optional<int64_t> recomputeFlops(Operation *op) const {
    if (op->getNumResults() == 0 || op->hasTrait<OpTrait::ConstantLike>() ||
        op->hasTrait<OpTrait::tcc::ImportOnly>())
      return std::nullopt;
    auto cost = dyn_cast<CostOpInterface>(op);
    if (!cost || !cost.isRecomputable())
      return std::nullopt;
    return cost.getFlops();
  }
};

/// A recomputation that was applied: the clones (in program order) and the
/// uses they took over.
struct Applied {
  SmallVector<Operation *> clones;
  SmallVector<std::pair<OpOperand *, Value>> uses; // use, original value
  int64_t flops = 0;
};

/// Clones `op` before `before`, first cloning (recursively, up to `depth`)
/// the recomputable producers of operands that the forward pass already let
/// die, so a chain of cheap ops is recomputed from values that are still
/// live (parameters, inputs, saved activations).
static Value cloneChain(Operation *op, Operation *before, int64_t boundary,
                        llvm::DenseMap<Operation *, int64_t> &index,
                        const RematCostModel &model, IRMapping &map,
                        Applied &applied, int depth, unsigned resultNumber) {
  if (map.contains(op->getResult(0)))
    return map.lookup(op->getResult(resultNumber));
  for (Value operand : op->getOperands()) {
    Operation *producer = operand.getDefiningOp();
    if (!producer || depth == 0 || map.contains(operand) ||
        producer->hasTrait<OpTrait::ConstantLike>() ||
        FusionCostModel::isGemm(producer) || !model.recomputeFlops(producer))
      continue;
    bool diesInForward = llvm::all_of(operand.getUsers(), [&](Operation *u) {
      return index.lookup(u) < boundary;
    });
    if (diesInForward)
      cloneChain(producer, before, boundary, index, model, map, applied,
                 depth - 1, cast<OpResult>(operand).getResultNumber());
  }
  OpBuilder b(before);
  Operation *clone = b.clone(*op, map);
  clone->setAttr("tcc.remat", b.getUnitAttr());
  applied.clones.push_back(clone);
  applied.flops += model.recomputeFlops(op).value_or(0);
  return clone->getResult(resultNumber);
}

/// The uses of `values` at or after `boundary` (the backward pass's), and
/// in `first` the earliest op that makes one: where a recomputation goes.
static SmallVector<OpOperand *> lateUses(ValueRange values, int64_t boundary,
                                         llvm::DenseMap<Operation *, int64_t> &index,
                                         Operation *&first) {
  SmallVector<OpOperand *> late;
  first = nullptr;
  for (Value r : values)
    for (OpOperand &use : r.getUses()) {
      Operation *user = use.getOwner();
      // A gradient accumulated where it is made is not read late.
      if (index.lookup(user) < boundary || isEarlyAccumulation(use))
        continue;
      late.push_back(&use);
      if (!first || index.lookup(user) < index.lookup(first))
        first = user;
    }
  return late;
}

/// Recomputes `op` (and the chain feeding it) before the first of its uses
/// at or after `boundary` and moves those uses to the recomputed values.
static Applied rematerialize(Operation *op, int64_t boundary,
                             llvm::DenseMap<Operation *, int64_t> &index,
                             const RematCostModel &model) {
  Operation *first;
  SmallVector<OpOperand *> late = lateUses(op->getResults(), boundary, index, first);
  Applied applied;
  IRMapping map;
  cloneChain(op, first, boundary, index, model, map, applied, /*depth=*/6, 0);
  Operation *clone = applied.clones.back();
  for (OpOperand *use : late) {
    Value original = use->get();
    applied.uses.push_back({use, original});
    use->set(clone->getResult(cast<OpResult>(original).getResultNumber()));
  }
  return applied;
}

/// The ops of `fusion`'s body that compute its result `resultNumber` from
/// body arguments and the fusion's other results (the elementwise tail of a
/// multi-output fusion, such as the GELU after a GEMM whose pre-activation
/// is also a result), in program order; std::nullopt when that needs a
/// matrix product or the result is not computed in the body.
static std::optional<SmallVector<Operation *>> tailOf(FusionOp fusion,
                                                      unsigned resultNumber) {
  auto yield = cast<YieldOp>(fusion.getBody().front().getTerminator());
  Value target = yield.getValues()[resultNumber];
  llvm::SetVector<Operation *> ops;
  SmallVector<Value> work{target};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!def)
      continue; // a body argument: the fusion's input
    if (v != target && llvm::is_contained(yield.getValues(), v))
      continue; // another result of the fusion
    if (isa<MatMulOp>(def) || !FusionCostModel::isElementwise(def))
      return std::nullopt;
    if (ops.insert(def))
      llvm::append_range(work, def->getOperands());
  }
  if (ops.empty())
    return std::nullopt;
  SmallVector<Operation *> ordered(ops.begin(), ops.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

/// Recomputes only result `resultNumber` of `fusion` (its elementwise tail,
/// see tailOf) in a new fusion before the first of its uses at or after
/// `boundary`, reading the fusion's inputs and other results.
static Applied rematerializeTail(FusionOp fusion, unsigned resultNumber,
                                 ArrayRef<Operation *> tail, int64_t boundary,
                                 llvm::DenseMap<Operation *, int64_t> &index,
                                 const RematCostModel &model) {
  Value result = fusion.getResult(resultNumber);
  Operation *first;
  SmallVector<OpOperand *> late = lateUses(result, boundary, index, first);
  Block &body = fusion.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  // The tail's operands from outside it, as values outside the fusion.
  llvm::SetVector<Value> inner;
  SmallVector<Value> outer;
  for (Operation *op : tail)
    for (Value v : op->getOperands()) {
      if (v.getDefiningOp() && llvm::is_contained(tail, v.getDefiningOp()))
        continue;
      if (!inner.insert(v))
        continue;
      if (auto arg = dyn_cast<BlockArgument>(v))
        outer.push_back(fusion.getInputs()[arg.getArgNumber()]);
      else
        outer.push_back(fusion.getResult(
            llvm::find(yield.getValues(), v) - yield.getValues().begin()));
    }
  OpBuilder b(first);
  // The tail is elementwise ops only (tailOf): one loop.
  auto clone = b.create<FusionOp>(fusion.getLoc(), TypeRange{result.getType()}, outer,
                                  FusionKind::Loop);
  Block *block = b.createBlock(&clone.getBody());
  IRMapping map;
  for (Value v : inner)
    map.map(v, block->addArgument(v.getType(), v.getLoc()));
  b.setInsertionPointToStart(block);
  Applied applied;
  for (Operation *op : tail) {
    b.clone(*op, map);
    applied.flops += model.recomputeFlops(op).value_or(0);
  }
  b.create<YieldOp>(fusion.getLoc(), map.lookup(yield.getValues()[resultNumber]));
  clone->setAttr("tcc.remat", b.getUnitAttr());
  applied.clones.push_back(clone);
  for (OpOperand *use : late) {
    applied.uses.push_back({use, use->get()});
    use->set(clone.getResult(0));
  }
  return applied;
}

static void undo(Applied &a) {
  for (auto &[use, original] : a.uses)
    use->set(original);
  for (Operation *clone : llvm::reverse(a.clones))
    clone->erase();
}


class RematPass : public tcc::impl::RematBase<RematPass> {
public:
  using RematBase::RematBase;

  void runOnOperation() override {
    FailureOr<int64_t> resolved = resolveFloatBytes(getOperation(), floatBytesOption);
    if (failed(resolved))
      return signalPassFailure();
    floatBytes = *resolved;
    if (offload != "none" && offload != "auto" && offload != "optimizer" && offload != "all") {
      getOperation()->emitError("unknown offload \"")
          << offload << "\" (none, auto, optimizer or all)";
      return signalPassFailure();
    }
    TargetAttr target = TargetAttr::of(getOperation());
    if (offload != "none" && !(target && target.isCuda())) {
      getOperation()->emitError("offload=")
          << offload << " needs the CUDA target: the CPU target has one memory";
      return signalPassFailure();
    }
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>()) {
      if (func.getSymName() != kMicroStepName)
        continue;
      if (offload != "none") {
        if (policy != "greedy") {
          func.emitError("offload=") << offload << " plans with the greedy remat policy only";
          return signalPassFailure();
        }
        if (failed(chooseTiers(func, target)))
          return signalPassFailure();
      } else if (policy == "greedy") {
        if (budget > 0)
          searchWithFallback(func);
      } else if (policy == "checkpoint-every-layer" || policy == "checkpoint-sqrt") {
        checkpointSegments(func, policy == "checkpoint-sqrt");
      } else {
        func.emitError("unknown remat policy \"") << policy << "\"";
        return signalPassFailure();
      }
    }
  }

  /// The greedy search; where it cannot reach the budget, the fewest
  /// checkpointed layers that with the greedy search on the rest do, or
  /// else the segment schedules (sqrt(n) segments, then every layer)
  /// applied to the original step, the first that fits.
  void searchWithFallback(func::FuncOp func) {
    int64_t unplanned = planFunction(func, floatBytes, statePerParam, dataParallel);
    if (unplanned <= budget)
      return;
    func::FuncOp original = func.clone();
    auto eraseOriginal = llvm::make_scope_exit([&] { original.erase(); });
    // Recomputation frees temporaries only: where what is left without them
    // is over the budget, no search can meet it (on a 1B model it took
    // minutes for nothing). The segment schedules still give the
    // over-budget error the smallest plan they reach.
    if (unplanned - LayoutAttr::of(func).getTemporaryBytes() > budget) {
      segmentFallback(func, original, unplanned);
      return;
    }
    search(func);
    int64_t best = planFunction(func, floatBytes, statePerParam, dataParallel);
    if (best <= budget)
      return;
    // Checkpoint the fewest whole layers (from the first) that, with the
    // greedy search on the rest, meet the budget: binary search on the
    // count, each try a full greedy search.
    func::FuncOp probe = original.clone();
    int64_t layers = checkpointSegments(probe, false, 0);
    probe.erase();
    int64_t lo = 1, hi = layers, found = -1;
    while (lo <= hi) {
      int64_t mid = (lo + hi) / 2;
      func::FuncOp trial = original.clone();
      checkpointSegments(trial, false, mid);
      search(trial);
      if (planFunction(trial, floatBytes, statePerParam, dataParallel) <= budget) {
        found = mid;
        takePlan(func, trial);
        hi = mid - 1;
      } else {
        lo = mid + 1;
      }
      trial.erase();
    }
    if (found < 0) {
      segmentFallback(func, original, best);
      return;
    }
    // The fewest checkpointed layers need not recompute the least: the
    // greedy search on the rest may recompute more than a layer's forward
    // pass. Checkpointing one more layer, or every layer, is taken when it
    // fits and recomputes fewer FLOPs.
    for (int64_t count : {found + 1, layers}) {
      if (count > layers || count <= found)
        continue;
      func::FuncOp trial = original.clone();
      checkpointSegments(trial, false, count);
      if (count < layers)
        search(trial);
      if (planFunction(trial, floatBytes, statePerParam, dataParallel) <= budget &&
          recomputedFlops(trial) < recomputedFlops(func))
        takePlan(func, trial);
      trial.erase();
    }
    planFunction(func, floatBytes, statePerParam, dataParallel);
  }

  /// The segment schedules (sqrt(n) segments, then every layer) applied to
  /// `original`: the first that meets the budget, or else the smallest plan,
  /// replaces `func`'s plan (of `best` bytes) where it is smaller, so that an
  /// over-budget error names the smallest budget reached.
  void segmentFallback(func::FuncOp func, func::FuncOp original, int64_t best) {
    for (bool sqrtSegments : {true, false}) {
      func::FuncOp trial = original.clone();
      checkpointSegments(trial, sqrtSegments);
      int64_t planned = planFunction(trial, floatBytes, statePerParam, dataParallel);
      if (planned < best) {
        best = planned;
        takePlan(func, trial);
      }
      trial.erase();
      if (best <= budget)
        break;
    }
    planFunction(func, floatBytes, statePerParam, dataParallel);
  }

  /// Moves `from`'s body, plan and decisions into `into`.
  static void takePlan(func::FuncOp into, func::FuncOp from) {
    into.getBody().takeBody(from.getBody());
    for (StringRef attr : {StringRef(LayoutAttr::kAttrName), StringRef("tcc.remat_decisions"),
                           StringRef(TiersAttr::kAttrName)}) {
      into->removeAttr(attr);
      if (Attribute a = from->getAttr(attr))
        into->setAttr(attr, a);
    }
  }

  /// A plan with host tiers, tried by chooseTiers.
  struct TierTrial {
    func::FuncOp func;      // the planned copy (erased by the caller)
    int64_t planned = 0;    // device bytes
    int64_t hostBytes = 0;  // host bytes
    double seconds = 0;     // estimated seconds added (TierEstimate::addedSeconds(1))
    bool fits = false;
  };

  /// The host tiers and recomputation that meet the budget at the least
  /// estimated time (see the pass's description); sets `tcc.tiers` on
  /// `func`. Where nothing fits, keeps the smallest plan tried (the one with
  /// the most on the host), so the budget error names the smallest budget
  /// that works with host memory counted.
  LogicalResult chooseTiers(func::FuncOp func, TargetAttr target) {
    Builder b(func.getContext());
    DeviceRates device = deviceRatesForArch(target.getArch());
    int64_t hostLimit = hostBudget;
    if (hostLimit < 0)
      hostLimit = availableHostMemory().value_or(0);
    auto mbps = [](double gbps) { return std::max<int64_t>(1, (int64_t)std::llround(gbps * 1e3)); };
    if (pcieGbps <= 0 || hostGbps <= 0)
      return func.emitError("pcie-gbps and host-gbps must be positive");
    SmallVector<unsigned> candidates = hostTierCandidates(func);
    auto tiersFor = [&](size_t state, size_t grads) {
      SmallVector<int64_t> s(candidates.begin(), candidates.begin() + state);
      SmallVector<int64_t> g(candidates.begin(), candidates.begin() + grads);
      llvm::sort(s);
      llvm::sort(g);
      return TiersAttr::get(func.getContext(), b.getDenseI64ArrayAttr(s), b.getDenseI64ArrayAttr(g),
                            mbps(pcieGbps), mbps(hostGbps),
                            std::max<int64_t>(1, (int64_t)(device.flopsPerSecond / 1e9)),
                            std::max<int64_t>(1, (int64_t)(device.bytesPerSecond / 1e6)),
                            hostLimit);
    };
    // A trial: the tiers of the first `state` candidates' state and the
    // first `grads` candidates' accumulators, recomputation on top.
    auto trial = [&](size_t state, size_t grads) {
      TierTrial t;
      t.func = func.clone();
      t.func->setAttr(TiersAttr::kAttrName, tiersFor(state, grads));
      t.planned = planFunction(t.func, floatBytes, statePerParam, dataParallel);
      // Recomputation frees temporaries only: where the rest alone is over
      // the budget, the search is not run (it would be minutes on a large
      // model for nothing).
      int64_t fixed = t.planned - LayoutAttr::of(t.func).getTemporaryBytes();
      if (budget > 0 && t.planned > budget && fixed <= budget) {
        searchWithFallback(t.func);
        t.planned = planFunction(t.func, floatBytes, statePerParam, dataParallel);
      }
      t.hostBytes = LayoutAttr::of(t.func).getHostBytes();
      t.seconds = estimateTiers(t.func, TiersAttr::of(t.func), floatBytes, statePerParam)
                      .addedSeconds(1);
      t.fits = (budget <= 0 || t.planned <= budget) && t.hostBytes <= hostLimit;
      return t;
    };
    // A point in the order (each candidate's state, then each one's
    // accumulator): the first `k` steps taken.
    size_t n = candidates.size();
    auto split = [&](size_t k) { return std::make_pair(std::min(k, n), k > n ? k - n : 0); };
    SmallVector<size_t> points;
    if (offload == "optimizer") {
      points.push_back(n);
    } else if (offload == "all") {
      points.push_back(2 * n);
    } else {
      // auto: how far along the order the plan fits without recomputation
      // (from the bytes each step frees: a parameter's master weights and
      // state, then its accumulator); none, and fractions of that.
      int64_t over = planFunction(func, floatBytes, statePerParam, dataParallel) - budget;
      size_t needed = 0;
      for (int64_t freed = 0; budget > 0 && freed < over && needed < 2 * n; ++needed) {
        int64_t bytes = bufferBytes(func.getArgument(candidates[needed % n]).getType(), 4);
        freed += needed < n ? bytes * (1 + statePerParam) : bytes;
      }
      for (size_t k : {size_t(0), needed / 4, needed / 2, 3 * needed / 4, needed})
        if (points.empty() || k != points.back())
          points.push_back(k);
    }
    SmallVector<TierTrial> trials;
    std::optional<size_t> best;
    for (size_t k : points) {
      auto [state, grads] = split(k);
      // More host state only adds transfer time: once the tiers alone cost
      // more than the best plan, no later one can win.
      if (best && estimateTiers(func, tiersFor(state, grads), floatBytes, statePerParam)
                          .tierSeconds(1) >= trials[*best].seconds)
        break;
      trials.push_back(trial(state, grads));
      if (trials.back().fits && (!best || trials.back().seconds < trials[*best].seconds))
        best = trials.size() - 1;
    }
    size_t chosen = 0;
    if (best)
      chosen = *best;
    else
      for (size_t i = 1; i < trials.size(); ++i)
        if (trials[i].planned < trials[chosen].planned)
          chosen = i;
    takePlan(func, trials[chosen].func);
    for (TierTrial &t : trials)
      t.func.erase();
    if (trials[chosen].hostBytes > hostLimit)
      return func.emitError("the plan needs ")
             << trials[chosen].hostBytes << " bytes of host memory but the host budget is "
             << hostLimit << " bytes";
    return success();
  }

  /// The FLOPs `func`'s remat decisions recompute.
  static int64_t recomputedFlops(func::FuncOp func) {
    int64_t total = 0;
    if (auto decisions = func->getAttrOfType<ArrayAttr>("tcc.remat_decisions"))
      for (Attribute a : decisions)
        if (auto flops = cast<DictionaryAttr>(a).getAs<IntegerAttr>("flops"))
          total += flops.getInt();
    return total;
  }

  /// The block a node belongs to, from its name: /h.3/attn/MatMul -> 3.
  static std::optional<int64_t> blockOf(Operation *op) {
    std::string name = nodeNameOf(op->getLoc());
    if (name.size() < 2 || name[0] != '/')
      return std::nullopt;
    StringRef first = StringRef(name).drop_front().split('/').first;
    auto [prefix, number] = first.rsplit('.');
    int64_t block;
    if (prefix.empty() || number.getAsInteger(10, block))
      return std::nullopt;
    return block;
  }

  /// The reference schedules: keep each segment's inputs, recompute the
  /// segment's whole forward pass once, before the first backward op that
  /// needs any of its values.
  /// Checkpoints the first `limit` segments only (all when negative);
  /// returns how many segments the step has.
  int64_t checkpointSegments(func::FuncOp func, bool sqrtSegments,
                             int64_t limit = -1) {
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> index;
    std::optional<int64_t> boundary = numberStepOps(body, index);
    if (!boundary)
      return 0;
    std::map<int64_t, SmallVector<Operation *>> blocks;
    int64_t numBlocks = 0;
    for (Operation &op : body) {
      if (index[&op] >= *boundary || op.hasTrait<OpTrait::ConstantLike>())
        continue;
      if (std::optional<int64_t> blk = blockOf(&op)) {
        blocks[*blk].push_back(&op);
        numBlocks = std::max(numBlocks, *blk + 1);
      }
    }
    int64_t per = sqrtSegments
                      ? std::max<int64_t>(1, (int64_t)std::ceil(std::sqrt((double)numBlocks)))
                      : 1;
    std::map<int64_t, SmallVector<Operation *>> segments;
    for (auto &[blk, ops] : blocks)
      llvm::append_range(segments[blk / per], ops);
    Builder b(func.getContext());
    SmallVector<Attribute> decisions;
    int64_t done = 0;
    for (auto &[segment, ops] : segments) {
      if (limit >= 0 && done++ >= limit)
        break;
      llvm::DenseSet<Operation *> inSegment(ops.begin(), ops.end());
      Operation *first = nullptr;
      int64_t kept = 0;
      for (Operation *op : ops)
        for (Value r : op->getResults()) {
          bool late = false;
          for (Operation *u : r.getUsers())
            if (index.lookup(u) >= *boundary) {
              late = true;
              if (!first || index.lookup(u) < index.lookup(first))
                first = u;
            }
          if (late)
            kept += bufferBytes(r.getType(), floatBytes);
        }
      if (!first)
        continue;
      OpBuilder builder(first);
      IRMapping map;
      int64_t flops = 0;
      for (Operation *op : ops) {
        Operation *clone = builder.clone(*op, map);
        clone->setAttr("tcc.remat", builder.getUnitAttr());
        flops += RematCostModel{}.recomputeFlops(op).value_or(
            op->getNumResults()
                ? cast<RankedTensorType>(op->getResult(0).getType()).getNumElements()
                : 0);
      }
      for (Operation *op : ops)
        for (Value r : op->getResults())
          for (OpOperand &use : llvm::make_early_inc_range(r.getUses()))
            if (index.lookup(use.getOwner()) >= *boundary)
              use.set(map.lookup(r));
      decisions.push_back(b.getDictionaryAttr({
          b.getNamedAttr("segment", b.getI64IntegerAttr(segment)),
          b.getNamedAttr("ops", b.getI64IntegerAttr(ops.size())),
          b.getNamedAttr("bytes", b.getI64IntegerAttr(kept)),
          b.getNamedAttr("flops", b.getI64IntegerAttr(flops)),
          b.getNamedAttr("reason", b.getStringAttr(sqrtSegments
                                                        ? "checkpoint-sqrt segment"
                                                        : "checkpoint-every-layer block")),
      }));
    }
    planFunction(func, floatBytes, statePerParam, dataParallel);
    if (!decisions.empty())
      func->setAttr("tcc.remat_decisions", b.getArrayAttr(decisions));
    return segments.size();
  }

private:
  /// The most bytes of temporaries live at once (aligned sizes): a lower
  /// bound of the temporaries' region that costs O(ops) to compute, used to
  /// judge each try; the full plan (offsets) runs once per round.
  int64_t liveTemporaries(func::FuncOp func) const {
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> index;
    int64_t n = 0;
    for (Operation &op : body)
      index[&op] = n++;
    // As tcc-plan-memory sees it: a view (reshape, ...) is its root's bytes
    // and keeps the root alive until its own last use.
    llvm::DenseMap<Value, Value> rootOf;
    llvm::DenseMap<Value, std::pair<int64_t, int64_t>> range; // start, end
    SmallVector<Value> roots;
    auto bufferOf = [&](Value v) { return rootOf.count(v) ? rootOf.lookup(v) : v; };
    for (Operation &op : body.without_terminator()) {
      if (isStaticConstant(&op))
        continue;
      for (Value r : op.getResults()) {
        int64_t end = index[&op];
        for (OpOperand &use : r.getUses())
          end = std::max(end, bufferNeededUntil(use, index[&op], index));
        unsigned k = cast<OpResult>(r).getResultNumber();
        std::optional<unsigned> inPlace = inPlaceOperand(
            &op, k, bufferOf, [&](Value v) { return range.count(v) != 0; }, index, floatBytes);
        if (isAliasView(&op) || inPlace) {
          Value root = bufferOf(op.getOperand(inPlace ? *inPlace : 0));
          rootOf[r] = root;
          auto it = range.find(root);
          if (it != range.end())
            it->second.second = std::max(it->second.second, end);
          continue;
        }
        range[r] = {index[&op], end};
        roots.push_back(r);
      }
    }
    std::vector<int64_t> delta(n + 2, 0);
    for (Value r : roots) {
      auto [start, end] = range.lookup(r);
      int64_t bytes = std::max<int64_t>(
          (valueBytes(r, floatBytes) + kArenaAlignment - 1) / kArenaAlignment *
              kArenaAlignment,
          kArenaAlignment);
      delta[start] += bytes;
      delta[end + 1] -= bytes;
    }
    int64_t live = 0, peak = 0;
    for (int64_t d : delta)
      peak = std::max(peak, live += d);
    return peak;
  }


  void search(func::FuncOp func) {
    RematCostModel model;
    Builder b(func.getContext());
    int64_t planned = planFunction(func, floatBytes, statePerParam, dataParallel);
    SmallVector<Attribute> decisions;
    std::set<std::pair<Operation *, int>> tried;
    // Rounds: a greedy search on the live-bytes bound towards the budget,
    // then the full plan; fragmentation (plan minus bound) measured anew.
    for (int round = 0; planned > budget && round < 8; ++round) {
      int64_t temporaries = LayoutAttr::of(func).getTemporaryBytes();
      int64_t persistent = planned - temporaries;
      int64_t live = liveTemporaries(func);
      int64_t fragmentation = temporaries - live;
      int64_t target = budget - persistent - fragmentation;
      size_t before = decisions.size();
      // A round after the first is undone where it does not lower the plan
      // (its recomputation moved the fragmentation instead), and ends the
      // search: on a 1B model most rounds only added decisions.
      func::FuncOp previous = round > 0 ? func.clone() : func::FuncOp();
      auto erasePrevious = llvm::make_scope_exit([&] {
        if (previous)
          previous.erase();
      });
      int64_t previousPlanned = planned;
      // A candidate rejected in an earlier round may fit now (a value it
      // reads became saved for another reason, say): each round tries all.
      tried.clear();
      while (live > target) {
        Block &body = func.getBody().front();
        llvm::DenseMap<Operation *, int64_t> index;
        std::optional<int64_t> numbered = numberStepOps(body, index);
        if (!numbered)
          break;
        int64_t boundary = *numbered;
        Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp();

        auto keptByBackward = [&](Value r) {
          return llvm::any_of(r.getUses(), [&](OpOperand &use) {
            return index.lookup(use.getOwner()) >= boundary && !isEarlyAccumulation(use);
          });
        };
        SmallVector<Candidate> candidates;
        for (Operation &op : body) {
          if (index[&op] >= boundary || &op == lossOp)
            continue;
          // One result of a multi-output fusion: its elementwise tail,
          // recomputed from the fusion's inputs and other results (the
          // activation of a GEMM epilogue, from the pre-activation). Under
          // mixed precision the copy can differ from the original in the
          // last fp16 bit: the epilogue computed it from the fp32
          // pre-activation, the copy reads the stored fp16 one.
          if (auto fusion = dyn_cast<FusionOp>(op); fusion && op.getNumResults() > 1)
            for (unsigned i = 0; i < op.getNumResults(); ++i) {
              if (tried.count({&op, (int)i}) || !keptByBackward(op.getResult(i)))
                continue;
              if (std::optional<SmallVector<Operation *>> tail = tailOf(fusion, i)) {
                int64_t flops = 0;
                for (Operation *t : *tail)
                  flops += model.recomputeFlops(t).value_or(0);
                candidates.push_back({&op, valueBytes(op.getResult(i), floatBytes),
                                      flops, false, (int)i, std::move(*tail)});
              }
            }
          if (tried.count({&op, -1}))
            continue;
          std::optional<int64_t> flops = model.recomputeFlops(&op);
          if (!flops)
            continue;
          int64_t kept = 0;
          for (Value r : op.getResults())
            if (keptByBackward(r))
              kept += valueBytes(r, floatBytes);
          if (kept > 0)
            candidates.push_back({&op, kept, *flops, FusionCostModel::isGemm(&op)});
        }
        if (candidates.empty())
          break;
        // Cheap ops before matrix products, then best score first, ties by
        // program order (deterministic).
        llvm::stable_sort(candidates, [&](const Candidate &a, const Candidate &c) {
          if (a.gemm != c.gemm)
            return !a.gemm;
          if (a.score() != c.score())
            return a.score() > c.score();
          return index[a.op] < index[c.op];
        });
        // One pass down the list: each candidate that does not raise the
        // bound is kept, and the list is made anew only when the pass is
        // over (making it after each kept candidate was quadratic in the
        // op count: minutes on a 1B model). A candidate that an earlier one
        // in the pass left without a late reader is passed over.
        bool kept = false;
        for (const Candidate &c : candidates) {
          if (live <= target)
            break;
          tried.insert({c.op, c.result});
          if (kept && (c.result >= 0 ? !keptByBackward(c.op->getResult(c.result))
                                     : llvm::none_of(c.op->getResults(), keptByBackward)))
            continue;
          Applied a = c.result >= 0
                          ? rematerializeTail(cast<FusionOp>(c.op), c.result, c.tail,
                                              boundary, index, model)
                          : rematerialize(c.op, boundary, index, model);
          int64_t after = liveTemporaries(func);
          // Kept when the bound does not grow: one value rarely lowers the
          // peak alone (other saved values hold it), but each one dropped
          // lowers what the forward pass leaves live.
          if (after <= live) {
            decisions.push_back(b.getDictionaryAttr({
                b.getNamedAttr("op", b.getStringAttr(c.op->getName().getStringRef())),
                b.getNamedAttr("location", b.getStringAttr(nodeNameOf(c.op->getLoc()))),
                b.getNamedAttr("bytes", b.getI64IntegerAttr(c.bytes)),
                b.getNamedAttr("flops", b.getI64IntegerAttr(a.flops)),
                b.getNamedAttr("ops", b.getI64IntegerAttr(a.clones.size())),
                b.getNamedAttr("live_temporaries_after", b.getI64IntegerAttr(after)),
                b.getNamedAttr("reason", b.getStringAttr(
                    c.gemm ? "saved matmul output: no cheaper recomputation "
                             "is left"
                    : c.result >= 0
                        ? "saved activation with the most bytes per recomputed "
                          "FLOP: the elementwise tail of a multi-output fusion, "
                          "recomputed from its other results"
                        : "saved activation with the most bytes per "
                          "recomputed FLOP")),
            }));
            live = after;
            kept = true;
            // The clones are numbered as the op they were inserted before
            // (a backward one), so later candidates see them as late readers.
            for (Operation *clone : a.clones) {
              Operation *next = clone->getNextNode();
              while (next && !index.count(next))
                next = next->getNextNode();
              index[clone] = next ? index.lookup(next) : boundary;
            }
            continue;
          }
          undo(a);
        }
        if (!kept)
          break;
      }
      planned = planFunction(func, floatBytes, statePerParam, dataParallel);
      if (decisions.size() == before)
        break; // nothing more to recompute
      if (previous && planned >= previousPlanned) {
        takePlan(func, previous);
        decisions.resize(before);
        planned = previousPlanned;
        break;
      }
    }
    if (!decisions.empty()) {
      // After a partial segment schedule: its decisions come first.
      SmallVector<Attribute> all;
      if (auto earlier = func->getAttrOfType<ArrayAttr>("tcc.remat_decisions"))
        all.assign(earlier.begin(), earlier.end());
      all.append(decisions.begin(), decisions.end());
      func->setAttr("tcc.remat_decisions", b.getArrayAttr(all));
    }
  }

  /// float-bytes, resolved against the module's target (resolveFloatBytes).
  int64_t floatBytes = 4;
};

} // namespace
