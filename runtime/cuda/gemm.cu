//===- gemm.cu - cuBLASLt matrix products (gemm.cuh) --------------*- CUDA -*-===//
//
// Row-major trick: C = A·B (row-major) is C^T = B^T·A^T in column-major, so
// cuBLASLt is called with the operands swapped (its "A" is our b, its "B" is
// our a) and m = N, n = M.
//
//===----------------------------------------------------------------------===//
#include "gemm.cuh"

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tcc::cuda {

namespace gemm_detail {
namespace {

// Everything a plan depends on. Operand names are cuBLAS's (A = our b,
// B = our a, C = out); all are fp16 column-major as cuBLASLt sees them.
struct Key {
  int64_t m, n, k;
  int32_t op_a, op_b; // cublasOperation_t
  int64_t rows_a, cols_a, ld_a;
  int64_t rows_b, cols_b, ld_b;
  int64_t ld_c;
  int32_t batch;
  int32_t pad_;
  int64_t stride_a, stride_b, stride_c;
  uint32_t align_a, align_b, align_c, pad2_;
  uint64_t workspace;
  // Epilogue (matmul_epilogue): cublasLtEpilogue_t (0: none), whether C is
  // a residual, and the bias and auxiliary pointers (the heuristic reads
  // their alignment) with the auxiliary output's leading dimension.
  int32_t epilogue, residual;
  uint64_t bias, aux;
  int64_t aux_ld;
  // matmul_acc: C = D in fp32 (the accumulator), beta 1.
  int32_t out_f32, pad3_;
};

struct Plan {
  bool valid = false;
  Key key;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo;
  size_t ws_needed = 0;
  bool zero_stride_failed = false; // strided batch with a stride-0 operand had no algorithm
};

std::vector<Plan> &plans() {
  static std::vector<Plan> v;
  return v;
}

struct Workspace {
  void *p = nullptr;
  size_t bytes = 0;
};
Workspace &workspace() {
  static Workspace w;
  return w;
}

std::string &error_text() {
  static std::string s;
  return s;
}

cublasLtHandle_t handle(cublasStatus_t *status) {
  static cublasLtHandle_t h = nullptr;
  static cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  static bool tried = false;
  if (!tried) {
    tried = true;
    st = cublasLtCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS)
      h = nullptr;
  }
  *status = st;
  return h;
}

const char *status_name(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

void set_error(cublasStatus_t s, int id, const char *what, int64_t M, int64_t N, int64_t K, int64_t batch) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s (%d) in matmul #%d%s%s (M=%lld, N=%lld, K=%lld, batch=%lld)", status_name(s),
                static_cast<int>(s), id, what[0] ? ": " : "", what, static_cast<long long>(M),
                static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(batch));
  error_text() = buf;
}

// Largest power of two (<= 256) dividing the address.
uint32_t align_of(const void *p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p) | uintptr_t(256);
  return static_cast<uint32_t>(v & (~v + 1));
}
uint32_t align_of_bytes(int64_t bytes) {
  const uint64_t v = static_cast<uint64_t>(bytes) | uint64_t(256);
  return static_cast<uint32_t>(v & (~v + 1));
}
uint32_t min_u(uint32_t a, uint32_t b) { return a < b ? a : b; }

void destroy(Plan &p) {
  if (p.la)
    cublasLtMatrixLayoutDestroy(p.la);
  if (p.lb)
    cublasLtMatrixLayoutDestroy(p.lb);
  if (p.lc)
    cublasLtMatrixLayoutDestroy(p.lc);
  if (p.op)
    cublasLtMatmulDescDestroy(p.op);
  p.la = p.lb = p.lc = nullptr;
  p.op = nullptr;
  p.valid = false;
}

cublasStatus_t make_layout(cublasLtMatrixLayout_t *l, int64_t rows, int64_t cols, int64_t ld, int32_t batch,
                                  int64_t stride, cudaDataType type = CUDA_R_16F) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld);
  if (s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (batch > 1) {
    s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
    if (s != CUBLAS_STATUS_SUCCESS)
      return s;
    s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
  }
  return s;
}

