//===- SwapActivations.cpp - swap saved activations to host memory --------===//
//
// tcc-swap-activations (Passes.td): where tcc-remat recomputes a forward
// value for the backward pass, copy it to pinned host memory after the
// forward pass makes it and back before the backward pass reads it. The
// candidates are found from remat's clones (`originalOf`), the choice is
// made by the tier cost model's SwapEstimate, and the rewrite is `swap`.
//
//===----------------------------------------------------------------------===//

#include "passes/PlanMemory.h"
#include "passes/Passes.h"
#include "passes/tiers/TierCostModel.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_SWAPACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// Ops the copy out may take before the step reuses the value's buffer
/// (the value lives in the plan until its tcc.swap_wait), and ops ahead of
/// the first backward reader that the copy back is queued.
constexpr int64_t kSwapOutLagOps = 2;
constexpr int64_t kSwapInLeadOps = 2;

constexpr llvm::StringLiteral kRematAttr = "tcc.remat";

bool isSwapOp(Operation *op) { return isa<SwapOutOp, SwapInOp, SwapWaitOp>(op); }

/// The forward op each of tcc-remat's clones copies: same name, operands
/// (a cloned operand standing for its original), result types, attributes
/// (but the clone's mark and the plan's offsets) and regions.
class CloneOrigins {
public:
  CloneOrigins(const llvm::DenseMap<Operation *, int64_t> &index, int64_t boundary)
      : index(index), boundary(boundary) {}

  /// The forward op `clone` recomputes, or null when none matches.
  Operation *originalOf(Operation *clone) {
    if (auto it = memo.find(clone); it != memo.end())
      return it->second;
    memo[clone] = nullptr;
    SmallVector<Value> operands;
    for (Value x : clone->getOperands()) {
      Operation *def = x.getDefiningOp();
      if (def && def->hasAttr(kRematAttr)) {
        Operation *original = originalOf(def);
        if (!original)
          return nullptr;
        operands.push_back(original->getResult(cast<OpResult>(x).getResultNumber()));
      } else {
        operands.push_back(x);
      }
    }
    if (operands.empty())
      return nullptr;
    for (Operation *candidate : operands.front().getUsers())
      if (matches(candidate, clone, operands))
        return memo[clone] = candidate;
    return nullptr;
  }

private:
  bool matches(Operation *candidate, Operation *clone, ArrayRef<Value> operands) const {
    if (candidate == clone || candidate->hasAttr(kRematAttr) ||
        index.lookup(candidate) >= boundary || candidate->getName() != clone->getName() ||
        !llvm::equal(candidate->getOperands(), operands) ||
        candidate->getResultTypes() != clone->getResultTypes() ||
        candidate->getPropertiesAsAttribute() != clone->getPropertiesAsAttribute() ||
        candidate->getNumRegions() != clone->getNumRegions())
      return false;
    auto kept = [](Operation *op) {
      SmallVector<NamedAttribute> attrs;
      for (NamedAttribute a : op->getDiscardableAttrs())
        if (a.getName() != kRematAttr && a.getName() != "tcc.offsets")
          attrs.push_back(a);
      return attrs;
    };
    if (kept(candidate) != kept(clone))
      return false;
    for (auto [a, b] : llvm::zip(candidate->getRegions(), clone->getRegions()))
      if (!OperationEquivalence::isRegionEquivalentTo(&a, &b,
                                                      OperationEquivalence::IgnoreLocations))
        return false;
    return true;
  }

  const llvm::DenseMap<Operation *, int64_t> &index;
  int64_t boundary;
  llvm::DenseMap<Operation *, Operation *> memo;
};

/// The forward values to swap, each with the backward ops' uses of the
/// clones' results that stand for it, in the order the clones come.
using Swaps = llvm::MapVector<Value, SmallVector<OpOperand *>>;

/// The bytes `swaps` move each way.
int64_t swapBytes(const Swaps &swaps) {
  int64_t bytes = 0;
  for (auto &[value, uses] : swaps)
    bytes += valueBytes(value, kMixedPrecision);
  return bytes;
}

class SwapActivationsPass : public tcc::impl::SwapActivationsBase<SwapActivationsPass> {
public:
  using SwapActivationsBase::SwapActivationsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (mode != "none" && mode != "auto" && mode != "all") {
      module.emitError("tcc-swap-activations: unknown mode \"") << mode << "\" (none, auto or all)";
      return signalPassFailure();
    }
    if (mode == "none")
      return;
    TargetAttr target = TargetAttr::of(module);
    if (!target || !target.isCuda()) {
      module.emitError("tcc-swap-activations needs the CUDA target: the CPU target has one memory");
      return signalPassFailure();
    }
    if (!(pcieGbps > 0)) {
      module.emitError("tcc-swap-activations: pcie-gbps must be positive");
      return signalPassFailure();
    }
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (func.getSymName() == kMicroStepName)
        run(func, target);
  }

