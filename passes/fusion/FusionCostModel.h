//===- FusionCostModel.h - what tcc-fuse fuses, and why ---------*- C++ -*-===//
//
// The profitability model of tcc-fuse, apart from the transformation: it
// answers "may this op join this group?" with a decision that carries its
// reason, which the pass records and the driver reports.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_FUSION_FUSIONCOSTMODEL_H
#define TCC_PASSES_FUSION_FUSIONCOSTMODEL_H

#include "compiler/Dialect/TccOps.h"

#include <string>

namespace mlir::tcc {

/// A fusion decision and why.
struct FusionDecision {
  bool fuse;
  std::string reason;
};

class FusionCostModel {
public:
  explicit FusionCostModel(int64_t maxOps, int64_t floatBytes = 4)
      : maxOps(maxOps), floatBytes(floatBytes) {}

  /// Whether `op` can be part of an elementwise loop fusion at all (an
  /// ONNX-level op, which tcc-legalize rewrites, never is).
  static bool isElementwise(Operation *op) {
    return isa<ElementwiseOpInterface>(op) && !op->hasTrait<OpTrait::tcc::ImportOnly>();
  }

  /// May `op`, which reads a value of the group, join a group of `size` ops
  /// whose results have `shape`?
  FusionDecision canJoin(Operation *op, ArrayRef<int64_t> shape,
                         size_t size) const {
    if (!isElementwise(op))
      return {false, "not elementwise: " + op->getName().getStringRef().str() +
                         " is a kernel of its own"};
    auto t = cast<RankedTensorType>(op->getResult(0).getType());
    if (t.getShape() != shape)
      return {false, "result shape differs from the group's (the loop "
                     "would not cover it)"};
    if ((int64_t)size >= maxOps)
      return {false, "the group has reached the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    return {true, "elementwise consumer of the group, same shape: saves "
                  "writing and reading " +
                      std::to_string(2 * t.getNumElements() * floatBytes) +
                      " bytes of its operand"};
  }

  /// The shape of one row's statistics in a loop over `shape`: the loop's
  /// shape with its last dimension 1 (what a reduction over the last axis
  /// with keepdims yields); empty when the loop has no rows to reduce.
  static SmallVector<int64_t> rowShape(ArrayRef<int64_t> shape) {
    if (shape.empty() || shape.back() <= 1)
      return {};
    SmallVector<int64_t> row(shape);
    row.back() = 1;
    return row;
  }

  /// Whether `op` is a float reduce_sum / reduce_mean over the last axis of
  /// a loop over `shape`, keeping it (the row statistics of softmax and
  /// LayerNorm and of their backward passes). Inside a fusion its result
  /// is a per-row scalar that the rest of the row's loop can read.
  static bool isRowReduction(Operation *op, ArrayRef<int64_t> shape) {
    if (!isa<ReduceSumOp, ReduceMeanOp>(op) ||
        !isa<FloatType>(cast<RankedTensorType>(op->getOperand(0).getType())
                            .getElementType()))
      return false;
    SmallVector<int64_t> row = rowShape(shape);
    auto in = cast<RankedTensorType>(op->getOperand(0).getType());
    auto out = cast<RankedTensorType>(op->getResult(0).getType());
    return !row.empty() && in.getShape() == shape && out.getShape() == ArrayRef(row);
  }

  /// Whether a fused loop that adds each element, in order, to its output's
  /// double accumulator sums exactly as the CPU reduce kernel does. The
  /// kernel walks the input in order with size-1 dimensions dropped and
  /// contiguous ones merged; when the innermost run is reduced it sums the
  /// run from 0 and then adds it to the accumulator, which is the same only
  /// if each output gets one run: the reduced dimensions (of size > 1) must
  /// then be a suffix.
  static bool sumsInOrder(Operation *op) {
    auto in = cast<RankedTensorType>(op->getOperand(0).getType());
    int64_t rank = in.getRank();
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes");
    SmallVector<bool> reduced(rank, !axes || axes.empty());
    if (axes)
      for (int64_t a : axes.asArrayRef())
        reduced[a < 0 ? a + rank : a] = true;
    SmallVector<bool> big;
    for (int64_t d = 0; d < rank; ++d)
      if (in.getShape()[d] != 1)
        big.push_back(reduced[d]);
    if (big.empty() || !big.back())
      return true; // the innermost run is kept: element by element, in order
    size_t d = big.size();
    while (d > 0 && big[d - 1])
      --d;
    return llvm::none_of(ArrayRef(big).take_front(d), [](bool r) { return r; });
  }

