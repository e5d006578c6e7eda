//===- trace.h - tcc-run --trace: a timeline in the Chrome trace format -*- C++ -*-===//
//
// `tcc-run --trace FILE.json` records the first optimizer steps of a run as
// a trace in the Chrome trace event format (the "JSON object format":
// {"traceEvents": [...]}), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open. Events are complete events ("ph": "X", with a
// start and a duration in microseconds), counters ("ph": "C") and thread
// names ("ph": "M"), all in one process:
//
//   tid 1 "training loop": optimizer steps, their micro-steps, input staging,
//         the optimizer update, checkpoint writes; for a CPU step also each
//         op of the micro-step (from the step's op table), nested inside it;
//   tid 2 "data reader": the background thread making each micro-batch;
//   tid 3 "device stream": for a CUDA step, each op's kernels and GEMMs as
//         the step's stream ran them (CUDA events), inside a span per
//         micro-step.
//
// Counters: the arena bytes the memory plan has live at each op, and the
// loss scale of each step.
//
// The events are kept in memory and the file is written once, atomically
// (a temporary beside it, renamed over it), when the traced steps are done
// or the run ends: never a partial trace.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_TRACE_H
#define TCC_RUNTIME_TRACE_H

#include <chrono>
#include <cstdint>
#include <string>

namespace tcc::trace {

/// The threads (lanes) of the trace.
enum Lane : int { kLoop = 1, kReader = 2, kDevice = 3, kComm = 4 };

class Writer {
public:
  using Clock = std::chrono::steady_clock;

  /// Starts a trace that finish() writes to `path`; `processName` names the
  /// process (the step library). `device` adds the device stream's lane,
  /// `comm` the NCCL communicator stream's.
  void start(const std::string &path, const std::string &processName, bool device, bool comm = false);
  bool active() const { return active_; }

  /// Microseconds from start() to `t`.
  double micros(Clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - t0_).count();
  }
  double now() const { return micros(Clock::now()); }

  /// A complete event on `lane` from `ts` for `dur` microseconds; `args` is
  /// the inside of a JSON object ("" for none), e.g. "\"op\":3".
  void complete(int lane, const std::string &name, const char *category, double ts,
                double dur, const std::string &args = "");
  /// A counter sample: series `series` of counter `name` at `ts`.
  void counter(const char *name, const char *series, double ts, double value);

  /// Writes the trace to its path (atomically) and ends it. Returns "" or
  /// an error that names the path.
  std::string finish();

private:
  void event(const std::string &json);

  bool active_ = false;
  std::string path_, events_;
  Clock::time_point t0_;
};

/// `s` as the inside of a JSON string (quotes, backslashes and control
/// characters escaped).
std::string jsonEscape(const std::string &s);

} // namespace tcc::trace

#endif // TCC_RUNTIME_TRACE_H
