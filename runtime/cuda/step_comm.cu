//===- step_comm.cu - a CUDA step's communicator and ZeRO-1 --------*- C++ -*-===//
//
// The fixed half's entry points for data parallelism (runtime/tcc_step.h):
// the NCCL communicator (tcc_step_comm_*), ZeRO-1's sharded update
// (tcc_step_shard_*), and tcc-run's collectives over the communicator
// (tcc_step_comm_api). step_host.cu opens the arena and runs the
// micro-step; what the two share is in step_state.cuh.
//
//===----------------------------------------------------------------------===//
#include "step_state.cuh"

#include "optimizer.cuh"
#include "tcc_comm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace tcc::cuda;
using namespace tcc::cuda::host;

namespace tcc::cuda::host {
namespace {
// ZeRO-1 (StepDesc::shards): this rank's parts of the parameters, in its
// chunk of the flat space, with their gradients' world sums and state; set
// when the communicator opens, which names the rank.
MultiTensor g_shard;
std::vector<ApplyTensor> g_shard_rows;
std::vector<int> g_shard_param; // g_shard_rows[i]'s parameter
int g_shard_rank = -1;

/// ZeRO-1: the update's table for `rank`'s chunk of the flat space (every
/// parameter's part in it), and the communicator's reduce-scatter. False on
/// a CUDA error.
bool open_shard(int rank) {
  const StepDesc &d = desc();
  const tcc_shard_info &sh = *d.shards;
  const int64_t lo = static_cast<int64_t>(rank) * static_cast<int64_t>(sh.chunk_elems);
  const int64_t hi = lo + static_cast<int64_t>(sh.chunk_elems);
  float *grads = reinterpret_cast<float *>(g_arena + sh.shard_grads_offset);
  float *s0 = reinterpret_cast<float *>(g_arena + d.shard_s0);
  float *s1 = d.adamw ? reinterpret_cast<float *>(g_arena + d.shard_s1) : nullptr;
  g_shard_rows.clear();
  g_shard_param.clear();
  uint64_t elements = 0;
  for (int i = 0; i < d.num_shard_rows; ++i) {
    const ShardRow &r = d.shard_rows[i];
    elements += static_cast<uint64_t>(r.n);
    const int64_t a = std::max(r.flat, lo), b = std::min(r.flat + r.n, hi);
    if (a >= b)
      continue;
    ApplyTensor t{};
    t.p = reinterpret_cast<float *>(g_arena + r.p) + (a - r.flat);
    t.p16 = r.p16 == ~0ULL ? nullptr : reinterpret_cast<__half *>(g_arena + r.p16) + (a - r.flat);
    t.g = grads + (a - lo);
    t.s0 = s0 + (a - lo);
    t.s1 = s1 ? s1 + (a - lo) : nullptr;
    t.n = b - a;
    g_shard_rows.push_back(t);
    g_shard_param.push_back(r.param);
  }
  g_shard_rank = rank;
  g_comm.shard(reinterpret_cast<float *>(g_arena + sh.grads_offset), grads, sh.chunk_elems, elements);
  return g_shard.upload(g_shard_rows.data(), static_cast<int>(g_shard_rows.size()));
}
} // namespace

void close_shard() {
  g_shard.reset();
  g_shard_rows.clear();
  g_shard_param.clear();
  g_shard_rank = -1;
}
} // namespace tcc::cuda::host

TCC_EXPORT int tcc_step_comm_id(unsigned char *id, char *err, uint64_t err_len) {
  static_assert(sizeof(ncclUniqueId) == TCC_STEP_COMM_ID_BYTES, "NCCL's unique id is 128 bytes");
  if (std::string why = nccl().load(); !why.empty()) {
    std::snprintf(err, err_len, "%s", why.c_str());
    return 1;
  }
  ncclUniqueId u;
  if (ncclResult_t r = nccl().getUniqueId(&u)) {
    std::snprintf(err, err_len, "ncclGetUniqueId: %s", nccl().getErrorString(r));
    return 1;
  }
  std::memcpy(id, u.internal, sizeof u.internal);
  return 0;
}

