//===- tcc.cpp - the tcc compiler driver ------------------------------------===//
//
//   tcc MODEL.onnx [-o step.so] [--target=cuda|cpu] [--mem-budget=SIZE]
//       [--emit=summary|imported|training|planned|source|step] ...
//
// Compiles an ONNX model into a training step: import, loss, backward graph,
// mixed precision (CUDA), fusion, memory plan with rematerialisation, then
// codegen and a build by nvcc (CUDA, the default) or the host compiler (CPU).
// Every error is a diagnostic that names the file (and the node, op and
// opset where there is one) and exits with 1; no output file is written
// unless the whole compilation succeeded.
//
//===----------------------------------------------------------------------===//

#include "codegen/StepEmitter.h"
#include "codegen/StepBuilder.h"
#include "compiler/tcc/MemoryPlot.h"
#include "compiler/tcc/Reports.h"
#include "compiler/Dialect/TccOps.h"
#include "compiler/Import/OnnxImporter.h"
#include "compiler/Import/OnnxLocation.h"
#include "passes/PlanMemory.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"
#include "passes/tiers/TierCostModel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <map>
#include <optional>

using namespace mlir;
namespace cl = llvm::cl;

#ifndef TCC_VERSION
#define TCC_VERSION "0.0.0"
#endif

static cl::OptionCategory tccCategory("tcc options");

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                                      cl::cat(tccCategory));
static cl::opt<bool> listOps(
    "list-ops",
    cl::desc("Print the ONNX ops tcc knows (from which opset, the tcc op each "
             "becomes, how a gradient flows through it) and exit"),
    cl::init(false), cl::cat(tccCategory));
static cl::opt<std::string>
    outputFile("o", cl::desc("Output file ('-' for stdout, the default)"),
               cl::value_desc("file"), cl::init("-"), cl::cat(tccCategory));

enum class EmitKind { Default, Summary, Imported, Training, Planned, Kernels, Source, Step };
static cl::opt<EmitKind> emit(
    "emit",
    cl::desc("What to produce (default: the step library when -o names a "
             "file, else the summary)"),
    cl::init(EmitKind::Default),
    cl::values(clEnumValN(EmitKind::Summary, "summary",
                          "what tcc understood: inputs, outputs, parameters "
                          "and ops"),
               clEnumValN(EmitKind::Imported, "imported",
                          "the imported model as tcc-dialect MLIR"),
               clEnumValN(EmitKind::Training, "training",
                          "the training step (forward + backward) as MLIR"),
               clEnumValN(EmitKind::Planned, "planned",
                          "the training step with its memory plan (arena "
                          "offsets) as MLIR"),
               clEnumValN(EmitKind::Kernels, "kernels",
                          "the planned step lowered to kernels (the tcck dialect) "
                          "as MLIR; cpu target"),
               clEnumValN(EmitKind::Source, "source",
                          "the step's CUDA or C++ source (-o DIR writes a folder "
                          "that builds on its own)"),
               clEnumValN(EmitKind::Step, "step",
                          "the compiled step library (step.so)")),
    cl::cat(tccCategory));
enum class Target { Cpu, Cuda };
static cl::opt<Target> target(
    "target", cl::desc("Code generation target"), cl::init(Target::Cuda),
    cl::values(clEnumValN(Target::Cuda, "cuda",
                          "fp16 CUDA with fp32 master weights, built by nvcc "
                          "(default; needs an NVIDIA GPU to run)"),
               clEnumValN(Target::Cpu, "cpu",
                          "fp32 C++ built by the system compiler (the "
                          "reference target, runs anywhere)")),
    cl::cat(tccCategory));
static cl::opt<bool> noWeights(
    "no-weights",
    cl::desc("Do not embed the initial weights in step.so (for models whose "
             "weights are loaded at run time: tcc-run --init-weights or "
             "--resume); init zeroes the parameters"),
    cl::init(false), cl::cat(tccCategory));
static cl::opt<std::string> cudaArch(
    "cuda-arch",
    cl::desc("GPU architecture of the CUDA target: 90 (default, H100/H200), "
             "80, 89, ... or sm_90"),
    cl::init("90"), cl::cat(tccCategory));
static cl::opt<bool> cudaEmulation(
    "cuda-emulation",
    cl::desc("With --target=cuda: build the step with the host compiler "
             "against tcc's CUDA emulation, so it runs (slowly) on the CPU; "
             "for testing the CUDA target without a GPU"),
    cl::init(false), cl::cat(tccCategory));
static cl::opt<std::string> lossSpec(
    "loss",
    cl::desc("Append a loss to a model that outputs logits or predictions: "
             "cross-entropy:OUTPUT:LABELS or mse:OUTPUT:TARGET (LABELS/TARGET "
             "name the new input)"),
    cl::value_desc("kind:output:input"), cl::cat(tccCategory));
enum class Precision { F32, F64 };
static cl::opt<Precision> cpuPrecision(
    "cpu-precision", cl::desc("Floating-point type of the CPU target"),
    cl::init(Precision::F32),
    cl::values(clEnumValN(Precision::F32, "f32", "float (default)"),
               clEnumValN(Precision::F64, "f64",
                          "double, for gradient checks")),
    cl::cat(tccCategory));
enum class CpuGemm { Blas, Reference };
static cl::opt<CpuGemm> cpuGemm(
    "cpu-gemm", cl::desc("GEMMs of an f32 CPU step"), cl::init(CpuGemm::Blas),
    cl::values(clEnumValN(CpuGemm::Blas, "blas",
                          "the CBLAS library tcc was built with (default; the reference "
                          "where tcc has none)"),
               clEnumValN(CpuGemm::Reference, "reference",
                          "tcc's own kernel, accumulating in double (what f64 steps use)")),
    cl::cat(tccCategory));
static cl::opt<std::string> optimizer(
    "optimizer",
    cl::desc("The optimizer the step's apply implements: adamw (default) or "
             "sgd; hyperparameters are tcc-run flags"),
    cl::value_desc("adamw|sgd"), cl::init("adamw"), cl::cat(tccCategory));
static cl::opt<std::string> memBudget(
    "mem-budget",
    cl::desc("The most memory the step may hold (parameters, gradients, "
             "optimizer state, activations, temporaries): e.g. 12G, 512M, "
             "100K or bytes; K/M/G/T and KiB/MiB/GiB/TiB are powers of "
             "1024, KB/MB/GB/TB of 1000"),
    cl::value_desc("size"), cl::cat(tccCategory));
static cl::opt<std::string> rematPolicy(
    "remat-policy",
    cl::desc("How tcc meets --mem-budget: greedy (default), or a reference "
             "schedule for benchmarks, applied whatever the budget: "
             "checkpoint-every-layer or checkpoint-sqrt"),
    cl::value_desc("policy"), cl::init("greedy"), cl::cat(tccCategory));