// (Re)creates p for key k. On failure p is left invalid.
cublasStatus_t build(Plan &p, const Key &k, cublasLtHandle_t h) {
  destroy(p);
  std::memcpy(&p.key, &k, sizeof(Key));
  cublasStatus_t s = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS)
    return s;
  const cublasOperation_t ta = static_cast<cublasOperation_t>(k.op_a), tb = static_cast<cublasOperation_t>(k.op_b);
  if ((s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta))) !=
      CUBLAS_STATUS_SUCCESS)
    return s;
  if ((s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb))) !=
      CUBLAS_STATUS_SUCCESS)
    return s;
  if (k.epilogue) {
    const cublasLtEpilogue_t epi = static_cast<cublasLtEpilogue_t>(k.epilogue);
    const void *bias = reinterpret_cast<const void *>(k.bias);
    if ((s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi))) !=
            CUBLAS_STATUS_SUCCESS ||
        (s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias))) !=
            CUBLAS_STATUS_SUCCESS)
      return s;
    if (k.aux) {
      void *aux = reinterpret_cast<void *>(k.aux);
      if ((s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                              sizeof(aux))) != CUBLAS_STATUS_SUCCESS ||
          (s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k.aux_ld,
                                              sizeof(k.aux_ld))) != CUBLAS_STATUS_SUCCESS)
        return s;
    }
  }
  if ((s = make_layout(&p.la, k.rows_a, k.cols_a, k.ld_a, k.batch, k.stride_a)) != CUBLAS_STATUS_SUCCESS)
    return s;
  if ((s = make_layout(&p.lb, k.rows_b, k.cols_b, k.ld_b, k.batch, k.stride_b)) != CUBLAS_STATUS_SUCCESS)
    return s;
  if ((s = make_layout(&p.lc, k.m, k.n, k.ld_c, k.batch, k.stride_c, k.out_f32 ? CUDA_R_32F : CUDA_R_16F)) !=
      CUBLAS_STATUS_SUCCESS)
    return s;
  cublasLtMatmulPreference_t pref = nullptr;
  if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
    return s;
  const uint64_t ws = k.workspace;
  s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k.align_a,
                                             sizeof(uint32_t));
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k.align_b,
                                             sizeof(uint32_t));
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k.align_c,
                                             sizeof(uint32_t));
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k.align_c,
                                             sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t res;
  std::memset(&res, 0, sizeof(res));
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(h, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  p.algo = res.algo;
  p.ws_needed = res.workspaceSize;
  p.valid = true;
  return CUBLAS_STATUS_SUCCESS;
}

/// The key's operation and the layout of cuBLAS's A (our b) and C, common
/// to every case: out [.., M, N] = op(a) op(b) is out^T = op(b)^T op(a)^T.
Key base_key(int64_t N, int64_t K, bool trans_a, bool trans_b) {
  Key k;
  std::memset(&k, 0, sizeof(k));
  k.m = N;
  k.k = K;
  k.op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  k.rows_a = trans_b ? K : N;
  k.cols_a = trans_b ? N : K;
  k.ld_a = k.rows_a;
  k.op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  k.ld_c = N;
  k.workspace = workspace().bytes;
  k.batch = 1;
  return k;
}

/// Case (1): b unbatched and a untransposed, a's batch folded into its
/// rows: one GEMM with n = Mf (a's rows, all batches).
void fold_rows(Key &k, int64_t Mf, int64_t K, const void *a, const void *b, const void *out) {
  k.n = Mf;
  k.rows_b = K;
  k.cols_b = Mf;
  k.ld_b = K;
  k.align_a = align_of(b);
  k.align_b = align_of(a);
  k.align_c = align_of(out);
}

/// The cuBLASLt handle (in `h`) and call site `id`'s plan; null, with the
/// error set and its status in `st`, when there is no handle.
Plan *plan_slot(int id, cublasLtHandle_t &h, cublasStatus_t &st, int64_t M, int64_t N, int64_t K,
                       int64_t batch) {
  h = handle(&st);
  if (!h) {
    set_error(st, id, "cublasLtCreate", M, N, K, batch);
    return nullptr;
  }
  std::vector<Plan> &ps = plans();
  if (static_cast<size_t>(id) >= ps.size())
    ps.resize(static_cast<size_t>(id) + 1);
  return &ps[static_cast<size_t>(id)];
}

cublasStatus_t get_plan(Plan &p, const Key &k, cublasLtHandle_t h) {
  if (p.valid && std::memcmp(&p.key, &k, sizeof(Key)) == 0)
    return CUBLAS_STATUS_SUCCESS;
  return build(p, k, h);
}

/// D = A B (+ C when C is given: beta 1), in cuBLAS's operand order.
cublasStatus_t launch(Plan &p, cublasLtHandle_t h, const __half *A, const __half *B, __half *D,
                             const __half *C = nullptr) {
  const float alpha = 1.0f, beta = C ? 1.0f : 0.0f;
  Workspace &w = workspace();
  return cublasLtMatmul(h, p.op, &alpha, A, p.la, B, p.lb, &beta, C ? C : D, p.lc, D, p.lc, &p.algo,
                        p.ws_needed ? w.p : nullptr, p.ws_needed, stream());
}

