//===- numerics.cpp - tcc-run --check-numerics ----------------------------===//

#include "runtime/lib/numerics.h"
#include "runtime/lib/tensor_values.h"
#include "runtime/lib/text.h"

#include "runtime/step_table.h"

#include <cmath>
#include <cstring>

namespace tcc::run {

std::string NumericsCheck::attach(const Step &step, Arena &mem) {
  if (!step.setCheckHook || !step.opValues)
    return step.name + " cannot be checked: it does not export tcc_step_set_check_hook and "
                       "tcc_step_op_values; rebuild it with this tcc";
  step_ = &step;
  mem_ = &mem;
  values_ = step.opValues(&numValues_);
  const int32_t ops = step.info->num_ops;
  if (numValues_ < 0 || (numValues_ > 0 && !values_))
    return step.name + ": the step's value table is invalid";
  // Rows come in op order: first_[k] is op k's first.
  first_.assign(static_cast<size_t>(ops) + 1, numValues_);
  for (int32_t i = numValues_ - 1; i >= 0; --i) {
    const tcc_op_value &v = values_[i];
    if (v.op < 0 || v.op >= ops || (i > 0 && values_[i - 1].op > v.op) ||
        v.tensor.offset + v.tensor.bytes > step.info->arena_bytes ||
        v.tensor.offset + v.tensor.bytes < v.tensor.offset)
      return step.name + ": row " + std::to_string(i) + " of the step's value table is invalid";
    first_[static_cast<size_t>(v.op)] = i;
  }
  for (int32_t k = ops - 1; k >= 0; --k)
    first_[k] = std::min(first_[k], first_[k + 1]);
  const tcc_step_info &info = *step.info;
  auto name = [&](const tcc_tensor_desc *t, int32_t n, const char *kind) {
    for (int32_t i = 0; i < n; ++i)
      if (t[i].location == TCC_LOCATION_ARENA && t[i].bytes)
        names_.emplace(std::make_pair(t[i].offset, t[i].bytes),
                       std::string(kind) + " " + tcc::step::quoted(t[i].name));
  };
  name(info.params, info.num_params, "parameter");
  name(info.grads, info.num_params, "the gradient accumulator of");
  name(info.inputs, info.num_inputs, "input");
  name(info.outputs, info.num_outputs, "output");
  if (step.setCheckHook(&NumericsCheck::hook, this) != 0)
    return step.name + ": the step could not set its check hook";
  attached_ = true;
  return "";
}

void NumericsCheck::detach() {
  if (attached_)
    step_->setCheckHook(nullptr, nullptr);
  attached_ = false;
}

void NumericsCheck::beginMicroStep(const std::string &where, double lossScale,
                                   bool dynamicScale) {
  where_ = where;
  lossScale_ = lossScale;
  stopAtNan_ = !dynamicScale;
  report_.clear();
}

int NumericsCheck::hook(void *ctx, int32_t mark) {
  return static_cast<NumericsCheck *>(ctx)->check(mark);
}

bool NumericsCheck::stats(const tcc_op_value &v, Stats &s) {
  const tcc_tensor_desc &d = v.tensor;
  const int32_t dt = d.dtype;
  if (dt != TCC_DTYPE_F16 && dt != TCC_DTYPE_F32 && dt != TCC_DTYPE_F64)
    return false;
  const char *p = mem_->host + d.offset;
  if (mem_->device) {
    // The device's bytes, read into scratch (not into the mirror, whose
    // copy of a parameter or accumulator the runtime owns).
    scratch_.resize(static_cast<size_t>(d.bytes));
    char msg[512] = {0};
    if (int rc = step_->copyOut(mem_->dev, d.offset, scratch_.data(), d.bytes, msg, sizeof msg)) {
      err_ = mem_->stepError("reading an op's result from the device", rc, msg);
      return false;
    }
    p = scratch_.data();
  }
  const size_t width = dt == TCC_DTYPE_F16 ? 2 : dt == TCC_DTYPE_F32 ? 4 : 8;
  s = Stats();
  s.n = d.bytes / width;
  for (uint64_t i = 0; i < s.n; ++i) {
    double x;
    if (dt == TCC_DTYPE_F16) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      x = halfToDouble(h);
    } else if (dt == TCC_DTYPE_F32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      x = f;
    } else {
      std::memcpy(&x, p + 8 * i, 8);
    }
    if (std::isnan(x)) {
      ++s.nan;
    } else if (std::isinf(x)) {
      ++(x > 0 ? s.posInf : s.negInf);
    } else if (!s.hasFinite) {
      s.lo = s.hi = x;
      s.hasFinite = true;
    } else {
      s.lo = std::min(s.lo, x);
      s.hi = std::max(s.hi, x);
    }
  }
  return true;
}

std::string NumericsCheck::opName(int32_t op) const {
  return "op " + std::to_string(op + 1) + " of " + std::to_string(step_->info->num_ops) + " (" +
         step_->info->ops[op] + ")";
}

