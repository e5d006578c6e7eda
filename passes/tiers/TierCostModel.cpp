//===- TierCostModel.cpp - what keeping state in host memory costs --------===//

#include "passes/tiers/TierCostModel.h"
#include "passes/PlanMemory.h"

#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

using namespace mlir;
using namespace mlir::tcc;

DeviceRates mlir::tcc::deviceRatesForArch(int64_t arch) {
  // NVIDIA's data sheets: dense FP16 tensor TFLOP/s with FP32 accumulation,
  // and memory bandwidth.
  static const struct {
    int64_t arch;
    DeviceRates rates;
  } table[] = {
      {90, {"H200", 989e12, 4.8e12}},  {89, {"RTX 4090", 165e12, 1.008e12}},
      {86, {"RTX 3090", 71e12, 936e9}}, {80, {"A100", 312e12, 2.039e12}},
      {75, {"T4", 65e12, 320e9}},       {70, {"V100", 125e12, 900e9}},
  };
  for (const auto &e : table)
    if (arch >= e.arch)
      return e.rates;
  return table[std::size(table) - 1].rates;
}

double mlir::tcc::rooflineSeconds(Operation *op, int64_t floatBytes, const DeviceRates &rates) {
  if (isa<func::ReturnOp>(op) || isStaticConstant(op) || isAliasView(op))
    return 0;
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()))
      bytes += valueBytes(v, floatBytes);
  for (Value v : op->getResults())
    if (isa<RankedTensorType>(v.getType()))
      bytes += valueBytes(v, floatBytes);
  double flops = static_cast<double>(estimateFlops(op));
  return std::max(flops / rates.flopsPerSecond, bytes / rates.bytesPerSecond);
}

TierRates TierRates::of(TiersAttr tiers) {
  TierRates r;
  r.pcieBytesPerSecond = tiers.getPcieMbps() * 1e6;
  r.hostBytesPerSecond = tiers.getHostMbps() * 1e6;
  r.device = {"", tiers.getDeviceGflops() * 1e9, tiers.getDeviceMbps() * 1e6};
  return r;
}

/// The values `func` returns as the gradient of each parameter, by the
/// parameter's argument number.
static llvm::DenseMap<unsigned, SmallVector<Value>> gradientsByArgument(func::FuncOp func) {
  llvm::StringMap<unsigned> argOf;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto n = func.getArgAttrOfType<StringAttr>(i, kParamAttr))
      argOf[n.getValue()] = i;
  llvm::DenseMap<unsigned, SmallVector<Value>> grads;
  Operation *ret = func.getBody().front().getTerminator();
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto n = func.getResultAttrOfType<StringAttr>(i, kGradAttr)) {
      auto it = argOf.find(n.getValue());
      if (it != argOf.end())
        grads[it->second].push_back(ret->getOperand(i));
    }
  return grads;
}

TierEstimate mlir::tcc::estimateTiers(func::FuncOp func, TiersAttr tiers, int64_t floatBytes,
                                      int64_t statePerParam) {
  TierEstimate e;
  TierRates rates = TierRates::of(tiers);
  for (Operation &op : func.getBody().front()) {
    double s = rooflineSeconds(&op, floatBytes, rates.device);
    e.computeSeconds += s;
    if (op.hasAttr("tcc.remat"))
      e.recomputeSeconds += s;
  }
  llvm::DenseMap<unsigned, SmallVector<Value>> grads = gradientsByArgument(func);
  for (int64_t arg : tiers.getHostState().asArrayRef()) {
    int64_t n = cast<RankedTensorType>(func.getArgument(arg).getType()).getNumElements();
    if (tiers.gradOnHost(arg)) {
      // Each micro-step's gradient goes down as the step stores it, and is
      // added into the fp32 accumulator: read it, read and write the sum.
      for (Value g : grads.lookup(arg))
        e.pcieBytesPerMicroStep += valueBytes(g, floatBytes);
      e.hostBytesPerMicroStep += 4 * n + 8 * n;
    } else {
      e.pcieBytesPerStep += 4 * n; // the device accumulator, once per step
    }
    e.pcieBytesPerStep += 2 * n; // the refreshed fp16 working copy
    // The update: read the gradient, read and write the master weights and
    // each state tensor (fp32), write the fp16 working copy.
    e.hostBytesPerStep += 4 * n + 8 * n + 8 * n * statePerParam + 2 * n;
  }
  e.transferSecondsPerMicroStep = e.pcieBytesPerMicroStep / rates.pcieBytesPerSecond;
  e.transferSecondsPerStep = e.pcieBytesPerStep / rates.pcieBytesPerSecond;
  e.hostSecondsPerMicroStep = e.hostBytesPerMicroStep / rates.hostBytesPerSecond;
  e.hostSecondsPerStep = e.hostBytesPerStep / rates.hostBytesPerSecond;
  return e;
}

