//===- numerics.h - tcc-run --check-numerics ------------------------*- C++ -*-===//
//
// The role of TensorFlow's enable_check_numerics and PyTorch's anomaly
// mode: with --check-numerics, the step calls back after each op of every
// micro-step (tcc_step_set_check_hook), and this looks at the float buffers
// the op wrote, as the step's value table lists them (tcc_step_op_values).
//
// - The first op whose result holds a NaN stops the micro-step; report()
//   names it (its op table entry: the kernel, the tcc ops, the ONNX nodes),
//   the type each result and operand is stored in, and the operands'
//   ranges as they were when it ran.
// - An infinity does not stop it (an attention mask's -inf is one on
//   purpose), but the first op of an optimizer step that made one from
//   operands without any is remembered: firstInfinity() names it, which
//   is where an fp16 overflow starts, and the NaN report says it too.
// - With a dynamic loss scale, a NaN does not stop the micro-step either:
//   a scale too large for the backward pass makes them, and the scaler
//   skips the step and halves the scale. The first NaN is remembered, and
//   the caller names it with the first infinity when the step is skipped
//   or the loss is not finite.
//
// On a CUDA step every op then waits for the GPU and its results are
// copied to the host: a run is many times slower, for finding a bug.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_NUMERICS_H
#define TCC_RUNTIME_LIB_NUMERICS_H

#include "runtime/lib/arena.h"
#include "runtime/lib/step_library.h"
#include "runtime/tcc_step.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tcc::run {

class NumericsCheck {
public:
  /// Reads `step`'s value table and sets its check hook over `mem`; "" or
  /// why the step cannot be checked.
  std::string attach(const Step &step, Arena &mem);
  /// Unsets the hook (the destructor does too).
  void detach();
  ~NumericsCheck() { detach(); }

  /// Before each micro-step: what it is, for the report ("step 3/10,
  /// micro-step 1/4"), its loss scale (1: none), and whether the scale is
  /// dynamic: then a NaN does not stop the micro-step (a scale too large
  /// for the backward pass makes them, and the scaler skips the step) but
  /// is remembered, as the first infinity is.
  void beginMicroStep(const std::string &where, double lossScale, bool dynamicScale);
  /// Before each optimizer step: forgets the last one's first infinity
  /// and NaN.
  void beginStep() {
    firstInf_.clear();
    firstNan_.clear();
  }

  /// After a micro-step stopped (TCC_STEP_STOPPED): what stopped it.
  const std::string &report() const { return report_; }
  /// The first op of this optimizer step that made an infinity from
  /// operands without one, described in a line; "" if none did.
  const std::string &firstInfinity() const { return firstInf_; }
  /// Where this optimizer step's values stopped being finite, as a clause
  /// of a message: the first infinity and the first NaN remembered, or
  /// that no op made either.
  std::string infinityOrigin() const {
    if (firstInf_.empty() && firstNan_.empty())
      return "no op of this step made an infinity from finite operands, or a NaN";
    std::string s = firstInf_.empty() ? "" : "the first infinity: " + firstInf_;
    if (!firstNan_.empty())
      s += (s.empty() ? "" : "\n") + std::string("the first NaN: ") + firstNan_;
    return s;
  }

private:
  /// The counts and finite range of one buffer's elements.
  struct Stats {
    uint64_t n = 0, nan = 0, posInf = 0, negInf = 0;
    double lo = 0, hi = 0; // over the finite elements
    bool hasFinite = false;
    bool finite() const { return nan == 0 && posInf == 0 && negInf == 0; }
  };

  static int hook(void *ctx, int32_t mark);
  int check(int32_t mark);
  /// After op `op` ran: 1 (report_ set) to stop the micro-step, else 0.
  int checkOp(int32_t op);
  /// The stats of `v`'s buffer as it is now; false with err_ set when it
  /// cannot be read, or for a buffer that does not hold floats.
  bool stats(const tcc_op_value &v, Stats &s);
  std::string describe(const tcc_op_value &v, const Stats *s) const;
  std::string opName(int32_t op) const;

  const Step *step_ = nullptr;
  Arena *mem_ = nullptr;
  const tcc_op_value *values_ = nullptr;
  int32_t numValues_ = 0;
  /// values_[first_[k]] .. values_[first_[k + 1]] are op k's rows.
  std::vector<int32_t> first_;
  std::vector<char> scratch_;
  /// The operands of the next op that it writes over (in place), as they
  /// were before it ran: by row.
  std::map<int32_t, Stats> before_;
  /// The step's named tensors (parameters, accumulators, inputs, outputs)
  /// by arena offset and bytes: a row that is one of them shows its name.
  std::map<std::pair<uint64_t, uint64_t>, std::string> names_;
  std::string where_, report_, firstInf_, firstNan_, err_;
  double lossScale_ = 1;
  bool stopAtNan_ = true;
  bool attached_ = false;
};

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_NUMERICS_H
