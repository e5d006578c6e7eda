//===- Fuse.cpp - elementwise loop fusion into tcc.fusion -----------------===//

#include "passes/PlanMemory.h"
#include "passes/Passes.h"
#include "passes/fusion/FusionCostModel.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_FUSE
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// The step's ops (static constants are data, not ops), and of those the
/// ones that become kernels (views share their operand's buffer).
static int64_t countOps(Block &body, bool kernelsOnly) {
  int64_t n = 0;
  for (Operation &op : body.without_terminator())
    if (!isStaticConstant(&op) && !(kernelsOnly && isAliasView(&op)))
      ++n;
  return n;
}

class FusePass : public tcc::impl::FuseBase<FusePass> {
public:
  using FuseBase::FuseBase;

  void runOnOperation() override {
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>())
      fuse(func);
  }

private:
  void fuse(func::FuncOp func) {
    FusionCostModel model(maxOps);
    Builder b(func.getContext());
    Block &body = func.getBody().front();
    int64_t opsBefore = countOps(body, /*kernelsOnly=*/false);
    SmallVector<Attribute> decisions;
    auto record = [&](Operation *op, const FusionDecision &d, int64_t group) {
      decisions.push_back(b.getDictionaryAttr({
          b.getNamedAttr("op", b.getStringAttr(op->getName().getStringRef())),
          b.getNamedAttr("fused", b.getBoolAttr(d.fuse)),
          b.getNamedAttr("group", b.getI64IntegerAttr(group)),
          b.getNamedAttr("reason", b.getStringAttr(d.reason)),
      }));
    };

    // GEMM prologues first: a transpose of the last two dimensions that a
    // matmul reads goes into a fusion with the matmul (one GEMM kernel that
    // reads the operand transposed). The transpose is cloned, so one with
    // other readers stays for them; a GEMM is never duplicated.
    int64_t gemmFusions = 0;
    // A transpose of a GEMM's result (a weight gradient, (x^T dy)^T) is the
    // GEMM of the transposed operands in the other order: (AB)^T = B^T A^T,
    // whose transposes the prologue below folds.
    for (TransposeOp t : llvm::make_early_inc_range(body.getOps<TransposeOp>())) {
      auto mm = t.getInput().getDefiningOp<MatMulOp>();
      if (!mm || !mm.getResult().hasOneUse())
        continue;
      FusionDecision d = model.canTransposeGemmResult(t, mm);
      record(t, d, -1);
      if (d.fuse)
        swapGemmOperands(t, mm);
    }
    for (MatMulOp mm : llvm::make_early_inc_range(body.getOps<MatMulOp>())) {
      SmallVector<TransposeOp> folds;
      for (Value v : {mm.getLhs(), mm.getRhs()})
        if (auto t = v.getDefiningOp<TransposeOp>()) {
          FusionDecision d = model.canFoldIntoGemm(t);
          record(t, d, -1);
          if (d.fuse && !llvm::is_contained(folds, t))
            folds.push_back(t);
        }
      if (folds.empty())
        continue;
      outlineGemm(mm, folds);
      ++gemmFusions;
    }

    // GEMM epilogues: the chain of same-shape elementwise ops after a GEMM
    // (bias, residual, activation) joins it. The chain goes on through the
    // first reader of each value; a value with other readers (the
    // pre-activation that the backward pass reads) is also a result of the
    // fusion, and the chain takes one more op after it at most.
    if (gemmEpilogues) {
      SmallVector<Operation *> gemms;
      for (Operation &op : body)
        if (FusionCostModel::isGemm(&op))
          gemms.push_back(&op);
      for (Operation *gemm : gemms) {
        if (gemm->getNumResults() != 1)
          continue;
        ArrayRef<int64_t> shape =
            cast<RankedTensorType>(gemm->getResult(0).getType()).getShape();
        SmallVector<Operation *> chain;
        Value cur = gemm->getResult(0);
        while (!cur.use_empty()) {
          SmallVector<Operation *> users;
          for (Operation *u : cur.getUsers())
            if (!llvm::is_contained(users, u))
              users.push_back(u);
          if (llvm::any_of(users, [&](Operation *u) { return u->getBlock() != &body; }))
            break;
          // The chain goes on through the first reader; the others follow
          // it, so they follow the fusion placed at the chain's end.
          llvm::sort(users, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
          Operation *next = users.front();
          FusionDecision d = model.canJoinEpilogue(next, shape, chain.size() + 1);
          // Past a value with other readers the chain takes one more op, and
          // only one whose value only GEMMs read (an activation): it is
          // written either way, whereas an elementwise reader might fuse
          // into a loop that never writes it.
          bool forked = users.size() > 1;
          if (d.fuse && forked && !onlyGemmsRead(next->getResult(0))) {
            d = {false, "the value it reads has other readers, and its own value "
                        "is read by more than GEMMs (it may fuse into a loop "
                        "that does not write it)"};
          }
          if (d.fuse && forked)
            d.reason += " (the value it reads is also a result, for its " +
                        std::to_string(users.size() - 1) + " other reader(s))";
          record(next, d, -1);
          if (!d.fuse)
            break;
          chain.push_back(next);
          cur = next->getResult(0);
          if (forked)
            break;
        }
        if (!chain.empty())
          outlineEpilogue(gemm, chain);
      }
    }

    // Form groups in one pass over the program. Several groups may be open
    // at once (interleaved chains); an op that reads a group's result
    // without joining it closes that group, so no group can grow past a
    // reader of its values, which is what keeps fusions acyclic. An op that
    // reads several open groups merges them; one that reads none of a
    // group's values but shares a full-size input with it joins it as a
    // sibling. With reductions on, a reduction over the last axis keeps the
    // group open (later ops read its per-row result: softmax, LayerNorm and
    // their backward passes), and any other reduction joins as an output.
    struct Group {
      int64_t id = 0;
      SmallVector<Operation *> ops;
      llvm::DenseSet<Value> values;   // results later members may read
      llvm::DenseSet<Value> results;  // every member's results
      llvm::SetVector<Value> inputs;  // values from outside that members read
      SmallVector<int64_t> shape;     // the loop's shape
      bool rows = false;              // has a row reduction
      SmallVector<Operation *> views; // views of results, moved after it
    };
    struct Closed {
      SmallVector<Operation *> ops, views;
    };
    SmallVector<Closed> groups;
    std::vector<Group> open;
    auto close = [&](size_t k) {
      if (open[k].ops.size() > 1)
        groups.push_back({open[k].ops, open[k].views});
      open.erase(open.begin() + k);
    };
    auto shapeOf = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getShape();
    };
    // The decision for `op` joining `g` (whose values or inputs it reads),
    // and whether its results become values later members may read.
    auto decide = [&](Operation *op, const Group &g, size_t size,
                      bool &readable) -> FusionDecision {
      readable = true;
      // Every group result `op` reads must be readable inside the loop.
      for (Value v : op->getOperands())
        if (g.results.contains(v) && !g.values.contains(v))
          return {false, "reads a reduction's result, which is complete only "
                         "after the group's loop"};
      if (isa<ReduceSumOp, ReduceMeanOp>(op)) {
        if (!reductions)
          return {false, "reductions are not fused for this target"};
        FusionDecision d = model.canJoinReduction(op, g.shape, size);
        readable = FusionCostModel::isRowReduction(op, g.shape);
        return d;
      }
      if (FusionCostModel::isElementwise(op) &&
          shapeOf(op->getResult(0)) != ArrayRef(g.shape) && g.rows)
        return model.canJoinRow(op, g.shape, size);
      return model.canJoin(op, g.shape, size);
    };
    auto add = [&](Group &g, Operation *op, bool readable) {
      g.ops.push_back(op);
      for (Value v : op->getOperands())
        if (!g.results.contains(v))
          g.inputs.insert(v);
      for (Value r : op->getResults()) {
        g.results.insert(r);
        if (readable)
          g.values.insert(r);
      }
      if (reductions && FusionCostModel::isRowReduction(op, g.shape))
        g.rows = true;
    };
    // Merges the groups `ks` (indices into `open`, ascending) into the
    // first; the members stay in program order.
    auto merge = [&](ArrayRef<size_t> ks) {
      Group &into = open[ks[0]];
      for (size_t k : ks.drop_front()) {
        Group &from = open[k];
        into.ops.append(from.ops.begin(), from.ops.end());
        into.values.insert(from.values.begin(), from.values.end());
        into.results.insert(from.results.begin(), from.results.end());
        into.inputs.insert(from.inputs.begin(), from.inputs.end());
        into.rows |= from.rows;
        into.views.append(from.views.begin(), from.views.end());
      }
      llvm::sort(into.ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
      for (size_t k : llvm::reverse(ks.drop_front()))
        open.erase(open.begin() + k);
      for (Value v : into.results)
        into.inputs.remove(v);
    };
    auto indexOf = [&](int64_t id) -> size_t {
      for (size_t k = 0; k < open.size(); ++k)
        if (open[k].id == id)
          return k;
      llvm_unreachable("no open group with this id");
    };
    auto loopShapeOf = [&](Operation &op) {
      return shapeOf(isa<ReduceSumOp, ReduceMeanOp>(op) ? op.getOperand(0)
                                                        : op.getResult(0));
    };
    int64_t nextGroupId = 0;
    for (Operation &op : body.without_terminator()) {
      // The open groups whose values `op` reads (it may join them) and
      // those with a result it reads that no member may read (a reduction
      // complete only after the loop, or a view moved after the fusion):
      // `op` closes those.
      SmallVector<int64_t> joinable, blocking;
      for (Group &g : open) {
        bool other = false, value = false;
        for (Value v : op.getOperands()) {
          other |= g.results.contains(v) && !g.values.contains(v);
          value |= g.values.contains(v);
        }
        if (other)
          blocking.push_back(g.id);
        else if (value)
          joinable.push_back(g.id);
      }
      bool fusable = FusionCostModel::isElementwise(&op) ||
                     (reductions && isa<ReduceSumOp, ReduceMeanOp>(op));
      // A view of a group's result (a reshape of a reduced gradient) does
      // not end the group: it moves after the fusion, and its own readers
      // count as readers of the group.
      if (!fusable && isAliasView(&op) && joinable.size() + blocking.size() == 1) {
        Group &g = open[indexOf(joinable.empty() ? blocking[0] : joinable[0])];
        g.views.push_back(&op);
        for (Value r : op.getResults())
          g.results.insert(r);
        continue;
      }
      bool joined = false;
      if (fusable && !joinable.empty()) {
        SmallVector<size_t> ks;
        for (int64_t id : joinable)
          ks.push_back(indexOf(id));
        bool sameShape = llvm::all_of(ks, [&](size_t k) {
          return open[k].shape == open[ks[0]].shape;
        });
        size_t size = 0;
        for (size_t k : ks)
          size += open[k].ops.size();
        FusionDecision d{true, ""};
        if (ks.size() > 1)
          d = model.canMerge(ks.size(), sameShape, size);
        if (d.fuse) {
          // Decide against the merged group before merging.
          Group probe;
          probe.shape = open[ks[0]].shape;
          for (size_t k : ks) {
            probe.values.insert(open[k].values.begin(), open[k].values.end());
            probe.results.insert(open[k].results.begin(), open[k].results.end());
            probe.rows |= open[k].rows;
          }
          bool readable;
          FusionDecision j = decide(&op, probe, size, readable);
          if (ks.size() > 1 && j.fuse)
            j.reason = d.reason + "; " + j.reason;
          d = j;
          if (d.fuse) {
            merge(ks);
            add(open[indexOf(joinable[0])], &op, readable);
            joined = true;
          }
        }
        record(&op, d, groups.size());
      } else if (!joinable.empty() || !blocking.empty()) {
        record(&op,
               fusable ? FusionDecision{false, "reads a reduction's result (or a "
                                               "view of one), which is complete "
                                               "only after the group's loop"}
                       : model.canJoin(&op, {}, 0),
               groups.size());
      } else if (fusable) {
        // A sibling: the most recent open group over the same loop that
        // reads one of this op's full-size operands.
        ArrayRef<int64_t> loop = loopShapeOf(op);
        for (size_t k = open.size(); k-- > 0 && !joined;) {
          Group &g = open[k];
          if (ArrayRef(g.shape) != loop)
            continue;
          for (Value v : op.getOperands()) {
            if (!g.inputs.contains(v) || shapeOf(v) != loop)
              continue;
            FusionDecision d = model.canJoinSibling(&op, v, g.shape, g.ops.size());
            bool readable = true;
            if (d.fuse) {
              FusionDecision j = decide(&op, g, g.ops.size(), readable);
              if (j.fuse)
                j.reason = d.reason + "; " + j.reason;
              d = j;
            }
            record(&op, d, groups.size());
            if (d.fuse) {
              add(g, &op, readable);
              joined = true;
            }
            break;
          }
        }
      }
      for (int64_t id : blocking)
        close(indexOf(id));
      if (joined)
        continue;
      for (int64_t id : joinable)
        close(indexOf(id));
      if (fusable) {
        Group g;
        g.id = nextGroupId++;
        ArrayRef<int64_t> loop = loopShapeOf(op);
        g.shape.assign(loop.begin(), loop.end());
        bool readable = !isa<ReduceSumOp, ReduceMeanOp>(op) ||
                        FusionCostModel::isRowReduction(&op, g.shape);
        add(g, &op, readable);
        open.push_back(std::move(g));
      }
    }
    while (!open.empty())
      close(0);
    // Outline in program order of the groups' last ops.
    llvm::DenseMap<Operation *, int64_t> position;
    int64_t pos = 0;
    for (Operation &op : body)
      position[&op] = pos++;
    llvm::sort(groups, [&](const Closed &a, const Closed &b) {
      return position[a.ops.back()] < position[b.ops.back()];
    });

    for (Closed &group : groups) {
      FusionOp fusion = outline(group.ops);
      // The views read the fusion's results now; they follow it in order.
      Operation *after = fusion;
      for (Operation *view : group.views) {
        view->moveAfter(after);
        after = view;
      }
    }

    func->setAttr("tcc.fusion_decisions", b.getArrayAttr(decisions));
    func->setAttr("tcc.fusion_stats",
                  b.getDictionaryAttr({
                      b.getNamedAttr("op_count", b.getI64IntegerAttr(opsBefore)),
                      b.getNamedAttr("kernel_count",
                                     b.getI64IntegerAttr(countOps(body, /*kernelsOnly=*/true))),
                      b.getNamedAttr("fusions", b.getI64IntegerAttr(groups.size())),
                      b.getNamedAttr("gemm_fusions", b.getI64IntegerAttr(gemmFusions)),
                  }));
  }

  /// Whether only GEMMs read `v`, directly or through views.
  static bool onlyGemmsRead(Value v) {
    return llvm::all_of(v.getUsers(), [](Operation *u) {
      return FusionCostModel::isGemm(u) ||
             (isAliasView(u) && onlyGemmsRead(u->getResult(0)));
    });
  }

  /// A new tcc.fusion before `at` with `inputs` as block arguments, the
  /// builder inside its body, and `map` from each input to its argument.
  static FusionOp createFusion(OpBuilder &b, Operation *at, TypeRange results,
                               ArrayRef<Value> inputs, IRMapping &map) {
    b.setInsertionPoint(at);
    auto fusion = b.create<FusionOp>(at->getLoc(), results, inputs);
    Block *block = b.createBlock(&fusion.getBody());
    for (Value v : inputs)
      map.map(v, block->addArgument(v.getType(), v.getLoc()));
    b.setInsertionPointToStart(block);
    return fusion;
  }

  /// Replaces `gemm` (a matmul or a GEMM fusion) and `chain` (its epilogue,
  /// each op reading the previous result) by one fusion placed where the
  /// chain's last op was; every value of the GEMM and the chain that is read
  /// outside them is a result.
  static void outlineEpilogue(Operation *gemm, ArrayRef<Operation *> chain) {
    llvm::DenseSet<Operation *> members(chain.begin(), chain.end());
    members.insert(gemm);
    llvm::SetVector<Value> inputs;
    for (Value v : gemm->getOperands())
      inputs.insert(v);
    for (Operation *op : chain)
      for (Value v : op->getOperands())
        if (!(v.getDefiningOp() && members.contains(v.getDefiningOp())))
          inputs.insert(v);
    SmallVector<Value> outputs;
    for (Operation *op : llvm::concat<Operation *const>(ArrayRef<Operation *>(gemm), chain))
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !members.contains(u); }))
          outputs.push_back(r);
    Operation *last = chain.back();
    OpBuilder b(last);
    IRMapping map;
    SmallVector<Type> types;
    for (Value v : outputs)
      types.push_back(v.getType());
    FusionOp fusion = createFusion(b, last, types, inputs.getArrayRef(), map);
    if (auto inner = dyn_cast<FusionOp>(gemm)) {
      Block &innerBody = inner.getBody().front();
      for (auto [arg, operand] : llvm::zip(innerBody.getArguments(), inner.getInputs()))
        map.map(arg, map.lookup(operand));
      for (Operation &op : innerBody.without_terminator())
        b.clone(op, map);
      map.map(gemm->getResult(0),
              map.lookup(cast<YieldOp>(innerBody.getTerminator()).getValues()[0]));
    } else {
      b.clone(*gemm, map);
    }
    for (Operation *op : chain)
      b.clone(*op, map);
    SmallVector<Value> yielded;
    for (Value v : outputs)
      yielded.push_back(map.lookup(v));
    b.create<YieldOp>(fusion.getLoc(), yielded);
    for (auto [v, r] : llvm::zip(outputs, fusion.getResults()))
      v.replaceUsesWithIf(r, [&](OpOperand &use) { return !members.contains(use.getOwner()); });
    for (Operation *op : llvm::reverse(chain))
      op->erase();
    gemm->erase();
  }

  /// Replaces t = transpose(mm(a, b)) by mm(transpose(b), transpose(a)); a
  /// transposed operand that is itself a transpose of the last two
  /// dimensions is read untransposed instead.
  static void swapGemmOperands(TransposeOp t, MatMulOp mm) {
    OpBuilder b(t);
    auto transposed = [&](Value v) -> Value {
      if (auto inner = v.getDefiningOp<TransposeOp>())
        if (FusionCostModel::isSwapOfLastTwo(inner))
          return inner.getInput();
      auto ty = cast<RankedTensorType>(v.getType());
      int64_t rank = ty.getRank();
      SmallVector<int64_t> perm, shape(ty.getShape());
      for (int64_t i = 0; i < rank; ++i)
        perm.push_back(i);
      std::swap(perm[rank - 1], perm[rank - 2]);
      std::swap(shape[rank - 1], shape[rank - 2]);
      return b.create<TransposeOp>(t.getLoc(),
                                   RankedTensorType::get(shape, ty.getElementType()),
                                   v, b.getDenseI64ArrayAttr(perm));
    };
    Value lhs = transposed(mm.getRhs()), rhs = transposed(mm.getLhs());
    auto swapped = b.create<MatMulOp>(mm.getLoc(), t.getType(), lhs, rhs);
    t.getResult().replaceAllUsesWith(swapped.getResult());
    t.erase();
    Value oldLhs = mm.getLhs(), oldRhs = mm.getRhs();
    mm.erase();
    // A transpose that only the old GEMM read is dead now.
    for (Value v : {oldLhs, oldRhs})
      if (auto inner = v.getDefiningOp<TransposeOp>())
        if (inner.getResult().use_empty())
          inner.erase();
  }

  /// Replaces `mm` by a tcc.fusion of clones of `folds` (transposes of its
  /// operands) and of `mm`, reading the transposes' inputs.
  static void outlineGemm(MatMulOp mm, ArrayRef<TransposeOp> folds) {
    llvm::SetVector<Value> inputs;
    auto source = [&](Value v) -> Value {
      for (TransposeOp t : folds)
        if (t.getResult() == v)
          return t.getInput();
      return v;
    };
    inputs.insert(source(mm.getLhs()));
    inputs.insert(source(mm.getRhs()));
    OpBuilder b(mm);
    IRMapping map;
    FusionOp fusion = createFusion(b, mm, TypeRange{mm.getType()},
                                   inputs.getArrayRef(), map);
    for (TransposeOp t : folds)
      b.clone(*t, map);
    Operation *clone = b.clone(*mm, map);
    b.create<YieldOp>(fusion.getLoc(), clone->getResult(0));
    mm.getResult().replaceAllUsesWith(fusion.getResult(0));
    mm.erase();
    for (TransposeOp t : folds)
      if (t.getResult().use_empty())
        t.erase();
  }

  /// Replaces `group` (in program order) by one tcc.fusion where its last
  /// op was.
  static FusionOp outline(ArrayRef<Operation *> group) {
    llvm::DenseSet<Operation *> members(group.begin(), group.end());
    llvm::SetVector<Value> inputs, outputs;
    for (Operation *op : group) {
      for (Value v : op->getOperands())
        if (!v.getDefiningOp() || !members.contains(v.getDefiningOp()))
          inputs.insert(v);
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !members.contains(u); }))
          outputs.insert(r);
    }
    OpBuilder b(group.back());
    SmallVector<Type> resultTypes;
    for (Value v : outputs)
      resultTypes.push_back(v.getType());
    IRMapping map;
    FusionOp fusion = createFusion(b, group.back(), resultTypes,
                                   inputs.getArrayRef(), map);
    for (Operation *op : group)
      b.clone(*op, map);
    SmallVector<Value> yielded;
    for (Value v : outputs)
      yielded.push_back(map.lookup(v));
    b.create<YieldOp>(fusion.getLoc(), yielded);
    for (auto [out, r] : llvm::zip(outputs, fusion.getResults())) {
      Value v = out;
      v.replaceUsesWithIf(r, [&](OpOperand &use) {
        return !members.contains(use.getOwner());
      });
    }
    for (Operation *op : llvm::reverse(group))
      op->erase();
    return fusion;
  }
};

} // namespace
