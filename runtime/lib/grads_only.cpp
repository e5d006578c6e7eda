//===- grads_only.cpp - one micro-step, its loss, outputs and gradients ---===//
//
// tcc-run --grads-only: one micro-step (forward and backward) on --feed's
// inputs, then the loss, the outputs and the gradients (divided by the loss
// scale) dumped as .npy; and the device-memory line both runs print.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/trainer.h"
#include "runtime/lib/outputs.h"

#include "runtime/checkpoint.h"
#include "runtime/lib/arena.h"
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

using tcc::io::joinPath;
using tcc::step::describe;
/// The line `device peak 9.61 GiB (arena 9.58 GiB, budget 12 GiB, device
/// 140 GiB)` for a device step, with a warning if the peak exceeds the
/// budget the step was compiled for; `peakOut` gets the peak (0 if the step
/// cannot tell).
void reportDeviceMemory(const Step &step, const tcc::dp::World &world, uint64_t *peakOut) {
  const tcc_step_info &info = *step.info;
  uint64_t peak = 0, total = 0;
  if (peakOut)
    *peakOut = 0;
  if (step.deviceMemory(&peak, &total) != 0) {
    warning(step.name + ": tcc_step_device_memory failed; the device's peak "
                        "memory use is unknown");
    return;
  }
  if (peakOut)
    *peakOut = peak;
  // Across ranks, each reports its own GPU's.
  std::string line = (world.parallel() ? "rank " + std::to_string(world.rank()) + ": " : "") +
                     "device peak " + formatBytes(peak) + " (arena " +
                     formatBytes(info.arena_bytes) + ", " +
                     (info.mem_budget ? "budget " + formatBytes(info.mem_budget)
                                      : std::string("no budget")) +
                     (total ? ", device " + formatBytes(total) : "") + ")" +
                     (info.host_bytes ? "; pinned host buffer " + formatBytes(info.host_bytes) +
                                            " (tcc --offload, --swap-activations)"
                                      : std::string());
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (info.mem_budget && peak > info.mem_budget)
    warning("THE DEVICE PEAK OF " + formatBytes(peak) + " (" +
            std::to_string(peak) + " bytes) EXCEEDS THE MEMORY BUDGET OF " +
            formatBytes(info.mem_budget) + " (" +
            std::to_string(info.mem_budget) +
            " bytes) the step was compiled for: the arena is " +
            formatBytes(info.arena_bytes) +
            "; the rest is the CUDA runtime's (context, kernels' "
            "workspaces). On a GPU of the budget's size this run would not "
            "fit; compile with a smaller --mem-budget to leave room");
}

//===----------------------------------------------------------------------===//
// --grads-only
//===----------------------------------------------------------------------===//

