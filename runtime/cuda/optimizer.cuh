//===- optimizer.cuh - the optimizers' multi-tensor apply --------*- CUDA -*-===//
//
// AdamW and SGD over all parameters in one launch, and the global gradient
// norm, for the fixed half of a CUDA step (step_host.cu). The semantics are
// runtime/cpu/kernels.h's adamw_update and sgd_update.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_OPTIMIZER_CUH
#define TCC_RUNTIME_CUDA_OPTIMIZER_CUH

#include "common.cuh"

namespace tcc::cuda {

//===----------------------------------------------------------------------===//
// Optimizers: multi-tensor apply (one launch for all parameters)
//===----------------------------------------------------------------------===//

/// One parameter of the optimizer step. p: fp32 master weights; g: fp32
/// accumulated gradient (zeroed by the update); s0 / s1: AdamW exp_avg /
/// exp_avg_sq (SGD: s0 = momentum buffer, s1 unused; may be nullptr when
/// unused); p16: fp16 working copy refreshed from p after the update
/// (nullptr: none).
struct ApplyTensor {
  float *p, *g, *s0, *s1;
  __half *p16;
  int64_t n;
  float weight_decay;
};

/// Elements per chunk: one chunk is handled by one block.
constexpr int64_t kApplyChunk = 2048;

/// Copies the table to device memory it cudaMallocs (synchronous; setup
/// only). Returns nullptr on failure (or n <= 0). Free with cudaFree.
inline ApplyTensor *upload_table(const ApplyTensor *rows, int n) {
  if (n <= 0)
    return nullptr;
  void *d = nullptr;
  if (cudaMalloc(&d, sizeof(ApplyTensor) * static_cast<size_t>(n)) != cudaSuccess)
    return nullptr;
  if (cudaMemcpy(d, rows, sizeof(ApplyTensor) * static_cast<size_t>(n), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return nullptr;
  }
  return static_cast<ApplyTensor *>(d);
}

/// Chunk prefix of the table: n + 1 int64 in device memory it cudaMallocs
/// (synchronous; setup only); entry t = index of tensor t's first chunk of
/// kApplyChunk elements, entry n = the total number of chunks, which is also
/// stored in *nchunks. Returns nullptr on failure. Free with cudaFree.
inline int64_t *upload_chunk_starts(const ApplyTensor *rows, int n, int64_t *nchunks) {
  if (n < 0)
    return nullptr;
  std::vector<int64_t> cs(static_cast<size_t>(n) + 1);
  int64_t c = 0;
  for (int t = 0; t < n; ++t) {
    cs[static_cast<size_t>(t)] = c;
    c += rows[t].n > 0 ? (rows[t].n + kApplyChunk - 1) / kApplyChunk : 0;
  }
  cs[static_cast<size_t>(n)] = c;
  if (nchunks)
    *nchunks = c;
  void *d = nullptr;
  if (cudaMalloc(&d, sizeof(int64_t) * cs.size()) != cudaSuccess)
    return nullptr;
  if (cudaMemcpy(d, cs.data(), sizeof(int64_t) * cs.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(d);
    return nullptr;
  }
  return static_cast<int64_t *>(d);
}

/// Owns a device copy of a table and its chunk prefix.
class MultiTensor {
public:
  MultiTensor() = default;
  MultiTensor(const MultiTensor &) = delete;
  MultiTensor &operator=(const MultiTensor &) = delete;
  ~MultiTensor() { reset(); }
  /// Uploads rows (synchronous). Returns false on a CUDA error.
  bool upload(const ApplyTensor *rows, int n) {
    reset();
    ntensors_ = n;
    if (n <= 0)
      return true;
    table_ = upload_table(rows, n);
    chunk_start_ = upload_chunk_starts(rows, n, &nchunks_);
    return table_ != nullptr && chunk_start_ != nullptr;
  }
  void reset() {
    if (table_)
      cudaFree(table_);
    if (chunk_start_)
      cudaFree(chunk_start_);
    table_ = nullptr;
    chunk_start_ = nullptr;
    ntensors_ = 0;
    nchunks_ = 0;
  }
  const ApplyTensor *table() const { return table_; }
  const int64_t *chunk_start() const { return chunk_start_; }
  int ntensors() const { return ntensors_; }
  int64_t nchunks() const { return nchunks_; }

private:
  ApplyTensor *table_ = nullptr;
  int64_t *chunk_start_ = nullptr;
  int ntensors_ = 0;
  int64_t nchunks_ = 0;
};

namespace detail {

// The tensor that chunk c belongs to: the largest t with cs[t] <= c (tensors
// without elements have cs[t] == cs[t + 1] and are skipped).
__device__ __forceinline__ int find_tensor(const int64_t *cs, int ntensors, int64_t c) {
  int lo = 0, hi = ntensors - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cs[mid] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

static __global__ void sum_squares_kernel(const ApplyTensor *table, const int64_t *cs, int ntensors, int64_t nchunks,
                                   double *out) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int t = find_tensor(cs, ntensors, c);
    const float *g = table[t].g;
    const int64_t n = table[t].n;
    const int64_t begin = (c - cs[t]) * kApplyChunk;
    const int64_t end = begin + kApplyChunk < n ? begin + kApplyChunk : n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double v = static_cast<double>(g[i]);
      s += v * v;
    }
  }
  s = block_allreduce(s, SumOp(), sh);
  if (threadIdx.x == 0 && s != 0.0)
    atomicAdd(out, s);
}

struct AdamArgs {
  double lr;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size; // lr / (1 - beta1^step)
  float bc2_sqrt;  // sqrt(1 - beta2^step)
  float grad_mult;
};

static __global__ void adamw_kernel(const ApplyTensor *table, const int64_t *cs, int ntensors, int64_t nchunks, AdamArgs a) {
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int t = find_tensor(cs, ntensors, c);
    const ApplyTensor row = table[t];
    const int64_t begin = (c - cs[t]) * kApplyChunk;
    const int64_t end = begin + kApplyChunk < row.n ? begin + kApplyChunk : row.n;
    const float decay = static_cast<float>(1.0 - a.lr * static_cast<double>(row.weight_decay));
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float gi = row.g[i] * a.grad_mult;
      float p = row.p[i] * decay;
      const float m = row.s0[i] * a.beta1 + gi * a.one_minus_beta1;
      const float v = row.s1[i] * a.beta2 + gi * gi * a.one_minus_beta2;
      const float denom = sqrtf(v) / a.bc2_sqrt + a.eps;
      p = p - a.step_size * (m / denom);
      row.p[i] = p;
      row.s0[i] = m;
      row.s1[i] = v;
      if (row.p16)
        row.p16[i] = __float2half_rn(p);
      row.g[i] = 0.0f;
    }
  }
}