static cl::opt<std::string> offload(
    "offload",
    cl::desc("With --target=cuda: where state may live. Not given: on the "
             "device, and where --mem-budget cannot be met there, as auto (with "
             "--swap-activations=auto), which tcc says; none: all on the device "
             "(an unmet budget is an error); auto: parameters' fp32 master weights and "
             "optimizer state, then gradient accumulators, in pinned host "
             "memory where that costs less than recomputation; optimizer or "
             "all: forced (all also moves the accumulators). The host updates "
             "what it holds; --memory-report gives both tiers"),
    cl::value_desc("none|auto|optimizer|all"), cl::init("none"), cl::cat(tccCategory));
static cl::opt<int> dataParallel(
    "data-parallel",
    cl::desc("Shard the optimizer state across N ranks (ZeRO stage 1): each rank "
             "keeps the AdamW (or momentum) state of 1/N of the parameters, and "
             "--mem-budget and --memory-report are per rank. Run the step with "
             "mpirun -np N tcc-run (on CUDA, one GPU per rank, over NCCL). 1 "
             "(default): every rank keeps the whole state, as without data "
             "parallelism"),
    cl::value_desc("N"), cl::init(1), cl::cat(tccCategory));
static cl::opt<std::string> swapActivations(
    "swap-activations",
    cl::desc("With --target=cuda and a --mem-budget that recomputes "
             "activations: copy them to pinned host memory after the forward "
             "pass and back before the backward pass instead. none "
             "(default); auto: where the copies, at --pcie-gbps and hidden "
             "under the passes, cost less than the recomputation and the plan "
             "still fits; all: every value recomputed from an exact copy of a "
             "forward op. --memory-report's activation_swap says what was "
             "chosen"),
    cl::value_desc("none|auto|all"), cl::init("none"), cl::cat(tccCategory));
static cl::opt<double> pcieGbps(
    "pcie-gbps",
    cl::desc("Host-device bandwidth per direction the --offload cost model "
             "assumes, in GB/s (default 31.5, PCIe 4.0 x16)"),
    cl::init(31.5), cl::cat(tccCategory));
static cl::opt<double> hostGbps(
    "host-gbps",
    cl::desc("Host memory bandwidth the --offload cost model assumes for the "
             "host update, in GB/s (default 30)"),
    cl::init(30.0), cl::cat(tccCategory));
static cl::opt<std::string> hostBudget(
    "host-budget",
    cl::desc("The most host memory an --offload or --swap-activations plan may use, a size as for "
             "--mem-budget (default: what this machine has available)"),
    cl::value_desc("size"), cl::cat(tccCategory));
static cl::opt<std::string> lossChunkRows(
    "loss-chunk-rows",
    cl::desc("Rows (tokens) of the logits that the output projection and a "
             "cross-entropy loss compute at a time, so the whole logits are "
             "never stored: auto (default: chunks of at most 64M logits), "
             "off, or a number"),
    cl::value_desc("auto|off|N"), cl::init("auto"), cl::cat(tccCategory));
static cl::opt<std::string> gemmPadding(
    "gemm-padding",
    cl::desc("CUDA: pad a GEMM whose rows are not a multiple of 8 halves "
             "(GPT-2's vocabulary of 50257) with zeros, so that cuBLASLt runs "
             "its tensor-core kernels: auto (default: GEMMs of 1 GFLOP or "
             "more), all, or off"),
    cl::value_desc("auto|all|off"), cl::init("auto"), cl::cat(tccCategory));

static cl::opt<std::string> memoryReport(
    "memory-report",
    cl::desc("Write the memory plan's breakdown as JSON to this file"),
    cl::value_desc("file"), cl::cat(tccCategory));
static cl::opt<std::string> memoryPlot(
    "memory-plot",
    cl::desc("Draw the memory plan: live bytes by category over the schedule, "
             "the budget, the peak, recomputed values, and the arena's "
             "temporaries (hover for a value's ONNX node and size); "
             "FILE.html (a self-contained page) or FILE.svg"),
    cl::value_desc("file"), cl::cat(tccCategory));
static cl::opt<std::string> memoryPlotCompare(
    "memory-plot-compare",
    cl::desc("With --memory-plot: also plan the step with this budget "
             "(a size such as 3G, or none) and draw the two plans side by "
             "side, on one byte scale"),
    cl::value_desc("budget|none"), cl::cat(tccCategory));
static cl::opt<bool> noFusion(
    "no-fusion", cl::desc("Do not fuse elementwise ops into kernels"),
    cl::init(false), cl::cat(tccCategory));
static cl::opt<bool> noAttentionFusion(
    "no-attention-fusion",
    cl::desc("Keep attention as matmul, softmax, matmul (the scores and "
             "probabilities stored) instead of one tcc.attention op"),
    cl::init(false), cl::cat(tccCategory));
static cl::opt<std::string> fusionReport(
    "fusion-report",
    cl::desc("Write the fusion decisions and op/kernel counts as JSON"),
    cl::value_desc("file"), cl::cat(tccCategory));
static cl::opt<bool> keepTemps("keep-temps",
                               cl::desc("Keep the step's build folder"),
                               cl::init(false), cl::cat(tccCategory));
static cl::list<std::string> shapes(
    "shape",
    cl::desc("Static shape for a graph input with dynamic dimensions, e.g. "
             "--shape idx=8x1024 (repeat or separate with commas)"),
    cl::value_desc("name=DxD..."), cl::CommaSeparated, cl::cat(tccCategory));
static cl::list<std::string> frozen(
    "frozen",
    cl::desc("Floating-point initializers to keep fixed instead of training"),
    cl::value_desc("name,..."), cl::CommaSeparated, cl::cat(tccCategory));
static cl::list<std::string> trainable(
    "trainable",
    cl::desc("Floating-point initializers to train even where the model's "
             "tcc.trainable metadata or their role (a mask, a position table, "
             "a scalar) says they are buffers"),
    cl::value_desc("name,..."), cl::CommaSeparated, cl::cat(tccCategory));

static cl::opt<bool> withEval(
    "with-eval",
    cl::desc("Also compile an evaluation step into step.so: the forward pass "
             "and the loss, every parameter fixed, dropout off, no gradients, "
             "planned within what the training step leaves of --mem-budget; "
             "tcc-run --val-data runs it (docs/usage.md)"),
    cl::cat(tccCategory));
static cl::opt<bool> allowUnrecorded(
    "allow-unrecorded",
    cl::desc("Train a model without tcc.trainable metadata even where its "
             "initializers carry an exporter's folded names (val_N, onnx::...), "
             "which are copies of parameters, not the module's own"),
    cl::cat(tccCategory));

static cl::opt<bool> timing(
    "timing",
    cl::desc("Print where the compile's time went, to stderr when tcc ends: the import, "
             "each pass of the training, plan and kernel pipelines (MLIR's pass timing), "
             "emission and the step's build"),
    cl::cat(tccCategory));

