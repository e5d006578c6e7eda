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

LogicalResult RMSNormalizationOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto scale = cast<RankedTensorType>(adaptor.getScale().getType());
  StringRef name = getOperationName();
  std::optional<int64_t> axis = normalizeAxis(adaptor.getAxis(), input.getRank());
  if (!axis)
    return opError(loc, name, "axis " + Twine(adaptor.getAxis()) +
                                  " is out of range for rank " + Twine(input.getRank()));
  SmallVector<int64_t> shape;
  if (scale.getElementType() != input.getElementType() ||
      scale.getRank() > input.getRank() - *axis ||
      !broadcastShapes(input.getShape(), scale.getShape(), shape) ||
      ArrayRef<int64_t>(shape) != input.getShape())
    return opError(loc, name, "scale must broadcast to the normalized axes and have "
                              "the input's element type");
  types.push_back(input);
  return success();
}

/// The sizes of a RotaryEmbedding: batch, sequence, heads, head size, and
/// the rotated part of each head.
FailureOr<RotarySizes> mlir::tcc::rotarySizes(std::optional<Location> loc, Type inputType,
                                               Type cosType, Type positionsType,
                                               int64_t numHeads, int64_t rotaryDim) {
  StringRef name = RotaryEmbeddingOp::getOperationName();
  auto input = cast<RankedTensorType>(inputType);
  auto cos = cast<RankedTensorType>(cosType);
  RotarySizes r;
  if (input.getRank() == 4) {
    r.batch = input.getDimSize(0);
    r.heads = input.getDimSize(1);
    r.seq = input.getDimSize(2);
    r.head = input.getDimSize(3);
  } else if (input.getRank() == 3) {
    if (numHeads <= 0 || input.getDimSize(2) % numHeads != 0)
      return opError(loc, name, "a 3-D input needs num_heads dividing its last dimension");
    r.batch = input.getDimSize(0);
    r.seq = input.getDimSize(1);
    r.heads = numHeads;
    r.head = input.getDimSize(2) / numHeads;
  } else {
    return opError(loc, name, "input must be 3-D [B, S, H*D] or 4-D [B, H, S, D]");
  }
  r.rotary = rotaryDim ? rotaryDim : r.head;
  if (r.rotary <= 0 || r.rotary > r.head || r.rotary % 2 != 0)
    return opError(loc, name, "rotary_embedding_dim " + Twine(r.rotary) +
                                  " must be even and at most the head size " + Twine(r.head));
  SmallVector<int64_t> want;
  if (positionsType) {
    auto pos = cast<RankedTensorType>(positionsType);
    if (pos.getShape() != ArrayRef<int64_t>{r.batch, r.seq})
      return opError(loc, name, "position_ids must be [batch, sequence]");
    if (cos.getRank() != 2 || cos.getDimSize(1) != r.rotary / 2)
      return opError(loc, name, "with position_ids the caches must be [positions, rotary/2]");
  } else if (cos.getShape() != ArrayRef<int64_t>{r.batch, r.seq, r.rotary / 2}) {
    return opError(loc, name, "without position_ids the caches must be [batch, sequence, rotary/2]");
  }
  return r;
}

LogicalResult RotaryEmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &types) {
  Value pos = adaptor.getPositionIds();
  if (adaptor.getCosCache().getType() != adaptor.getSinCache().getType())
    return opError(loc, getOperationName(), "cos_cache and sin_cache differ in type");
  if (failed(rotarySizes(loc, adaptor.getInput().getType(), adaptor.getCosCache().getType(),
                         pos ? pos.getType() : Type(), adaptor.getNumHeads(),
                         adaptor.getRotaryEmbeddingDim())))
    return failure();
  if (adaptor.getInterleaved() != 0 && adaptor.getInterleaved() != 1)
    return opError(loc, getOperationName(), "interleaved must be 0 or 1");
  types.push_back(adaptor.getInput().getType());
  return success();
}