namespace {

/// Whether the step has any gradient to write.
bool hasGrads(const tcc_step_info &info) {
  bool any = false;
  if (info.has_backward)
    for (int32_t i = 0; i < info.num_params; ++i)
      any |= info.grads[i].bytes > 0;
  return any;
}

/// The feed folder and the outputs checked, and --dump's folders made,
/// before running, so that an unwritable OUT is reported before the work
/// rather than after it.
std::string validate(const Options &opts, const tcc_step_info &info) {
  std::string err;
  struct stat st;
  if (::stat(opts.feed.c_str(), &st) != 0)
    return "the feed directory " + opts.feed + " does not exist";
  if (!S_ISDIR(st.st_mode))
    return "the feed directory " + opts.feed + " is not a directory";
  if (!(err = checkOutputPaths(opts, "")).empty() || !opts.haveDump)
    return err;
  const bool anyGrads = hasGrads(info);
  if (!(err = checkUniqueFiles(info.outputs, info.num_outputs, "output", nullptr)).empty() ||
      (anyGrads &&
       !(err = checkUniqueFiles(info.params, info.num_params, "parameter", info.grads)).empty()))
    return err;
  std::vector<std::string> dirs = {opts.dump};
  if (info.num_outputs > 0)
    dirs.push_back(joinPath(opts.dump, "outputs"));
  if (anyGrads)
    dirs.push_back(joinPath(opts.dump, "grads"));
  for (const std::string &dir : dirs) {
    if (!(err = tcc::io::makeDirs(dir)).empty())
      return err;
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return "the dump directory " + dir + " is not writable";
  }
  return "";
}

/// The arena opened, the initial weights and the feed's inputs in it.
std::string prepare(const Options &opts, const Step &step, tcc::dp::World &world, Arena &mem) {
  const tcc_step_info &info = *step.info;
  const bool nccl = false; // one process, one micro-step
  std::string err;
  if (!(err = prepareArena(step, mem, world, nccl)).empty() ||
      !(err = loadInitWeights(opts.initWeights, opts.initStd, opts.seed, false, step, mem)).empty())
    return err;
  char *arena = mem.host; // for a device step, the host mirror
  for (int32_t i = 0; i < info.num_inputs; ++i)
    if (!(err = feedInput(opts.feed, info.inputs[i], arena)).empty() ||
        (step.device &&
         !(err = checkFp16Range(info.inputs[i], arena + info.inputs[i].offset,
                                "the feed " + opts.feed))
              .empty()))
      return err;
  return "";
}

/// One micro-step, forward and backward, with a loss scale, as in training:
/// fp16 gradients of a mean over many tokens underflow unscaled. Device
/// steps default to GradScaler's (2^16, halved while the gradients overflow,
/// as a skipped step would); the gradients are then divided by it. `scale`
/// is the one used.
std::string runScaled(const Options &opts, const Step &step, Arena &mem, double &scale) {
  const tcc_step_info &info = *step.info;
  char *arena = mem.host;
  std::string err;
  int rc;
  tcc::LossScaler scaler = opts.haveLossScale ? opts.lossScaler
                           : step.device    ? tcc::LossScaler::dynamic()
                                            : tcc::LossScaler::off();
  scale = 1.0;
  NumericsCheck numerics; // --check-numerics
  if (opts.checkNumerics && !(err = numerics.attach(step, mem)).empty())
    return "--check-numerics: " + err;
  for (int attempt = 0;; ++attempt) {
    scale = scaler.enabled() ? scaler.scale() : 1.0;
    numerics.beginStep();
    numerics.beginMicroStep("the micro-step", scale, scaler.isDynamic());
    // Every attempt is micro-step 0 of the run: the same dropout masks.
    if (!(err = mem.copyIn(info.inputs, info.num_inputs)).empty() ||
        !(err = seedDropout(step, mem, opts.seed)).empty())
      return err;
    if (info.has_backward && attempt > 0 && (rc = step.zeroGrads(mem.stepArena())) != 0)
      return "zeroing the gradients failed (code " + std::to_string(rc) + ")";
    if ((rc = step.microStep(mem.stepArena(), scale)) != 0) {
      if (rc == TCC_STEP_STOPPED && opts.checkNumerics)
        return "--check-numerics: " + numerics.report();
      std::string msg = "the step failed (code " + std::to_string(rc) + ")";
      if (const char *meaning = stepErrorMeaning(rc))
        msg += ": " + std::string(meaning);
      return msg;
    }
    // From a device: the loss (printed), and what --dump writes.
    if (info.has_backward && !(err = mem.copyOut(info.outputs[0])).empty())
      return err;
    if (info.has_backward && opts.checkNumerics) {
      const tcc_tensor_desc &l = info.outputs[0];
      const double loss = elementAsDouble(arena + l.offset, l.dtype);
      if (!std::isfinite(loss))
        return "--check-numerics: the loss is " + format("%g", loss) + "; " +
               numerics.infinityOrigin();
    }
    if (mem.device && (opts.haveDump || scaler.isDynamic())) {
      if (!(err = mem.copyOut(info.outputs, info.num_outputs)).empty())
        return err;
      if (info.has_backward && !(err = mem.copyOut(info.grads, info.num_params)).empty())
        return err;
    }
    bool finite = true;
    if (info.has_backward && scaler.isDynamic())
      for (int32_t i = 0; i < info.num_params && finite; ++i)
        finite = allFinite(info.grads[i], arena);
    if (finite)
      break;
    if (opts.checkNumerics)
      warning("loss scale " + format("%g", scale) + ": the gradients are not finite; " +
              numerics.infinityOrigin());
    if (scale <= 1.0) {
      warning("the gradients are not finite even with loss scale 1; writing them as they are");
      break;
    }
    scaler.update(/*foundInf=*/true); // GradScaler's back-off
  }
  if (info.has_backward && scale != 1.0)
    for (int32_t i = 0; i < info.num_params; ++i)
      divideTensor(info.grads[i], arena, scale);
  return "";
}

/// The loss, the loss scale and each output's summary, on stdout.
void report(const tcc_step_info &info, const char *arena, double scale) {
  if (info.has_backward) {
    const tcc_tensor_desc &loss = info.outputs[0];
    std::printf("loss %.9g\n", elementAsDouble(arena + loss.offset, loss.dtype));
    if (scale != 1.0)
      std::printf("loss scale %g (the gradients are divided by it)\n", scale);
  }
  for (int32_t i = 0; i < info.num_outputs; ++i) {
    const tcc_tensor_desc &d = info.outputs[i];
    std::printf("output %s %s\n", d.name, describe(d).c_str());
  }
  std::fflush(stdout);
}

/// --dump OUT: loss.npy, outputs/<name>.npy and grads/<param>.npy, all of
/// them or none (a full disk half way keeps OUT's earlier files).
std::string dump(const Options &opts, const tcc_step_info &info, const char *arena) {
  tcc::io::StagedFolder staged;
  std::string err = staged.open(opts.dump), at;
  auto write = [&](const std::string &rel, const tcc_tensor_desc &d) {
    if (err.empty())
      at = staged.path(rel, err);
    if (err.empty())
      err = dumpTensor(at, d, arena);
  };
  if (info.has_backward)
    write("loss.npy", info.outputs[0]);
  for (int32_t i = 0; i < info.num_outputs; ++i)
    write("outputs/" + fileNameFor(info.outputs[i].name), info.outputs[i]);
  if (info.has_backward)
    for (int32_t i = 0; i < info.num_params; ++i)
      if (info.grads[i].bytes > 0)
        write("grads/" + fileNameFor(info.params[i].name), info.grads[i]);
  if (err.empty())
    err = staged.commit();
  return err.empty() ? "" : dumpNotWritten(opts.dump, err);
}

} // namespace

int runGradsOnly(const Options &opts, const Step &step, tcc::dp::World &world) {
  const tcc_step_info &info = *step.info;
  std::string err;
  if (!(err = validate(opts, info)).empty())
    return error(err);
  Arena mem;
  double scale = 1.0;
  if (!(err = prepare(opts, step, world, mem)).empty() ||
      !(err = runScaled(opts, step, mem, scale)).empty())
    return error(err);
  report(info, mem.host, scale);
  if (opts.haveDump && !(err = dump(opts, info, mem.host)).empty())
    return error(err);
  if (step.device)
    reportDeviceMemory(step, world);
  return 0;
}

} // namespace tcc::run
