//===- Composites.h - ONNX ops written as several tcc ops --------*- C++ -*-===//
//
// Activations, reductions (ReduceMax/Min as trees of elementwise maxima),
// Conv and ConvTranspose (a gather of patches and a batched MatMul:
// Conv.cpp), MaxPool and
// AveragePool (the same patches, reduced),
// InstanceNormalization, GroupNormalization and BatchNormalization
// (Norms.cpp), Sign, Floor, Ceil, Round, Mod, ArgMax/ArgMin, OneHot and
// TopK (Discrete.cpp),
// Tile, CumSum, GatherND, ScatterND, ScatterElements and Einsum (pairwise
// batched MatMuls), which ONNX itself defines through ops tcc has (most of
// them as ONNX functions; CumSum as a masked sum of products, O(n^2) along
// its axis, exact for integers; the scatters only with compile-time
// indices): the importer writes each such node as those ops, so it folds,
// fuses, lowers to both targets and differentiates as what it is made of,
// and no kernel or gradient rule is written twice.
//
// Where the composition has a kink, the select is written so that the
// gradient there is PyTorch's: LeakyRelu's and PRelu's at 0 is the slope,
// Elu's, Selu's and Celu's at 0 the left branch's, Clip's at either bound 0,
// HardSigmoid's at its corners 0 (test/e2e/check_composite_kinks.py). One difference remains: ReduceL2's gradient
// at an all-zero slice is NaN (PyTorch's norm gives 0 there).
//
//===----------------------------------------------------------------------===//

#ifndef TCC_COMPILER_IMPORT_COMPOSITES_H
#define TCC_COMPILER_IMPORT_COMPOSITES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LLVM.h"

namespace onnx {
class NodeProto;
}

namespace mlir::tcc {

/// Whether the importer writes `onnxOp` as a composition (buildComposite).
bool isCompositeOp(StringRef onnxOp);

/// Builds `node` (an op isCompositeOp names, at `opset`) from tcc ops at the
/// builder's insertion point. `operands[i]` is null where the node omits its
/// input i. Returns the node's results (one per output it names), or
/// failure after a diagnostic at `loc` (with nothing left built).
FailureOr<SmallVector<Value>> buildComposite(OpBuilder &builder, Location loc,
                                const onnx::NodeProto &node, int64_t opset,
                                ArrayRef<Value> operands);

/// ONNX Conv (Conv.cpp): a gather of the input's patches and a batched
/// MatMul with the weights, written at the builder's insertion point.
FailureOr<Value> buildConv(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                           ArrayRef<Value> operands);

/// ONNX ConvTranspose (Conv.cpp): the same gather and batched MatMul.
FailureOr<Value> buildConvTranspose(OpBuilder &builder, Location loc,
                                    const onnx::NodeProto &node, ArrayRef<Value> operands);

/// ONNX MaxPool (its Indices output refused) and AveragePool (Conv.cpp): the
/// same gather of patches, reduced over the taps.
FailureOr<Value> buildPool(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                           ArrayRef<Value> operands);

/// ONNX InstanceNormalization (Norms.cpp), from its statistics' ops.
FailureOr<Value> buildInstanceNorm(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                                   ArrayRef<Value> operands);

/// ONNX GroupNormalization (Norms.cpp): scale and bias per group before
/// opset 21, per channel from it.
FailureOr<Value> buildGroupNorm(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                                int64_t opset, ArrayRef<Value> operands);

/// ONNX BatchNormalization (Norms.cpp): Y, and in training mode the
/// running mean and variance the node names.
FailureOr<SmallVector<Value>> buildBatchNorm(OpBuilder &builder, Location loc,
                                             const onnx::NodeProto &node,
                                             ArrayRef<Value> operands);

/// Sign, Floor, Ceil, Round, Mod, ArgMax, ArgMin, OneHot, TopK
/// (Discrete.cpp): the node's results (TopK's values and indices).
bool isDiscreteOp(StringRef onnxOp);
FailureOr<SmallVector<Value>> buildDiscrete(OpBuilder &builder, Location loc,
                                            const onnx::NodeProto &node,
                                            ArrayRef<Value> operands);

} // namespace mlir::tcc

#endif // TCC_COMPILER_IMPORT_COMPOSITES_H
