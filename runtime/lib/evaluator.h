//===- evaluator.h - the evaluation step a step library carries --*- C++ -*-===//
//
// `tcc --with-eval` packs a second step library after the training step's
// ELF image in step.so: the same model's forward pass and loss, every
// parameter fixed, dropout off, no gradients (compiler/tcc/tcc.cpp,
// emitWithEvaluation, writes the layout). tcc-run --val-data opens it from a
// memory file, copies the trained parameters into its own arena before each
// evaluation, and runs it on validation micro-batches.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_EVALUATOR_H
#define TCC_RUNTIME_LIB_EVALUATOR_H

#include "runtime/lib/arena.h"
#include "runtime/lib/step_library.h"
#include "runtime/train_data.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tcc::run {

/// Where the evaluation step lies in the step library at `path`: `size` 0
/// when it carries none. "" or why the file cannot be read.
std::string findEvaluationStep(const std::string &path, uint64_t &offset, uint64_t &size);

class Evaluator {
public:
  Evaluator() = default;
  Evaluator(const Evaluator &) = delete;
  Evaluator &operator=(const Evaluator &) = delete;
  ~Evaluator();

  /// Opens the evaluation step that `train` carries and prepares its arena.
  /// "" on success; `found` is false (and nothing opened) when `train` has
  /// none. The evaluation step must read the training step's inputs, hold
  /// its parameters (same names and dims, each of the same type or float16
  /// of a float32 or float64 one) and have no backward pass. `threads`: a
  /// CPU step's GEMM threads (tcc-run --threads' count; 0 leaves them).
  std::string open(const Step &train, tcc::dp::World &world, int64_t threads, bool &found);

  /// Copies the parameters from `trainMirror` (the training step's host
  /// arena or mirror, in its layout, holding the current values) into the
  /// evaluation arena, converting float32 to float16 where the evaluation
  /// step holds them so.
  std::string loadParameters(const Step &train, const char *trainMirror);

  /// The mean loss of micro-batches 0 .. batches-1 of `maker` (the batch
  /// layout being the training step's inputs, in order).
  std::string evaluate(tcc::data::BatchMaker &maker, int64_t batches, double &loss);

  const Step &evalStep() const { return step; }

private:
  Step step;
  Arena mem;
  int fd = -1;
  std::vector<int32_t> source; // per parameter: the training step's index
};

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_EVALUATOR_H
