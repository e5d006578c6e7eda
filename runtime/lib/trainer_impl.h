//===- trainer_impl.h - the training run's phases, for its files -*- C++ -*-===//
//
// runTraining's Trainer (runtime/lib/trainer.h is the interface), shared by
// the files that define its phases: trainer.cpp (validate, open the data,
// check the outputs, the loop of optimizer steps and micro-steps, the
// record), trainer_state.cpp (restore, checkpoints, finish),
// trainer_world.cpp (the sums and the sharded update across ranks) and
// trainer_eval.cpp (validation).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_TRAINER_IMPL_H
#define TCC_RUNTIME_LIB_TRAINER_IMPL_H

#include "runtime/lib/trainer.h"
#include "runtime/lib/outputs.h"

#include "runtime/checkpoint.h"
#include "runtime/lib/arena.h"
#include "runtime/lib/evaluator.h"
#include "runtime/lib/feeds.h"
#include "runtime/lib/numerics.h"
#include "runtime/lib/report.h"
#include "runtime/lib/tensor_values.h"
#include "runtime/lib/text.h"
#include "runtime/loss_scale.h"
#include "runtime/npy.h"
#include "runtime/onnx_save.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"
#include "runtime/tensorboard.h"
#include "runtime/trace.h"
#include "runtime/train_data.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::run {

using tcc::io::errnoText;
using tcc::io::joinPath;
using tcc::npy::shapeToString;
using tcc::step::describe;
using tcc::step::lookupDType;
using tcc::step::quoted;

/// The marks of the micro-step being traced (tcc_step_set_trace_hook): the
/// time of mark k in microseconds, on the trace's clock for a CPU step (the
/// hook reads it as the mark happens), from mark 0 on the device for a CUDA
/// step; NaN until the mark is reported.
struct TraceMarks {
  const tcc::trace::Writer *writer = nullptr;
  std::vector<double> at;
  void clear() { std::fill(at.begin(), at.end(), NAN); }
  bool complete() const {
    return std::none_of(at.begin(), at.end(), [](double t) { return std::isnan(t); });
  }
};

namespace detail {

/// A training run in phases: validate the step and the options, open the
/// data, check (and create) the outputs, restore (the arena, the initial
/// weights or a checkpoint, the metrics), then the loop of optimizer steps
/// (micro-steps, the world's sums, the update, the record, the checkpoint),
/// and finish (the dump, --save, the summary). Each phase returns kGoOn, or
/// the exit code the run ends with.
class Trainer {
public:
  static constexpr int kGoOn = -1;

  Trainer(const Options &opts, const Step &step, tcc::dp::World &world, bool nccl)
      : opts(opts), step(step), world(world), nccl(nccl), info(*step.info) {}

  int run();

private:
  /// The step: a backward pass, an optimizer this runtime knows, the
  /// options that apply to it; the loss scaler; the weight-decay mask.
  int validate();

  /// The micro-batches: a token stream (--data) or .npy feeds (--feed).
  int openData();
  /// What each step input takes from a token window (--data), by the
  /// step's objective and --labels; "" or why not.
  std::string tokenColumns(std::vector<tcc::data::TokenColumn> &columns);

  /// --val-data: the validation stream and the step's evaluation step
  /// (rank 0 only), from the token columns `columns`.
  int openValidation(std::vector<tcc::data::TokenColumn> columns);

  /// The validation loss of the current parameters (a device step's copied
  /// to the host mirror first), into valLoss: "" or why not.
  std::string evaluate();

  /// --eval-only: the initial, --init-weights' or a checkpoint's parameters
  /// evaluated, without training.
  int evaluateOnly();

  /// The output locations, checked (and created) before any work.
  int checkOutputs();

  /// With more than one rank: every rank trains the same thing (the step,
  /// its optimizer and hyperparameters, the schedule, accumulation, steps,
  /// data and seed rules), compared as digests before the arena and the
  /// NCCL communicator open; a difference is one error on every rank that
  /// names the field and the ranks.
  int agree();

  /// Writes --save from the parameters after `stepsDone` optimizer steps
  /// (copied out of the device first where needed).
  int saveModel(int64_t stepsDone);

  /// The arena with the initial parameters or a checkpoint's; the metrics
  /// file and the TensorBoard events; the optimizer's arguments.
  int restore();

  /// The loop's state: where it starts, this rank's share of the data, the
  /// trace, the prefetcher and the staging of a device step's inputs.
  int prepareLoop();

  /// The optimizer steps, until --steps or a stop.
  int loop();

  /// One optimizer step: K micro-steps, the world's sums, the update, the
  /// record and the checkpoint; a stop after it.
  int trainStep(int64_t it);

  /// Micro-step k of optimizer step it; its loss is added to lossSum.
  int microStep(int64_t it, int64_t k, const std::string &where, double scale, double &lossSum);

  /// --trace, a CUDA step under NCCL: the optimizer step's collectives on
  /// the communicator stream's lane, timed on the device from the last
  /// micro-step's mark 0 (as its ops are), with their bytes.
  void traceCollectives();

