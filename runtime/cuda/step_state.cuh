//===- step_state.cuh - the fixed half's shared state ------------*- C++ -*-===//
//
// What the fixed half's two units share: step_host.cu (device, arena,
// copies, the micro-step, the optimizer's apply) defines it;
// step_comm.cu (the communicator, ZeRO-1's entry points, tcc-run's
// collectives) reads it. Internal to a step.so: nothing here is exported.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_STEP_STATE_CUH
#define TCC_RUNTIME_CUDA_STEP_STATE_CUH

#include "comm.cuh"
#include "step_host.h"

#include <vector>

/// A tcc_step entry point: exported from step.so, which hides the rest.
#define TCC_EXPORT extern "C" __attribute__((visibility("default")))

namespace tcc::cuda::host {

/// The generated half's tables (generated_step(), looked up once).
const StepDesc &desc();
/// Syncs the step's stream; reports (to stderr) a CUDA error or an index
/// out of range seen `what`, as the step's code (5 or 1), else 0.
int check_device(const char *what);

extern char *g_arena;               // the open arena (tcc_step_device_open)
extern int g_graph_mode;            // the micro-step as a CUDA graph: -1 undecided, 0 off, 1 on
extern cudaGraphExec_t g_graph;     // its graph, once captured
extern GradReduce g_comm;           // data parallelism: the gradient all-reduce
extern std::vector<cudaEvent_t> g_prof_events; // a mark after each op
extern tcc_step_trace_hook g_hook;  // tcc-run --trace

/// ZeRO-1 (step_comm.cu): forgets this rank's shard, when the arena closes.
void close_shard();

} // namespace tcc::cuda::host

#endif // TCC_RUNTIME_CUDA_STEP_STATE_CUH
