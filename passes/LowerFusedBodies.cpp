//===- LowerFusedBodies.cpp - fused kernels' scalar bodies and maps --------===//
//
// Part of tcc-lower-to-kernels (LowerToKernels.cpp): a loop or reduction
// fusion becomes a tcck.loop, and a GEMM fusion's epilogue a tcck.matmul's
// region. Each gets an indexing map per buffer (NumPy broadcasting, a
// reduction's output dropping what it reduces) and a scalar body of tcck
// scalar ops; an op with no scalar form is reported here. On CUDA, what
// cuBLASLt computes of an epilogue is decided here, once.
//
//===----------------------------------------------------------------------===//

#include "passes/LowerToKernels.h"
#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/LoopStructure.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckOps.h"

#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::tcc;

//===----------------------------------------------------------------------===//
// Fused loops: indexing maps and a scalar body
//===----------------------------------------------------------------------===//

/// The map from a loop over `space` to the element of a buffer of `shape`
/// that the loop reads there (NumPy broadcasting: the shapes are aligned at
/// their last dimensions, and a size-1 dimension is read at 0); with
/// `reduced`, a reduction's output that drops those dimensions of the
/// space.
static FailureOr<AffineMap> broadcastMap(ArrayRef<int64_t> shape, ArrayRef<int64_t> space,
                                         MLIRContext *ctx, uint32_t reduced = 0) {
  SmallVector<AffineExpr> results;
  if (reduced && shape.size() < space.size()) {
    for (auto [d, size] : llvm::enumerate(space))
      if (!(reduced >> d & 1))
        results.push_back(size == 1 ? getAffineConstantExpr(0, ctx) : getAffineDimExpr(d, ctx));
  } else {
    if (shape.size() > space.size())
      return failure();
    int64_t offset = space.size() - shape.size();
    for (auto [k, size] : llvm::enumerate(shape))
      results.push_back(size == 1 ? getAffineConstantExpr(0, ctx)
                                  : getAffineDimExpr(k + offset, ctx));
  }
  if (results.size() != shape.size())
    return failure();
  return AffineMap::get(space.size(), 0, results, ctx);
}

/// The indexing maps of the loop kernel of `fusion` (structure `lf`), one
/// per input buffer and then one per output.
static FailureOr<ArrayAttr> loopMaps(FusionOp fusion, const LoopFusion &lf, ValueRange ins,
                                     ValueRange outs) {
  MLIRContext *ctx = fusion.getContext();
  SmallVector<Attribute> maps;
  auto add = [&](Value buffer, uint32_t reduced, StringRef what, unsigned k) -> LogicalResult {
    FailureOr<AffineMap> m = broadcastMap(cast<MemRefType>(buffer.getType()).getShape(),
                                          lf.shape, ctx, reduced);
    if (failed(m))
      return fusion.emitOpError("has ")
             << what << " " << k << " of type " << buffer.getType()
             << ", which does not broadcast to its loop over " << lf.shape.size()
             << " dimensions";
    maps.push_back(AffineMapAttr::get(*m));
    return success();
  };
  for (auto [k, in] : llvm::enumerate(ins))
    if (failed(add(in, 0, "input", k)))
      return failure();
  Operation *yield = fusion.getBody().front().getTerminator();
  for (auto [k, out] : llvm::enumerate(outs)) {
    Operation *def = yield->getOperand(k).getDefiningOp();
    uint32_t reduced = def && lf.kind.lookup(def) == LoopFusion::Kind::Reduction
                           ? reductionMask(def)
                           : 0;
    if (failed(add(out, reduced, "result", k)))
      return failure();
  }
  return ArrayAttr::get(ctx, maps);
}

/// The scalar op of the body op `op` of a loop fusion over `space`, over
/// the scalars `operands`; nothing for an op a loop kernel cannot compute.
static Operation *scalarOp(OpBuilder &b, Operation &op, ValueRange operands,
                           ArrayRef<int64_t> space) {
  Location loc = op.getLoc();
  Type elt = getElementTypeOrSelf(op.getResult(0).getType());
  if (auto ew = dyn_cast<ElementwiseOpInterface>(op))
    if (std::optional<EwKind> kind = ew.getEwKind();
        kind && !op.hasTrait<OpTrait::tcc::ImportOnly>())
      return b.create<tcck::ScalarEwOp>(loc, elt, stringifyEwKind(*kind), operands);
  if (isa<WhereOp>(op))
    return b.create<tcck::SelectOp>(loc, operands[0], operands[1], operands[2]);
  if (isa<CastOp>(op))
    return b.create<tcck::ConvertOp>(loc, elt, operands[0]);
  if (auto g = dyn_cast<GeluOp>(op))
    return b.create<tcck::GeluOp>(loc, operands[0], g.getApproximate() == "tanh");
  if (auto g = dyn_cast<GeluGradOp>(op))
    return b.create<tcck::GeluGradOp>(loc, operands[0], operands[1],
                                      g.getApproximate() == "tanh");
  if (isa<ReduceSumOp, ReduceMeanOp>(op)) {
    uint32_t mask = reductionMask(&op);
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < (int64_t)space.size(); ++d)
      if (mask >> d & 1)
        dims.push_back(d);
    return b.create<tcck::ReduceOp>(loc, operands[0], dims, isa<ReduceMeanOp>(op));
  }
  return nullptr;
}

