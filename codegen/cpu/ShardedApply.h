//===- ShardedApply.h - the CPU step's ZeRO-1 update ------------*- C++ -*-===//
//
// The generated source of a sharded CPU step's tcc_step_get_shards,
// tcc_step_shard_sumsq and tcc_step_shard_apply (#tcc.shards, ZeRO-1).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CODEGEN_CPU_SHARDEDAPPLY_H
#define TCC_CODEGEN_CPU_SHARDEDAPPLY_H

#include "compiler/Dialect/TccOps.h"

#include <string>

namespace mlir::tcc::cpu {

/// The entry points, after the step's other exports: `rows` are the
/// ShardRow initializers ({param, arena offset, flat index, elements}) of
/// the `numRows` trainable parameters; `adam` picks AdamW over SGD.
std::string shardedApply(ShardsAttr shards, const std::string &rows, int numRows, bool adam);

} // namespace mlir::tcc::cpu

#endif // TCC_CODEGEN_CPU_SHARDEDAPPLY_H