namespace {
/// --timing: one MLIR timing report for the whole compile. Each stage is a
/// scope under the root; pass managers time into theirs.
struct CompileTiming {
  DefaultTimingManager manager;
  TimingScope root;
  CompileTiming() {
    manager.setEnabled(true);
    root = manager.getRootScope();
  }
};
std::optional<CompileTiming> compileTiming;
} // namespace

/// A stage of the compile, timed under --timing (stops when it goes).
static TimingScope timeStage(StringRef name) {
  return compileTiming ? compileTiming->root.nest(name) : TimingScope();
}

/// Times `pm`'s passes under `stage` with --timing (`pm` keeps a reference:
/// the scope must outlive its runs).
static void timePasses(PassManager &pm, TimingScope &stage) {
  if (compileTiming)
    pm.enableTiming(stage);
}

/// Parses `--shape` values into `options`; reports and fails on bad syntax.
static LogicalResult parseShapes(tcc::ImportOptions &options) {
  for (const std::string &s : shapes) {
    auto [name, dims] = StringRef(s).rsplit('=');
    std::vector<int64_t> shape;
    bool ok = !name.empty() && !dims.empty() && StringRef(s).contains('=');
    SmallVector<StringRef> parts;
    dims.split(parts, 'x');
    for (StringRef p : parts) {
      int64_t d;
      if (p.getAsInteger(10, d) || d < 0) {
        ok = false;
        break;
      }
      shape.push_back(d);
    }
    if (!ok) {
      llvm::errs() << "tcc: error: --shape " << s
                   << ": expected NAME=DxDx... with non-negative integers "
                      "(e.g. --shape idx=8x1024)\n";
      return failure();
    }
    options.inputShapes[name] = shape;
  }
  options.allowUnrecorded = allowUnrecorded;
  for (const std::string &f : frozen)
    options.frozen.insert(f);
  for (const std::string &t : trainable) {
    if (options.frozen.contains(t)) {
      llvm::errs() << "tcc: error: \"" << t
                   << "\" is given to both --trainable and --frozen\n";
      return failure();
    }
    options.trainable.insert(t);
  }
  return success();
}

/// Parses a --mem-budget size; std::nullopt on bad syntax.
static std::optional<int64_t> parseSize(StringRef text) {
  text = text.trim();
  size_t digits = 0;
  while (digits < text.size() &&
         (isdigit((unsigned char)text[digits]) || text[digits] == '.'))
    ++digits;
  double number;
  if (digits == 0 || text.take_front(digits).getAsDouble(number) || number < 0)
    return std::nullopt;
  StringRef unit = text.drop_front(digits).trim();
  static const std::pair<StringRef, double> units[] = {
      {"", 1},          {"B", 1},
      {"K", 1024.0},    {"KiB", 1024.0},  {"KB", 1e3},
      {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},
      {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
      {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12}};
  for (auto &[name, scale] : units)
    if (unit.equals_insensitive(name) &&
        (name.size() < 3 || unit == name)) // "GiB" exactly; "g" ok
      return (int64_t)(number * scale);
  return std::nullopt;
}

static std::string humanBytes(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? std::to_string(bytes) + " B"
                : llvm::formatv("{0:F1} {1}", v, units[u]).str();
}

/// "; pinned host memory N (...)" for a plan with a host buffer, else "".
static std::string hostSummary(func::FuncOp func) {
  tcc::LayoutAttr layout = tcc::LayoutAttr::of(func);
  if (layout.getHostBytes() <= 0)
    return "";
  int64_t swapped = tcc::swappedActivationBytes(func);
  int64_t tiers = layout.getHostParamBytes() + layout.getHostStateBytes() + layout.getHostGradBytes();
  SmallVector<std::string> parts;
  if (tiers > 0) {
    parts.push_back("master weights " + humanBytes(layout.getHostParamBytes()));
    parts.push_back("optimizer state " + humanBytes(layout.getHostStateBytes()));
    if (layout.getHostGradBytes() > 0)
      parts.push_back("gradient accumulators " + humanBytes(layout.getHostGradBytes()));
  }
  if (swapped > 0)
    parts.push_back("swapped activations " + humanBytes(swapped));
  return "; pinned host memory " + humanBytes(layout.getHostBytes()) + " (" +
         llvm::join(parts, ", ") + (tiers > 0 ? ", updated on the host)" : ")");
}

/// The memory plot's data for a planned function (see MemoryPlot.h).
static tcc::plot::MemoryPlan plotData(func::FuncOp func, int64_t floatBytes,
                                      int64_t budget, StringRef title) {
  tcc::LayoutAttr layout = tcc::LayoutAttr::of(func);
  tcc::plot::MemoryPlan plan;
  plan.title = title.str();
  plan.budget = budget;
  tcc::TargetAttr targetAttr = tcc::TargetAttr::of(func);
  plan.device = !targetAttr || targetAttr.isCuda();
  if (tcc::TiersAttr tiers = tcc::TiersAttr::of(func); tiers && layout.getHostBytes() > 0) {
    plan.hostBytes = layout.getHostBytes();
    plan.hostNote = "master weights and optimizer state of " +
                    std::to_string(tiers.getHostState().size()) + " parameters" +
                    (tiers.getHostGrads().empty()
                         ? std::string()
                         : ", gradient accumulators of " +
                               std::to_string(tiers.getHostGrads().size()));
  }
  const bool mixed = floatBytes == tcc::kMixedPrecision;
  plan.fixed = {
      {"parameters", mixed ? "parameters (fp32 masters)" : "parameters", layout.getParamBytes()},
      {"gradients", "gradient accumulators", layout.getGradBytes()},
      {"optimizer_state", "optimizer state", layout.getStateBytes()},
      {"inputs", "inputs", layout.getInputBytes()},
      {"outputs", "outputs", layout.getOutputBytes()},
  };
  if (mixed) {
    plan.fixed.push_back({"fp16_working_copies", "fp16 working copies", layout.getShadowBytes()});
    plan.fixed.push_back({"library_workspace", "cuBLASLt workspace", layout.getWorkspaceBytes()});
  }
  // The persistent slots' alignment (64 bytes each).
  int64_t named = 0;
  for (const tcc::plot::FixedCategory &c : plan.fixed)
    named += c.bytes;
  int64_t padding = layout.getArenaBytes() - layout.getTemporaryBytes() - named;
  if (padding > 0)
    plan.fixed.push_back({"alignment", "slot alignment", padding});
  if (mixed)
    plan.fixed.push_back({"constants_and_runtime_reserve",
                          "constants, input staging, CUDA runtime reserve",
                          layout.getDeviceReserveBytes()});
  plan.temporariesRegion = layout.getTemporaryBytes();
  plan.plannedPeak = layout.getPlannedBytes();
  plan.peakLiveBytes = layout.getPeakLiveBytes();

  tcc::MemoryTimeline timeline = tcc::memoryTimeline(func, floatBytes);
  for (Operation *op : timeline.ops)
    plan.ops.push_back(isa<func::ReturnOp>(op) ? std::string("return")
                                               : tcc::describePlanned(op));
  plan.firstBackward = timeline.firstBackward;
  auto recomputed = [](Operation *op) {
    Operation *fusion = op ? op->getParentOfType<tcc::FusionOp>() : nullptr;
    return op && (op->hasAttr("tcc.remat") || (fusion && fusion->hasAttr("tcc.remat")));
  };
  for (const tcc::PlannedTemporary &t : timeline.temporaries) {
    tcc::plot::PlannedValue v;
    v.what = tcc::describePlanned(t.value);
    v.bytes = t.bytes;
    v.start = t.start;
    v.end = t.end;
    v.offset = t.offset;
    v.saved = timeline.firstBackward >= 0 && t.start < timeline.firstBackward &&
              t.end >= timeline.firstBackward;
    v.recomputed = recomputed(t.value.getDefiningOp());
    plan.values.push_back(std::move(v));
  }
  // The planner's peak: the first op where the most temporaries are live.
  std::vector<int64_t> live = timeline.liveBytes();
  int64_t best = 0;
  for (size_t k = 0; k < live.size(); ++k)
    if (live[k] > best)
      best = live[k], plan.peakOp = static_cast<int64_t>(k);
  return plan;
}

/// Writes `plans` as --memory-plot's picture (HTML or SVG by the file's
/// extension); the file exists only if the whole write succeeded.
static LogicalResult writeMemoryPlot(const std::vector<tcc::plot::MemoryPlan> &plans,
                                     StringRef path) {
  bool svg = llvm::sys::path::extension(path).equals_insensitive(".svg");
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(path, &error);
  if (!out) {
    llvm::errs() << "tcc: error: cannot write " << path << ": " << error << "\n";
    return failure();
  }
  out->os() << tcc::plot::render(plans, !svg);
  out->os().flush();
  if (out->os().has_error()) {
    out->os().clear_error();
    llvm::errs() << "tcc: error: writing " << path << " failed\n";
    return failure();
  }
  out->keep();
  return success();
}

/// Writes text output to -o (stdout for '-'); the file exists only if the
/// whole write succeeded.
static int writeOutput(llvm::function_ref<void(llvm::raw_ostream &)> write) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(outputFile, &error);
  if (!out) {
    llvm::errs() << "tcc: error: cannot write " << outputFile << ": " << error
                 << "\n";
    return 1;
  }
  write(out->os());
  out->os().flush();
  if (out->os().has_error()) {
    llvm::errs() << "tcc: error: writing " << outputFile << " failed\n";
    out->os().clear_error();
    return 1;
  }
  out->keep();
  return 0;
}

