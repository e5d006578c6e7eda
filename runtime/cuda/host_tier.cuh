//===- host_tier.cuh - master weights and optimizer state in host memory -*- C++ -*-===//
//
// The host tier of a CUDA step built from a plan with #tcc.tiers (tcc
// --offload; docs/memory.md): some parameters keep their fp32 master weights
// and optimizer state in a pinned host buffer (tcc_step_info.host_bytes), and
// the device holds only their fp16 working copies and fp32 gradient
// accumulators. The fixed half (step_host.cu) uses it for:
//
//   refresh()  the fp16 working copies from the host masters (init, and after
//              the runtime wrote masters with tcc_step_host_copy_in);
//   update()   the optimizer step of the host rows, as a pipeline over chunks
//              of kStageElements: the device gradients of chunk k+1 come to
//              pinned staging on the `down` stream while the host updates
//              chunk k (host_optimizer.h, the device kernels' arithmetic,
//              over threads) and chunk k-1's fp16 weights go up on the `up`
//              stream. Two staging slots each way; events order them:
//                got[s]   (down, after the gradient chunk landed and the
//                          device accumulator was zeroed): the host waits on
//                          it before reading the slot;
//                sent[s]  (up, after the fp16 chunk left the slot): the host
//                          waits on it before writing the slot again.
//              The device update of the other parameters runs meanwhile on
//              the step's stream. begin() starts it and returns; the next
//              micro-step, run op by op, goes on with it row by row
//              (await_row, await_all: tcck.await_weights and
//              tcck.await_update), so the host updates the later rows while
//              the device runs the first kernels; settle() (any reader of
//              the host buffer, through join()) finishes it.
//   copy_grad(), wait_grad(), accumulate()
//              with accumulators on the host (tcc --offload=all): the
//              micro-step copies each gradient down on `down` as its op is
//              queued (host_grad_copy in step_host.h) and waits for the copy
//              one op later; when it ends, a host thread adds the copies
//              into the accumulators in the order they were queued, while
//              the next micro-step runs up to its first copy (join():
//              before anything reads the accumulators or the staging). The
//              step's stream waits for the last copy at the end
//              (join_copies()), so a CUDA graph can capture the micro-step:
//              `down` forks from the step's stream and joins it again, and
//              the graph replays the copies (before_graph() waits for the
//              adder, which then does not overlap the graph; after_graph()
//              arms accumulate()). Such steps run as graphs only when
//              TCC_CUDA_GRAPHS=1 asks (step_host.cu, decide_modes).
//   swap_out(), swap_in() and their waits
//              saved activations swapped to the host buffer instead of
//              recomputed (tcc --swap-activations): copied out on `down`
//              after the op that makes them (sharing it with the gradient
//              copies), waited for a few ops later
//              (the plan keeps the buffer until then), copied back on `up`
//              a few ops before their first backward reader, which waits
//              for the copy. Every copy forks from the step's stream and is
//              joined by its wait, so a CUDA graph captures them.
//
// In the CUDA emulation, TCC_CUDA_EMU_STREAMS=deferred runs the copies as
// late as the events allow, so a missing wait shows as stale gradients or
// weights (test/e2e/check_offload.py).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_HOST_TIER_CUH
#define TCC_RUNTIME_CUDA_HOST_TIER_CUH

#include "host_optimizer.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <functional>
#include <thread>
#include <vector>

