//===- tcc_cuda_emu.h - run tcc's CUDA code on the CPU, for tests -*- C++ -*-===//
//
// A host emulation of the part of CUDA that tcc's generated CUDA step and
// runtime/cuda/*.cuh use, so that the CUDA target's code (its kernels, its
// mixed precision, its memory plan, its loss scaling, its CUDA-graph capture)
// runs and is checked on a machine without a GPU. It is selected by building
// the step with the host compiler, -DTCC_CUDA_EMU and -I runtime/cuda/emu:
// this folder's cuda_runtime.h, cuda_fp16.h, cublasLt.h and mma.h then stand
// in for the CUDA toolkit's (`tcc --target=cuda --cuda-emulation`).
//
// What it models:
//  * kernels: every block runs on the calling thread, one block after the
//    other; the threads of a block run on fibers (a small x86-64 context
//    switch) that switch only at __syncthreads(), __syncwarp(), warp
//    shuffles and WMMA operations, so barriers, warp shuffles and shared
//    memory are shared and ordered as on a GPU. __shared__ is `static`.
//    Threads that exit stop counting at barriers; a barrier that the live
//    threads of the block (or warp) never all reach is reported as a
//    deadlock and fails the launch (cudaErrorLaunchFailure), as does a
//    shuffle from an exited lane.
//  * launch checks: block size <= 1024, grid limits, a zero-size grid
//    (cudaErrorInvalidConfiguration), reported by cudaGetLastError; a
//    16-byte load or store (load8 / store8) at an address that is not
//    16-byte aligned (cudaErrorMisalignedAddress).
//  * memory: cudaMalloc is host memory, filled with 0xff (NaN in fp16 and fp32)
//    as fresh device memory is not zero; cudaMemGetInfo reports a fixed total
//    and the bytes cudaMalloc holds, so the measured peak is the allocations'.
//  * streams run their work at once, in order. Stream capture records the
//    work instead, and cudaGraphLaunch replays it; as with
//    cudaStreamCaptureModeThreadLocal, a synchronising call or work on the
//    legacy stream during a capture fails and invalidates the capture. As in
//    CUDA, another stream joins the capture by waiting on an event recorded
//    in it (a fork), and must be waited on by a capturing stream after its
//    last captured work (a join), or cudaStreamEndCapture fails with
//    cudaErrorStreamCaptureUnjoined; waiting on an event recorded outside
//    the capture fails with cudaErrorStreamCaptureIsolation. The graph
//    replays the captured work in the order it was captured, which respects
//    every captured dependency.
//  * TCC_CUDA_EMU_STREAMS=deferred: work on a created stream runs as late as
//    CUDA allows instead: when the host synchronises with it
//    (cudaStreamSynchronize, cudaEventSynchronize on an event recorded on it,
//    cudaDeviceSynchronize, cudaFree, cudaFreeHost, cudaStreamDestroy) or
//    when another stream's work reaches a cudaStreamWaitEvent on one of its
//    events. So work that lacks the event or synchronisation it needs (a
//    copy stream's upload that the compute stream does not wait for, a
//    pinned buffer the host overwrites while its copy is pending, a result
//    read before its stream is synchronised) sees stale data here. The
//    legacy stream (0) still runs at once.
//    TCC_CUDA_EMU_STREAMS=deferred-first defers only the first stream created
//    (a CUDA step's own stream) and runs the others' work at once, as early
//    as possible: so work on another stream that overwrites what the first
//    one has yet to read, without waiting for it, shows.
//  * cuBLASLt (cublasLt.h): matmuls in column-major with fp32 accumulation,
//    checking the layouts against the operation and the operands' alignment
//    against the plan's preference; the workspace is overwritten on every
//    call, so a plan that lets it overlap live data fails its checks.
//  * TCC_CUDA_EMU_NO_DEVICE=1 makes cudaFree(0) fail with
//    cudaErrorInsufficientDriver (the error a machine without a driver gives).
//  * WMMA (mma.h, nvcuda::wmma, 16x16x16 with __half multiplicands and float
//    or __half accumulators): every thread holds the whole 16x16 tile in its
//    fragment (num_elements 256). fill_fragment, load_matrix_sync, mma_sync
//    and store_matrix_sync are warp synchronisation points like __syncwarp,
//    so divergent use deadlocks and fails the launch; a load reads before
//    that point and a store writes only the lane's share of the tile after
//    it, so a missing __syncwarp between lanes' writes and a load (or
//    between a store and lanes' reads) shows as stale data. mma_sync
//    multiplies exactly and accumulates in float in order of k. Misaligned
//    pointers (32 bytes) or ldm (16 bytes) fail with
//    cudaErrorMisalignedAddress. A fragment is 512 or 1024 bytes per thread:
//    the fibers' stacks (kFiberStack, 256 KB) hold tcc's attention kernels
//    with a wide margin (they use under 32 KB).
//
//  * TCC_CUDA_EMU_ORDER=reverse runs a block's threads last to first between
//    switch points; =greedy always runs the first runnable thread, so warp 0
//    runs ahead as far as barriers allow (a missing barrier before shared
//    memory is reused shows).
//  * TCC_CUDA_EMU_BLOCKS=reverse runs a grid's blocks last to first, so a
//    kernel whose result depends on its blocks running in index order (one
//    block reading what another writes) shows.
//
// What it does not model, so a kernel can pass here and fail on a GPU:
// concurrency (blocks run one after another, and a block's threads in a fixed
// order between barriers, so most races, within a block or between blocks,
// stay hidden), uninitialised shared memory (`static`: zero at first, then
// what the last block left), host pointers passed to kernels (device
// pointers are host ones), timing, the GPU's floating-point contraction
// and special-function accuracy (glibc's are used), and the layout of WMMA
// fragment elements over a warp's lanes (code that reads or writes
// frag.x[i] other than by a uniform elementwise loop is not portable, and
// not checked), nor the tensor cores' order of addition. The build uses
// -fno-strict-aliasing: CUDA code reads fp16 data through uint4 pointers.
//
// Header-only; include it in one translation unit.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CUDA_EMU_H
#define TCC_CUDA_EMU_H

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <time.h>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }

