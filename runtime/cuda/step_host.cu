//===- step_host.cu - the fixed half of a CUDA step ----------------*- C++ -*-===//
//
// The tcc_step ABI's entry points (runtime/tcc_step.h) for every CUDA step,
// over the tables and functions of the generated half (step_host.h). Built
// with nvcc for a GPU, or with the host compiler and -DTCC_CUDA_EMU against
// runtime/cuda/emu.
//
//===----------------------------------------------------------------------===//
#include "step_host.h"
#include "step_state.cuh"

#include "comm.cuh"
#include "gemm.cuh"
#include "host_tier.cuh"
#include "optimizer.cuh"
#include "staging.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tcc::cuda::host {

int g_prof = 0;
double *g_scratch = nullptr;

const StepDesc &desc() {
  static const StepDesc &d = generated_step();
  return d;
}

// Shared with step_comm.cu (step_state.cuh).
char *g_arena = nullptr;
int g_graph_mode = -1; // the micro-step as a CUDA graph: -1 undecided, 0 off, 1 on
cudaGraphExec_t g_graph = nullptr;
GradReduce g_comm; // data parallelism: the gradient all-reduce (comm.cuh)
std::vector<cudaEvent_t> g_prof_events; // TCC_CUDA_PROFILE and trace marks (below)
tcc_step_trace_hook g_hook = nullptr;

namespace {

uint64_t g_baseline = 0, g_peak = 0;
bool g_params_dirty = false;
int g_graph_calls = 0;
uint64_t g_graph_launches = 0; // micro-steps run as the graph (TCC_HOST_TIER_STATS)
void *g_graph_arena = nullptr;
// The optimizer's tables: every trainable parameter's gradient (the norm),
// and the rows the device updates (g_table: those not in the host tier).
ApplyTensor *g_norm_table = nullptr, *g_table = nullptr;
int64_t *g_norm_chunks = nullptr, *g_chunks = nullptr;
int64_t g_norm_nchunks = 0, g_nchunks = 0;
std::vector<ApplyTensor> g_rows, g_norm_rows;
std::vector<int> g_row_param; // g_rows[i]'s parameter
HostTier g_host;              // host_tier.cuh: the host buffer and its rows
bool g_host_dirty = false;    // masters written on the host: refresh the fp16 copies
InputStaging g_staging; // the next micro-step's inputs (staging.cuh)

// TCC_CUDA_PROFILE=1: a CUDA event after each op of the micro-step
// (g_prof_events); at close, the ops that took the most time (event pairs,
// so launch gaps count to the next op). Not with CUDA graphs. A trace hook
// (tcc-run --trace, g_hook) uses the same events, and is called with each
// mark's time when a micro-step ends.
std::vector<double> g_prof_ms;
int64_t g_prof_steps = 0;
bool g_prof_warmed = false; // the first micro-step ran (it is not counted)
bool g_profile = false; // TCC_CUDA_PROFILE=1
void *g_hook_ctx = nullptr;
// tcc-run --check-numerics: called at each mark after the stream has
// caught up with it (the body then runs op by op, without graphs).
tcc_step_check_hook g_check = nullptr;
void *g_check_ctx = nullptr;

int marks() { return desc().info->num_ops + 1; }

// Whether the body calls prof_mark at its marks: to time them (profile,
// trace) or to check the numerics after them.
void update_prof() { g_prof = g_profile || g_hook || g_check ? 1 : 0; }

uint64_t total_input_bytes() {
  uint64_t n = 0;
  for (int i = 0; i < desc().info->num_inputs; ++i)
    n += desc().info->inputs[i].bytes;
  return n;
}

// The events of the marks, created once.
bool make_events() {
  if (static_cast<int>(g_prof_events.size()) == marks())
    return true;
  g_prof_events.assign(marks(), nullptr);
  for (cudaEvent_t &e : g_prof_events)
    if (cudaEventCreate(&e) != cudaSuccess) {
      for (cudaEvent_t x : g_prof_events)
        if (x)
          cudaEventDestroy(x);
      g_prof_events.clear();
      return false;
    }
  return true;
}

// How the micro-step runs, decided once from the environment: as a CUDA
// graph (the default; TCC_CUDA_GRAPHS=0, which tcc-run --no-cuda-graphs
// sets, turns it off) or op by op with an event after each op
// (TCC_CUDA_PROFILE=1, which turns graphs off unless TCC_CUDA_GRAPHS=1 asks
// for them); not both. A trace hook runs the micro-steps op by op while it
// is set, whatever the mode.
void decide_modes() {
  const char *graphs = std::getenv("TCC_CUDA_GRAPHS"), *prof = std::getenv("TCC_CUDA_PROFILE");
  const bool asked = graphs && std::strcmp(graphs, "1") == 0;
  g_graph_mode = graphs && std::strcmp(graphs, "0") == 0 ? 0 : 1;
  g_profile = prof && std::strcmp(prof, "1") == 0;
  if (g_profile && g_graph_mode == 1 && !asked)
    g_graph_mode = 0;
  if (g_profile && g_graph_mode == 1) {
    std::fprintf(stderr, "tcc step: note: TCC_CUDA_PROFILE needs the micro-step without CUDA graphs; not profiling\n");
    g_profile = false;
  }
  if (g_profile && !make_events())
    g_profile = false;
  if (g_profile) {
    g_prof_ms.assign(marks(), 0.0);
    g_prof_steps = 0;
    g_prof_warmed = false;
  }
  // A step with gradient accumulators in host memory runs op by op unless
  // TCC_CUDA_GRAPHS=1 asks for graphs: op by op, the host update of the
  // last optimizer step and the host adder overlap the micro-step, which
  // as a graph they do not (the capture itself takes the copies to the
  // host: their stream forks from the step's and joins it again,
  // host_tier.cuh). Which is faster has not been measured on a GPU.
  if (desc().num_host_grads > 0 && !asked)
    g_graph_mode = 0;
  // The capture does not take the gradient all-reduce's collectives, which
  // only the optimizer step's last micro-step queues.
  if (g_comm.open())
    g_graph_mode = 0;
  update_prof();
}

// The first micro-step is not counted: it pays once for loading the
// kernels' modules and cuBLASLt's first calls (on an H200, 140 ms in GPT-2
// small's first GEMM, more than two whole micro-steps).
void prof_collect() {
  if (!g_prof_warmed) {
    g_prof_warmed = true;
    return;
  }
  for (int k = 1; k < marks(); ++k) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, g_prof_events[k - 1], g_prof_events[k]) == cudaSuccess)
      g_prof_ms[k] += ms;
  }
  ++g_prof_steps;
}