SmallVector<unsigned> mlir::tcc::hostTierCandidates(func::FuncOp func) {
  llvm::DenseMap<unsigned, SmallVector<Value>> grads = gradientsByArgument(func);
  SmallVector<unsigned> args;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    Value arg = func.getArgument(i);
    auto t = cast<RankedTensorType>(arg.getType());
    if (func.getArgAttr(i, kParamAttr) && grads.count(i) && isa<FloatType>(t.getElementType()) &&
        !storedAsF32(arg))
      args.push_back(i);
  }
  auto elements = [&](unsigned i) {
    return cast<RankedTensorType>(func.getArgument(i).getType()).getNumElements();
  };
  llvm::stable_sort(args, [&](unsigned a, unsigned b) { return elements(a) > elements(b); });
  return args;
}

std::optional<int64_t> mlir::tcc::availableHostMemory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib;
    if (fields >> key >> kib && key == "MemAvailable:")
      return kib * 1024;
  }
  return std::nullopt;
}

double mlir::tcc::recomputeSeconds(func::FuncOp func, const DeviceRates &rates) {
  double t = 0;
  for (Operation &op : func.getBody().front())
    if (op.hasAttr("tcc.remat"))
      t += rooflineSeconds(&op, kMixedPrecision, rates);
  return t;
}

SwapEstimate SwapEstimate::with(int64_t b, double recompute) const {
  SwapEstimate e = *this;
  e.bytes = b;
  e.copySeconds = static_cast<double>(b) / pcieBytesPerSecond;
  e.recomputeSeconds = recompute;
  return e;
}

double SwapEstimate::exposedSeconds() const {
  auto exposed = [&](double link) {
    return std::max(0.0, link - forwardSeconds) + std::max(0.0, link - backwardSeconds);
  };
  return exposed(copySeconds + linkBusySeconds) - exposed(linkBusySeconds);
}

SwapEstimate mlir::tcc::estimateSwap(func::FuncOp func, int64_t bytes, double pcieGbps,
                                     int64_t statePerParam) {
  SwapEstimate e;
  TargetAttr target = TargetAttr::of(func);
  DeviceRates rates = deviceRatesForArch(target ? target.getArch() : 90);
  e.pcieBytesPerSecond = pcieGbps * 1e9;
  if (TiersAttr tiers = TiersAttr::of(func)) {
    e.pcieBytesPerSecond = TierRates::of(tiers).pcieBytesPerSecond;
    TierEstimate t = estimateTiers(func, tiers, kMixedPrecision, statePerParam);
    e.linkBusySeconds = (t.pcieBytesPerMicroStep + t.pcieBytesPerStep) / 2.0 / e.pcieBytesPerSecond;
  }
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  Operation *lossOp = ret->getNumOperands() ? ret->getOperand(0).getDefiningOp() : nullptr;
  bool backward = false;
  for (Operation &op : body) {
    double t = rooflineSeconds(&op, kMixedPrecision, rates);
    if (op.hasAttr("tcc.remat"))
      e.recomputeSeconds += t;
    else if (backward)
      e.backwardSeconds += t;
    else
      e.forwardSeconds += t;
    backward |= &op == lossOp;
  }
  return e.with(bytes, e.recomputeSeconds);
}
