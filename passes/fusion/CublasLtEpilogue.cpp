//===- CublasLtEpilogue.cpp - what cuBLASLt computes after a GEMM --------===//

#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/FusionCostModel.h"

using namespace mlir;
using namespace mlir::tcc;

FailureOr<CublasLtEpilogue> mlir::tcc::matchCublasLtEpilogue(
    ShapedType lhs, ShapedType rhs, Value product, bool lhsTransposed, ArrayRef<Operation *> ops,
    llvm::function_ref<bool(Value)> readElsewhere,
    llvm::function_ref<bool(Value)> fp16, std::string &why) {
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  auto fail = [&](const char *reason) -> FailureOr<CublasLtEpilogue> {
    why = std::string("cuBLASLt epilogue: ") + reason;
    return failure();
  };
  if (!lhs || !rhs || ops.empty())
    return fail("there is no GEMM product to start from");
  CublasLtEpilogue e;
  Value cur = product;
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (!llvm::is_contained(op->getOperands(), cur))
      return fail("its ops do not each read the previous one's result");
    Value other = op->getNumOperands() == 2
                      ? (op->getOperand(0) == cur ? op->getOperand(1) : op->getOperand(0))
                      : Value();
    if (i == 0) {
      ArrayRef<int64_t> shape = type(cur).getShape();
      if (readElsewhere(cur))
        return fail("the product itself is read elsewhere");
      if (rhs.getRank() != 2 || lhsTransposed || lhs.getRank() < 2)
        return fail("only over a GEMM with an unbatched second operand and an untransposed "
                    "first one");
      if (shape.back() % 8 != 0)
        return fail("the product's rows are not a multiple of 8 elements");
      if (!isa<AddOp>(op))
        return fail("starts with a bias add");
      if (type(other).getNumElements() != shape.back() ||
          (type(other).getRank() && type(other).getShape().back() != shape.back()) ||
          !fp16(other))
        return fail("the add's other operand is not an fp16 bias along the rows");
      e.bias = other;
      e.biased = op->getResult(0);
      why = "cuBLASLt epilogue: bias, added as the GEMM stores its product";
    } else if (i == 1) {
      bool forked = readElsewhere(cur);
      if (auto g = dyn_cast<GeluOp>(op)) {
        if (g.getApproximate() != "tanh")
          return fail("its GELU is the tanh approximation");
        e.gelu = true;
        why = forked ? "cuBLASLt epilogue: bias and GELU, the GELU's input kept as the "
                       "auxiliary output"
                     : "cuBLASLt epilogue: bias and GELU";
      } else if (isa<AddOp>(op) && !forked && type(other).getShape() == type(cur).getShape() &&
                 fp16(other)) {
        e.residual = other;
        why = "cuBLASLt epilogue: the residual added as C (beta = 1)";
      } else {
        return fail("after the bias only a tanh GELU, or a residual add when the biased "
                    "value is not read elsewhere");
      }
    } else {
      return fail("at most a bias and a GELU or residual");
    }
    cur = op->getResult(0);
  }
  e.last = cur;
  return e;
}

std::optional<GemmFusion> mlir::tcc::asGemmFusion(FusionOp f) {
  Block &body = f.getBody().front();
  GemmFusion g;
  for (Operation &op : body.without_terminator()) {
    if (auto m = dyn_cast<MatMulOp>(op)) {
      if (g.matmul)
        return std::nullopt;
      g.matmul = m;
    } else if (g.matmul) {
      g.epilogue.push_back(&op); // after the GEMM: its epilogue
    } else if (!isa<TransposeOp>(op) || !FusionCostModel::isSwapOfLastTwo(cast<TransposeOp>(op))) {
      return std::nullopt;
    }
  }
  if (!g.matmul)
    return std::nullopt;
  // Each result is the product or an epilogue value (a multi-output
  // epilogue writes every value read outside the fusion).
  for (Value v : cast<YieldOp>(body.getTerminator()).getValues())
    if (v != g.matmul.getResult() &&
        !llvm::is_contained(g.epilogue, v.getDefiningOp()))
      return std::nullopt;
  if (g.epilogue.empty() && f.getNumResults() != 1)
    return std::nullopt;
  auto resolve = [&](Value v, Value &input, bool &trans) {
    if (auto t = v.getDefiningOp<TransposeOp>()) {
      v = t.getInput();
      trans = true;
    }
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg)
      return false;
    input = f.getInputs()[arg.getArgNumber()];
    return true;
  };
  if (!resolve(g.matmul.getLhs(), g.lhs, g.transLhs) ||
      !resolve(g.matmul.getRhs(), g.rhs, g.transRhs))
    return std::nullopt;
  return g;
}