// The built-in index variables of the thread that runs now.
inline uint3 threadIdx{0, 0, 0};
inline uint3 blockIdx{0, 0, 0};
inline dim3 blockDim{1, 1, 1};
inline dim3 gridDim{1, 1, 1};
constexpr int warpSize = 32;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
constexpr unsigned cudaStreamNonBlocking = 1;

namespace tcc_emu {
struct Stream {
  unsigned flags = 0;
  bool deferred = false;                     // its work waits (TCC_CUDA_EMU_STREAMS)
  std::deque<std::function<void()>> pending; // deferred: not run yet
  uint64_t issued = 0, done = 0;             // work items enqueued, run
  // A stream that joined the origin's capture (a fork):
  bool joined = false;
  uint64_t captured = 0; // work items it added to the capture
  uint64_t rejoined = 0; // of those, the ones a capturing stream waited for
};
struct Graph {
  std::vector<std::function<void()>> work;
};
} // namespace tcc_emu
typedef tcc_emu::Stream *cudaStream_t;
typedef tcc_emu::Graph *cudaGraph_t;
typedef tcc_emu::Graph *cudaGraphExec_t;

namespace tcc_emu {

//===----------------------------------------------------------------------===//
// Errors, memory, streams and capture
//===----------------------------------------------------------------------===//

struct State {
  cudaError_t last = cudaSuccess; // what cudaGetLastError returns
  std::map<const void *, size_t> allocations;
  size_t allocated = 0;
  Stream *capturing = nullptr; // the stream being captured (the origin), if any
  std::vector<Stream *> forks;  // the streams that joined its capture
  Graph *capture = nullptr;
  uint64_t capture_id = 0; // numbers the captures (events name theirs)
  bool capture_invalid = false;
  bool initialised = false;
  enum class Defer { None, All, First };
  Defer defer = Defer::None;      // TCC_CUDA_EMU_STREAMS: (unset), deferred, deferred-first
  std::vector<Stream *> streams;  // the created streams
  int created = 0;                // streams ever created
  std::map<const void *, size_t> pinned; // cudaMallocHost allocations
  int device = 0;                        // cudaSetDevice's
};
inline State &state() {
  static State s = [] {
    State init;
    const char *mode = std::getenv("TCC_CUDA_EMU_STREAMS");
    init.defer = !mode                                    ? State::Defer::None
                 : std::strcmp(mode, "deferred") == 0       ? State::Defer::All
                 : std::strcmp(mode, "deferred-first") == 0 ? State::Defer::First
                                                            : State::Defer::None;
    return init;
  }();
  return s;
}

/// Runs stream st's deferred work up to and including its item `seq`.
inline void run_until(Stream *st, uint64_t seq) {
  while (st->done < seq && !st->pending.empty()) {
    std::function<void()> work = std::move(st->pending.front());
    st->pending.pop_front();
    work();
    ++st->done;
  }
}
inline void flush(Stream *st) { run_until(st, st->issued); }
inline void flush_all() {
  for (Stream *st : state().streams)
    flush(st);
}
constexpr size_t kTotalMemory = size_t(80) << 30;

inline cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess)
    state().last = e;
  return e;
}