void prof_report() {
  if (!g_prof_steps) {
    if (g_prof_warmed)
      std::fprintf(stderr, "tcc step profile: nothing to report: the first micro-step is a warm-up and is not "
                           "counted; run two or more\n");
    return;
  }
  const int n = marks();
  std::vector<int> order;
  double total = 0.0;
  for (int k = 1; k < n; ++k) {
    order.push_back(k);
    total += g_prof_ms[k];
  }
  std::sort(order.begin(), order.end(), [](int a, int b) { return g_prof_ms[a] > g_prof_ms[b]; });
  std::fprintf(stderr, "tcc step profile: %lld micro-steps after a warm-up one, %.3f ms per micro-step in %d timed ops; "
               "the most expensive:\n",
               (long long)g_prof_steps, total / g_prof_steps, n - 1);
  for (size_t i = 0; i < order.size() && i < 30; ++i) {
    const int k = order[i];
    std::fprintf(stderr, "  %9.3f ms %5.1f%%  #%-4d %s\n", g_prof_ms[k] / g_prof_steps,
                 total > 0 ? 100.0 * g_prof_ms[k] / total : 0.0, k, desc().info->ops[k - 1]);
  }
}

void sample_memory() {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess)
    return;
  uint64_t used = t - f;
  if (used > g_baseline && used - g_baseline > g_peak)
    g_peak = used - g_baseline;
}

int fail(cudaError_t e, const char *what, char *err, uint64_t len) {
  if (err && len)
    std::snprintf(err, len, "%s: %s (%s)", cudaGetErrorName(e), what, cudaGetErrorString(e));
  return 1;
}

} // namespace

int check_device(const char *what) {
  cudaError_t e = cudaStreamSynchronize(stream());
  if (e == cudaSuccess)
    e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "tcc step: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return 5;
  }
  if (desc().read_error_flag()) {
    std::fprintf(stderr, "tcc step: %s: an index (token id or label) is out of range\n", what);
    return 1;
  }
  return 0;
}

