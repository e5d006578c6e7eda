//===- trainer_state.cpp - restore, checkpoints, finish ---------------------===//

#include "runtime/lib/trainer_impl.h"

#include "runtime/lib/resume_flags.h"

#include <cmath>

namespace tcc::run::detail {

int Trainer::restore() {
  // The arena, with the initial parameters or the checkpoint's. For a device
  // step, `arena` is the host mirror: the parameters and optimizer state are
  // copied out before they are written anywhere, and in after a resume.
  if (!(err = prepareArena(step, mem, world, nccl)).empty() ||
      !(err = loadInitWeights(opts.initWeights, opts.initStd, opts.seed, !opts.resume.empty(), step, mem)).empty())
    return error(err);
  arena = mem.host;
  stepArena = mem.stepArena();
  flagsText = recordFlags(opts);
  ck.rng = tcc::data::initialRngState(opts.seed);
  ck.seed = opts.seed;
  if (opts.resume.empty() && !(err = seedDropout(step, mem, opts.seed)).empty())
    return error(err);
  if (!opts.resume.empty()) {
    if (!(err = tcc::ckpt::read(opts.resume, info, ck, arena, world.rank(), world.size()))
             .empty())
      return error(err);
    if (!(err = mem.copyIn(info.params, info.num_params)).empty() ||
        !(err = mem.copyIn(info.state, info.num_state)).empty())
      return error(err);
    std::string path = tcc::ckpt::filePath(opts.resume);
    if (ck.step >= opts.stopAt()) {
      if (world.rank() == 0)
        std::printf("checkpoint %s is at step %lld; %s %lld: nothing to do\n", path.c_str(),
                    static_cast<long long>(ck.step),
                    opts.stopAt() < opts.steps ? "--max-steps" : "--steps",
                    static_cast<long long>(opts.stopAt()));
      return 0;
    }
    if (world.rank() == 0 && !opts.quiet)
      std::fprintf(stderr, "tcc-run: resumed from step %lld/%lld (%s)\n",
                   static_cast<long long>(ck.step), static_cast<long long>(opts.steps),
                   path.c_str());
    // A checkpoint counts the micro-batches of a step across the world.
    const int64_t worldAccum = opts.accum * world.size();
    if (world.parallel() && ck.accum != worldAccum)
      return error("the checkpoint " + path + " was written with " + std::to_string(ck.accum) +
                   " micro-batches per optimizer step; " + std::to_string(world.size()) +
                   " ranks with --accum " + std::to_string(opts.accum) + " take " +
                   std::to_string(worldAccum) +
                   ": resume with ranks x --accum = " + std::to_string(ck.accum) +
                   " (any world size that divides it), so that each step trains on the "
                   "same micro-batches");
    if (!world.parallel() && ck.accum != opts.accum)
      warning("resuming with --accum " + std::to_string(opts.accum) +
              "; the checkpoint was written with --accum " +
              std::to_string(ck.accum));
    if (ck.dataKind != dataKind || ck.dataLength != dataLength)
      warning("the checkpoint was written with other training data (the "
              "data position continues anyway)");
    else if (dataKind == tcc::ckpt::Tokens &&
             ck.dataOrder != (opts.sequential ? 1u : 0u))
      warning("the checkpoint was written with another --data-order");
    if (opts.wasGiven("--seed") && ck.seed != opts.seed)
      warning("--seed is ignored when resuming: the data order and the "
              "dropout masks continue from the checkpoint's PRNG state");
    // The loss scaler continues where it was when both runs scale
    // dynamically; otherwise it starts afresh (keeping the skipped count).
    tcc::LossScaler::State saved;
    saved.mode = ck.lossScaleMode;
    saved.scale = ck.lossScale;
    saved.growthTracker = ck.growthTracker;
    saved.skipped = ck.skipped;
    tcc::LossScaler was;
    was.restore(saved);
    if (scaler.isDynamic() && was.isDynamic()) {
      scaler.restore(saved);
    } else {
      scaler.restoreSkipped(saved);
      if (was.enabled() &&
          (was.mode() != scaler.mode() || was.scale() != scaler.scale()))
        warning("the checkpoint was written with --loss-scale=" +
                was.describe() +
                (was.isDynamic() ? format(" (at scale %g)", was.scale())
                                 : std::string()) +
                "; continuing with --loss-scale=" + scaler.describe() +
                (scaler.isDynamic()
                     ? format(" from scale %g", scaler.scale())
                     : std::string()));
    }
    // The accumulators are zero between optimizer steps.
    if ((rc = step.zeroGrads(stepArena)) != 0)
      return error("the step's zero_grads failed (code " +
                   std::to_string(rc) + ")");
  }
  int metricsFd = -1;
  if (!opts.metrics.empty()) {
    // Opened without truncating: a fresh run truncates it once the checks
    // are done, a resumed run appends.
    metricsFd = ::open(opts.metrics.c_str(),
                       O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (metricsFd < 0)
      return error("cannot open the metrics file " + opts.metrics + ": " +
                   errnoText(errno));
  }
  metricsCloser.fd = metricsFd;
  if (metricsFd >= 0) {
    if (opts.resume.empty() && ::ftruncate(metricsFd, 0) != 0)
      return error("cannot truncate the metrics file " + opts.metrics + ": " +
                   errnoText(errno));
    metricsCloser.f = ::fdopen(metricsFd, "a");
    if (!metricsCloser.f)
      return error("cannot open the metrics file " + opts.metrics + ": " +
                   errnoText(errno));
  }
  metrics = metricsCloser.f;
  // --tensorboard: a new event file for this process (TensorBoard reads
  // every event file in the folder, so a resumed run adds one).
  if (!opts.tensorboard.empty() && !(err = board.open(opts.tensorboard)).empty())
    return error(err);

  std::memset(&args, 0, sizeof args);
  args.beta1 = opts.beta1;
  args.beta2 = opts.beta2;
  args.eps = opts.eps;
  args.weight_decay = weightDecay;
  args.momentum = opts.momentum;
  args.nesterov = opts.nesterov ? 1 : 0;
  args.clip_norm = opts.clipNorm;
  args.decay = decay.data();

  return kGoOn;
}

int Trainer::writeShardedCheckpoint(const tcc::ckpt::State &s, const std::string &where) {
  tcc::ckpt::ShardEntry mine;
  std::string own = tcc::ckpt::writeShard(opts.checkpoint, s, info, arena, world.rank(),
                                          static_cast<int>(N), mine);
  int64_t failed = own.empty() ? 0 : 1;
  if (!(err = world.max(failed, "agreeing that every checkpoint shard is written")).empty())
    return error(where + ": " + err);
  if (!own.empty())
    return error(where + ": " + own);
  if (failed)
    return error(where + ": another rank could not write its checkpoint shard (its message "
                         "says why); the last complete checkpoint in " +
                 opts.checkpoint + " is intact");
  std::vector<uint64_t> all(2 * static_cast<size_t>(N));
  all[2 * static_cast<size_t>(world.rank())] = mine.bytes;
  all[2 * static_cast<size_t>(world.rank()) + 1] = mine.checksum;
  if (!(err = world.allgather(all.data(), 2, 8, "gathering the checkpoint's manifest")).empty())
    return error(where + ": " + err);
  if (world.rank() == 0) {
    std::vector<tcc::ckpt::ShardEntry> manifest(static_cast<size_t>(N));
    for (size_t r = 0; r < manifest.size(); ++r)
      manifest[r] = {all[2 * r], all[2 * r + 1]};
    if (!(err = tcc::ckpt::writeSharded(opts.checkpoint, s, info, arena, manifest)).empty())
      return error(err);
    if (!(err = tcc::ckpt::removeStaleShards(opts.checkpoint, s.step)).empty())
      warning(err);
  }
  return kGoOn;
}

int Trainer::checkpoint(int64_t it, const std::string &where, bool last, int stopSignal) {
  if (!opts.checkpoint.empty() &&
      (last || stopSignal ||
       (opts.checkpointEvery > 0 && (it + 1) % opts.checkpointEvery == 0))) {
    tcc::ckpt::State s = ck;
    s.fingerprint = tcc::ckpt::fingerprint(info);
    s.step = it + 1;
    s.rng = dataRng;
    s.position = dataPos;
    s.losses = ck.losses + losses.size();
    s.accum = K;
    if (N > 1) {
      // The world's data position: the single process's after this step.
      // The last rank drew the step's last windows: its generator state is
      // the single process's.
      if (!(err = world.broadcast(&s.rng, sizeof s.rng, static_cast<int>(N - 1),
                                   "sending the data position"))
               .empty())
        return error(where + ": " + err);
      s.position = static_cast<uint64_t>((it + 1) * N * K);
      s.accum = N * K;
      if (dropoutCount)
        *dropoutCount = static_cast<int64_t>(s.position);
    }
    s.dataKind = dataKind;
    s.dataOrder = opts.sequential ? 1 : 0;
    s.dataLength = dataLength;
    s.optimizerSteps = optimizerSteps;
    tcc::LossScaler::State ls = scaler.state();
    s.lossScaleMode = ls.mode;
    s.lossScale = ls.scale;
    s.growthTracker = ls.growthTracker;
    s.skipped = ls.skipped;
    const double ckStart = trace.active() ? trace.now() : 0.0;
    if (!(err = mem.copyOutParamsAndState(true)).empty())
      return error(where + ": " + err);
    mirrorAt = it + 1;
    // The flags first: a kill between the two leaves the previous
    // checkpoint with this run's flags, which its resume would be given.
    if (world.rank() == 0 && !(err = writeFlags(opts.checkpoint, flagsText)).empty())
      return error(where + ": " + err);
    if (step.shards) {
      if (int r = writeShardedCheckpoint(s, where); r >= 0)
        return r;
    } else if (world.rank() == 0) {
      if (!(err = tcc::ckpt::write(opts.checkpoint, s, info, arena)).empty())
        return error(err);
      if (opts.keepCheckpoints > 1 &&
          !(err = tcc::ckpt::keepHistory(opts.checkpoint, s.step, opts.keepCheckpoints)).empty())
        return error(where + ": " + err);
    }
    if (trace.active())
      trace.complete(tcc::trace::kLoop, "checkpoint write", "checkpoint", ckStart,
                     trace.now() - ckStart);
  }
  return kGoOn;
}

int Trainer::saveModel(int64_t stepsDone) {
  if (mem.device && mirrorAt != stepsDone) {
    if (!(err = mem.copyOutParamsAndState(false)).empty())
      return error(err);
    mirrorAt = stepsDone;
  }
  // Integration point: runtime/onnx_save.{h,cpp} write the trained model.
  char msg[1024] = {0};
  if (tcc_save_onnx(modelPath.c_str(), opts.save.c_str(), &info, arena, msg, sizeof msg) != 0)
    return error("cannot save " + opts.save + ": " + (msg[0] ? msg : "unknown error"));
  return kGoOn;
}

int Trainer::finish() {
  // The results.
  double secs = elapsed();
  int64_t done = opts.stopAt() - firstStep;
  if (skipped && !scaler.isDynamic())
    warning(std::to_string(skipped) + " of " + std::to_string(done) +
            " optimizer steps were skipped (gradient norm not finite)" +
            (opts.checkNumerics ? std::string()
                                : "; tcc-run --check-numerics names the op where the values "
                                  "stop being finite"));
  if (mem.device && opts.haveDump && mirrorAt != opts.stopAt()) {
    if (!(err = mem.copyOutParamsAndState(false)).empty())
      return error(err);
    mirrorAt = opts.stopAt();
  }
  if (opts.haveDump) {
    // All the files or none: a full disk half way keeps the last dump.
    tcc::io::StagedFolder staged;
    if (!(err = staged.open(opts.dump)).empty())
      return error(err);
    int64_t n = static_cast<int64_t>(losses.size());
    std::string at = staged.path("losses.npy", err);
    if (!err.empty() ||
        !(err = tcc::npy::writeFile(at, "<f4", &n, 1, losses.data(),
                                    losses.size() * sizeof(float)))
             .empty())
      return error(dumpNotWritten(opts.dump, err));
    for (int32_t i = 0; i < info.num_params; ++i) {
      at = staged.path("params/" + fileNameFor(info.params[i].name), err);
      if (!err.empty() || !(err = dumpTensor(at, info.params[i], arena)).empty())
        return error(dumpNotWritten(opts.dump, err));
    }
    if (!(err = staged.commit()).empty())
      return error(dumpNotWritten(opts.dump, err));
  }
  if (!opts.save.empty())
    if (int r = saveModel(opts.stopAt()); r >= 0)
      return r;
  std::string summary = "trained " + std::to_string(done) +
                        " steps: loss first " +
                        format("%.4f", firstLoss) + " -> last " +
                        format("%.4f", lastLoss) + ", " +
                        format("%.1f", secs) + " s";
  if (tokensPerMicro)
    summary += ", " +
               formatCount(secs > 0 ? static_cast<double>(done * K) *
                                          static_cast<double>(tokensPerMicro) /
                                          secs
                                    : 0) +
               " tok/s";
  if (scaler.enabled())
    summary += ", loss scale " + format("%g", scaler.scale()) + " (" +
               std::to_string(skipped) + " of " + std::to_string(done) +
               " steps skipped)";
  if (world.parallel())
    summary += ", " + std::to_string(N) + " ranks";
  if (!std::isnan(lastValLoss))
    summary += "; validation loss " + format("%.4f", lastValLoss) + ", perplexity " +
               format("%.2f", std::exp(lastValLoss)) + " (" + std::to_string(valBatches) +
               " batches of " + opts.valData + ")";
  if (world.rank() == 0)
    std::printf("%s\n", summary.c_str());
  char comm[512] = {0};
  if (nccl && world.rank() == 0 && step.commInfo(stepArena, comm, sizeof comm) == 0)
    std::printf("gradients summed with %s\n", comm);
  if (step.device)
    reportDeviceMemory(step, world);
  // A run that changed nothing is not a success, whatever it wrote.
  if (done > 0 && skipped == done)
    return error("every optimizer step of this run (" + std::to_string(done) + " of " +
                 std::to_string(done) + ") was skipped because its gradients were not finite" +
                 (scaler.enabled() ? " (loss scale " + format("%g", scaler.scale()) + " at the end)"
                                   : std::string()) +
                 ", so the parameters did not change" +
                 (opts.save.empty() && opts.checkpoint.empty() ? std::string()
                                                               : " (what it wrote holds them as they were)") +
                 (scaler.isDynamic() ? "; a longer run lets the dynamic loss scale come down"
                  : scaler.enabled()  ? "; a smaller --loss-scale, or --loss-scale=dynamic, avoids it"
                  : !std::isfinite(lastLoss)
                      ? "; the loss itself was not finite: look at the initial weights and the data"
                      : "; look at the learning rate, the initial weights and the data") +
                 (opts.checkNumerics ? std::string()
                                     : " (tcc-run --check-numerics names the first op whose "
                                       "values are not finite)"));
  return 0;
}

} // namespace tcc::run::detail
