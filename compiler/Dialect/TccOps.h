//===- TccOps.h - tcc dialect operations ------------------------*- C++ -*-===//
#ifndef TCC_COMPILER_DIALECT_TCCOPS_H
#define TCC_COMPILER_DIALECT_TCCOPS_H

#include "compiler/Dialect/TccDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <array>
#include <optional>

#include "compiler/Dialect/TccEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "compiler/Dialect/TccAttrs.h.inc"

namespace mlir::OpTrait::tcc {
/// Marks an ONNX-level op that only the importer and tcc-legalize see (see
/// TccOps.td): it folds at import or is rewritten into core ops.
template <typename ConcreteType>
class ImportOnly : public TraitBase<ConcreteType, ImportOnly> {};
} // namespace mlir::OpTrait::tcc

namespace mlir::tcc {

/// Whether `kind` yields i1 whatever its operands are.
bool isComparison(EwKind kind);

/// NumPy (ONNX multidirectional) broadcasting of two shapes; false when they
/// do not broadcast.
bool broadcastShapes(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs,
                     SmallVectorImpl<int64_t> &result);

/// The elementwise kind the runtime kernels compute for `op` by name
/// (`BinaryOp::Add`, `UnaryOp::Sqrt`, and their scalar forms), or
/// std::nullopt: Identity is a view, and the ONNX-level kinds never reach
/// the kernels (tcc-legalize rewrites them).
std::optional<EwKind> runtimeEwKind(Operation *op);

/// The axes a reduce_sum / reduce_mean reduces, as a bit mask over its
/// operand's dimensions.
uint32_t reductionMask(Operation *op);

/// Maps `axis` in [-rank, rank) to [0, rank); std::nullopt when out of range.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);

LogicalResult inferBroadcastOp(std::optional<Location> loc, EwKind kind,
                               Type lhs, Type rhs,
                               SmallVectorImpl<Type> &types);
LogicalResult inferReduceOp(std::optional<Location> loc, Type input,
                            std::optional<ArrayRef<int64_t>> axes,
                            int64_t keepdims, int64_t noopWithEmptyAxes,
                            SmallVectorImpl<Type> &types);

/// One axis of a Slice after ONNX's clamping: the first index, the step and
/// the number of elements taken.
struct SliceDim {
  int64_t start = 0, step = 1, size = 0;
};

/// The (before, after) pads of every axis of a rank-`rank` tensor from
/// ONNX Pad's `pads` over `axes` (every axis when absent).
FailureOr<SmallVector<std::pair<int64_t, int64_t>>>
resolvePads(std::optional<Location> loc, int64_t rank, ArrayRef<int64_t> pads,
            std::optional<ArrayRef<int64_t>> axes);

/// The sizes of an ONNX RotaryEmbedding (TccImportOps.cpp).
struct RotarySizes {
  int64_t batch = 0, seq = 0, heads = 0, head = 0, rotary = 0;
};
FailureOr<RotarySizes> rotarySizes(std::optional<Location> loc, Type input, Type cos,
                                   Type positions, int64_t numHeads, int64_t rotaryDim);

/// The sizes of an ONNX Attention (TccImportOps.cpp).
struct AttentionSizes {
  int64_t batch = 0, qHeads = 0, kvHeads = 0, qSeq = 0, kvSeq = 0, head = 0, vHead = 0;
};
FailureOr<AttentionSizes> onnxAttentionSizes(std::optional<Location> loc, Type q, Type k,
                                             Type v, int64_t qHeads, int64_t kvHeads);

/// Whether Trilu keeps element (row, col) of a matrix.
bool triluKeeps(bool upper, int64_t k, int64_t row, int64_t col);

/// Resolves Slice's attributes against `shape` per the ONNX spec (negative
/// bounds count from the end, out-of-range bounds clamp); fails, with a
/// diagnostic at `loc` when there is one, on invalid attributes.
LogicalResult resolveSlice(std::optional<Location> loc, ArrayRef<int64_t> shape,
                           ArrayRef<int64_t> starts, ArrayRef<int64_t> ends,
                           std::optional<ArrayRef<int64_t>> axes,
                           std::optional<ArrayRef<int64_t>> steps,
                           SmallVectorImpl<SliceDim> &dims);

/// ONNX Transpose's permutation: `perm`, or the dimensions of a rank-`rank`
/// input reversed when it is absent.
SmallVector<int64_t> transposePermutation(std::optional<ArrayRef<int64_t>> perm,
                                          int64_t rank);

/// The ONNX node `loc` names (the NameLoc in an imported op's fused
/// location, which ops derived from it keep), or "" when it names none.
std::string nodeNameOf(Location loc);

/// The sizes and layout of a (verified) tcc.attention or tcc.attention_grad.
struct AttentionShape {
  int64_t b, h, sq, sk, d, dv;
  /// Token-major ([B, S, H*D] operands, `heads` set) or head-major.
  bool tokenMajor;
  /// Query, key and value are one tensor (`columns` set).
  bool packed;
  /// The first column of query, key and value in their operands (0 unless
  /// packed).
  std::array<int64_t, 3> columns;
};
AttentionShape attentionShape(Operation *op);

/// The floating-point operations of a tcc.attention or tcc.attention_grad
/// (a causal one skips the masked half of the scores), or std::nullopt for
/// any other op.
std::optional<int64_t> attentionFlops(Operation *op);

/// The value of a constant whose elements are all one floating-point number
/// (any shape), or std::nullopt.
std::optional<double> splatFloatValue(Value v);

/// The number of elements of `v`'s tensor type, at least 1 (the unit of
/// the per-element costs of CostOpInterface).
int64_t elementsOf(Value v);

/// The FLOP estimate of `op` (CostOpInterface), or, for an op without one,
/// the number of elements it reads or writes; 0 for a constant or an op
/// without results. The one FLOP model of tcc-remat and --memory-report.
int64_t estimateFlops(Operation *op);

/// Whether a planned op (one with tcc-plan-memory's offsets) is left
/// unfolded: the folders of tcc ops return nothing for it.
bool keepsItsSlot(Operation *op);

/// Folds an elementwise op whose operands are all constants; null when it
/// cannot (a non-constant operand, or a result too large to keep in the IR).
OpFoldResult foldElementwise(EwKind kind, Type resultType,
                             ArrayRef<Attribute> operands);

} // namespace mlir::tcc

#include "compiler/Dialect/TccInterfaces.h.inc"

#define GET_OP_CLASSES
#include "compiler/Dialect/TccOps.h.inc"

#endif // TCC_COMPILER_DIALECT_TCCOPS_H