namespace tcc::cuda::host {

/// One parameter whose master weights and optimizer state are on the host.
struct HostRow {
  int param;         // index into tcc_step_info.params
  float *p, *s0, *s1; // host buffer: master weights, AdamW moments (SGD: s0)
  float *g;          // the fp32 gradient accumulator: device, or (grad_on_host) host buffer
  __half *p16;       // device: the fp16 working copy
  int64_t n;
  float weight_decay;
  bool grad_on_host;
};

/// One micro-step gradient copied to a host accumulator (HostGradRow).
struct HostGradCopy {
  float *acc;          // host buffer
  int64_t n;
  bool half;           // the device value is fp16
  void *staging;       // pinned, n elements of the device value
  cudaEvent_t done;    // down stream, after the copy
};

/// An activation swapped to host memory (SwapRow), with the events of its
/// two copies.
struct SwapCopy {
  char *host;      // in the host buffer
  uint64_t bytes;
  cudaEvent_t out; // down stream, after the copy to the host
  cudaEvent_t in;  // up stream, after the copy back
};

/// Elements per staging chunk: 4M (16 MiB of fp32 gradients, 8 MiB of
/// fp16 weights per slot).
inline constexpr int64_t kStageElements = int64_t(1) << 22;

struct HostTier {
  char *buffer = nullptr; // pinned, host_bytes
  uint64_t bytes = 0;
  std::vector<HostRow> rows;
  float *grads[2] = {nullptr, nullptr};      // pinned staging
  uint16_t *halves[2] = {nullptr, nullptr};  // pinned staging
  int64_t stage = 0;                         // elements per slot
  cudaStream_t down = nullptr, up = nullptr;
  cudaEvent_t got[2] = {nullptr, nullptr}, sent[2] = {nullptr, nullptr}, ready = nullptr, joined = nullptr;
  int threads = 1;
  std::vector<HostGradCopy> copies;
  bool copies_pending = false; // copies queued since the last accumulate()
  std::vector<SwapCopy> swaps;
  std::thread adder;           // adds the last micro-step's copies (no CUDA calls)

  /// Ends an update in flight (settle()) and waits for the adder: before
  /// anything reads the masters, the state or the accumulators, or
  /// overwrites the staging. Returns the update's failure, if any.
  cudaError_t join() {
    cudaError_t e = settle();
    if (adder.joinable())
      adder.join();
    return e;
  }

  bool active() const { return buffer != nullptr; }

  /// Allocates the pinned buffer (zeroed), the staging slots for the largest
  /// row, the copy streams and the events. `rows` point into `buffer` by the
  /// offsets the caller resolved with base().
  cudaError_t open(uint64_t host_bytes) {
    bytes = host_bytes;
    if (!host_bytes)
      return cudaSuccess;
    cudaError_t e;
    if ((e = cudaMallocHost(reinterpret_cast<void **>(&buffer), host_bytes)) != cudaSuccess)
      return e;
    std::memset(buffer, 0, host_bytes);
    threads = tcc::host::default_threads();
    if (const char *t = std::getenv("TCC_HOST_THREADS"))
      threads = std::max(1, std::atoi(t));
    if ((e = cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&joined, cudaEventDisableTiming)) != cudaSuccess)
      return e;
    for (int s = 0; s < 2; ++s)
      if ((e = cudaEventCreateWithFlags(&got[s], cudaEventDisableTiming)) != cudaSuccess ||
          (e = cudaEventCreateWithFlags(&sent[s], cudaEventDisableTiming)) != cudaSuccess)
        return e;
    return cudaSuccess;
  }

  /// The micro-step's copies to host accumulators: pinned staging and an
  /// event each.
  cudaError_t open_copies(const HostGradRow *rows, int n) {
    cudaError_t e;
    for (int k = 0; k < n; ++k) {
      HostGradCopy c{};
      c.acc = reinterpret_cast<float *>(buffer + rows[k].acc);
      c.n = rows[k].n;
      c.half = rows[k].half != 0;
      if ((e = cudaMallocHost(&c.staging, static_cast<size_t>(c.n) * (c.half ? 2 : 4))) != cudaSuccess)
        return e;
      copies.push_back(c);
      if ((e = cudaEventCreateWithFlags(&copies.back().done, cudaEventDisableTiming)) != cudaSuccess)
        return e;
    }
    return cudaSuccess;
  }

  /// Queues copy k of the gradient at `src`, behind the work on `compute`
  /// (once the adder is done with the staging: the host add of one
  /// micro-step overlaps the device's work on the next up to its first copy).
  cudaError_t copy_grad(int k, const void *src, cudaStream_t compute) {
    join();
    HostGradCopy &c = copies[static_cast<size_t>(k)];
    cudaError_t e;
    if ((e = behind(down, compute)) != cudaSuccess ||
        (e = cudaMemcpyAsync(c.staging, src, static_cast<size_t>(c.n) * (c.half ? 2 : 4), cudaMemcpyDeviceToHost,
                             down)) != cudaSuccess)
      return e;
    copies_pending = true;
    return cudaEventRecord(c.done, down);
  }