namespace {

int host_update_failed(cudaError_t e, const char *where);

// Runs the body as a CUDA graph captured (unless TCC_CUDA_GRAPHS=0) on the
// second call (the first creates the GEMM plans) and replayed after; a
// capture that fails falls back to direct launches, with a note.
int launch_graph() {
  if (int rc = host_update_failed(g_host.before_graph(), "micro_step"))
    return rc;
  cudaError_t e = cudaGraphLaunch(g_graph, stream());
  if (e == cudaSuccess) {
    g_host.after_graph();
    ++g_graph_launches;
    return 0;
  }
  std::fprintf(stderr, "tcc step: launching the micro-step's CUDA graph: %s (%s)\n", cudaGetErrorName(e),
               cudaGetErrorString(e));
  return 5;
}

/// The micro-step's kernels, queued on the step's stream, which waits at the
/// end for the copies to host accumulators, if any.
int queue_body(void *arena_) {
  int rc = desc().micro_step_body(arena_);
  if (cudaError_t e = g_host.join_copies(stream())) {
    std::fprintf(stderr, "tcc step: waiting for the copies of gradients to the host: %s (%s)\n",
                 cudaGetErrorName(e), cudaGetErrorString(e));
    return rc ? rc : 5;
  }
  return rc;
}

int run_micro_step(void *arena_) {
  // A host update in flight goes on while the body runs op by op (its
  // tcck.await_weights); apply starts one only when the body runs so.
  if (g_graph_mode == 0 || g_hook || g_check || g_graph_calls++ == 0 || g_host.in_flight())
    return queue_body(arena_);
  if (g_graph && g_graph_arena == arena_)
    return launch_graph();
  if (g_graph) {
    cudaGraphExecDestroy(g_graph);
    g_graph = nullptr;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal);
  int rc = e == cudaSuccess ? queue_body(arena_) : 0;
  if (e == cudaSuccess)
    e = cudaStreamEndCapture(stream(), &graph);
  if (e == cudaSuccess && rc == 0)
    e = cudaGraphInstantiate(&g_graph, graph, 0);
  if (graph)
    cudaGraphDestroy(graph);
  if (e != cudaSuccess || rc != 0) {
    std::fprintf(stderr, "tcc step: note: capturing the micro-step as a CUDA graph failed (%s); "
                         "running it without graphs\n",
                 cudaGetErrorName(e));
    cudaGetLastError();
    g_graph = nullptr;
    g_graph_mode = 0;
    return queue_body(arena_);
  }
  g_graph_arena = arena_;
  return launch_graph();
}

} // namespace

int prof_mark(int k) {
  if (g_profile || g_hook)
    cudaEventRecord(g_prof_events[k], stream());
  if (!g_check)
    return 0;
  if (cudaError_t e = cudaStreamSynchronize(stream())) {
    std::fprintf(stderr, "tcc step: checking numerics after op %d: %s (%s)\n", k, cudaGetErrorName(e),
                 cudaGetErrorString(e));
    return 5;
  }
  return g_check(g_check_ctx, k) != 0 ? TCC_STEP_STOPPED : 0;
}

// A failure is reported when the micro-step ends (check_device).
void host_grad_copy(int k, const void *src) {
  if (cudaError_t e = g_host.copy_grad(k, src, stream()))
    std::fprintf(stderr, "tcc step: copying a gradient to the host: %s (%s)\n", cudaGetErrorName(e),
                 cudaGetErrorString(e));
}
void host_grad_wait(int k) { g_host.wait_grad(k, stream()); }

namespace {
void swap_failed(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    std::fprintf(stderr, "tcc step: %s a swapped activation: %s (%s)\n", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}
} // namespace
void swap_out(int k, const void *src) { swap_failed(g_host.swap_out(k, src, stream()), "copying out"); }
void swap_out_wait(int k) { swap_failed(g_host.wait_swap_out(k, stream()), "waiting for the copy out of"); }
void swap_in(int k, void *dst) { swap_failed(g_host.swap_in(k, dst, stream()), "copying back"); }
void swap_in_wait(int k) { swap_failed(g_host.wait_swap_in(k, stream()), "waiting for the copy back of"); }
namespace {
/// Reports a failure of the host update (host_tier.cuh) seen `where`;
/// returns 5, the step's code for it, or 0 for none.
int host_update_failed(cudaError_t e, const char *where) {
  if (e == cudaSuccess)
    return 0;
  std::fprintf(stderr, "tcc step: %s: the host update: %s (%s)\n", where, cudaGetErrorName(e), cudaGetErrorString(e));
  return 5;
}
} // namespace

void host_await(int param) {
  if (!g_host.in_flight())
    return;
  for (size_t r = 0; r < g_host.rows.size(); ++r)
    if (g_host.rows[r].param == param) {
      host_update_failed(g_host.await_row(static_cast<int>(r), stream()), "micro_step");
      return;
    }
}
void host_await_all() {
  if (g_host.in_flight())
    host_update_failed(g_host.await_all(stream()), "micro_step");
}
void grad_ready(float *acc, int64_t n) { g_comm.ready(acc, n, stream()); }

int gemm_failed() {
  std::fprintf(stderr, "tcc step: %s\n", last_error());
  return 4;
}

} // namespace tcc::cuda::host

using namespace tcc::cuda;
using namespace tcc::cuda::host;

TCC_EXPORT const tcc_step_info *tcc_step_get_info(void) { return desc().info; }

TCC_EXPORT int tcc_step_device_close(void *arena);