namespace {
/// tcc's flags, checked and turned into what the phases use, before the
/// model is read: a bad flag costs no import.
struct Driver {
  tcc::ImportOptions import;
  std::optional<tcc::AppendLossOptions> loss; // --loss
  /// Both halves of the pipeline (passes/Pipeline.h, which tcc-opt runs as
  /// --tcc-pipeline): one config from the flags.
  tcc::PipelineConfig pipeline;
  int64_t budget = 0;                   // --mem-budget; 0: none
  std::optional<int64_t> compareBudget; // --memory-plot-compare
  bool planOnly = false;                // reports without -o: no library
};
} // namespace

/// Whether two paths name one file: the same device and inode when both
/// exist (through symlinks and hard links), else the same absolute spelling.
static bool samePath(StringRef a, StringRef b) {
  bool ea = llvm::sys::fs::exists(a), eb = llvm::sys::fs::exists(b);
  if (ea && eb) {
    bool same = false;
    return !llvm::sys::fs::equivalent(a, b, same) && same;
  }
  if (ea != eb)
    return false;
  SmallString<256> pa(a), pb(b);
  llvm::sys::fs::make_absolute(pa);
  llvm::sys::fs::make_absolute(pb);
  llvm::sys::path::remove_dots(pa, /*remove_dot_dot=*/true);
  llvm::sys::path::remove_dots(pb, /*remove_dot_dot=*/true);
  return pa == pb;
}

/// Refuses an output (-o, --memory-report, --memory-plot, --fusion-report)
/// that names the model or another output: it would overwrite the model, or
/// one output would be lost.
static LogicalResult checkOutputPaths() {
  SmallVector<std::pair<StringRef, StringRef>> outputs;
  if (!outputFile.empty() && outputFile != "-")
    outputs.push_back({"-o", outputFile});
  for (auto [flag, path] : {std::pair<StringRef, StringRef>{"--memory-report", memoryReport},
                            {"--memory-plot", memoryPlot},
                            {"--fusion-report", fusionReport}})
    if (!path.empty())
      outputs.push_back({flag, path});
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (samePath(outputs[i].second, inputFile)) {
      llvm::errs() << "tcc: error: " << outputs[i].first << " " << outputs[i].second
                   << " names the model " << inputFile
                   << ", which it would overwrite; choose another path\n";
      return failure();
    }
    for (size_t j = 0; j < i; ++j)
      if (samePath(outputs[i].second, outputs[j].second)) {
        llvm::errs() << "tcc: error: " << outputs[j].first << " and " << outputs[i].first
                     << " name the same path " << outputs[i].second
                     << "; give each its own\n";
        return failure();
      }
  }
  return success();
}

