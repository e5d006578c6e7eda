//===- kernels.cuh - CUDA kernels for tcc's generated code -------*- CUDA -*-===//
//
// Header-only CUDA C++17 kernels that the CUDA code emitted by tcc calls, one
// host call per tensor op, over device pointers into one arena. The semantics
// are those of the CPU reference runtime/cpu/kernels.h; the differences are:
//
//  * Storage types: floating tensors are __half or float, integer tensors
//    int64_t, int32_t, uint8_t (bool: one byte 0/1) or another integer type.
//    Every pointer argument has its own template parameter, so mixed
//    __half/float operands work. Floating arithmetic is done in float (load
//    __half -> float, compute, store -> __half rounding to nearest even);
//    floating accumulations (reductions, softmax / layer_norm statistics,
//    losses) are carried in float (double where noted), not double.
//  * Launchers are asynchronous: every kernel goes on stream(), nothing
//    synchronizes (except the few host helpers documented as synchronous), and
//    no host memory is read by a kernel: shapes, strides and host arrays are
//    copied into structs passed by value.
//  * Index errors (gather, gather_grad, sce_loss*) cannot be returned: the
//    kernel sets a device flag (read_and_clear_error_flag()) and writes 0.
//
// All tensors are dense row-major, rank <= 8 (a rank-0 tensor has one
// element); zero-size tensors launch nothing. Kernels use grid-stride loops
// with int64 indices and capped grids.
//
// The parts the fixed half of a step also uses are in common.cuh and
// optimizer.cuh (step_host.h); its __device__ variables (the reduction
// scratch) have internal linkage, one copy per unit that includes this.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_CUH
#define TCC_RUNTIME_CUDA_KERNELS_CUH

#include "common.cuh"
#include "optimizer.cuh"

// The library by kernel family.
#include "kernels_elementwise.cuh"
#include "kernels_norm.cuh"
#include "kernels_reduce.cuh"
#include "kernels_movement.cuh"
#include "kernels_loss.cuh"

// Fused (flash) attention, forward and backward, on tensor cores.
#include "attention.cuh"

// The launchers every CUDA step links compiled once (kernels.cu).
#include "prebuilt.cuh"

#endif // TCC_RUNTIME_CUDA_KERNELS_CUH