TCC_EXPORT int tcc_step_comm_open(void *arena, const unsigned char *id, int32_t nranks, int32_t rank, char *err,
                                  uint64_t err_len) {
  if (!arena || arena != g_arena) {
    std::snprintf(err, err_len, "the arena is not the open one");
    return 1;
  }
  if (desc().num_host_grads > 0) {
    std::snprintf(err, err_len, "its gradient accumulators are in host memory (tcc --offload=all or a budget "
                  "that needs it), which the NCCL all-reduce does not reach yet; build it with "
                  "--offload=auto or =none and a larger --mem-budget");
    return 1;
  }
  if (g_graph_mode == 1 && g_graph) {
    std::snprintf(err, err_len, "the communicator opens before the first micro-step");
    return 1;
  }
  const StepDesc &d = desc();
  if (d.shards && nranks != d.shards->ranks) {
    std::snprintf(err, err_len, "its optimizer state is sharded across %d ranks (tcc --data-parallel=%d), not %d",
                  (int)d.shards->ranks, (int)d.shards->ranks, (int)nranks);
    return 1;
  }
  ncclUniqueId u;
  std::memcpy(u.internal, id, sizeof u.internal);
  if (std::string why = g_comm.open(u, nranks, rank); !why.empty()) {
    std::snprintf(err, err_len, "%s", why.c_str());
    return 1;
  }
  g_graph_mode = -1; // decided again, without graphs
  if (d.shards && !open_shard(rank)) {
    cudaError_t e = cudaGetLastError();
    std::snprintf(err, err_len, "%s: cannot upload the ZeRO-1 update's table", cudaGetErrorName(e));
    return 1;
  }
  return 0;
}

// ZeRO-1's entry points (runtime/tcc_step.h): every step exports them, and
// tcc_step_get_shards says whether this one is sharded.

TCC_EXPORT const tcc_shard_info *tcc_step_get_shards(void) { return desc().shards; }

TCC_EXPORT int tcc_step_shard_sumsq(void *arena, int32_t rank, double *sumsq) {
  const StepDesc &d = desc();
  if (!d.shards || !arena || arena != g_arena || rank != g_shard_rank)
    return 4;
  // The world's sums of this rank's chunk (the reduce-scatter queued after
  // the last micro-step); the accumulators then start the next optimizer
  // step at zero. Without it the shard would hold last step's sums.
  if (g_comm.open() && !g_comm.armed()) {
    std::fprintf(stderr, "tcc step: apply: the ZeRO-1 reduce-scatter was not armed "
                         "(tcc_step_comm_reduce_next before the optimizer step's last micro-step)\n");
    return 6;
  }
  if (std::string err = g_comm.finish(stream()); !err.empty()) {
    std::fprintf(stderr, "tcc step: apply: %s\n", err.c_str());
    return 6;
  }
  d.zero_grads(g_arena);
  *sumsq = g_shard.ntensors() ? sum_squares_all(g_shard.table(), g_shard.chunk_start(), g_shard.ntensors(),
                                                g_shard.nchunks(), g_scratch)
                              : 0.0;
  if (std::string err = g_comm.error(); !err.empty()) {
    std::fprintf(stderr, "tcc step: apply: %s\n", err.c_str());
    return 6;
  }
  return check_device("apply");
}

TCC_EXPORT int tcc_step_shard_apply(void *arena, int32_t rank, tcc_optim_args *a, double world_sumsq) {
  const StepDesc &d = desc();
  if (!d.shards || !arena || arena != g_arena || rank != g_shard_rank)
    return 4;
  const double unscale = a->loss_scale > 0.0 ? 1.0 / a->loss_scale : 1.0;
  const double norm = std::sqrt(world_sumsq) * unscale;
  a->grad_norm = norm;
  // Every rank has the world's norm: every rank skips, or none.
  if (!std::isfinite(norm))
    return 2;
  double clip = 1.0;
  if (a->clip_norm > 0.0 && a->clip_norm / (norm + 1e-6) < 1.0)
    clip = a->clip_norm / (norm + 1e-6);
  bool changed = false;
  for (size_t i = 0; i < g_shard_rows.size(); ++i) {
    const int param = g_shard_param[i];
    const float wd = (a->decay && !a->decay[param]) ? 0.0f : (float)a->weight_decay;
    if (g_shard_rows[i].weight_decay != wd) {
      g_shard_rows[i].weight_decay = wd;
      changed = true;
    }
  }
  const int n = g_shard.ntensors();
  if (changed && n)
    cudaMemcpyAsync(const_cast<ApplyTensor *>(g_shard.table()), g_shard_rows.data(), sizeof(ApplyTensor) * n,
                    cudaMemcpyHostToDevice, stream());
  const double mult = clip * unscale;
  if (n && d.adamw)
    adamw_multi(g_shard.table(), g_shard.chunk_start(), n, g_shard.nchunks(), a->lr, a->beta1, a->beta2, a->eps,
                a->step, mult);
  else if (n)
    sgd_multi(g_shard.table(), g_shard.chunk_start(), n, g_shard.nchunks(), a->lr, a->momentum, a->nesterov != 0,
              a->step, mult);
  // Every rank's chunk of the fp32 masters, then the fp16 working copies
  // of all of them. Waited for here, so that a peer that never joins the
  // all-gather stops this call (which tcc-run watches), not a later one.
  std::string err = g_comm.gather(reinterpret_cast<float *>(g_arena + d.shards->params_offset), stream());
  if (err.empty()) {
    d.refresh_shadows(g_arena);
    cudaStreamSynchronize(stream());
    err = g_comm.error();
  }
  if (!err.empty()) {
    std::fprintf(stderr, "tcc step: apply: %s\n", err.c_str());
    return 6;
  }
  return check_device("apply");
}

