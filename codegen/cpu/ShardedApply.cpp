//===- ShardedApply.cpp - the CPU step's ZeRO-1 update --------------------===//
//
// The entry points a CPU step built with tcc --data-parallel=N exports
// (runtime/tcc_step.h): the shard table, the chunk's sum of squares and the
// chunk's update.
//
//===----------------------------------------------------------------------===//

#include "codegen/cpu/ShardedApply.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::tcc;

/// The CPU step's ZeRO-1 entry points (#tcc.shards): this rank's chunk of
/// the flat parameter space, its gradients reduce-scattered into the shard
/// buffer by the runtime, updated with the chunk's optimizer state; the
/// runtime then all-gathers the parameters (runtime/tcc_step.h).
std::string mlir::tcc::cpu::shardedApply(ShardsAttr shards, const std::string &rows, int numRows,
                                bool adam) {
  ArrayRef<int64_t> state = shards.getState().asArrayRef();
  std::string src;
  llvm::raw_string_ostream s(src);
  s << "\n// ZeRO-1: where each trainable parameter lies in the flat space.\n"
    << "struct ShardRow { int param; uint64_t p; int64_t flat, n; };\n"
    << "static const ShardRow kShardRows[] = {\n" << rows
    << (numRows ? "" : "    {0, 0, 0, 0},\n") << "};\n"
    << "static const int kNumShardRows = " << numRows << ";\n"
    << "static const tcc_shard_info kShards = {" << shards.getRanks() << ", "
    << (shards.getElemBytes() == 8 ? "TCC_DTYPE_F64" : "TCC_DTYPE_F32") << ", "
    << shards.getFlatElems() << "ULL, " << shards.getChunkElems() << "ULL, "
    << shards.getParams() << "ULL, " << shards.getGrads() << "ULL, " << shards.getShardGrads()
    << "ULL};\n"
    << "// Row r's elements in [lo, hi), as [*a, *b) of the flat space.\n"
    << "static bool shard_part(const ShardRow &r, int64_t lo, int64_t hi, int64_t *a, int64_t *b) {\n"
    << "  *a = r.flat > lo ? r.flat : lo;\n"
    << "  *b = r.flat + r.n < hi ? r.flat + r.n : hi;\n"
    << "  return *a < *b;\n}\n\n"
    << "TCC_EXPORT const tcc_shard_info *tcc_step_get_shards(void) { return &kShards; }\n\n"
    << "TCC_EXPORT int tcc_step_shard_sumsq(void *arena_, int32_t rank, double *sumsq) {\n"
    << "  if (rank < 0 || rank >= kShards.ranks) return 4;\n"
    << "  const char *arena = static_cast<const char *>(arena_);\n"
    << "  const int64_t lo = (int64_t)rank * (int64_t)kShards.chunk_elems, "
       "hi = lo + (int64_t)kShards.chunk_elems;\n"
    << "  const F *g = (const F *)(arena + kShards.shard_grads_offset);\n"
    << "  double sq = 0.0;\n  int64_t a, b;\n"
    << "  for (int i = 0; i < kNumShardRows; ++i)\n"
    << "    if (shard_part(kShardRows[i], lo, hi, &a, &b)) sq += sum_squares(g + (a - lo), b - a);\n"
    << "  *sumsq = sq;\n  return 0;\n}\n\n"
    << "TCC_EXPORT int tcc_step_shard_apply(void *arena_, int32_t rank, tcc_optim_args *a_, "
       "double world_sumsq) {\n"
    << "  const tcc_optim_args *a = a_;\n"
    << "  if (rank < 0 || rank >= kShards.ranks) return 4;\n"
    << "  char *arena = static_cast<char *>(arena_);\n"
    << "  const double unscale = a->loss_scale > 0.0 ? 1.0 / a->loss_scale : 1.0;\n"
    << "  const double norm = std::sqrt(world_sumsq) * unscale;\n"
    << "  a_->grad_norm = norm;\n"
    << "  if (!std::isfinite(norm)) { tcc_step_zero_grads(arena_); return 2; }\n"
    << "  double clip = 1.0;\n"
    << "  if (a->clip_norm > 0.0 && a->clip_norm / (norm + 1e-6) < 1.0)\n"
    << "    clip = a->clip_norm / (norm + 1e-6);\n"
    << "  clip *= unscale;\n"
    << "  const int64_t lo = (int64_t)rank * (int64_t)kShards.chunk_elems, "
       "hi = lo + (int64_t)kShards.chunk_elems;\n"
    << "  F *g = (F *)(arena + kShards.shard_grads_offset);\n"
    << "  F *s0 = (F *)(arena + " << state[0] << "ULL);\n"
    << (adam ? "  F *s1 = (F *)(arena + " + std::to_string(state[1]) + "ULL);\n" : "")
    << "  int64_t x, y;\n"
    << "  for (int i = 0; i < kNumShardRows; ++i) {\n"
    << "    const ShardRow &r = kShardRows[i];\n"
    << "    if (!shard_part(r, lo, hi, &x, &y)) continue;\n"
    << "    double wd = (a->decay && !a->decay[r.param]) ? 0.0 : a->weight_decay;\n"
    << "    F *p = (F *)(arena + r.p) + (x - r.flat);\n"
    << "    const int64_t at = x - lo;\n"
    << (adam ? "    adamw_update(p, g + at, s0 + at, s1 + at, y - x, a->lr, a->beta1, a->beta2, "
               "a->eps, wd, a->step, clip);\n"
             : "    sgd_update(p, g + at, s0 + at, y - x, a->lr, a->momentum, wd, "
               "a->nesterov != 0, a->step, clip);\n")
    << "  }\n"
    << "  return tcc_step_zero_grads(arena_);\n}\n";
  return src;
}
