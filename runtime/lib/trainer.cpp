//===- trainer.cpp - a training run ---------------------------------------===//

#include "runtime/lib/trainer.h"
#include "runtime/lib/outputs.h"

#include "runtime/checkpoint.h"
#include "runtime/lib/arena.h"
#include "runtime/lib/feeds.h"
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

//===----------------------------------------------------------------------===//
// Training data
//===----------------------------------------------------------------------===//

bool isIntegerDType(int32_t dtype) {
  return dtype == TCC_DTYPE_I64 || dtype == TCC_DTYPE_I32 ||
         dtype == TCC_DTYPE_I8 || dtype == TCC_DTYPE_U8;
}

/// The step's inputs, one per line, for error messages.
std::string listInputs(const tcc_step_info &info) {
  if (info.num_inputs == 0)
    return "this step has no inputs";
  std::string s = "this step's inputs are";
  for (int32_t i = 0; i < info.num_inputs; ++i)
    s += std::string(i ? "," : ":") + " " + quoted(info.inputs[i].name) +
         " " + describe(info.inputs[i]);
  return s;
}

/// Micro-batches from .npy feeds: one batch (every micro-batch the same), or
/// one subfolder per micro-batch, cycling. The batch holds the inputs' bytes
/// one after the other, in input order.
class FeedBatchMaker : public tcc::data::BatchMaker {
public:
  FeedBatchMaker(const tcc_step_info &info, std::vector<std::string> dirs,
                 bool cycle)
      : info(info), dirs(std::move(dirs)), cycle(cycle) {
    for (int32_t i = 0; i < info.num_inputs; ++i)
      bytes += info.inputs[i].bytes;
  }
  uint64_t batchBytes() const override { return bytes; }
  std::string make(uint64_t index, uint64_t &, char *buf) override {
    if (!cycle) {
      std::memcpy(buf, once.data(), static_cast<size_t>(bytes));
      return "";
    }
    return read(dirs[static_cast<size_t>(index % dirs.size())], buf);
  }
  /// Reads the single batch (without subfolders) now.
  std::string preload() {
    once.resize(static_cast<size_t>(bytes));
    return read(dirs[0], once.data());
  }

private:
  std::string read(const std::string &dir, char *buf) {
    for (int32_t i = 0; i < info.num_inputs; ++i) {
      std::string err = feedInputTo(dir, info.inputs[i], buf);
      if (!err.empty())
        return err;
      buf += info.inputs[i].bytes;
    }
    return "";
  }

  const tcc_step_info &info;
  std::vector<std::string> dirs;
  bool cycle;
  uint64_t bytes = 0;
  std::vector<char> once;
};

/// The subfolders of `dir` (not starting with '.'), sorted by name.
std::string listSubdirs(const std::string &dir,
                        std::vector<std::string> &out) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return "cannot list the feed directory " + dir + ": " +
           errnoText(errno);
  std::vector<std::string> names;
  while (struct dirent *e = ::readdir(d)) {
    if (e->d_name[0] == '.')
      continue;
    std::string path = joinPath(dir, e->d_name);
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      names.push_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string &n : names)
    out.push_back(joinPath(dir, n));
  return "";
}

//===----------------------------------------------------------------------===//
// Stopping on SIGINT / SIGTERM
//===----------------------------------------------------------------------===//

volatile sig_atomic_t gStopSignal = 0;

