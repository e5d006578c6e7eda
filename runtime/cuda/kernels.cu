//===- kernels.cu - the prebuilt launchers of the kernel library ----------===//
//
// A unit of the CUDA step's fixed half: one explicit instantiation of every
// launcher prebuilt.cuh lists, compiled once per compiler and flags and
// linked into every CUDA step, whose own unit then declares them extern.
//
//===----------------------------------------------------------------------===//
#include "kernels.cuh"

namespace tcc::cuda {
#define TCC_CUDA_INSTANTIATE(...) template __VA_ARGS__;
TCC_CUDA_PREBUILT_LIST(TCC_CUDA_INSTANTIATE)
#undef TCC_CUDA_INSTANTIATE

int read_and_clear_prebuilt_error_flag() { return read_and_clear_error_flag(); }
} // namespace tcc::cuda