/// Checks every flag and fills `d`; a bad one fails with a message that
/// names it.
static LogicalResult parseFlags(Driver &d) {
  if (failed(checkOutputPaths()))
    return failure();
  if (failed(parseShapes(d.import)))
    return failure();
  // --memory-plot-compare: a second plan of the same step, with another
  // budget, drawn beside this one.
  if (!memoryPlotCompare.empty()) {
    if (memoryPlot.empty()) {
      llvm::errs() << "tcc: error: --memory-plot-compare draws a second plan beside the "
                      "first; it needs --memory-plot FILE.html\n";
      return failure();
    }
    std::optional<int64_t> parsed =
        memoryPlotCompare == "none" ? std::optional<int64_t>(0) : parseSize(memoryPlotCompare);
    if (!parsed || *parsed < 0) {
      llvm::errs() << "tcc: error: --memory-plot-compare=" << memoryPlotCompare
                   << ": expected a size such as 3G, or none\n";
      return failure();
    }
    d.compareBudget = *parsed;
  }
  if (!memoryPlot.empty()) {
    StringRef ext = llvm::sys::path::extension(memoryPlot);
    if (!ext.equals_insensitive(".html") && !ext.equals_insensitive(".htm") &&
        !ext.equals_insensitive(".svg")) {
      llvm::errs() << "tcc: error: --memory-plot=" << memoryPlot
                   << ": expected a file ending in .html (a page) or .svg (a picture)\n";
      return failure();
    }
  }
  // --offload and its cost model's figures.
  int64_t hostBudgetBytes = -1;
  if (offload != "none" && offload != "auto" && offload != "optimizer" && offload != "all") {
    llvm::errs() << "tcc: error: --offload=" << offload
                 << ": expected none, auto, optimizer or all\n";
    return failure();
  }
  if (offload != "none" && target != Target::Cuda) {
    llvm::errs() << "tcc: error: --offload=" << offload
                 << " applies to --target=cuda only: the CPU target's step has one "
                    "memory, so there is nothing to move to the host\n";
    return failure();
  }
  if (swapActivations != "none" && swapActivations != "auto" && swapActivations != "all") {
    llvm::errs() << "tcc: error: --swap-activations=" << swapActivations
                 << ": expected none, auto or all\n";
    return failure();
  }
  if (swapActivations != "none" && target != Target::Cuda) {
    llvm::errs() << "tcc: error: --swap-activations=" << swapActivations
                 << " applies to --target=cuda only: the CPU target's step has one "
                    "memory, so there is nothing to move to the host\n";
    return failure();
  }
  if (!(pcieGbps > 0) || !(hostGbps > 0)) {
    llvm::errs() << "tcc: error: --pcie-gbps and --host-gbps must be positive\n";
    return failure();
  }
  if (!hostBudget.empty()) {
    std::optional<int64_t> parsed = parseSize(hostBudget);
    if (!parsed || *parsed < 0) {
      llvm::errs() << "tcc: error: --host-budget=" << hostBudget
                   << ": expected a size such as 64G\n";
      return failure();
    }
    hostBudgetBytes = *parsed;
  }
  // The reports describe the planned step. Without -o they are what the run
  // is for: tcc plans the step, writes them and stops (no library).
  const bool wantsPlanReport =
      !memoryReport.empty() || !memoryPlot.empty() || !fusionReport.empty();
  if (wantsPlanReport && emit == EmitKind::Default && outputFile == "-") {
    emit = EmitKind::Planned;
    d.planOnly = true;
  } else if (wantsPlanReport && (emit == EmitKind::Summary || emit == EmitKind::Imported ||
                                 emit == EmitKind::Training)) {
    llvm::errs() << "tcc: error: --memory-report, --memory-plot and --fusion-report describe "
                    "the planned step, which --emit="
                 << (emit == EmitKind::Summary    ? "summary"
                     : emit == EmitKind::Imported ? "imported"
                                                  : "training")
                 << " stops before; drop --emit, or use --emit=planned\n";
    return failure();
  }
  if (!lossSpec.empty()) {
    SmallVector<StringRef> parts;
    StringRef(lossSpec).split(parts, ':');
    if (parts.size() != 3 || parts[1].empty() || parts[2].empty() ||
        (parts[0] != "cross-entropy" && parts[0] != "mse")) {
      llvm::errs() << "tcc: error: --loss=" << lossSpec
                   << ": expected cross-entropy:OUTPUT:LABELS or "
                      "mse:OUTPUT:TARGET\n";
      return failure();
    }
    tcc::AppendLossOptions lossOptions;
    lossOptions.kind = parts[0].str();
    lossOptions.output = parts[1].str();
    lossOptions.target = parts[2].str();
    d.loss = lossOptions;
  }
  if (lossChunkRows == "off")
    d.pipeline.lossChunkRows = 0;
  else if (lossChunkRows != "auto" &&
           (StringRef(lossChunkRows).getAsInteger(10, d.pipeline.lossChunkRows) ||
            d.pipeline.lossChunkRows <= 0)) {
    llvm::errs() << "tcc: error: --loss-chunk-rows=" << lossChunkRows
                 << ": expected auto, off or a number of rows\n";
    return failure();
  }
  if (gemmPadding == "off")
    d.pipeline.gemmPadGflops = -1.0;
  else if (gemmPadding == "all")
    d.pipeline.gemmPadGflops = 0.0;
  else if (gemmPadding != "auto") {
    llvm::errs() << "tcc: error: --gemm-padding=" << gemmPadding << ": expected auto, all or off\n";
    return failure();
  }
  // --mem-budget: the memory plan fits it (one arena, offsets reused by
  // lifetime, recomputation and offload chosen until it does).
  if (!memBudget.empty()) {
    std::optional<int64_t> parsed = parseSize(memBudget);
    if (!parsed || *parsed <= 0) {
      llvm::errs() << "tcc: error: --mem-budget=" << memBudget
                   << ": expected a size such as 12G, 512MiB or 100000\n";
      return failure();
    }
    d.budget = *parsed;
  }
  if (optimizer != "adamw" && optimizer != "sgd") {
    llvm::errs() << "tcc: error: --optimizer=" << optimizer
                 << ": expected adamw or sgd\n";
    return failure();
  }
  if (dataParallel < 1 || dataParallel > 65536) {
    llvm::errs() << "tcc: error: --data-parallel=" << dataParallel
                 << ": expected a number of ranks, 1 to 65536\n";
    return failure();
  }
  std::string arch = cudaArch;
  if (StringRef(arch).starts_with("sm_"))
    arch = arch.substr(3);
  int64_t archNumber = 0;
  if (arch.empty() || !llvm::all_of(arch, llvm::isDigit) ||
      StringRef(arch).getAsInteger(10, archNumber) || archNumber <= 0) {
    llvm::errs() << "tcc: error: --cuda-arch=" << cudaArch
                 << ": expected a compute capability such as 90 or sm_90\n";
    return failure();
  }
  if (cudaEmulation && target != Target::Cuda) {
    llvm::errs() << "tcc: error: --cuda-emulation applies to --target=cuda "
                    "only\n";
    return failure();
  }
  if (target == Target::Cuda && cpuPrecision == Precision::F64) {
    llvm::errs() << "tcc: error: --cpu-precision=f64 applies to --target=cpu "
                    "only (the default target is cuda)\n";
    return failure();
  }
  d.pipeline.target = target == Target::Cuda ? "cuda" : "cpu";
  d.pipeline.cudaArch = archNumber;
  d.pipeline.cpuPrecision = cpuPrecision == Precision::F64 ? "f64" : "f32";
  d.pipeline.rematPolicy = rematPolicy;
  d.pipeline.statePerParam = optimizer == "adamw" ? 2 : 1;
  d.pipeline.offload = offload;
  d.pipeline.dataParallel = dataParallel;
  d.pipeline.pcieGbps = pcieGbps;
  d.pipeline.hostGbps = hostGbps;
  d.pipeline.hostBudget = hostBudgetBytes;
  d.pipeline.swapActivations = swapActivations;
  d.pipeline.attentionFusion = !noAttentionFusion;
  d.pipeline.fusion = !noFusion;
  return success();
}