TCC_EXPORT int tcc_step_device_open(void **arena_out, char *err, uint64_t err_len) {
  const StepDesc &d = desc();
  *arena_out = nullptr;
  if (g_arena) {
    if (err && err_len)
      std::snprintf(err, err_len, "the step's arena is already open");
    return 1;
  }
  cudaError_t e = cudaFree(0);
  if (e != cudaSuccess)
    return fail(e, "cannot initialise CUDA (no GPU or no driver?)", err, err_len);
  size_t f = 0, t = 0;
  if ((e = cudaMemGetInfo(&f, &t)) != cudaSuccess)
    return fail(e, "cudaMemGetInfo", err, err_len);
  g_baseline = t - f;
  g_peak = 0;
#ifdef TCC_CUDA_EMU
  std::fprintf(stderr, "tcc step: note: built with --cuda-emulation: its CUDA code runs on the CPU\n");
#endif
  if ((e = cudaStreamCreateWithFlags(&stream(), cudaStreamNonBlocking)) != cudaSuccess)
    return fail(e, "cannot create a stream", err, err_len);
  char *arena = nullptr;
  const uint64_t arena_bytes = d.info->arena_bytes;
  if ((e = cudaMalloc((void **)&arena, arena_bytes + d.const_bytes)) != cudaSuccess) {
    char what[160];
    std::snprintf(what, sizeof what, "cannot allocate the step's arena of %llu bytes (%llu free of %llu)",
                  (unsigned long long)(arena_bytes + d.const_bytes), (unsigned long long)f,
                  (unsigned long long)t);
    cudaStreamDestroy(stream());
    stream() = 0;
    return fail(e, what, err, err_len);
  }
  cudaMemsetAsync(arena, 0, arena_bytes, stream());
  for (int i = 0; i < d.num_consts; ++i)
    if (d.consts[i].bytes)
      cudaMemcpyAsync(arena + arena_bytes + d.consts[i].offset, d.consts[i].host, d.consts[i].bytes,
                      cudaMemcpyHostToDevice, stream());
  set_workspace(d.workspace_offset >= 0 ? arena + d.workspace_offset : nullptr, d.workspace_bytes);
  g_arena = arena;
  if ((e = g_host.open(d.info->host_bytes)) != cudaSuccess) {
    char what[160];
    std::snprintf(what, sizeof what, "cannot allocate the step's pinned host buffer of %llu bytes",
                  (unsigned long long)d.info->host_bytes);
    tcc_step_device_close(arena);
    return fail(e, what, err, err_len);
  }
  g_rows.clear();
  g_norm_rows.clear();
  g_row_param.clear();
  for (int i = 0; i < d.num_apply; ++i) {
    const ApplyRow &r = d.apply[i];
    ApplyTensor a{};
    const bool grad_on_host = r.host == 2; // and its accumulator
    a.g = grad_on_host ? (float *)(g_host.buffer + r.g) : (float *)(arena + r.g);
    a.p16 = r.p16 == ~0ULL ? nullptr : (__half *)(arena + r.p16);
    a.n = r.n;
    a.weight_decay = 0.0f;
    if (!grad_on_host)
      g_norm_rows.push_back(a);
    if (r.host) {
      char *h = g_host.buffer;
      const bool bad = !h || !a.p16 || r.p + 4 * (uint64_t)r.n > g_host.bytes ||
                       r.s0 + 4 * (uint64_t)r.n > g_host.bytes || r.s1 + 4 * (uint64_t)r.n > g_host.bytes ||
                       (grad_on_host && r.g + 4 * (uint64_t)r.n > g_host.bytes);
      if (bad) {
        tcc_step_device_close(arena);
        if (err && err_len)
          std::snprintf(err, err_len, "the step's host row %d lies outside its host buffer", i);
        return 1;
      }
      g_host.rows.push_back({r.param, (float *)(h + r.p), (float *)(h + r.s0), d.adamw ? (float *)(h + r.s1) : nullptr,
                             a.g, a.p16, r.n, 0.0f, grad_on_host});
      continue;
    }
    a.p = (float *)(arena + r.p);
    a.s0 = (float *)(arena + r.s0);
    a.s1 = (float *)(arena + r.s1);
    g_rows.push_back(a);
    g_row_param.push_back(r.param);
  }
  if (d.num_apply) {
    const int nn = static_cast<int>(g_norm_rows.size()), nd = static_cast<int>(g_rows.size());
    if (nn) {
      g_norm_table = upload_table(g_norm_rows.data(), nn);
      g_norm_chunks = upload_chunk_starts(g_norm_rows.data(), nn, &g_norm_nchunks);
    }
    if (nd) {
      g_table = upload_table(g_rows.data(), nd);
      g_chunks = upload_chunk_starts(g_rows.data(), nd, &g_nchunks);
    }
    if ((nn && (!g_norm_table || !g_norm_chunks)) || (nd && (!g_table || !g_chunks))) {
      e = cudaGetLastError();
      tcc_step_device_close(arena);
      return fail(e, "cannot upload the optimizer's table", err, err_len);
    }
  }
  bool copies_fit = d.num_host_grads == 0 || g_host.active();
  for (int k = 0; k < d.num_host_grads && copies_fit; ++k)
    copies_fit = d.host_grads[k].n >= 0 && d.host_grads[k].acc <= g_host.bytes &&
                 4 * (uint64_t)d.host_grads[k].n <= g_host.bytes - d.host_grads[k].acc;
  for (int k = 0; k < d.num_swaps && copies_fit; ++k)
    copies_fit = g_host.active() && d.swaps[k].host <= g_host.bytes && d.swaps[k].bytes <= g_host.bytes - d.swaps[k].host;
  if (!copies_fit) {
    tcc_step_device_close(arena);
    if (err && err_len)
      std::snprintf(err, err_len, "the step's host gradient copies or swapped activations lie outside its host buffer");
    return 1;
  }
  if ((e = g_host.open_staging()) != cudaSuccess ||
      (d.num_host_grads && (e = g_host.open_copies(d.host_grads, d.num_host_grads)) != cudaSuccess) ||
      (d.num_swaps && (e = g_host.open_swaps(d.swaps, d.num_swaps)) != cudaSuccess)) {
    tcc_step_device_close(arena);
    return fail(e, "cannot allocate the host update's pinned staging buffers", err, err_len);
  }
  if ((e = g_staging.open(total_input_bytes())) != cudaSuccess) {
    tcc_step_device_close(arena);
    return fail(e, "cannot allocate the input staging buffers", err, err_len);
  }
  if ((e = cudaMalloc((void **)&g_scratch, sizeof(double))) != cudaSuccess ||
      (e = cudaStreamSynchronize(stream())) != cudaSuccess) {
    tcc_step_device_close(arena);
    return fail(e, "initialising the arena", err, err_len);
  }
  sample_memory();
  *arena_out = arena;
  return 0;
}

