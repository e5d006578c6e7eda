//===- staging.cuh - uploading the next micro-batch during this one -*- C++ -*-===//
//
// Input staging for a CUDA step, so that the upload of micro-batch k+1
// overlaps the compute of micro-batch k (tcc_step_stage_inputs and
// tcc_step_micro_step_begin in runtime/tcc_step.h):
//
//   stage(src)      host: waits until the pinned buffer's previous upload is
//                   done (long since, in a training loop), copies the inputs
//                   into it, and queues their upload into a device buffer on
//                   the copy stream, behind the micro-step that last
//                   consumed that buffer;
//   consume(arena)  the step's stream: waits for the upload, copies each
//                   input from the device buffer into its arena slot, and
//                   marks the buffer consumed; the micro-step follows.
//
// Two events order it. `uploaded` (copy stream, after the upload): the step's
// stream waits on it before reading the device buffer, and the host before
// overwriting the pinned buffer. `consumed` (step's stream, after the copies
// into the arena): the copy stream waits on it before the next upload
// overwrites the device buffer. An input's arena slot is read late in the
// backward pass (labels, token ids for the embedding gradient), so the
// upload cannot go straight into the arena while the step runs; the device
// buffer (the inputs' bytes) is counted in the step's planned memory.
//
// In the CUDA emulation, TCC_CUDA_EMU_STREAMS=deferred runs each stream's
// work as late as these events allow (a missing `uploaded` wait shows as
// stale inputs) and =deferred-first runs the copy stream's work at once (a
// missing `consumed` wait shows as the next micro-batch's inputs):
// test/e2e/check_cuda_emulation.py, test/runtime/cuda_emu_test.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_STAGING_CUH
#define TCC_RUNTIME_CUDA_STAGING_CUH

#include "tcc_step.h"

#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

struct InputStaging {
  char *host = nullptr; // pinned
  char *dev = nullptr;
  uint64_t bytes = 0;
  cudaStream_t copy = nullptr;
  cudaEvent_t uploaded = nullptr, consumed = nullptr;
  bool staged = false; // inputs uploaded (or queued) and not yet consumed

  /// Allocates the buffers, the copy stream and the events for `n` bytes of
  /// inputs (nothing for a step without inputs).
  cudaError_t open(uint64_t n) {
    bytes = n;
    staged = false;
    if (n == 0)
      return cudaSuccess;
    cudaError_t e;
    if ((e = cudaMallocHost(reinterpret_cast<void **>(&host), n)) != cudaSuccess ||
        (e = cudaMalloc(reinterpret_cast<void **>(&dev), n)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming)) != cudaSuccess) {
      close();
      return e;
    }
    return cudaSuccess;
  }

  void close() {
    if (copy)
      cudaStreamSynchronize(copy);
    if (uploaded)
      cudaEventDestroy(uploaded);
    if (consumed)
      cudaEventDestroy(consumed);
    if (copy)
      cudaStreamDestroy(copy);
    if (dev)
      cudaFree(dev);
    if (host)
      cudaFreeHost(host);
    host = dev = nullptr;
    copy = nullptr;
    uploaded = consumed = nullptr;
    bytes = 0;
    staged = false;
  }

  /// Queues the upload of the inputs at `src` (`bytes` of them, in the
  /// order of the step's inputs) and returns without waiting for it.
  cudaError_t stage(const void *src) {
    if (bytes) {
      cudaError_t e;
      if ((e = cudaEventSynchronize(uploaded)) != cudaSuccess)
        return e;
      std::memcpy(host, src, bytes);
      if ((e = cudaStreamWaitEvent(copy, consumed, 0)) != cudaSuccess ||
          (e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, copy)) != cudaSuccess ||
          (e = cudaEventRecord(uploaded, copy)) != cudaSuccess)
        return e;
    }
    staged = true;
    return cudaSuccess;
  }

  /// On stream `st`: the staged inputs into their slots of `arena`.
  cudaError_t consume(char *arena, const tcc_tensor_desc *inputs, int n, cudaStream_t st) {
    staged = false;
    if (!bytes)
      return cudaSuccess;
    cudaError_t e;
    if ((e = cudaStreamWaitEvent(st, uploaded, 0)) != cudaSuccess)
      return e;
    uint64_t at = 0;
    for (int i = 0; i < n; ++i) {
      if (inputs[i].bytes &&
          (e = cudaMemcpyAsync(arena + inputs[i].offset, dev + at, inputs[i].bytes, cudaMemcpyDeviceToDevice,
                               st)) != cudaSuccess)
        return e;
      at += inputs[i].bytes;
    }
    return cudaEventRecord(consumed, st);
  }
};

#endif // TCC_RUNTIME_CUDA_STAGING_CUH