/// Reads the model, appends --loss's loss, and checks the import contract.
static OwningOpRef<ModuleOp> importModel(MLIRContext &context, const Driver &d,
                                         tcc::ImportStats &stats) {
  OwningOpRef<ModuleOp> module;
  {
    TimingScope scope = timeStage("import (ONNX to tcc)");
    module = tcc::importOnnxFile(&context, inputFile, d.import, &stats);
  }
  if (!module)
    return nullptr;

  PassManager pm(&context);
  TimingScope pmTiming = timeStage("import contract");
  timePasses(pm, pmTiming);
  if (d.loss)
    pm.addPass(tcc::createAppendLoss(*d.loss));
  pm.addPass(tcc::createCheckImportContract());
  if (failed(pm.run(*module)))
    return nullptr;

  return module;
}

/// The training step: forward + backward when the model has trainable
/// parameters, the forward pass alone otherwise.
static LogicalResult buildTrainingStep(ModuleOp module, Driver &d) {
  auto model = *module.getOps<func::FuncOp>().begin();
  bool trainable = false;
  for (unsigned i = 0; i < model.getNumArguments(); ++i)
    trainable |= model.getArgAttr(i, tcc::kParamAttr) &&
                 !model.getArgAttr(i, tcc::kFrozenAttr);
  d.pipeline.backward = trainable;
  PassManager train(module.getContext());
  TimingScope trainTiming = timeStage("training pipeline");
  timePasses(train, trainTiming);
  tcc::buildTrainingPipeline(train, d.pipeline);
  return train.run(module);
}

/// The memory plan (tcc-plan-pipeline, within --mem-budget), and the
/// reports and the plot that describe it.
static LogicalResult planStep(ModuleOp module, const Driver &d, bool reports = true) {
  MLIRContext &context = *module.getContext();
  auto addPlanPasses = [&](PassManager &pm, int64_t budget) {
    tcc::PipelineConfig config = d.pipeline;
    config.budget = budget;
    tcc::buildPlanPipeline(pm, config);
  };
  OwningOpRef<ModuleOp> compareModule;
  if (d.compareBudget)
    compareModule = module.clone();
  // The budget decides (issue 46): when the device alone cannot hold the
  // step within --mem-budget, tcc plans it again with host memory allowed
  // (--offload=auto --swap-activations=auto), unless either flag was given.
  // Only the first plan's over-budget error is held back; every other
  // diagnostic goes out as it comes.
  const bool mayUseHost = d.budget > 0 && d.pipeline.target == "cuda" &&
                          offload.getNumOccurrences() == 0 &&
                          swapActivations.getNumOccurrences() == 0;
  OwningOpRef<ModuleOp> beforePlan;
  if (mayUseHost)
    beforePlan = module.clone();
  std::string overBudget;
  LogicalResult planResult = failure();
  {
    std::optional<ScopedDiagnosticHandler> holdBack;
    if (mayUseHost)
      holdBack.emplace(&context, [&](Diagnostic &diag) -> LogicalResult {
        std::string text = diag.str();
        if (diag.getSeverity() != DiagnosticSeverity::Error || !overBudget.empty() ||
            !StringRef(text).starts_with("the step needs ") ||
            text.find(" but the budget is ") == std::string::npos)
          return failure(); // not ours: the next handler prints it
        overBudget = text;
        return success();
      });
    PassManager planPm(&context);
    TimingScope planPmTiming = timeStage("plan pipeline");
    timePasses(planPm, planPmTiming);
    addPlanPasses(planPm, d.budget);
    planResult = planPm.run(module);
  }
  if (failed(planResult) && !overBudget.empty()) {
    long long needed = 0;
    std::sscanf(overBudget.c_str(), "the step needs %lld", &needed);
    llvm::errs() << "tcc: the device alone cannot hold this step within --mem-budget="
                 << memBudget << " (it needs " << needed
                 << " bytes); planning it again with master weights, optimizer state, "
                    "gradient accumulators and activations allowed in host memory "
                    "(--offload=auto --swap-activations=auto; --offload=none refuses "
                    "instead)\n";
    module.getBodyRegion().takeBody(beforePlan->getBodyRegion());
    module->setAttrs((*beforePlan)->getAttrDictionary());
    tcc::PipelineConfig config = d.pipeline;
    config.budget = d.budget;
    config.offload = "auto";
    config.swapActivations = "auto";
    PassManager retry(&context);
    TimingScope retryTiming = timeStage("plan pipeline with host memory");
    timePasses(retry, retryTiming);
    tcc::buildPlanPipeline(retry, config);
    planResult = retry.run(module);
  }
  if (failed(planResult))
    return failure();
  // The plan passes recorded the target (tcc-set-target) and the plan; the
  // reports, the plot, the weights and the build read them from the IR.
  tcc::TargetAttr targetAttr = tcc::TargetAttr::of(module);
  auto planned = *module.getOps<func::FuncOp>().begin();
  tcc::LayoutAttr layout = tcc::LayoutAttr::of(planned);
  if (!targetAttr || !layout) {
    llvm::errs() << "tcc: internal error: the plan pipeline left no "
                 << (targetAttr ? "tcc.layout" : "tcc.target") << "\n";
    return failure();
  }
  const int64_t floatBytes = targetAttr.getFloatBytes();
  if (!reports)
    return success();
  if (!fusionReport.empty() && failed(tcc::writeFusionReport(planned, fusionReport)))
    return failure();
  if (!memoryReport.empty() &&
      failed(tcc::writeMemoryReport(planned, d.budget, pcieGbps, memoryReport)))
    return failure();
  if (!memoryPlot.empty()) {
    auto title = [&](int64_t b) {
      return llvm::sys::path::filename(inputFile).str() + " - " +
             (target == Target::Cuda ? "cuda" : "cpu") + ", " +
             (b > 0 ? "--mem-budget=" + humanBytes(b) : std::string("no budget"));
    };
    std::vector<tcc::plot::MemoryPlan> plans = {
        plotData(planned, floatBytes, d.budget, title(d.budget))};
    if (d.compareBudget) {
      PassManager comparePm(&context);
      addPlanPasses(comparePm, *d.compareBudget);
      if (failed(comparePm.run(*compareModule))) {
        llvm::errs() << "tcc: error: the plan to compare with (--memory-plot-compare="
                     << memoryPlotCompare << ") could not be made; see above\n";
        return failure();
      }
      plans.push_back(plotData(*compareModule->getOps<func::FuncOp>().begin(),
                               floatBytes, *d.compareBudget, title(*d.compareBudget)));
    }
    if (failed(writeMemoryPlot(plans, memoryPlot)))
      return failure();
  }
  return success();
}

