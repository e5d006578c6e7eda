//===- trainer_world.cpp - the run across ranks -----------------------------===//

#include "runtime/lib/trainer_impl.h"

namespace tcc::run::detail {

namespace {

/// FNV-1a, 64 bits: a digest of what a rank trains, compared across ranks.
struct Digest {
  uint64_t h = 0xcbf29ce484222325ull;
  Digest &add(const void *p, size_t n) {
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i)
      h = (h ^ b[i]) * 0x100000001b3ull;
    return *this;
  }
  Digest &add(const std::string &s) { return add(s.data(), s.size() + 1); }
  Digest &add(const char *s) { return add(std::string(s ? s : "")); }
  template <typename T> Digest &num(T v) { return add(&v, sizeof v); }
  Digest &tensors(const tcc_tensor_desc *t, int32_t n) {
    num(n);
    for (int32_t i = 0; t && i < n; ++i) {
      add(t[i].name).num(t[i].dtype).num(t[i].rank).num(t[i].offset).num(t[i].bytes)
          .num(t[i].location);
      for (int32_t d = 0; d < t[i].rank; ++d)
        num(t[i].dims[d]);
    }
    return *this;
  }
};

} // namespace

int Trainer::agree() {
  if (!world.parallel())
    return kGoOn;
  // What must be the same on every rank, each as a digest and as the text
  // this rank prints when it differs.
  struct Field {
    const char *name;
    uint64_t digest;
    std::string mine;
  };
  auto text = [](double v) { return format("%.17g", v); };
  Digest layout;
  layout.add(info.target).num(info.arena_bytes).num(info.has_backward)
      .tensors(info.params, info.num_params).tensors(info.grads, info.num_params)
      .tensors(info.inputs, info.num_inputs).tensors(info.outputs, info.num_outputs)
      .tensors(info.state, info.num_state).num(info.mem_budget).num(info.device_arena)
      .num(info.host_bytes).add(info.objective).num(info.num_ops);
  for (int32_t k = 0; k < info.num_ops; ++k)
    layout.add(info.ops[k]);
  std::string decayText;
  for (uint8_t d : decay)
    decayText += d ? '1' : '0';
  std::string scale = scaler.isDynamic() ? "dynamic" : scaler.enabled() ? "static" : "off";
  std::vector<Field> fields = {
      {"the step ABI", Digest().num(info.abi_version).h, std::to_string(info.abi_version)},
      {"the step (its parameters, inputs, arena layout and ops)", layout.h,
       opts.step + ", arena " + std::to_string(info.arena_bytes) + " bytes"},
      {"the optimizer", Digest().add(info.optimizer).h, info.optimizer ? info.optimizer : ""},
      {"--lr", Digest().num(opts.lr).h, text(opts.lr)},
      {"--lr-schedule", Digest().num(opts.cosine).h, opts.cosine ? "cosine" : "constant"},
      {"--warmup", Digest().num(opts.warmup).h, std::to_string(opts.warmup)},
      {"--min-lr", Digest().num(opts.minLr).h, text(opts.minLr)},
      {"--beta1", Digest().num(opts.beta1).h, text(opts.beta1)},
      {"--beta2", Digest().num(opts.beta2).h, text(opts.beta2)},
      {"--eps", Digest().num(opts.eps).h, text(opts.eps)},
      {"--weight-decay", Digest().num(weightDecay).h, text(weightDecay)},
      {"--momentum", Digest().num(opts.momentum).h, text(opts.momentum)},
      {"--nesterov", Digest().num(opts.nesterov).h, opts.nesterov ? "on" : "off"},
      {"--clip-norm", Digest().num(opts.clipNorm).h, text(opts.clipNorm)},
      {"--no-decay", Digest().add(decayText).h, decayText},
      {"--loss-scale", Digest().add(scale).num(scaler.scale()).h,
       scale + (scaler.enabled() ? " " + text(scaler.scale()) : "")},
      {"--accum", Digest().num(opts.accum).h, std::to_string(opts.accum)},
      {"--steps", Digest().num(opts.steps).h, std::to_string(opts.steps)},
      {"--max-steps", Digest().num(opts.stopAt()).h, std::to_string(opts.stopAt())},
      {"--seed", Digest().num(opts.seed).h, std::to_string(opts.seed)},
      {"the data (--data or --feed, and its length)",
       Digest().num(opts.haveData).num(dataLength).h,
       (opts.haveData ? "--data, " : "--feed, ") + std::to_string(dataLength) + " tokens"},
      {"--data-order", Digest().num(opts.sequential).h, opts.sequential ? "sequential" : "random"},
      {"--labels", Digest().add(opts.labels).h, opts.labels.empty() ? "(not given)" : opts.labels},
      {"--resume", Digest().num(opts.resume.empty()).h,
       opts.resume.empty() ? "(not given)" : "given"},
  };
  const size_t K = fields.size(), N = static_cast<size_t>(world.size());
  // Rank 0's digests to every rank; each rank marks the fields where it
  // differs; the marks summed say every rank's differences to every rank.
  std::vector<uint64_t> rank0(K);
  for (size_t i = 0; i < K; ++i)
    rank0[i] = fields[i].digest;
  if (!(err = world.broadcast(rank0.data(), K * sizeof(uint64_t), 0,
                              "comparing what the ranks train"))
           .empty())
    return error(err);
  std::vector<double> marks(N * K, 0.0);
  for (size_t i = 0; i < K; ++i)
    marks[static_cast<size_t>(world.rank()) * K + i] = fields[i].digest != rank0[i];
  if (!(err = world.sum(marks.data(), marks.size(), "comparing what the ranks train")).empty())
    return error(err);
  std::string differences;
  for (size_t i = 0; i < K; ++i) {
    std::string ranks;
    for (size_t r = 0; r < N; ++r)
      if (marks[r * K + i] != 0)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (ranks.empty())
      continue;
    differences += std::string(differences.empty() ? "" : "; ") + fields[i].name +
                   " differs from rank 0's on rank" + (ranks.find(',') == std::string::npos ? " " : "s ") +
                   ranks + " (this rank, " + std::to_string(world.rank()) + ": " +
                   fields[i].mine + ")";
  }
  if (!differences.empty())
    return error("the ranks do not train the same thing: " + differences +
                 "; give every rank the same step and flags");
  return kGoOn;
}

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