  /// The element size of a sharded step's flat spaces.
  int shardElemBytes() const { return step.shards->dtype == TCC_DTYPE_F64 ? 8 : 4; }

  /// ZeRO-1's update (the gradients already reduce-scattered): the world's
  /// sum of squares, this rank's chunk updated, the parameters all-gathered.
  /// Sets rc as apply would.
  /// A CUDA step reduce-scatters and all-gathers itself, over NCCL, inside
  /// these calls: they are watched like the other collectives.
  int shardedApply(const std::string &where);

  /// Across ranks: the CPU step's gradients summed (a device step's NCCL
  /// sums them itself), and every rank's losses gathered on rank 0.
  int sumAcrossRanks(const std::string &where, double &lossSum);

  /// The step in the metrics file, TensorBoard and the progress line.
  int record(int64_t it, double loss, double lr, double scale, bool skip, double secs,
             uint64_t tokensNow, int64_t done);

  /// A sharded step's checkpoint: every rank's shard file, then rank 0's
  /// checkpoint.bin with their manifest (its rename commits the checkpoint),
  /// then the old steps' shards removed.
  int writeShardedCheckpoint(const tcc::ckpt::State &s, const std::string &where);

  /// The checkpoint after step it, when one is due (or the run ends or stops).
  int checkpoint(int64_t it, const std::string &where, bool last, int stopSignal);

  /// The results: the dump, --save, the summary, the device's memory.
  int finish();

  double elapsed() const;

  std::string stopTracing();

  /// The batch the reader handed over last, on the trace.
  void traceBatch(const tcc::data::Prefetcher &p);

  std::string stageNext(const std::string &where);

  tcc::data::Prefetcher &prefetch() { return *prefetchOwner; }

  const Options &opts;
  const Step &step;
  tcc::dp::World &world;
  const bool nccl;
  double lastDeviceStart = 0; // --trace: the last micro-step's mark 0 on the trace's clock
  const tcc_step_info &info;
  std::string err;
  int rc = 0;

  // validate
  double weightDecay = 0;
  tcc::LossScaler scaler;
  std::vector<uint8_t> decay;
  // openData
  std::unique_ptr<tcc::data::BatchMaker> maker;
  tcc::data::TokenStream tokens;
  uint32_t dataKind = 0;
  uint64_t dataLength = 0;
  uint64_t tokensPerMicro = 0; // B*T of the first integer input
  std::vector<tcc::data::TokenColumn> dataColumns; // --data's, for --val-data
  // openValidation
  std::unique_ptr<Evaluator> evaluator;
  tcc::data::TokenStream valTokens;
  std::unique_ptr<tcc::data::BatchMaker> valMaker;
  int64_t valBatches = 0;
  double valLoss = NAN, lastValLoss = NAN; // this step's (NaN: none), the last one
  // checkOutputs
  std::string paramsDir, modelPath;
  // restore
  Arena mem;
  char *arena = nullptr;   // the host arena, or a device step's host mirror
  void *stepArena = nullptr;
  tcc::ckpt::State ck;
  struct FileCloser {
    FILE *f = nullptr;
    int fd = -1;
    ~FileCloser() {
      if (f)
        std::fclose(f);
      else if (fd >= 0)
        ::close(fd);
    }
  } metricsCloser;
  FILE *metrics = nullptr;
  tcc::tb::EventWriter board;
  tcc_optim_args args;
  // prepareLoop
  int64_t firstStep = 0, optimizerSteps = 0, K = 1, N = 1;
  std::unique_ptr<tcc::dp::ShardedBatchMaker> shard;
  tcc::data::BatchMaker *source = nullptr;
  int64_t *dropoutCount = nullptr; // [seed, micro-steps done] of the dropout state
  const tcc_tensor_desc *lossDesc = nullptr;
  bool tty = false;
  std::vector<float> losses;
  double firstLoss = NAN, lastLoss = NAN;
  int64_t skipped = 0;
  std::string flagsText;  // DIR/training-flags, as each checkpoint writes it
  int64_t mirrorAt = -1; // device steps: the step whose parameters and state the host mirror holds
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0;
  tcc::trace::Writer trace;
  TraceMarks marks;
  NumericsCheck numerics; // --check-numerics (set up in prepareLoop)
  int64_t skipStreak = 0; // optimizer steps skipped in a row
  bool pointedToCheck = false; // the note that points to --check-numerics was printed
  int64_t traceEnd = 0;
  std::unique_ptr<tcc::data::Prefetcher> prefetchOwner;
  uint64_t dataPos = 0, dataRng = 0;
  uint64_t inputBytes = 0;
  bool staged = false;                   // a batch is uploading for the next micro-step
  uint64_t stagedPos = 0, stagedRng = 0; // the data position after it
  std::string stageErr;                  // why staging the next batch failed
};

} // namespace detail
} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_TRAINER_IMPL_H
