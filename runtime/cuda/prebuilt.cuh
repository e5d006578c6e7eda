//===- prebuilt.cuh - kernel library launchers compiled once ------*- CUDA -*-===//
//
// The launchers of kernels.cuh and attention.cuh that generated steps call
// most (measured over the test models' and the Hugging Face models' CUDA
// steps; attention for head sizes up to 16, 32, 64 and 128), as an X-macro
// list. kernels.cu instantiates each of them once, in
// a unit of the CUDA step's fixed half, which tcc compiles once per compiler
// and flags and keeps in its cache (codegen/StepBuilder.cpp). A generated step
// defines TCC_CUDA_PREBUILT_KERNELS, and this header then declares them
// `extern template`, so the step's own unit compiles none of their kernels;
// a launcher or type combination not listed here is instantiated in the
// step, as before. The list decides build time only, never the results.
//
// The launchers are templates without `inline`: an explicit instantiation
// declaration does not stop the instantiation of an inline function.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_PREBUILT_CUH
#define TCC_RUNTIME_CUDA_PREBUILT_CUH

#define TCC_CUDA_ATTENTION_PREBUILT(X, P16, BIAS)                                                          \
  X(void attention_forward<P16, BIAS>(__half *, AttentionStrides, float *, const __half *, AttentionStrides, \
                                      const __half *, AttentionStrides, const __half *, AttentionStrides,   \
                                      const __half *, AttentionStrides, const AttentionDims &, float, bool, \
                                      const AttentionDropout &, float))                                     \
  X(void attention_backward<P16, BIAS>(__half *, AttentionStrides, __half *, AttentionStrides, __half *,    \
                                       AttentionStrides, const __half *, AttentionStrides, const __half *,  \
                                       AttentionStrides, const __half *, AttentionStrides, const __half *,  \
                                       AttentionStrides, const __half *, AttentionStrides, const float *,   \
                                       const __half *, AttentionStrides, const AttentionDims &, float,      \
                                       bool, const AttentionDropout &, float))

/// X(declaration) for every prebuilt launcher; `declaration` is what follows
/// `template` in an explicit instantiation.
#define TCC_CUDA_PREBUILT_LIST(X)                                                                            \
  X(void reduce<float, float>(float *, const float *, Shape, uint32_t, bool, bool))                          \
  X(void reduce<float, __half>(float *, const __half *, Shape, uint32_t, bool, bool))                        \
  X(void reduce<__half, __half>(__half *, const __half *, Shape, uint32_t, bool, bool))                      \
  X(void fill<float>(float *, int64_t, double))                                                             \
  X(void fill<__half>(__half *, int64_t, double))                                                           \
  X(void accumulate<float>(float *, const float *, int64_t))                                                \
  X(void accumulate<__half>(float *, const __half *, int64_t))                                              \
  X(void cast<__half, float>(__half *, const float *, int64_t))                                             \
  X(void cast<float, __half>(float *, const __half *, int64_t))                                             \
  X(void copy<float, float>(float *, const float *, int64_t))                                               \
  X(void copy<__half, __half>(__half *, const __half *, int64_t))                                           \
  X(void copy<__half, float>(__half *, const float *, int64_t))                                             \
  X(void unary<__half, __half>(UnaryOp, __half *, const __half *, int64_t))                                 \
  X(void binary<__half, __half, __half>(BinaryOp, __half *, Shape, const __half *, Shape, const __half *,    \
                                        Shape))                                                             \
  X(void binary<__half, __half, float>(BinaryOp, __half *, Shape, const __half *, Shape, const float *,      \
                                       Shape))                                                              \
  X(void binary<__half, float, float>(BinaryOp, __half *, Shape, const float *, Shape, const float *, Shape)) \
  X(void binary<float, float, float>(BinaryOp, float *, Shape, const float *, Shape, const float *, Shape))  \
  X(void broadcast_to<float, float>(float *, Shape, const float *, Shape))                                   \
  X(void broadcast_to<__half, __half>(__half *, Shape, const __half *, Shape))                               \
  X(void transpose<__half, __half>(__half *, const __half *, Shape, const int64_t *))                        \
  X(void transpose<float, float>(float *, const float *, Shape, const int64_t *))                            \
  X(void slice<__half, __half>(__half *, Shape, const __half *, Shape, const int64_t *, const int64_t *))    \
  X(void slice<int64_t, int64_t>(int64_t *, Shape, const int64_t *, Shape, const int64_t *, const int64_t *)) \
  X(void slice_grad<__half, __half>(__half *, Shape, const __half *, Shape, const int64_t *,                 \
                                    const int64_t *))                                                       \
  X(void concat<__half, __half>(__half *, Shape, int, int, const __half *const *, const int64_t *))          \
  X(void concat<int64_t, int64_t>(int64_t *, Shape, int, int, const int64_t *const *, const int64_t *))      \
  X(void gather<__half, __half, int64_t>(__half *, const __half *, Shape, const int64_t *, int64_t, int))    \
  X(void gather_grad<__half, int64_t>(float *, Shape, const __half *, const int64_t *, int64_t, int))        \
  X(void gather_grad<float, int64_t>(float *, Shape, const float *, const int64_t *, int64_t, int))          \
  X(void softmax<float, __half>(float *, const __half *, Shape, int, bool))                                  \
  X(void softmax<__half, __half>(__half *, const __half *, Shape, int, bool))                                \
  X(void gelu<__half, __half>(__half *, const __half *, int64_t, bool))                                      \
  X(void gelu_grad<__half, __half, __half>(__half *, const __half *, const __half *, int64_t, bool))         \
  X(void layer_norm<__half, __half, __half, __half>(__half *, float *, float *, const __half *, Shape, int,  \
                                                    const __half *, Shape, const __half *, Shape, double))  \
  X(void layer_norm<__half, __half, __half, float>(__half *, float *, float *, const __half *, Shape, int,   \
                                                   const __half *, Shape, const float *, Shape, double))    \
  X(void sce_loss_with_grad<__half, __half, int64_t, float>(float *, __half *, const __half *, int64_t,      \
                                                            int64_t, const int64_t *, const float *,        \
                                                            const float *, int, bool, int64_t, double *))   \
  TCC_CUDA_ATTENTION_PREBUILT(X, 1, 0)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 1, 1)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 2, 0)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 2, 1)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 4, 0)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 4, 1)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 8, 0)                                                                       \
  TCC_CUDA_ATTENTION_PREBUILT(X, 8, 1)

namespace tcc::cuda {
/// read_and_clear_error_flag() of kernels.cu's unit: the index errors of
/// the prebuilt launchers' kernels.
int read_and_clear_prebuilt_error_flag();
} // namespace tcc::cuda

#if defined(TCC_CUDA_PREBUILT_KERNELS)
namespace tcc::cuda {
#define TCC_CUDA_EXTERN_TEMPLATE(...) extern template __VA_ARGS__;
TCC_CUDA_PREBUILT_LIST(TCC_CUDA_EXTERN_TEMPLATE)
#undef TCC_CUDA_EXTERN_TEMPLATE
} // namespace tcc::cuda
#endif

#endif // TCC_RUNTIME_CUDA_PREBUILT_CUH
