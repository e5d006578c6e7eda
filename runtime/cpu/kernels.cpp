//===- kernels.cpp - the prebuilt kernels of the CPU step -----------------===//
//
// The CPU step's fixed half: one explicit instantiation of every kernel
// prebuilt.h lists, compiled once per compiler and flags into tcc's cache
// and linked into every CPU step, whose own unit then declares them extern.
//
//===----------------------------------------------------------------------===//
#include "kernels.h"
#include "prebuilt.h"

namespace tcc::cpu {
#define TCC_CPU_INSTANTIATE(...) template __VA_ARGS__;
TCC_CPU_PREBUILT_LIST(TCC_CPU_INSTANTIATE)
#undef TCC_CPU_INSTANTIATE
} // namespace tcc::cpu

/// The threads the step uses (tcc-run --threads): its pool's size, the
/// caller included; 1 until called. Optional in the step ABI: a step
/// without it runs on one thread.
extern "C" __attribute__((visibility("default"))) int tcc_step_set_threads(int32_t n) {
  if (n < 1)
    return 1;
  tcc::cpu::ThreadPool::get().resize(n);
  return 0;
}
