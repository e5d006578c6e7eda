//===- TccImportOps.cpp - shape rules of the ImportOnly ops ---------------===//
//
// The ONNX ops that fold at import or that tcc-legalize rewrites into core
// ops (TccOps.td, "ONNX ops that only the importer and tcc-legalize see").
// Their folders are in TccFolders.cpp with the others.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccOps.h"

using namespace mlir;
using namespace mlir::tcc;

static LogicalResult opError(std::optional<Location> loc, StringRef opName,
                             const Twine &message) {
  return emitOptionalError(loc, "'", opName, "' op ", message);
}

LogicalResult IsNaNOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  types.push_back(RankedTensorType::get(input.getShape(), IntegerType::get(ctx, 1)));
  return success();
}

/// The pads of each axis of a rank-`rank` tensor, as (before, after) pairs,
/// from ONNX's `pads` over `axes` (every axis when absent).
FailureOr<SmallVector<std::pair<int64_t, int64_t>>>
mlir::tcc::resolvePads(std::optional<Location> loc, int64_t rank,
                       ArrayRef<int64_t> pads,
                       std::optional<ArrayRef<int64_t>> axes) {
  StringRef name = PadOp::getOperationName();
  SmallVector<int64_t> axisList;
  if (axes) {
    for (int64_t a : *axes) {
      std::optional<int64_t> n = normalizeAxis(a, rank);
      if (!n)
        return opError(loc, name, "axis " + Twine(a) + " is out of range for rank " +
                                      Twine(rank));
      if (llvm::is_contained(axisList, *n))
        return opError(loc, name, "axis " + Twine(a) + " appears twice");
      axisList.push_back(*n);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a)
      axisList.push_back(a);
  }
  if ((int64_t)pads.size() != 2 * (int64_t)axisList.size())
    return opError(loc, name, "pads has " + Twine(pads.size()) +
                                  " values; it needs two per padded axis (" +
                                  Twine(2 * axisList.size()) + ")");
  SmallVector<std::pair<int64_t, int64_t>> result(rank, {0, 0});
  for (auto [i, a] : llvm::enumerate(axisList))
    result[a] = {pads[i], pads[i + axisList.size()]};
  return result;
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                      Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  StringRef name = getOperationName();
  if (adaptor.getMode() != "constant")
    return opError(loc, name, "mode \"" + adaptor.getMode() +
                                  "\" is not supported (only \"constant\")");
  if (auto v = adaptor.getValueAttr()) {
    if (v.getNumElements() != 1 ||
        v.getElementType() != input.getElementType())
      return opError(loc, name, "the fill value must be one element of the "
                                "input's element type");
  }
  std::optional<ArrayRef<int64_t>> axes;
  if (auto a = adaptor.getAxesAttr())
    axes = a.asArrayRef();
  FailureOr<SmallVector<std::pair<int64_t, int64_t>>> pads =
      resolvePads(loc, input.getRank(), adaptor.getPads(), axes);
  if (failed(pads))
    return failure();
  SmallVector<int64_t> shape;
  for (auto [d, p] : llvm::zip(input.getShape(), *pads)) {
    int64_t n = d + p.first + p.second;
    if (n < 0 || p.first < -d || p.second < -d)
      return opError(loc, name, "pads remove more elements than the axis has");
    shape.push_back(n);
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto data = cast<RankedTensorType>(adaptor.getData().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  StringRef name = getOperationName();
  if (data.getRank() != indices.getRank() || data.getRank() == 0)
    return opError(loc, name, "data and indices must have the same rank (at least 1)");
  if (!normalizeAxis(adaptor.getAxis(), data.getRank()))
    return opError(loc, name, "axis " + Twine(adaptor.getAxis()) +
                                  " is out of range for rank " + Twine(data.getRank()));
  types.push_back(RankedTensorType::get(indices.getShape(), data.getElementType()));
  return success();
}

LogicalResult TriluOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  if (input.getRank() < 2)
    return opError(loc, getOperationName(), "input must have rank 2 or more");
  types.push_back(input);
  return success();
}

bool mlir::tcc::triluKeeps(bool upper, int64_t k, int64_t row, int64_t col) {
  return upper ? col - row >= k : col - row <= k;
}
