//===- cublasLt.h - cuBLASLt for tcc's CUDA emulation ------------*- C++ -*-===//
//
// Stands in for the toolkit's cublasLt.h when tcc's CUDA code is built for
// the host (see tcc_cuda_emu.h). It implements the calls runtime/cuda/gemm.cuh
// makes, for fp16 matrices with fp32 compute and scale:
//   D = alpha * op(A) * op(B) + beta * C, column-major, strided batches,
// accumulated in fp32 and rounded to fp16. Like cuBLASLt it checks that the
// layouts fit the operation (op(A) is m x k, op(B) is k x n, C is m x n,
// ld >= rows, equal batch counts) and returns CUBLAS_STATUS_INVALID_VALUE
// otherwise. The algorithm the heuristic returns records the alignments the
// preference promised; a matmul whose operands (any batch of them) are less
// aligned fails, as a real kernel chosen for that alignment would. The
// heuristic asks for a workspace (up to 1 MiB), which every matmul overwrites.
// Epilogues (unbatched): BIAS adds a vector along D's rows after alpha/beta;
// GELU applies the tanh approximation, GELU_AUX first writes its input to
// the auxiliary matrix (fp16, leading dimension a multiple of 8).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CUDA_EMU_CUBLASLT_H
#define TCC_CUDA_EMU_CUBLASLT_H

#include "cuda_fp16.h"
#include "tcc_cuda_emu.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12
} cublasLtMatmulDescAttributes_t;
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4
} cublasLtEpilogue_t;
typedef enum {
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6
} cublasLtMatrixLayoutAttribute_t;
typedef enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

