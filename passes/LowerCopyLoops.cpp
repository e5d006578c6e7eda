//===- LowerCopyLoops.cpp - data-movement fusions as lists of copies -------===//
//
// Part of tcc-lower-to-kernels (LowerToKernels.cpp): a data-movement fusion
// (a split whose parts go through views and transposes to the fusion's
// results, or a concat of operands that come the same way from its inputs)
// becomes a tcck.copy_loop: one #tcck.copy per part or operand, an affine
// map from the copy's space to a flat index on each side. Where the chain
// of views keeps the elements a strided view of the buffer (the heads'
// split and merge), both maps are linear and the space is the one the
// strided view has; otherwise the space is the part's or operand's own and
// the maps go through the chain as linearise-delinearise expressions.
//
//===----------------------------------------------------------------------===//

#include "passes/LowerToKernels.h"
#include "passes/PlanMemory.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckOps.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/AffineMap.h"

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// A value read as a strided view of a buffer: element `c` of `shape` is at
/// `offset + sum c[i] * strides[i]`.
struct StridedView {
  SmallVector<int64_t> shape, strides;
  int64_t offset = 0;

  static StridedView contiguous(ArrayRef<int64_t> shape) {
    StridedView v;
    v.shape.assign(shape.begin(), shape.end());
    v.strides = computeStrides(shape);
    return v;
  }

  /// The same elements in `to`'s shape, without a copy (NumPy's rule: each
  /// group of dimensions that is merged or split must be contiguous).
  bool reshape(ArrayRef<int64_t> to) {
    SmallVector<int64_t> os, ost;
    for (auto [d, st] : llvm::zip(shape, strides))
      if (d != 1) {
        os.push_back(d);
        ost.push_back(st);
      }
    SmallVector<int64_t> ns(to.begin(), to.end()), nst(to.size(), 0);
    SmallVector<size_t> big;
    for (size_t i = 0; i < ns.size(); ++i)
      if (ns[i] != 1)
        big.push_back(i);
    size_t oi = 0, bi = 0;
    while (oi < os.size() && bi < big.size()) {
      int64_t op = os[oi], np = ns[big[bi]];
      size_t oj = oi + 1, bj = bi + 1;
      while (op != np) {
        if (np < op) {
          if (bj >= big.size())
            return false;
          np *= ns[big[bj++]];
        } else {
          if (oj >= os.size())
            return false;
          op *= os[oj++];
        }
      }
      for (size_t k = oi; k + 1 < oj; ++k)
        if (ost[k] != os[k + 1] * ost[k + 1])
          return false;
      nst[big[bj - 1]] = ost[oj - 1];
      for (size_t k = bj - 1; k > bi; --k)
        nst[big[k - 1]] = nst[big[k]] * ns[big[k]];
      oi = oj;
      bi = bj;
    }
    if (oi != os.size() || bi != big.size())
      return false;
    shape = ns;
    strides = nst;
    return true;
  }

  /// Through `op` (a view or a transpose) from its operand to its result.
  bool through(Operation *op) {
    auto out = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
    if (auto t = dyn_cast<TransposeOp>(op)) {
      SmallVector<int64_t> sh, st;
      for (int64_t p : t.getPermutation()) {
        sh.push_back(shape[p]);
        st.push_back(strides[p]);
      }
      shape = sh;
      strides = st;
      return true;
    }
    return reshape(out);
  }

  /// The flat index of element `c` of the view (size-1 dimensions read at
  /// 0), as a map from the view's shape.
  AffineMap map(MLIRContext *ctx) const {
    AffineExpr e = getAffineConstantExpr(offset, ctx);
    for (auto [d, size] : llvm::enumerate(shape))
      if (size != 1)
        e = e + getAffineDimExpr(d, ctx) * strides[d];
    return AffineMap::get(shape.size(), 0, e);
  }
};

using Coords = SmallVector<AffineExpr>;

ArrayRef<int64_t> shapeOf(Value v) { return cast<ShapedType>(v.getType()).getShape(); }