/// D += A B with D fp32 (C = D, beta 1), in cuBLAS's operand order.
cublasStatus_t launch_acc(Plan &p, cublasLtHandle_t h, const __half *A, const __half *B, float *D) {
  const float alpha = 1.0f, beta = 1.0f;
  Workspace &w = workspace();
  return cublasLtMatmul(h, p.op, &alpha, A, p.la, B, p.lb, &beta, D, p.lc, D, p.lc, &p.algo,
                        p.ws_needed ? w.p : nullptr, p.ws_needed, stream());
}

} // namespace
} // namespace gemm_detail

/// The workspace cuBLASLt may use (the arena provides it; default none).
/// Plans made with another size are re-planned on their next call.
void set_workspace(void *p, size_t bytes) {
  gemm_detail::workspace().p = p;
  gemm_detail::workspace().bytes = p ? bytes : 0;
}

/// Message for the last nonzero status matmul returned.
const char *last_error() { return gemm_detail::error_text().c_str(); }


/// acc [M, N] (fp32, row-major) += op(a) · op(b) for rank-2 fp16 a and b
/// (trans_a: a stored [K, M]; trans_b: b stored [N, K]): one cuBLASLt call
/// with the accumulator as C and D in fp32 and beta 1, so that a weight's
/// gradient goes into its fp32 accumulator without an fp16 copy in between
/// (nor its rounding, nor its overflow). Returns 0 or a cublasStatus_t.
int matmul_acc(int id, float *acc, const __half *a, Shape as, bool trans_a, const __half *b, Shape bs,
                      bool trans_b) {
  using namespace gemm_detail;
  if (id < 0 || as.rank != 2 || bs.rank != 2) {
    set_error(CUBLAS_STATUS_INVALID_VALUE, id, "matmul_acc takes rank-2 operands", 0, 0, 0, 0);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int64_t M = trans_a ? as.dims[1] : as.dims[0], K = trans_a ? as.dims[0] : as.dims[1];
  const int64_t Kb = trans_b ? bs.dims[1] : bs.dims[0], N = trans_b ? bs.dims[0] : bs.dims[1];
  if (K != Kb) {
    set_error(CUBLAS_STATUS_INVALID_VALUE, id, "inner dimensions differ", M, N, K, 0);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (M == 0 || N == 0 || K == 0) // adds nothing
    return 0;
  cublasStatus_t st;
  cublasLtHandle_t h;
  Plan *slot = plan_slot(id, h, st, M, N, K, 1);
  if (!slot)
    return st;
  Key k = base_key(N, K, trans_a, trans_b);
  k.n = M;
  k.rows_b = trans_a ? M : K;
  k.cols_b = trans_a ? K : M;
  k.ld_b = k.rows_b;
  k.align_a = align_of(b);
  k.align_b = align_of(a);
  k.align_c = align_of(acc);
  k.out_f32 = 1;
  if ((st = get_plan(*slot, k, h)) == CUBLAS_STATUS_SUCCESS)
    st = launch_acc(*slot, h, b, a, acc);
  if (st != CUBLAS_STATUS_SUCCESS)
    set_error(st, id, "(fp32 accumulator)", M, N, K, 1);
  return st;
}

int matmul(int id, __half *out, const __half *a, Shape as, bool trans_a, const __half *b, Shape bs,
                  bool trans_b) {
  using namespace gemm_detail;
  if (id < 0 || as.rank < 1 || bs.rank < 1 || as.rank > 8 || bs.rank > 8) {
    set_error(CUBLAS_STATUS_INVALID_VALUE, id, "bad id or rank", 0, 0, 0, 0);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool a1 = as.rank == 1, b1 = bs.rank == 1;
  if (a1)
    trans_a = false; // a used as [1, K]
  if (b1)
    trans_b = true; // b stored as [1, K] (= [N, K]), used as [K, 1]
  const int64_t a_r = a1 ? 1 : as.dims[as.rank - 2], a_c = as.dims[as.rank - 1];
  const int64_t b_r = b1 ? 1 : bs.dims[bs.rank - 2], b_c = bs.dims[bs.rank - 1];
  const int64_t M = trans_a ? a_c : a_r, K = trans_a ? a_r : a_c;
  const int64_t Kb = trans_b ? b_c : b_r, N = trans_b ? b_r : b_c;
  if (K != Kb) {
    set_error(CUBLAS_STATUS_INVALID_VALUE, id, "inner dimensions differ", M, N, K, 0);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // Batch dims, right-aligned and padded with 1s to the broadcast rank.
  const int ar = a1 ? 0 : as.rank - 2, br = b1 ? 0 : bs.rank - 2;
  const int obr = ar > br ? ar : br;
  int64_t ad[8], bd[8], od[8];
  int64_t na = 1, nb = 1, nbatch = 1;
  for (int i = 0; i < obr; ++i) {
    const int ia = i - (obr - ar), ib = i - (obr - br);
    ad[i] = ia >= 0 ? as.dims[ia] : 1;
    bd[i] = ib >= 0 ? bs.dims[ib] : 1;
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1) {
      set_error(CUBLAS_STATUS_INVALID_VALUE, id, "batch dimensions do not broadcast", M, N, K, 0);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    od[i] = ad[i] == 1 ? bd[i] : ad[i];
    na *= ad[i];
    nb *= bd[i];
    nbatch *= od[i];
  }
  if (nbatch == 0 || M == 0 || N == 0)
    return 0;
  if (K == 0) { // empty sum: zeros
    cudaMemsetAsync(out, 0, static_cast<size_t>(nbatch * M * N) * sizeof(__half), stream());
    return 0;
  }
  cublasStatus_t st;
  cublasLtHandle_t h;
  Plan *slot = plan_slot(id, h, st, M, N, K, nbatch);
  if (!slot)
    return st;
  Plan &plan = *slot;

  Key k = base_key(N, K, trans_a, trans_b);

  // (1) b unbatched and a not transposed: fold a's batch into M.
  if (nb == 1 && !trans_a) {
    const int64_t Mf = na * M; // == nbatch * M
    fold_rows(k, Mf, K, a, b, out);
    if ((st = get_plan(plan, k, h)) == CUBLAS_STATUS_SUCCESS)
      st = launch(plan, h, b, a, out);
    if (st != CUBLAS_STATUS_SUCCESS)
      set_error(st, id, "", Mf, N, K, 1);
    return st;
  }

  k.n = M;
  k.rows_b = trans_a ? M : K;
  k.cols_b = trans_a ? K : M;
  k.ld_b = k.rows_b;
  const int64_t sa = M * K, sb = K * N, sc = M * N; // elements per matrix of a, b, out

  // (2) / (3) one strided-batched call: each operand's batch is the full
  // broadcast batch or all ones (stride 0).
  bool a_full = true, b_full = true;
  for (int i = 0; i < obr; ++i) {
    a_full = a_full && ad[i] == od[i];
    b_full = b_full && bd[i] == od[i];
  }
  const bool a_ok = a_full || na == 1, b_ok = b_full || nb == 1;
  const bool zero_stride = (na == 1 || nb == 1) && nbatch > 1;
  if (a_ok && b_ok && nbatch <= 0x7fffffff && !(zero_stride && plan.zero_stride_failed)) {
    k.batch = static_cast<int32_t>(nbatch);
    k.stride_a = nb == 1 ? 0 : sb;
    k.stride_b = na == 1 ? 0 : sa;
    k.stride_c = sc;
    k.align_a = min_u(align_of(b), nb == 1 ? 256u : align_of_bytes(sb * 2));
    k.align_b = min_u(align_of(a), na == 1 ? 256u : align_of_bytes(sa * 2));
    k.align_c = min_u(align_of(out), align_of_bytes(sc * 2));
    st = get_plan(plan, k, h);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = launch(plan, h, b, a, out);
      if (st != CUBLAS_STATUS_SUCCESS)
        set_error(st, id, "", M, N, K, nbatch);
      return st;
    }
    if (!(zero_stride && st == CUBLAS_STATUS_NOT_SUPPORTED)) {
      set_error(st, id, "", M, N, K, nbatch);
      return st;
    }
    plan.zero_stride_failed = true; // fall through to the loop, and go there directly next time
  }

  // (4) one GEMM per element of the broadcast batch.
  int64_t ast[8], bst[8];
  {
    int64_t acc_a = sa, acc_b = sb;
    for (int i = obr - 1; i >= 0; --i) {
      ast[i] = ad[i] == 1 ? 0 : acc_a;
      bst[i] = bd[i] == 1 ? 0 : acc_b;
      acc_a *= ad[i];
      acc_b *= bd[i];
    }
  }
  uintptr_t or_a = reinterpret_cast<uintptr_t>(a), or_b = reinterpret_cast<uintptr_t>(b);
  for (int i = 0; i < obr; ++i) {
    if (od[i] > 1) {
      or_a |= static_cast<uintptr_t>(ast[i] * 2);
      or_b |= static_cast<uintptr_t>(bst[i] * 2);
    }
  }
  k.batch = 1;
  k.stride_a = k.stride_b = k.stride_c = 0;
  k.align_a = align_of(reinterpret_cast<const void *>(or_b));
  k.align_b = align_of(reinterpret_cast<const void *>(or_a));
  k.align_c = min_u(align_of(out), align_of_bytes(sc * 2));
  const bool keep_flag = plan.zero_stride_failed;
  st = get_plan(plan, k, h);
  plan.zero_stride_failed = keep_flag;
  if (st != CUBLAS_STATUS_SUCCESS) {
    set_error(st, id, "", M, N, K, nbatch);
    return st;
  }
  int64_t idx[8] = {0};
  for (int64_t t = 0; t < nbatch; ++t) {
    int64_t oa = 0, ob = 0;
    for (int i = 0; i < obr; ++i) {
      oa += idx[i] * ast[i];
      ob += idx[i] * bst[i];
    }
    st = launch(plan, h, b + ob, a + oa, out + t * sc);
    if (st != CUBLAS_STATUS_SUCCESS) {
      set_error(st, id, "", M, N, K, nbatch);
      return st;
    }
    for (int i = obr - 1; i >= 0; --i) {
      if (++idx[i] < od[i])
        break;
      idx[i] = 0;
    }
  }
  return 0;
}

/// out = act(a · op(b) + bias [+ residual]) as one cuBLASLt matmul with an
/// epilogue: b is an unbatched [K, N] (trans_b: stored [N, K]) matrix, a is
/// [..., M, K] (its batch folds into M, so trans_a must be false), bias has
/// N elements (added along each row), residual (optional) is out's shape.
/// With gelu, act is the tanh GELU and aux (optional, out's shape) receives
/// its input a · op(b) + bias; N must then be a multiple of 8. Without
/// gelu, aux must be null. Returns 0 or a cublasStatus_t.
int matmul_epilogue(int id, __half *out, const __half *a, Shape as, bool trans_a, const __half *b, Shape bs,
                           bool trans_b, const __half *bias, const __half *residual, __half *aux, bool gelu) {
  using namespace gemm_detail;
  if (id < 0 || as.rank < 2 || as.rank > 8 || bs.rank != 2 || trans_a || !bias || (aux && !gelu)) {
    set_error(CUBLAS_STATUS_INVALID_VALUE, id, "an epilogue needs an unbatched b, an untransposed a and a bias",
              0, 0, 0, 0);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int64_t K = as.dims[as.rank - 1];
  int64_t M = 1;
  for (int i = 0; i < as.rank - 1; ++i)
    M *= as.dims[i];
  const int64_t Kb = trans_b ? bs.dims[1] : bs.dims[0], N = trans_b ? bs.dims[0] : bs.dims[1];
  if (K != Kb || (aux && N % 8 != 0)) {
    set_error(CUBLAS_STATUS_INVALID_VALUE, id, K != Kb ? "inner dimensions differ" : "aux rows not a multiple of 8",
              M, N, K, 1);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (M == 0 || N == 0)
    return 0;
  cublasStatus_t st;
  cublasLtHandle_t h;
  Plan *slot = plan_slot(id, h, st, M, N, K, 1);
  if (!slot)
    return st;
  Plan &plan = *slot;
  // As matmul's case (1), column-major: out^T [N, M] = op(b)^T [N, K] a^T [K, M].
  Key k = base_key(N, K, false, trans_b);
  fold_rows(k, M, K, a, b, out);
  if (residual)
    k.align_c = min_u(k.align_c, align_of(residual));
  k.epilogue = gelu ? (aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS) : CUBLASLT_EPILOGUE_BIAS;
  k.residual = residual ? 1 : 0;
  k.bias = reinterpret_cast<uint64_t>(bias);
  k.aux = reinterpret_cast<uint64_t>(aux);
  k.aux_ld = aux ? N : 0;
  if ((st = get_plan(plan, k, h)) == CUBLAS_STATUS_SUCCESS)
    st = launch(plan, h, b, a, out, residual);
  if (st != CUBLAS_STATUS_SUCCESS)
    set_error(st, id, "with an epilogue", M, N, K, 1);
  return st;
}

} // namespace tcc::cuda
