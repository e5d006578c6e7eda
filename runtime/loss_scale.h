//===- loss_scale.h - dynamic loss scaling, as PyTorch's GradScaler -*- C++ -*-===//
//
// tcc-run's loss scaler: the factor the loss is multiplied by before the
// backward pass (so that small float16 gradients do not flush to zero), and
// its update after each optimizer step, with the semantics of PyTorch's
// torch.cuda.amp.GradScaler (torch/amp/grad_scaler.py and the
// `_amp_update_scale_` kernel, aten/src/ATen/native/cuda/AmpKernels.cu):
//
//   GradScaler(init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
//              growth_interval=2000)
//
//   scaler.scale(loss).backward()  - gradients of loss * scale
//   scaler.step(optimizer)         - unscale (divide by scale); if any
//                                    gradient is inf/NaN, skip
//                                    optimizer.step() altogether
//   scaler.update()                - found_inf: scale *= backoff_factor,
//                                    growth tracker = 0;
//                                    else: tracker += 1, and when it reaches
//                                    growth_interval: scale *= growth_factor
//                                    (only if the result is finite: the scale
//                                    is a float32 tensor), tracker = 0
//
// so the scale doubles after exactly `growth_interval` consecutive clean
// steps (not before), and every non-finite step halves it and restarts the
// count. Modes: Dynamic (the above), Static (a fixed scale; update() only
// counts skipped steps) and Off (scale 1, as without a scaler).
//
// Header-only, no exceptions, the C++ standard library only.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_LOSS_SCALE_H
#define TCC_RUNTIME_LOSS_SCALE_H

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tcc {

/// GradScaler's constructor arguments (and defaults).
struct LossScaleConfig {
  double initScale = 65536.0; // 2**16
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;
};

/// What a checkpoint keeps to resume exactly.
struct LossScaleState {
  uint32_t mode = 0;         // LossScaler::Mode
  double scale = 1.0;
  int64_t growthTracker = 0; // consecutive clean steps since the last growth
                             // or backoff
  int64_t skipped = 0;       // steps skipped (non-finite gradients), all modes
};

class LossScaler {
public:
  enum Mode : uint32_t { Off = 0, Static = 1, Dynamic = 2 };
  using Config = LossScaleConfig;
  using State = LossScaleState;

  LossScaler() = default;
  static LossScaler off() { return LossScaler(); }
  static LossScaler fixed(double scale) {
    LossScaler s;
    s.state_.mode = Static;
    s.state_.scale = scale;
    return s;
  }
  static LossScaler dynamic(const Config &config = Config()) {
    LossScaler s;
    s.config_ = config;
    s.state_.mode = Dynamic;
    s.state_.scale = config.initScale;
    return s;
  }

  Mode mode() const { return static_cast<Mode>(state_.mode); }
  bool enabled() const { return state_.mode != Off; }
  bool isDynamic() const { return state_.mode == Dynamic; }
  const Config &config() const { return config_; }

  /// The factor the loss (the gradients) is multiplied by: 1 when off.
  double scale() const { return state_.scale; }
  int64_t growthTracker() const { return state_.growthTracker; }
  int64_t skipped() const { return state_.skipped; }

  /// After an optimizer step: `foundInf` says whether the (scaled) gradients
  /// held an inf or NaN, i.e. the step was skipped. Dynamic mode backs off or
  /// grows the scale as GradScaler.update(); every mode counts skipped steps.
  void update(bool foundInf) {
    if (foundInf)
      ++state_.skipped;
    if (state_.mode != Dynamic)
      return;
    if (foundInf) {
      state_.scale *= config_.backoffFactor;
      state_.growthTracker = 0;
      return;
    }
    int64_t successful = state_.growthTracker + 1;
    if (successful == config_.growthInterval) {
      double grown = state_.scale * config_.growthFactor;
      if (grown <= static_cast<double>(FLT_MAX)) // finite as a float32
        state_.scale = grown;
      state_.growthTracker = 0;
    } else {
      state_.growthTracker = successful;
    }
  }

  State state() const { return state_; }
  /// Restores a saved state (scale, tracker and skipped count; the mode too).
  void restore(const State &s) { state_ = s; }
  /// Takes only the skipped count from `s` (resuming in another mode).
  void restoreSkipped(const State &s) { state_.skipped = s.skipped; }

  /// "dynamic", "off" or the static scale ("1024").
  std::string describe() const {
    if (state_.mode == Dynamic)
      return "dynamic";
    if (state_.mode == Off)
      return "off";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", state_.scale);
    return buf;
  }

private:
  Config config_;
  State state_;
};

/// Parses tcc-run's --loss-scale value: "dynamic", "off" or a finite number
/// > 0 (a static scale). Returns "" on success, else the problem.
inline std::string parseLossScale(const std::string &v, LossScaler &out,
                                  const LossScaleConfig &config =
                                      LossScaleConfig()) {
  if (v == "dynamic") {
    out = LossScaler::dynamic(config);
    return "";
  }
  if (v == "off") {
    out = LossScaler::off();
    return "";
  }
  const char *s = v.c_str();
  char *end = nullptr;
  errno = 0;
  double x = std::strtod(s, &end);
  if (v.empty() || *end != '\0' || v[0] == ' ' || v[0] == '\t' ||
      v[0] == '\n' || errno == ERANGE || !std::isfinite(x) || !(x > 0) ||
      x > static_cast<double>(FLT_MAX))
    return "--loss-scale is dynamic, off, or a static scale (a positive "
           "number), not '" +
           v + "'";
  out = LossScaler::fixed(x);
  return "";
}

} // namespace tcc

#endif // TCC_RUNTIME_LOSS_SCALE_H
