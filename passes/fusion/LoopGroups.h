//===- LoopGroups.h - which ops share a loop nest ---------------*- C++ -*-===//
//
// The grouping half of tcc-fuse's loop fusion: one pass over a block that
// partitions its elementwise ops and reductions into groups, each of which
// becomes one tcc.fusion (one loop nest). The profitability of each step is
// FusionCostModel's; this file holds the structural rules that keep the
// result acyclic and emittable.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_FUSION_LOOPGROUPS_H
#define TCC_PASSES_FUSION_LOOPGROUPS_H

#include "passes/fusion/FusionCostModel.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include <vector>

namespace mlir::tcc {

/// A group to outline: its ops in program order, and the views of its
/// results that must move after the fusion (in program order).
struct LoopGroup {
  SmallVector<Operation *> ops, views;
};

/// Forms loop groups in one pass over a block.
///
/// Several groups may be open at once (interleaved chains). An op that reads
/// a group's result without joining it closes the group, so no group grows
/// past a reader of its values: that is what keeps fusions acyclic. An op
/// that reads several open groups merges them (no op outside an open group
/// reads it, so no path leaves one open group and enters another); one that
/// reads no group's values but shares a full-size input with a group joins it
/// as a sibling. With `reductions`, a reduction over the last axis keeps its
/// group open (later members read its per-row result: softmax, LayerNorm and
/// their backward passes), and any other reduction joins as an output that
/// no member may read. A view of a group's result does not close the group:
/// it moves after the fusion, and its readers count as the group's readers.
class LoopGrouper {
public:
  using Record = std::function<void(Operation *, const FusionDecision &, int64_t group)>;

  /// `rowsOnly`: of the reductions, only those over the last axis join
  /// groups (a target that emits row fusions but no cross-row sums).
  LoopGrouper(const FusionCostModel &model, bool reductions, bool rowsOnly, Record record)
      : model(model), reductions(reductions), rowsOnly(rowsOnly), record(std::move(record)) {}

  /// The groups of `body` with more than one op, sorted by the position of
  /// their last op. First moves each elementwise op above the reductions
  /// that cannot be members (with `rowsOnly`, sums across rows: the bias
  /// and LayerNorm parameter gradients) right before it, and the views and
  /// constants among them, when it reads none of their results: such a
  /// reduction reads the loop it follows, which closes that loop, and the
  /// elementwise op after it could no longer join it (a LayerNorm
  /// backward's residual gradient sum after dgamma's and dbeta's sums).
  SmallVector<LoopGroup> run(Block &body);

private:
  struct Group {
    int64_t id = 0;
    SmallVector<Operation *> ops;
    llvm::DenseSet<Value> values;   // results later members may read
    llvm::DenseSet<Value> results;  // every member's results (and views')
    llvm::SetVector<Value> inputs;  // values from outside that members read
    SmallVector<int64_t> shape;     // the loop's shape
    bool rows = false;              // has a row reduction
    SmallVector<Operation *> views; // views of results, moved after it
  };

  /// Whether `op` can be a member of a loop group at all.
  bool isFusable(Operation *op) const;
  /// The shape of the loop that computes `op` (a reduction's input's).
  static ArrayRef<int64_t> loopShapeOf(Operation *op);
  /// The decision for `op` joining `g` (whose values or inputs it reads),
  /// and in `readable` whether later members may read its results.
  FusionDecision decide(Operation *op, const Group &g, size_t size,
                        bool &readable) const;
  /// Tries to add `op` to the union of the open groups `ids`, whose values
  /// it reads; merges them when it joins.
  bool joinOrMerge(Operation *op, ArrayRef<int64_t> ids);
  /// Tries to add `op`, which reads no open group's results, to the most
  /// recent open group over its loop that shares a full-size input with it.
  bool joinAsSibling(Operation *op);
  /// What moving `g` to `op` costs (FusionCostModel::canMoveGroup).
  FusionDecision moveDecision(const Group &g, Operation *op) const;
  void add(Group &g, Operation *op, bool readable);
  /// Merges the open groups at `indices` (ascending) into the first.
  void merge(ArrayRef<size_t> indices);
  void close(int64_t id);
  size_t indexOf(int64_t id) const;

  const FusionCostModel &model;
  bool reductions;
  bool rowsOnly;
  Record record;
  llvm::DenseMap<Operation *, int64_t> position; // program order in the block
  std::vector<Group> open;
  SmallVector<LoopGroup> closed;
  int64_t nextId = 0;
};

} // namespace mlir::tcc

#endif // TCC_PASSES_FUSION_LOOPGROUPS_H