  /// `compute` waits for copy k (its source buffer may be reused after).
  cudaError_t wait_grad(int k, cudaStream_t compute) {
    return cudaStreamWaitEvent(compute, copies[static_cast<size_t>(k)].done, 0);
  }

  /// The swapped activations: their places in the host buffer and events.
  cudaError_t open_swaps(const SwapRow *rows, int n) {
    cudaError_t e;
    for (int k = 0; k < n; ++k) {
      swaps.push_back({buffer + rows[k].host, rows[k].bytes, nullptr, nullptr});
      if ((e = cudaEventCreateWithFlags(&swaps.back().out, cudaEventDisableTiming)) != cudaSuccess ||
          (e = cudaEventCreateWithFlags(&swaps.back().in, cudaEventDisableTiming)) != cudaSuccess)
        return e;
    }
    return cudaSuccess;
  }

  /// Swap k's copy of `src` to the host, on `down` behind the work queued
  /// on `compute`; wait_swap_out(k) makes `compute` wait for it.
  cudaError_t swap_out(int k, const void *src, cudaStream_t compute) {
    SwapCopy &s = swaps[static_cast<size_t>(k)];
    cudaError_t e;
    if ((e = behind(down, compute)) != cudaSuccess ||
        (e = cudaMemcpyAsync(s.host, src, s.bytes, cudaMemcpyDeviceToHost, down)) != cudaSuccess)
      return e;
    return cudaEventRecord(s.out, down);
  }
  cudaError_t wait_swap_out(int k, cudaStream_t compute) {
    return cudaStreamWaitEvent(compute, swaps[static_cast<size_t>(k)].out, 0);
  }

  /// Swap k's copy back into `dst`, on `up` behind the work queued on
  /// `compute` (the buffer's last other reader) and the copy out;
  /// wait_swap_in(k) makes `compute` wait for it.
  cudaError_t swap_in(int k, void *dst, cudaStream_t compute) {
    SwapCopy &s = swaps[static_cast<size_t>(k)];
    cudaError_t e;
    if ((e = behind(up, compute)) != cudaSuccess || (e = cudaStreamWaitEvent(up, s.out, 0)) != cudaSuccess ||
        (e = cudaMemcpyAsync(dst, s.host, s.bytes, cudaMemcpyHostToDevice, up)) != cudaSuccess)
      return e;
    return cudaEventRecord(s.in, up);
  }
  cudaError_t wait_swap_in(int k, cudaStream_t compute) {
    return cudaStreamWaitEvent(compute, swaps[static_cast<size_t>(k)].in, 0);
  }

  /// At the end of a micro-step that copied gradients: `compute` waits for
  /// the last of them, so `down` joins back (a CUDA graph's capture needs
  /// every stream it forked to be joined before it ends).
  cudaError_t join_copies(cudaStream_t compute) {
    if (!copies_pending)
      return cudaSuccess;
    cudaError_t e = cudaEventRecord(joined, down);
    return e == cudaSuccess ? cudaStreamWaitEvent(compute, joined, 0) : e;
  }

  /// Before a CUDA graph of the micro-step is launched: its copies will
  /// overwrite the staging, so the adder must be done with it, and
  /// accumulate() must add them after (the graph queues them, not
  /// copy_grad()).
  cudaError_t before_graph() { return copies.empty() ? cudaSuccess : join(); }
  /// After a CUDA graph of the micro-step was launched.
  void after_graph() { copies_pending = !copies.empty(); }

  /// After a micro-step: waits for its copies, then starts the adder, which
  /// adds each into its accumulator in the order they were queued (as the
  /// device adds them) while the caller goes on to the next micro-step.
  cudaError_t accumulate() {
    if (!copies_pending)
      return cudaSuccess;
    copies_pending = false;
    if (cudaError_t e = cudaStreamSynchronize(down))
      return e;
    join();
    adder = std::thread([this] { add_copies(); });
    return cudaSuccess;
  }

