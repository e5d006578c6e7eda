//===- LoopGroups.cpp - which ops share a loop nest -----------------------===//

#include "passes/fusion/LoopGroups.h"

#include "passes/PlanMemory.h"

using namespace mlir;
using namespace mlir::tcc;

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

static bool isReduction(Operation *op) { return isa<ReduceSumOp, ReduceMeanOp>(op); }

static void sortInProgramOrder(SmallVectorImpl<Operation *> &ops) {
  llvm::sort(ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
}

bool LoopGrouper::isFusable(Operation *op) const {
  if (isReduction(op))
    return reductions &&
           (!rowsOnly || FusionCostModel::isRowReduction(op, shapeOf(op->getOperand(0))));
  return FusionCostModel::isElementwise(op);
}

ArrayRef<int64_t> LoopGrouper::loopShapeOf(Operation *op) {
  return shapeOf(isReduction(op) ? op->getOperand(0) : op->getResult(0));
}

size_t LoopGrouper::indexOf(int64_t id) const {
  for (size_t k = 0; k < open.size(); ++k)
    if (open[k].id == id)
      return k;
  llvm_unreachable("no open group with this id");
}

void LoopGrouper::close(int64_t id) {
  size_t k = indexOf(id);
  if (open[k].ops.size() > 1)
    closed.push_back({open[k].ops, open[k].views});
  open.erase(open.begin() + k);
}

FusionDecision LoopGrouper::decide(Operation *op, const Group &g, size_t size,
                                   bool &readable) const {
  readable = true;
  for (Value v : op->getOperands())
    if (g.results.contains(v) && !g.values.contains(v))
      return {false, "reads a reduction's result, which is complete only after "
                     "the group's loop"};
  if (isReduction(op)) {
    if (!reductions)
      return {false, "reductions are not fused for this target"};
    if (rowsOnly && !FusionCostModel::isRowReduction(op, g.shape))
      return {false, "only reductions over the last axis are fused for this target"};
    readable = FusionCostModel::isRowReduction(op, g.shape);
    return model.canJoinReduction(op, g.shape, size);
  }
  if (FusionCostModel::isElementwise(op) && g.rows &&
      shapeOf(op->getResult(0)) != ArrayRef(g.shape))
    return model.canJoinRow(op, g.shape, size);
  return model.canJoin(op, g.shape, size);
}

FusionDecision LoopGrouper::moveDecision(const Group &g, Operation *op) const {
  Operation *last = g.ops.back();
  bool between = false;
  for (Operation *o = last->getNextNode(); o && o != op && !between; o = o->getNextNode())
    between = !isAliasView(o) && !isStaticConstant(o);
  int64_t held = 0, stored = 0;
  const int64_t fb = model.bytesPerFloat();
  if (between) {
    for (Value v : g.inputs) {
      Value root = viewRoot(v);
      Operation *def = root.getDefiningOp();
      if (!def || isStaticConstant(def))
        continue; // arguments and constants have slots of their own
      if (diesAt(root, position.lookup(last), position))
        held += valueBytes(root, fb);
    }
    for (Value r : g.results)
      if (!isAliasView(r.getDefiningOp()))
        stored += valueBytes(r, fb);
  }
  return FusionCostModel::canMoveGroup(between, held, stored);
}

void LoopGrouper::add(Group &g, Operation *op, bool readable) {
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
}

void LoopGrouper::merge(ArrayRef<size_t> indices) {
  Group &into = open[indices[0]];
  for (size_t k : indices.drop_front()) {
    Group &from = open[k];
    into.ops.append(from.ops.begin(), from.ops.end());
    into.views.append(from.views.begin(), from.views.end());
    into.values.insert(from.values.begin(), from.values.end());
    into.results.insert(from.results.begin(), from.results.end());
    into.inputs.insert(from.inputs.begin(), from.inputs.end());
    into.rows |= from.rows;
  }
  sortInProgramOrder(into.ops);
  sortInProgramOrder(into.views);
  for (Value v : into.results)
    into.inputs.remove(v);
  for (size_t k : llvm::reverse(indices.drop_front()))
    open.erase(open.begin() + k);
}

bool LoopGrouper::joinOrMerge(Operation *op, ArrayRef<int64_t> ids) {
  SmallVector<size_t> ks;
  for (int64_t id : ids)
    ks.push_back(indexOf(id));
  bool sameShape = llvm::all_of(ks, [&](size_t k) { return open[k].shape == open[ks[0]].shape; });
  size_t size = 0;
  for (size_t k : ks)
    size += open[k].ops.size();
  FusionDecision d{true, ""};
  if (ks.size() > 1)
    d = model.canMerge(ks.size(), sameShape, size);
  for (size_t k : ks)
    if (FusionDecision m = moveDecision(open[k], op); d.fuse && !m.fuse)
      d = m;
  bool readable = true;
  if (d.fuse) {
    // Decide against the union before merging anything.
    Group probe;
    probe.shape = open[ks[0]].shape;
    for (size_t k : ks) {
      probe.values.insert(open[k].values.begin(), open[k].values.end());
      probe.results.insert(open[k].results.begin(), open[k].results.end());
      probe.rows |= open[k].rows;
    }
    FusionDecision j = decide(op, probe, size, readable);
    if (ks.size() > 1 && j.fuse)
      j.reason = d.reason + "; " + j.reason;
    d = j;
  }
  record(op, d, closed.size());
  if (!d.fuse)
    return false;
  merge(ks);
  add(open[indexOf(ids[0])], op, readable);
  return true;
}

bool LoopGrouper::joinAsSibling(Operation *op) {
  ArrayRef<int64_t> loop = loopShapeOf(op);
  for (size_t k = open.size(); k-- > 0;) {
    Group &g = open[k];
    if (ArrayRef(g.shape) != loop)
      continue;
    for (Value v : op->getOperands()) {
      if (!g.inputs.contains(v) || shapeOf(v) != loop)
        continue;
      FusionDecision d = model.canJoinSibling(op, v, g.shape, g.ops.size());
      if (FusionDecision m = moveDecision(g, op); d.fuse && !m.fuse)
        d = m;
      bool readable = true;
      if (d.fuse) {
        FusionDecision j = decide(op, g, g.ops.size(), readable);
        if (j.fuse)
          j.reason = d.reason + "; " + j.reason;
        d = j;
      }
      record(op, d, closed.size());
      if (d.fuse) {
        add(g, op, readable);
        return true;
      }
      break; // an older group may still take it
    }
  }
  return false;
}

SmallVector<LoopGroup> LoopGrouper::run(Block &body) {
  // The loss (a training step's first result) is where the memory plan and
  // tcc-remat split the forward pass from the backward pass: nothing moves
  // above it.
  Operation *terminator = body.getTerminator();
  Operation *loss = terminator && terminator->getNumOperands()
                        ? terminator->getOperand(0).getDefiningOp()
                        : nullptr;
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    if (!FusionCostModel::isElementwise(&op))
      continue;
    Operation *before = nullptr;
    for (Operation *prev = op.getPrevNode(); prev && prev != loss; prev = prev->getPrevNode()) {
      bool reads = llvm::any_of(op.getOperands(),
                                [&](Value v) { return v.getDefiningOp() == prev; });
      if (reads)
        break;
      if (isReduction(prev) && !isFusable(prev))
        before = prev; // it goes above the highest such reduction of the run
      else if (!isAliasView(prev) && !isStaticConstant(prev))
        break;
    }
    if (before)
      op.moveBefore(before);
  }
  int64_t n = 0;
  for (Operation &op : body)
    position[&op] = n++;
  for (Operation &op : body.without_terminator()) {
    // The open groups whose values `op` reads (it may join them), and those
    // with a result it reads that no member may read (a reduction complete
    // only after the loop, or a view moved after the fusion): `op` closes
    // those.
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
    bool fusable = isFusable(&op);
    if (!fusable && isAliasView(&op) && joinable.size() + blocking.size() == 1) {
      Group &g = open[indexOf(joinable.empty() ? blocking[0] : joinable[0])];
      g.views.push_back(&op);
      for (Value r : op.getResults())
        g.results.insert(r);
      continue;
    }
    bool joined = false;
    if (fusable && !joinable.empty())
      joined = joinOrMerge(&op, joinable);
    else if (!joinable.empty() || !blocking.empty())
      record(&op,
             fusable ? FusionDecision{false, "reads a reduction's result (or a view "
                                             "of one), which is complete only after "
                                             "the group's loop"}
                 : isReduction(&op) && reductions
                     ? FusionDecision{false, "only reductions over the last axis are "
                                             "fused for this target"}
                     : model.canJoin(&op, {}, 0),
             closed.size());
    else if (fusable)
      joined = joinAsSibling(&op);
    for (int64_t id : blocking)
      close(id);
    if (joined)
      continue;
    for (int64_t id : joinable)
      close(id);
    if (fusable) {
      Group g;
      g.id = nextId++;
      ArrayRef<int64_t> loop = loopShapeOf(&op);
      g.shape.assign(loop.begin(), loop.end());
      add(g, &op, !isReduction(&op) || FusionCostModel::isRowReduction(&op, g.shape));
      open.push_back(std::move(g));
    }
  }
  while (!open.empty())
    close(open.front().id);
  llvm::sort(closed, [](const LoopGroup &a, const LoopGroup &b) {
    return a.ops.back()->isBeforeInBlock(b.ops.back());
  });
  return std::move(closed);
}
