//===- options.h - what a training run is told ---------------------*- C++ -*-===//
//
// The options of a run, as tcc-run's command line gives them (tcc-run
// --help says what each does); the trainer reads them.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_OPTIONS_H
#define TCC_RUNTIME_LIB_OPTIONS_H

#include "runtime/loss_scale.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tcc::run {

struct Options {
  std::string step, feed, dump;
  bool gradsOnly = false, haveFeed = false, haveDump = false;

  // Training.
  std::string data, metrics, checkpoint, resume, save, model, initWeights;
  /// --init=normal[:STD]: initWeights' alternative, drawn (initStd > 0).
  double initStd = 0;
  std::string trace, tensorboard;
  int64_t traceSteps = 2;
  bool haveData = false;
  int64_t steps = 1, accum = 1, warmup = 0, printEvery = 1,
          checkpointEvery = 0;
  /// --keep-checkpoints: how many checkpoints DIR/step-S/ keeps besides
  /// DIR/checkpoint.bin (1: only that file, the default).
  int64_t keepCheckpoints = 1;
  /// --max-steps: this run stops once this many optimizer steps in all are
  /// done (0: at --steps, which stays the schedule's horizon).
  int64_t maxSteps = 0;
  /// Where this run stops: --max-steps, else --steps.
  int64_t stopAt() const { return maxSteps && maxSteps < steps ? maxSteps : steps; }
  /// Validation (tcc --with-eval steps): --val-data FILE, evaluated every
  /// --eval-every N optimizer steps (not given: at the end only) on
  /// --eval-batches K micro-batches (not given: every whole batch of the
  /// file, at most 100);
  /// --eval-only evaluates (the initial weights, --init-weights' or
  /// --resume's checkpoint's) without training.
  std::string valData;
  int64_t evalEvery = 0, evalBatches = 0;
  bool evalOnly = false;
  /// --threads: the threads a CPU step's GEMMs use (0: every core this
  /// process may run on).
  int64_t threads = 0;
  /// The thread count --threads (or the cores) resolved to, for a CPU step.
  int64_t resolvedThreads = 0;
  uint64_t seed = 0;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, momentum = 0,
         clipNorm = 0, minLr = 0;
  double weightDecay = 0;
  bool haveWeightDecay = false;
  bool nesterov = false, quiet = false, noPrefetch = false, cudaGraphs = false,
       noCudaGraphs = false;
  bool cosine = false;
  /// --check-numerics: look at every op's results (runtime/lib/numerics.h).
  bool checkNumerics = false;
  bool sequential = false;
  /// --labels=shifted|aligned: how the loss reads its labels, where the
  /// step does not record it (or to override the record); "" if not given.
  std::string labels;
  /// --loss-scale; without it, dynamic for device steps and off for host
  /// steps (decided once the step is loaded).
  tcc::LossScaler lossScaler;
  bool haveLossScale = false;
  std::vector<std::string> noDecay;
  /// The flags given, in order (for conflicts and "given twice").
  std::vector<std::string> given;
  bool wasGiven(const char *flag) const {
    return std::find(given.begin(), given.end(), flag) != given.end();
  }
};

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_OPTIONS_H