void onStopSignal(int sig) {
  if (gStopSignal) { // the second one: stop now
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  gStopSignal = sig;
  static const char msg[] =
      "\ntcc-run: interrupted: stopping after this optimizer step (again to stop at once)\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

/// From here on, SIGINT and SIGTERM end the training loop after the current
/// optimizer step (with a checkpoint when --checkpoint is set).
void catchStopSignals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

constexpr double kPi = 3.14159265358979323846; // Python's math.pi

/// nanoGPT's get_lr, with `it` the 0-based optimizer step.
double learningRate(const Options &o, int64_t it) {
  if (it < o.warmup)
    return o.lr * static_cast<double>(it + 1) / static_cast<double>(o.warmup);
  if (!o.cosine)
    return o.lr;
  if (it > o.steps)
    return o.minLr;
  double ratio = o.steps == o.warmup
                     ? 0.0
                     : static_cast<double>(it - o.warmup) /
                           static_cast<double>(o.steps - o.warmup);
  double coeff = 0.5 * (1.0 + std::cos(kPi * ratio));
  return o.minLr + coeff * (o.lr - o.minLr);
}

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

void recordTraceMark(void *ctx, int32_t mark, double seconds) {
  auto *m = static_cast<TraceMarks *>(ctx);
  if (mark < 0 || static_cast<size_t>(mark) >= m->at.size())
    return;
  m->at[mark] = seconds < 0 ? m->writer->now() : seconds * 1e6;
}

/// Adds the ops of a traced micro-step, from its marks, to `trace`: on the
/// training loop's lane for a CPU step; on the device stream's lane for a
/// CUDA step, inside a span for the micro-step, the device's mark 0 placed
/// at `deviceStart` (microseconds on the trace's clock). Each op comes with
/// the plan's live arena bytes as a counter.
void traceOps(tcc::trace::Writer &trace, const tcc_step_info &info, const TraceMarks &marks,
              bool device, double deviceStart, const std::string &microName) {
  const int32_t n = info.num_ops;
  const double base = device ? deviceStart : 0.0;
  const int lane = device ? tcc::trace::kDevice : tcc::trace::kLoop;
  if (device)
    trace.complete(lane, microName + " (device)", "micro_step", base, marks.at[n]);
  for (int32_t k = 0; k < n; ++k) {
    const double ts = base + marks.at[k];
    trace.complete(lane, info.ops[k], "kernel", ts, marks.at[k + 1] - marks.at[k],
                   "\"op\":" + std::to_string(k) +
                       ",\"live_bytes\":" + std::to_string(info.op_live_bytes[k]));
    trace.counter("live arena bytes (plan)", "bytes", ts,
                  static_cast<double>(info.op_live_bytes[k]));
  }
}

namespace {

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

  int run() {
    for (int (Trainer::*phase)() : {&Trainer::validate, &Trainer::openData, &Trainer::checkOutputs,
                                    &Trainer::restore, &Trainer::prepareLoop, &Trainer::loop})
      if (int rc = (this->*phase)(); rc != kGoOn)
        return rc;
    return finish();
  }

private:
  /// The step: a backward pass, an optimizer this runtime knows, the
  /// options that apply to it; the loss scaler; the weight-decay mask.
  int validate() {
    // The step.
    if (!info.has_backward)
      return error(opts.step +
                   " has no backward pass (it was compiled without a loss), so "
                   "it cannot train; --grads-only runs its forward pass");
    if (!step.apply)
      return error(opts.step +
                   " does not export tcc_step_apply, so it cannot train; "
                   "rebuild it with a tcc that has optimizers");
    if (step.shards && world.size() != step.shards->ranks)
      return error(opts.step + " was compiled with --data-parallel=" +
                   std::to_string(step.shards->ranks) +
                   ": its optimizer state is sharded across " +
                   std::to_string(step.shards->ranks) + " ranks, so it trains under mpirun -np " +
                   std::to_string(step.shards->ranks) + " (or srun -n " +
                   std::to_string(step.shards->ranks) + "); this run has " +
                   std::to_string(world.size()) + (world.size() == 1 ? " rank" : " ranks"));
    std::string optimizer = info.optimizer ? info.optimizer : "";
    bool adamw = optimizer == "adamw";
    if (!adamw && optimizer != "sgd")
      return error("the step's optimizer " + quoted(optimizer.c_str()) +
                   " is not one this tcc-run knows (adamw, sgd)");
    if (adamw) {
      for (const char *f : {"--momentum", "--nesterov"})
        if (opts.wasGiven(f))
          warning(std::string(f) + " applies to SGD; this step's optimizer is "
                                   "AdamW, which ignores it");
    } else {
      for (const char *f : {"--beta1", "--beta2", "--eps"})
        if (opts.wasGiven(f))
          warning(std::string(f) + " applies to AdamW; this step's optimizer "
                                   "is SGD, which ignores it");
    }
    weightDecay =
        opts.haveWeightDecay ? opts.weightDecay : (adamw ? 0.01 : 0.0);

    // Loss scaling: dynamic by default on a device (whose kernels may compute
    // in float16), off on the CPU.
    scaler = opts.haveLossScale ? opts.lossScaler
                             : step.device    ? tcc::LossScaler::dynamic()
                                              : tcc::LossScaler::off();

    decay.assign(static_cast<size_t>(info.num_params), 1);
    for (const std::string &glob : opts.noDecay) {
      bool any = false;
      for (int32_t i = 0; i < info.num_params; ++i)
        if (::fnmatch(glob.c_str(), info.params[i].name, 0) == 0) {
          decay[static_cast<size_t>(i)] = 0;
          any = true;
        }
      if (!any)
        warning("--no-decay pattern '" + glob + "' matches no parameter");
    }

    return kGoOn;
  }

  /// The micro-batches: a token stream (--data) or .npy feeds (--feed).
  int openData() {
    // The data.
    if (opts.haveData) {
      bool ok = info.num_inputs == 2;
      for (int32_t i = 0; ok && i < 2; ++i)
        ok = isIntegerDType(info.inputs[i].dtype) && info.inputs[i].rank == 2;
      ok = ok && info.inputs[0].dtype == info.inputs[1].dtype &&
           info.inputs[0].dims[0] == info.inputs[1].dims[0] &&
           info.inputs[0].dims[1] == info.inputs[1].dims[1];
      if (!ok)
        return error("--data needs a step with exactly two integer inputs of "
                     "one shape [B, T] and dtype (tokens, then targets); " +
                     listInputs(info));
      int64_t B = info.inputs[0].dims[0], T = info.inputs[0].dims[1];
      if (B < 1 || T < 1)
        return error("--data needs inputs of shape [B, T] with B, T >= 1; " +
                     listInputs(info));
      if (!(err = tokens.open(opts.data)).empty())
        return error(err);
      if (tokens.size() < static_cast<uint64_t>(T) + 1)
        return error("the data file " + opts.data + " has " +
                     std::to_string(tokens.size()) +
                     " tokens; the step's windows need at least T + 1 = " +
                     std::to_string(T + 1));
      int elem = static_cast<int>(lookupDType(info.inputs[0].dtype)->size);
      maker.reset(new tcc::data::TokenBatchMaker(
          tokens, B, T, elem,
          opts.sequential ? tcc::data::Order::Sequential
                          : tcc::data::Order::Random));
      dataKind = tcc::ckpt::Tokens;
      dataLength = tokens.size();
      tokensPerMicro = static_cast<uint64_t>(B * T);
    } else {
      if (opts.wasGiven("--data-order"))
        warning("--data-order applies to --data; feed subfolders are taken in "
                "name order");
      struct stat st;
      if (::stat(opts.feed.c_str(), &st) != 0)
        return error("the feed directory " + opts.feed + " does not exist");
      if (!S_ISDIR(st.st_mode))
        return error("the feed directory " + opts.feed + " is not a directory");
      bool flat = info.num_inputs == 0;
      for (int32_t i = 0; !flat && i < info.num_inputs; ++i)
        flat = ::stat(joinPath(opts.feed, fileNameFor(info.inputs[i].name))
                          .c_str(),
                      &st) == 0;
      std::vector<std::string> dirs;
      if (!flat) {
        if (!(err = listSubdirs(opts.feed, dirs)).empty())
          return error(err);
        if (dirs.empty()) {
          std::string files;
          for (int32_t i = 0; i < info.num_inputs; ++i)
            files += std::string(i ? ", " : "") +
                     fileNameFor(info.inputs[i].name);
          return error("the feed directory " + opts.feed +
                       " has neither the step's input files (" + files +
                       ") nor subfolders holding them");
        }
        // Check every micro-batch's files now rather than mid-training.
        for (const std::string &dir : dirs)
          for (int32_t i = 0; i < info.num_inputs; ++i) {
            tcc::npy::Reader reader;
            if (!(err = openFeed(joinPath(dir, fileNameFor(info.inputs[i].name)),
                                 info.inputs[i], reader))
                     .empty())
              return error(err);
          }
      } else {
        dirs.push_back(opts.feed);
      }
      FeedBatchMaker *feed = new FeedBatchMaker(info, dirs, !flat);
      maker.reset(feed);
      if (flat && !(err = feed->preload()).empty())
        return error(err);
      dataKind = flat ? tcc::ckpt::FeedOne : tcc::ckpt::FeedFolders;
      dataLength = flat ? 1 : dirs.size();
      for (int32_t i = 0; i < info.num_inputs; ++i)
        if (isIntegerDType(info.inputs[i].dtype)) {
          tokensPerMicro = info.inputs[i].bytes /
                           lookupDType(info.inputs[i].dtype)->size;
          break;
        }
    }

    return kGoOn;
  }

  /// The output locations, checked (and created) before any work.
  int checkOutputs() {
    // The output locations, checked (and created) before any work.
    if (!(err = checkOutputPaths(opts, !opts.model.empty()
                                           ? opts.model
                                           : (info.model_path ? info.model_path : "")))
             .empty())
      return error(err);
    paramsDir = joinPath(opts.dump, "params");
    if (opts.haveDump) {
      if (!(err = checkUniqueFiles(info.params, info.num_params, "parameter",
                                   nullptr))
               .empty())
        return error(err);
      if (!(err = probeDir(opts.dump, "dump directory")).empty() ||
          !(err = probeDir(paramsDir, "dump directory")).empty())
        return error(err);
    }
    // Rank 0 writes the checkpoints of a data-parallel run.
    if (!opts.checkpoint.empty() && world.rank() == 0 &&
        (!(err = probeDir(opts.checkpoint, "checkpoint directory")).empty() ||
         !(err = lockCheckpointDir(opts.checkpoint)).empty()))
      return error(err);
    if (!opts.save.empty()) {
      modelPath = !opts.model.empty()
                      ? opts.model
                      : (info.model_path ? info.model_path : "");
      if (modelPath.empty())
        return error("the step does not record the model it was compiled "
                     "from; pass --model PATH for --save");
      int fd = ::open(modelPath.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0)
        return error("cannot read the model " + modelPath + " for --save: " +
                     errnoText(errno) +
                     (opts.model.empty() ? " (pass --model PATH)" : ""));
      ::close(fd);
      if (!(err = probeFile(opts.save, "--save output")).empty())
        return error(err);
      // Check now that the model has the step's parameters, rather than after
      // training.
      {
        std::vector<tcc::onnx::Initializer> inits;
        if (!(err = tcc::onnx::listInitializers(modelPath, inits)).empty())
          return error("--save: " + err);
        for (int32_t i = 0; i < info.num_params; ++i) {
          const tcc_tensor_desc &p = info.params[i];
          auto found = std::find_if(
              inits.begin(), inits.end(),
              [&](const tcc::onnx::Initializer &x) { return x.name == p.name; });
          if (found == inits.end())
            return error("--save: the model " + modelPath +
                         " has no initializer for the step's parameter " +
                         quoted(p.name) + " (is it the model the step was "
                         "compiled from?)");
          if (found->dims != std::vector<int64_t>(p.dims, p.dims + p.rank))
            return error("--save: the initializer " + quoted(p.name) +
                         " of the model " + modelPath + " has shape " +
                         shapeToString(found->dims) +
                         ", the step's parameter " + shapeToString(p.dims, p.rank));
        }
      }
    }
    // The metrics file is checked now but opened only after the checkpoint
    // (if any) has been read, so a failed resume leaves no file behind.
    if (!opts.metrics.empty() &&
        !(err = probeFile(opts.metrics, "metrics file")).empty())
      return error(err);
    if (!opts.trace.empty() && !(err = probeFile(opts.trace, "trace file")).empty())
      return error(err);
    if (!opts.tensorboard.empty() &&
        !(err = probeDir(opts.tensorboard, "TensorBoard folder")).empty())
      return error(err);

    return kGoOn;
  }

  /// The arena with the initial parameters or a checkpoint's; the metrics
  /// file and the TensorBoard events; the optimizer's arguments.
  int restore() {
    // The arena, with the initial parameters or the checkpoint's. For a device
    // step, `arena` is the host mirror: the parameters and optimizer state are
    // copied out before they are written anywhere, and in after a resume.
    if (!(err = prepareArena(step, mem, world, nccl)).empty() ||
        !(err = loadInitWeights(opts.initWeights, !opts.resume.empty(), step, mem)).empty())
      return error(err);
    arena = mem.host;
    stepArena = mem.stepArena();
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
      if (ck.step >= opts.steps) {
        if (world.rank() == 0)
          std::printf("checkpoint %s is at step %lld; --steps %lld: nothing to "
                    "do\n",
                    path.c_str(), static_cast<long long>(ck.step),
                    static_cast<long long>(opts.steps));
        return 0;
      }
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

  /// The loop's state: where it starts, this rank's share of the data, the
  /// trace, the prefetcher and the staging of a device step's inputs.
  int prepareLoop() {
    firstStep = ck.step;
    // The optimizer's own step counter (tcc_optim_args.step - 1: AdamW's bias
    // correction, SGD's first momentum step). With loss scaling on, a skipped
    // step does not advance it, as GradScaler.step() then does not call
    // optimizer.step(); the learning rate schedule, like `get_lr(iter_num)` in
    // a PyTorch training script, follows the attempted steps `it` (skipped
    // ones included), so --steps N still ends the schedule at step N. With
    // --loss-scale=off every step advances it, skipped or not (as before
    // loss scaling existed).
    optimizerSteps = ck.optimizerSteps;
    K = opts.accum;
    // Data parallelism: this rank's share of each step's N*K micro-batches
    // (data_parallel.h), and where the dropout state counts micro-steps.
    N = world.size();
    tokensPerMicro *= static_cast<uint64_t>(N); // the world's tokens per micro-step
    source = maker.get();
    uint64_t localStart = ck.position;
    if (N > 1) {
      localStart = static_cast<uint64_t>(ck.step * K);
      shard = std::make_unique<tcc::dp::ShardedBatchMaker>(*maker, world.rank(),
                                                           static_cast<int>(N), K, localStart);
      source = shard.get();
    }
    for (int32_t i = 0; i < info.num_state; ++i)
      if (std::strcmp(info.state[i].name, TCC_STEP_DROPOUT_STATE) == 0 && !mem.device)
        dropoutCount = reinterpret_cast<int64_t *>(arena + info.state[i].offset) + 1;
    lossDesc = &info.outputs[0];
    tty = ::isatty(STDERR_FILENO) == 1;
    int64_t microSteps;
    if (__builtin_mul_overflow(opts.steps - firstStep, K, &microSteps))
      microSteps = INT64_MAX;
    losses.reserve(
        static_cast<size_t>(std::min<int64_t>(microSteps, int64_t(1) << 24)));

    t0 = Clock::now();

    // --trace: the first --trace-steps optimizer steps of this process.
    marks.writer = &trace;
    marks.at.assign(static_cast<size_t>(info.num_ops) + 1, NAN);
    traceEnd =
        opts.trace.empty() ? firstStep : std::min(opts.steps, firstStep + opts.traceSteps);
    if (traceEnd > firstStep) {
      trace.start(opts.trace, step.name, step.device, nccl && step.commTrace);
      if (step.setTraceHook(recordTraceMark, &marks) != 0)
        return error("cannot trace " + step.name + ": the step could not set up its timing "
                     "(CUDA events)");
    }

    prefetchOwner =
        std::make_unique<tcc::data::Prefetcher>(*source, localStart, ck.rng, !opts.noPrefetch);
    // A device step uploads micro-batch j+1 while micro-batch j computes
    // (tcc_step_stage_inputs between tcc_step_micro_step_begin and _end), so
    // it takes each batch from the prefetcher one micro-step early. The data
    // position a checkpoint records is the one after the batches micro-steps
    // have consumed (dataPos, dataRng), so a resumed run takes a batch that
    // was staged but not run again.
    dataPos = prefetch().position();
    dataRng = prefetch().rng();
    for (int32_t i = 0; i < info.num_inputs; ++i)
      inputBytes += info.inputs[i].bytes;

    return kGoOn;
  }

  /// The optimizer steps, until --steps or a stop.
  int loop() {
    catchStopSignals();
    for (int64_t it = firstStep; it < opts.steps; ++it)
      if (int rc = trainStep(it); rc != kGoOn)
        return rc;
    if (gProgressOpen) {
      std::fputc('\n', stderr);
      gProgressOpen = false;
    }
    return kGoOn;
  }

  /// One optimizer step: K micro-steps, the world's sums, the update, the
  /// record and the checkpoint; a stop after it.
  int trainStep(int64_t it) {
    std::string where = "step " + std::to_string(it + 1) + "/" +
                        std::to_string(opts.steps);
    double lr = learningRate(opts, it);
    const double scale = scaler.scale(); // this step's loss scale
    double lossSum = 0;
    const double stepStart = trace.active() ? trace.now() : 0.0;
    if (trace.active() && scaler.enabled())
      trace.counter("loss scale", "scale", stepStart, scale);
    for (int64_t k = 0; k < K; ++k)
      if (int r = microStep(it, k, where, scale, lossSum); r >= 0)
        return r;
    if (int r = sumAcrossRanks(where, lossSum); r >= 0)
      return r;
    double loss = lossSum / static_cast<double>(N * K);
    args.lr = lr;
    args.step = optimizerSteps + 1;
    args.grad_norm = NAN;
    args.loss_scale = scale;
    const double applyStart = trace.active() ? trace.now() : 0.0;
    if (step.shards) {
      if (int r = shardedApply(where); r >= 0)
        return r;
    } else if (nccl)
      world.watched("the optimizer step, which waits for the gradient all-reduce",
                     [&](char *, uint64_t) {
                       rc = step.apply(stepArena, &args);
                       return 0;
                     });
    else
      rc = step.apply(stepArena, &args);
    bool skip = rc == 2;
    if (trace.active() && nccl && step.commTrace)
      traceCollectives();
    if (trace.active())
      trace.complete(tcc::trace::kLoop, "optimizer update (" + std::string(info.optimizer) + ")",
                     "optimizer", applyStart, trace.now() - applyStart,
                     "\"grad_norm\":" + jsonNumber(args.grad_norm) +
                         ",\"skipped\":" + (skip ? "true" : "false"));
    if (rc != 0 && !skip)
      return error(where + ": the optimizer step failed (code " +
                   std::to_string(rc) + ")");
    if (!skip || !scaler.enabled())
      ++optimizerSteps;
    scaler.update(skip);
    if (skip) {
      ++skipped;
      // Dynamic scaling expects these (early on, until the scale has come
      // down to what the gradients allow): a count in the progress line and
      // the metrics, not a warning each.
      if (!scaler.isDynamic())
        warning(where + ": the gradient norm is not finite (" +
                format("%g", args.grad_norm) +
                "); the update was skipped");
    }
    if (it == firstStep)
      firstLoss = loss;
    lastLoss = loss;
    int64_t done = it + 1 - firstStep;
    double secs = elapsed();
    uint64_t tokensNow = static_cast<uint64_t>(done * K) * tokensPerMicro;

    if (int r = record(it, loss, lr, scale, skip, secs, tokensNow, done); r >= 0)
      return r;

    bool last = it + 1 == opts.steps;
    // Every rank stops after the same step (a signal reaches them apart).
    int64_t stopAgreed = gStopSignal;
    if (N > 1 && !(err = world.max(stopAgreed, "agreeing on a stop")).empty())
      return error(where + ": " + err);
    const int stopSignal = static_cast<int>(stopAgreed);
    if (int r = checkpoint(it, where, last, stopSignal); r >= 0)
      return r;
    if (trace.active()) {
      trace.complete(tcc::trace::kLoop, "step " + std::to_string(it + 1), "step", stepStart,
                     trace.now() - stepStart,
                     "\"loss\":" + jsonNumber(loss, "%.9g") + ",\"lr\":" + jsonNumber(lr));
      if (it + 1 >= traceEnd || stopSignal)
        if (!(err = stopTracing()).empty())
          return error(err);
    }
    if (stopSignal && !last) {
      // Stopped between optimizer steps: the checkpoint (if any) holds
      // everything so far; --save and --dump, which describe a finished
      // run, are not written.
      if (gProgressOpen) {
        std::fputc('\n', stderr);
        gProgressOpen = false;
      }
      const char *name = stopSignal == SIGINT ? "SIGINT" : "SIGTERM";
      std::string msg = "stopped by " + std::string(name) + " after step " +
                        std::to_string(it + 1) + "/" + std::to_string(opts.steps);
      if (!opts.checkpoint.empty())
        msg += "; the checkpoint in " + opts.checkpoint + " holds it: rerun with --resume " +
               opts.checkpoint + " to continue";
      else
        msg += "; without --checkpoint its training state is not kept";
      std::fprintf(stderr, "tcc-run: %s\n", msg.c_str());
      return 128 + stopSignal;
    }
    return kGoOn;
  }

  /// Micro-step k of optimizer step it; its loss is added to lossSum.
  int microStep(int64_t it, int64_t k, const std::string &where, double scale, double &lossSum) {
    // (loss * scale / K).backward(): with loss scaling, the accumulators
    // hold the gradients times the scale; apply divides it out.
    // Across N ranks: (loss * scale / (N*K)).backward(), summed below.
    const double gradScale = scale / static_cast<double>(N * K);
    // Each rank's dropout masks are those of the single process's
    // micro-step with this batch's global number.
    if (shard && dropoutCount)
      *dropoutCount = static_cast<int64_t>(shard->global(prefetch().position()));
    const double microStart = trace.active() ? trace.now() : 0.0;
    double bodyStart = 0.0; // CUDA: when the micro-step was queued
    marks.clear();
    if (step.device) {
      if (!stageErr.empty())
        return error(stageErr);
      if (!staged && !(err = stageNext(where)).empty())
        return error(err);
      staged = false;
      dataPos = stagedPos;
      dataRng = stagedRng;
      bodyStart = trace.active() ? trace.now() : 0.0;
      // Across ranks, the step's last micro-step sums the gradients
      // (NCCL) as its backward pass finishes them, under the watchdog.
      const bool reduces = nccl && k + 1 == K;
      if (reduces && step.commReduceNext(stepArena) != 0)
        return error(where + ": the step's communicator is not open");
      auto body = [&] {
        int r = step.microStepBegin(stepArena, gradScale);
        if (r == 0) {
          // The next micro-batch uploads while this one computes; a
          // failure is reported when that batch is due.
          if (k + 1 < K || it + 1 < opts.steps)
            stageErr = stageNext(where);
          r = step.microStepEnd(stepArena);
        }
        return r;
      };
      if (reduces)
        world.watched("the micro-step that sums the gradients", [&](char *, uint64_t) {
          rc = body();
          return 0;
        });
      else
        rc = body();
    } else {
      double copyStart = 0.0, copyEnd = 0.0;
      err = prefetch().next([&](const char *buf) {
        copyStart = trace.active() ? trace.now() : 0.0;
        for (int32_t i = 0; i < info.num_inputs; ++i) {
          const tcc_tensor_desc &d = info.inputs[i];
          std::memcpy(arena + d.offset, buf, static_cast<size_t>(d.bytes));
          buf += d.bytes;
        }
        copyEnd = trace.active() ? trace.now() : 0.0;
      });
      if (!err.empty())
        return error(err);
      traceBatch(prefetch());
      trace.complete(tcc::trace::kLoop, "stage inputs", "copy", copyStart,
                     copyEnd - copyStart, "\"bytes\":" + std::to_string(inputBytes));
      dataPos = prefetch().position();
      dataRng = prefetch().rng();
      rc = step.microStep(stepArena, gradScale);
    }
    if (rc != 0) {
      std::string msg = where + ", micro-step " + std::to_string(k + 1) +
                        "/" + std::to_string(K) + " (micro-batch " +
                        std::to_string(dataPos - 1) +
                        " of the data) failed (code " + std::to_string(rc) +
                        ")";
      if (const char *meaning = stepErrorMeaning(rc))
        msg += ": " + std::string(meaning);
      return error(msg);
    }
    const double bodyEnd = trace.active() ? trace.now() : 0.0;
    if (!(err = mem.copyOut(*lossDesc)).empty())
      return error(where + ": " + err);
    double loss = elementAsDouble(arena + lossDesc->offset, lossDesc->dtype);
    losses.push_back(static_cast<float>(loss));
    lossSum += loss;
    if (trace.active()) {
      const double t = trace.now();
      const std::string name = "micro-step " + std::to_string(k + 1) + "/" + std::to_string(K);
      trace.complete(tcc::trace::kLoop, "copy out the loss", "copy", bodyEnd, t - bodyEnd);
      if (!marks.complete())
        return error(where + ": tracing: the step did not report the time of every op");
      // The device's mark 0 is no earlier than the micro-step was queued,
      // and its last mark no later than the host saw it finish.
      lastDeviceStart = std::max(bodyStart, bodyEnd - marks.at[info.num_ops]);
      traceOps(trace, info, marks, step.device, lastDeviceStart, name);
      trace.complete(tcc::trace::kLoop, name, "micro_step", microStart, t - microStart,
                     "\"loss\":" + jsonNumber(loss, "%.9g"));
    }
    return kGoOn;
  }

  /// --trace, a CUDA step under NCCL: the optimizer step's collectives on
  /// the communicator stream's lane, timed on the device from the last
  /// micro-step's mark 0 (as its ops are), with their bytes.
  void traceCollectives() {
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

  /// The element size of a sharded step's flat spaces.
  int shardElemBytes() const { return step.shards->dtype == TCC_DTYPE_F64 ? 8 : 4; }

  /// ZeRO-1's update (the gradients already reduce-scattered): the world's
  /// sum of squares, this rank's chunk updated, the parameters all-gathered.
  /// Sets rc as apply would.
  /// A CUDA step reduce-scatters and all-gathers itself, over NCCL, inside
  /// these calls: they are watched like the other collectives.
  int shardedApply(const std::string &where) {
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

  /// Across ranks: the CPU step's gradients summed (a device step's NCCL
  /// sums them itself), and every rank's losses gathered on rank 0.
  int sumAcrossRanks(const std::string &where, double &lossSum) {
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

  /// The step in the metrics file, TensorBoard and the progress line.
  int record(int64_t it, double loss, double lr, double scale, bool skip, double secs,
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
      struct timespec wall;
      ::clock_gettime(CLOCK_REALTIME, &wall);
      if (!(err = board.scalars(it + 1, static_cast<double>(wall.tv_sec) + wall.tv_nsec * 1e-9,
                                scalars))
               .empty())
        return error(err);
    }

    if (!opts.quiet &&
        ((it + 1) % opts.printEvery == 0 || it + 1 == opts.steps)) {
      std::string line = "step " + std::to_string(it + 1) + "/" +
                         std::to_string(opts.steps) + "  loss " +
                         format("%.4f", loss) + "  lr " + format("%.2e", lr);
      if (tokensPerMicro)
        line += "  tok/s " +
                formatCount(secs > 0 ? static_cast<double>(tokensNow) / secs
                                     : 0);
      double eta = secs / static_cast<double>(done) *
                   static_cast<double>(opts.steps - it - 1);
      if (scaler.enabled()) {
        // The scale for the next step (after this step's update).
        line += "  scale " + format("%g", scaler.scale());
        if (scaler.skipped())
          line += "  skipped " + std::to_string(scaler.skipped());
      }
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

  /// A sharded step's checkpoint: every rank's shard file, then rank 0's
  /// checkpoint.bin with their manifest (its rename commits the checkpoint),
  /// then the old steps' shards removed.
  int writeShardedCheckpoint(const tcc::ckpt::State &s, const std::string &where) {
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

  /// The checkpoint after step it, when one is due (or the run ends or stops).
  int checkpoint(int64_t it, const std::string &where, bool last, int stopSignal) {
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
      if (step.shards) {
        if (int r = writeShardedCheckpoint(s, where); r >= 0)
          return r;
      } else if (world.rank() == 0 &&
                 !(err = tcc::ckpt::write(opts.checkpoint, s, info, arena)).empty())
        return error(err);
      if (trace.active())
        trace.complete(tcc::trace::kLoop, "checkpoint write", "checkpoint", ckStart,
                       trace.now() - ckStart);
    }
    return kGoOn;
  }

  /// The results: the dump, --save, the summary, the device's memory.
  int finish() {
    // The results.
    double secs = elapsed();
    int64_t done = opts.steps - firstStep;
    if (skipped && !scaler.isDynamic())
      warning(std::to_string(skipped) + " of " + std::to_string(done) +
              " optimizer steps were skipped (gradient norm not finite)");
    if (mem.device && (opts.haveDump || !opts.save.empty()) &&
        mirrorAt != opts.steps &&
        !(err = mem.copyOutParamsAndState(false)).empty())
      return error(err);
    if (opts.haveDump) {
      int64_t n = static_cast<int64_t>(losses.size());
      if (!(err = tcc::npy::writeFile(joinPath(opts.dump, "losses.npy"), "<f4",
                                      &n, 1, losses.data(),
                                      losses.size() * sizeof(float)))
               .empty())
        return error(err);
      for (int32_t i = 0; i < info.num_params; ++i)
        if (!(err = dumpTensor(joinPath(paramsDir,
                                        fileNameFor(info.params[i].name)),
                               info.params[i], arena))
                 .empty())
          return error(err);
    }
    if (!opts.save.empty()) {
      // Integration point: runtime/onnx_save.{h,cpp} write the trained model.
      char msg[1024] = {0};
      if (tcc_save_onnx(modelPath.c_str(), opts.save.c_str(), &info, arena, msg,
                        sizeof msg) != 0)
        return error("cannot save " + opts.save + ": " +
                     (msg[0] ? msg : "unknown error"));
    }
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
    if (world.rank() == 0)
      std::printf("%s\n", summary.c_str());
    char comm[512] = {0};
    if (nccl && world.rank() == 0 && step.commInfo(stepArena, comm, sizeof comm) == 0)
      std::printf("gradients summed with %s\n", comm);
    if (step.device)
      reportDeviceMemory(step, world);
    return 0;
  }

  double elapsed() const {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  std::string stopTracing() {
    if (!trace.active())
      return "";
    step.setTraceHook(nullptr, nullptr);
    std::string e = trace.finish();
    if (e.empty() && !opts.quiet) {
      if (gProgressOpen) {
        std::fputc('\n', stderr);
        gProgressOpen = false;
      }
      std::fprintf(stderr, "tcc-run: wrote the trace of steps %lld-%lld to %s\n",
                   static_cast<long long>(firstStep + 1), static_cast<long long>(traceEnd),
                   opts.trace.c_str());
    }
    return e;
  }

  /// The batch the reader handed over last, on the trace.
  void traceBatch(const tcc::data::Prefetcher &p) {
    if (!trace.active())
      return;
    auto [from, to] = p.lastMade();
    trace.complete(p.threadedReader() ? tcc::trace::kReader : tcc::trace::kLoop,
                   "make micro-batch " + std::to_string(p.position() - 1), "data",
                   trace.micros(from), trace.micros(to) - trace.micros(from));
  }

  std::string stageNext(const std::string &where) {
    std::string failed;
    std::string err = prefetch().next([&](const char *buf) {
      const char *at = buf;
      for (int32_t i = 0; i < info.num_inputs && failed.empty(); ++i) {
        failed = checkFp16Range(info.inputs[i], at,
                                "micro-batch " +
                                    std::to_string(prefetch().position()) +
                                    " of the data");
        at += info.inputs[i].bytes;
      }
      char msg[1024] = {0};
      const double t = trace.active() ? trace.now() : 0.0;
      if (failed.empty())
        if (int rc = step.stageInputs(stepArena, buf, inputBytes, msg,
                                      sizeof msg))
          failed = mem.stepError("uploading the next inputs", rc, msg);
      trace.complete(tcc::trace::kLoop, "stage inputs (next micro-batch)", "copy", t,
                     trace.active() ? trace.now() - t : 0.0,
                     "\"bytes\":" + std::to_string(inputBytes));
      if (!failed.empty())
        failed = where + ": " + failed;
    });
    if (!err.empty())
      return err;
    traceBatch(prefetch());
    if (!failed.empty())
      return failed;
    staged = true;
    stagedPos = prefetch().position();
    stagedRng = prefetch().rng();
    return "";
  }

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
  int64_t mirrorAt = -1; // device steps: the step whose parameters and state the host mirror holds
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0;
  tcc::trace::Writer trace;
  TraceMarks marks;
  int64_t traceEnd = 0;
  std::unique_ptr<tcc::data::Prefetcher> prefetchOwner;
  uint64_t dataPos = 0, dataRng = 0;
  uint64_t inputBytes = 0;
  bool staged = false;                   // a batch is uploading for the next micro-step
  uint64_t stagedPos = 0, stagedRng = 0; // the data position after it
  std::string stageErr;                  // why staging the next batch failed
};

} // namespace

int runTraining(const Options &opts, const Step &step, tcc::dp::World &world, bool nccl) {
  return Trainer(opts, step, world, nccl).run();
}


} // namespace tcc::run
