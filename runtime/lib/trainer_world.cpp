//===- trainer_world.cpp - the run across ranks -----------------------------===//

#include "runtime/lib/trainer_impl.h"

namespace tcc::run::detail {

void Trainer::traceCollectives() {
  constexpr int kMax = 4096;
  std::vector<double> start(kMax), end(kMax);
  std::vector<uint64_t> bytes(kMax);
  std::vector<const char *> names(kMax);
  const int n = step.commTrace(stepArena, start.data(), end.data(), bytes.data(), names.data(), kMax);
  if (n < 0) {
    warning("tracing: the step could not time its NCCL collectives");
    return;
  }
  for (int i = 0; i < n; ++i)
    trace.complete(tcc::trace::kComm,
                   std::string("NCCL: ") + (names[i] ? names[i] : "a collective") + " (" +
                       formatBytes(bytes[i]) + ")",
                   "collective", lastDeviceStart + start[i] * 1e6, (end[i] - start[i]) * 1e6,
                   "\"bytes\":" + std::to_string(bytes[i]) + ",\"index\":" + std::to_string(i));
}

int Trainer::shardedApply(const std::string &where) {
  const tcc_shard_info &sh = *step.shards;
  double sumsq = 0;
  if (step.device)
    world.watched("the gradient reduce-scatter (ZeRO-1, NCCL)", [&](char *, uint64_t) {
      rc = step.shardSumsq(stepArena, world.rank(), &sumsq);
      return 0;
    });
  else
    rc = step.shardSumsq(stepArena, world.rank(), &sumsq);
  if (rc != 0)
    return error(where + ": the shard's gradient norm failed (code " + std::to_string(rc) + ")");
  if (!(err = world.sum(&sumsq, 1, "the gradient norm's sum across the shards")).empty())
    return error(where + ": " + err);
  if (step.device)
    world.watched("the parameter all-gather (ZeRO-1, NCCL)", [&](char *, uint64_t) {
      rc = step.shardApply(stepArena, world.rank(), &args, sumsq);
      return 0;
    });
  else
    rc = step.shardApply(stepArena, world.rank(), &args, sumsq);
  // A skipped step (the world's norm not finite, so on every rank) changed
  // nothing to gather.
  if (rc == 0 && !step.device) {
    const double gatherStart = trace.active() ? trace.now() : 0.0;
    if (!(err = world.allgather(arena + sh.params_offset, sh.chunk_elems, shardElemBytes(),
                                "the parameter all-gather (ZeRO-1)"))
             .empty())
      return error(where + ": " + err);
    if (trace.active())
      trace.complete(tcc::trace::kLoop, "parameter all-gather (" + std::to_string(N) + " ranks)",
                     "collective", gatherStart, trace.now() - gatherStart,
                     "\"bytes\":" +
                         std::to_string(sh.flat_elems * static_cast<uint64_t>(shardElemBytes())));
  }
  return kGoOn;
}

int Trainer::sumAcrossRanks(const std::string &where, double &lossSum) {
  if (N > 1) {
    if (!step.device) {
      // The world's gradients: the accumulators summed across the ranks
      // (each micro-step added loss * scale / (N*K)'s), alike on every rank,
      // so every rank makes the same update (and the same skip decision).
      // (A device step sums them itself, with NCCL, during its last
      // micro-step; apply waits for the sums.)
      const double reduceStart = trace.active() ? trace.now() : 0.0;
      uint64_t reduced = 0;
      if (step.shards) {
        // ZeRO-1: each rank gets the world's sums of its chunk only.
        const tcc_shard_info &sh = *step.shards;
        const int es = shardElemBytes();
        if (!(err = world.reduceScatter(arena + sh.grads_offset, arena + sh.shard_grads_offset,
                                        sh.chunk_elems, es,
                                        "the gradient reduce-scatter (ZeRO-1)"))
                 .empty())
          return error(where + ": " + err);
        reduced = sh.flat_elems * static_cast<uint64_t>(es);
        if (trace.active())
          trace.complete(tcc::trace::kLoop,
                         "gradient reduce-scatter (" + std::to_string(N) + " ranks)",
                         "collective", reduceStart, trace.now() - reduceStart,
                         "\"bytes\":" + std::to_string(reduced));
      }
      for (int32_t i = 0; !step.shards && i < info.num_params; ++i) {
        const tcc_tensor_desc &g = info.grads[i];
        if (!g.bytes)
          continue;
        if (g.dtype == TCC_DTYPE_F32)
          err = world.sum(reinterpret_cast<float *>(arena + g.offset), g.bytes / 4,
                           "the gradient all-reduce");
        else if (g.dtype == TCC_DTYPE_F64)
          err = world.sum(reinterpret_cast<double *>(arena + g.offset), g.bytes / 8,
                           "the gradient all-reduce");
        else
          err = std::string("gradient ") + g.name + " is neither f32 nor f64";
        if (!err.empty())
          return error(where + ": " + err);
        reduced += g.bytes;
      }
      if (trace.active() && !step.shards)
        trace.complete(tcc::trace::kLoop,
                       "gradient all-reduce (" + std::to_string(N) + " ranks)", "collective",
                       reduceStart, trace.now() - reduceStart,
                       "\"bytes\":" + std::to_string(reduced));
    }
    // Every micro-step's loss, in the single process's order, on rank 0.
    std::vector<float> all(static_cast<size_t>(N * K));
    if (!(err = world.gather(losses.data() + losses.size() - static_cast<size_t>(K),
                              static_cast<uint64_t>(K), all.data(), 0, "gathering the losses"))
             .empty())
      return error(where + ": " + err);
    losses.resize(losses.size() - static_cast<size_t>(K));
    lossSum = 0;
    for (float l : all) {
      losses.push_back(l);
      lossSum += static_cast<double>(l);
    }
  }
  return kGoOn;
}

} // namespace tcc::run::detail