/// Whether a call that synchronises with the host may run now; during a
/// capture it fails and invalidates it (cudaStreamCaptureModeThreadLocal).
inline cudaError_t sync_allowed() {
  State &s = state();
  if (!s.capturing)
    return cudaSuccess;
  s.capture_invalid = true;
  return record(cudaErrorStreamCaptureUnsupported);
}

/// Runs `work` on stream st now, or records it when st is being captured.
/// Work on the legacy stream (0) during a capture fails.
inline cudaError_t enqueue(cudaStream_t st, std::function<void()> work) {
  State &s = state();
  if (s.capturing) {
    if (st == s.capturing || (st && st->joined)) {
      s.capture->work.push_back(std::move(work));
      ++st->captured;
      return cudaSuccess;
    }
    if (!st) {
      s.capture_invalid = true;
      return record(cudaErrorStreamCaptureImplicit);
    }
  }
  if (st) {
    ++st->issued;
    if (st->deferred) {
      st->pending.push_back(std::move(work));
      return cudaSuccess;
    }
  }
  work();
  if (st)
    st->done = st->issued;
  return cudaSuccess;
}

[[noreturn]] inline void fatal(const char *msg) {
  std::fprintf(stderr, "tcc CUDA emulation: %s\n", msg);
  std::abort();
}

//===----------------------------------------------------------------------===//
// Kernels: blocks in order, the threads of a block as fibers
//===----------------------------------------------------------------------===//

constexpr size_t kFiberStack = 256 * 1024;
constexpr unsigned kMaxThreads = 1024;

// Context switch: saves the callee-saved registers on the current stack,
// stores the stack pointer in *save and resumes the context whose stack
// pointer is `next`. (Kernels do not change the floating-point control
// registers, so MXCSR and the x87 control word are not switched.)
#if !defined(__x86_64__)
#error "tcc's CUDA emulation switches fibers with x86-64 code; this machine is not x86-64"
#endif
extern "C" void tcc_emu_switch(void **save, void *next);
__asm__(".text\n"
        ".hidden tcc_emu_switch\n"
        ".weak tcc_emu_switch\n"
        ".type tcc_emu_switch,@function\n"
        "tcc_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size tcc_emu_switch, .-tcc_emu_switch\n"
        ".previous\n");

/// A fiber with its own stack that runs GPU threads, one after another.
struct Worker {
  char *stack = nullptr;
  void *sp = nullptr;
};

/// One GPU thread of the block being run.
struct Thread {
  uint3 idx{0, 0, 0};
  int worker = -1; // the fiber running it, -1: not started
  bool done = false;
  int wait = 0; // 0: runnable, 1: block barrier, 2: warp barrier
  unsigned long gen = 0;
};

struct BlockRun {
  std::vector<Thread> threads;
  std::vector<Worker> workers;
  std::vector<int> free_workers;
  void *sched_sp = nullptr;
  unsigned nthreads = 0, alive = 0;
  unsigned long block_gen = 0;
  unsigned block_arrived = 0;
  unsigned long warp_gen[kMaxThreads / 32] = {};
  unsigned warp_arrived[kMaxThreads / 32] = {};
  unsigned warp_alive[kMaxThreads / 32] = {};
  // Warp shuffles: each lane's value, in the slot of the warp barrier's
  // generation parity (see __shfl_xor_sync).
  alignas(16) unsigned char exchange[2][kMaxThreads][16];
  unsigned long exchange_gen[2][kMaxThreads] = {}; // 1 + the generation of each slot's value
  int current = -1;                                    // the thread running now
  const std::function<void()> *body = nullptr;
};
inline BlockRun &block() {
  static BlockRun b;
  return b;
}

inline void thread_exit(BlockRun &b, unsigned tid) {
  Thread &t = b.threads[tid];
  t.done = true;
  // Threads that exit no longer count at barriers.
  --b.alive;
  const unsigned w = tid / 32;
  --b.warp_alive[w];
  if (b.block_arrived && b.block_arrived >= b.alive) {
    b.block_arrived = 0;
    ++b.block_gen;
  }
  if (b.warp_arrived[w] && b.warp_arrived[w] >= b.warp_alive[w]) {
    b.warp_arrived[w] = 0;
    ++b.warp_gen[w];
  }
}

/// A worker's life: run the thread the scheduler assigned, report it done,
/// wait for the next one.
[[noreturn]] inline void worker_main() {
  for (;;) {
    BlockRun &b = block();
    const int tid = b.current;
    (*b.body)();
    thread_exit(b, static_cast<unsigned>(tid));
    const int w = b.threads[static_cast<size_t>(tid)].worker;
    tcc_emu_switch(&b.workers[static_cast<size_t>(w)].sp, b.sched_sp);
  }
}

