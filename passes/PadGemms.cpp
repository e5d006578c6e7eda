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
// that tcc-fuse still folds the transpose into the GEMM. A value is padded
// once (the pass keeps the padded values it made); the CSE the pipeline runs
// after it merges the transposes of one padded weight that each loss chunk
// made again (GPT-2: 7 kernels fewer).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

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

/// A dimension of a value grown to a size.
struct Growth {
  int64_t dim, size;
};

/// Padded values made so far, by value and padded type: a value padded for
/// two GEMMs (a weight in the forward and backward passes, one transpose as
/// both operands) is copied once.
using PadCache = llvm::DenseMap<std::pair<Value, Type>, Value>;

/// `v` with each of `growths` applied, the new elements zero: one
/// tcc.slice_grad (the zero tensor with `v` written at its start), or, when
/// `v` is a transpose of the last two dimensions, the transpose of its
/// padded input.
Value pad(OpBuilder &b, Location loc, Value v, ArrayRef<Growth> growths, PadCache &cache) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape()), axes, ends;
  for (int64_t d = 0; d < type.getRank(); ++d)
    for (Growth g : growths)
      if (g.dim == d && shape[d] != g.size) {
        axes.push_back(d);
        ends.push_back(shape[d]);
        shape[d] = g.size;
      }
  if (axes.empty())
    return v;
  auto padded = RankedTensorType::get(shape, type.getElementType());
  Value &done = cache[{v, padded}];
  if (done)
    return done;
  if (TransposeOp t = lastTwoSwap(v)) {
    const int64_t r = type.getRank();
    SmallVector<Growth> inner;
    for (Growth g : growths)
      inner.push_back({g.dim == r - 1 ? r - 2 : g.dim == r - 2 ? r - 1 : g.dim, g.size});
    Value src = pad(b, loc, t.getInput(), inner, cache);
    return done = b.create<TransposeOp>(loc, padded, src, t.getPermAttr());
  }
  return done = b.create<SliceGradOp>(loc, padded, v, b.getDenseI64ArrayAttr(shape),
                               b.getDenseI64ArrayAttr(SmallVector<int64_t>(axes.size(), 0)),
                               b.getDenseI64ArrayAttr(ends), b.getDenseI64ArrayAttr(axes),
                               DenseI64ArrayAttr());
}

class PadGemmsPass : public tcc::impl::PadGemmsBase<PadGemmsPass> {
public:
  using PadGemmsBase::PadGemmsBase;

  void runOnOperation() override {
    SmallVector<MatMulOp> gemms;
    getOperation().walk([&](MatMulOp op) { gemms.push_back(op); });
    for (MatMulOp op : gemms)
      padGemm(op);
    // A transpose that only a padded GEMM read is dead now: its padded twin
    // took its place. Erased last, so that no value the cache holds dies.
    for (Operation *t : replaced)
      if (t->use_empty())
        t->erase();
  }

private:
  PadCache cache;
  llvm::SetVector<Operation *> replaced;

  void padGemm(MatMulOp op) {
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
    // A weight's gradient padded along M or N is sliced, so its GEMM no
    // longer adds it into the fp32 accumulator in place (matmul_acc): the
    // product is rounded to fp16 first, as under PyTorch's autocast. On an
    // H200 that is faster for GPT-2's output projection than the unaligned
    // GEMM (bench/gpu/RESULTS.md: 0.14 ms and the copies against 0.60 ms).
    const bool aT = lastTwoSwap(op.getLhs()) != nullptr;
    const int64_t k2 = k % kAlign ? roundUp(k) : k;
    const int64_t n2 = n % kAlign ? roundUp(n) : n;
    const int64_t m2 = aT && m % kAlign ? roundUp(m) : m;
    if (k2 == k && n2 == n && m2 == m)
      return;
    OpBuilder builder(op);
    Location loc = op.getLoc();
    Value lhs = pad(builder, loc, op.getLhs(), {{ra - 1, k2}, {ra - 2, m2}}, cache);
    Value rhs = pad(builder, loc, op.getRhs(), {{rb - 2, k2}, {rb - 1, n2}}, cache);
    SmallVector<int64_t> wideShape(c.getShape());
    wideShape[rc - 2] = m2;
    wideShape[rc - 1] = n2;
    Value product = builder.create<MatMulOp>(
        loc, RankedTensorType::get(wideShape, c.getElementType()), lhs, rhs);
    if (m2 != m || n2 != n)
      product = builder.create<SliceOp>(loc, c, product, builder.getDenseI64ArrayAttr({0, 0}),
                                        builder.getDenseI64ArrayAttr({m, n}),
                                        builder.getDenseI64ArrayAttr({rc - 2, rc - 1}),
                                        DenseI64ArrayAttr());
    op.getResult().replaceAllUsesWith(product);
    for (Value v : {op.getLhs(), op.getRhs()})
      if (auto t = v.getDefiningOp<TransposeOp>())
        replaced.insert(t);
    op.erase();
  }
};

} // namespace