  /// May `op`, a reduction whose input is a value (or, for a sibling, an
  /// input) of a group looping over `shape`, join it? A reduction over the
  /// last axis is a row reduction: later ops of the group may read its
  /// result. Any other reduction accumulates as the loop runs and ends the
  /// group's use of its value (its result is complete only after the loop).
  FusionDecision canJoinReduction(Operation *op, ArrayRef<int64_t> shape,
                                  size_t size) const {
    if (!isa<ReduceSumOp, ReduceMeanOp>(op))
      return {false, "not a reduction"};
    auto in = cast<RankedTensorType>(op->getOperand(0).getType());
    if (!isa<FloatType>(in.getElementType()))
      return {false, "an integer reduction stays a kernel of its own"};
    if (in.getShape() != shape)
      return {false, "the reduction's input has another shape than the group"};
    if (!sumsInOrder(op))
      return {false, "the reduce kernel sums this reduction's runs separately "
                     "(the last axis is reduced with a non-adjacent one); a fused "
                     "loop would round differently"};
    if ((int64_t)size >= maxOps)
      return {false, "the group has reached the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    std::string saved = std::to_string(2 * in.getNumElements() * floatBytes);
    if (isRowReduction(op, shape))
      return {true, "row reduction (last axis) of the group's loop: each row is "
                    "reduced, then the group's later ops read the row's result "
                    "in the same loop nest, saving writing and reading " +
                        saved + " bytes"};
    return {true, "reduction of the group's value (input fusion): the "
                  "reduction's loop computes its input, saving writing and "
                  "reading " + saved + " bytes"};
  }

  /// May `op`, an elementwise op over one row's statistics (its result has
  /// the group's row shape), join a group that has row reductions? It is
  /// computed once per row, between the row's loops.
  FusionDecision canJoinRow(Operation *op, ArrayRef<int64_t> shape,
                            size_t size) const {
    if (!isElementwise(op))
      return {false, "not elementwise: " + op->getName().getStringRef().str() +
                         " is a kernel of its own"};
    auto t = cast<RankedTensorType>(op->getResult(0).getType());
    if (t.getShape() != ArrayRef(rowShape(shape)))
      return {false, "result shape is neither the group's nor its rows'"};
    if ((int64_t)size >= maxOps)
      return {false, "the group has reached the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    return {true, "elementwise op on the group's row statistics: computed "
                  "once per row, saving a kernel over " +
                      std::to_string(t.getNumElements()) + " elements"};
  }

  /// May the `count` open groups that `op` reads merge (with `op`) into one
  /// fusion? They can when their loops agree: no op outside an open group
  /// reads its values, so no path leaves one group and enters another, and
  /// the merged group has no cycle.
  FusionDecision canMerge(size_t count, bool sameShape, size_t size) const {
    if (!sameShape)
      return {false, "reads the values of " + std::to_string(count) +
                         " groups whose loops have different shapes"};
    if ((int64_t)size >= maxOps)
      return {false, "merging " + std::to_string(count) +
                         " groups would pass the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    return {true, "reads the values of " + std::to_string(count) +
                      " groups over the same loop: they merge into one kernel "
                      "(no op outside an open group reads it, so no cycle)"};
  }

  /// May `op`, which reads none of a group's values but reads `shared`, an
  /// input of the group, with the group's loop shape, join it (sibling
  /// multi-output fusion: one loop reads `shared` once for both)?
  FusionDecision canJoinSibling(Operation *op, Value shared,
                                ArrayRef<int64_t> shape, size_t size) const {
    auto t = cast<RankedTensorType>(shared.getType());
    if (t.getShape() != shape)
      return {false, "shares only a broadcast operand with the group"};
    if ((int64_t)size >= maxOps)
      return {false, "the group has reached the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    return {true, "sibling of the group: reads the group's input of " +
                      std::to_string(t.getNumElements()) +
                      " elements in the same loop, saving reading " +
                      std::to_string(t.getNumElements() * floatBytes) +
                      " bytes and a kernel"};
  }

  /// A matrix product, or a fusion around one (a GEMM prologue/epilogue).
  static bool isGemm(Operation *op) {
    if (isa<MatMulOp>(op))
      return true;
    auto fusion = dyn_cast<FusionOp>(op);
    return fusion && llvm::any_of(fusion.getBody().front(), [](Operation &inner) {
             return isa<MatMulOp>(inner);
           });
  }

  /// Whether `t` swaps the last two dimensions and keeps the others.
  static bool isSwapOfLastTwo(TransposeOp t) {
    int64_t rank = cast<RankedTensorType>(t.getInput().getType()).getRank();
    SmallVector<int64_t> perm = t.getPermutation();
    bool swap = rank >= 2 && perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
    for (int64_t i = 0; swap && i + 2 < rank; ++i)
      swap = perm[i] == i;
    return swap;
  }

  /// May t = transpose(mm) become the GEMM of the transposed operands in the
  /// other order ((AB)^T = B^T A^T), so that no transpose is written?
  FusionDecision canTransposeGemmResult(TransposeOp t, MatMulOp mm) const {
    if (!isSwapOfLastTwo(t))
      return {false, "transpose of a GEMM result moves more than the last two "
                     "dimensions"};
    if (cast<RankedTensorType>(mm.getLhs().getType()).getRank() < 2 ||
        cast<RankedTensorType>(mm.getRhs().getType()).getRank() < 2)
      return {false, "transpose of a matrix-vector product"};
    auto r = cast<RankedTensorType>(t.getType());
    return {true, "transpose of a GEMM's result: the GEMM computes B^T A^T "
                  "instead, saving writing and reading " +
                      std::to_string(2 * r.getNumElements() * floatBytes) +
                      " bytes"};
  }

  /// May `op`, the only reader of a GEMM's (or its epilogue's) result, join
  /// the GEMM as an epilogue computed on each product element as it is
  /// stored?
  FusionDecision canJoinEpilogue(Operation *op, ArrayRef<int64_t> shape,
                                 size_t size) const {
    if (!isElementwise(op))
      return {false, "not elementwise: " + op->getName().getStringRef().str() +
                         " cannot be a GEMM epilogue"};
    auto t = cast<RankedTensorType>(op->getResult(0).getType());
    if (t.getShape() != shape)
      return {false, "result shape differs from the GEMM's"};
    if ((int64_t)size >= maxOps)
      return {false, "the GEMM fusion has reached the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    return {true, "GEMM epilogue: computed on each product element as the GEMM "
                  "stores it, saving writing and reading " +
                      std::to_string(2 * t.getNumElements() * floatBytes) +
                      " bytes"};
  }

  /// May `op` (a split or a concat) and the views and transposes between it
  /// and its parts (`size` ops in all) be one copy loop? `ordered`: every
  /// reader of the group's values comes after its last op.
  FusionDecision canFuseDataMovement(Operation *op, size_t size, bool ordered) const {
    if (!ordered)
      return {false, "a value of the " + op->getName().getStringRef().str() +
                         "'s chains is read before the chains end"};
    if ((int64_t)size > maxOps)
      return {false, "the copy loop would pass the kernel size limit of " +
                         std::to_string(maxOps) + " ops"};
    return {true, "data movement: the " + op->getName().getStringRef().str() +
                      " and the transposes of its parts are one copy loop (" +
                      std::to_string(size) + " ops), each element moved once"};
  }

  /// Whether `t`, an operand of a matmul, folds into the GEMM's operand
  /// read (a GEMM reads an operand with its last two dimensions swapped for
  /// free, through its strides or the library's transpose flag).
  FusionDecision canFoldIntoGemm(TransposeOp t) const {
    auto in = cast<RankedTensorType>(t.getInput().getType());
    if (!isSwapOfLastTwo(t))
      return {false, "transpose moves more than the last two dimensions: a "
                     "GEMM cannot read it through a transpose flag"};
    bool others = llvm::any_of(t.getResult().getUsers(),
                               [](Operation *u) { return !isa<MatMulOp>(u); });
    return {true, "transpose of the last two dimensions read by a GEMM: the "
                  "GEMM reads its operand transposed" +
                      std::string(others ? " (the transpose stays for its "
                                           "other readers)"
                                         : ", saving writing and reading " +
                                               std::to_string(2 * in.getNumElements() *
                                                              floatBytes) +
                                               " bytes")};
  }

  /// A group that an op joins runs where that op is instead of after its
  /// last member: it keeps its inputs that nothing later reads alive until
  /// then, but stores its results only then. With `held` the former's bytes
  /// and `stored` the latter's, may the op join? Only if that does not grow
  /// memory while the ops in between run (none: any join is free).
  static FusionDecision canMoveGroup(bool opsBetween, int64_t held,
                                     int64_t stored) {
    if (!opsBetween || held <= stored)
      return {true, ""};
    return {false, "joining would run the group here, after ops that do not belong to it, "
                   "keeping " + std::to_string(held) + " bytes of its inputs alive until "
                   "then for " + std::to_string(stored) + " bytes of results stored later"};
  }

  int64_t bytesPerFloat() const { return floatBytes; }

private:
  int64_t maxOps;
  int64_t floatBytes;
};

} // namespace mlir::tcc

#endif // TCC_PASSES_FUSION_FUSIONCOSTMODEL_H