inline int get_worker(BlockRun &b) {
  if (!b.free_workers.empty()) {
    const int w = b.free_workers.back();
    b.free_workers.pop_back();
    return w;
  }
  void *p = mmap(nullptr, kFiberStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fatal("cannot map a fiber stack");
  Worker wk;
  wk.stack = static_cast<char *>(p);
  // The first switch to it "returns" into worker_main with the stack aligned
  // as after a call: [0 (return address)] [worker_main] [6 registers].
  // Stacks are kFiberStack apart; starting each at another offset keeps
  // their hot top lines out of the same cache sets.
  const size_t color = (b.workers.size() % 63) * 64;
  uint64_t *top = reinterpret_cast<uint64_t *>(wk.stack + kFiberStack - color);
  top[-1] = 0;
  top[-2] = reinterpret_cast<uint64_t>(&worker_main);
  for (int i = 3; i <= 8; ++i)
    top[-i] = 0;
  wk.sp = &top[-8];
  b.workers.push_back(wk);
  return static_cast<int>(b.workers.size() - 1);
}

/// Blocks the calling thread at a barrier of its block (warp = false) or of
/// its warp, until every live thread there has arrived.
inline void barrier(bool warp) {
  BlockRun &b = block();
  if (b.current < 0)
    fatal("a barrier outside a kernel");
  const unsigned tid = static_cast<unsigned>(b.current);
  Thread &t = b.threads[tid];
  const unsigned w = tid / 32;
  if (warp) {
    t.wait = 2;
    t.gen = b.warp_gen[w];
    if (++b.warp_arrived[w] >= b.warp_alive[w]) {
      b.warp_arrived[w] = 0;
      ++b.warp_gen[w];
    }
  } else {
    t.wait = 1;
    t.gen = b.block_gen;
    if (++b.block_arrived >= b.alive) {
      b.block_arrived = 0;
      ++b.block_gen;
    }
  }
  tcc_emu_switch(&b.workers[static_cast<size_t>(t.worker)].sp, b.sched_sp);
  threadIdx = b.threads[static_cast<size_t>(b.current)].idx;
}

inline bool runnable(const BlockRun &b, const Thread &t, unsigned tid) {
  if (t.done)
    return false;
  if (t.wait == 1)
    return b.block_gen != t.gen;
  if (t.wait == 2)
    return b.warp_gen[tid / 32] != t.gen;
  return true;
}

/// Runs the current block's threads until all have exited. Returns false on
/// a deadlock (threads wait at a barrier no other live thread will reach).
inline bool run_block(const dim3 &bd, const std::function<void()> &body) {
  BlockRun &b = block();
  const unsigned n = bd.x * bd.y * bd.z;
  if (b.threads.size() < n)
    b.threads.resize(n);
  b.nthreads = b.alive = n;
  b.block_gen = 0;
  b.block_arrived = 0;
  for (unsigned w = 0; w < (n + 31) / 32; ++w) {
    b.warp_gen[w] = 0;
    b.warp_arrived[w] = 0;
    b.warp_alive[w] = (w + 1) * 32 <= n ? 32 : n - w * 32;
  }
  b.body = &body;
  for (unsigned i = 0; i < n; ++i) {
    Thread &t = b.threads[i];
    b.exchange_gen[0][i] = b.exchange_gen[1][i] = 0;
    t.idx = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
    t.worker = -1;
    t.done = false;
    t.wait = 0;
    t.gen = 0;
  }
  unsigned remaining = n;
  bool ok = true;
  // The order threads run in between switch points: round-robin (default),
  // TCC_CUDA_EMU_ORDER=reverse (last to first) or =greedy (always the first
  // runnable thread: warp 0 runs ahead of the others as far as barriers let
  // it, which shows a missing barrier before shared memory is reused).
  static const int order = [] {
    const char *o = std::getenv("TCC_CUDA_EMU_ORDER");
    return !o ? 0 : std::strcmp(o, "reverse") == 0 ? 1 : std::strcmp(o, "greedy") == 0 ? 2 : 0;
  }();
  const bool reverse = order == 1, greedy = order == 2;
  while (remaining) {
    bool progressed = false;
    for (unsigned k = 0; k < n; ++k) {
      const unsigned i = reverse ? n - 1 - k : k;
      Thread &t = b.threads[i];
      if (!runnable(b, t, i))
        continue;
      if (t.worker < 0)
        t.worker = get_worker(b);
      t.wait = 0;
      b.current = static_cast<int>(i);
      threadIdx = t.idx;
      tcc_emu_switch(&b.sched_sp, b.workers[static_cast<size_t>(t.worker)].sp);
      b.current = -1;
      progressed = true;
      if (t.done) {
        b.free_workers.push_back(t.worker);
        --remaining;
      }
      if (greedy)
        break; // rescan from the first thread
    }
    if (!progressed) {
      ok = false;
      break;
    }
  }
  if (!ok) {
    // Abandon the waiting threads; their fibers are reset before reuse.
    for (unsigned i = 0; i < n; ++i)
      if (!b.threads[i].done && b.threads[i].worker >= 0) {
        Worker &wk = b.workers[static_cast<size_t>(b.threads[i].worker)];
        munmap(wk.stack, kFiberStack);
        wk.stack = nullptr;
      }
    b.free_workers.clear();
    for (size_t w = 0; w < b.workers.size(); ++w)
      if (b.workers[w].stack)
        munmap(b.workers[w].stack, kFiberStack);
    b.workers.clear();
  }
  return ok;
}

inline void run_grid(dim3 g, dim3 bd, const std::function<void()> &body) {
  gridDim = g;
  blockDim = bd;
  static const bool reverse = [] {
    const char *o = std::getenv("TCC_CUDA_EMU_BLOCKS");
    return o && std::strcmp(o, "reverse") == 0;
  }();
  auto at = [&](unsigned i, unsigned n) { return reverse ? n - 1 - i : i; };
  for (unsigned zi = 0; zi < g.z; ++zi)
    for (unsigned yi = 0; yi < g.y; ++yi)
      for (unsigned xi = 0; xi < g.x; ++xi) {
        const unsigned x = at(xi, g.x), y = at(yi, g.y), z = at(zi, g.z);
        blockIdx = uint3{x, y, z};
        if (!run_block(bd, body)) {
          std::fprintf(stderr, "tcc CUDA emulation: deadlock: in block (%u,%u,%u) some threads wait at a "
                               "barrier that other live threads of the block or warp never reach\n",
                       x, y, z);
          record(cudaErrorLaunchFailure);
          return;
        }
      }
}

/// A vector access (16-byte load or store) at an address the GPU cannot
/// serve: the launch fails with cudaErrorMisalignedAddress, as on a GPU.
/// Returns whether the access may go ahead.
inline bool check_aligned(const void *p, uintptr_t align, const char *what) {
  if (reinterpret_cast<uintptr_t>(p) % align == 0)
    return true;
  std::fprintf(stderr, "tcc CUDA emulation: %s at %p, not %u-byte aligned\n", what, p, (unsigned)align);
  record(cudaErrorMisalignedAddress);
  return false;
}

template <class To, class From> To implicit_conversion(From &&f) { return std::forward<From>(f); }

template <class... A> struct Launch {
  void (*kernel)(A...);
  dim3 grid, threads;
  cudaStream_t stream;
  template <class... T> void operator()(T &&...args) const {
    static_assert(sizeof...(T) == sizeof...(A), "kernel launched with the wrong number of arguments");
    if (threads.x * threads.y * threads.z == 0 || threads.x * threads.y * threads.z > kMaxThreads ||
        threads.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
        grid.x > 0x7fffffffu) {
      record(cudaErrorInvalidConfiguration);
      return;
    }
    std::tuple<std::decay_t<A>...> params(implicit_conversion<std::decay_t<A>>(std::forward<T>(args))...);
    void (*k)(A...) = kernel;
    const dim3 g = grid, bd = threads;
    record(enqueue(stream, [k, params, g, bd]() {
      const std::function<void()> body = [&]() { std::apply(k, params); };
      run_grid(g, bd, body);
    }));
  }
};

template <class... A> Launch<A...> launch(dim3 grid, dim3 threads, size_t shared_bytes, cudaStream_t st,
                                          void (*kernel)(A...)) {
  if (shared_bytes)
    fatal("dynamic shared memory is not emulated");
  return Launch<A...>{kernel, grid, threads, st};
}

} // namespace tcc_emu

