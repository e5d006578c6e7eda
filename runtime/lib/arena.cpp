//===- arena.cpp - the step's arena and its host mirror -------------------===//

#include "runtime/lib/arena.h"

#include "runtime/npy.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"
#include "runtime/lib/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::run {

/// Refuses a step whose arena exceeds the budget it was compiled for, or
/// (host arenas only) the memory this machine has available (MemAvailable in
/// /proc/meminfo, where there is one).
std::string checkMemory(const tcc_step_info &info) {
  if (info.mem_budget && info.arena_bytes > info.mem_budget)
    return "the step's arena of " + std::to_string(info.arena_bytes) +
           " bytes exceeds the budget of " + std::to_string(info.mem_budget) +
           " bytes it was compiled for; recompile it";
  if (info.device_arena)
    return "";
  if (FILE *f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
        break;
    std::fclose(f);
    if (kb && info.arena_bytes > kb * 1024ULL)
      return "the step needs an arena of " + std::to_string(info.arena_bytes) +
             " bytes, but this machine has only " + std::to_string(kb * 1024ULL) +
             " bytes available";
  }
  return "";
}


/// Checks the step's memory needs, allocates its arena (for a device step:
/// opens the device arena and maps the host mirror) and writes the initial
/// parameters (tcc_step_init).
std::string prepareArena(const Step &step, Arena &mem, tcc::dp::World &world, bool nccl) {
  const tcc_step_info &info = *step.info;
  std::string err = checkMemory(info);
  if (!err.empty())
    return err;
  mem.step = &step;
  mem.device = step.device;
  if (!(err = mem.allocate(mem.step->mirrorBytes())).empty())
    return err;
  if (step.device) {
    char msg[1024] = {0};
    // Across ranks, each takes the GPU of its local rank.
    if (world.parallel() && step.setDevice(world.localRank(), msg, sizeof msg) != 0)
      return "local rank " + std::to_string(world.localRank()) + ": " + msg;
    void *dev = nullptr;
    int rc = step.deviceOpen(&dev, msg, sizeof msg);
    if (rc != 0 || !dev) {
      std::string m = msg[0] ? msg
                             : "tcc_step_device_open failed (code " +
                                   std::to_string(rc) + ")";
      bool memory = m.rfind("cudaErrorMemoryAllocation", 0) == 0;
      return step.name + ": " + m + "\n  " +
             (memory ? "the step's device arena of " +
                           formatBytes(info.arena_bytes) +
                           " does not fit in this GPU's free memory; "
                           "compile it with a smaller --mem-budget"
                     : std::string("this step was compiled for "
                                   "--target=cuda and needs an NVIDIA GPU "
                                   "with a driver; compile with "
                                   "--target=cpu to run on the CPU"));
    }
    mem.dev = dev;
    if (nccl) {
      // The world's NCCL communicator, from rank 0's id.
      unsigned char id[TCC_STEP_COMM_ID_BYTES] = {0};
      int64_t bad = world.rank() == 0 && step.commId(id, msg, sizeof msg) != 0;
      std::string err = world.max(bad, "agreeing on the NCCL id");
      if (err.empty() && bad)
        err = world.rank() == 0 ? std::string(msg) : "rank 0 could not make the NCCL id";
      if (err.empty())
        err = world.broadcast(id, sizeof id, 0, "sending the NCCL id");
      // Every rank buckets alike: rank 0's TCC_DP_BUCKET_MB (the launcher
      // may not pass the variable to every node).
      char bucket[32] = {0};
      if (const char *b = std::getenv("TCC_DP_BUCKET_MB"); b && world.rank() == 0)
        std::snprintf(bucket, sizeof bucket, "%s", b);
      if (err.empty())
        err = world.broadcast(bucket, sizeof bucket, 0, "sending the bucket size");
      if (err.empty()) {
        if (bucket[0])
          ::setenv("TCC_DP_BUCKET_MB", bucket, 1);
        else
          ::unsetenv("TCC_DP_BUCKET_MB");
      }
      if (err.empty())
        err = world.watched("opening the NCCL communicator", [&](char *e, uint64_t l) {
          return step.commOpen(dev, id, world.size(), world.rank(), e, l);
        });
      // Launched without MPI: the rendezvous carried the NCCL id; every
      // collective from now on goes over the communicator.
      if (err.empty() && world.withoutMpi()) {
        const tcc_comm_api *api = step.commApi ? step.commApi(dev) : nullptr;
        if (!api)
          err = "the step has no collectives over its communicator (tcc_step_comm_api); rebuild "
                "it with this tcc";
        else
          world.attach(api);
      }
      if (!err.empty())
        return step.name + ": data parallelism: " + err;
    }
  }
  if (int rc = step.init(mem.stepArena()))
    return "the step's initialization failed (code " + std::to_string(rc) + ")";
  return "";
}

