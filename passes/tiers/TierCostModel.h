//===- TierCostModel.h - what keeping state in host memory costs -*- C++ -*-===//
//
// The one cost model that tcc-remat weighs recomputation and host memory
// with (docs/memory.md, "Host memory"): each op's time on the device as a
// roofline (FLOPs at the device's rate, bytes at its memory bandwidth), the
// bytes a plan's host tiers move over PCIe and through host memory, and the
// time those take at the stated bandwidths. `tcc --memory-report` prints
// the same estimate.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_TIERS_TIERCOSTMODEL_H
#define TCC_PASSES_TIERS_TIERCOSTMODEL_H

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>

namespace mlir::tcc {

/// Published dense fp16 tensor-core rate (fp32 accumulation) and memory
/// bandwidth of the GPU generation `arch` (compute capability) stands for:
/// 90 H200, 89 RTX 4090, 86 RTX 3090, 80 A100, 75 T4, 70 V100; an
/// architecture between two entries gets the lower one's.
struct DeviceRates {
  const char *gpu;
  double flopsPerSecond, bytesPerSecond;
};
DeviceRates deviceRatesForArch(int64_t arch);

/// PCIe 4.0 x16 per direction: 16 GT/s x 16 lanes, 128b/130b coding.
inline constexpr double kDefaultPcieGBps = 31.5;
/// Host memory bandwidth the host update is assumed to reach: about 60% of
/// dual-channel DDR4-3200's 51.2 GB/s, a typical STREAM triad figure.
inline constexpr double kDefaultHostGBps = 30.0;

/// Ops a micro-step's gradient copy to the host may take before the step
/// reuses its device buffer: the buffer stays live (in the plan) for this
/// many ops after the op that makes the gradient, and the runtime waits for
/// the copy there.
inline constexpr int64_t kHostCopyLagOps = 2;

/// The estimated seconds `op` takes on the device: the larger of its FLOPs
/// (CostOpInterface) at the device's rate and the bytes of its operands and
/// results (as the plan stores them) at its bandwidth.
double rooflineSeconds(Operation *op, int64_t floatBytes, const DeviceRates &rates);

/// What a step's plan with host tiers moves and what that is estimated to
/// cost, per micro-step and per optimizer step.
struct TierEstimate {
  /// The micro-step's ops (recomputation included), and the recomputed
  /// ones alone (tcc.remat), on the device.
  double computeSeconds = 0, recomputeSeconds = 0;
  /// Bytes over PCIe: each micro-step's gradients of host accumulators; and
  /// per optimizer step, the device accumulators of host-updated parameters
  /// down and their refreshed fp16 working copies up.
  int64_t pcieBytesPerMicroStep = 0, pcieBytesPerStep = 0;
  /// Bytes through host memory: the host accumulators' additions each
  /// micro-step, and the host AdamW/SGD update each optimizer step.
  int64_t hostBytesPerMicroStep = 0, hostBytesPerStep = 0;
  double transferSecondsPerMicroStep = 0, transferSecondsPerStep = 0;
  double hostSecondsPerMicroStep = 0, hostSecondsPerStep = 0;

  /// Seconds the tiers and recomputation add to an optimizer step of
  /// `accum` micro-steps, with no overlap counted (an upper bound).
  double addedSeconds(int64_t accum) const {
    return accum * (recomputeSeconds + transferSecondsPerMicroStep + hostSecondsPerMicroStep) +
           transferSecondsPerStep + hostSecondsPerStep;
  }
  /// Seconds the tiers alone add (no recomputation).
  double tierSeconds(int64_t accum) const {
    return accum * (transferSecondsPerMicroStep + hostSecondsPerMicroStep) +
           transferSecondsPerStep + hostSecondsPerStep;
  }
};

/// The rates a #tcc.tiers records, in bytes and FLOPs per second.
struct TierRates {
  double pcieBytesPerSecond, hostBytesPerSecond;
  DeviceRates device;
  static TierRates of(TiersAttr tiers);
};

/// Estimates `func`'s cost under `tiers` (which need not be on `func`):
/// `statePerParam` optimizer state tensors per parameter (AdamW 2, SGD 1).
TierEstimate estimateTiers(func::FuncOp func, TiersAttr tiers, int64_t floatBytes,
                           int64_t statePerParam);

/// Swapping saved activations to host memory instead of recomputing them
/// (tcc-swap-activations; --memory-report's activation_swap): `bytes` go
/// out during the forward pass and back during the backward pass, one
/// PCIe direction each, hidden under the pass as far as it is long, on a
/// link the host tiers' own traffic shares; it pays where the time left
/// exposed is less than the recomputation it replaces.
struct SwapEstimate {
  int64_t bytes = 0;      // each way
  double copySeconds = 0; // each way
  /// The micro-step's roofline times: up to the loss op, after it, and of
  /// the recomputing ops (tcc.remat) wherever they are.
  double forwardSeconds = 0, backwardSeconds = 0, recomputeSeconds = 0;
  /// Each direction's share of the host tiers' PCIe traffic per micro-step
  /// (one micro-step per optimizer step, the costliest case).
  double linkBusySeconds = 0;
  double pcieBytesPerSecond = 0;

  /// The estimate for `bytes` swapped instead of `recomputeSeconds` of
  /// recomputation, on the same passes and link.
  SwapEstimate with(int64_t bytes, double recomputeSeconds) const;
  /// What the copies add to the time the passes cannot hide, beyond what
  /// the tiers' traffic already leaves exposed.
  double exposedSeconds() const;
  bool pays() const { return exposedSeconds() < recomputeSeconds; }
};

/// The swap estimate of `func` for `bytes`, against all of its
/// recomputation: PCIe at `pcieGbps`, or its #tcc.tiers rate where it has
/// host tiers; `statePerParam` as for estimateTiers.
SwapEstimate estimateSwap(func::FuncOp func, int64_t bytes, double pcieGbps,
                          int64_t statePerParam);

/// The roofline seconds of `func`'s recomputing ops (tcc.remat).
double recomputeSeconds(func::FuncOp func, const DeviceRates &rates);

/// The parameters whose state may move to the host, as argument numbers,
/// largest first (ties by number): trainable float parameters of rank one
/// or more, which the step reads through fp16 working copies.
SmallVector<unsigned> hostTierCandidates(func::FuncOp func);

/// The host memory this machine has available (MemAvailable), or
/// std::nullopt where it cannot be read.
std::optional<int64_t> availableHostMemory();

} // namespace mlir::tcc

#endif // TCC_PASSES_TIERS_TIERCOSTMODEL_H
