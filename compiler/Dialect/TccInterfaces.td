//===- TccInterfaces.td - tcc op interfaces ---------------*- tablegen -*-===//

#ifndef TCC_DIALECT_TCCINTERFACES_TD
#define TCC_DIALECT_TCCINTERFACES_TD

include "mlir/IR/OpBase.td"

def Tcc_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlir::tcc";
  let description = [{
    The op's reverse-mode gradient rule: given the gradients of its results,
    build (at the builder's insertion point) the gradients of its operands,
    as tcc ops. `tcc-build-backward` calls it for every op on a path from a
    trainable parameter to the loss; an op on such a path without this
    interface is reported by name.
  }];
  let methods = [
    InterfaceMethod<[{
        `resultGrads` has one entry per result: the gradient of the loss with
        respect to that result, or a null value where none flows. Fills
        `operandGrads` with one entry per operand, each of the operand's type,
        or null for an operand that has no gradient (an index, a mask).
        Fails, with a diagnostic on the op, where the rule does not apply
        (e.g. dropout that needs random numbers).
      }],
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

def Tcc_ElementwiseOpInterface : OpInterface<"ElementwiseOpInterface"> {
  let cppNamespace = "::mlir::tcc";
  let description = [{
    An op computed element by element: each result element depends only on
    the operand elements at the same (broadcast) index. tcc-fuse puts such
    ops into loop fusions, and the emitters write each as one scalar
    expression. Ops built from the ODS classes `Tcc_BroadcastOp` and
    `Tcc_UnaryOp` answer with the `EwKind` their definition names (the one
    the shared shape rule and constant folder use); `tcc.where`, `tcc.cast`,
    `tcc.gelu` and `tcc.gelu_grad` are elementwise without a shared kind.
  }];
  let methods = [
    InterfaceMethod<[{
        The shared elementwise computation this op is, or std::nullopt for
        an elementwise op of its own kind.
      }],
      "std::optional<::mlir::tcc::EwKind>", "getEwKind", (ins), [{}],
      [{ return std::nullopt; }]>
  ];
}

def Tcc_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::tcc";
  let description = [{
    The op's cost, for the one FLOP model that tcc-remat (which value is
    cheapest to recompute) and `tcc --memory-report` (the step's FLOPs and
    the share recomputed) share: `mlir::tcc::estimateFlops` asks this
    interface and falls back to the number of elements an op touches.
    Weights: 1 per element for a copy or a cheap elementwise op, 4 for a
    transcendental one, 8 for GELU, 6 per input element for a row
    statistic (softmax, LayerNorm, a reduction), 2MNK for a matrix product.
  }];
  let methods = [
    InterfaceMethod<[{
        The floating-point operations one execution performs (an estimate,
        comparable between ops).
      }],
      "int64_t", "getFlops">,
    InterfaceMethod<[{
        Whether tcc-remat may recompute this op's result in the backward
        pass instead of keeping it (false for gathers of indices, the loss
        and backward-only ops).
      }],
      "bool", "isRecomputable", (ins), [{}], [{ return true; }]>
  ];
}

#endif // TCC_DIALECT_TCCINTERFACES_TD
