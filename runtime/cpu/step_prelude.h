//===- step_prelude.h - what a generated CPU step includes first -*- C++ -*-===//
//
// The one header a generated CPU step (step.cpp) includes, before any code,
// so that tcc can compile it once as a precompiled header (GCC's .gch, kept
// in tcc's cache beside the CUDA step's fixed half; codegen/StepBuilder.cpp)
// and every later step skips parsing the kernel library. Without the .gch,
// or with a compiler that cannot use it, it is an ordinary header.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CPU_STEP_PRELUDE_H
#define TCC_RUNTIME_CPU_STEP_PRELUDE_H

#include "tcc_step.h"
#include "kernels.h"

// Built by tcc: the kernels the step's fixed half (kernels.cpp) holds are
// declared, not compiled, here (prebuilt.h).
#ifdef TCC_CPU_PREBUILT_KERNELS
#include "prebuilt.h"
namespace tcc::cpu {
#define TCC_CPU_DECLARE(...) extern template __VA_ARGS__;
TCC_CPU_PREBUILT_LIST(TCC_CPU_DECLARE)
#undef TCC_CPU_DECLARE
} // namespace tcc::cpu
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#endif // TCC_RUNTIME_CPU_STEP_PRELUDE_H
