//===- trainer_progress.cpp - what each optimizer step reports -------------===//
//
// The Trainer's record of each optimizer step: a line of --metrics, the
// --tensorboard scalars and the progress line on stderr.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/trainer_impl.h"

namespace tcc::run::detail {

int Trainer::record(int64_t it, double loss, double lr, double scale, bool skip, double secs,
                  uint64_t tokensNow, int64_t done) {
  // Tokens this process trained on per second (the progress line's tok/s).
  const double tokensPerSec = secs > 0 ? static_cast<double>(tokensNow) / secs : 0.0;
  if (metrics) {
    // With loss scaling: the scale this step used, and the steps skipped
    // so far (resumed ones included); for a device step, its peak memory
    // so far.
    std::string extra;
    if (scaler.enabled())
      extra += ",\"loss_scale\":" + jsonNumber(scale) +
               ",\"skipped_total\":" + std::to_string(scaler.skipped());
    if (step.device) {
      uint64_t peak = 0, total = 0;
      if (step.deviceMemory(&peak, &total) == 0)
        extra += ",\"device_peak_bytes\":" + std::to_string(peak);
    }
    if (!std::isnan(valLoss))
      extra += ",\"val_loss\":" + jsonNumber(valLoss) +
               ",\"val_ppl\":" + jsonNumber(std::exp(valLoss));
    std::fprintf(metrics,
                 "{\"step\":%lld,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,"
                 "\"tokens\":%llu,\"elapsed_s\":%.6f,\"tokens_per_s\":%s,"
                 "\"skipped\":%s%s}\n",
                 static_cast<long long>(it + 1),
                 jsonNumber(loss).c_str(), jsonNumber(lr).c_str(),
                 jsonNumber(args.grad_norm).c_str(),
                 static_cast<unsigned long long>(
                     static_cast<uint64_t>((it + 1) * K) * tokensPerMicro),
                 secs, jsonNumber(tokensPerSec).c_str(), skip ? "true" : "false",
                 extra.c_str());
    if (std::fflush(metrics) != 0 || std::ferror(metrics))
      return error("cannot write the metrics file " + opts.metrics + ": " +
                   errnoText(errno));
  }

  if (!opts.tensorboard.empty()) {
    // The values --metrics writes, under TensorBoard's tags.
    std::vector<std::pair<std::string, double>> scalars = {
        {"train/loss", loss},
        {"train/lr", lr},
        {"train/grad_norm", args.grad_norm},
        {"train/tokens_per_s", tokensPerSec},
        {"train/skipped", skip ? 1.0 : 0.0},
    };
    if (scaler.enabled())
      scalars.push_back({"train/loss_scale", scale});
    if (!std::isnan(valLoss)) {
      scalars.push_back({"val/loss", valLoss});
      scalars.push_back({"val/perplexity", std::exp(valLoss)});
    }
    struct timespec wall;
    ::clock_gettime(CLOCK_REALTIME, &wall);
    if (!(err = board.scalars(it + 1, static_cast<double>(wall.tv_sec) + wall.tv_nsec * 1e-9,
                              scalars))
             .empty())
      return error(err);
  }

  if (!opts.quiet && ((it + 1) % opts.printEvery == 0 || it + 1 == opts.stopAt() ||
                      !std::isnan(valLoss))) {
    std::string line = "step " + std::to_string(it + 1) + "/" +
                       std::to_string(opts.steps) + "  loss " +
                       format("%.4f", loss) + "  lr " + format("%.2e", lr);
    if (tokensPerMicro)
      line += "  tok/s " +
              formatCount(secs > 0 ? static_cast<double>(tokensNow) / secs
                                   : 0);
    double eta = secs / static_cast<double>(done) *
                 static_cast<double>(opts.stopAt() - it - 1);
    if (scaler.enabled()) {
      // The scale for the next step (after this step's update).
      line += "  scale " + format("%g", scaler.scale());
      if (scaler.skipped())
        line += "  skipped " + std::to_string(scaler.skipped());
    }
    if (!std::isnan(valLoss))
      line += "  val loss " + format("%.4f", valLoss) + " ppl " +
              format("%.2f", std::exp(valLoss));
    line += "  elapsed " + formatDuration(secs) + "  eta " +
            formatDuration(eta);
    if (tty) {
      std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
      gProgressOpen = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  return kGoOn;
}

} // namespace tcc::run::detail