TCC_EXPORT int tcc_step_device_close(void *arena) {
  if (!arena || arena != g_arena)
    return 1;
  // A failed all-reduce may hold the step's stream (which waits for it):
  // abort the communicator before waiting for anything.
  if (g_comm.failed())
    g_comm.close();
  cudaStreamSynchronize(stream());
  g_comm.close();
  if (g_profile)
    prof_report();
  for (cudaEvent_t e : g_prof_events)
    cudaEventDestroy(e);
  g_prof_events.clear();
  g_hook = nullptr;
  g_prof = 0;
  g_staging.close();
  host_update_failed(g_host.join(), "close"); // the last update, if it still runs
  // TCC_HOST_TIER_STATS=1: how much of the host update overlapped the
  // next micro-step (the tests check it ran that way).
  if (const char *st = std::getenv("TCC_HOST_TIER_STATS"); st && std::strcmp(st, "1") == 0 && g_host.active())
    std::fprintf(stderr, "tcc step: host update: %llu chunks updated, %llu of them while the next micro-step was queued; "
                 "%llu micro-steps run as a CUDA graph\n",
                 (unsigned long long)g_host.updated_chunks, (unsigned long long)g_host.overlapped_chunks,
                 (unsigned long long)g_graph_launches);
  g_host.close();
  g_host_dirty = false;
  for (void *t : {(void *)g_table, (void *)g_chunks, (void *)g_norm_table, (void *)g_norm_chunks})
    if (t)
      cudaFree(t);
  g_norm_table = nullptr;
  g_norm_chunks = nullptr;
  close_shard();
  if (g_scratch)
    cudaFree(g_scratch);
  if (g_graph)
    cudaGraphExecDestroy(g_graph);
  g_graph = nullptr;
  g_graph_arena = nullptr;
  g_graph_calls = 0;
  g_graph_launches = 0;
  g_table = nullptr;
  g_chunks = nullptr;
  g_scratch = nullptr;
  cudaFree(arena);
  g_arena = nullptr;
  cudaStreamDestroy(stream());
  stream() = 0;
  return 0;
}

TCC_EXPORT int tcc_step_copy_in(void *arena, uint64_t offset, const void *src, uint64_t bytes, char *err,
                                uint64_t err_len) {
  if (cudaError_t e = g_host.join()) // a host update in flight writes the fp16 copies
    return fail(e, "finishing the host update", err, err_len);
  const tcc_step_info &info = *desc().info;
  if (offset > info.arena_bytes || bytes > info.arena_bytes - offset) {
    std::snprintf(err, err_len, "copy outside the arena");
    return 1;
  }
  cudaError_t e = cudaMemcpyAsync((char *)arena + offset, src, bytes, cudaMemcpyHostToDevice, stream());
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream());
  if (e != cudaSuccess)
    return fail(e, "copy into the arena", err, err_len);
  for (int i = 0; i < info.num_params; ++i)
    if (info.params[i].location == TCC_LOCATION_ARENA && offset < info.params[i].offset + info.params[i].bytes &&
        info.params[i].offset < offset + bytes)
      g_params_dirty = true;
  return 0;
}