/// The flat index of coordinates `c` in `shape` (row-major).
AffineExpr flat(ArrayRef<AffineExpr> c, ArrayRef<int64_t> shape, MLIRContext *ctx) {
  return linearize(ctx, c, computeStrides(shape));
}

/// Coordinates `c` of an element of the operand of `op` (a view or a
/// transpose) as those of the same element in its result (`forward`), or
/// back from the result's to the operand's.
Coords through(Operation *op, const Coords &c, bool forward) {
  MLIRContext *ctx = op->getContext();
  if (auto t = dyn_cast<TransposeOp>(op)) {
    SmallVector<int64_t> perm = t.getPermutation(); // result[i] = operand[perm[i]]
    Coords n(c.size(), getAffineConstantExpr(0, ctx));
    for (auto [i, p] : llvm::enumerate(perm)) {
      if (forward)
        n[i] = c[p];
      else
        n[p] = c[i];
    }
    return n;
  }
  ArrayRef<int64_t> from = shapeOf(op->getOperand(0)), to = shapeOf(op->getResult(0));
  if (!forward)
    std::swap(from, to);
  return delinearize(flat(c, from, ctx), computeStrides(to));
}

/// The dimensions of `shape` as coordinates, with `offset` added along
/// `axis` (a part's or an operand's place in the split or concat).
Coords dims(ArrayRef<int64_t> shape, int64_t axis, int64_t offset, MLIRContext *ctx) {
  Coords c;
  for (size_t d = 0; d < shape.size(); ++d)
    c.push_back(shape[d] == 1 ? getAffineConstantExpr(0, ctx) : getAffineDimExpr(d, ctx));
  c[axis] = c[axis] + offset;
  return c;
}

AffineMap flatMap(ArrayRef<int64_t> space, AffineExpr e) {
  return AffineMap::get(space.size(), 0, e);
}

tcck::CopyAttr copyOf(MLIRContext *ctx, unsigned in, unsigned out, ArrayRef<int64_t> shape,
                      AffineMap from, AffineMap to) {
  return tcck::CopyAttr::get(ctx, in, out, DenseI64ArrayAttr::get(ctx, shape), from, to);
}

/// The copies of a split's parts, each through its views and transposes to
/// a yielded value.
LogicalResult splitCopies(FusionOp fusion, SplitOp split, ValueRange yielded,
                          SmallVectorImpl<Attribute> &copies) {
  MLIRContext *ctx = fusion.getContext();
  auto arg = dyn_cast<BlockArgument>(split.getInput());
  if (!arg)
    return fusion.emitOpError("moves a split that does not read a fusion input");
  ArrayRef<int64_t> shape = shapeOf(split.getInput());
  int64_t axis = *normalizeAxis(split.getAxis(), shape.size());
  int64_t offset = 0;
  for (auto [k, part] : llvm::enumerate(split.getResults())) {
    int64_t size = split.getSplit()[k];
    SmallVector<Operation *> chain;
    Value v = part;
    while (!llvm::is_contained(yielded, v)) {
      if (!v.hasOneUse())
        return fusion.emitOpError("moves a split part that does not end at one result");
      chain.push_back(*v.getUsers().begin());
      v = chain.back()->getResult(0);
    }
    unsigned out = llvm::find(yielded, v) - yielded.begin();
    ArrayRef<int64_t> result = shapeOf(v);
    // Strided: the loop runs over the result, reading the input's view.
    StridedView view = StridedView::contiguous(shape);
    view.offset = offset * view.strides[axis];
    view.shape[axis] = size;
    if (llvm::all_of(chain, [&](Operation *op) { return view.through(op); })) {
      copies.push_back(copyOf(ctx, arg.getArgNumber(), out, result, view.map(ctx),
                              StridedView::contiguous(result).map(ctx)));
    } else {
      // The loop runs over the part, each element carried to the result.
      SmallVector<int64_t> partShape(shape);
      partShape[axis] = size;
      Coords c = dims(partShape, axis, 0, ctx);
      AffineExpr from = flat(dims(partShape, axis, offset, ctx), shape, ctx);
      for (Operation *op : chain)
        c = through(op, c, /*forward=*/true);
      copies.push_back(copyOf(ctx, arg.getArgNumber(), out, partShape, flatMap(partShape, from),
                              flatMap(partShape, flat(c, result, ctx))));
    }
    offset += size;
  }
  return success();
}