struct SgdArgs {
  float neg_lr, momentum, grad_mult;
  int nesterov;
  int first_step;
};

static __global__ void sgd_kernel(const ApplyTensor *table, const int64_t *cs, int ntensors, int64_t nchunks, SgdArgs a) {
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int t = find_tensor(cs, ntensors, c);
    const ApplyTensor row = table[t];
    const int64_t begin = (c - cs[t]) * kApplyChunk;
    const int64_t end = begin + kApplyChunk < row.n ? begin + kApplyChunk : row.n;
    const float wd = row.weight_decay;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float p = row.p[i];
      float d = row.g[i] * a.grad_mult;
      if (wd != 0.0f)
        d = d + p * wd;
      if (a.momentum != 0.0f) {
        const float b = a.first_step ? d : row.s0[i] * a.momentum + d;
        row.s0[i] = b;
        d = a.nesterov ? d + b * a.momentum : b;
      }
      p = p + d * a.neg_lr;
      row.p[i] = p;
      if (row.p16)
        row.p16[i] = __float2half_rn(p);
      row.g[i] = 0.0f;
    }
  }
}

inline unsigned apply_grid(int64_t nchunks) {
  return static_cast<unsigned>(nchunks < 4096 ? nchunks : 4096);
}

} // namespace detail

