//===- LowerToKernels.h - what the kernel lowering shares -------*- C++ -*-===//
#ifndef TCC_PASSES_LOWERTOKERNELS_H
#define TCC_PASSES_LOWERTOKERNELS_H

#include "compiler/Dialect/TccOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/Transforms/DialectConversion.h"

#include <string>

namespace mlir::tcc {

/// What the step's op table says an op is: the code it runs (`launched`,
/// the kernel or library call on CUDA, "" on the CPU), the op (a fusion's
/// ops) and the ONNX nodes it came from (the first eight).
std::string opTableLabel(Operation *op, StringRef launched = "");

/// The step's optimizer as kernel IR (LowerOptimizer.cpp): the function
/// @apply (marked tcck.apply), inserted after the planned training step
/// `step`, with one tcck.update per trainable parameter (tcck.shard_update
/// for a sharded plan), from the memory plan `layout`. Masters are stored in
/// `storage` on the CPU, f32 on CUDA (`cuda`), with fp16 working copies.
LogicalResult buildApply(func::FuncOp step, LayoutAttr layout, bool cuda, Type storage);

/// The kernel module's @apply (the module of `op`, or `op` itself), or null.
func::FuncOp applyFunction(Operation *op);

/// CUDA, master weights in host memory (#tcc.tiers): the host update of
/// the last optimizer step may still run when the micro-step starts. Each
/// such parameter's first reader waits for its new fp16 copy
/// (tcck.await_weights); the first op that touches a gradient accumulator
/// waits for the whole update (tcck.await_update), which reads and zeroes
/// them.
void placeHostAwaits(func::FuncOp step, LayoutAttr layout);

struct GemmFusion;

/// The data-movement fusion `fusion` (a split, or a concat, through views
/// and transposes) as a tcck.copy_loop: one #tcck.copy per part or operand
/// (LowerCopyLoops.cpp).
LogicalResult lowerCopyFusion(ConversionPatternRewriter &rewriter, FusionOp fusion,
                              ValueRange ins, ValueRange outs);

/// The loop or reduction fusion `fusion` (its inputs' buffers `ins`, its
/// results' `outs`) as a tcck.loop at the rewriter's insertion point: its
/// indexing maps and scalar body (LowerFusedBodies.cpp).
LogicalResult lowerLoopFusion(ConversionPatternRewriter &rewriter, FusionOp fusion,
                              ValueRange ins, ValueRange outs);

/// The GEMM fusion `g` of `fusion` (inputs' buffers `ins`, results' `outs`,
/// the GEMM's operands' `lhs` and `rhs`) as a tcck.matmul with its
/// epilogue: the fusion inputs the epilogue reads are its epilogue_ins,
/// each read through its map from the outputs' space, and the epilogue ops
/// are scalar ops over the product's element and theirs. On CUDA (`cuda`),
/// what cuBLASLt computes is recorded (LowerFusedBodies.cpp).
LogicalResult lowerGemmEpilogue(ConversionPatternRewriter &rewriter, FusionOp fusion,
                                GemmFusion g, ValueRange ins, ValueRange outs, Value lhs,
                                Value rhs, bool cuda);

} // namespace mlir::tcc

#endif // TCC_PASSES_LOWERTOKERNELS_H