/// What -o and --emit ask for from the planned step: the planned or
/// kernel IR, the step's source, or the step library (with its summary).
/// `libraryPath`: where the step library goes (-o, or a temporary file
/// that main packs); `evaluation`: the evaluation step (no weights, no
/// summary line).
static int emitOutput(ModuleOp module, const Driver &d, StringRef libraryPath,
                      bool evaluation = false) {
  tcc::TargetAttr targetAttr = tcc::TargetAttr::of(module);
  tcc::LayoutAttr layout = tcc::LayoutAttr::of(*module.getOps<func::FuncOp>().begin());
  if (emit == EmitKind::Planned)
    return writeOutput([&](llvm::raw_ostream &os) { module.print(os); });
  if (emit == EmitKind::Kernels) {
    PassManager kernels(module.getContext());
    TimingScope kernelsTiming = timeStage("kernel pipeline");
    timePasses(kernels, kernelsTiming);
    tcc::buildKernelPipeline(kernels);
    if (failed(kernels.run(module)))
      return 1;
    return writeOutput([&](llvm::raw_ostream &os) { module.print(os); });
  }
  Location fileLoc = tcc::fileLocation(module.getContext(), inputFile);
  tcc::StepEmitOptions emitOptions;
  emitOptions.embedWeights = !noWeights && !evaluation;
  emitOptions.modelName = llvm::sys::path::filename(inputFile).str();
  SmallString<256> absolute(inputFile);
  llvm::sys::fs::make_absolute(absolute);
  emitOptions.modelPath = absolute.str().str();
  emitOptions.optimizer = optimizer;
  emitOptions.memBudget = d.budget;
  TimingScope emitScope = timeStage("emit the step's source (kernel pipeline included)");
  FailureOr<tcc::EmittedStep> step = tcc::emitStep(module, emitOptions);
  emitScope.stop();
  if (failed(step))
    return 1;
  if (emit == EmitKind::Source && outputFile == "-")
    return writeOutput([&](llvm::raw_ostream &os) {
      // A CUDA step's kernels are a unit of their own (step_kernels.cu):
      // first, as they came before the tables and the body in one unit.
      if (!step->kernelSource.empty())
        os << step->kernelSource << "// ----- step.cu -----\n";
      os << step->source;
    });

  std::string weights;
  TimingScope weightsScope = timeStage("read the weights");
  if (emitOptions.embedWeights &&
      failed(tcc::readParameterValues(module.getContext(), inputFile, step->params,
                                      targetAttr.getStorage().isF64(), weights)))
    return 1;
  weightsScope.stop();
  tcc::StepBuildOptions buildOptions;
  buildOptions.keepTemps = keepTemps;
  buildOptions.cudaArch = std::to_string(targetAttr.getArch());
  buildOptions.cudaEmulation = cudaEmulation;
  if (!targetAttr.isCuda() && !targetAttr.getStorage().isF64() && cpuGemm == CpuGemm::Blas) {
    buildOptions.cpuBlas = tcc::configuredCpuBlas();
    if (buildOptions.cpuBlas.empty() && cpuGemm.getNumOccurrences())
      llvm::errs() << "tcc: warning: --cpu-gemm=blas: this tcc was built without a CBLAS "
                      "library (or it is gone); the step uses the reference GEMM\n";
  }
  if (emit == EmitKind::Source) {
    // A folder this run creates is removed again if anything in it cannot
    // be written (a full disk): never a half-written source folder.
    const bool existed = llvm::sys::fs::exists(outputFile);
    // Into a new or empty folder, or one an earlier --emit=source wrote
    // (its marker file): never over a user's own build.sh or step.cpp.
    SmallString<256> marker(outputFile);
    llvm::sys::path::append(marker, ".tcc-source");
    if (existed && llvm::sys::fs::is_directory(outputFile) && !llvm::sys::fs::exists(marker)) {
      std::error_code ec;
      llvm::sys::fs::directory_iterator it(outputFile, ec);
      if (!ec && it != llvm::sys::fs::directory_iterator()) {
        emitError(fileLoc) << "--emit=source -o " << outputFile
                           << ": the folder is not empty and was not written by tcc "
                              "(no .tcc-source in it), so its files could be the user's "
                              "own; give a new or empty folder";
        return 1;
      }
    }
    auto removeNew = llvm::make_scope_exit([&] {
      if (!existed)
        llvm::sys::fs::remove_directories(outputFile);
    });
    if (failed(tcc::writeStepSources(*step, outputFile, fileLoc, buildOptions)))
      return 1;
    SmallString<256> w(outputFile);
    llvm::sys::path::append(w, "weights.bin");
    std::error_code ec;
    llvm::raw_fd_ostream wos(w, ec);
    if (ec) {
      emitError(fileLoc) << "cannot write " << w << ": " << ec.message();
      return 1;
    }
    wos << weights;
    wos.close();
    if (wos.has_error()) {
      wos.clear_error();
      emitError(fileLoc) << "writing " << w << " failed";
      return 1;
    }
    {
      llvm::raw_fd_ostream mos(marker, ec);
      if (!ec)
        mos << "Written by tcc --emit=source; tcc writes into this folder again.\n";
    }
    removeNew.release();
    return 0;
  }
  if (outputFile == "-") {
    llvm::errs() << "tcc: error: the step library cannot go to stdout; pass "
                    "-o step.so (or --emit=summary)\n";
    return 1;
  }
  TimingScope buildScope = timeStage("build the step library (host compiler, nvcc)");
  if (failed(tcc::buildStepLibrary(*step, weights, libraryPath, fileLoc,
                                      buildOptions)))
    return 1;
  buildScope.stop();
  if (evaluation) {
    llvm::errs() << "tcc: " << outputFile << ": evaluation step, arena "
                 << humanBytes(layout.getArenaBytes()) << " (parameters "
                 << humanBytes(layout.getParamBytes()) << ", activations and temporaries "
                 << humanBytes(layout.getTemporaryBytes()) << ")\n";
    return 0;
  }
  llvm::errs() << "tcc: " << outputFile << ": arena "
               << humanBytes(layout.getArenaBytes()) << " (parameters "
               << humanBytes(layout.getParamBytes()) << ", gradients "
               << humanBytes(layout.getGradBytes()) << ", optimizer state "
               << humanBytes(layout.getStateBytes())
               << (layout.getShards() ? " (this rank's 1/" +
                                            std::to_string(layout.getShards().getRanks()) +
                                            ", ZeRO-1)"
                                      : std::string())
               << ", activations and "
               << "temporaries " << humanBytes(layout.getTemporaryBytes())
               << (layout.getWorkspace() >= 0 // the CUDA target's
                       ? ", fp16 working copies " +
                             humanBytes(layout.getShadowBytes()) +
                             ", GEMM workspace " +
                             humanBytes(layout.getWorkspaceBytes()) +
                             "; plus constants, input staging and CUDA runtime reserve " +
                             humanBytes(layout.getDeviceReserveBytes())
                       : std::string())
               << ")" << (d.budget ? ", budget " + humanBytes(d.budget) : "")
               << hostSummary(*module.getOps<func::FuncOp>().begin()) << "\n";
  return 0;
}