namespace tcc::cuda::host {
namespace {
// tcc_step_comm_api: tcc-run's collectives over the step's communicator.
int said(const std::string &err, char *e, uint64_t l) {
  if (err.empty())
    return 0;
  std::snprintf(e, l, "%s", err.c_str());
  return 1;
}
int api_init(int *rank, int *size, int *local, char *, uint64_t) {
  *rank = g_comm.rank();
  *size = g_comm.ranks();
  *local = -1; // tcc-run knows it from the launcher
  return 0;
}
int api_sum_f32(float *b, uint64_t n, char *e, uint64_t l) {
  return said(g_comm.host_allreduce(b, n, 4, ncclFloat32, ncclSum, "an fp32 sum over NCCL"), e, l);
}
int api_sum_f64(double *b, uint64_t n, char *e, uint64_t l) {
  return said(g_comm.host_allreduce(b, n, 8, ncclFloat64, ncclSum, "an fp64 sum over NCCL"), e, l);
}
int api_max_i64(int64_t *v, char *e, uint64_t l) {
  return said(g_comm.host_allreduce(v, 1, 8, ncclInt64, ncclMax, "a maximum over NCCL"), e, l);
}
int api_gather_f32(const float *send, uint64_t n, float *recv, int root, char *e, uint64_t l) {
  std::vector<float> all(static_cast<size_t>(n) * static_cast<size_t>(g_comm.ranks()));
  if (int rc = said(g_comm.host_allgather(send, 4 * n, all.data(), "a gather over NCCL"), e, l))
    return rc;
  if (g_comm.rank() == root)
    std::memcpy(recv, all.data(), all.size() * sizeof(float));
  return 0;
}
int api_bcast(void *buf, uint64_t bytes, int root, char *e, uint64_t l) {
  return said(g_comm.host_broadcast(buf, bytes, root, "a broadcast over NCCL"), e, l);
}
int api_barrier(char *e, uint64_t l) {
  int32_t one = 1;
  return said(g_comm.host_allreduce(&one, 1, 4, ncclInt32, ncclSum, "a barrier over NCCL"), e, l);
}
void api_abort(int code) {
  g_comm.abort();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}
int api_finalize() { return 0; }
int api_reduce_scatter(const void *, void *, uint64_t, int, char *e, uint64_t l) {
  return said("the step's collectives have no host reduce-scatter (a CPU step's ZeRO-1 runs over MPI)", e, l);
}
// `buf` (ranks * chunk elements) gets every rank's chunk r from rank r.
int api_allgather(void *buf, uint64_t chunk, int elem, char *e, uint64_t l) {
  const uint64_t bytes = chunk * static_cast<uint64_t>(elem);
  char *b = static_cast<char *>(buf);
  return said(g_comm.host_allgather(b + bytes * static_cast<uint64_t>(g_comm.rank()), bytes, b,
                                    "an all-gather over NCCL"),
              e, l);
}
const tcc_comm_api kHostApi = {TCC_COMM_ABI_VERSION, "NCCL (the step's communicator)", api_init, api_sum_f32,
                               api_sum_f64, api_gather_f32, api_bcast, api_max_i64, api_barrier, api_abort,
                               api_finalize, api_reduce_scatter, api_allgather};
} // namespace
} // namespace tcc::cuda::host

TCC_EXPORT const tcc_comm_api *tcc_step_comm_api(void *arena) {
  if (!arena || arena != g_arena || !g_comm.open())
    return nullptr;
  return &kHostApi;
}

TCC_EXPORT int tcc_step_comm_trace(void *arena, double *start, double *end, uint64_t *bytes, const char **names,
                                   int32_t max) {
  if (!arena || arena != g_arena || !g_comm.open() || !g_hook || g_prof_events.empty())
    return -1;
  return g_comm.timings(g_prof_events[0], start, end, bytes, names, max);
}

TCC_EXPORT int tcc_step_comm_reduce_next(void *arena) {
  if (!arena || arena != g_arena || !g_comm.open())
    return 1;
  g_comm.arm();
  return 0;
}

TCC_EXPORT int tcc_step_comm_info(void *arena, char *text, uint64_t len) {
  if (!arena || arena != g_arena || !g_comm.open())
    return 1;
  std::snprintf(text, len, "%s", g_comm.describe().c_str());
  return 0;
}
