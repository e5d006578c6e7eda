//===- gemm.cuh - cuBLASLt matrix products for tcc's generated code -*- CUDA -*-===//
//
// Row-major batched matmul with NumPy semantics over fp16 tensors (fp16 in
// and out, fp32 accumulation and scale: CUBLAS_COMPUTE_32F, CUDA_R_32F), on
// tcc::cuda::stream(). The definitions are in gemm.cu, which a CUDA step
// links in its fixed half (step_host.h); link with -lcublasLt -lcudart.
//
// Each call site passes a small unique integer `id`; the cuBLASLt matmul
// descriptor, the matrix layouts and the heuristic's algorithm are created on
// the first call of that id and cached, so later calls with the same shapes
// only launch (and are safe to capture in a CUDA graph). A call whose shapes,
// pointer alignment or workspace differ from the cached plan re-plans.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_GEMM_CUH
#define TCC_RUNTIME_CUDA_GEMM_CUH

#include "common.cuh"

#include <cstddef>

namespace tcc::cuda {

/// The workspace cuBLASLt may use (the arena provides it; default none).
/// Plans made with another size are re-planned on their next call.
void set_workspace(void *p, size_t bytes);

/// Message for the last nonzero status matmul returned.
const char *last_error();

/// out = op(a) · op(b), row-major, NumPy matmul semantics (rank-1 operands
/// are promoted, then the dim is dropped; batch dims broadcast). as / bs are
/// the shapes as stored; trans_a: a is stored [..., K, M] and used as
/// [..., M, K] (likewise trans_b: b stored [..., N, K]). The flag of a rank-1
/// operand is ignored. out is dense [batch..., M, N]. `id`: a small unique
/// integer per call site (plan cache). Returns 0 or a cublasStatus_t.
int matmul(int id, __half *out, const __half *a, Shape as, bool trans_a, const __half *b, Shape bs,
            bool trans_b);

/// acc [M, N] (fp32, row-major) += op(a) · op(b) for rank-2 fp16 a and b
/// (trans_a: a stored [K, M]; trans_b: b stored [N, K]): one cuBLASLt call
/// with the accumulator as C and D in fp32 and beta 1, so that a weight's
/// gradient goes into its fp32 accumulator without an fp16 copy in between
/// (nor its rounding, nor its overflow). Returns 0 or a cublasStatus_t.
int matmul_acc(int id, float *acc, const __half *a, Shape as, bool trans_a, const __half *b, Shape bs,
                bool trans_b);

/// out = act(a · op(b) + bias [+ residual]) as one cuBLASLt matmul with an
/// epilogue: b is an unbatched [K, N] (trans_b: stored [N, K]) matrix, a is
/// [..., M, K] (its batch folds into M, so trans_a must be false), bias has
/// N elements (added along each row), residual (optional) is out's shape.
/// With gelu, act is the tanh GELU and aux (optional, out's shape) receives
/// its input a · op(b) + bias; N must then be a multiple of 8. Without
/// gelu, aux must be null. Returns 0 or a cublasStatus_t.
int matmul_epilogue(int id, __half *out, const __half *a, Shape as, bool trans_a, const __half *b, Shape bs,
                    bool trans_b, const __half *bias, const __half *residual, __half *aux, bool gelu);

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_GEMM_CUH
