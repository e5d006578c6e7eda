//===- PlanMemory.h - what the memory planner decides -----------*- C++ -*-===//
#ifndef TCC_PASSES_PLANMEMORY_H
#define TCC_PASSES_PLANMEMORY_H

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

#include <optional>

namespace mlir::tcc {

/// The byte offset in the step's host buffer that tcc-plan-memory gives a
/// swapped value (on its tcc.swap_out and tcc.swap_in).
inline constexpr llvm::StringLiteral kHostOffsetAttr = "tcc.host_offset";

/// Numbers the ops of a training step's `body` in program order into
/// `index` and returns the forward/backward boundary: the position just
/// after the op that makes the loss (result 0), after which
/// tcc-build-backward put the backward pass; std::nullopt without one.
std::optional<int64_t> numberStepOps(Block &body, llvm::DenseMap<Operation *, int64_t> &index);

/// Bytes of the activations `func` swaps to host memory (tcc.swap_out).
int64_t swappedActivationBytes(func::FuncOp func);

/// Byte alignment of every arena slot.
inline constexpr int64_t kArenaAlignment = 64;

/// Whether `op` is a constant the library keeps in read-only data rather than
/// in the arena (small or non-uniform constants); its result has no slot.
bool isStaticConstant(Operation *op);

/// Whether `op` only reinterprets its operand's bytes (reshape, squeeze,
/// unsqueeze, identity): its result shares the operand's buffer.
bool isAliasView(Operation *op);

/// Whether no op after `at` (in `index`'s numbering) reads `v`, directly or
/// through views.
bool diesAt(Value v, int64_t at, const llvm::DenseMap<Operation *, int64_t> &index);

/// The operand whose buffer result `result` of `op` (at `index`) takes over,
/// if any, in a plan where `bufferOf(v)` is the value whose buffer holds `v`
/// (itself, or the root it views or was written over) and `isTemporary(b)`
/// whether buffer `b` is a temporary of the plan. Candidates: the fused
/// loss's gradient over the logits (each row is read before it is written);
/// on the CUDA target (`floatBytes` kMixedPrecision) a loop fusion's result
/// written in its last pass over an operand of its type (attention's score
/// gradient over the probabilities' gradient). The operand's buffer must die
/// at `op`, be as large as the result, and not be taken by an earlier
/// result of `op`. The memory plan and remat's bound both ask.
std::optional<unsigned> inPlaceOperand(Operation *op, unsigned result,
                                       llvm::function_ref<Value(Value)> bufferOf,
                                       llvm::function_ref<bool(Value)> isTemporary,
                                       const llvm::DenseMap<Operation *, int64_t> &index,
                                       int64_t floatBytes);

/// `v` without the views (isAliasView) in front of it: the value whose
/// buffer holds its bytes.
Value viewRoot(Value v);

/// Where the step adds the gradient it returns as `v` into its accumulator:
/// right after the op that makes `v`'s bytes (through views), so that the
/// buffer is free after its last other reader instead of at the end of the
/// step; nullptr when no op of the body makes them (an argument, or a
/// constant kept in the library), which are added at the end. The memory
/// plan and the emitter both ask.
Operation *gradientAccumulatedAfter(Value v);

/// Whether `use` is the return's read of a gradient result that the step
/// accumulates right after the op that makes it (gradientAccumulatedAfter):
/// no later than that op, whatever the return's position.
bool isEarlyAccumulation(OpOperand &use);

/// Whether `use` is the return's read of a gradient whose accumulator the
/// function's #tcc.tiers keeps in host memory: the step copies it to the
/// host, and its buffer lives kHostCopyLagOps ops past the op that makes
/// it.
bool isGradientToHost(OpOperand &use);

/// Whether `def` is a 2-D GEMM, or a GEMM fusion whose only other ops are
/// transposes (the GEMM's flags): what cuBLASLt can add into, or write as,
/// an fp32 buffer (matmul_acc).
bool isPlainGemm(Operation *def);

/// The last op (in `index`'s numbering) that `r`'s buffer must outlive
/// for `use`, a use of `r` that `from`, its maker or a view of it, sees:
/// the user's index, or for a gradient accumulated where it is made, `from`
/// (on the device) or kHostCopyLagOps past it (copied to the host). The
/// memory plan and remat's bound both ask.
int64_t bufferNeededUntil(OpOperand &use, int64_t from,
                          const llvm::DenseMap<Operation *, int64_t> &index);

/// Whether the op that makes `v`, a gradient the step returns (and nothing
/// else reads), adds it straight into its fp32 accumulator on the CUDA
/// target (`floatBytes` = kMixedPrecision): a rank-2 GEMM's product (a
/// tcc.matmul, or a GEMM fusion of one and transposes of its operands;
/// cuBLASLt with the accumulator as C and D and beta 1: a weight's
/// gradient), or a tcc.reduce_sum returned through views only it reads
/// (a bias's gradient: each sum's one writer adds it). `v` then has no
/// buffer: the memory plan gives it none and the emitter calls matmul_acc,
/// or reduce adding into the accumulator, instead of the op and accumulate. (Not an
/// embedding's tcc.gather_grad: its atomic adds would then start from the
/// accumulator's value, so a row's sum would depend on the order the
/// atomics run in from two contributions on, where from a zeroed buffer it
/// takes three; the CUDA emulation test checks that the demo's losses are
/// the same bits whatever order the blocks run in.)
bool accumulatedInPlace(Value v, int64_t floatBytes);

/// The `float-bytes` of tcc-plan-memory and tcc-remat: `option` when it is
/// set (non-zero), else what `module`'s #tcc.target says, else 4 (f32).
/// Fails, with a diagnostic on `module`, when both are given and disagree.
FailureOr<int64_t> resolveFloatBytes(Operation *module, int64_t option);

/// Bytes a value of `type` takes on a target whose floats are `floatBytes`.
int64_t bufferBytes(Type type, int64_t floatBytes);

/// `floatBytes` = 2 selects the CUDA target's mixed precision: activations,
/// temporaries and the working copies of parameters and float inputs are
/// fp16; master weights, gradient accumulators, optimizer state, outputs and
/// the values `keepsF32` names are fp32; a cuBLASLt workspace is planned.
inline constexpr int64_t kMixedPrecision = 2;

/// Bytes of the cuBLASLt workspace a mixed-precision plan reserves.
inline constexpr int64_t kGemmWorkspaceBytes = 32 << 20;

/// Device memory a CUDA step holds outside its arena besides its constants
/// (kernel images loaded on first launch, the cuBLASLt handle, the
/// optimizer's tables): counted against the budget, not allocated by the plan.
inline constexpr int64_t kCudaRuntimeReserveBytes = 64 << 20;

/// Under mixed precision, whether `v` is stored in fp32 rather than fp16:
/// reduction results, LayerNorm statistics, the loss and its log-probabilities,
/// the inputs of reductions to one element (a composite loss's terms),
/// embedding gradients (accumulated by atomic adds) and scalars; a fusion's
/// result as the value it yields.
bool keepsF32(Value v);

/// Under mixed precision, whether the CUDA code reads `v` as fp32: keepsF32,
/// through views; a rank-0 parameter or input (their fp32 masters; the
/// others have fp16 working copies); a constant kept in the library (float
/// arrays).
bool storedAsF32(Value v);

/// Bytes `v` takes in the arena under `floatBytes` (see kMixedPrecision).
int64_t valueBytes(Value v, int64_t floatBytes);

/// How many of the largest values live at the temporaries' peak the plan
/// names (`peak_values` in `tcc.layout`).
inline constexpr size_t kPeakValuesReported = 6;

/// An op as the memory report names it: its name, a fusion's ops, and the
/// ONNX node it comes from; a value adds its result number when the op has
/// several.
std::string describePlanned(Operation *op);
std::string describePlanned(Value v);

/// Plans `func`'s arena (see tcc-plan-memory): annotates `tcc.offsets` on
/// every op and `tcc.layout` on the function; returns the bytes the step
/// holds on its device: the arena, and under mixed precision (CUDA) also the
/// constants kept after it, the input staging buffer (the inputs' bytes)
/// and kCudaRuntimeReserveBytes (`planned_bytes` in the layout;
/// `arena_bytes` is the arena alone). With `ranks` > 1 the optimizer state
/// is sharded across that many ranks (#tcc.shards, ZeRO-1) and the bytes
/// are one rank's.
int64_t planFunction(func::FuncOp func, int64_t floatBytes,
                     int64_t statePerParam, int64_t ranks = 1);

/// A temporary of a planned step: its value, bytes, the schedule indices
/// (of the body's ops) between which it is live, inclusive, and its offset
/// in the arena's temporaries region.
struct PlannedTemporary {
  Value value;
  int64_t bytes, start, end, offset;
};

/// A planned step's temporaries over its schedule, as planFunction placed
/// them (the same liveness and offsets): what `tcc --memory-plot` draws and
/// what the step's op table reports as live bytes.
struct MemoryTimeline {
  SmallVector<Operation *> ops; // the body's ops, terminator included
  std::vector<PlannedTemporary> temporaries;
  int64_t firstBackward = -1; // index of the first backward op; -1: none
  /// The bytes of temporaries live while op `k` runs.
  std::vector<int64_t> liveBytes() const;
};
/// With `placeOffsets` false the offsets are left -1 (what only needs the
/// lifetimes, such as liveBytes, skips the placement).
MemoryTimeline memoryTimeline(func::FuncOp func, int64_t floatBytes,
                              bool placeOffsets = true);

/// Reports, on `func`, that its planned arena exceeds `budget` and what
/// occupies it; always fails.
LogicalResult reportOverBudget(func::FuncOp func, int64_t budget);

/// "; activations and temporaries peak at <op> with N bytes live, the
/// largest ..." from a planned function's `tcc.layout`, for diagnostics; ""
/// when the plan has no temporaries.
std::string describePeak(LayoutAttr layout);

} // namespace mlir::tcc

#endif // TCC_PASSES_PLANMEMORY_H