namespace tcc_emu::lt {
struct Context {};
struct Desc {
  int compute = 0, scale = 0;
  int op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  void *aux = nullptr;
  int64_t aux_ld = 0;
};
struct Layout {
  int type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct Preference {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D
};
} // namespace tcc_emu::lt

typedef tcc_emu::lt::Context *cublasLtHandle_t;
typedef tcc_emu::lt::Desc *cublasLtMatmulDesc_t;
typedef tcc_emu::lt::Layout *cublasLtMatrixLayout_t;
typedef tcc_emu::lt::Preference *cublasLtMatmulPreference_t;
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  if (cudaFree(nullptr) != cudaSuccess) {
    *h = nullptr;
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *h = new tcc_emu::lt::Context;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                               cudaDataType scale) {
  *d = new tcc_emu::lt::Desc{static_cast<int>(compute), static_cast<int>(scale)};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t size) {
  if (!d)
    return CUBLAS_STATUS_INVALID_VALUE;
  int32_t v = 0;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
  case CUBLASLT_MATMUL_DESC_TRANSB:
    if (size != sizeof(int32_t))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&v, buf, sizeof v);
    if (v != CUBLAS_OP_N && v != CUBLAS_OP_T)
      return CUBLAS_STATUS_INVALID_VALUE;
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->op_a : d->op_b) = v;
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    if (size != sizeof(int32_t))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&v, buf, sizeof v);
    if (v != CUBLASLT_EPILOGUE_DEFAULT && v != CUBLASLT_EPILOGUE_BIAS && v != CUBLASLT_EPILOGUE_GELU &&
        v != CUBLASLT_EPILOGUE_GELU_AUX && v != CUBLASLT_EPILOGUE_GELU_BIAS && v != CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
      return CUBLAS_STATUS_NOT_SUPPORTED; // not emulated
    d->epilogue = v;
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    if (size != sizeof(void *))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&d->bias, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    if (size != sizeof(void *))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&d->aux, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    if (size != sizeof(int64_t))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&d->aux_ld, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  *l = new tcc_emu::lt::Layout{static_cast<int>(type), rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                       const void *buf, size_t size) {
  if (!l)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof(int32_t)) {
    std::memcpy(&l->batch, buf, size);
    return l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && size == sizeof(int64_t)) {
    std::memcpy(&l->stride, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new tcc_emu::lt::Preference;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void *buf, size_t size) {
  if (!p)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof(uint64_t)) {
    std::memcpy(&p->max_workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES &&
      size == sizeof(uint32_t)) {
    uint32_t v;
    std::memcpy(&v, buf, size);
    if (v == 0 || (v & (v - 1)) != 0)
      return CUBLAS_STATUS_INVALID_VALUE;
    p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

namespace tcc_emu::lt {
constexpr uint64_t kWorkspace = 1u << 20;

/// The shapes of a matmul, checked as cuBLASLt checks them.
inline bool shapes(const Desc &d, const Layout &a, const Layout &b, const Layout &c, const Layout &dl, uint64_t *m,
                   uint64_t *n, uint64_t *k) {
  const uint64_t am = d.op_a == CUBLAS_OP_N ? a.rows : a.cols, ak = d.op_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t bk = d.op_b == CUBLAS_OP_N ? b.rows : b.cols, bn = d.op_b == CUBLAS_OP_N ? b.cols : b.rows;
  *m = c.rows;
  *n = c.cols;
  *k = ak;
  const bool ok = am == c.rows && bn == c.cols && ak == bk && dl.rows == c.rows && dl.cols == c.cols &&
                  a.ld >= static_cast<int64_t>(a.rows) && b.ld >= static_cast<int64_t>(b.rows) &&
                  c.ld >= static_cast<int64_t>(c.rows) && a.batch == c.batch && b.batch == c.batch &&
                  dl.batch == c.batch && a.type == CUDA_R_16F && b.type == CUDA_R_16F &&
                  (c.type == CUDA_R_16F || c.type == CUDA_R_32F) && dl.type == c.type &&
                  d.compute == CUBLAS_COMPUTE_32F && d.scale == CUDA_R_32F;
  // Epilogues: a bias needs its pointer; an auxiliary output (GELU_AUX) its
  // pointer and a leading dimension divisible by 8, no less than D's rows.
  const bool has_bias = d.epilogue & CUBLASLT_EPILOGUE_BIAS;
  const bool has_aux = d.epilogue & 128;
  if ((has_bias && !d.bias) || (has_aux && (!d.aux || d.aux_ld % 8 != 0 || d.aux_ld < static_cast<int64_t>(c.rows))) ||
      ((has_bias || has_aux || (d.epilogue & CUBLASLT_EPILOGUE_GELU)) && c.batch != 1)) {
    std::fprintf(stderr, "tcc CUDA emulation: cublasLt: epilogue %d without its bias or auxiliary pointer, an "
                         "auxiliary leading dimension %lld (rows %llu), or on %d batches\n",
                 d.epilogue, (long long)d.aux_ld, (unsigned long long)c.rows, c.batch);
    return false;
  }
  if (c.type == CUDA_R_32F && d.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    // The bias's type would follow D's; tcc never asks for it, so the
    // emulation does not model it.
    std::fprintf(stderr, "tcc CUDA emulation: cublasLt: epilogue %d with an fp32 D is not emulated\n", d.epilogue);
    return false;
  }
  if (!ok)
    std::fprintf(stderr,
                 "tcc CUDA emulation: cublasLt: layouts do not fit the matmul (op(A) %llux%llu, op(B) %llux%llu, "
                 "C %llux%llu, batches %d/%d/%d)\n",
                 (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
                 (unsigned long long)c.rows, (unsigned long long)c.cols, a.batch, b.batch, c.batch);
  return ok;
}

inline bool aligned(const void *p, int64_t stride, int32_t batch, uint64_t align, int64_t element_bytes = 2) {
  for (int32_t i = 0; i < batch; ++i)
    if ((reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(i * stride * element_bytes)) % align != 0)
      return false;
  return true;
}
} // namespace tcc_emu::lt

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                     cublasLtMatmulPreference_t p, int requested,
                                                     cublasLtMatmulHeuristicResult_t *res, int *found) {
  *found = 0;
  if (!h || !d || !a || !b || !c || !dl || !p || requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  if (!tcc_emu::lt::shapes(*d, *a, *b, *c, *dl, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(res, 0, sizeof(*res));
  for (int i = 0; i < 4; ++i)
    res->algo.data[i] = p->align[i];
  res->workspaceSize = p->max_workspace < tcc_emu::lt::kWorkspace ? p->max_workspace : tcc_emu::lt::kWorkspace;
  res->algo.data[4] = res->workspaceSize;
  res->state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb,
                                     const void *beta, const void *C, cublasLtMatrixLayout_t lc, void *D,
                                     cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
  using namespace tcc_emu::lt;
  if (!h || !d || !la || !lb || !lc || !ld || !algo || !A || !B || !D)
    return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  if (!shapes(*d, *la, *lb, *lc, *ld, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t need_ws = algo->data[4];
  if (need_ws && (workspace_bytes < need_ws || !workspace)) {
    std::fprintf(stderr, "tcc CUDA emulation: cublasLt: the algorithm needs %llu bytes of workspace, got %llu\n",
                 (unsigned long long)need_ws, (unsigned long long)workspace_bytes);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!aligned(A, la->stride, la->batch, algo->data[0]) || !aligned(B, lb->stride, lb->batch, algo->data[1]) ||
      (!aligned(C, lc->stride, lc->batch, algo->data[2], lc->type == CUDA_R_32F ? 4 : 2) && C) ||
      !aligned(D, ld->stride, ld->batch, algo->data[3], ld->type == CUDA_R_32F ? 4 : 2)) {
    std::fprintf(stderr, "tcc CUDA emulation: cublasLt: an operand is less aligned than the plan's preference "
                         "(A %p/%llu, B %p/%llu, D %p/%llu)\n",
                 A, (unsigned long long)algo->data[0], B, (unsigned long long)algo->data[1], D,
                 (unsigned long long)algo->data[3]);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  float al, be;
  std::memcpy(&al, alpha, sizeof al);
  std::memcpy(&be, beta, sizeof be);
  const Desc desc = *d;
  const Layout a = *la, b = *lb, c = *lc, dd = *ld;
  cudaError_t e = tcc_emu::enqueue(stream, [=]() {
    if (need_ws)
      std::memset(workspace, 0xa5, need_ws);
    const __half *pa = static_cast<const __half *>(A), *pb = static_cast<const __half *>(B);
    // C and D: fp16, or fp32 (a mixed-precision GEMM: fp16 A and B, fp32
    // C = D, as a gradient accumulator takes the product).
    const bool f32 = c.type == CUDA_R_32F;
    auto c_at = [&](uint64_t idx) {
      return f32 ? static_cast<const float *>(C)[idx] : static_cast<float>(static_cast<const __half *>(C)[idx]);
    };
    std::vector<float> out(m * n), xa(m * k), xb(k * n);
    for (int32_t t = 0; t < c.batch; ++t) {
      const __half *ta = pa + t * a.stride, *tb = pb + t * b.stride;
      // op(A) row by row and op(B) column by column, as float.
      for (uint64_t i = 0; i < m; ++i)
        for (uint64_t p = 0; p < k; ++p)
          xa[i * k + p] = static_cast<float>(desc.op_a == CUBLAS_OP_N ? ta[i + p * a.ld] : ta[p + i * a.ld]);
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t p = 0; p < k; ++p)
          xb[j * k + p] = static_cast<float>(desc.op_b == CUBLAS_OP_N ? tb[p + j * b.ld] : tb[j + p * b.ld]);
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t i = 0; i < m; ++i) {
          float acc = 0.0f;
          const float *x = &xa[i * k], *y = &xb[j * k];
          for (uint64_t p = 0; p < k; ++p)
            acc += x[p] * y[p];
          float r = al * acc;
          if (be != 0.0f)
            r += be * c_at(t * c.stride + i + j * c.ld);
          if (desc.epilogue & CUBLASLT_EPILOGUE_BIAS)
            r += static_cast<float>(static_cast<const __half *>(desc.bias)[i]);
          if (desc.epilogue & CUBLASLT_EPILOGUE_GELU) {
            if (desc.epilogue & 128)
              static_cast<__half *>(desc.aux)[i + j * desc.aux_ld] = __half(r);
            // cuBLASLt's GELU is the tanh approximation.
            r = 0.5f * r * (1.0f + std::tanh(0.7978845608028654f * (r + 0.044715f * r * r * r)));
          }
          out[i + j * m] = r;
        }
      // D may alias C: write after every element of this batch is computed.
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t i = 0; i < m; ++i)
          if (f32)
            static_cast<float *>(D)[t * dd.stride + i + j * dd.ld] = out[i + j * m];
          else
            static_cast<__half *>(D)[t * dd.stride + i + j * dd.ld] = __half(out[i + j * m]);
    }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

#endif // TCC_CUDA_EMU_CUBLASLT_H