//===----------------------------------------------------------------------===//
// Device functions
//===----------------------------------------------------------------------===//

inline void __syncthreads() { tcc_emu::barrier(false); }
inline void __syncwarp(unsigned = 0xffffffffu) { tcc_emu::barrier(true); }
inline void __threadfence() {}

template <class T> T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= 16, "shuffle of a large type");
  tcc_emu::BlockRun &b = tcc_emu::block();
  const unsigned tid = static_cast<unsigned>(b.current);
  // One warp barrier: the lanes write their values, wait for each other and
  // read. Alternating slots (by the generation of the barrier they meet at)
  // make a second barrier, before a later shuffle overwrites what a slower
  // lane has yet to read, unnecessary: a lane writes the same slot again only
  // two warp barriers on, after every live lane has arrived at the one in
  // between, which each does only after its read here.
  const unsigned long gen = b.warp_gen[tid / 32];
  auto &slot = b.exchange[gen & 1];
  unsigned long *tags = b.exchange_gen[gen & 1];
  std::memcpy(slot[tid], &v, sizeof(T));
  tags[tid] = gen + 1;
  tcc_emu::barrier(true);
  const unsigned lane = tid % 32, base = tid - lane;
  const unsigned src_lane = (lane ^ static_cast<unsigned>(lane_mask)) % 32;
  // A full-mask shuffle from a lane that has exited or is not in the block
  // is undefined on a GPU: reported (the launch fails), the lane's own value
  // returned. Lanes beyond their `width` group read their own value.
  T r = v;
  if ((src_lane / static_cast<unsigned>(width)) == (lane / static_cast<unsigned>(width))) {
    // The source lane wrote its value at this barrier unless it had exited
    // before it (it may have exited since).
    if (base + src_lane >= b.nthreads || tags[base + src_lane] != gen + 1) {
      std::fprintf(stderr, "tcc CUDA emulation: a warp shuffle reads lane %u, which %s\n", src_lane,
                   base + src_lane >= b.nthreads ? "is not in the block" : "has exited");
      tcc_emu::record(cudaErrorLaunchFailure);
    } else {
      std::memcpy(&r, slot[base + src_lane], sizeof(T));
    }
  }
  return r;
}