/// --with-eval: the evaluation step, from `eval` (the imported model, cloned
/// before the training pipeline) with every parameter fixed and dropout off
/// (so no backward pass is built), planned within what the training step
/// leaves of --mem-budget, built, and packed after the training step into -o.
static int emitWithEvaluation(ModuleOp trained, ModuleOp eval, const Driver &d) {
  tcc::LayoutAttr trainLayout = tcc::LayoutAttr::of(*trained.getOps<func::FuncOp>().begin());
  Driver e = d;
  e.compareBudget.reset();
  if (d.budget > 0) {
    e.budget = d.budget - trainLayout.getPlannedBytes();
    if (e.budget <= 0) {
      llvm::errs() << "tcc: error: --with-eval: the training step's plan takes all of "
                      "--mem-budget="
                   << memBudget << ", which leaves nothing for the evaluation step\n";
      return 1;
    }
  }
  auto func = *eval.getOps<func::FuncOp>().begin();
  Builder b(eval.getContext());
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, tcc::kParamAttr))
      func.setArgAttr(i, tcc::kFrozenAttr, b.getUnitAttr());
  func.walk([&](tcc::DropoutOp op) { op.setTraining(false); });
  if (failed(buildTrainingStep(eval, e)))
    return 1;
  if (d.budget > 0)
    llvm::errs() << "tcc: the evaluation step is planned within the "
                 << humanBytes(e.budget) << " the training step leaves of --mem-budget\n";
  if (failed(planStep(eval, e, /*reports=*/false)))
    return 1;
  // Both libraries into temporaries beside -o, the evaluation step then
  // appended to the training step's, which is renamed into place: -o is
  // the old file or the complete new one.
  std::string trainTmp = outputFile + ".tcc-train.tmp", evalTmp = outputFile + ".tcc-eval.tmp";
  auto cleanup = llvm::make_scope_exit([&] {
    llvm::sys::fs::remove(trainTmp);
    llvm::sys::fs::remove(evalTmp);
  });
  if (int rc = emitOutput(eval, e, evalTmp, /*evaluation=*/true))
    return rc;
  if (int rc = emitOutput(trained, d, trainTmp))
    return rc;
  return failed(tcc::packEvaluationStep(trainTmp, evalTmp, outputFile,
                                        tcc::fileLocation(eval.getContext(), inputFile)));
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "tcc " TCC_VERSION " (MLIR/LLVM " LLVM_VERSION_STRING
          "; ONNX opsets up to "
       << tcc::kMaxOpset << ")\n";
  });
  cl::HideUnrelatedOptions(tccCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "tcc: compiles an ONNX model into a training step\n\n"
      "  tcc model.onnx                             print what tcc understood\n"
      "  tcc model.onnx --mem-budget=12G -o step.so the fp16 CUDA step (nvcc), "
      "for tcc-run\n"
      "  tcc model.onnx --target=cpu -o step.so     the fp32 CPU step\n"
      "  tcc model.onnx --emit=source -o DIR        the step's source, to build "
      "elsewhere\n");

  MLIRContext context;
  context.loadDialect<tcc::TccDialect, func::FuncDialect>();
  if (listOps) {
    llvm::outs() << llvm::formatv("{0,-24} {1,-6} {2,-34} {3}\n", "onnx op", "since",
                                  "written as", "gradient");
    for (const tcc::SupportedOp &op : tcc::describeSupportedOps(&context))
      llvm::outs() << llvm::formatv("{0,-24} {1,-6} {2,-34} {3}\n", op.onnx, op.minOpset,
                                    op.writtenAs, op.gradient);
    return 0;
  }
  if (inputFile.empty()) {
    llvm::errs() << "tcc: no model given (tcc model.onnx ...; tcc --help says more)\n";
    return 1;
  }

  Driver d;
  if (failed(parseFlags(d)))
    return 1;
  if (timing)
    compileTiming.emplace();
  if (withEval && ((emit != EmitKind::Default && emit != EmitKind::Step) || outputFile == "-")) {
    llvm::errs() << "tcc: error: --with-eval builds an evaluation step into the step "
                    "library (-o step.so), not into --emit's other outputs\n";
    return 1;
  }

  // Diagnostics name the ONNX node; the generic form of the op adds nothing
  // a user can act on.
  context.printOpOnDiagnostic(false);
  tcc::OnnxDiagnosticHandler diagnostics(&context);

  tcc::ImportStats stats;
  OwningOpRef<ModuleOp> module = importModel(context, d, stats);
  if (!module)
    return 1;
  if (emit == EmitKind::Default)
    emit = outputFile == "-" ? EmitKind::Summary : EmitKind::Step;
  if (emit == EmitKind::Summary || emit == EmitKind::Imported)
    return writeOutput([&](llvm::raw_ostream &os) {
      if (emit == EmitKind::Summary)
        tcc::printSummary(*module, inputFile, stats, os);
      else
        module->print(os);
    });

  // --with-eval: the evaluation step starts from the same import.
  OwningOpRef<ModuleOp> evalModule;
  if (withEval) {
    if (stats.trainingBatchNorm) {
      emitError(*stats.trainingBatchNorm)
          << "BatchNormalization in training mode: the evaluation step (--with-eval) would "
             "normalize with its running statistics, which tcc-run does not update while "
             "training; compile without --with-eval";
      return 1;
    }
    evalModule = module->clone();
  }
  if (failed(buildTrainingStep(*module, d)))
    return 1;
  if (emit == EmitKind::Training)
    return writeOutput([&](llvm::raw_ostream &os) { module->print(os); });
  if (failed(planStep(*module, d)))
    return 1;
  if (d.planOnly) {
    tcc::LayoutAttr layout = tcc::LayoutAttr::of(*module->getOps<func::FuncOp>().begin());
    llvm::errs() << "tcc: planned peak " << humanBytes(layout.getPlannedBytes()) << " (arena "
                 << humanBytes(layout.getArenaBytes()) << ")"
                 << (d.budget ? ", budget " + humanBytes(d.budget) : "") << "; wrote";
    for (const std::string *f : {&memoryReport.getValue(), &memoryPlot.getValue(),
                                 &fusionReport.getValue()})
      if (!f->empty())
        llvm::errs() << " " << *f;
    llvm::errs() << " (no step library without -o)\n";
    return 0;
  }
  if (!evalModule)
    return emitOutput(*module, d, outputFile);
  return emitWithEvaluation(*module, *evalModule, d);
}
