//===- step_host.h - the two halves of a CUDA step ----------------*- C++ -*-===//
//
// A CUDA step.so is two units:
//
//  * the generated half (step.cu, written by tcc for one model): the tables
//    of tcc_step_info, the fusion kernels, and the micro-step's body, which
//    launches them and the library kernels (kernels.cuh, gemm.cuh,
//    attention.cuh) at the memory plan's arena offsets;
//  * the fixed half (step_host.cu and step_comm.cu, the same for every
//    model; what they share is in step_state.cuh): the tcc_step
//    ABI's entry points (runtime/tcc_step.h) over those tables: opening the
//    device arena, init, copies, input staging, the micro-step as a CUDA
//    graph, the optimizer's apply, profiling.
//
// tcc compiles the fixed half once, when tcc is built, as a library per
// target (the CUDA emulation, an nvcc architecture), and falls back to
// compiling it beside the generated half. This header is the contract
// between them: the generated half defines generated_step(); the fixed half
// defines the rest.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_STEP_HOST_H
#define TCC_RUNTIME_CUDA_STEP_HOST_H

#include "tcc_step.h"

#include <cstdint>

namespace tcc::cuda::host {

/// One trainable parameter's slots for the optimizer: master weights,
/// gradient accumulator, state (AdamW's two moments, SGD's momentum in s0)
/// and the fp16 working copy (~0: none), as arena byte offsets; with
/// `host` = 1 (tcc --offload), p, s0 and s1 are offsets in the host buffer
/// and the update runs on the host (host_tier.cuh).
struct ApplyRow {
  int param; // index into tcc_step_info.params
  uint64_t p, g, s0, s1, p16;
  int64_t n;
  int host;
};

/// A micro-step's gradient that goes to an accumulator in the host buffer
/// (tcc --offload=all): the accumulator's offset there, its elements, and
/// whether the device value is fp16 (else fp32).
struct HostGradRow {
  uint64_t acc;
  int64_t n;
  int half;
};

/// A saved activation swapped to host memory (tcc --swap-activations): its
/// offset in the host buffer and its bytes.
struct SwapRow {
  uint64_t host, bytes;
};

/// ZeRO-1 (tcc --data-parallel=N): where a trainable parameter lies in the
/// flat space (tcc_shard_info): its first element's index there, its
/// element count, its master weights' and fp16 working copy's arena offsets
/// (~0: none).
struct ShardRow {
  int param; // index into tcc_step_info.params
  uint64_t p, p16;
  int64_t flat, n;
};

/// A constant's host bytes and its offset after the arena.
struct ConstRow {
  const void *host;
  uint64_t bytes, offset;
};

/// What the generated half gives the fixed half.
struct StepDesc {
  const tcc_step_info *info;
  const ApplyRow *apply;
  int num_apply;
  bool adamw; // else SGD
  const ConstRow *consts;
  int num_consts;
  uint64_t const_bytes;         // after the arena
  const unsigned char *weights; // the initial parameters, in info->params order
  int64_t workspace_offset;     // the GEMM workspace in the arena, or -1
  uint64_t workspace_bytes;
  /// The micro-step's launches, with no host synchronisation (what a CUDA
  /// graph captures): 0, or 4 when a GEMM failed.
  int (*micro_step_body)(void *arena);
  void (*zero_grads)(char *arena);
  void (*refresh_shadows)(char *arena); // fp16 copies of the parameters
  void (*init_rng)(char *arena);        // zeroes dropout's random state
  void (*seed_fill)(char *arena, double grad_scale);
  /// kernels.cuh's read_and_clear_error_flag, as the generated half (whose
  /// kernels set the flag) sees it.
  int (*read_error_flag)();
  /// The micro-step's copies to host accumulators, in the order it queues
  /// them (host_grad_copy k).
  const HostGradRow *host_grads;
  int num_host_grads;
  /// ZeRO-1: the flat spaces (nullptr: the state is not sharded, and
  /// `apply` holds every row), the parameters in them, and the arena
  /// offsets of the rank's chunk of each state kind (s1: AdamW only).
  const tcc_shard_info *shards;
  const ShardRow *shard_rows;
  int num_shard_rows;
  uint64_t shard_s0, shard_s1;
  /// The swapped activations, by swap number (swap_out k).
  const SwapRow *swaps;
  int num_swaps;
  /// The value table (tcc_step_op_values).
  const tcc_op_value *op_values;
  int32_t num_op_values;
};

/// Defined by the generated half.
const StepDesc &generated_step();

// What the generated half's micro-step body uses.
// 1: call prof_mark at each mark (TCC_CUDA_PROFILE=1, a trace hook or a check hook)
extern int g_prof;
// Mark k ends info->ops[k-1]; 0 starts the body. Records the mark's event
// (profile, trace) and calls the check hook (tcc-run --check-numerics);
// non-zero (TCC_STEP_STOPPED, or 5 for a CUDA error) ends the body.
int prof_mark(int k);
extern double *g_scratch; // one double of device scratch (losses)
int gemm_failed();  // reports the GEMM's error; 4
/// Copy k (StepDesc::host_grads) of the gradient at `src` to the host, on a
/// copy stream, after the work queued so far; host_grad_wait(k) makes the
/// step's stream wait for it. The fixed half adds it into its accumulator
/// when the micro-step ends.
void host_grad_copy(int k, const void *src);
void host_grad_wait(int k);
/// Swap k (StepDesc::swaps): swap_out queues the copy of the activation at
/// `src` to the host buffer on a copy stream, after the work queued so far,
/// and swap_out_wait makes the step's stream wait for it (before the plan
/// reuses the buffer); swap_in queues the copy back into `dst` on another,
/// after the work queued so far, and swap_in_wait makes the step's stream
/// wait for it (before the first reader). A failure is reported when the
/// micro-step ends.
void swap_out(int k, const void *src);
void swap_out_wait(int k);
void swap_in(int k, void *dst);
void swap_in_wait(int k);
/// The host update of the last optimizer step, if it still runs (tcc-run
/// overlaps it with the next micro-step): host_await(p) runs it as far as
/// parameter p (kParams index) and makes the step's stream wait for p's
/// new fp16 copy; host_await_all() runs it to the end and makes the stream
/// wait for all of it. Both do nothing when no update is in flight.
void host_await(int param);
void host_await_all();
/// The fp32 accumulator at `acc` (n elements) has its last write of the
/// micro-step queued: in the optimizer step's last micro-step, with a
/// communicator open, it goes into the gradient all-reduce (comm.cuh).
void grad_ready(float *acc, int64_t n);

} // namespace tcc::cuda::host

#endif // TCC_RUNTIME_CUDA_STEP_HOST_H
