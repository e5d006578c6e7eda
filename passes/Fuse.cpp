//===- Fuse.cpp - elementwise loop fusion into tcc.fusion -----------------===//

#include "passes/PlanMemory.h"
#include "passes/Passes.h"
#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/FusionCostModel.h"
#include "passes/fusion/LoopGroups.h"

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
          if (d.fuse && cublasLtEpilogues)
            d = cublasLtEpilogue(gemm, chain, next, cur, forked);
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

    // Data movement (CPU target): a split whose parts each go through views
    // and transposes (attention's head split), and a concat of such chains
    // (its backward pass), are one copy loop each.
    if (moves)
      fuseDataMovement(body, model, record);

    // Loop fusion: groups of elementwise ops and reductions (see
    // LoopGrouper), each outlined where its last op was.
    LoopGrouper grouper(model, reductions, rowReductionsOnly, record);
    SmallVector<LoopGroup> groups = grouper.run(body);
    for (LoopGroup &group : groups) {
      bool reduces = llvm::any_of(group.ops, [](Operation *op) {
        return isa<ReduceSumOp, ReduceMeanOp>(op);
      });
      FusionOp fusion =
          outline(group.ops, reduces ? FusionKind::Reduction : FusionKind::Loop);
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

  /// The ops from `v` through single-reader views and transposes, up to
  /// the last transpose (what a copy loop can take with it).
  static SmallVector<Operation *> forwardChain(Value v) {
    SmallVector<Operation *> chain;
    size_t lastTranspose = 0;
    while (v.hasOneUse()) {
      Operation *u = *v.getUsers().begin();
      if (!isAliasView(u) && !isa<TransposeOp>(u))
        break;
      chain.push_back(u);
      if (isa<TransposeOp>(u))
        lastTranspose = chain.size();
      v = u->getResult(0);
    }
    chain.resize(lastTranspose);
    return chain;
  }

  /// The single-reader views and transposes that make `v`, first to last.
  static SmallVector<Operation *> backwardChain(Value v) {
    SmallVector<Operation *> chain;
    while (Operation *def = v.getDefiningOp()) {
      if ((!isAliasView(def) && !isa<TransposeOp>(def)) || !v.hasOneUse())
        break;
      chain.push_back(def);
      v = def->getOperand(0);
    }
    std::reverse(chain.begin(), chain.end());
    return chain;
  }

  static void fuseDataMovement(Block &body, const FusionCostModel &model,
                               llvm::function_ref<void(Operation *, const FusionDecision &, int64_t)> record) {
    SmallVector<SmallVector<Operation *>> groups;
    llvm::DenseSet<Operation *> taken;
    for (Operation &op : body) {
      SmallVector<Operation *> group{&op};
      bool transposes = false;
      if (auto split = dyn_cast<SplitOp>(op)) {
        for (Value r : split.getResults()) {
          SmallVector<Operation *> chain = forwardChain(r);
          transposes |= !chain.empty();
          group.append(chain.begin(), chain.end());
        }
      } else if (auto concat = dyn_cast<ConcatOp>(op)) {
        for (Value v : concat.getInputs()) {
          SmallVector<Operation *> chain = backwardChain(v);
          transposes |= llvm::any_of(chain, [](Operation *o) { return isa<TransposeOp>(o); });
          group.append(chain.begin(), chain.end());
        }
      } else {
        continue;
      }
      if (!transposes || llvm::any_of(group, [&](Operation *m) { return taken.contains(m); }))
        continue;
      llvm::sort(group, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
      // The fusion takes the place of the group's last op: every reader of
      // its values must come after that.
      llvm::DenseSet<Operation *> members(group.begin(), group.end());
      Operation *last = group.back();
      bool ordered = llvm::all_of(group, [&](Operation *m) {
        return llvm::all_of(m->getUsers(), [&](Operation *u) {
          return members.contains(u) || last->isBeforeInBlock(u);
        });
      });
      FusionDecision d = model.canFuseDataMovement(&op, group.size(), ordered);
      for (Operation *m : group)
        if (isa<TransposeOp>(m))
          record(m, d, -1);
      if (d.fuse) {
        taken.insert(group.begin(), group.end());
        groups.push_back(group);
      }
    }
    for (ArrayRef<Operation *> group : groups)
      outline(group, FusionKind::Move);
  }

  /// The matmul of `gemm` (a matmul or a GEMM prologue fusion), and in
  /// `lhsTransposed` whether the fusion reads its first operand transposed.
  static MatMulOp gemmOf(Operation *gemm, bool &lhsTransposed) {
    MatMulOp mm = dyn_cast<MatMulOp>(gemm);
    if (auto f = dyn_cast<FusionOp>(gemm))
      for (Operation &op : f.getBody().front())
        if (auto m = dyn_cast<MatMulOp>(op))
          mm = m;
    lhsTransposed = mm && isa<FusionOp>(gemm) && mm.getLhs().getDefiningOp<TransposeOp>();
    return mm;
  }

  /// Whether cuBLASLt can compute `next` as the next op of the epilogue
  /// `chain` of `gemm`, whose value `cur` it reads (`forked`: `cur` has other
  /// readers); see matchCublasLtEpilogue. (The chain's earlier values passed
  /// the same check when they joined.)
  static FusionDecision cublasLtEpilogue(Operation *gemm, ArrayRef<Operation *> chain,
                                         Operation *next, Value cur, bool forked) {
    bool lhsTransposed = false;
    MatMulOp mm = gemmOf(gemm, lhsTransposed);
    SmallVector<Operation *> ops(chain.begin(), chain.end());
    ops.push_back(next);
    std::string why;
    auto type = [&](Value v) { return mm ? cast<ShapedType>(v.getType()) : ShapedType(); };
    bool ok = succeeded(matchCublasLtEpilogue(
        type(mm ? mm.getLhs() : Value()), type(mm ? mm.getRhs() : Value()), gemm->getResult(0), lhsTransposed, ops, [&](Value v) { return v == cur && forked; },
        [](Value v) {
          return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()) &&
                 !storedAsF32(v);
        },
        why));
    return {ok, why};
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
  static FusionOp createFusion(OpBuilder &b, Operation *at, FusionKind kind,
                               TypeRange results, ArrayRef<Value> inputs,
                               IRMapping &map) {
    b.setInsertionPoint(at);
    auto fusion = b.create<FusionOp>(at->getLoc(), results, inputs, kind);
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
    FusionOp fusion = createFusion(b, last, FusionKind::Gemm, types, inputs.getArrayRef(), map);
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
    FusionOp fusion = createFusion(b, mm, FusionKind::Gemm, TypeRange{mm.getType()},
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

  /// Replaces `group` (in program order) by one tcc.fusion of `kind` where
  /// its last op was.
  static FusionOp outline(ArrayRef<Operation *> group, FusionKind kind) {
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
    FusionOp fusion = createFusion(b, group.back(), kind, resultTypes,
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
