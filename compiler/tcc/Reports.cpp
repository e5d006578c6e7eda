//===- Reports.cpp - tcc's summary, --fusion-report and --memory-report ---===//

#include "compiler/tcc/Reports.h"

#include "compiler/Dialect/TccOps.h"
#include "passes/PlanMemory.h"
#include "passes/tiers/TierCostModel.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/Support/FileUtilities.h"

#include <map>
#include <optional>

using namespace mlir;

/// A dictionary of integer, float, bool and string attributes as a JSON
/// object.
static llvm::json::Object toJson(DictionaryAttr dict) {
  llvm::json::Object o;
  for (NamedAttribute f : dict) {
    if (auto b = dyn_cast<BoolAttr>(f.getValue()))
      o[f.getName().getValue()] = b.getValue();
    else if (auto i = dyn_cast<IntegerAttr>(f.getValue()))
      o[f.getName().getValue()] = i.getInt();
    else if (auto x = dyn_cast<FloatAttr>(f.getValue()))
      o[f.getName().getValue()] = x.getValueAsDouble();
    else if (auto s = dyn_cast<StringAttr>(f.getValue()))
      o[f.getName().getValue()] = s.getValue().str();
  }
  return o;
}

/// The array of dictionaries `attr` names on `func`, as JSON.
static llvm::json::Array decisionsJson(func::FuncOp func, StringRef attr) {
  llvm::json::Array out;
  if (auto list = func->getAttrOfType<ArrayAttr>(attr))
    for (Attribute a : list)
      out.push_back(toJson(cast<DictionaryAttr>(a)));
  return out;
}

/// Writes `report` to `path` as indented JSON.
static LogicalResult writeJson(llvm::json::Object report, StringRef path) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    llvm::errs() << "tcc: error: cannot write " << path << ": " << ec.message()
                 << "\n";
    return failure();
  }
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(report))) << "\n";
  return success();
}

/// Writes tcc-fuse's decisions and counts as JSON (--fusion-report).
LogicalResult mlir::tcc::writeFusionReport(func::FuncOp func, StringRef path) {
  llvm::json::Object report;
  if (auto stats = func->getAttrOfType<DictionaryAttr>("tcc.fusion_stats"))
    report = toJson(stats);
  report["decisions"] = decisionsJson(func, "tcc.fusion_decisions");
  return writeJson(std::move(report), path);
}

/// A CUDA plan that recomputes activations: what swapping them to host
/// memory instead would cost, by the tier cost model's SwapEstimate (the
/// bytes the remat decisions stopped keeping, PCIe at --pcie-gbps or the
/// plan's #tcc.tiers rate). With --swap-activations, what
/// tcc-swap-activations decided and its figures (`tcc.swaps`) instead. None
/// without either.
static std::optional<llvm::json::Object> activationSwap(func::FuncOp func, double pcieGbps) {
  if (auto swaps = func->getAttrOfType<DictionaryAttr>("tcc.swaps")) {
    llvm::json::Object o = toJson(swaps);
    o["note"] = "--swap-activations: the recomputed values tcc-swap-activations found (candidates), "
                "whether it swapped them, and its estimate (seconds by the roofline model at the "
                "device's published rates, copies at pcie_gbps hidden under their pass as far as "
                "it is long, on a link shared with the host tiers' traffic: estimates, not "
                "measurements)";
    o["host_bytes"] = ::mlir::tcc::swappedActivationBytes(func);
    return o;
  }
  ::mlir::tcc::TargetAttr target = ::mlir::tcc::TargetAttr::of(func);
  auto decisions = func->getAttrOfType<ArrayAttr>("tcc.remat_decisions");
  if (!target || !target.isCuda() || !decisions || decisions.empty())
    return std::nullopt;
  int64_t bytes = 0;
  for (auto d : decisions.getAsRange<DictionaryAttr>())
    if (auto b = d.getAs<IntegerAttr>("bytes"))
      bytes += b.getInt();
  ::mlir::tcc::LayoutAttr layout = ::mlir::tcc::LayoutAttr::of(func);
  int64_t statePerParam = layout.getState().size() / std::max<size_t>(layout.getParams().size(), 1);
  ::mlir::tcc::SwapEstimate e = ::mlir::tcc::estimateSwap(func, bytes, pcieGbps, statePerParam);
  return llvm::json::Object{
      {"note", "estimates, not measurements, optimistic for the swap (each copy hidden under its "
               "pass as far as the pass is long): swapping the recomputed values' saved bytes to host "
               "memory after their forward use and back before their backward use, instead of "
               "recomputing them; tcc --swap-activations=auto|all does it"},
      {"bytes", bytes},
      {"pcie_gbps", e.pcieBytesPerSecond / 1e9},
      {"copy_seconds_each_way", e.copySeconds},
      {"exposed_copy_seconds", e.exposedSeconds()},
      {"link_busy_seconds", e.linkBusySeconds},
      {"recompute_seconds", e.recomputeSeconds},
      {"micro_step_compute_seconds", e.forwardSeconds + e.backwardSeconds + e.recomputeSeconds},
      {"swap_pays", e.pays()},
  };
}

