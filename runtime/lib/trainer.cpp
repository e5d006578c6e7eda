//===- trainer.cpp - a training run ---------------------------------------===//
//
// runTraining and the Trainer's loop: the phases before the state is
// restored (validate, open the data, check the outputs), the loop of
// optimizer steps and micro-steps, the record of each step, and the
// staging of the next micro-batch. Restore, checkpoints and finish are in
// trainer_state.cpp; the sums across ranks in trainer_world.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/trainer_impl.h"

#include <map>

namespace tcc::run {

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

namespace detail {

int Trainer::run() {
  if (opts.evalOnly)
    return evaluateOnly();
  for (int (Trainer::*phase)() : {&Trainer::validate, &Trainer::openData, &Trainer::checkOutputs,
                                  &Trainer::agree, &Trainer::restore, &Trainer::prepareLoop,
                                  &Trainer::loop})
    if (int rc = (this->*phase)(); rc != kGoOn)
      return rc;
  return finish();
}

int Trainer::validate() {
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
  if (step.shards && opts.keepCheckpoints > 1)
    return error("--keep-checkpoints keeps whole checkpoints; " + opts.step +
                 " (--data-parallel=" + std::to_string(step.shards->ranks) +
                 ") writes sharded ones, which it does not keep yet: leave it out");
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

/// The fields of the step's objective ("task=causal-lm;ids=input_ids;...").
static std::map<std::string, std::string> parseObjective(const char *text) {
  std::map<std::string, std::string> fields;
  std::string s = text ? text : "";
  size_t begin = 0;
  while (begin < s.size()) {
    size_t end = s.find(';', begin);
    if (end == std::string::npos)
      end = s.size();
    std::string f = s.substr(begin, end - begin);
    size_t eq = f.find('=');
    if (eq != std::string::npos)
      fields[f.substr(0, eq)] = f.substr(eq + 1);
    begin = end + 1;
  }
  return fields;
}

std::string Trainer::tokenColumns(std::vector<tcc::data::TokenColumn> &columns) {
  std::map<std::string, std::string> objective = parseObjective(info.objective);
  auto recorded = [&](const char *key) {
    auto it = objective.find(key);
    return it == objective.end() ? std::string() : it->second;
  };
  if (recorded("task") == "masked-lm")
    return "--data makes next-token windows, but " + opts.step +
           " trains a masked language model (its objective: " + info.objective +
           "), whose inputs must be masked: give the batches with --feed DIR";
  std::string ids = recorded("ids"), labels = recorded("labels"), mask = recorded("mask");
  std::string shift = recorded("labels-shift");
  bool haveRecord = !ids.empty();
  if (!haveRecord) {
    // No record: the convention of nanoGPT's step, tokens then labels, and
    // the labels' shift only from --labels.
    bool ok = info.num_inputs == 1 || info.num_inputs == 2;
    for (int32_t i = 0; ok && i < info.num_inputs; ++i)
      ok = isIntegerDType(info.inputs[i].dtype) && info.inputs[i].rank == 2;
    if (!ok)
      return "--data needs a step whose integer inputs [B, T] are the token ids "
             "and the labels (and perhaps an attention mask), and this step does "
             "not record which is which (export with python/tcc_export.py, which "
             "does); " + listInputs(info);
    ids = info.inputs[0].name;
    if (info.num_inputs == 2)
      labels = info.inputs[1].name;
  }
  if (!labels.empty()) {
    if (!opts.labels.empty() && !shift.empty() && opts.labels != shift)
      warning("--labels=" + opts.labels + " overrides the step's record (labels-shift=" +
              shift + ", from the model's export)");
    if (!opts.labels.empty())
      shift = opts.labels;
    if (shift.empty())
      return opts.step + " does not record how its loss reads its labels " +
             quoted(labels.c_str()) + ", so --data cannot know what to feed them: say "
             "--labels=aligned if labels[t] is the token after " + quoted(ids.c_str()) +
             "[t] (nanoGPT: the loss compares position t with labels[t]), or "
             "--labels=shifted if the model shifts its labels itself (Hugging Face "
             "causal LMs, labels = input_ids). Exporting with python/tcc_export.py "
             "records it";
  } else if (!opts.labels.empty()) {
    warning("--labels applies to a step whose loss reads labels; " + opts.step +
            " has none (its objective: " + std::string(info.objective ? info.objective : "") +
            ")");
  }
  int64_t B = 0, T = 0;
  for (int32_t i = 0; i < info.num_inputs; ++i) {
    const tcc_tensor_desc &in = info.inputs[i];
    std::string name = in.name;
    tcc::data::TokenRole role;
    if (name == ids)
      role = tcc::data::TokenRole::Ids;
    else if (name == labels)
      role = shift == "shifted" ? tcc::data::TokenRole::Ids : tcc::data::TokenRole::Next;
    else if (name == mask)
      role = tcc::data::TokenRole::Ones;
    else
      return "--data fills the token ids, the labels and an attention mask, and " +
             quoted(in.name) + " is none of them" +
             (haveRecord ? std::string(" (the step's objective: ") + info.objective + ")"
                         : std::string()) +
             "; give the batches with --feed DIR instead. " + listInputs(info);
    bool integer = isIntegerDType(in.dtype) || (role == tcc::data::TokenRole::Ones &&
                                                in.dtype == TCC_DTYPE_BOOL);
    if (!integer || in.rank != 2 || in.dims[0] < 1 || in.dims[1] < 1 ||
        (B && (in.dims[0] != B || in.dims[1] != T)))
      return "--data needs the token ids, labels and mask as integer inputs of one "
             "shape [B, T] (B, T >= 1); " + listInputs(info);
    B = in.dims[0];
    T = in.dims[1];
    columns.push_back({role, static_cast<int>(lookupDType(in.dtype)->size)});
  }
  if (columns.empty())
    return "--data needs a step with token inputs; " + listInputs(info);
  return "";
}

int Trainer::openData() {
  // The data.
  if (opts.haveData) {
    std::vector<tcc::data::TokenColumn> columns;
    if (!(err = tokenColumns(columns)).empty())
      return error(err);
    int64_t B = info.inputs[0].dims[0], T = info.inputs[0].dims[1];
    if (!(err = tokens.open(opts.data)).empty())
      return error(err);
    if (tokens.size() < static_cast<uint64_t>(T) + 1)
      return error("the data file " + opts.data + " has " +
                   std::to_string(tokens.size()) +
                   " tokens; the step's windows need at least T + 1 = " +
                   std::to_string(T + 1));
    dataColumns = columns;
    maker.reset(new tcc::data::TokenBatchMaker(
        tokens, B, T, std::move(columns),
        opts.sequential ? tcc::data::Order::Sequential
                        : tcc::data::Order::Random));
    dataKind = tcc::ckpt::Tokens;
    dataLength = tokens.size();
    tokensPerMicro = static_cast<uint64_t>(B * T);
  } else {
    if (opts.wasGiven("--labels"))
      warning("--labels applies to --data; --feed gives every input as it is");
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

  if (!opts.valData.empty()) {
    std::vector<tcc::data::TokenColumn> columns = dataColumns;
    if (columns.empty() && !(err = tokenColumns(columns)).empty())
      return error("--val-data: " + err);
    return openValidation(std::move(columns));
  }
  return kGoOn;
}

int Trainer::checkOutputs() {
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
      if (!(err = tcc::onnx::checkSaveModel(modelPath, &info)).empty())
        return error("--save: " + err);
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

int Trainer::prepareLoop() {
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
  if (__builtin_mul_overflow(opts.stopAt() - firstStep, K, &microSteps))
    microSteps = INT64_MAX;
  losses.reserve(
      static_cast<size_t>(std::min<int64_t>(microSteps, int64_t(1) << 24)));

  t0 = Clock::now();

  // --trace: the first --trace-steps optimizer steps of this process.
  marks.writer = &trace;
  marks.at.assign(static_cast<size_t>(info.num_ops) + 1, NAN);
  traceEnd =
      opts.trace.empty() ? firstStep : std::min(opts.stopAt(), firstStep + opts.traceSteps);
  if (traceEnd > firstStep) {
    trace.start(opts.trace, step.name, step.device, nccl && step.commTrace);
    if (step.setTraceHook(recordTraceMark, &marks) != 0)
      return error("cannot trace " + step.name + ": the step could not set up its timing "
                   "(CUDA events)");
  }

  if (opts.checkNumerics && !(err = numerics.attach(step, mem)).empty())
    return error("--check-numerics: " + err);

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

int Trainer::loop() {
  catchStopSignals();
  for (int64_t it = firstStep; it < opts.stopAt(); ++it)
    if (int rc = trainStep(it); rc != kGoOn)
      return rc;
  if (gProgressOpen) {
    std::fputc('\n', stderr);
    gProgressOpen = false;
  }
  return kGoOn;
}

int Trainer::trainStep(int64_t it) {
  std::string where = "step " + std::to_string(it + 1) + "/" +
                      std::to_string(opts.steps);
  double lr = learningRate(opts, it);
  const double scale = scaler.scale(); // this step's loss scale
  double lossSum = 0;
  const double stepStart = trace.active() ? trace.now() : 0.0;
  if (trace.active() && scaler.enabled())
    trace.counter("loss scale", "scale", stepStart, scale);
  numerics.beginStep();
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
  skipStreak = skip ? skipStreak + 1 : 0;
  if (skip && opts.checkNumerics) {
    // Where the step's infinities began; with a dynamic scale a skip is
    // expected now and then (a note), otherwise it stops the run.
    std::string why = numerics.infinityOrigin();
    if (!scaler.isDynamic())
      return error(where + ": --check-numerics: the gradient norm is not finite (" +
                   format("%g", args.grad_norm) + "); " + why);
    warning(where + ": skipped (loss scale " + format("%g", scale) + "); " + why);
  } else if (skip && scaler.isDynamic() && !pointedToCheck &&
             (skipStreak >= 10 || scaler.scale() < 1)) {
    // Early skips are the dynamic scale finding its level; a streak, or a
    // scale below 1, is an overflow it cannot scale away.
    pointedToCheck = true;
    warning(where + ": " + std::to_string(skipStreak) +
            " steps in a row were skipped (gradients not finite) and the loss scale is down to " +
            format("%g", scaler.scale()) +
            ": some op's values overflow whatever the scale; tcc-run --check-numerics names "
            "the first op that makes an infinity or a NaN");
  }
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

  valLoss = NAN;
  if (evaluator && ((opts.evalEvery && (it + 1) % opts.evalEvery == 0) ||
                    it + 1 == opts.stopAt())) {
    // A failed evaluation costs the validation, not the run: training goes
    // on to its checkpoint and --save.
    if (std::string why = evaluate(); !why.empty()) {
      warning("validation after step " + std::to_string(it + 1) + " failed, and is off for "
              "the rest of this run: " + why);
      evaluator.reset();
      valLoss = NAN;
    } else if (step.device) {
      mirrorAt = it + 1;
    }
  }
  if (int r = record(it, loss, lr, scale, skip, secs, tokensNow, done); r >= 0)
    return r;

  bool last = it + 1 == opts.stopAt();
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
    // everything so far; --save writes the model as trained so far (as
    // Ctrl-C in a notebook leaves the model trained so far); --dump, which
    // describes a finished run, is not written.
    if (gProgressOpen) {
      std::fputc('\n', stderr);
      gProgressOpen = false;
    }
    if (!opts.save.empty()) {
      if (int r = saveModel(it + 1); r >= 0)
        return r;
      std::fprintf(stderr, "tcc-run: saved the model as trained to step %lld in %s\n",
                   static_cast<long long>(it + 1), opts.save.c_str());
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

int Trainer::microStep(int64_t it, int64_t k, const std::string &where, double scale, double &lossSum) {
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
  if (opts.checkNumerics)
    numerics.beginMicroStep(where + ", micro-step " + std::to_string(k + 1) + "/" +
                                std::to_string(K),
                            scale, scaler.isDynamic());
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
        if (k + 1 < K || it + 1 < opts.stopAt())
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
  if (rc == TCC_STEP_STOPPED && opts.checkNumerics)
    return error("--check-numerics: " + numerics.report() +
                 "\nthe run stops here: nothing after its last checkpoint is saved");
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
  if (opts.checkNumerics && !std::isfinite(loss))
    return error("--check-numerics: " + where + ", micro-step " + std::to_string(k + 1) + "/" +
                 std::to_string(K) + ": the loss is " + format("%g", loss) + "; " +
                 numerics.infinityOrigin());
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

double Trainer::elapsed() const {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Trainer::stopTracing() {
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

void Trainer::traceBatch(const tcc::data::Prefetcher &p) {
  if (!trace.active())
    return;
  auto [from, to] = p.lastMade();
  trace.complete(p.threadedReader() ? tcc::trace::kReader : tcc::trace::kLoop,
                 "make micro-batch " + std::to_string(p.position() - 1), "data",
                 trace.micros(from), trace.micros(to) - trace.micros(from));
}

std::string Trainer::stageNext(const std::string &where) {
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

} // namespace detail

int runTraining(const Options &opts, const Step &step, tcc::dp::World &world, bool nccl) {
  return detail::Trainer(opts, step, world, nccl).run();
}

} // namespace tcc::run