  void add_copies() {
    for (const HostGradCopy &c : copies) {
      tcc::host::OptTensor t{c.acc, static_cast<float *>(c.staging), nullptr, nullptr,
                             static_cast<uint16_t *>(c.staging), c.n, 0.0f};
      const bool half = c.half;
      tcc::host::for_each_chunk(&t, 1, threads, [half](const tcc::host::OptTensor &x, int64_t b, int64_t end) {
        if (half)
          for (int64_t i = b; i < end; ++i)
            x.p[i] += tcc::host::half_to_float(x.p16[i]);
        else
          for (int64_t i = b; i < end; ++i)
            x.p[i] += x.g[i];
      });
    }
  }

  /// The host accumulators' sum of squares (the gradient norm's share).
  double grad_sum_squares() {
    join();
    double sq = 0.0;
    for (const HostRow &r : rows)
      if (r.grad_on_host)
        for (int64_t i = 0; i < r.n; ++i)
          sq += static_cast<double>(r.g[i]) * static_cast<double>(r.g[i]);
    return sq;
  }

  /// Zeroes the host accumulators.
  void zero_grads() {
    join();
    for (const HostRow &r : rows)
      if (r.grad_on_host)
        std::memset(r.g, 0, sizeof(float) * static_cast<size_t>(r.n));
  }

  /// The staging slots, sized for the rows (called once they are known).
  cudaError_t open_staging() {
    int64_t largest = 0;
    for (const HostRow &r : rows)
      largest = std::max(largest, r.n);
    stage = std::min(largest, kStageElements);
    if (stage == 0)
      return cudaSuccess;
    cudaError_t e;
    for (int s = 0; s < 2; ++s)
      if ((e = cudaMallocHost(reinterpret_cast<void **>(&grads[s]), sizeof(float) * stage)) != cudaSuccess ||
          (e = cudaMallocHost(reinterpret_cast<void **>(&halves[s]), sizeof(uint16_t) * stage)) != cudaSuccess)
        return e;
    return cudaSuccess;
  }

  void close() {
    join();
    if (down)
      cudaStreamSynchronize(down);
    if (up)
      cudaStreamSynchronize(up);
    for (int s = 0; s < 2; ++s) {
      if (got[s])
        cudaEventDestroy(got[s]);
      if (sent[s])
        cudaEventDestroy(sent[s]);
      if (grads[s])
        cudaFreeHost(grads[s]);
      if (halves[s])
        cudaFreeHost(halves[s]);
      got[s] = sent[s] = nullptr;
      grads[s] = nullptr;
      halves[s] = nullptr;
    }
    for (HostGradCopy &c : copies) {
      if (c.done)
        cudaEventDestroy(c.done);
      if (c.staging)
        cudaFreeHost(c.staging);
    }
    copies.clear();
    copies_pending = false;
    for (SwapCopy &s : swaps)
      for (cudaEvent_t e : {s.out, s.in})
        if (e)
          cudaEventDestroy(e);
    swaps.clear();
    for (cudaEvent_t e : {ready, joined})
      if (e)
        cudaEventDestroy(e);
    if (down)
      cudaStreamDestroy(down);
    if (up)
      cudaStreamDestroy(up);
    if (buffer)
      cudaFreeHost(buffer);
    ready = joined = nullptr;
    down = up = nullptr;
    buffer = nullptr;
    bytes = 0;
    stage = 0;
    rows.clear();
  }

  /// The chunks of every row, in order: (row, first element, elements).
  struct Chunk {
    int row;
    int64_t begin, n;
  };
  std::vector<Chunk> chunks() const {
    std::vector<Chunk> c;
    for (int r = 0; r < static_cast<int>(rows.size()); ++r)
      for (int64_t b = 0; b < rows[r].n; b += stage)
        c.push_back({r, b, std::min(stage, rows[r].n - b)});
    return c;
  }

