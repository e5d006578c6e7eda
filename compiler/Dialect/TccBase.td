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
include "mlir/IR/EnumAttr.td"

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
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Registers the attributes of TccAttrs.td (TccAttrs.cpp).
    void registerAttributes();
  }];
  let useDefaultAttributePrinterParser = 1;
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// The elementwise computations that share one shape rule and one constant
// evaluator (TccOps.cpp, TccFolders.cpp); an elementwise op names its kind
// in its definition (TccOps.td) and answers it through
// ElementwiseOpInterface. `stringifyEwKind` gives the name the runtime
// kernels use (`BinaryOp::Add`, `UnaryOp::Sqrt`).
def Tcc_EwKind : I32EnumAttr<"EwKind", "an elementwise computation", [
    I32EnumAttrCase<"Add", 0>, I32EnumAttrCase<"Sub", 1>,
    I32EnumAttrCase<"Mul", 2>, I32EnumAttrCase<"Div", 3>,
    I32EnumAttrCase<"Pow", 4>, I32EnumAttrCase<"Equal", 5>,
    I32EnumAttrCase<"Less", 6>, I32EnumAttrCase<"Greater", 7>,
    I32EnumAttrCase<"And", 8>, I32EnumAttrCase<"Or", 9>,
    I32EnumAttrCase<"Sqrt", 10>, I32EnumAttrCase<"Neg", 11>,
    I32EnumAttrCase<"Exp", 12>, I32EnumAttrCase<"Log", 13>,
    I32EnumAttrCase<"Erf", 14>, I32EnumAttrCase<"Tanh", 15>,
    I32EnumAttrCase<"Sigmoid", 16>, I32EnumAttrCase<"Relu", 17>,
    I32EnumAttrCase<"Reciprocal", 18>, I32EnumAttrCase<"Abs", 19>,
    I32EnumAttrCase<"Not", 20>, I32EnumAttrCase<"Identity", 21>,
    I32EnumAttrCase<"Sin", 22>, I32EnumAttrCase<"Cos", 23>,
    // ONNX-level only (folded at import or legalized; TccOps.td).
    I32EnumAttrCase<"LessOrEqual", 24>, I32EnumAttrCase<"GreaterOrEqual", 25>,
    I32EnumAttrCase<"Max", 26>, I32EnumAttrCase<"Min", 27>,
    I32EnumAttrCase<"IsNaN", 28>]> {
  let cppNamespace = "::mlir::tcc";
  let genSpecializedAttr = 0;
}

// What kind of kernel a `tcc.fusion` is, decided once by tcc-fuse (which
// knows why it grouped the ops) and checked against the body by the
// verifier; the emitters dispatch on it instead of looking at the body.
def Tcc_FusionKind : I32EnumAttr<"FusionKind", "the kind of kernel a tcc.fusion is", [
    // Elementwise ops of one shape: one loop, no intermediate buffers.
    I32EnumAttrCase<"Loop", 0, "loop">,
    // A loop with reductions: per-row statistics later ops read (softmax,
    // LayerNorm and their backward passes), or sums that accumulate.
    I32EnumAttrCase<"Reduction", 1, "reduction">,
    // One matrix product, its operands read through transposes of their
    // last two dimensions (the prologue), with an elementwise epilogue.
    I32EnumAttrCase<"Gemm", 2, "gemm">,
    // Data movement: a split or concat through views and transposes, one
    // copy loop.
    I32EnumAttrCase<"Move", 3, "move">]> {
  let cppNamespace = "::mlir::tcc";
}

// The machine a step is compiled for (#tcc.target).
def Tcc_TargetKind : I32EnumAttr<"TargetKind", "a code generation target", [
    // fp32 (or f64) C++ built by the system compiler.
    I32EnumAttrCase<"Cpu", 0, "cpu">,
    // fp16 storage, fp32 math and master weights, built by nvcc.
    I32EnumAttrCase<"Cuda", 1, "cuda">]> {
  let cppNamespace = "::mlir::tcc";
  let genSpecializedAttr = 0;
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