// The host buffer is plain pinned memory: the copies are memcpy, after the
// host update that last wrote it (tcc_step_apply returns once it is done).
static bool host_range_ok(const void *arena, uint64_t offset, uint64_t bytes, char *err, uint64_t err_len) {
  const uint64_t size = desc().info->host_bytes;
  if (arena && arena == g_arena && g_host.active() && offset <= size && bytes <= size - offset)
    return true;
  std::snprintf(err, err_len, "copy outside the step's host buffer");
  return false;
}

TCC_EXPORT int tcc_step_host_copy_in(void *arena, uint64_t offset, const void *src, uint64_t bytes, char *err,
                                     uint64_t err_len) {
  const tcc_step_info &info = *desc().info;
  if (!host_range_ok(arena, offset, bytes, err, err_len))
    return 1;
  if (cudaError_t e = g_host.join())
    return fail(e, "finishing the host update", err, err_len);
  std::memcpy(g_host.buffer + offset, src, bytes);
  for (int i = 0; i < info.num_params; ++i)
    if (info.params[i].location == TCC_LOCATION_HOST && offset < info.params[i].offset + info.params[i].bytes &&
        info.params[i].offset < offset + bytes)
      g_host_dirty = true;
  return 0;
}

TCC_EXPORT int tcc_step_host_copy_out(const void *arena, uint64_t offset, void *dst, uint64_t bytes, char *err,
                                      uint64_t err_len) {
  if (!host_range_ok(arena, offset, bytes, err, err_len))
    return 1;
  if (cudaError_t e = g_host.join())
    return fail(e, "finishing the host update", err, err_len);
  std::memcpy(dst, g_host.buffer + offset, bytes);
  return 0;
}

namespace tcc::cuda::host {
namespace {
// The fp16 working copies of the host rows, from their masters.
int refresh_host_rows(const char *what) {
  if (!g_host.active() || g_host.rows.empty())
    return 0;
  if (cudaError_t e = g_host.refresh()) {
    std::fprintf(stderr, "tcc step: %s: refreshing the fp16 weights from host memory: %s (%s)\n", what,
                 cudaGetErrorName(e), cudaGetErrorString(e));
    return 5;
  }
  g_host_dirty = false;
  return 0;
}
} // namespace
} // namespace tcc::cuda::host

TCC_EXPORT int tcc_step_copy_out(const void *arena, uint64_t offset, void *dst, uint64_t bytes, char *err,
                                 uint64_t err_len) {
  if (cudaError_t e = g_host.join()) // a host update in flight writes the fp16 copies
    return fail(e, "finishing the host update", err, err_len);
  const tcc_step_info &info = *desc().info;
  if (offset > info.arena_bytes || bytes > info.arena_bytes - offset) {
    std::snprintf(err, err_len, "copy outside the arena");
    return 1;
  }
  cudaError_t e = cudaMemcpyAsync(dst, (const char *)arena + offset, bytes, cudaMemcpyDeviceToHost, stream());
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream());
  if (e != cudaSuccess)
    return fail(e, "copy out of the arena", err, err_len);
  return 0;
}

TCC_EXPORT int tcc_step_device_memory(uint64_t *peak, uint64_t *total) {
  sample_memory();
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  if (peak)
    *peak = g_peak;
  if (total)
    *total = t;
  return 0;
}

TCC_EXPORT int tcc_step_zero_grads(void *arena) {
  if (int rc = host_update_failed(g_host.join(), "zero_grads")) // its downloads read the accumulators
    return rc;
  desc().zero_grads(static_cast<char *>(arena));
  g_host.zero_grads();
  return 0;
}

TCC_EXPORT int tcc_step_init(void *arena_) {
  g_host.join(); // writes the masters and state below; an update's failure no longer matters
  const StepDesc &d = desc();
  char *arena = static_cast<char *>(arena_);
  uint64_t at = 0;
  for (int i = 0; i < d.info->num_params; ++i) {
    const tcc_tensor_desc &p = d.info->params[i];
    if (p.location == TCC_LOCATION_HOST) {
      if (!g_host.active())
        return 1;
      if (!d.info->weights_embedded)
        std::memset(g_host.buffer + p.offset, 0, p.bytes);
      else
        std::memcpy(g_host.buffer + p.offset, d.weights + at, p.bytes);
    } else if (!d.info->weights_embedded) {
      cudaMemsetAsync(arena + p.offset, 0, p.bytes, stream());
    } else {
      cudaMemcpyAsync(arena + p.offset, d.weights + at, p.bytes, cudaMemcpyHostToDevice, stream());
    }
    at += p.bytes;
  }
  // The host rows' optimizer state starts at zero, as the arena's does.
  for (int i = 0; i < d.info->num_state; ++i)
    if (d.info->state[i].location == TCC_LOCATION_HOST && g_host.active())
      std::memset(g_host.buffer + d.info->state[i].offset, 0, d.info->state[i].bytes);
  d.init_rng(arena);
  tcc_step_zero_grads(arena_);
  d.refresh_shadows(arena);
  g_params_dirty = false;
  if (int rc = check_device("init"))
    return rc;
  return refresh_host_rows("init");
}