  /// The fp16 working copies from the masters, on the `up` stream; returns
  /// once they are on the device.
  cudaError_t refresh() {
    join();
    const std::vector<Chunk> cs = chunks();
    cudaError_t e = up ? cudaStreamSynchronize(up) : cudaSuccess; // the staging's last uploads
    for (size_t k = 0; k < cs.size() && e == cudaSuccess; ++k) {
      const int s = static_cast<int>(k % 2);
      const HostRow &r = rows[cs[k].row];
      if (k >= 2 && (e = cudaEventSynchronize(sent[s])) != cudaSuccess)
        break;
      const float *p = r.p + cs[k].begin;
      uint16_t *h = halves[s];
      const int64_t n = cs[k].n;
      tcc::host::OptTensor t{const_cast<float *>(p), nullptr, nullptr, nullptr, h, n, 0.0f};
      tcc::host::for_each_chunk(&t, 1, threads, [](const tcc::host::OptTensor &x, int64_t b, int64_t end) {
        for (int64_t i = b; i < end; ++i)
          x.p16[i] = tcc::host::float_to_half_rn(x.p[i]);
      });
      if ((e = cudaMemcpyAsync(r.p16 + cs[k].begin, h, sizeof(uint16_t) * n, cudaMemcpyHostToDevice, up)) ==
          cudaSuccess)
        e = cudaEventRecord(sent[s], up);
    }
    if (e == cudaSuccess)
      e = cudaStreamSynchronize(up);
    return e;
  }

  /// Queues chunk `c`'s gradients from the device into staging slot `s`, and
  /// zeroes them on the device.
  cudaError_t fetch(const Chunk &c, int s) {
    const HostRow &r = rows[c.row];
    if (r.grad_on_host) // already here: the slot's event only
      return cudaEventRecord(got[s], down);
    cudaError_t e;
    if ((e = cudaMemcpyAsync(grads[s], r.g + c.begin, sizeof(float) * c.n, cudaMemcpyDeviceToHost, down)) !=
            cudaSuccess ||
        (e = cudaMemsetAsync(r.g + c.begin, 0, sizeof(float) * c.n, down)) != cudaSuccess)
      return e;
    return cudaEventRecord(got[s], down);
  }

  /// Orders the gradient downloads of update() after the work queued on
  /// `compute` so far (the gradients): called before the device update of
  /// the other rows is queued, so that the two run at once.
  cudaError_t after(cudaStream_t compute) { return behind(down, compute); }

  /// Work queued on copy stream `copy` from now on waits for the work
  /// queued on `compute` so far (in a graph capture: `copy` forks from it).
  cudaError_t behind(cudaStream_t copy, cudaStream_t compute) {
    cudaError_t e = cudaEventRecord(ready, compute);
    return e == cudaSuccess ? cudaStreamWaitEvent(copy, ready, 0) : e;
  }

  /// The optimizer step of every host row, its gradient downloads ordered by
  /// after(); `body(t)` updates one chunk (tcc::host::adamw or sgd with the
  /// step's constants). begin() starts it: it queues the first downloads
  /// and returns. The chunks are then updated, in row order, by
  /// await_row() and await_all() from the next micro-step (which waits on
  /// the device for what it reads: the update overlaps its first kernels),
  /// or by settle(), which every reader of the host buffer calls (join()).
  /// update() is begin() and settle(): it returns once the new fp16 weights
  /// are on the device and the device accumulators are zeroed.
  cudaError_t begin(std::function<void(const tcc::host::OptTensor &)> body) {
    join();
    pending_ = chunks();
    row_end_.assign(rows.size(), 0);
    for (size_t k = 0; k < pending_.size(); ++k)
      row_end_[static_cast<size_t>(pending_[k].row)] = k + 1;
    next_ = 0;
    body_ = std::move(body);
    status_ = cudaSuccess;
    // The last update's uploads may still read the fp16 staging.
    cudaError_t e = cudaStreamSynchronize(up);
    for (size_t k = 0; e == cudaSuccess && k < pending_.size() && k < 2; ++k)
      e = fetch(pending_[k], static_cast<int>(k));
    in_flight_ = e == cudaSuccess && !pending_.empty();
    return e;
  }
  cudaError_t update(std::function<void(const tcc::host::OptTensor &)> body) {
    if (cudaError_t e = begin(std::move(body)))
      return e;
    return settle();
  }
  bool in_flight() const { return in_flight_; }
  /// Chunks updated, and of them those updated by await_row() or
  /// await_all() (while the next micro-step was being queued).
  uint64_t updated_chunks = 0, overlapped_chunks = 0;

