//===- TcckDialect.h - the kernel-level dialect -----------------*- C++ -*-===//
#ifndef TCC_COMPILER_KERNEL_TCCKDIALECT_H
#define TCC_COMPILER_KERNEL_TCCKDIALECT_H

#include "mlir/IR/Dialect.h"

#include "compiler/Kernel/TcckOpsDialect.h.inc"

namespace mlir::tcck {

/// On a body op of a `tcck.loop`: its role in the loop (LoopRole, by name)
/// and the pass over the row that computes it.
inline constexpr llvm::StringLiteral kRoleAttr = "tcck.role";
inline constexpr llvm::StringLiteral kStageAttr = "tcck.stage";
/// Marks a kernel module's optimizer function, @apply: the step's
/// tcck.update (or tcck.shard_update) ops, one per trainable parameter.
inline constexpr llvm::StringLiteral kApplyAttr = "tcck.apply";
/// On an argument of the step function whose arena slot holds another
/// element type than the buffer the body reads: the slot's (CUDA: a float
/// parameter's or input's fp32 master, whose fp16 working copy the body
/// reads).
inline constexpr llvm::StringLiteral kSlotAttr = "tcck.slot";

} // namespace mlir::tcck

#endif // TCC_COMPILER_KERNEL_TCCKDIALECT_H