/// Writes the plan's breakdown as JSON (--memory-report).
LogicalResult mlir::tcc::writeMemoryReport(func::FuncOp func, int64_t budget, double pcieGbps,
                                          StringRef path) {
  ::mlir::tcc::LayoutAttr layout = ::mlir::tcc::LayoutAttr::of(func);
  if (!layout)
    return func.emitError("--memory-report needs the memory plan (tcc.layout)");
  int64_t stepFlops = 0, recomputedFlops = 0;
  // The step's ops, each once: a fusion's cost is its body's.
  for (Operation &op : func.getBody().front()) {
    int64_t f = ::mlir::tcc::estimateFlops(&op);
    stepFlops += f;
    if (op.hasAttr("tcc.remat"))
      recomputedFlops += f;
  }
  llvm::json::Object report{
      {"planned_peak_bytes", layout.getPlannedBytes()},
      {"arena_bytes", layout.getArenaBytes()},
      {"budget_bytes", budget},
      {"categories",
       llvm::json::Object{
           {"parameters", layout.getParamBytes()},
           {"gradients", layout.getGradBytes()},
           {"optimizer_state", layout.getStateBytes()},
           {"inputs", layout.getInputBytes()},
           {"outputs", layout.getOutputBytes()},
           {"activations_and_temporaries", layout.getTemporaryBytes()},
           {"fp16_working_copies", layout.getShadowBytes()},
           {"library_workspace", layout.getWorkspaceBytes()},
           {"constants_and_runtime_reserve", layout.getDeviceReserveBytes()},
       }},
      {"saved_activation_bytes", layout.getSavedActivationBytes()},
      {"temporary_bytes_without_reuse", layout.getTemporaryBytesUnshared()},
      {"step_flops", stepFlops},
      {"recomputed_flops", recomputedFlops},
      {"remat_decisions", decisionsJson(func, "tcc.remat_decisions")},
  };
  if (::mlir::tcc::ShardsAttr shards = layout.getShards()) {
    // Bytes are one rank's; what the state would take unsharded, beside.
    int64_t kinds = static_cast<int64_t>(shards.getState().size());
    report["data_parallel"] = llvm::json::Object{
        {"ranks", shards.getRanks()},
        {"note", "ZeRO-1: every byte count above is one rank's; each rank keeps the "
                 "optimizer state of one chunk of the flat parameter space"},
        {"flat_elements", shards.getFlatElems()},
        {"chunk_elements", shards.getChunkElems()},
        {"optimizer_state_per_rank_bytes", layout.getStateBytes()},
        {"optimizer_state_unsharded_bytes",
         kinds * shards.getFlatElems() * shards.getElemBytes()},
        {"reduce_scatter_buffer_bytes", shards.getChunkBytes()},
    };
  }
  if (auto swap = activationSwap(func, pcieGbps))
    report["activation_swap"] = std::move(*swap);
  if (int64_t swapped = ::mlir::tcc::swappedActivationBytes(func);
      swapped > 0 && !::mlir::tcc::TiersAttr::of(func))
    report["host"] = llvm::json::Object{
        {"bytes", layout.getHostBytes()},
        {"categories", llvm::json::Object{{"swapped_activations", swapped}}},
    };
  if (::mlir::tcc::TiersAttr tiers = ::mlir::tcc::TiersAttr::of(func)) {
    ::mlir::tcc::TargetAttr target = ::mlir::tcc::TargetAttr::of(func);
    ::mlir::tcc::TierEstimate e = ::mlir::tcc::estimateTiers(func, tiers, target.getFloatBytes(),
                                             layout.getState().size() /
                                                 std::max<size_t>(layout.getParams().size(), 1));
    auto argNames = [&](ArrayRef<int64_t> args) {
      llvm::json::Array names;
      for (int64_t a : args)
        if (auto n = func.getArgAttrOfType<StringAttr>(a, ::mlir::tcc::kParamAttr))
          names.push_back(n.getValue().str());
      return names;
    };
    report["host"] = llvm::json::Object{
        {"bytes", layout.getHostBytes()},
        {"budget_bytes", tiers.getHostBudget()},
        {"categories",
         llvm::json::Object{
             {"parameters", layout.getHostParamBytes()},
             {"gradients", layout.getHostGradBytes()},
             {"optimizer_state", layout.getHostStateBytes()},
             {"swapped_activations", ::mlir::tcc::swappedActivationBytes(func)},
         }},
        {"state_on_host", argNames(tiers.getHostState().asArrayRef())},
        {"gradients_on_host", argNames(tiers.getHostGrads().asArrayRef())},
    };
    report["estimate"] = llvm::json::Object{
        {"note", "seconds by the cost model (roofline per op at the device's published rates, "
                 "transfers and the host update at the stated bandwidths, no overlap): "
                 "estimates, not measurements"},
        {"pcie_gbps", tiers.getPcieMbps() / 1e3},
        {"host_gbps", tiers.getHostMbps() / 1e3},
        {"device_tflops", tiers.getDeviceGflops() / 1e3},
        {"device_gbps", tiers.getDeviceMbps() / 1e3},
        {"micro_step_compute_seconds", e.computeSeconds},
        {"recompute_seconds", e.recomputeSeconds},
        {"pcie_bytes_per_micro_step", e.pcieBytesPerMicroStep},
        {"pcie_bytes_per_optimizer_step", e.pcieBytesPerStep},
        {"host_bytes_per_micro_step", e.hostBytesPerMicroStep},
        {"host_bytes_per_optimizer_step", e.hostBytesPerStep},
        {"transfer_seconds_per_micro_step", e.transferSecondsPerMicroStep},
        {"transfer_seconds_per_optimizer_step", e.transferSecondsPerStep},
        {"host_seconds_per_micro_step", e.hostSecondsPerMicroStep},
        {"host_update_seconds_per_optimizer_step", e.hostSecondsPerStep},
        {"added_seconds_per_optimizer_step_accum_1", e.addedSeconds(1)},
        {"step_seconds_accum_1", e.computeSeconds + e.tierSeconds(1)},
    };
  }
  llvm::json::Array largest;
  for (auto v : layout.getPeakValues().getAsRange<DictionaryAttr>())
    largest.push_back(toJson(v));
  report["peak"] = llvm::json::Object{
      {"op", layout.getPeakOp().str()},
      {"live_bytes", layout.getPeakLiveBytes()},
      {"largest_values", std::move(largest)},
  };
  return writeJson(std::move(report), path);
}

