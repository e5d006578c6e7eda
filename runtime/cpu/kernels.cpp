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
