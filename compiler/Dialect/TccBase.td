//===- TccBase.td - the tcc dialect and its type constraints -*- tablegen -*-===//
//
// The `tcc` dialect holds a model as ONNX-level tensor ops with static shapes.
// The importer maps each ONNX node 1:1 to one op here; later passes legalize to
// the core set that autodiff, fusion and codegen share.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_DIALECT_TCCBASE_TD
#define TCC_DIALECT_TCCBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Tcc_Dialect : Dialect {
  let name = "tcc";
  let cppNamespace = "::mlir::tcc";
  let summary = "ONNX-level tensor ops with static shapes, for training";
  let description = [{
    Ops mirror ONNX operators (opsets 13-28) with their attributes. Every
    tensor is statically shaped; every op infers its result types from its
    operands and attributes (`InferTypeOpInterface`), and the verifier checks
    the declared types against that inference. ONNX inputs that must be known
    at compile time (Reshape's shape, Unsqueeze's axes, Slice's bounds, ...)
    are attributes here: the importer folds the shape subgraph that computes
    them.

    A model is a `func.func` whose arguments carry `tcc.param = "<name>"`
    (a trainable initializer; `tcc.frozen` when fixed) or
    `tcc.input = "<name>"` (a graph input), and whose results carry
    `tcc.output = "<name>"`.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 0;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Tcc_ElementType : AnyTypeOf<[AnyFloat, AnyInteger]>;
def Tcc_Tensor : StaticShapeTensorOf<[AnyFloat, AnyInteger]>;
def Tcc_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Tcc_IntTensor : StaticShapeTensorOf<[AnyInteger]>;
def Tcc_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Tcc_BoolTensor : StaticShapeTensorOf<[I1]>;

//===----------------------------------------------------------------------===//
// Traits
//===----------------------------------------------------------------------===//

// An ONNX op that folds at import or that tcc-legalize rewrites into core
// ops; no stage after tcc-legalize sees one (TccOps.h).
def ImportOnly : NativeOpTrait<"ImportOnly"> {
  let cppNamespace = "::mlir::OpTrait::tcc";
}

#endif // TCC_DIALECT_TCCBASE_TD