template <class T> T __ldcg(const T *p) { return *p; }
template <class T> T __ldg(const T *p) { return *p; }

// One thread runs at a time, so atomics are plain read-modify-writes.
template <class T> T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <class T> T atomicExch(T *p, T v) {
  T old = *p;
  *p = v;
  return old;
}
template <class T> T atomicMax(T *p, T v) {
  T old = *p;
  if (v > old)
    *p = v;
  return old;
}
template <class T> T atomicCAS(T *p, T cmp, T v) {
  T old = *p;
  if (old == cmp)
    *p = v;
  return old;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }

//===----------------------------------------------------------------------===//
// Runtime API
//===----------------------------------------------------------------------===//

inline const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorIllegalState: return "cudaErrorIllegalState";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
  case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
  case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
  case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
  }
  return "cudaErrorUnknown";
}
inline const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  default: return "error (CUDA emulation)";
  }
}

inline cudaError_t cudaGetLastError() {
  cudaError_t e = tcc_emu::state().last;
  tcc_emu::state().last = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return tcc_emu::state().last; }

inline cudaError_t cudaFree(void *p) {
  tcc_emu::State &s = tcc_emu::state();
  if (!s.initialised) {
    const char *nd = std::getenv("TCC_CUDA_EMU_NO_DEVICE");
    if (nd && std::strcmp(nd, "1") == 0)
      return tcc_emu::record(cudaErrorInsufficientDriver);
    s.initialised = true;
  }
  if (!p)
    return cudaSuccess;
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  tcc_emu::flush_all(); // cudaFree synchronises the device
  auto it = s.allocations.find(p);
  if (it == s.allocations.end())
    return tcc_emu::record(cudaErrorInvalidValue);
  s.allocated -= it->second;
  s.allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

inline cudaError_t cudaMalloc(void **p, size_t bytes) {
  tcc_emu::State &s = tcc_emu::state();
  *p = nullptr;
  if (cudaError_t e = cudaFree(nullptr))
    return e;
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  if (s.allocated + bytes > tcc_emu::kTotalMemory)
    return tcc_emu::record(cudaErrorMemoryAllocation);
  void *q = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (!q)
    return tcc_emu::record(cudaErrorMemoryAllocation);
  // Fresh device memory is not zero: fill it with a pattern (NaN as fp16 and fp32).
  std::memset(q, 0xff, (bytes + 255) / 256 * 256 + 256);
  s.allocations[q] = bytes;
  s.allocated += bytes;
  *p = q;
  return cudaSuccess;
}
template <class T> cudaError_t cudaMalloc(T **p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void **>(p), bytes);
}

inline cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  if (cudaError_t e = cudaFree(nullptr))
    return e;
  *total = tcc_emu::kTotalMemory;
  *free_bytes = tcc_emu::kTotalMemory - tcc_emu::state().allocated;
  return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags) {
  if (cudaError_t e = cudaFree(nullptr))
    return e;
  *st = new tcc_emu::Stream;
  (*st)->flags = flags;
  tcc_emu::State &s = tcc_emu::state();
  (*st)->deferred = s.defer == tcc_emu::State::Defer::All ||
                    (s.defer == tcc_emu::State::Defer::First && s.created == 0);
  ++s.created;
  s.streams.push_back(*st);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t st) {
  if (!st)
    return tcc_emu::record(cudaErrorInvalidResourceHandle);
  tcc_emu::flush(st); // its pending work completes first
  std::vector<tcc_emu::Stream *> &all = tcc_emu::state().streams;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == st) {
      all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  delete st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  if (st)
    tcc_emu::flush(st);
  else
    tcc_emu::flush_all();
  return cudaSuccess;
}
// The emulation runs a stream's pending work when asked: a query finds it
// done.
inline cudaError_t cudaStreamQuery(cudaStream_t st) { return cudaStreamSynchronize(st); }
inline cudaError_t cudaDeviceSynchronize() {
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  tcc_emu::flush_all();
  return cudaSuccess;
}

