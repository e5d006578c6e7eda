//===- comm.cuh - a CUDA step's gradient all-reduce over NCCL -----*- C++ -*-===//
//
// Data parallelism for CUDA steps (tcc-run under mpirun or srun): every rank
// runs the whole step on its own GPU, and the fp32 gradient accumulators are
// summed across the ranks once per optimizer step, before the update.
//
// The sum overlaps the backward pass, as PyTorch's DDP does. The micro-step
// body calls grad_ready (step_host.h) right after the last write of each
// accumulator. In the micro-step tcc-run marks as the optimizer step's last
// (tcc_step_comm_reduce_next), the accumulators go into buckets in that
// order; a bucket that reaches its size (TCC_DP_BUCKET_MB, default 25 MiB,
// DDP's) is summed at once, on the communicator's own stream, after an event
// on the step's stream: so the all-reduce of the last layers' gradients
// runs while the backward pass computes the first layers'. tcc_step_apply
// sums what is left and makes the step's stream wait for every bucket; the
// global norm, the inf/NaN skip and the update then read the world's sums,
// alike on every rank.
//
// A step built with tcc --data-parallel=N (ZeRO-1) keeps the optimizer
// state of one chunk of the parameters' flat space per rank: its sum is a
// reduce-scatter of the accumulators, in the same buckets, overlapped the
// same way: each bucket's part in chunk r is summed into rank r's shard
// buffer (grouped ncclReduce calls, root r); the updated parameters are
// then all-gathered (step_comm.cu's tcc_step_shard_apply).
//
// NCCL itself is loaded with dlopen (libnccl.so.2) when a communicator is
// opened, so a step that trains on one GPU does not need it installed. In
// the CUDA emulation, nccl.h is runtime/cuda/emu/nccl.h, whose collectives
// go over tcc-run's MPI plugin.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_COMM_CUH
#define TCC_RUNTIME_CUDA_COMM_CUH

#include <cuda_runtime.h>
#if defined(TCC_CUDA_EMU) || __has_include(<nccl.h>)
#include <nccl.h>
#define TCC_HAVE_NCCL_H 1
#else
// Built where NCCL's header is absent: the declarations the loader's types
// need (NCCL 2's C API); opening a communicator then says why it cannot.
typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
typedef enum { ncclUint8 = 1, ncclInt32 = 2, ncclInt64 = 4, ncclFloat32 = 7, ncclFloat64 = 8 } ncclDataType_t;
extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId *);
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int);
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclAllGather(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommAbort(ncclComm_t);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *);
const char *ncclGetErrorString(ncclResult_t);
ncclResult_t ncclGetVersion(int *);
}
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace tcc::cuda {

/// The NCCL entry points a step uses.
struct NcclApi {
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclCommAbort) commAbort = nullptr;
  decltype(&ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&ncclGetErrorString) getErrorString = nullptr;
  decltype(&ncclGetVersion) getVersion = nullptr;

  /// Finds them: "" or why not.
  std::string load() {
    if (getUniqueId)
      return "";
#ifdef TCC_CUDA_EMU
    getUniqueId = &ncclGetUniqueId;
    commInitRank = &ncclCommInitRank;
    allReduce = &ncclAllReduce;
    reduce = &ncclReduce;
    allGather = &ncclAllGather;
    broadcast = &ncclBroadcast;
    groupStart = &ncclGroupStart;
    groupEnd = &ncclGroupEnd;
    commDestroy = &ncclCommDestroy;
    commAbort = &ncclCommAbort;
    commGetAsyncError = &ncclCommGetAsyncError;
    getErrorString = &ncclGetErrorString;
    getVersion = &ncclGetVersion;
    return "";
#elif !defined(TCC_HAVE_NCCL_H)
    return "this step was built without NCCL's header (nccl.h), so it cannot join a world of "
           "several GPUs; rebuild it where the CUDA toolkit has NCCL";
#else
    const char *name = std::getenv("TCC_NCCL_LIB");
    if (!name || !*name)
      name = "libnccl.so.2";
    void *lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *why = ::dlerror();
      return std::string("NCCL (") + name + ") cannot be loaded: " + (why ? why : "unknown dlopen error") +
             "; data parallelism on CUDA needs NCCL 2 (TCC_NCCL_LIB names the library)";
    }
    std::string missing;
    auto get = [&](auto &fn, const char *sym) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, sym));
      if (!fn && missing.empty())
        missing = sym;
    };
    get(getUniqueId, "ncclGetUniqueId");
    get(commInitRank, "ncclCommInitRank");
    get(allReduce, "ncclAllReduce");
    get(reduce, "ncclReduce");
    get(allGather, "ncclAllGather");
    get(broadcast, "ncclBroadcast");
    get(groupStart, "ncclGroupStart");
    get(groupEnd, "ncclGroupEnd");
    get(commDestroy, "ncclCommDestroy");
    get(commAbort, "ncclCommAbort");
    get(commGetAsyncError, "ncclCommGetAsyncError");
    get(getErrorString, "ncclGetErrorString");
    get(getVersion, "ncclGetVersion");
    if (!missing.empty()) {
      getUniqueId = nullptr;
      return std::string(name) + " does not export " + missing;
    }
    return "";
