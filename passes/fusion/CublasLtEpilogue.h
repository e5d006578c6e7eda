//===- CublasLtEpilogue.h - what cuBLASLt computes after a GEMM -*- C++ -*-===//
//
// The epilogues the CUDA target leaves to cuBLASLt (runtime/cuda/gemm.cuh's
// matmul_epilogue): D = op(A) op(B) + bias, a vector along D's rows, then
// either a GELU (tanh approximation; its input may also be written, as the
// auxiliary output) or + C, a residual of D's shape (beta = 1). One matcher
// for both sides: tcc-fuse (cublaslt-epilogues) asks it whether the next op
// may join a GEMM's epilogue, and the CUDA emitter decodes a fused epilogue
// with it, so the two cannot disagree on what cuBLASLt computes.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_FUSION_CUBLASLTEPILOGUE_H
#define TCC_PASSES_FUSION_CUBLASLTEPILOGUE_H

#include "compiler/Dialect/TccOps.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>
#include <string>

namespace mlir::tcc {

/// A matched epilogue: its operands and the values cuBLASLt writes.
struct CublasLtEpilogue {
  Value bias;        // the bias add's other operand
  Value residual;    // the residual add's other operand, or null
  bool gelu = false; // a tanh GELU after the bias
  Value biased;      // the bias add's result: the auxiliary output with a GELU
  Value last;        // the epilogue's last value: what the GEMM writes as D
};

/// Matches `ops` as a cuBLASLt epilogue of a GEMM whose operands are of
/// types `lhs` and `rhs` (null when there is no GEMM; the first operand is
/// transposed when `lhsTransposed`; `product` is its result, that of the
/// GEMM fusion around it, or the product argument of a tcck.matmul's
/// epilogue): the first op reads `product`, each
/// next one the previous op's result. `readElsewhere(v)`: whether a value of
/// the chain has readers outside it (the product must not; the biased value
/// only when a GELU follows, which makes it the auxiliary output).
/// `fp16(v)`: whether an operand is stored in fp16. Sets `why` to what the
/// last op of `ops` does in the epilogue, or to why cuBLASLt cannot compute
/// the chain (the first op it cannot); both read "cuBLASLt epilogue: ...".
/// A fusion that is one GEMM whose operands are fusion inputs, each read
/// as stored or with its last two dimensions swapped (tcc-fuse's GEMM
/// prologue).
struct GemmFusion {
  MatMulOp matmul;
  Value lhs, rhs;
  bool transLhs = false, transRhs = false;
  /// Elementwise ops computed on each product element (the epilogue), in
  /// order; the first reads the matmul's result.
  SmallVector<Operation *> epilogue;
};

/// `f` as a GEMM fusion, or std::nullopt. The emitter and the memory plan
/// (accumulatedInPlace) both ask.
std::optional<GemmFusion> asGemmFusion(FusionOp f);

FailureOr<CublasLtEpilogue>
matchCublasLtEpilogue(ShapedType lhs, ShapedType rhs, Value product, bool lhsTransposed,
                      ArrayRef<Operation *> ops,
                      llvm::function_ref<bool(Value)> readElsewhere,
                      llvm::function_ref<bool(Value)> fp16, std::string &why);

} // namespace mlir::tcc

#endif // TCC_PASSES_FUSION_CUBLASLTEPILOGUE_H
