//===- LoopStructure.h - the loop nest of a fused loop kernel ---*- C++ -*-===//
//
// How a loop or reduction fusion's body runs as one loop nest: the loop's
// shape, each body op's role and the pass over the row that computes each
// value. tcc-lower-to-kernels records it on `tcck.loop`; the CUDA emitter
// still asks for it from the fusion.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_FUSION_LOOPSTRUCTURE_H
#define TCC_PASSES_FUSION_LOOPSTRUCTURE_H

#include "compiler/Dialect/TccOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::tcc {

/// The loop structure of an elementwise / reduction fusion: the shape of its
/// loop, each body op's kind, and the pass (stage) that computes each value.
/// A row reduction's result is complete after the pass that reads its
/// operand, so the values that read it belong to the next pass.
struct LoopFusion {
  enum class Kind { Element, Row, RowReduction, Reduction };
  SmallVector<int64_t> shape, rowShape;
  llvm::DenseMap<Operation *, Kind> kind;
  llvm::DenseMap<Value, int64_t> stage;
  bool rows = false;
  int64_t lastPass = 0;
};

/// The loop structure of a fused body whose first result has shape
/// `resultShape`; errors go on `owner`.
FailureOr<LoopFusion> classifyLoopFusion(Block &body, ArrayRef<int64_t> resultShape,
                                         Operation *owner);
FailureOr<LoopFusion> classifyLoopFusion(FusionOp fusion);

/// The values pass `pass` of a loop fusion computes: the operands of the
/// reductions it feeds and the element values it writes (`isResult`), with
/// the element values (and body arguments) they are computed from.
llvm::DenseSet<Value> passValues(Block &body, const LoopFusion &lf, int64_t pass,
                                 llvm::function_ref<bool(Value)> isResult);

} // namespace mlir::tcc

#endif // TCC_PASSES_FUSION_LOOPSTRUCTURE_H