FailureOr<AttentionSizes> mlir::tcc::onnxAttentionSizes(std::optional<Location> loc, Type q,
                                                         Type k, Type v, int64_t qHeads,
                                                         int64_t kvHeads) {
  StringRef name = OnnxAttentionOp::getOperationName();
  auto qt = cast<RankedTensorType>(q), kt = cast<RankedTensorType>(k),
       vt = cast<RankedTensorType>(v);
  AttentionSizes s;
  if (qt.getRank() != kt.getRank() || qt.getRank() != vt.getRank())
    return opError(loc, name, "query, key and value must have one rank");
  if (qt.getRank() == 4) {
    s.batch = qt.getDimSize(0);
    s.qHeads = qt.getDimSize(1);
    s.qSeq = qt.getDimSize(2);
    s.head = qt.getDimSize(3);
    s.kvHeads = kt.getDimSize(1);
    s.kvSeq = kt.getDimSize(2);
    s.vHead = vt.getDimSize(3);
    if (kt.getDimSize(3) != s.head || vt.getDimSize(1) != s.kvHeads ||
        vt.getDimSize(2) != s.kvSeq || kt.getDimSize(0) != s.batch ||
        vt.getDimSize(0) != s.batch)
      return opError(loc, name, "key and value do not match the query ([B, H, S, D])");
  } else if (qt.getRank() == 3) {
    if (qHeads <= 0 || kvHeads <= 0 || qt.getDimSize(2) % qHeads != 0 ||
        kt.getDimSize(2) % kvHeads != 0 || vt.getDimSize(2) % kvHeads != 0)
      return opError(loc, name, "3-D inputs need q_num_heads and kv_num_heads dividing "
                                "their last dimensions");
    s.batch = qt.getDimSize(0);
    s.qSeq = qt.getDimSize(1);
    s.qHeads = qHeads;
    s.head = qt.getDimSize(2) / qHeads;
    s.kvSeq = kt.getDimSize(1);
    s.kvHeads = kvHeads;
    s.vHead = vt.getDimSize(2) / kvHeads;
    if (kt.getDimSize(2) / kvHeads != s.head || vt.getDimSize(1) != s.kvSeq ||
        kt.getDimSize(0) != s.batch || vt.getDimSize(0) != s.batch)
      return opError(loc, name, "key and value do not match the query ([B, S, H*D])");
  } else {
    return opError(loc, name, "inputs must be 3-D or 4-D");
  }
  if (s.kvHeads <= 0 || s.qHeads % s.kvHeads != 0)
    return opError(loc, name, "q_num_heads must be a multiple of kv_num_heads");
  return s;
}

LogicalResult OnnxAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  StringRef name = getOperationName();
  FailureOr<AttentionSizes> s = onnxAttentionSizes(
      loc, adaptor.getQuery().getType(), adaptor.getKey().getType(),
      adaptor.getValue().getType(), adaptor.getQNumHeads(), adaptor.getKvNumHeads());
  if (failed(s))
    return failure();
  if (adaptor.getSoftcap().convertToDouble() < 0.0)
    return opError(loc, name, "softcap must not be negative");
  if (Value mask = adaptor.getAttnMask()) {
    auto mt = cast<RankedTensorType>(mask.getType());
    auto q = cast<RankedTensorType>(adaptor.getQuery().getType());
    SmallVector<int64_t> shape;
    bool isBool = mt.getElementType().isInteger(1);
    if ((!isBool && mt.getElementType() != q.getElementType()) || mt.getRank() > 4 ||
        !broadcastShapes({s->batch, s->qHeads, s->qSeq, s->kvSeq}, mt.getShape(), shape) ||
        shape.size() != 4)
      return opError(loc, name, "attn_mask must be boolean or of the query's type and "
                                "broadcast to [batch, heads, q_seq, kv_seq]");
  }
  auto q = cast<RankedTensorType>(adaptor.getQuery().getType());
  if (q.getRank() == 4)
    types.push_back(RankedTensorType::get({s->batch, s->qHeads, s->qSeq, s->vHead},
                                          q.getElementType()));
  else
    types.push_back(RankedTensorType::get({s->batch, s->qSeq, s->qHeads * s->vHead},
                                          q.getElementType()));
  return success();
}