/// The body of `loop`, the kernel of the loop fusion `fusion` (structure
/// `lf`): one scalar per input, each body op as a scalar op with its role
/// and stage, a scalar yielded per output. An op that has no scalar form is
/// reported here, before any emitter runs.
static LogicalResult buildScalarBody(ConversionPatternRewriter &rewriter, FusionOp fusion,
                                     const LoopFusion &lf, tcck::LoopOp loop) {
  Block &from = fusion.getBody().front();
  SmallVector<Type> argTypes;
  SmallVector<Location> argLocs;
  for (BlockArgument a : from.getArguments()) {
    argTypes.push_back(getElementTypeOrSelf(a.getType()));
    argLocs.push_back(a.getLoc());
  }
  Block *body = rewriter.createBlock(&loop.getBody(), {}, argTypes, argLocs);
  IRMapping map;
  map.map(from.getArguments(), body->getArguments());
  for (Operation &op : from.without_terminator()) {
    tcck::LoopRole role = tcck::LoopRole::Element;
    switch (lf.kind.lookup(&op)) {
    case LoopFusion::Kind::Element: role = tcck::LoopRole::Element; break;
    case LoopFusion::Kind::Row: role = tcck::LoopRole::Row; break;
    case LoopFusion::Kind::RowReduction: role = tcck::LoopRole::RowReduction; break;
    case LoopFusion::Kind::Reduction: role = tcck::LoopRole::Reduction; break;
    }
    // The pass a value is computed in; a reduction's, the pass that reads
    // its operand.
    Value staged = role == tcck::LoopRole::RowReduction || role == tcck::LoopRole::Reduction
                       ? op.getOperand(0)
                       : op.getResult(0);
    SmallVector<Value> operands;
    for (Value v : op.getOperands())
      operands.push_back(map.lookup(v));
    Operation *scalar = scalarOp(rewriter, op, operands, lf.shape);
    if (!scalar)
      return op.emitOpError("cannot be computed in a fused loop kernel (no scalar form)");
    // A row reduction reduces the last dimension only: its other reduced
    // dimensions are 1 (a reduce over [0, 2] of 1x3x6 is one of rows).
    if (auto red = dyn_cast<tcck::ReduceOp>(scalar); red && role == tcck::LoopRole::RowReduction)
      red.setDims({static_cast<int64_t>(lf.shape.size()) - 1});
    scalar->setAttr(tcck::kRoleAttr, rewriter.getStringAttr(tcck::stringifyLoopRole(role)));
    scalar->setAttr(tcck::kStageAttr, rewriter.getI64IntegerAttr(lf.stage.lookup(staged)));
    map.map(op.getResult(0), scalar->getResult(0));
  }
  SmallVector<Value> yielded;
  for (Value v : from.getTerminator()->getOperands())
    yielded.push_back(map.lookup(v));
  rewriter.create<tcck::YieldOp>(fusion.getLoc(), yielded);
  return success();
}

LogicalResult mlir::tcc::lowerLoopFusion(ConversionPatternRewriter &rewriter, FusionOp fusion,
                                        ValueRange ins, ValueRange outs) {
  FailureOr<LoopFusion> lf = classifyLoopFusion(fusion);
  if (failed(lf))
    return failure();
  FailureOr<ArrayAttr> maps = loopMaps(fusion, *lf, ins, outs);
  if (failed(maps))
    return failure();
  auto loop = rewriter.create<tcck::LoopOp>(fusion.getLoc(), ins, outs, lf->shape, lf->rows,
                                            lf->lastPass, *maps);
  OpBuilder::InsertionGuard guard(rewriter);
  return buildScalarBody(rewriter, fusion, *lf, loop);
}

//===----------------------------------------------------------------------===//
// GEMM epilogues
//===----------------------------------------------------------------------===//

