//===- MemoryPlot.h - the memory plan as a picture --------------*- C++ -*-===//
//
// `tcc --memory-plot FILE.html` (or FILE.svg) draws a planned step's memory:
// the schedule on the x-axis, the bytes live at each op stacked by category,
// the budget, the recomputed values and the peak. This header is plain C++
// (no MLIR): tcc fills a MemoryPlan from the planned function
// (tcc-plan-memory's `tcc.layout` and its liveness), and the writer turns one
// or two of them into a self-contained file (inline SVG, no script or font
// fetched from anywhere).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_COMPILER_TCC_MEMORYPLOT_H
#define TCC_COMPILER_TCC_MEMORYPLOT_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::tcc::plot {

/// A category of bytes that stay the same for the whole step (parameters,
/// gradient accumulators, ...), with its key as --memory-report names it.
struct FixedCategory {
  std::string key;   // e.g. "parameters"; --memory-report's "categories" key
  std::string label; // e.g. "parameters (fp32 masters)"
  int64_t bytes = 0;
};

/// A temporary of the plan: the value's bytes, the ops (schedule indices,
/// inclusive) between which it is live and its arena offset (relative to the
/// start of the temporaries' region).
struct PlannedValue {
  std::string what; // op and ONNX node, as the memory report names it
  int64_t bytes = 0, start = 0, end = 0, offset = 0;
  bool saved = false;      // a forward value the backward pass reads
  bool recomputed = false; // made by an op rematerialisation added
};

/// One planned step.
struct MemoryPlan {
  std::string title;  // e.g. "model.onnx, --mem-budget=3G, cuda"
  int64_t budget = 0; // --mem-budget in bytes; 0: none
  bool device = true; // a GPU's memory (--target=cuda); false: the CPU's
  /// The pinned host memory of tcc --offload (not on the device, so not in
  /// the plot's areas): its bytes, and what it holds in words; 0: none.
  int64_t hostBytes = 0;
  std::string hostNote; // e.g. "master weights and optimizer state of 28 parameters"
  /// Fixed categories, in the order they are stacked (bottom first). Their
  /// sum plus temporariesRegion is plannedPeak.
  std::vector<FixedCategory> fixed;
  /// The bytes of the arena's temporaries region (--memory-report's
  /// "activations_and_temporaries"): at least the most bytes live at once.
  int64_t temporariesRegion = 0;
  int64_t plannedPeak = 0; // --memory-report's planned_peak_bytes
  /// The ops of the schedule, by index: what each is.
  std::vector<std::string> ops;
  int64_t firstBackward = -1; // index of the first backward op; -1: none
  std::vector<PlannedValue> values;
  /// The op where the most temporaries' bytes are live (--memory-report's
  /// peak.op, by index; -1: none) and those bytes (peak.live_bytes).
  int64_t peakOp = -1;
  int64_t peakLiveBytes = 0;
};

/// The page (HTML with inline SVG, `html` true) or the bare SVG of `plans`
/// (one, or two drawn side by side on the same byte scale). The elements and
/// data- attributes tests read are listed at the top of MemoryPlot.cpp.
std::string render(const std::vector<MemoryPlan> &plans, bool html);

} // namespace mlir::tcc::plot

#endif // TCC_COMPILER_TCC_MEMORYPLOT_H