// Pinned host memory: host memory the emulation keeps track of.
inline cudaError_t cudaMallocHost(void **p, size_t bytes) {
  *p = nullptr;
  if (cudaError_t e = cudaFree(nullptr))
    return e;
  void *q = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (!q)
    return tcc_emu::record(cudaErrorMemoryAllocation);
  tcc_emu::state().pinned[q] = bytes;
  *p = q;
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void *p) {
  if (!p)
    return cudaSuccess;
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  tcc_emu::flush_all(); // cudaFreeHost synchronises the device
  if (!tcc_emu::state().pinned.erase(p))
    return tcc_emu::record(cudaErrorInvalidValue);
  std::free(p);
  return cudaSuccess;
}

namespace tcc_emu {
/// Whether p lies in one of the allocations of `m` (base -> bytes).
inline bool within(const std::map<const void *, size_t> &m, const void *p) {
  auto it = m.upper_bound(p);
  if (it == m.begin())
    return false;
  --it;
  return static_cast<const char *>(p) < static_cast<const char *>(it->first) + it->second;
}
/// Host memory that is neither cudaMalloc'd nor pinned.
inline bool pageable(const void *p) { return !within(state().allocations, p) && !within(state().pinned, p); }
} // namespace tcc_emu

/// As CUDA does with pageable host memory: a copy from it reads the source
/// before returning, and a copy into it returns once the copy is done (so in
/// deferred mode the stream's earlier work runs first). Copies between
/// device and pinned memory are asynchronous.
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t st = nullptr) {
  if (!bytes)
    return cudaSuccess;
  tcc_emu::State &s = tcc_emu::state();
  if (st && st->deferred && !s.capturing) {
    if (tcc_emu::pageable(dst)) {
      tcc_emu::flush(st);
      std::memmove(dst, src, bytes);
      return cudaSuccess;
    }
    if (tcc_emu::pageable(src)) {
      auto copy = std::make_shared<std::vector<char>>(static_cast<const char *>(src),
                                                      static_cast<const char *>(src) + bytes);
      return tcc_emu::record(tcc_emu::enqueue(st, [dst, copy]() { std::memcpy(dst, copy->data(), copy->size()); }));
    }
  }
  return tcc_emu::record(tcc_emu::enqueue(st, [dst, src, bytes]() { std::memmove(dst, src, bytes); }));
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t st = nullptr) {
  if (!bytes)
    return cudaSuccess;
  return tcc_emu::record(tcc_emu::enqueue(st, [dst, value, bytes]() { std::memset(dst, value, bytes); }));
}
inline cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
  if (cudaError_t e = tcc_emu::sync_allowed())
    return e;
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

template <class T> cudaError_t cudaGetSymbolAddress(void **p, T &symbol) {
  *p = static_cast<void *>(&symbol);
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(T &symbol, const void *src, size_t bytes, size_t offset, cudaMemcpyKind kind,
                                    cudaStream_t st = nullptr) {
  return cudaMemcpyAsync(reinterpret_cast<char *>(&symbol) + offset, src, bytes, kind, st);
}
template <class T>
cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const T &symbol, size_t bytes, size_t offset, cudaMemcpyKind kind,
                                      cudaStream_t st = nullptr) {
  return cudaMemcpyAsync(dst, reinterpret_cast<const char *>(&symbol) + offset, bytes, kind, st);
}

inline cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode) {
  tcc_emu::State &s = tcc_emu::state();
  if (!st || s.capturing)
    return tcc_emu::record(cudaErrorIllegalState);
  s.capturing = st;
  s.capture = new tcc_emu::Graph;
  ++s.capture_id;
  s.capture_invalid = false;
  st->captured = 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph) {
  tcc_emu::State &s = tcc_emu::state();
  *graph = nullptr;
  if (st != s.capturing || !st)
    return tcc_emu::record(cudaErrorIllegalState);
  s.capturing = nullptr;
  bool unjoined = false;
  for (tcc_emu::Stream *f : s.forks) {
    unjoined |= f->rejoined < f->captured;
    f->joined = false;
  }
  s.forks.clear();
  if (unjoined && !s.capture_invalid) {
    delete s.capture;
    s.capture = nullptr;
    return tcc_emu::record(cudaErrorStreamCaptureUnjoined);
  }
  if (s.capture_invalid) {
    delete s.capture;
    s.capture = nullptr;
    return tcc_emu::record(cudaErrorStreamCaptureInvalidated);
  }
  *graph = s.capture;
  s.capture = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long = 0) {
  if (!graph)
    return tcc_emu::record(cudaErrorInvalidValue);
  *exec = new tcc_emu::Graph(*graph);
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st) {
  if (!exec)
    return tcc_emu::record(cudaErrorInvalidValue);
  return tcc_emu::record(tcc_emu::enqueue(st, [exec]() {
    for (const auto &w : exec->work)
      w();
  }));
}

