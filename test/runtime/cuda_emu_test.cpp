// Unit tests of tcc's CUDA emulation itself (runtime/cuda/emu): the GPU
// semantics the emulated CUDA steps rely on, and the errors it must report
// instead of hiding. Run with TCC_CUDA_EMU_STREAMS=deferred, it checks the
// deferred streams instead (and runtime/cuda/staging.cuh on them). Prints
// "N passed, M failed".
#include "cuda/kernels.cuh"
#include "cuda/staging.cuh"
#include "cublasLt.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static int g_pass = 0, g_fail = 0;
static void check(bool ok, const char *what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
  (ok ? g_pass : g_fail)++;
}

// Each warp sums its lanes' values with xor shuffles; lane 0 writes.
__global__ void warp_sum(const float *in, float *out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0)
    out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = v;
}

// Lanes 16..31 exit at once; lanes 0..15 then read from them: undefined on
// a GPU, so the emulation fails the launch. (A lane that exits after a
// shuffle, as in warp_sum, may be read.)
__global__ void shuffle_from_exited(float *out) {
  if (threadIdx.x >= 16)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 16);
}

// Thread t writes shared[t]; after the barrier it reads its neighbour's.
__global__ void rotate(int *out) {
  __shared__ int sh[256];
  sh[threadIdx.x] = static_cast<int>(threadIdx.x + 1000 * blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
}

// Threads that exit early do not hold up the barrier of the others.
__global__ void early_exit(int *out) {
  if (threadIdx.x >= 40)
    return;
  __shared__ int sh[64];
  sh[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = sh[39 - threadIdx.x];
}

// Lane 0 waits at the block barrier while lanes 1..31 of its warp wait at a
// shuffle, which needs lane 0: a deadlock on a GPU.
__global__ void divergent(int *out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

// A 16-byte load at `p` (the vector path of the generated kernels).
__global__ void load_vector(const __half *p, float *out) {
  float f[8];
  tcc::cuda::load8(p, f);
  out[0] = f[0];
}

__global__ void add_one(float *p, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    p[i] += 1.0f;
}

__global__ void set_value(float *p, float v) { *p = v; }
__global__ void last_block(int *out) {
  if (threadIdx.x == 0)
    *out = static_cast<int>(blockIdx.x);
}
__global__ void copy_value(const float *from, float *to) { *to = *from; }

/// TCC_CUDA_EMU_STREAMS=deferred: a stream's work runs only when something
/// waits for it, so missing synchronisation shows as stale data; with
/// =deferred-first (`first_only`), only the first stream (`compute`) waits and
/// the other (`copy`) runs at once, so a copy that overwrites what `compute`
/// has yet to read shows.
static int deferred_streams(bool first_only) {
  cudaStream_t copy = nullptr, compute = nullptr;
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
  float *dev = nullptr, *out = nullptr, *pinned = nullptr;
  cudaMalloc(&dev, sizeof(float));
  cudaMalloc(&out, sizeof(float));
  cudaMallocHost(reinterpret_cast<void **>(&pinned), sizeof(float));
  cudaMemset(dev, 0, sizeof(float));
  cudaMemset(out, 0, sizeof(float));

  TCC_LAUNCH(1, 1, 0, compute, set_value)(out, 5.0f);
  const bool pending = *out == 0.0f;
  cudaStreamSynchronize(compute);
  check(pending && *out == 5.0f, "deferred: a stream's kernel runs when the host synchronises with it");

  cudaEvent_t uploaded = nullptr;
  cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming);
  if (first_only) {
    // compute reads dev later; without a wait the copy stream overwrites it
    // first; waiting for an event recorded after the read, it does not.
    cudaEvent_t read = nullptr;
    cudaEventCreateWithFlags(&read, cudaEventDisableTiming);
    *pinned = 1.0f;
    cudaMemcpy(dev, pinned, sizeof(float), cudaMemcpyHostToDevice);
    TCC_LAUNCH(1, 1, 0, compute, copy_value)(dev, out);
    *pinned = 2.0f;
    cudaMemcpyAsync(dev, pinned, sizeof(float), cudaMemcpyHostToDevice, copy);
    cudaStreamSynchronize(compute);
    const bool overwritten = *out == 2.0f;
    *pinned = 1.0f;
    cudaMemcpy(dev, pinned, sizeof(float), cudaMemcpyHostToDevice);
    TCC_LAUNCH(1, 1, 0, compute, copy_value)(dev, out);
    cudaEventRecord(read, compute);
    *pinned = 3.0f;
    cudaStreamWaitEvent(copy, read, 0);
    cudaMemcpyAsync(dev, pinned, sizeof(float), cudaMemcpyHostToDevice, copy);
    cudaStreamSynchronize(compute);
    cudaStreamSynchronize(copy);
    check(overwritten && *out == 1.0f && *dev == 3.0f,
          "deferred-first: another stream's copy runs at once, after the first stream's read only "
          "when it waits for it");
    cudaEventDestroy(read);
  } else {
  // Without a wait, the compute stream reads the buffer before the copy
  // stream's upload has run; with cudaStreamWaitEvent, after.
  *pinned = 7.0f;
  cudaMemcpyAsync(dev, pinned, sizeof(float), cudaMemcpyHostToDevice, copy);
  cudaEventRecord(uploaded, copy);
  TCC_LAUNCH(1, 1, 0, compute, copy_value)(dev, out);
  cudaStreamSynchronize(compute);
  const bool stale = *out == 0.0f;
  cudaStreamSynchronize(copy);
  *pinned = 8.0f;
  cudaMemcpyAsync(dev, pinned, sizeof(float), cudaMemcpyHostToDevice, copy);
  cudaEventRecord(uploaded, copy);
  cudaStreamWaitEvent(compute, uploaded, 0);
  TCC_LAUNCH(1, 1, 0, compute, copy_value)(dev, out);
  cudaStreamSynchronize(compute);
  check(stale && *out == 8.0f, "deferred: another stream's upload is seen only after cudaStreamWaitEvent");

  // A copy from pinned memory reads it when it runs; from pageable memory,
  // when it is issued; into pageable memory, it is done on return.
  *pinned = 1.0f;
  cudaMemcpyAsync(dev, pinned, sizeof(float), cudaMemcpyHostToDevice, copy);
  *pinned = 2.0f;
  cudaStreamSynchronize(copy);
  const bool pinned_late = *dev == 2.0f;
  float pageable = 3.0f;
  cudaMemcpyAsync(dev, &pageable, sizeof(float), cudaMemcpyHostToDevice, copy);
  pageable = 4.0f;
  cudaStreamSynchronize(copy);
  const bool pageable_early = *dev == 3.0f;
  TCC_LAUNCH(1, 1, 0, copy, set_value)(dev, 9.0f);
  cudaMemcpyAsync(&pageable, dev, sizeof(float), cudaMemcpyDeviceToHost, copy);
  check(pinned_late && pageable_early && pageable == 9.0f,
        "deferred: pinned copies read their source late, pageable ones at the call; a copy into "
        "pageable memory is done when it returns");
  }

  // staging.cuh: micro-batch k+1 staged while k's work is queued; each
  // micro-step sees its own inputs, and the pinned buffer may be refilled at
  // once.
  tcc_tensor_desc inputs[2] = {};
  inputs[0].bytes = 8;
  inputs[0].offset = 64;
  inputs[1].bytes = 4;
  inputs[1].offset = 0;
  char *arena = nullptr;
  cudaMalloc(&arena, 128);
  float *seen = nullptr;
  cudaMalloc(&seen, 3 * sizeof(float));
  InputStaging staging;
  bool ok = staging.open(12) == cudaSuccess;
  float batch[3];
  for (int k = 0; k < 3 && ok; ++k) {
    batch[0] = 10.0f * k;
    batch[1] = 10.0f * k + 1;
    batch[2] = 10.0f * k + 2;
    ok = staging.stage(batch) == cudaSuccess && staging.staged;
    ok = ok && staging.consume(arena, inputs, 2, compute) == cudaSuccess && !staging.staged;
    TCC_LAUNCH(1, 1, 0, compute, copy_value)(reinterpret_cast<float *>(arena + 68), seen + k);
  }
  cudaStreamSynchronize(compute);
  float second[3];
  std::memcpy(second, arena + 0, 4);
  check(ok && seen[0] == 1.0f && seen[1] == 11.0f && seen[2] == 21.0f && second[0] == 22.0f &&
            *reinterpret_cast<float *>(arena + 64) == 20.0f,
        "deferred: staged inputs reach their arena slots in order, one micro-step each");
  staging.close();
  cudaFree(seen);
  cudaFree(arena);
  cudaFreeHost(pinned);
  cudaFree(dev);
  cudaFree(out);
  cudaEventDestroy(uploaded);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(compute);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}

int main() {
  const char *mode = std::getenv("TCC_CUDA_EMU_STREAMS");
  if (mode && std::strcmp(mode, "deferred") == 0)
    return deferred_streams(false);
  if (mode && std::strcmp(mode, "deferred-first") == 0)
    return deferred_streams(true);
  std::vector<float> in(256);
  for (int i = 0; i < 256; ++i)
    in[i] = static_cast<float>(i);
  std::vector<float> sums(8);
  TCC_LAUNCH(2, 128, 0, nullptr, warp_sum)(in.data(), sums.data());
  bool ok = true;
  for (int w = 0; w < 8; ++w) {
    float want = 0;
    for (int l = 0; l < 32; ++l)
      want += static_cast<float>(w * 32 + l);
    ok = ok && sums[w] == want;
  }
  check(ok && cudaGetLastError() == cudaSuccess, "warp shuffles sum each warp");
  std::vector<float> dead(16);
  TCC_LAUNCH(1, 32, 0, nullptr, shuffle_from_exited)(dead.data());
  check(cudaGetLastError() == cudaErrorLaunchFailure,
        "a shuffle from a lane that exited before it fails the launch");


  std::vector<int> rot(512);
  TCC_LAUNCH(2, 256, 0, nullptr, rotate)(rot.data());
  ok = true;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 256; ++t)
      ok = ok && rot[b * 256 + t] == (t + 1) % 256 + 1000 * b;
  check(ok, "shared memory and __syncthreads within each block");

  std::vector<int> ee(40, -1);
  TCC_LAUNCH(1, 64, 0, nullptr, early_exit)(ee.data());
  ok = cudaGetLastError() == cudaSuccess;
  for (int t = 0; t < 40; ++t)
    ok = ok && ee[t] == 39 - t;
  check(ok, "exited threads do not count at a barrier");

  std::vector<int> dv(64, 0);
  TCC_LAUNCH(1, 32, 0, nullptr, divergent)(dv.data());
  check(cudaGetLastError() == cudaErrorLaunchFailure, "a divergent barrier is a failed launch");

  alignas(16) __half halves[16] = {};
  float first = -1.0f;
  TCC_LAUNCH(1, 1, 0, nullptr, load_vector)(halves, &first);
  const bool aligned_ok = cudaGetLastError() == cudaSuccess && first == 0.0f;
  TCC_LAUNCH(1, 1, 0, nullptr, load_vector)(halves + 1, &first);
  check(aligned_ok && cudaGetLastError() == cudaErrorMisalignedAddress,
        "a 16-byte load needs a 16-byte aligned address");

  TCC_LAUNCH(1, 2048, 0, nullptr, add_one)(in.data(), 1);
  check(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block is refused");

  // Blocks run in index order, or last to first (TCC_CUDA_EMU_BLOCKS=reverse).
  const char *blocks = std::getenv("TCC_CUDA_EMU_BLOCKS");
  const bool reversed = blocks && std::strcmp(blocks, "reverse") == 0;
  int last = -1;
  TCC_LAUNCH(5, 32, 0, nullptr, last_block)(&last);
  check(last == (reversed ? 0 : 4), reversed ? "TCC_CUDA_EMU_BLOCKS=reverse runs blocks last to first"
                                             : "blocks run in index order");

  // Capture: work on the captured stream is recorded, replayed by launches.
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float x = 0.0f;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t e = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  TCC_LAUNCH(1, 32, 0, s, add_one)(&x, 1);
  const bool deferred = x == 0.0f;
  ok = cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&e, g, 0) == cudaSuccess;
  for (int i = 0; i < 3; ++i)
    ok = ok && cudaGraphLaunch(e, s) == cudaSuccess;
  check(ok && deferred && x == 3.0f, "a captured kernel runs once per graph launch");
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);

  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  const bool sync_fails = cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported;
  check(sync_fails && cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g,
        "synchronising during a capture invalidates it");
  cudaGetLastError();
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  const bool legacy_fails = cudaMemsetAsync(&x, 0, 4, nullptr) == cudaErrorStreamCaptureImplicit;
  check(legacy_fails && cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
        "the legacy stream during a capture invalidates it");
  cudaGetLastError();

  // A second stream joins the capture through an event recorded in it (a
  // fork) and is waited on before the capture ends (a join): its work is
  // replayed by each launch, in the order the events give. Without the join
  // the capture fails; a wait on an event recorded outside it fails too.
  cudaStream_t side = nullptr;
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaEvent_t fork = nullptr, joined = nullptr, outside = nullptr;
  cudaEventCreate(&fork);
  cudaEventCreate(&joined);
  cudaEventCreate(&outside);
  float y = 0.0f, copied[3] = {0.0f, 0.0f, 0.0f};
  x = 0.0f;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  TCC_LAUNCH(1, 32, 0, s, add_one)(&x, 1);
  ok = cudaEventRecord(fork, s) == cudaSuccess && cudaStreamWaitEvent(side, fork, 0) == cudaSuccess;
  int launch = 0;
  ok = ok && cudaMemcpyAsync(&y, &x, 4, cudaMemcpyDeviceToHost, side) == cudaSuccess;
  ok = ok && cudaEventRecord(joined, side) == cudaSuccess && cudaStreamWaitEvent(s, joined, 0) == cudaSuccess;
  TCC_LAUNCH(1, 32, 0, s, add_one)(&x, 1);
  ok = ok && cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&e, g, 0) == cudaSuccess;
  for (; ok && launch < 3; ++launch) {
    ok = cudaGraphLaunch(e, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    copied[launch] = y;
  }
  check(ok && x == 6.0f && copied[0] == 1.0f && copied[1] == 3.0f && copied[2] == 5.0f,
        "a forked stream's captured copy runs between the kernels around it in every launch");
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  cudaEventRecord(fork, s);
  cudaStreamWaitEvent(side, fork, 0);
  cudaMemcpyAsync(&y, &x, 4, cudaMemcpyDeviceToHost, side);
  g = nullptr;
  check(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureUnjoined && !g,
        "a forked stream not joined back fails the capture");
  cudaGetLastError();
  cudaEventRecord(outside, side);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  const bool isolated = cudaStreamWaitEvent(s, outside, 0) == cudaErrorStreamCaptureIsolation;
  check(isolated && cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
        "waiting on an event recorded outside the capture invalidates it");
  cudaGetLastError();
  ok = cudaMemcpyAsync(&y, &x, 4, cudaMemcpyDeviceToHost, side) == cudaSuccess &&
       cudaStreamSynchronize(side) == cudaSuccess;
  check(ok && y == 6.0f, "a stream that was forked into a capture runs its own work again after it");
  cudaEventDestroy(fork);
  cudaEventDestroy(joined);
  cudaEventDestroy(outside);
  cudaStreamDestroy(side);

  // cuBLASLt: C(2x2) = A(2x3) B(3x2), column-major, then the same with a
  // D pointer less aligned than the plan promised.
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t d;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, 2, 3, 2);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, 3, 2, 3);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16F, 2, 2, 2);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint32_t align = 16; // the default is 256
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof align);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, 1, &res, &found);
  alignas(16) __half A[6], B[6], C[6];
  for (int i = 0; i < 6; ++i) {
    A[i] = __half(static_cast<float>(i + 1)); // A = [[1,3,5],[2,4,6]]
    B[i] = __half(static_cast<float>(i % 3)); // B = [[0,0],[1,1],[2,2]]
  }
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasLtMatmul(h, d, &one, A, la, B, lb, &zero, C, lc, C, lc, &res.algo, nullptr, 0, s);
  check(found == 1 && st == CUBLAS_STATUS_SUCCESS && static_cast<float>(C[0]) == 13.0f &&
            static_cast<float>(C[1]) == 16.0f && static_cast<float>(C[2]) == 13.0f &&
            static_cast<float>(C[3]) == 16.0f,
        "cublasLtMatmul computes A*B");
  st = cublasLtMatmul(h, d, &one, A, la, B, lb, &zero, C + 1, lc, C + 1, lc, &res.algo, nullptr, 0, s);
  check(st == CUBLAS_STATUS_INVALID_VALUE, "a less aligned operand than the plan's is refused");
  cublasLtMatrixLayout_t bad;
  cublasLtMatrixLayoutCreate(&bad, CUDA_R_16F, 4, 2, 4);
  check(cublasLtMatmulAlgoGetHeuristic(h, d, la, bad, lc, lc, pref, 1, &res, &found) == CUBLAS_STATUS_INVALID_VALUE,
        "layouts that do not fit the product are refused");

  // Epilogue: bias along D's rows, GELU, its input as the auxiliary output
  // (leading dimension a multiple of 8), as gemm.cuh's matmul_epilogue asks.
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  alignas(16) __half bias[2] = {__half(1.0f), __half(-20.0f)}, aux[16];
  const void *bias_p = bias;
  void *aux_p = aux;
  int64_t aux_ld = 4;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_p, sizeof bias_p);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_p, sizeof aux_p);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  check(cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, 1, &res, &found) == CUBLAS_STATUS_INVALID_VALUE,
        "an auxiliary leading dimension that is not a multiple of 8 is refused");
  aux_ld = 8;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, 1, &res, &found);
  st = cublasLtMatmul(h, d, &one, A, la, B, lb, &zero, C, lc, C, lc, &res.algo, nullptr, 0, s);
  // Pre-activations: column 0 and 1 are (13 + 1, 16 - 20) = (14, -4).
  auto gelu = [](float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); };
  check(st == CUBLAS_STATUS_SUCCESS && static_cast<float>(aux[0]) == 14.0f && static_cast<float>(aux[1]) == -4.0f &&
            static_cast<float>(aux[8]) == 14.0f && static_cast<float>(aux[9]) == -4.0f &&
            static_cast<float>(C[0]) == static_cast<float>(__half(gelu(14.0f))) &&
            static_cast<float>(C[1]) == static_cast<float>(__half(gelu(-4.0f))),
        "the bias, GELU and auxiliary-output epilogue");
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
