//===- arena.h - the step's arena and its host mirror -------------*- C++ -*-===//
//
// The memory a step runs in, allocated once: for a CPU step the arena
// itself; for a device step the device arena (tcc_step_device_open) and a
// host mirror of the same offsets that all file I/O goes through. Preparing
// it checks the step's memory needs against its budget and the machine,
// joins the world's NCCL communicator for a data-parallel device step, and
// writes the initial parameters.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_ARENA_H
#define TCC_RUNTIME_LIB_ARENA_H

#include "runtime/data_parallel.h"
#include "runtime/lib/step_library.h"
#include "runtime/posix_io.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>

namespace tcc::run {

using tcc::io::errnoText;
using tcc::step::quoted;

/// The step's arena. For a host step (device_arena 0), `host` is the arena
/// itself: 64-byte aligned and zeroed, and what the step's functions take.
/// For a device step, the arena is device memory (tcc_step_device_open) that
/// only the step's functions reach, and `host` is a mirror of the same size
/// and offsets, mapped lazily zeroed (untouched pages cost nothing) that all
/// file I/O goes through: copyIn/copyOut move one tensor's region between
/// the mirror and the device, and are no-ops for a host step.
struct Arena {
  const Step *step = nullptr;
  char *host = nullptr;
  void *dev = nullptr;   // device steps: the device arena
  size_t mapped = 0;     // device steps: the mirror's mapping
  bool device = false;

  Arena() = default;
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;
  ~Arena() {
    if (dev)
      step->deviceClose(dev);
    if (mapped)
      ::munmap(host, mapped);
    else
      std::free(host);
  }

  /// What the step's functions take.
  void *stepArena() const { return device ? dev : host; }

  std::string allocate(uint64_t bytes) {
    uint64_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0)
      rounded = 64;
    if (rounded < bytes ||
        static_cast<uint64_t>(static_cast<size_t>(rounded)) != rounded)
      return "cannot allocate the step's arena of " + std::to_string(bytes) +
             " bytes";
    if (device) {
      // The host mirror: only the regions copied in or out are ever touched.
      void *mem = ::mmap(nullptr, static_cast<size_t>(rounded),
                         PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mem == MAP_FAILED)
        return "cannot map a host mirror of the step's arena (" +
               std::to_string(bytes) + " bytes): " + errnoText(errno);
      host = static_cast<char *>(mem);
      mapped = static_cast<size_t>(rounded);
      return "";
    }
    void *mem = nullptr;
    if (::posix_memalign(&mem, 64, static_cast<size_t>(rounded)) != 0)
      return "cannot allocate the step's arena of " + std::to_string(bytes) +
             " bytes";
    host = static_cast<char *>(mem);
    std::memset(host, 0, static_cast<size_t>(rounded));
    return "";
  }

  /// The host mirror's copy of `d` to the device (or to the step's host
  /// buffer, for a TCC_LOCATION_HOST tensor).
  std::string copyIn(const tcc_tensor_desc &d) {
    if (!device || d.bytes == 0)
      return "";
    char msg[1024] = {0};
    const bool onHost = d.location == TCC_LOCATION_HOST;
    const uint64_t at = onHost ? d.offset - step->info->arena_bytes : d.offset;
    if (int rc = (onHost ? step->hostCopyIn : step->copyIn)(dev, at, host + d.offset, d.bytes, msg,
                                                             sizeof msg))
      return stepError("copying " + quoted(d.name) + " to the device", rc,
                       msg);
    return "";
  }
  /// The device's copy of `d` to the host mirror.
  std::string copyOut(const tcc_tensor_desc &d) {
    if (!device || d.bytes == 0)
      return "";
    char msg[1024] = {0};
    const bool onHost = d.location == TCC_LOCATION_HOST;
    const uint64_t at = onHost ? d.offset - step->info->arena_bytes : d.offset;
    if (int rc = (onHost ? step->hostCopyOut : step->copyOut)(dev, at, host + d.offset, d.bytes, msg,
                                                               sizeof msg))
      return stepError("copying " + quoted(d.name) + " from the device", rc,
                       msg);
    return "";
  }
  std::string copyIn(const tcc_tensor_desc *t, int32_t n) {
    for (int32_t i = 0; device && i < n; ++i)
      if (std::string err = copyIn(t[i]); !err.empty())
        return err;
    return "";
  }
  std::string copyOut(const tcc_tensor_desc *t, int32_t n) {
    for (int32_t i = 0; device && i < n; ++i)
      if (std::string err = copyOut(t[i]); !err.empty())
        return err;
    return "";
  }
  /// The parameters and the optimizer state, device to mirror (for
  /// checkpoints, --save and --dump).
  std::string copyOutParamsAndState(bool withState) {
    const tcc_step_info &info = *step->info;
    std::string err = copyOut(info.params, info.num_params);
    if (err.empty() && withState)
      err = copyOut(info.state, info.num_state);
    return err;
  }

  /// "STEP.so: <the step's message>" (which starts with the CUDA error's
  /// name), or the return code where the step wrote none.
  std::string stepError(const std::string &what, int rc,
                        const char *msg) const {
    if (msg && msg[0])
      return step->name + ": " + msg + " (" + what + ")";
    return step->name + ": " + what + " failed (code " + std::to_string(rc) +
           ")";
  }
};

/// Refuses a step whose arena exceeds the budget it was compiled for, or
/// (host arenas only) the memory this machine has available.
std::string checkMemory(const tcc_step_info &info);
/// Checks the step's memory needs, allocates its arena (for a device step:
/// picks the rank's GPU, opens the device arena, maps the host mirror and,
/// with `nccl`, opens the world's NCCL communicator) and writes the initial
/// parameters (tcc_step_init).
std::string prepareArena(const Step &step, Arena &mem, tcc::dp::World &world, bool nccl);
/// --init-weights FILE: the parameters' values as one raw blob in the step's
/// parameter order, for a step compiled with tcc --no-weights; or, with
/// `initStd` > 0 (--init=normal[:STD]), values drawn from `seed`: matrices
/// N(0, initStd^2), vectors 1 where a norm's scale ("weight", "scale",
/// "gamma") and 0 elsewhere (biases).
std::string loadInitWeights(const std::string &path, double initStd, uint64_t seed,
                            bool resuming, const Step &step, Arena &mem);
/// Seeds the step's dropout state (if it has one) for a run that does not
/// resume one.
std::string seedDropout(const Step &step, Arena &mem, uint64_t seed);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_ARENA_H