private:
  /// The loss op of a training step (it ends the forward pass), or null.
  static Operation *lossOf(func::FuncOp func) {
    Operation *ret = func.getBody().front().getTerminator();
    return ret->getNumOperands() ? ret->getOperand(0).getDefiningOp() : nullptr;
  }

  /// The forward values of `func` that remat's clones stand for, in the
  /// order their clones come, with their backward uses.
  static Swaps candidates(func::FuncOp func, Operation *lossOp) {
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> index;
    const int64_t boundary = *numberStepOps(body, index);
    CloneOrigins origins(index, boundary);
    Swaps swaps;
    for (Operation &op : body) {
      if (!op.hasAttr(kRematAttr))
        continue;
      Operation *original = origins.originalOf(&op);
      if (!original)
        continue;
      for (OpResult r : op.getResults())
        for (OpOperand &use : r.getUses())
          if (!use.getOwner()->hasAttr(kRematAttr))
            swaps[original->getResult(r.getResultNumber())].push_back(&use);
    }
    // A value the backward pass also reads directly (or through views)
    // stays on the device anyway: swapping it would only add copies. The
    // loss, and views of arguments or of constants kept in the library,
    // are not the forward pass's activations.
    std::function<bool(Value)> readLate = [&](Value v) {
      return llvm::any_of(v.getUsers(), [&](Operation *u) {
        if (u->hasAttr(kRematAttr))
          return false;
        return index.lookup(u) >= boundary || (isAliasView(u) && readLate(u->getResult(0)));
      });
    };
    swaps.remove_if([&](const std::pair<Value, SmallVector<OpOperand *>> &s) {
      Value root = viewRoot(s.first);
      Operation *rootDef = root.getDefiningOp();
      return readLate(s.first) || s.first.getDefiningOp() == lossOp || !rootDef ||
             isStaticConstant(rootDef);
    });
    return swaps;
  }

  void run(func::FuncOp func, TargetAttr target) {
    Operation *lossOp = lossOf(func);
    if (!lossOp)
      return;
    Swaps swaps = candidates(func, lossOp);
    if (swaps.empty())
      return;
    SwapEstimate e = estimateSwap(func, swapBytes(swaps), pcieGbps, statePerParam);
    const size_t found = swaps.size();
    Builder b(func.getContext());
    auto record = [&](size_t swapped) {
      func->setAttr("tcc.swaps",
                    b.getDictionaryAttr({
                        b.getNamedAttr("mode", b.getStringAttr(mode)),
                        b.getNamedAttr("swapped", b.getBoolAttr(swapped > 0)),
                        b.getNamedAttr("values", b.getI64IntegerAttr(swapped)),
                        b.getNamedAttr("candidates", b.getI64IntegerAttr(found)),
                        b.getNamedAttr("bytes", b.getI64IntegerAttr(e.bytes)),
                        b.getNamedAttr("copy_seconds_each_way", b.getF64FloatAttr(e.copySeconds)),
                        b.getNamedAttr("exposed_copy_seconds", b.getF64FloatAttr(e.exposedSeconds())),
                        b.getNamedAttr("recompute_seconds", b.getF64FloatAttr(e.recomputeSeconds)),
                        b.getNamedAttr("link_busy_seconds", b.getF64FloatAttr(e.linkBusySeconds)),
                        b.getNamedAttr("pcie_gbps", b.getF64FloatAttr(e.pcieBytesPerSecond / 1e9)),
                        b.getNamedAttr("swap_pays", b.getBoolAttr(e.pays())),
                    }));
    };
    if (mode == "auto" && !e.pays()) {
      record(0);
      return;
    }
    int64_t hostLimit = hostBudget >= 0 ? int64_t(hostBudget) : availableHostMemory().value_or(0);
    if (mode == "all") {
      swap(func, swaps, lossOp);
      planFunction(func, kMixedPrecision, statePerParam, dataParallel);
      int64_t hostBytes = LayoutAttr::of(func).getHostBytes();
      if (hostBytes > hostLimit) {
        func.emitError("swapping activations needs ")
            << hostBytes << " bytes of host memory but the host budget is " << hostLimit
            << " bytes";
        return signalPassFailure();
      }
      record(found);
      return;
    }
    // auto: the copies keep each value a few ops longer than the
    // recomputing plan does, and the values take host memory. Where
    // swapping every candidate is over either budget, the most candidates
    // (the first ones, in the order of their clones) that fit, by
    // bisection, if they pay by themselves; else the recomputing plan
    // stays. The record gives the estimate of what was swapped.
    func::FuncOp recomputing = func.clone();
    DeviceRates rates = deviceRatesForArch(target.getArch());
    const double recomputeBefore = recomputeSeconds(recomputing, rates);
    SwapEstimate chosen = e; // of the swaps taken
    auto trial = [&](size_t k, SwapEstimate &sub) -> func::FuncOp {
      func::FuncOp t = recomputing.clone();
      Operation *loss = lossOf(t);
      Swaps some = candidates(t, loss);
      while (some.size() > k)
        some.pop_back();
      int64_t bytes = swapBytes(some);
      swap(t, some, loss);
      sub = e.with(bytes, recomputeBefore - recomputeSeconds(t, rates));
      int64_t planned = planFunction(t, kMixedPrecision, statePerParam, dataParallel);
      if ((budget <= 0 || planned <= budget) && LayoutAttr::of(t).getHostBytes() <= hostLimit)
        return t;
      t.erase();
      return func::FuncOp();
    };
    size_t taken = 0;
    SwapEstimate sub;
    func::FuncOp best = trial(found, sub);
    if (best) {
      taken = found;
      chosen = sub;
    } else {
      size_t lo = 1, hi = found - 1;
      while (lo <= hi && hi > 0) {
        size_t mid = (lo + hi) / 2;
        if (func::FuncOp t = trial(mid, sub)) {
          if (best)
            best.erase();
          best = t;
          taken = mid;
          chosen = sub;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
    }
    // The swaps taken must pay by themselves (the first candidates may
    // save little recomputation).
    if (best && !chosen.pays()) {
      best.erase();
      best = func::FuncOp();
      taken = 0;
      chosen = e;
    }
    if (best) {
      func.getBody().takeBody(best.getBody());
      best.erase();
    }
    recomputing.erase();
    e = chosen;
    record(taken);
  }

  /// The op `count` ops after `op` that are not swap ops, stopping before
  /// the terminator.
  static Operation *after(Operation *op, int64_t count) {
    Operation *at = op;
    while (count > 0) {
      Operation *next = at->getNextNode();
      if (!next || next->hasTrait<OpTrait::IsTerminator>())
        break;
      at = next;
      if (!isSwapOp(at))
        --count;
    }
    return at;
  }

  /// The op `count` ops before `op` that are neither swap ops nor remat
  /// clones, staying after `limit`.
  static Operation *before(Operation *op, int64_t count, Operation *limit) {
    Operation *at = op;
    while (count > 0) {
      Operation *prev = at->getPrevNode();
      if (!prev || prev == limit)
        break;
      at = prev;
      if (!isSwapOp(at) && !at->hasAttr(kRematAttr))
        --count;
    }
    return at;
  }

  /// Rewrites `func` to swap `swaps`' values; `lossOp` ends the forward
  /// pass.
  static void swap(func::FuncOp func, Swaps &swaps, Operation *lossOp) {
    Block &body = func.getBody().front();
    OpBuilder b(func.getContext());
    int64_t id = 0;
    for (auto &[value, uses] : swaps) {
      Operation *def = value.getDefiningOp();
      Location loc = value.getLoc();
      b.setInsertionPointAfter(def);
      auto out = b.create<SwapOutOp>(loc, value, b.getI64IntegerAttr(id));
      // The copy out is waited for kSwapOutLagOps ops on, and not after the
      // forward pass.
      Operation *waitAfter = after(out, kSwapOutLagOps);
      b.setInsertionPointAfter(lossOp->isBeforeInBlock(waitAfter) ? lossOp : waitAfter);
      auto outWait = b.create<SwapWaitOp>(loc, value, b.getI64IntegerAttr(id));
      // The copy back, kSwapInLeadOps ops ahead of the first reader.
      Operation *first = uses.front()->getOwner();
      for (OpOperand *use : uses)
        if (use->getOwner()->isBeforeInBlock(first))
          first = use->getOwner();
      // Not before the wait for the copy out: the copy back reads what it
      // wrote.
      b.setInsertionPoint(before(first, kSwapInLeadOps, outWait));
      auto in = b.create<SwapInOp>(loc, out.getHost(), b.getI64IntegerAttr(id));
      b.setInsertionPoint(first);
      b.create<SwapWaitOp>(loc, in.getValue(), b.getI64IntegerAttr(id));
      for (OpOperand *use : uses)
        use->set(in.getValue());
      ++id;
    }
    // The clones nothing reads any more.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (op.hasAttr(kRematAttr) && op.use_empty())
        op.erase();
    // Number the swaps in the order their copies out are queued.
    llvm::DenseMap<int64_t, int64_t> number;
    for (Operation &op : body)
      if (auto o = dyn_cast<SwapOutOp>(op))
        number.try_emplace(o.getSwap(), number.size());
    for (Operation &op : body)
      if (isSwapOp(&op))
        op.setAttr("swap", b.getI64IntegerAttr(
                               number.lookup(op.getAttrOfType<IntegerAttr>("swap").getInt())));
  }
};

} // namespace