/// The next of a splitmix64 stream: the same numbers on every platform and
/// standard library (std::normal_distribution's are not).
static uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Whether a rank-1 parameter is a normalization's scale (initialised to 1,
/// as PyTorch's LayerNorm, RMSNorm and BatchNorm do): its name's last part.
static bool isScaleName(const char *name) {
  const char *dot = std::strrchr(name, '.');
  std::string last = dot ? dot + 1 : name;
  return last == "weight" || last == "scale" || last == "gamma" || last == "g";
}

/// --init=normal[:STD]: matrices (rank >= 2) N(0, std^2), as Hugging Face's
/// initializer_range does for Linear and Embedding weights; vectors 1 for a
/// norm's scale, 0 for a bias. Parameter i's values come from its own stream
/// (the seed and i), Box-Muller from 53-bit uniforms.
static std::string drawInitWeights(double std, uint64_t seed, const tcc_step_info &info,
                                   Arena &mem) {
  for (int32_t i = 0; i < info.num_params; ++i) {
    const tcc_tensor_desc &d = info.params[i];
    // fp32 parameters, or fp64 ones in a --cpu-precision=f64 step.
    if (d.dtype != TCC_DTYPE_F32 && d.dtype != TCC_DTYPE_F64)
      return std::string("--init: parameter ") + d.name + " is not float32 or float64";
    const bool f64 = d.dtype == TCC_DTYPE_F64;
    char *p = mem.host + d.offset;
    size_t n = d.bytes / (f64 ? sizeof(double) : sizeof(float));
    auto set = [&](size_t k, double v) {
      if (f64)
        reinterpret_cast<double *>(p)[k] = v;
      else
        reinterpret_cast<float *>(p)[k] = static_cast<float>(v);
    };
    if (d.rank < 2) {
      for (size_t k = 0; k < n; ++k)
        set(k, isScaleName(d.name) ? 1.0 : 0.0);
      continue;
    }
    uint64_t state = seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(i) + 1;
    auto uniform = [&] { return ((splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; };
    for (size_t k = 0; k < n; k += 2) {
      double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
      set(k, std * r * std::cos(a));
      if (k + 1 < n)
        set(k + 1, std * r * std::sin(a));
    }
  }
  return mem.copyIn(info.params, info.num_params);
}

/// --init-weights FILE: the parameters' values as one raw blob in the step's
/// parameter order (what tcc embeds as weights.bin), for a step compiled with
/// tcc --no-weights. A step without embedded weights needs it (or --resume).
std::string loadInitWeights(const std::string &path, double initStd, uint64_t seed,
                            bool resuming, const Step &step, Arena &mem) {
  const tcc_step_info &info = *step.info;
  if (initStd > 0) {
    if (!path.empty())
      return "--init and --init-weights both set the parameters; give one";
    if (resuming)
      return "--init and --resume both set the parameters; give one";
    if (info.weights_embedded)
      return step.name + " carries its model's weights; --init draws them for a step "
             "compiled with tcc --no-weights";
    return drawInitWeights(initStd, seed, info, mem);
  }
  if (path.empty()) {
    if (!info.weights_embedded && !resuming)
      return step.name + " was compiled with tcc --no-weights: give its "
             "initial weights with --init-weights FILE or --init=normal[:STD] "
             "(or --resume DIR)";
    return "";
  }
  if (resuming)
    return "--init-weights and --resume both set the parameters; give one";
  uint64_t total = 0;
  for (int32_t i = 0; i < info.num_params; ++i)
    total += info.params[i].bytes;
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return "--init-weights: cannot open " + path + ": " + std::strerror(errno);
  std::string err;
  if (std::fseek(f, 0, SEEK_END) != 0 || std::ftell(f) < 0 ||
      static_cast<uint64_t>(std::ftell(f)) != total)
    err = "--init-weights: " + path + " has " +
          std::to_string(std::ftell(f)) + " bytes; the step's parameters take " +
          std::to_string(total) + " (fp32, in the step's parameter order)";
  std::rewind(f);
  for (int32_t i = 0; err.empty() && i < info.num_params; ++i) {
    const tcc_tensor_desc &d = info.params[i];
    if (d.bytes && std::fread(mem.host + d.offset, 1, d.bytes, f) != d.bytes)
      err = "--init-weights: reading " + path + " failed";
  }
  std::fclose(f);
  if (!err.empty())
    return err;
  return mem.copyIn(info.params, info.num_params);
}

/// Seeds dropout's random state (TCC_STEP_DROPOUT_STATE among the step's
/// state tensors, [seed, micro-step counter]; tcc_step_init zeroes it) for a
/// run that does not resume one.
std::string seedDropout(const Step &step, Arena &mem, uint64_t seed) {
  const tcc_step_info &info = *step.info;
  for (int32_t i = 0; i < info.num_state; ++i) {
    const tcc_tensor_desc &d = info.state[i];
    if (std::strcmp(d.name, TCC_STEP_DROPOUT_STATE) != 0 || d.bytes != 16)
      continue;
    const int64_t state[2] = {static_cast<int64_t>(seed), 0};
    std::memcpy(mem.host + d.offset, state, sizeof state);
    return mem.copyIn(&d, 1);
  }
  return "";
}

} // namespace tcc::run
