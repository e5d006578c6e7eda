//===- prebuilt.h - CPU kernel library functions compiled once ----*- C++ -*-===//
//
// The kernels of kernels.h that generated CPU steps call, for float and
// double (the instantiations the test models' and the Hugging Face models'
// CPU steps make, at both --cpu-precision values), as an X-macro list.
// kernels.cpp instantiates each of them once, in the CPU step's fixed half,
// which tcc compiles once per compiler and flags and keeps in its cache
// (codegen/StepBuilder.cpp). A generated step is compiled with
// TCC_CPU_PREBUILT_KERNELS, and step_prelude.h then declares them `extern
// template`: the step's own unit neither compiles nor inlines them (at -O3
// their bodies are most of a small step's compile time). A kernel or type
// combination not listed here is instantiated in the step, as before. The
// list decides build time only, never the results: the same source with the
// same flags, compiled in another unit.
//
// The kernels are templates without `inline`: an explicit instantiation
// declaration does not stop the instantiation of an inline function.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CPU_PREBUILT_H
#define TCC_RUNTIME_CPU_PREBUILT_H

/// X(declaration) for every prebuilt kernel with element type F;
/// `declaration` is what follows `template` in an explicit instantiation.
#define TCC_CPU_PREBUILT_LIST_OF(X, F)                                                                     \
  X(void binary<F, F, F>(BinaryOp, F *, const Shape &, const F *, const Shape &, const F *, const Shape &)) \
  X(void binary<uint8_t, F, F>(BinaryOp, uint8_t *, const Shape &, const F *, const Shape &, const F *,     \
                               const Shape &))                                                             \
  X(void unary<F>(UnaryOp, F *, const F *, int64_t))                                                        \
  X(void where<F>(F *, const Shape &, const uint8_t *, const Shape &, const F *, const Shape &, const F *,  \
                  const Shape &))                                                                          \
  X(void broadcast_to<F>(F *, const Shape &, const F *, const Shape &))                                    \
  X(void copy<F>(F *, const F *, int64_t))                                                                 \
  X(void fill<F>(F *, int64_t, F))                                                                         \
  X(void matmul_rows<F>(const F *, const Shape &, const F *, const Shape &, bool, bool, RowStore))          \
  X(void matmul<F>(F *, const F *, const Shape &, const F *, const Shape &, bool, bool))                   \
  X(void matmul_into<F>(F *, const F *, const Shape &, const F *, const Shape &, bool, bool, RowStore))    \
  X(void softmax<F>(F *, const F *, const Shape &, int, bool))                                             \
  X(void layer_norm<F>(F *, F *, F *, const F *, const Shape &, int, const F *, const Shape &, const F *,   \
                       const Shape &, double))                                                             \
  X(void attention_forward<F>(F *, AttentionStrides, F *, const F *, AttentionStrides, const F *,          \
                              AttentionStrides, const F *, AttentionStrides, const F *, AttentionStrides,  \
                              const AttentionDims &, double, bool, const AttentionDropout &, double))      \
  X(void attention_backward<F>(F *, AttentionStrides, F *, AttentionStrides, F *, AttentionStrides,        \
                               const F *, AttentionStrides, const F *, AttentionStrides, const F *,        \
                               AttentionStrides, const F *, AttentionStrides, const F *, AttentionStrides, \
                               const F *, const F *, AttentionStrides, const AttentionDims &, double,      \
                               bool, const AttentionDropout &, double))                                    \
  X(void reduce<F>(F *, const F *, const Shape &, uint32_t, bool))                                         \
  X(int gather<F, int64_t>(F *, const F *, const Shape &, const int64_t *, int64_t, int))                  \
  X(int gather_grad<F, int64_t>(F *, const Shape &, const F *, const int64_t *, int64_t, int))             \
  X(void transpose<F>(F *, const F *, const Shape &, const int64_t *))                                     \
  X(void slice<F>(F *, const Shape &, const F *, const Shape &, const int64_t *, const int64_t *))         \
  X(void slice_grad<F>(F *, const Shape &, const F *, const Shape &, const int64_t *, const int64_t *))    \
  X(void concat<F>(F *, const Shape &, int, int, const F *const *, const int64_t *))                       \
  X(int sce_loss<F, int64_t>(F *, F *, const F *, const Shape &, const int64_t *, const F *, int, bool,    \
                             int64_t))                                                                     \
  X(int sce_loss_grad<F, int64_t>(F *, const F *, const F *, const Shape &, const int64_t *, const F *,    \
                                  int, bool, int64_t))                                                     \
  X(int sce_loss_with_grad<F, int64_t>(F *, F *, const F *, int64_t, int64_t, const int64_t *, const F *,  \
                                       const F *, int, bool, int64_t))                                     \
  X(double sum_squares<F>(const F *, int64_t))                                                             \
  X(void adamw_update<F>(F *, F *, F *, F *, int64_t, double, double, double, double, double, int64_t,     \
                         double))                                                                          \
  X(void sgd_update<F>(F *, F *, F *, int64_t, double, double, double, bool, int64_t, double))             \
  X(void gelu<F>(F *, const F *, int64_t, bool))                                                           \
  X(void gelu_grad<F>(F *, const F *, const F *, int64_t, bool))

#define TCC_CPU_PREBUILT_LIST(X)                                                                           \
  TCC_CPU_PREBUILT_LIST_OF(X, float)                                                                       \
  TCC_CPU_PREBUILT_LIST_OF(X, double)

#endif // TCC_RUNTIME_CPU_PREBUILT_H