  /// Updates chunks until row `row` (an index of `rows`) is done, and makes
  /// `compute` wait for its fp16 copy (and every upload before it: `up` is
  /// in order).
  cudaError_t await_row(int row, cudaStream_t compute) {
    if (!in_flight_ || row < 0 || static_cast<size_t>(row) >= row_end_.size())
      return status_;
    return run_to(row_end_[static_cast<size_t>(row)], compute);
  }

  /// Updates every chunk left and makes `compute` wait for the last upload
  /// (every download is done: each chunk waited for its own on the host);
  /// the update is then no longer in flight.
  cudaError_t await_all(cudaStream_t compute) {
    if (!in_flight_)
      return status_;
    run_to(pending_.size(), compute);
    in_flight_ = false;
    return status_;
  }

  /// Updates every chunk left and waits on the host for the copies.
  cudaError_t settle() {
    if (!in_flight_)
      return status_;
    run_to(pending_.size(), nullptr);
    in_flight_ = false;
    if (status_ == cudaSuccess)
      status_ = cudaStreamSynchronize(down);
    if (status_ == cudaSuccess)
      status_ = cudaStreamSynchronize(up);
    return status_;
  }

private:
  /// Updates chunks up to (not including) chunk `end`; with `compute`
  /// (from the next micro-step), counts them as overlapped and makes it
  /// wait for the last upload so far. A failure ends the update in flight
  /// (reported once, by the caller).
  cudaError_t run_to(size_t end, cudaStream_t compute) {
    while (status_ == cudaSuccess && next_ < end) {
      status_ = step_one();
      if (compute)
        ++overlapped_chunks;
    }
    if (status_ == cudaSuccess && compute && next_ > 0)
      status_ = cudaStreamWaitEvent(compute, sent[(next_ - 1) % 2], 0);
    if (status_ != cudaSuccess)
      in_flight_ = false;
    return status_;
  }

  /// Chunk next_: waits for its gradients (slot s), for the slot's last
  /// upload, updates it on the host, uploads its fp16 weights, and fetches
  /// chunk next_+2 into the slot.
  cudaError_t step_one() {
    const size_t k = next_++;
    ++updated_chunks;
    const int s = static_cast<int>(k % 2);
    const HostRow &r = rows[static_cast<size_t>(pending_[k].row)];
    cudaError_t e;
    if ((e = cudaEventSynchronize(got[s])) != cudaSuccess)
      return e;
    if (k >= 2 && (e = cudaEventSynchronize(sent[s])) != cudaSuccess)
      return e;
    const int64_t b = pending_[k].begin;
    tcc::host::OptTensor t{r.p + b, r.grad_on_host ? r.g + b : grads[s], r.s0 ? r.s0 + b : nullptr,
                           r.s1 ? r.s1 + b : nullptr, halves[s], pending_[k].n, r.weight_decay};
    body_(t);
    if ((e = cudaMemcpyAsync(r.p16 + b, halves[s], sizeof(uint16_t) * pending_[k].n, cudaMemcpyHostToDevice, up)) !=
            cudaSuccess ||
        (e = cudaEventRecord(sent[s], up)) != cudaSuccess)
      return e;
    // The slot's gradients are consumed: fetch chunk k+2 into it.
    if (k + 2 < pending_.size() && (e = fetch(pending_[k + 2], s)) != cudaSuccess)
      return e;
    return cudaSuccess;
  }

  std::vector<Chunk> pending_;  // the update in flight's chunks
  std::vector<size_t> row_end_; // per row: one past its last chunk in pending_
  size_t next_ = 0;            // the next chunk to update
  std::function<void(const tcc::host::OptTensor &)> body_;
  bool in_flight_ = false;
  cudaError_t status_ = cudaSuccess; // the update's first failure
};

} // namespace tcc::cuda::host

#endif // TCC_RUNTIME_CUDA_HOST_TIER_CUH
