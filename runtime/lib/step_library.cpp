//===- step_library.cpp - a compiled step, loaded -------------------------===//

#include "runtime/lib/step_library.h"

#include "runtime/npy.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"

#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::run {

using tcc::io::errnoText;
using tcc::step::describe;

/// The step's tables with host-buffer tensors placed after the arena.
void makeMirrorView(Step &step) {
  step.view = std::make_shared<const tcc::step::MirrorTables>(*step.info);
  step.info = &step.view->info;
}

/// '/' in a tensor name becomes '_' in its file name.
std::string fileNameFor(const char *name) {
  std::string s = name;
  for (char &c : s)
    if (c == '/')
      c = '_';
  return s + ".npy";
}

std::string checkInfo(const Step &step) { return tcc::step::checkInfo(*step.info); }

/// Checks that `path` is a whole shared library for this machine before
/// dlopen maps it: a regular file (a FIFO is not waited on), an ELF header,
/// and every loaded segment inside the file, so that a truncated or foreign
/// file is an error here rather than a SIGBUS inside the dynamic loader.
std::string checkLibraryFile(const std::string &arg, const std::string &path) {
  int fd = tcc::io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC); // non-blocking: a FIFO fails below
  if (fd < 0)
    return "cannot open " + arg + ": " + errnoText(errno);
  io::FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return "cannot read " + arg + ": " + errnoText(errno);
  if (!S_ISREG(st.st_mode))
    return arg + " is not a regular file (a step library is one)";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  Elf64_Ehdr eh;
  const std::string notStep = arg + " is not a step library built by tcc";
  if (size < sizeof eh || ::pread(fd, &eh, sizeof eh, 0) != static_cast<ssize_t>(sizeof eh))
    return notStep + " (" + std::to_string(size) + " bytes: too short for a shared library)";
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return notStep + " (it is not an ELF file)";
#if defined(__x86_64__)
  const uint16_t machine = EM_X86_64;
#elif defined(__aarch64__)
  const uint16_t machine = EM_AARCH64;
#else
  const uint16_t machine = eh.e_machine;
#endif
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_machine != machine)
    return arg + " is a library for another kind of machine; rebuild it with tcc here";
  if (eh.e_type != ET_DYN)
    return notStep + " (it is an ELF file, but not a shared library)";
  const std::string truncated =
      arg + " is truncated (" + std::to_string(size) +
      " bytes, less than its ELF headers describe); rebuild it with tcc";
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > size ||
      static_cast<uint64_t>(eh.e_phnum) * sizeof(Elf64_Phdr) > size - eh.e_phoff)
    return truncated;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (::pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + i * sizeof ph)) !=
        static_cast<ssize_t>(sizeof ph))
      return truncated;
    if (ph.p_type == PT_LOAD && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
      return truncated;
  }
  if (eh.e_shoff > size ||
      static_cast<uint64_t>(eh.e_shnum) * eh.e_shentsize > size - eh.e_shoff)
    return truncated;
  return "";
}

