//===- trainer.h - a training run, and a gradients-only one -------*- C++ -*-===//
//
// What tcc-run does once its command line is read: train a loaded step
// (micro-batches from a token stream or .npy feeds, gradient accumulation,
// the step's optimizer, learning-rate schedules, loss scaling, checkpoints
// and resume, metrics, traces, TensorBoard, the trained ONNX model), or run
// one micro-step and dump its loss, outputs and gradients. In a world of
// several ranks (runtime/data_parallel.h) each rank trains its share.
// Both print their results and return the process's exit code.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_TRAINER_H
#define TCC_RUNTIME_LIB_TRAINER_H

#include "runtime/data_parallel.h"
#include "runtime/lib/options.h"
#include "runtime/lib/step_library.h"

#include <cstdint>
#include <string>

namespace tcc::run {

/// Trains `step` as `opts` says. `nccl`: the device step sums its gradients
/// with NCCL (a world of several ranks, or TCC_NCCL=1).
int runTraining(const Options &opts, const Step &step, tcc::dp::World &world, bool nccl);
/// One micro-step on --feed's inputs; dumps the loss, outputs and gradients.
int runGradsOnly(const Options &opts, const Step &step, tcc::dp::World &world);
/// The line `device peak ... (arena ..., budget ..., device ...)` of a
/// device step, with a warning past its budget; `peakOut` gets the peak.
void reportDeviceMemory(const Step &step, const tcc::dp::World &world, uint64_t *peakOut = nullptr);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_TRAINER_H
