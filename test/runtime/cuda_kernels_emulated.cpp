// cuda_kernels_test.cu built by the host compiler against tcc's CUDA
// emulation (runtime/cuda/emu): every CUDA kernel and the cuBLASLt matmuls,
// run on the CPU with GPU thread semantics, against the CPU reference
// kernels. The test's "perf" section (timings) runs only when asked for.
#include "cuda_kernels_test.cu"