#endif
  }
};

inline NcclApi &nccl() {
  static NcclApi api;
  return api;
}

/// The world's communicator and the buckets of one optimizer step's
/// gradient all-reduce.
class GradReduce {
public:
  /// Joins the world (ncclCommInitRank) and creates the stream and events.
  std::string open(const ncclUniqueId &id, int nranks, int rank) {
    if (comm_)
      return "the step's communicator is already open";
    if (std::string err = nccl().load(); !err.empty())
      return err;
    const char *mb = std::getenv("TCC_DP_BUCKET_MB");
    const double m = mb && *mb ? std::atof(mb) : 25.0;
    cap_ = m > 0 ? static_cast<uint64_t>(m * 1048576.0) : 1;
    if (ncclResult_t r = nccl().commInitRank(&comm_, nranks, id, rank)) {
      comm_ = nullptr;
      return std::string("ncclCommInitRank (rank ") + std::to_string(rank) + " of " + std::to_string(nranks) +
             "): " + nccl().getErrorString(r);
    }
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess)
      e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      close();
      return std::string(cudaGetErrorName(e)) + ": the communicator's stream and events";
    }
    nranks_ = nranks;
    rank_ = rank;
    return "";
  }

  /// ZeRO-1 (a step built with tcc --data-parallel=N): the optimizer step's
  /// sum is a reduce-scatter of the accumulators' flat space (`grads`,
  /// ranks * `chunk` fp32) into each rank's chunk (`shard` here), bucket by
  /// bucket as the backward pass finishes them; `elements` is how many the
  /// trainable parameters hold in all (finish checks that every one was
  /// handed over). gather() then all-gathers the updated parameters.
  void shard(float *grads, float *shard, uint64_t chunk, uint64_t elements) {
    flat_grads_ = grads;
    shard_ = shard;
    chunk_ = chunk;
    expected_ = elements;
  }
  bool sharded() const { return shard_ != nullptr; }

  /// After a failure the communicator is aborted first: its stream may be
  /// stuck in a collective that only the abort ends.
  void close() {
    if (comm_ && failed_)
      nccl().commAbort(comm_);
    else if (stream_)
      cudaStreamSynchronize(stream_);
    if (comm_ && !failed_)
      nccl().commDestroy(comm_);
    if (stream_)
      cudaStreamSynchronize(stream_);
    if (scratch_)
      cudaFree(scratch_);
    if (pinned_)
      cudaFreeHost(pinned_);
    scratch_ = pinned_ = nullptr;
    scratch_bytes_ = 0;
    for (cudaEvent_t e : pool_)
      cudaEventDestroy(e);
    pool_.clear();
    timed_.clear();
    for (cudaEvent_t *e : {&ready_, &done_})
      if (*e) {
        cudaEventDestroy(*e);
        *e = nullptr;
      }
    if (stream_)
      cudaStreamDestroy(stream_);
    comm_ = nullptr;
    stream_ = nullptr;
    bucket_.clear();
    pending_ = reduced_ = gathered_ = 0;
    buckets_ = gathers_ = 0;
    flat_grads_ = shard_ = nullptr;
    chunk_ = expected_ = handed_ = 0;
    armed_ = false;
    failed_ = ncclSuccess;
    what_.clear();
  }

  /// Aborts the communicator (tcc-run ending a world it was launched into
  /// without MPI): the peers' collectives fail instead of waiting. The
  /// watchdog's thread may call it while the main thread waits in host(),
  /// so the pointer is taken atomically.
  void abort() {
    ncclComm_t c = __atomic_exchange_n(&comm_, static_cast<ncclComm_t>(nullptr), __ATOMIC_ACQ_REL);
    if (c)
      nccl().commAbort(c);
    armed_ = false;
  }

  /// Whether a collective failed (the communicator is then aborted).
  bool failed() const { return failed_ != ncclSuccess; }

  bool open() const { return comm_ != nullptr; }
  int ranks() const { return nranks_; }
  /// The next micro-step is the optimizer step's last: sum its gradients.
  void arm() {
    armed_ = comm_ != nullptr;
    timed_.clear(); // a new optimizer step's collectives
  }

  /// tcc-run --trace: each collective is timed by a pair of events on the
  /// communicator's stream; timings() reads the last optimizer step's.
  void set_timing(bool on) { timing_ = on; }
  /// The last optimizer step's collectives (at most `max`): their start and
  /// end in seconds after `origin` (an event on the step's stream that ran
  /// before them), bytes and names. Once they have finished (after apply).
  /// Returns how many, or -1 when a time cannot be read.
  int timings(cudaEvent_t origin, double *start, double *end, uint64_t *bytes, const char **names, int max) {
    int n = 0;
    for (const Timed &t : timed_) {
      if (n == max)
        break;
      float a = 0, b = 0;
      if (cudaEventElapsedTime(&a, origin, t.start) != cudaSuccess ||
          cudaEventElapsedTime(&b, origin, t.end) != cudaSuccess)
        return -1;
      start[n] = a / 1000.0;
      end[n] = b / 1000.0;
      bytes[n] = t.bytes;
      names[n] = t.what;
      ++n;
    }
    return n;
  }
  bool armed() const { return armed_; }

  /// The accumulator at `g` (n fp32) has its last write of the micro-step
  /// queued on `compute`.
  void ready(float *g, int64_t n, cudaStream_t compute) {
    if (!armed_ || n <= 0)
      return;
    bucket_.push_back({g, n});
    pending_ += 4 * static_cast<uint64_t>(n);
    if (pending_ >= cap_)
      flush(compute);
  }

  /// Sums what is left and makes `compute` wait for every bucket. Returns ""
  /// or the failure (a collective that could not be queued, or one that
  /// failed asynchronously).
  std::string finish(cudaStream_t compute) {
    if (!armed_)
      return "";
    flush(compute);
    armed_ = false;
    if (sharded() && handed_ != expected_ && !failed_) {
      // Each shard would miss sums: a step that does not call grad_ready
      // once for every accumulator is not fit for ZeRO-1.
      std::string why = "the micro-step handed " + std::to_string(handed_) + " of its " +
                        std::to_string(expected_) + " gradient elements to the ZeRO-1 reduce-scatter";
      handed_ = 0;
      return why;
    }
    handed_ = 0;
    cudaError_t e = cudaEventRecord(done_, stream_);
    if (e == cudaSuccess)
      e = cudaStreamWaitEvent(compute, done_, 0);
    if (e != cudaSuccess)
      return std::string(cudaGetErrorName(e)) + ": ordering the gradient all-reduce";
    return error();
  }

  /// ZeRO-1: all-gathers the parameters' flat space (`params`, ranks *
  /// chunk fp32) in place, each rank's chunk from that rank, after the work
  /// queued on `compute`, which then waits for it. Returns "" or the failure.
  std::string gather(float *params, cudaStream_t compute) {
    collective(compute, "the parameter all-gather (ZeRO-1)", 4 * chunk_ * static_cast<uint64_t>(nranks_), [&] {
      ++gathers_;
      gathered_ += 4 * chunk_ * static_cast<uint64_t>(nranks_);
      return nccl().allGather(params + static_cast<uint64_t>(rank_) * chunk_, params, static_cast<size_t>(chunk_),
                              ncclFloat32, comm_, stream_);
    });
    cudaError_t e = cudaEventRecord(done_, stream_);
    if (e == cudaSuccess)
      e = cudaStreamWaitEvent(compute, done_, 0);
    if (e != cudaSuccess)
      return std::string(cudaGetErrorName(e)) + ": ordering the parameter all-gather";
    return error();
  }

  /// The world's small collectives for tcc-run (tcc_step_comm_api, when
  /// it was launched without MPI): host buffers staged through device
  /// scratch, on the communicator's stream (after every collective queued
  /// before, on every rank in the same order), synchronous. `bytes` in, at
  /// the scratch's start; `out_bytes` back, from `out_at` in the scratch.
  /// Returns "" or the failure.
  template <typename Issue>
  std::string host(const void *in, uint64_t bytes, void *out, uint64_t out_bytes, uint64_t out_at, const char *what,
                   Issue issue) {
    if (failed_)
      return error();
    if (!comm_)
      return "the communicator is not open";
    // Device scratch, and pinned host staging: a copy to or from pageable
    // memory may block until the collective is done, which the polling
    // below could then not watch.
    const uint64_t need = std::max(bytes, out_at + out_bytes);
    if (need > scratch_bytes_) {
      if (scratch_)
        cudaFree(scratch_);
      if (pinned_)
        cudaFreeHost(pinned_);
      scratch_ = pinned_ = nullptr;
      scratch_bytes_ = 0;
      if (cudaError_t e = cudaMalloc(&scratch_, need); e != cudaSuccess)
        return std::string(cudaGetErrorName(e)) + ": scratch for " + what;
      if (cudaError_t e = cudaMallocHost(&pinned_, need); e != cudaSuccess)
        return std::string(cudaGetErrorName(e)) + ": pinned staging for " + what;
      scratch_bytes_ = need;
    }
    std::memcpy(pinned_, in, bytes);
    cudaError_t e = cudaMemcpyAsync(scratch_, pinned_, bytes, cudaMemcpyHostToDevice, stream_);
    ncclResult_t r = ncclSuccess;
    if (e == cudaSuccess && (r = issue(static_cast<char *>(scratch_))) == ncclSuccess)
      e = cudaMemcpyAsync(static_cast<char *>(pinned_) + out_at, static_cast<char *>(scratch_) + out_at, out_bytes,
                          cudaMemcpyDeviceToHost, stream_);
    if (r != ncclSuccess && !failed_) {
      failed_ = r;
      what_ = what;
    }
    // Wait for it while watching the communicator: a peer that failed
    // shows as an asynchronous error, and aborting the communicator frees
    // the stream, so this rank ends now, not at TCC_COMM_TIMEOUT.
    while (e == cudaSuccess) {
      e = cudaStreamQuery(stream_);
      if (e != cudaErrorNotReady)
        break;
      e = cudaSuccess;
      ncclComm_t c = __atomic_load_n(&comm_, __ATOMIC_ACQUIRE);
      if (!c)
        return std::string(what) + ": the communicator was aborted";
      if (async_failed(c, what)) {
        abort();
        return error();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (e == cudaSuccess && r == ncclSuccess)
      std::memcpy(out, static_cast<char *>(pinned_) + out_at, out_bytes);
    if (comm_)
      async_failed(comm_, what);
    if (e != cudaSuccess)
      return std::string(cudaGetErrorName(e)) + ": " + what;
    return error();
  }
  /// In-place reduction of `n` elements of `type` at host `buf`.
  std::string host_allreduce(void *buf, uint64_t n, uint64_t elem, ncclDataType_t type, ncclRedOp_t op,
                             const char *what) {
    return host(buf, n * elem, buf, n * elem, 0, what, [&](char *d) {
      return nccl().allReduce(d, d, static_cast<size_t>(n), type, op, comm_, stream_);
    });
  }
  /// Every rank's `bytes` at `send` into `recv` (ranks * bytes).
  std::string host_allgather(const void *send, uint64_t bytes, void *recv, const char *what) {
    return host(send, bytes, recv, bytes * static_cast<uint64_t>(nranks_), bytes, what, [&](char *d) {
      return nccl().allGather(d, d + bytes, static_cast<size_t>(bytes), ncclUint8, comm_, stream_);
    });
  }
  /// Root's `bytes` at `buf` to every rank.
  std::string host_broadcast(void *buf, uint64_t bytes, int root, const char *what) {
    return host(buf, bytes, buf, bytes, 0, what, [&](char *d) {
      return nccl().broadcast(d, d, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_);
    });
  }
  int rank() const { return rank_; }

  /// A failure so far, or "".
  std::string error() {
    if (comm_)
      async_failed(comm_, sharded() ? "the ZeRO-1 reduce-scatter or all-gather" : "the gradient all-reduce");
    if (!failed_)
      return "";
    return what_ + ": " + nccl().getErrorString(failed_);
  }

  /// "NCCL 2.28.9, 2 ranks, buckets of 25 MiB; 3 buckets (1.2 MiB) summed
  /// in all".
  std::string describe() const {
    int v = 0;
    nccl().getVersion(&v);
    // NCCL 2.9 on: major*10000 + minor*100 + patch; before: major*1000 + minor*100 + patch.
    const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
    char text[256];
    char library[64];
#ifdef TCC_CUDA_EMU
    (void)major;
    (void)minor;
    std::snprintf(library, sizeof library, "NCCL (the CUDA emulation's, over %s)",
                  tcc_emu::mpi_plugin() ? "MPI" : "TCP");
#else
    std::snprintf(library, sizeof library, "NCCL %d.%d.%d", major, minor, v % 100);
#endif
    if (sharded())
      std::snprintf(text, sizeof text,
                    "%s, %d rank%s, ZeRO-1 (chunks of %.3g MiB), buckets of %.3g MiB; %lld bucket%s (%.3g MiB) "
                    "reduce-scattered and %lld all-gather%s (%.3g MiB) in all",
                    library, nranks_, nranks_ == 1 ? "" : "s", 4.0 * chunk_ / 1048576.0, cap_ / 1048576.0,
                    (long long)buckets_, buckets_ == 1 ? "" : "s", reduced_ / 1048576.0, (long long)gathers_,
                    gathers_ == 1 ? "" : "s", gathered_ / 1048576.0);
    else
      std::snprintf(text, sizeof text, "%s, %d rank%s, buckets of %.3g MiB; %lld bucket%s (%.3g MiB) summed in all",
                    library, nranks_, nranks_ == 1 ? "" : "s", cap_ / 1048576.0, (long long)buckets_,
                    buckets_ == 1 ? "" : "s", reduced_ / 1048576.0);
    return text;
  }

private:
  struct Slice {
    float *g;
    int64_t n;
  };

  /// Whether the communicator `c` reports an asynchronous error (a peer
  /// failed); the first failure is kept, named `what`.
  bool async_failed(ncclComm_t c, const char *what) {
    if (failed_)
      return true;
    ncclResult_t async = ncclSuccess;
    // 7: ncclInProgress (NCCL 2.14 on; older headers lack the name).
    if (nccl().commGetAsyncError(c, &async) != ncclSuccess || async == ncclSuccess || static_cast<int>(async) == 7)
      return false;
    failed_ = async;
    what_ = what;
    return true;
  }

  struct Timed {
    cudaEvent_t start, end;
    uint64_t bytes;
    const char *what;
  };

  /// Two timing events for the next collective (from a pool that grows to
  /// the most one optimizer step uses), or false.
  bool timing_events(Timed &t) {
    const size_t need = 2 * (timed_.size() + 1);
    while (pool_.size() < need) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess)
        return false;
      pool_.push_back(e);
    }
    t.start = pool_[need - 2];
    t.end = pool_[need - 1];
    return true;
  }

  /// Queues `issue` (NCCL calls on stream_, `bytes` in all) after the work
  /// queued on `compute`; a failure to queue is kept, named `what`.
  template <typename Issue> void collective(cudaStream_t compute, const char *what, uint64_t bytes, Issue issue) {
    ncclResult_t r = ncclSuccess;
    cudaError_t e = cudaEventRecord(ready_, compute);
    if (e == cudaSuccess)
      e = cudaStreamWaitEvent(stream_, ready_, 0);
    Timed t{nullptr, nullptr, bytes, what};
    const bool timed = timing_ && e == cudaSuccess && timing_events(t);
    if (timed)
      cudaEventRecord(t.start, stream_);
    if (e != cudaSuccess)
      r = ncclUnhandledCudaError;
    else
      r = issue();
    if (timed && r == ncclSuccess && cudaEventRecord(t.end, stream_) == cudaSuccess)
      timed_.push_back(t);
    if (r != ncclSuccess && !failed_) {
      failed_ = r;
      what_ = std::string("queueing ") + what;
    }
  }

  void flush(cudaStream_t compute) {
    if (bucket_.empty())
      return;
    if (sharded()) {
      // Each slice's part in chunk r, summed into rank r's shard buffer.
      collective(compute, "the gradient reduce-scatter (ZeRO-1)", pending_, [&] {
        ncclResult_t r = nccl().groupStart();
        for (const Slice &s : bucket_) {
          const uint64_t first = static_cast<uint64_t>(s.g - flat_grads_), end = first + s.n;
          handed_ += static_cast<uint64_t>(s.n);
          for (uint64_t at = first; at < end && r == ncclSuccess;) {
            const uint64_t root = at / chunk_, stop = std::min(end, (root + 1) * chunk_);
            r = nccl().reduce(flat_grads_ + at, shard_ + (at - root * chunk_), static_cast<size_t>(stop - at),
                              ncclFloat32, ncclSum, static_cast<int>(root), comm_, stream_);
            at = stop;
          }
        }
        ncclResult_t end = nccl().groupEnd();
        return r == ncclSuccess ? end : r;
      });
      reduced_ += pending_;
      ++buckets_;
      bucket_.clear();
      pending_ = 0;
      return;
    }
    collective(compute, "the gradient all-reduce", pending_, [&] {
      ncclResult_t r = nccl().groupStart();
      for (const Slice &s : bucket_)
        if (r == ncclSuccess)
          r = nccl().allReduce(s.g, s.g, static_cast<size_t>(s.n), ncclFloat32, ncclSum, comm_, stream_);
      ncclResult_t end = nccl().groupEnd();
      return r == ncclSuccess ? end : r;
    });
    reduced_ += pending_;
    ++buckets_;
    bucket_.clear();
    pending_ = 0;
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  std::vector<Slice> bucket_;
  uint64_t cap_ = 25u << 20, pending_ = 0, reduced_ = 0, gathered_ = 0;
  int64_t buckets_ = 0, gathers_ = 0;
  int nranks_ = 1, rank_ = 0;
  float *flat_grads_ = nullptr, *shard_ = nullptr; // ZeRO-1 (shard())
  uint64_t chunk_ = 0, expected_ = 0, handed_ = 0;
  bool timing_ = false;
  std::vector<cudaEvent_t> pool_; // timing events, two per collective
  std::vector<Timed> timed_;      // this optimizer step's timed collectives
  void *scratch_ = nullptr; // host(): the staging buffer on the device
  void *pinned_ = nullptr;  // host(): its pinned host twin (scratch_bytes_ too)
  uint64_t scratch_bytes_ = 0;
  bool armed_ = false;
  ncclResult_t failed_ = ncclSuccess;
  std::string what_;
};

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_COMM_CUH