/// On the CUDA target, what cuBLASLt computes for the epilogue of the GEMM
/// fusion `g` of `fusion`, decided once with the matcher tcc-fuse used to
/// build it; `read`: the fusion inputs the epilogue reads (its
/// epilogue_ins), `ins` their buffers by input.
static FailureOr<tcck::CublasLtAttr> cublasLtEpilogue(FusionOp fusion, GemmFusion g,
                                                      ArrayRef<BlockArgument> read,
                                                      ValueRange ins, Value lhs, Value rhs) {
  Block &body = fusion.getBody().front();
  ValueRange yielded = body.getTerminator()->getOperands();
  auto isInput = [&](Value v) {
    auto a = dyn_cast<BlockArgument>(v);
    return a && a.getOwner() == &body;
  };
  std::string why;
  FailureOr<CublasLtEpilogue> e = matchCublasLtEpilogue(
      cast<ShapedType>(lhs.getType()), cast<ShapedType>(rhs.getType()), g.matmul.getResult(),
      g.transLhs, g.epilogue, [&](Value v) { return llvm::is_contained(yielded, v); },
      [&](Value v) {
        return isInput(v) && cast<MemRefType>(ins[cast<BlockArgument>(v).getArgNumber()].getType())
                                 .getElementType()
                                 .isF16();
      },
      why);
  if (failed(e))
    return fusion.emitOpError("is not a GEMM epilogue cuBLASLt computes (")
           << why << "; run tcc-fuse with cublaslt-epilogues)";
  auto indexIn = [&](Value v) -> int64_t {
    auto it = llvm::find(read, v);
    return it == read.end() ? -1 : it - read.begin();
  };
  int64_t bias = indexIn(e->bias), residual = e->residual ? indexIn(e->residual) : -1;
  if (bias < 0 || (e->residual && residual < 0))
    return fusion.emitOpError("has a cuBLASLt epilogue whose bias or residual is not an input");
  int64_t result = -1, aux = -1;
  for (auto [k, v] : llvm::enumerate(yielded)) {
    if (v == e->last)
      result = k;
    else if (v == e->biased && e->gelu)
      aux = k;
    else
      return fusion.emitOpError("yields a value cuBLASLt's epilogue does not write");
  }
  if (result < 0)
    return fusion.emitOpError("does not yield its epilogue's last value");
  return tcck::CublasLtAttr::get(fusion.getContext(), bias, residual, e->gelu, result, aux);
}

LogicalResult mlir::tcc::lowerGemmEpilogue(ConversionPatternRewriter &rewriter, FusionOp fusion,
                                          GemmFusion g, ValueRange ins, ValueRange outs,
                                       Value lhs, Value rhs, bool cuda) {
  MLIRContext *ctx = fusion.getContext();
  Location loc = fusion.getLoc();
  Block &body = fusion.getBody().front();
  SmallVector<BlockArgument> read;
  for (BlockArgument a : body.getArguments())
    if (llvm::any_of(g.epilogue, [&](Operation *op) { return llvm::is_contained(op->getOperands(), a); }))
      read.push_back(a);
  ArrayRef<int64_t> space = cast<MemRefType>(outs[0].getType()).getShape();
  SmallVector<Value> epilogueIns;
  SmallVector<Attribute> maps;
  SmallVector<Type> argTypes{getElementTypeOrSelf(g.matmul.getType())};
  SmallVector<Location> argLocs{loc};
  for (BlockArgument a : read) {
    Value buffer = ins[a.getArgNumber()];
    FailureOr<AffineMap> m =
        broadcastMap(cast<MemRefType>(buffer.getType()).getShape(), space, ctx);
    if (failed(m))
      return fusion.emitOpError("has an epilogue input of type ")
             << buffer.getType() << ", which does not broadcast to its product";
    epilogueIns.push_back(buffer);
    maps.push_back(AffineMapAttr::get(*m));
    argTypes.push_back(getElementTypeOrSelf(a.getType()));
    argLocs.push_back(a.getLoc());
  }
  tcck::CublasLtAttr lt;
  if (cuda) {
    FailureOr<tcck::CublasLtAttr> decided = cublasLtEpilogue(fusion, g, read, ins, lhs, rhs);
    if (failed(decided))
      return failure();
    lt = *decided;
  }
  auto mm = rewriter.create<tcck::MatMulOp>(loc, outs, lhs, rhs, epilogueIns, g.transLhs,
                                            g.transRhs, false, ArrayAttr::get(ctx, maps), lt);
  OpBuilder::InsertionGuard guard(rewriter);
  Block *epi = rewriter.createBlock(&mm.getEpilogue(), {}, argTypes, argLocs);
  IRMapping map;
  map.map(g.matmul.getResult(), epi->getArgument(0));
  for (auto [k, a] : llvm::enumerate(read))
    map.map(a, epi->getArgument(k + 1));
  for (Operation *op : g.epilogue) {
    SmallVector<Value> operands;
    for (Value v : op->getOperands()) {
      if (!map.contains(v))
        return op->emitOpError("in a GEMM epilogue reads a value that is neither the product, "
                               "an input nor an earlier epilogue value");
      operands.push_back(map.lookup(v));
    }
    Operation *scalar = isa<ReduceSumOp, ReduceMeanOp>(op)
                            ? nullptr
                            : scalarOp(rewriter, *op, operands, space);
    if (!scalar)
      return op->emitOpError("cannot be computed in a GEMM epilogue (no scalar form)");
    map.map(op->getResult(0), scalar->getResult(0));
  }
  SmallVector<Value> yielded;
  for (Value v : body.getTerminator()->getOperands())
    yielded.push_back(map.lookup(v));
  rewriter.create<tcck::YieldOp>(loc, yielded);
  return success();
}