static std::string typeStr(Type t) {
  auto rt = cast<RankedTensorType>(t);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << rt.getElementType() << " [";
  llvm::interleave(rt.getShape(), os, ", ");
  os << "]";
  return s;
}

static std::string withCommas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

void mlir::tcc::printSummary(ModuleOp module, StringRef modelPath, const ImportStats &stats,
                             llvm::raw_ostream &os) {
  auto func = *module.getOps<func::FuncOp>().begin();
  int64_t numOps = 0;
  std::map<std::string, int64_t> histogram;
  func.walk([&](Operation *op) {
    if (isa<tcc::TccDialect>(op->getDialect())) {
      ++numOps;
      ++histogram[op->getName().getStringRef().str()];
    }
  });
  os << "model     " << modelPath << "\n";
  os << "          opset " << stats.opset;
  if (!stats.producer.empty())
    os << ", producer " << stats.producer;
  os << "; " << stats.numNodes << " ONNX nodes -> " << numOps
     << " tcc ops (" << stats.numFolded
     << " nodes folded at compile time)\n";

  size_t width = 8;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    for (StringRef attr : {tcc::kParamAttr, tcc::kInputAttr})
      if (auto n = func.getArgAttrOfType<StringAttr>(i, attr))
        width = std::max(width, n.size());
  auto row = [&](StringRef label, StringRef name, const std::string &rest) {
    os << llvm::formatv("{0,-10}{1}", label, name);
    os.indent(width + 2 - name.size()) << rest << "\n";
  };

  bool first = true;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto n = func.getArgAttrOfType<StringAttr>(i, tcc::kInputAttr)) {
      row(first ? "inputs" : "", n.getValue(), typeStr(func.getArgument(i).getType()));
      first = false;
    }
  if (auto objective = func->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
          tcc::kObjectiveAttr)) {
    std::string text;
    for (StringRef key : {"task", "ids", "labels", "mask", "labels-shift"})
      if (auto v = objective.getAs<StringAttr>(key))
        text += (text.empty() ? "" : ", ") + key.str() + " " + v.getValue().str();
    os << "objective " << text << "\n";
  }
  first = true;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto n = func.getResultAttrOfType<StringAttr>(i, tcc::kOutputAttr);
    row(first ? "outputs" : "", n ? n.getValue() : "?",
        typeStr(func.getResultTypes()[i]));
    first = false;
  }
  int64_t numParams = 0, numValues = 0, numFrozen = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttrOfType<StringAttr>(i, tcc::kParamAttr)) {
      ++numParams;
      numValues += cast<RankedTensorType>(func.getArgument(i).getType())
                       .getNumElements();
      numFrozen += func.getArgAttr(i, tcc::kFrozenAttr) ? 1 : 0;
    }
  os << "params    " << numParams << " tensors, " << withCommas(numValues)
     << " values (" << llvm::formatv("{0:F1}", numValues * 4 / 1024.0)
     << " KiB as fp32); " << numParams - numFrozen << " trainable, "
     << numFrozen << " frozen\n";
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto n = func.getArgAttrOfType<StringAttr>(i, tcc::kParamAttr))
      row("", n.getValue(),
          typeStr(func.getArgument(i).getType()) +
              (func.getArgAttr(i, tcc::kFrozenAttr) ? "  (frozen)" : ""));
  if (!stats.constants.empty()) {
    os << "buffers   " << stats.constants.size()
       << " floating-point initializers kept fixed as constants\n";
    for (auto &[name, reason] : stats.constants)
      row("", name, reason);
  }
  os << "ops       ";
  std::vector<std::pair<int64_t, std::string>> sorted;
  for (auto &[name, count] : histogram)
    sorted.emplace_back(-count, name);
  llvm::sort(sorted);
  int column = 10;
  for (auto &[count, name] : sorted) {
    std::string item = name.substr(4) + " " + std::to_string(-count);
    if (column + item.size() > 78) {
      os << "\n          ";
      column = 10;
    }
    os << item << "  ";
    column += item.size() + 2;
  }
  os << "\n";
  // Training-mode dropout draws random masks: say so, and how they are seeded.
  std::map<double, int> ratios;
  func.walk([&](tcc::DropoutOp d) {
    if (d.getTraining() && !d.getRatio().isZero())
      ++ratios[d.getRatio().convertToDouble()];
  });
  if (!ratios.empty()) {
    os << "dropout   ";
    bool firstRatio = true;
    for (auto &[ratio, count] : ratios) {
      os << (firstRatio ? "" : ", ") << count << " at "
         << llvm::formatv("{0}", (float)ratio);
      firstRatio = false;
    }
    os << " in training mode: random masks from the step's random state "
          "(tcc-run --seed)\n";
  }
}