std::string NumericsCheck::describe(const tcc_op_value &v, const Stats *s) const {
  const tcc_tensor_desc &d = v.tensor;
  std::string text = std::string(v.role ? "result " : "operand ") + std::to_string(v.index);
  if (auto it = names_.find({d.offset, d.bytes}); it != names_.end())
    text += " (" + it->second + ")";
  text += ": " + tcc::step::describe(d);
  if (!s)
    return text;
  if (s->finite())
    return text + ", finite" +
           (s->hasFinite ? ", in [" + format("%.6g", s->lo) + ", " + format("%.6g", s->hi) + "]"
                         : std::string());
  text += ":";
  if (s->nan)
    text += " " + std::to_string(s->nan) + " NaN";
  if (s->posInf)
    text += " " + std::to_string(s->posInf) + " +inf";
  if (s->negInf)
    text += " " + std::to_string(s->negInf) + " -inf";
  text += " of " + std::to_string(s->n);
  if (s->hasFinite)
    text += "; the finite ones in [" + format("%.6g", s->lo) + ", " + format("%.6g", s->hi) + "]";
  return text;
}

int NumericsCheck::check(int32_t mark) {
  if (mark < 0 || mark > step_->info->num_ops)
    return 0;
  int rc = mark > 0 ? checkOp(mark - 1) : 0;
  // The next op's operands that it will write over, as they are now.
  before_.clear();
  if (rc == 0 && mark < step_->info->num_ops)
    for (int32_t i = first_[mark]; i < first_[mark + 1]; ++i)
      for (int32_t j = first_[mark]; j < first_[mark + 1]; ++j)
        if (values_[i].role == 0 && values_[j].role == 1 &&
            values_[i].tensor.offset == values_[j].tensor.offset) {
          Stats s;
          if (stats(values_[i], s))
            before_[i] = s;
          break;
        }
  if (rc == 0 && !err_.empty()) {
    report_ = where_ + ": --check-numerics before op " + std::to_string(mark + 1) + ": " + err_;
    rc = 1;
  }
  return rc;
}

int NumericsCheck::checkOp(int32_t op) {
  const int32_t from = first_[op], to = first_[op + 1];
  // The op's results.
  bool nan = false, inf = false;
  std::vector<Stats> st(static_cast<size_t>(to - from));
  std::vector<bool> have(st.size(), false);
  for (int32_t i = from; i < to; ++i) {
    if (values_[i].role != 1)
      continue;
    Stats &s = st[i - from];
    if (!(have[i - from] = stats(values_[i], s))) {
      if (!err_.empty()) {
        report_ = where_ + ": --check-numerics after " + opName(op) + ": " + err_;
        return 1;
      }
      continue;
    }
    nan = nan || s.nan;
    inf = inf || s.posInf || s.negInf;
  }
  // Nothing to stop at, and nothing new to remember.
  const bool newInf = inf && firstInf_.empty(), newNan = nan && firstNan_.empty();
  if (!(nan && stopAtNan_) && !newInf && !newNan)
    return 0;
  // The operands: as they were before the op for those it wrote over (in
  // place), as they are now for the others.
  bool operandInf = false;
  for (int32_t i = from; i < to; ++i) {
    if (values_[i].role != 0)
      continue;
    Stats &s = st[i - from];
    auto before = before_.find(i);
    if (before != before_.end())
      s = before->second;
    have[i - from] = before != before_.end() || stats(values_[i], s);
    operandInf = operandInf || (have[i - from] && (s.posInf || s.negInf || s.nan));
  }
  bool f16 = false;
  std::string rows;
  for (int32_t i = from; i < to; ++i) {
    const tcc_op_value &v = values_[i];
    f16 = f16 || v.tensor.dtype == TCC_DTYPE_F16;
    rows += "\n  " + describe(v, have[i - from] ? &st[i - from] : nullptr);
    if (before_.count(i))
      rows += " (before the op, which wrote a result over it)";
  }
  if (newInf && !operandInf)
    firstInf_ = where_ + ": " + opName(op) + " made an infinity from finite operands:" + rows;
  if (!nan)
    return 0;
  std::string text = where_ + ": " + opName(op) + " made a NaN:" + rows;
  if (f16 && (inf || operandInf || !firstInf_.empty()))
    text += "\n  fp16 holds values up to 65504 in magnitude: a result beyond it is stored as an "
            "infinity (the CUDA target's kernels compute in fp32 and round to the type they "
            "store)";
  if (lossScale_ != 1)
    text += "\n  this micro-step's loss scale was " + format("%g", lossScale_) +
            ": the backward pass's values are the gradients times it";
  if (!stopAtNan_) {
    // A dynamic loss scale that is too large makes NaNs in the backward
    // pass that the scaler handles (the step is skipped): remembered.
    if (newNan)
      firstNan_ = text;
    return 0;
  }
  report_ = text;
  if (!firstInf_.empty())
    report_ += "\n  the first infinity of this step: " + firstInf_;
  return 1;
}

} // namespace tcc::run
