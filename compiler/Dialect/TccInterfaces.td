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

#endif // TCC_DIALECT_TCCINTERFACES_TD
