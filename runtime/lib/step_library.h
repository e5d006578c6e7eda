//===- step_library.h - a compiled step, loaded -------------------*- C++ -*-===//
//
// A step library (step.so, whose C ABI is runtime/tcc_step.h) opened with
// dlopen: its entry points, looked up once, and its tables, checked before
// anything reads them (runtime/step_table). A step with a host buffer (tcc
// --offload) gets its tables in the host mirror's layout, the host buffer
// placed after the arena, so that every reader sees one address space.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_STEP_LIBRARY_H
#define TCC_RUNTIME_LIB_STEP_LIBRARY_H

#include "runtime/comm/tcc_comm.h"
#include "runtime/step_table.h"
#include "runtime/tcc_step.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tcc::run {

using GetInfoFn = const tcc_step_info *(*)();
using InitFn = int (*)(void *);
using ZeroGradsFn = int (*)(void *);
using MicroStepFn = int (*)(void *, double);
using ApplyFn = int (*)(void *, tcc_optim_args *);
using DeviceOpenFn = int (*)(void **, char *, uint64_t);
using DeviceCloseFn = int (*)(void *);
using CopyInFn = int (*)(void *, uint64_t, const void *, uint64_t, char *,
                         uint64_t);
using CopyOutFn = int (*)(const void *, uint64_t, void *, uint64_t, char *,
                          uint64_t);
using DeviceMemoryFn = int (*)(uint64_t *, uint64_t *);
using StageInputsFn = int (*)(void *, const void *, uint64_t, char *, uint64_t);
using MicroStepBeginFn = int (*)(void *, double);
using MicroStepEndFn = int (*)(void *);
using SetDeviceFn = int (*)(int32_t, char *, uint64_t);
using CommIdFn = int (*)(unsigned char *, char *, uint64_t);
using CommOpenFn = int (*)(void *, const unsigned char *, int32_t, int32_t, char *, uint64_t);
using CommReduceNextFn = int (*)(void *);
using CommInfoFn = int (*)(void *, char *, uint64_t);
using CommApiFn = const tcc_comm_api *(*)(void *);
using CommTraceFn = int (*)(void *, double *, double *, uint64_t *, const char **, int32_t);
using SetTraceHookFn = int (*)(tcc_step_trace_hook, void *);
using SetThreadsFn = int (*)(int32_t);
using SetCheckHookFn = int (*)(tcc_step_check_hook, void *);
using OpValuesFn = const tcc_op_value *(*)(int32_t *);
using GetShardsFn = const tcc_shard_info *(*)();
using ShardSumsqFn = int (*)(void *, int32_t, double *);
using ShardApplyFn = int (*)(void *, int32_t, tcc_optim_args *, double);

struct Step {
  std::string name; // as given on the command line
  std::string path;
  const tcc_step_info *info = nullptr;
  InitFn init = nullptr;
  ZeroGradsFn zeroGrads = nullptr;
  MicroStepFn microStep = nullptr;
  ApplyFn apply = nullptr; // absent in a step without a backward pass
  // Device steps (info->device_arena == 1) only; looked up with dlsym, so
  // that tcc-run itself never links the CUDA runtime.
  bool device = false;
  DeviceOpenFn deviceOpen = nullptr;
  DeviceCloseFn deviceClose = nullptr;
  CopyInFn copyIn = nullptr;
  CopyOutFn copyOut = nullptr;
  DeviceMemoryFn deviceMemory = nullptr;
  StageInputsFn stageInputs = nullptr;
  MicroStepBeginFn microStepBegin = nullptr;
  MicroStepEndFn microStepEnd = nullptr;
  SetTraceHookFn setTraceHook = nullptr; // tcc-run --trace
  SetThreadsFn setThreads = nullptr;     // CPU steps: tcc-run --threads
  SetCheckHookFn setCheckHook = nullptr; // tcc-run --check-numerics (optional)
  OpValuesFn opValues = nullptr;
  // Data parallelism on a device step (NCCL); looked up under a launcher.
  SetDeviceFn setDevice = nullptr;
  CommIdFn commId = nullptr;
  CommOpenFn commOpen = nullptr;
  CommReduceNextFn commReduceNext = nullptr;
  CommInfoFn commInfo = nullptr;
  CommApiFn commApi = nullptr; // collectives for a world without MPI
  CommTraceFn commTrace = nullptr; // --trace: the collectives' times
  // Sharded optimizer state (tcc --data-parallel=N, ZeRO-1) only: the
  // shards' layout, and the two halves of the update of this rank's chunk.
  const tcc_shard_info *shards = nullptr;
  ShardSumsqFn shardSumsq = nullptr;
  ShardApplyFn shardApply = nullptr;
  // Steps with a host buffer (tcc --offload) only.
  CopyInFn hostCopyIn = nullptr;
  CopyOutFn hostCopyOut = nullptr;
  /// The tables in the host mirror's layout when the step has a host
  /// buffer (tcc::step::MirrorTables); `info` then points into it.
  std::shared_ptr<const tcc::step::MirrorTables> view;
  /// The host mirror's bytes: the arena and the host buffer.
  uint64_t mirrorBytes() const { return info->arena_bytes + info->host_bytes; }
};

/// The step's tables with host-buffer tensors placed after the arena.
void makeMirrorView(Step &step);
/// '/' in a tensor name becomes '_' in its file name.
std::string fileNameFor(const char *name);
/// Checks that `path` (named `arg` on the command line) is an ELF shared
/// library dlopen can map: "" or why not.
std::string checkLibraryFile(const std::string &arg, const std::string &path);
/// The step's tables, checked (runtime/step_table's checkInfo).
std::string checkInfo(const Step &step);
/// Opens the step library `arg` and fills `step`: "" or why not.
std::string loadStep(const std::string &arg, Step &step);
/// What a micro-step's return code means, where it has a meaning.
const char *stepErrorMeaning(int code);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_STEP_LIBRARY_H