/// The copies of a concat's operands, each from a fusion input through its
/// views and transposes.
LogicalResult concatCopies(FusionOp fusion, ConcatOp concat, SmallVectorImpl<Attribute> &copies) {
  MLIRContext *ctx = fusion.getContext();
  ArrayRef<int64_t> shape = shapeOf(concat.getResult());
  int64_t axis = *normalizeAxis(concat.getAxis(), shape.size());
  int64_t offset = 0;
  for (Value operand : concat.getInputs()) {
    SmallVector<Operation *> chain;
    Value root = operand;
    while (Operation *def = root.getDefiningOp()) {
      chain.push_back(def);
      root = def->getOperand(0);
    }
    std::reverse(chain.begin(), chain.end()); // root first
    auto arg = dyn_cast<BlockArgument>(root);
    if (!arg)
      return fusion.emitOpError("moves a concat operand that does not come from a fusion input");
    ArrayRef<int64_t> part = shapeOf(operand);
    // Strided: the source through the chain's prefix that stays a strided
    // view; the rest must be views, which the destination (a strided
    // region of the concat) takes back instead. The loop runs over the
    // shape between them (the heads' merge: transpose, then reshape).
    StridedView from = StridedView::contiguous(shapeOf(root));
    size_t k = 0;
    for (; k < chain.size(); ++k) {
      StridedView next = from;
      if (!next.through(chain[k]))
        break;
      from = next;
    }
    StridedView to = StridedView::contiguous(shape);
    to.offset = offset * to.strides[axis];
    to.shape[axis] = part[axis];
    bool strided = llvm::all_of(ArrayRef(chain).drop_front(k), [](Operation *o) {
      return isAliasView(o);
    });
    if (strided && k < chain.size())
      strided = to.reshape(from.shape);
    if (strided) {
      copies.push_back(copyOf(ctx, arg.getArgNumber(), 0, from.shape, from.map(ctx), to.map(ctx)));
    } else {
      // The loop runs over the operand, each element fetched back through
      // its chain.
      Coords c = dims(part, axis, 0, ctx);
      for (Operation *op : llvm::reverse(chain))
        c = through(op, c, /*forward=*/false);
      copies.push_back(copyOf(ctx, arg.getArgNumber(), 0, part,
                              flatMap(part, flat(c, shapeOf(root), ctx)),
                              flatMap(part, flat(dims(part, axis, offset, ctx), shape, ctx))));
    }
    offset += part[axis];
  }
  return success();
}

} // namespace

LogicalResult mlir::tcc::lowerCopyFusion(ConversionPatternRewriter &rewriter, FusionOp fusion,
                                         ValueRange ins, ValueRange outs) {
  Block &body = fusion.getBody().front();
  ValueRange yielded = body.getTerminator()->getOperands();
  SmallVector<Attribute> copies;
  auto split = llvm::find_if(body, [](Operation &o) { return isa<SplitOp>(o); });
  if (split != body.end()) {
    if (failed(splitCopies(fusion, cast<SplitOp>(*split), yielded, copies)))
      return failure();
  } else if (auto concat = dyn_cast_or_null<ConcatOp>(yielded[0].getDefiningOp());
             concat && yielded.size() == 1) {
    if (failed(concatCopies(fusion, concat, copies)))
      return failure();
  } else {
    return fusion.emitOpError("moves data but is neither a split nor ends in a concat");
  }
  rewriter.create<tcck::CopyLoopOp>(fusion.getLoc(), ins, outs, rewriter.getArrayAttr(copies));
  return success();
}
