//===- PadGemms.cpp - GEMM dimensions padded to what tensor cores want ----===//
//
// cuBLASLt's fast fp16 kernels need every operand's rows 16-byte aligned: the
// stored (innermost) dimension of A, B and C a multiple of 8 halves. GPT-2's
// vocabulary (50257) is not, and its output projection's three GEMMs ran 4-6x
// slower on an H200 than with 50304 (bench/gpu/RESULTS.md). This pass pads
// such a GEMM's dimensions with zeros, as XLA pads dots for cuBLAS: K with
// zeros in both operands (the product is unchanged), M or N with zero rows
// or columns that a slice drops from the result. A padded operand that is a
// transpose of the last two dimensions is padded before the transpose, so
// that tcc-fuse still folds the transpose into the GEMM and a weight is
// padded once (CSE merges the copies of one value).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_PADGEMMS
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// Elements of fp16 in 16 bytes.
constexpr int64_t kAlign = 8;

int64_t roundUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// The transpose that swaps `v`'s last two dimensions and nothing else, or
/// null.
TransposeOp lastTwoSwap(Value v) {
  auto t = v.getDefiningOp<TransposeOp>();
  if (!t)
    return nullptr;
  SmallVector<int64_t> perm = t.getPermutation();
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2)
    return nullptr;
  for (int64_t i = 0; i < r - 2; ++i)
    if (perm[i] != i)
      return nullptr;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2 ? t : nullptr;
}

RankedTensorType withDim(RankedTensorType t, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(t.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, t.getElementType());
}

/// `v` with dimension `dim` grown to `size`, the new elements zero: a
/// tcc.slice_grad (the zero tensor with `v` written at its start), or, when
/// `v` is a transpose of the last two dimensions, the transpose of its
/// padded input.
Value padDim(OpBuilder &b, Location loc, Value v, int64_t dim, int64_t size) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getDimSize(dim) == size)
    return v;
  if (TransposeOp t = lastTwoSwap(v)) {
    const int64_t r = type.getRank();
    const int64_t srcDim = dim == r - 1 ? r - 2 : dim == r - 2 ? r - 1 : dim;
    Value src = padDim(b, loc, t.getInput(), srcDim, size);
    return b.create<TransposeOp>(loc, withDim(type, dim, size), src, t.getPermAttr());
  }
  RankedTensorType padded = withDim(type, dim, size);
  return b.create<SliceGradOp>(loc, padded, v, b.getDenseI64ArrayAttr(padded.getShape()),
                               b.getDenseI64ArrayAttr({0}),
                               b.getDenseI64ArrayAttr({type.getDimSize(dim)}),
                               b.getDenseI64ArrayAttr({dim}), DenseI64ArrayAttr());
}

class PadGemmsPass : public tcc::impl::PadGemmsBase<PadGemmsPass> {
public:
  using PadGemmsBase::PadGemmsBase;

  void runOnOperation() override {
    SmallVector<MatMulOp> gemms;
    getOperation().walk([&](MatMulOp op) { gemms.push_back(op); });
    for (MatMulOp op : gemms)
      pad(op);
  }

private:
  void pad(MatMulOp op) {
    auto a = cast<RankedTensorType>(op.getLhs().getType());
    auto b = cast<RankedTensorType>(op.getRhs().getType());
    auto c = cast<RankedTensorType>(op.getResult().getType());
    // Matrices only (a 1-D operand is a GEMV), static shapes, floats.
    if (a.getRank() < 2 || b.getRank() < 2 || !a.hasStaticShape() || !b.hasStaticShape() ||
        !c.hasStaticShape() || !isa<FloatType>(a.getElementType()))
      return;
    const int64_t ra = a.getRank(), rb = b.getRank(), rc = c.getRank();
    const int64_t m = a.getDimSize(ra - 2), k = a.getDimSize(ra - 1), n = b.getDimSize(rb - 1);
    double flops = 2.0 * static_cast<double>(c.getNumElements()) * static_cast<double>(k);
    if (flops < minGflops * 1e9)
      return;
    // The stored rows: A's are M long when it is read transposed, else K;
    // B's are K long when it is read transposed, else N; C's are N long.
    const bool aT = lastTwoSwap(op.getLhs()) != nullptr;
    const int64_t k2 = k % kAlign ? roundUp(k) : k;
    const int64_t n2 = n % kAlign ? roundUp(n) : n;
    const int64_t m2 = aT && m % kAlign ? roundUp(m) : m;
    if (k2 == k && n2 == n && m2 == m)
      return;
    OpBuilder builder(op);
    Location loc = op.getLoc();
    Value lhs = padDim(builder, loc, op.getLhs(), ra - 1, k2);
    lhs = padDim(builder, loc, lhs, ra - 2, m2);
    Value rhs = padDim(builder, loc, op.getRhs(), rb - 2, k2);
    rhs = padDim(builder, loc, rhs, rb - 1, n2);
    RankedTensorType wide = withDim(withDim(c, rc - 2, m2), rc - 1, n2);
    Value product = builder.create<MatMulOp>(loc, wide, lhs, rhs);
    if (m2 != m || n2 != n)
      product = builder.create<SliceOp>(loc, c, product, builder.getDenseI64ArrayAttr({0, 0}),
                                        builder.getDenseI64ArrayAttr({m, n}),
                                        builder.getDenseI64ArrayAttr({rc - 2, rc - 1}),
                                        DenseI64ArrayAttr());
    op.getResult().replaceAllUsesWith(product);
    Value oldLhs = op.getLhs(), oldRhs = op.getRhs();
    op.erase();
    // A transpose that only the GEMM read is dead now: its padded twin took
    // its place.
    for (Value v : {oldLhs, oldRhs})
      if (auto t = v.getDefiningOp<TransposeOp>(); t && t->use_empty())
        t.erase();
  }
};

} // namespace
