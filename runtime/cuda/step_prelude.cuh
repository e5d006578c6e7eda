//===- step_prelude.cuh - what a generated CUDA step includes first -*- CUDA -*-===//
//
// The one header a generated CUDA step (step.cu) includes, before any code.
// With the CUDA emulation, tcc compiles it once as a precompiled header
// (GCC's .gch, in its cache; codegen/StepBuilder.cpp), so that a step does
// not parse the kernel library again; nvcc reads it as a header.
//
// The launchers that the fixed half compiles once (kernels.cu) are declared
// extern here (TCC_CUDA_PREBUILT_KERNELS, prebuilt.cuh), so the step's unit
// compiles only its own kernels.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_STEP_PRELUDE_CUH
#define TCC_RUNTIME_CUDA_STEP_PRELUDE_CUH

#define TCC_CUDA_PREBUILT_KERNELS 1
#include "step_host.h"
#include "kernels.cuh"
#include "gemm.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#endif // TCC_RUNTIME_CUDA_STEP_PRELUDE_CUH