TCC_EXPORT int tcc_step_apply(void *arena_, tcc_optim_args *a) {
  const StepDesc &d = desc();
  if (!d.info->has_backward)
    return 3;
  // The last update, had no micro-step run since (the norm reads the
  // accumulators it zeroes).
  if (int rc = host_update_failed(g_host.join(), "apply"))
    return rc;
  if (d.shards)
    return 7; // ZeRO-1: tcc_step_shard_sumsq and tcc_step_shard_apply
  // The world's gradients, summed while the last micro-step ran (comm.cuh):
  // the step's stream waits for them.
  if (std::string err = g_comm.finish(stream()); !err.empty()) {
    std::fprintf(stderr, "tcc step: apply: %s\n", err.c_str());
    return 6;
  }
  if (d.num_apply == 0)
    return check_device("apply");
  // The norm's share of the device accumulators, and of the host ones.
  const int nn = static_cast<int>(g_norm_rows.size());
  const double sq = (nn ? sum_squares_all(g_norm_table, g_norm_chunks, nn, g_norm_nchunks, g_scratch) : 0.0) +
                    g_host.grad_sum_squares();
  const double unscale = a->loss_scale > 0.0 ? 1.0 / a->loss_scale : 1.0;
  const double norm = std::sqrt(sq) * unscale;
  a->grad_norm = norm;
  // A CUDA error makes the sum NaN too: report it, not a skipped step.
  if (int rc = check_device("apply"))
    return rc;
  if (!std::isfinite(norm)) {
    tcc_step_zero_grads(arena_);
    if (int rc = check_device("apply"))
      return rc;
    return 2;
  }
  double clip = 1.0;
  if (a->clip_norm > 0.0 && a->clip_norm / (norm + 1e-6) < 1.0)
    clip = a->clip_norm / (norm + 1e-6);
  auto decay_of = [&](int param) {
    return (a->decay && !a->decay[param]) ? 0.0f : (float)a->weight_decay;
  };
  bool changed = false;
  const int nd = static_cast<int>(g_rows.size());
  for (int i = 0; i < nd; ++i) {
    float wd = decay_of(g_row_param[i]);
    if (g_rows[i].weight_decay != wd) {
      g_rows[i].weight_decay = wd;
      changed = true;
    }
  }
  if (changed)
    cudaMemcpyAsync(g_table, g_rows.data(), sizeof(ApplyTensor) * nd, cudaMemcpyHostToDevice, stream());
  const double mult = clip * unscale;
  // The device's rows on the step's stream; the host's, meanwhile, on the
  // host (host_tier.cuh), with the same constants: their gradients come
  // down from here, not after the device update.
  if (!g_host.rows.empty())
    if (cudaError_t e = g_host.after(stream())) {
      std::fprintf(stderr, "tcc step: apply: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
      return 5;
    }
  if (nd && d.adamw)
    adamw_multi(g_table, g_chunks, nd, g_nchunks, a->lr, a->beta1, a->beta2, a->eps, a->step, mult);
  else if (nd)
    sgd_multi(g_table, g_chunks, nd, g_nchunks, a->lr, a->momentum, a->nesterov != 0, a->step, mult);
  if (!g_host.rows.empty()) {
    for (HostRow &r : g_host.rows)
      r.weight_decay = decay_of(r.param);
    const int threads = g_host.threads;
    // The update overlaps the next micro-step when that runs op by op (no
    // CUDA graph): its kernels wait for the parameters they read
    // (tcck.await_weights) while the host updates the ones after.
    // TCC_HOST_OVERLAP=0 updates everything here.
    const char *ov = std::getenv("TCC_HOST_OVERLAP");
    const bool overlap = (g_graph_mode == 0 || g_hook) && !(ov && std::strcmp(ov, "0") == 0);
    std::function<void(const tcc::host::OptTensor &)> body;
    if (d.adamw) {
      const tcc::host::AdamConstants c = tcc::host::adam_constants(a->lr, a->beta1, a->beta2, a->eps, a->step, mult);
      body = [c, threads](const tcc::host::OptTensor &t) { tcc::host::adamw(&t, 1, c, threads); };
    } else {
      const tcc::host::SgdConstants c =
          tcc::host::sgd_constants(a->lr, a->momentum, a->nesterov != 0, a->step, mult);
      body = [c, threads](const tcc::host::OptTensor &t) { tcc::host::sgd(&t, 1, c, threads); };
    }
    cudaError_t e = overlap ? g_host.begin(std::move(body)) : g_host.update(std::move(body));
    if (int rc = host_update_failed(e, "apply"))
      return rc;
  }
  return check_device("apply");
}

TCC_EXPORT int tcc_step_stage_inputs(void *arena, const void *src, uint64_t bytes, char *err, uint64_t err_len) {
  if (!arena || arena != g_arena) {
    std::snprintf(err, err_len, "the arena is not the open one");
    return 1;
  }
  if (bytes != g_staging.bytes) {
    std::snprintf(err, err_len, "staging %llu bytes of inputs, but the step's inputs take %llu",
                  (unsigned long long)bytes, (unsigned long long)g_staging.bytes);
    return 1;
  }
  if (g_staging.staged) {
    std::snprintf(err, err_len, "inputs are already staged for the next micro-step");
    return 1;
  }
  if (cudaError_t e = g_staging.stage(src))
    return fail(e, "uploading the next inputs", err, err_len);
  return 0;
}

TCC_EXPORT int tcc_step_micro_step_begin(void *arena_, double grad_scale) {
  const StepDesc &d = desc();
  char *arena = static_cast<char *>(arena_);
  if (g_staging.staged) {
    if (cudaError_t e = g_staging.consume(arena, d.info->inputs, d.info->num_inputs, stream())) {
      std::fprintf(stderr, "tcc step: taking the staged inputs: %s (%s)\n", cudaGetErrorName(e),
                   cudaGetErrorString(e));
      return 5;
    }
  }
  if (g_params_dirty) {
    d.refresh_shadows(arena);
    g_params_dirty = false;
  }
  if (g_host_dirty)
    if (int rc = refresh_host_rows("micro_step"))
      return rc;
  d.seed_fill(arena, grad_scale);
  if (g_graph_mode < 0)
    decide_modes();
  return run_micro_step(arena_);
}

TCC_EXPORT int tcc_step_micro_step_end(void *arena_) {
  (void)arena_;
  // The last optimizer step's host update, had the body left any of it.
  if (int rc = host_update_failed(g_host.settle(), "micro_step"))
    return rc;
  int rc = check_device("micro_step");
  if (rc == 0)
    if (cudaError_t e = g_host.accumulate()) {
      std::fprintf(stderr, "tcc step: micro_step: adding gradients into host memory: %s (%s)\n",
                   cudaGetErrorName(e), cudaGetErrorString(e));
      rc = 5;
    }
  if (rc == 0 && g_profile)
    prof_collect();
  if (rc == 0 && g_hook)
    for (int k = 0; k < marks(); ++k) {
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, g_prof_events[0], g_prof_events[k]) != cudaSuccess)
        ms = -1000.0f; // the mark's time is unknown
      g_hook(g_hook_ctx, k, ms / 1000.0);
    }
  sample_memory();
  return rc;
}