/// The emulated machine has TCC_CUDA_EMU_DEVICES devices (default 8, as a
/// node of 8 GPUs), which share the host's memory.
inline cudaError_t cudaGetDeviceCount(int *count) {
  if (cudaError_t e = cudaFree(nullptr))
    return e;
  const char *n = std::getenv("TCC_CUDA_EMU_DEVICES");
  *count = n && std::atoi(n) >= 0 ? std::atoi(n) : 8;
  return *count > 0 ? cudaSuccess : tcc_emu::record(cudaErrorNoDevice);
}
inline cudaError_t cudaSetDevice(int dev) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count))
    return e;
  if (dev < 0 || dev >= count)
    return tcc_emu::record(cudaErrorInvalidDevice);
  tcc_emu::state().device = dev;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *dev) {
  *dev = tcc_emu::state().device;
  return cudaFree(nullptr);
}

// Events record the host clock when the stream reaches them.
namespace tcc_emu {
struct Event {
  double ms = 0.0;
  Stream *stream = nullptr; // where it was last recorded (null: complete)
  uint64_t seq = 0;         // the stream's work item it completes after
  // Recorded in a capture: the capture's number (0: none), the capturing
  // stream and its count of captured items then.
  uint64_t capture = 0;
  Stream *capture_stream = nullptr;
  uint64_t capture_seq = 0;
};
/// Whether stream st's work goes into the capture under way.
inline bool captured(Stream *st) {
  return state().capturing && st && (st == state().capturing || st->joined);
}
inline double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
} // namespace tcc_emu
typedef tcc_emu::Event *cudaEvent_t;
inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new tcc_emu::Event;
  return cudaSuccess;
}
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st = nullptr) {
  const bool in_capture = tcc_emu::captured(st);
  cudaError_t r = tcc_emu::record(tcc_emu::enqueue(st, [e]() { e->ms = tcc_emu::now_ms(); }));
  if (r != cudaSuccess)
    return r;
  if (in_capture) {
    e->capture = tcc_emu::state().capture_id;
    e->capture_stream = st;
    e->capture_seq = st->captured;
  } else {
    e->capture = 0;
    e->stream = st;
    e->seq = st ? st->issued : 0;
  }
  return r;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (cudaError_t r = tcc_emu::sync_allowed())
    return r;
  if (e->stream)
    tcc_emu::run_until(e->stream, e->seq);
  return cudaSuccess;
}
/// Work on st after this waits for the work before e's last record. An
/// event never recorded is complete. During a capture, an event recorded in
/// it orders captured work (the replay keeps the capture's order, so the
/// wait adds nothing to it) and makes a stream outside the capture join it;
/// a capturing stream waiting on an event recorded outside the capture
/// fails and invalidates it (cudaErrorStreamCaptureIsolation).
inline cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned = 0) {
  if (!e)
    return tcc_emu::record(cudaErrorInvalidResourceHandle);
  tcc_emu::State &s = tcc_emu::state();
  if (s.capturing && e->capture && e->capture == s.capture_id) {
    if (!st)
      return tcc_emu::record(cudaErrorStreamCaptureImplicit);
    if (!tcc_emu::captured(st)) {
      st->joined = true;
      st->captured = st->rejoined = 0;
      s.forks.push_back(st);
    }
    if (e->capture_stream != st)
      e->capture_stream->rejoined = std::max(e->capture_stream->rejoined, e->capture_seq);
    return cudaSuccess;
  }
  if (tcc_emu::captured(st)) {
    s.capture_invalid = true;
    return tcc_emu::record(cudaErrorStreamCaptureIsolation);
  }
  if (!e->stream || e->stream == st)
    return cudaSuccess;
  tcc_emu::Stream *src = e->stream;
  const uint64_t seq = e->seq;
  return tcc_emu::record(tcc_emu::enqueue(st, [src, seq]() { tcc_emu::run_until(src, seq); }));
}
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = static_cast<float>(b->ms - a->ms);
  return cudaSuccess;
}

#endif // TCC_CUDA_EMU_H