std::string loadStep(const std::string &arg, Step &step) {
  // dlopen searches the library path for a name without '/'; a path on the
  // command line means a file, so make it relative to the current directory.
  step.name = arg;
  step.path = arg.find('/') == std::string::npos ? "./" + arg : arg;
  struct stat st;
  if (::stat(step.path.c_str(), &st) != 0)
    return arg + " does not exist";
  if (std::string err = checkLibraryFile(arg, step.path); !err.empty())
    return err;
  void *lib = ::dlopen(step.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = ::dlerror();
    return "cannot load " + arg + ": " + (why ? why : "unknown dlopen error");
  }
  auto sym = [&](const char *name, void *&out) -> std::string {
    ::dlerror();
    out = ::dlsym(lib, name);
    if (!out)
      return arg + " does not export " + name +
             " (is it a step library built by tcc?)";
    return "";
  };
  void *getInfo, *init, *zeroGrads, *microStep;
  std::string err;
  if (!(err = sym("tcc_step_get_info", getInfo)).empty() ||
      !(err = sym("tcc_step_init", init)).empty() ||
      !(err = sym("tcc_step_zero_grads", zeroGrads)).empty() ||
      !(err = sym("tcc_step_micro_step", microStep)).empty())
    return err;
  // Steps before ABI 6 have no trace hook; the version check below refuses
  // them with a clearer message.
  step.setTraceHook = reinterpret_cast<SetTraceHookFn>(::dlsym(lib, "tcc_step_set_trace_hook"));
  step.setThreads = reinterpret_cast<SetThreadsFn>(::dlsym(lib, "tcc_step_set_threads"));
  // Steps built before --check-numerics have neither; it refuses them.
  step.setCheckHook = reinterpret_cast<SetCheckHookFn>(::dlsym(lib, "tcc_step_set_check_hook"));
  step.opValues = reinterpret_cast<OpValuesFn>(::dlsym(lib, "tcc_step_op_values"));
  step.init = reinterpret_cast<InitFn>(init);
  step.zeroGrads = reinterpret_cast<ZeroGradsFn>(zeroGrads);
  step.microStep = reinterpret_cast<MicroStepFn>(microStep);
  ::dlerror();
  step.apply = reinterpret_cast<ApplyFn>(::dlsym(lib, "tcc_step_apply"));
  step.info = reinterpret_cast<GetInfoFn>(getInfo)();
  if (!step.info)
    return arg + ": tcc_step_get_info returned no table";
  if (step.info->abi_version != TCC_STEP_ABI_VERSION)
    return arg + " uses step ABI " + std::to_string(step.info->abi_version) +
           ", but this tcc-run supports ABI " +
           std::to_string(TCC_STEP_ABI_VERSION) +
           "; rebuild the step with a matching tcc";
  if (!step.setTraceHook)
    return arg + " does not export tcc_step_set_trace_hook (is it a step library built by tcc?)";
  if (step.info->device_arena != 0 && step.info->device_arena != 1)
    return arg + ": the step's device_arena is " +
           std::to_string(step.info->device_arena) + " (0 or 1 expected)";
  if (step.info->device_arena == 1) {
    // The arena lives in device memory: every access goes through the
    // step's own device functions.
    step.device = true;
    void *open, *close, *copyIn, *copyOut, *memory, *stage, *begin, *end;
    auto devSym = [&](const char *name, void *&out) -> std::string {
      ::dlerror();
      out = ::dlsym(lib, name);
      if (!out)
        return arg + " has a device arena (target \"" +
               std::string(step.info->target ? step.info->target : "?") +
               "\") but does not export " + name +
               "; rebuild it with a matching tcc";
      return "";
    };
    if (!(err = devSym("tcc_step_device_open", open)).empty() ||
        !(err = devSym("tcc_step_device_close", close)).empty() ||
        !(err = devSym("tcc_step_copy_in", copyIn)).empty() ||
        !(err = devSym("tcc_step_copy_out", copyOut)).empty() ||
        !(err = devSym("tcc_step_device_memory", memory)).empty() ||
        !(err = devSym("tcc_step_stage_inputs", stage)).empty() ||
        !(err = devSym("tcc_step_micro_step_begin", begin)).empty() ||
        !(err = devSym("tcc_step_micro_step_end", end)).empty())
      return err;
    step.deviceOpen = reinterpret_cast<DeviceOpenFn>(open);
    step.deviceClose = reinterpret_cast<DeviceCloseFn>(close);
    step.copyIn = reinterpret_cast<CopyInFn>(copyIn);
    step.copyOut = reinterpret_cast<CopyOutFn>(copyOut);
    step.deviceMemory = reinterpret_cast<DeviceMemoryFn>(memory);
    step.stageInputs = reinterpret_cast<StageInputsFn>(stage);
    step.microStepBegin = reinterpret_cast<MicroStepBeginFn>(begin);
    step.microStepEnd = reinterpret_cast<MicroStepEndFn>(end);
    step.setDevice = reinterpret_cast<SetDeviceFn>(::dlsym(lib, "tcc_step_set_device"));
    step.commId = reinterpret_cast<CommIdFn>(::dlsym(lib, "tcc_step_comm_id"));
    step.commOpen = reinterpret_cast<CommOpenFn>(::dlsym(lib, "tcc_step_comm_open"));
    step.commReduceNext = reinterpret_cast<CommReduceNextFn>(::dlsym(lib, "tcc_step_comm_reduce_next"));
    step.commInfo = reinterpret_cast<CommInfoFn>(::dlsym(lib, "tcc_step_comm_info"));
    step.commApi = reinterpret_cast<CommApiFn>(::dlsym(lib, "tcc_step_comm_api"));
    step.commTrace = reinterpret_cast<CommTraceFn>(::dlsym(lib, "tcc_step_comm_trace"));
  }
  if (std::string bad = checkInfo(step); !bad.empty())
    return bad;
  if (auto getShards = reinterpret_cast<GetShardsFn>(::dlsym(lib, "tcc_step_get_shards"))) {
    // tcc --data-parallel=N: the optimizer state sharded across N ranks. A
    // CPU step exports the entry points only then; a CUDA step's fixed half
    // always does, and its table is null when the state is whole.
    step.shards = getShards();
    step.shardSumsq = reinterpret_cast<ShardSumsqFn>(::dlsym(lib, "tcc_step_shard_sumsq"));
    step.shardApply = reinterpret_cast<ShardApplyFn>(::dlsym(lib, "tcc_step_shard_apply"));
    if (!step.shards && step.device) {
      step.shardSumsq = nullptr;
      step.shardApply = nullptr;
    } else if (!step.shards || !step.shardSumsq || !step.shardApply) {
      return arg + " exports tcc_step_get_shards but not its table, tcc_step_shard_sumsq "
                   "and tcc_step_shard_apply; rebuild it with a matching tcc";
    } else if (std::string bad = tcc::step::checkShards(*step.info, *step.shards); !bad.empty()) {
      return arg + ": " + bad;
    }
  }
  if (step.info->host_bytes) {
    // tcc --offload: master weights and optimizer state in the step's
    // pinned host buffer.
    void *in = ::dlsym(lib, "tcc_step_host_copy_in"), *out = ::dlsym(lib, "tcc_step_host_copy_out");
    if (!step.device || !in || !out)
      return arg + " has a host buffer of " + std::to_string(step.info->host_bytes) +
             " bytes but " + (step.device ? "does not export tcc_step_host_copy_in and _out"
                                          : "no device arena") +
             "; rebuild it with a matching tcc";
    step.hostCopyIn = reinterpret_cast<CopyInFn>(in);
    step.hostCopyOut = reinterpret_cast<CopyOutFn>(out);
    makeMirrorView(step);
  }
  return "";
}


const char *stepErrorMeaning(int code) {
  switch (code) {
  case 1:
    return "an index was out of range (a token id outside the vocabulary, or "
           "a label outside the classes)";
  case TCC_STEP_STOPPED:
    return "stopped by --check-numerics";
  }
  return nullptr;
}

} // namespace tcc::run