TCC_EXPORT int tcc_step_set_trace_hook(tcc_step_trace_hook hook, void *ctx) {
  if (hook && !make_events())
    return 1;
  g_hook = hook;
  g_hook_ctx = ctx;
  g_comm.set_timing(hook != nullptr);
  update_prof();
  return 0;
}

TCC_EXPORT int tcc_step_set_check_hook(tcc_step_check_hook hook, void *ctx) {
  g_check = hook;
  g_check_ctx = ctx;
  update_prof();
  return 0;
}

TCC_EXPORT const tcc_op_value *tcc_step_op_values(int32_t *count) {
  *count = desc().num_op_values;
  return desc().op_values;
}

TCC_EXPORT int tcc_step_micro_step(void *arena_, double grad_scale) {
  if (int rc = tcc_step_micro_step_begin(arena_, grad_scale))
    return rc;
  return tcc_step_micro_step_end(arena_);
}

TCC_EXPORT int tcc_step_set_device(int32_t device, char *err, uint64_t err_len) {
  if (g_arena) {
    std::snprintf(err, err_len, "the step's arena is already open on a device");
    return 1;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return fail(e, "cannot count the GPUs (no GPU or no driver?)", err, err_len);
  // A rank that sees one GPU (CUDA_VISIBLE_DEVICES per rank, srun
  // --gpus-per-task=1) takes it, whatever its local rank.
  if (count == 1)
    device = 0;
  if (device < 0 || device >= count) {
    std::snprintf(err, err_len, "GPU %d asked for, but this machine has %d (one rank per GPU: start at most %d "
                  "ranks per machine)", (int)device, count, count);
    return 1;
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess)
    return fail(e, "cudaSetDevice", err, err_len);
  return 0;
}