/// out_dev[0] += sum over all tensors of g[i]^2 (in double). The caller zeroes
/// out_dev[0] first (or use sum_squares_all).
inline void sum_squares_multi(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors,
                              int64_t nchunks, double *out_dev) {
  if (ntensors <= 0 || nchunks <= 0)
    return;
  TCC_LAUNCH(detail::apply_grid(nchunks), detail::kThreads, 0, stream(), detail::sum_squares_kernel)(
      table_dev, chunk_start_dev, ntensors, nchunks, out_dev);
}

/// Synchronous: zeroes out_dev[0] (a device double), runs sum_squares_multi,
/// waits for stream() and returns the sum (NaN on a CUDA error).
inline double sum_squares_all(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors,
                              int64_t nchunks, double *out_dev) {
  if (cudaMemsetAsync(out_dev, 0, sizeof(double), stream()) != cudaSuccess)
    return std::numeric_limits<double>::quiet_NaN();
  sum_squares_multi(table_dev, chunk_start_dev, ntensors, nchunks, out_dev);
  double v = 0.0;
  if (cudaMemcpyAsync(&v, out_dev, sizeof(double), cudaMemcpyDeviceToHost, stream()) != cudaSuccess ||
      cudaStreamSynchronize(stream()) != cudaSuccess)
    return std::numeric_limits<double>::quiet_NaN();
  return v;
}

/// torch.optim.AdamW (amsgrad off), PyTorch's order of operations as the CPU
/// adamw_update, on every tensor of the table: g *= grad_mult; p *= 1 - lr*wd;
/// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; p -= lr/bc1 * m / (sqrt(v) /
/// sqrt(bc2) + eps); then p16 = half(p) if p16, and g = 0. Hyperparameters
/// are taken in double (floats convert implicitly); the constants are formed
/// in double on the host and rounded to float, as the CPU version does.
inline void adamw_multi(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors, int64_t nchunks,
                        double lr, double beta1, double beta2, double eps, int64_t step, double grad_mult) {
  if (ntensors <= 0 || nchunks <= 0)
    return;
  detail::AdamArgs a;
  a.lr = lr;
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  a.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  a.eps = static_cast<float>(eps);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  a.step_size = static_cast<float>(lr / bc1);
  a.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  a.grad_mult = static_cast<float>(grad_mult);
  TCC_LAUNCH(detail::apply_grid(nchunks), detail::kThreads, 0, stream(), detail::adamw_kernel)(table_dev, chunk_start_dev,
                                                                                        ntensors, nchunks, a);
}

/// torch.optim.SGD (dampening 0) as the CPU sgd_update: g *= grad_mult; L2
/// weight decay (per tensor) added to the gradient; momentum buffer (s0) = d
/// on step 1; Nesterov optional; then p16 refresh and g = 0.
inline void sgd_multi(const ApplyTensor *table_dev, const int64_t *chunk_start_dev, int ntensors, int64_t nchunks,
                      double lr, double momentum, bool nesterov, int64_t step, double grad_mult) {
  if (ntensors <= 0 || nchunks <= 0)
    return;
  detail::SgdArgs a;
  a.neg_lr = static_cast<float>(-lr);
  a.momentum = static_cast<float>(momentum);
  a.grad_mult = static_cast<float>(grad_mult);
  a.nesterov = nesterov ? 1 : 0;
  a.first_step = step == 1 ? 1 : 0;
  TCC_LAUNCH(detail::apply_grid(nchunks), detail::kThreads, 0, stream(), detail::sgd_kernel)(table_dev, chunk_start_dev,
                                                                                      ntensors, nchunks, a);
}

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_OPTIMIZER_CUH
