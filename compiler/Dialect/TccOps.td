//===- TccOps.td - tcc dialect operations ------------------*- tablegen -*-===//
//
// ONNX-level operators. Each op infers its result types (InferTypeOpAdaptor)
// and the verifier checks the declared types against the inference, so a
// malformed op is rejected with a message that says what is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_DIALECT_TCCOPS_TD
#define TCC_DIALECT_TCCOPS_TD

include "compiler/Dialect/TccBase.td"
include "compiler/Dialect/TccInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

class Tcc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tcc_Dialect, mnemonic, !listconcat([Pure, InferTypeOpAdaptor], traits)>;

// An op with a reverse-mode gradient rule (TccGradients.cpp).
defvar Differentiable = DeclareOpInterfaceMethods<Tcc_GradientOpInterface>;
// An op with a FLOP estimate (TccCosts.cpp); `NotRecomputable` for one that
// tcc-remat must never recompute.
defvar Costed = DeclareOpInterfaceMethods<Tcc_CostOpInterface>;
defvar NotRecomputable = DeclareOpInterfaceMethods<Tcc_CostOpInterface, ["isRecomputable"]>;
// An elementwise op of its own kind (no EwKind).
defvar TccElementwise = Tcc_ElementwiseOpInterface;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Binary ops with NumPy-style multidirectional broadcasting. `kind` names the
// `EwKind` used by the shared inference and constant folder (and answered by
// ElementwiseOpInterface); `flops` is the cost of one result element
// (CostOpInterface).
class Tcc_BroadcastOp<string mnemonic, string onnx, string kind,
                      bit boolResult = 0, list<Trait> traits = [], int flops = 1>
    : Tcc_Op<mnemonic, !listconcat(
          [DeclareOpInterfaceMethods<Tcc_ElementwiseOpInterface, ["getEwKind"]>,
           Costed], traits)> {
  let summary = "ONNX `" # onnx # "`, with NumPy broadcasting";
  let description = [{
    Elementwise `}] # onnx # [{` of two tensors whose shapes broadcast
    (ONNX multidirectional broadcasting). The result has the broadcast shape.

    ```mlir
    %r = tcc.}] # mnemonic # [{ %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3x}] # !if(boolResult, "i1", "f32") # [{>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$lhs, Tcc_Tensor:$rhs);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::mlir::tcc::inferBroadcastOp(loc, ::mlir::tcc::EwKind::}] # kind # [{,
                                           adaptor.getLhs().getType(),
                                           adaptor.getRhs().getType(), types);
    }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      if (::mlir::tcc::keepsItsSlot(*this))
        return {};
      return ::mlir::tcc::foldElementwise(::mlir::tcc::EwKind::}] # kind # [{,
                                          getType(), adaptor.getOperands());
    }
    std::optional<::mlir::tcc::EwKind> $cppClass::getEwKind() {
      return ::mlir::tcc::EwKind::}] # kind # [{;
    }
    int64_t $cppClass::getFlops() {
      return }] # flops # [{ * ::mlir::tcc::elementsOf(getResult());
    }
  }];
}

def Tcc_AddOp : Tcc_BroadcastOp<"add", "Add", "Add", 0, [Differentiable]>;
def Tcc_SubOp : Tcc_BroadcastOp<"sub", "Sub", "Sub", 0, [Differentiable]>;
def Tcc_MulOp : Tcc_BroadcastOp<"mul", "Mul", "Mul", 0, [Differentiable]>;
def Tcc_DivOp : Tcc_BroadcastOp<"div", "Div", "Div", 0, [Differentiable]>;
def Tcc_PowOp : Tcc_BroadcastOp<"pow", "Pow", "Pow", 0, [Differentiable], 4>;
def Tcc_EqualOp : Tcc_BroadcastOp<"equal", "Equal", "Equal", 1>;
def Tcc_LessOp : Tcc_BroadcastOp<"less", "Less", "Less", 1>;
def Tcc_GreaterOp : Tcc_BroadcastOp<"greater", "Greater", "Greater", 1>;
def Tcc_AndOp : Tcc_BroadcastOp<"and", "And", "And", 1>;
def Tcc_OrOp : Tcc_BroadcastOp<"or", "Or", "Or", 1>;

// Unary elementwise ops: the result has the operand's type. `kind` and
// `flops` as for Tcc_BroadcastOp.
class Tcc_UnaryOp<string mnemonic, string onnx, string kind,
                  Type operandType = Tcc_FloatTensor, list<Trait> traits = [],
                  int flops = 1>
    : Tcc_Op<mnemonic, !listconcat(
          [DeclareOpInterfaceMethods<Tcc_ElementwiseOpInterface, ["getEwKind"]>,
           Costed], traits)> {
  let summary = "ONNX `" # onnx # "`, elementwise";
  let description = [{
    Elementwise `}] # onnx # [{`; the result has the operand's type.

    ```mlir
    %r = tcc.}] # mnemonic # [{ %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location>,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      types.push_back(adaptor.getInput().getType());
      return ::mlir::success();
    }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      // Identity folds to its operand whether or not it is a constant.
      if (::mlir::tcc::EwKind::}] # kind # [{ == ::mlir::tcc::EwKind::Identity)
        return getInput();
      if (::mlir::tcc::keepsItsSlot(*this))
        return {};
      return ::mlir::tcc::foldElementwise(::mlir::tcc::EwKind::}] # kind # [{,
                                          getType(), adaptor.getOperands());
    }
    std::optional<::mlir::tcc::EwKind> $cppClass::getEwKind() {
      return ::mlir::tcc::EwKind::}] # kind # [{;
    }
    int64_t $cppClass::getFlops() {
      return }] # flops # [{ * ::mlir::tcc::elementsOf(getResult());
    }
  }];
}

def Tcc_SqrtOp : Tcc_UnaryOp<"sqrt", "Sqrt", "Sqrt", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_NegOp : Tcc_UnaryOp<"neg", "Neg", "Neg", Tcc_Tensor, [Differentiable]>;
def Tcc_ExpOp : Tcc_UnaryOp<"exp", "Exp", "Exp", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_LogOp : Tcc_UnaryOp<"log", "Log", "Log", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_ErfOp : Tcc_UnaryOp<"erf", "Erf", "Erf", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_TanhOp : Tcc_UnaryOp<"tanh", "Tanh", "Tanh", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_SigmoidOp : Tcc_UnaryOp<"sigmoid", "Sigmoid", "Sigmoid", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_ReluOp : Tcc_UnaryOp<"relu", "Relu", "Relu", Tcc_Tensor, [Differentiable]>;
def Tcc_ReciprocalOp : Tcc_UnaryOp<"reciprocal", "Reciprocal", "Reciprocal", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_AbsOp : Tcc_UnaryOp<"abs", "Abs", "Abs", Tcc_Tensor, [Differentiable]>;
def Tcc_SinOp : Tcc_UnaryOp<"sin", "Sin", "Sin", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_CosOp : Tcc_UnaryOp<"cos", "Cos", "Cos", Tcc_FloatTensor, [Differentiable], 4>;
def Tcc_NotOp : Tcc_UnaryOp<"not", "Not", "Not", Tcc_BoolTensor>;
def Tcc_IdentityOp : Tcc_UnaryOp<"identity", "Identity", "Identity", Tcc_Tensor, [Differentiable]>;

def Tcc_WhereOp : Tcc_Op<"where", [Differentiable, TccElementwise, Costed]> {
  let summary = "ONNX `Where`: select by a boolean condition, with broadcasting";
  let description = [{
    `result[i] = condition[i] ? x[i] : y[i]` over the broadcast of the three
    shapes; `x` and `y` have the same element type.

    ```mlir
    %r = tcc.where %mask, %x, %y : (tensor<1x1x4x4xi1>, tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
    ```
  }];
  let arguments = (ins Tcc_BoolTensor:$condition, Tcc_Tensor:$x, Tcc_Tensor:$y);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat =
      "$condition `,` $x `,` $y attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_CastOp : Tcc_Op<"cast", [Differentiable, TccElementwise, Costed]> {
  let summary = "ONNX `Cast`: convert the element type";
  let description = [{
    Converts every element to the element type `to` (ONNX `Cast`; floats to
    integers truncate toward zero, anything to `i1` tests for non-zero).

    ```mlir
    %r = tcc.cast %x {to = f32} : (tensor<4xi64>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, TypeAttr:$to);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Tcc_MatMulOp : Tcc_Op<"matmul", [Differentiable, Costed]> {
  let summary = "ONNX `MatMul`: NumPy matmul with batch broadcasting";
  let description = [{
    Matrix product over the last two dimensions, broadcasting the leading
    (batch) dimensions; a 1-D operand is promoted to a matrix and the
    promoted dimension is removed from the result (`numpy.matmul`).

    ```mlir
    %r = tcc.matmul %a, %b : (tensor<2x4x8x16xf32>, tensor<16x32xf32>) -> tensor<2x4x8x32xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$lhs, Tcc_Tensor:$rhs);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Tcc_GemmOp : Tcc_Op<"gemm", [Differentiable]> {
  let summary = "ONNX `Gemm`: alpha * op(A) * op(B) + beta * C";
  let description = [{
    `A` and `B` are matrices, optionally transposed (`transA`, `transB`);
    the optional `C` broadcasts to the `[M, N]` result.

    ```mlir
    %r = tcc.gemm %x, %w, %b {transB = 1 : i64} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$a, Tcc_FloatTensor:$b,
                   Optional<Tcc_FloatTensor>:$c,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta,
                   DefaultValuedAttr<I64Attr, "0">:$transA,
                   DefaultValuedAttr<I64Attr, "0">:$transB);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$a `,` $b (`,` $c^)? attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Normalization and activation functions over an axis
//===----------------------------------------------------------------------===//

class Tcc_SoftmaxLikeOp<string mnemonic, string onnx> : Tcc_Op<mnemonic, [Differentiable, Costed]> {
  let summary = "ONNX `" # onnx # "` along one axis (opset 13 semantics)";
  let description = [{
    `}] # onnx # [{` along `axis` (negative counts from the back). Only the
    opset-13 semantics exist here: the reduction is over the one axis, not
    over the input coerced to 2-D.

    ```mlir
    %r = tcc.}] # mnemonic # [{ %x {axis = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def Tcc_SoftmaxOp : Tcc_SoftmaxLikeOp<"softmax", "Softmax">;
def Tcc_LogSoftmaxOp : Tcc_SoftmaxLikeOp<"log_softmax", "LogSoftmax">;

def Tcc_LayerNormalizationOp : Tcc_Op<"layer_normalization", [Differentiable, Costed]> {
  let summary = "ONNX `LayerNormalization` (opset 17)";
  let description = [{
    Normalizes over the dimensions from `axis` to the last, then scales and
    shifts. `mean` and `inv_std_dev` have the input's shape with the
    normalized dimensions set to 1, in the `stash_type` precision (1 = f32).

    ```mlir
    %y, %mean, %rstd = tcc.layer_normalization %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32}
        : (tensor<4x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<4x16x32xf32>, tensor<4x16x1xf32>, tensor<4x16x1xf32>)
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input, Tcc_FloatTensor:$scale,
                   Optional<Tcc_FloatTensor>:$bias,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon,
                   DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs Tcc_FloatTensor:$result, Tcc_FloatTensor:$mean,
                 Tcc_FloatTensor:$inv_std_dev);
  let assemblyFormat =
      "$input `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Tcc_ReduceOp<string mnemonic, string onnx> : Tcc_Op<mnemonic, [Differentiable, Costed]> {
  let summary = "ONNX `" # onnx # "` over `axes`";
  let description = [{
    `}] # onnx # [{` over `axes` (all axes when absent, unless
    `noop_with_empty_axes` is set, which makes it the identity), keeping the
    reduced dimensions as 1 when `keepdims` is 1.

    ```mlir
    %r = tcc.}] # mnemonic # [{ %x {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<4x16x32xf32>) -> tensor<4x16x1xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input,
                   OptionalAttr<DenseI64ArrayAttr>:$axes,
                   DefaultValuedAttr<I64Attr, "1">:$keepdims,
                   DefaultValuedAttr<I64Attr, "0">:$noop_with_empty_axes);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::mlir::tcc::inferReduceOp(loc, adaptor.getInput().getType(),
                                        adaptor.getAxes(), adaptor.getKeepdims(),
                                        adaptor.getNoopWithEmptyAxes(), types);
    }
  }];
}

def Tcc_ReduceMeanOp : Tcc_ReduceOp<"reduce_mean", "ReduceMean">;
def Tcc_ReduceSumOp : Tcc_ReduceOp<"reduce_sum", "ReduceSum">;

//===----------------------------------------------------------------------===//
// Indexing and shape manipulation
//===----------------------------------------------------------------------===//

def Tcc_GatherOp : Tcc_Op<"gather", [Differentiable, NotRecomputable]> {
  let summary = "ONNX `Gather`: take slices along an axis by index";
  let description = [{
    `result.shape = data.shape[:axis] + indices.shape + data.shape[axis+1:]`.
    Negative indices count from the end of the axis. An embedding lookup is
    a gather on axis 0 of the table.

    ```mlir
    %r = tcc.gather %wte, %idx {axis = 0 : i64} : (tensor<65x32xf32>, tensor<4x16xi64>) -> tensor<4x16x32xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$data, Tcc_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat =
      "$data `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_ReshapeOp : Tcc_Op<"reshape", [Differentiable, Costed]> {
  let summary = "ONNX `Reshape` to a compile-time shape";
  let description = [{
    Reshapes to `shape` (ONNX semantics: `0` copies the input dimension
    unless `allowzero`, `-1` is inferred). The importer folds ONNX's shape
    input into the attribute.

    ```mlir
    %r = tcc.reshape %x {shape = array<i64: 4, 16, 4, 8>} : (tensor<4x16x32xf32>) -> tensor<4x16x4x8xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, DenseI64ArrayAttr:$shape,
                   DefaultValuedAttr<I64Attr, "0">:$allowzero);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_TransposeOp : Tcc_Op<"transpose", [Differentiable, Costed]> {
  let summary = "ONNX `Transpose`: permute dimensions";
  let description = [{
    `result.shape[i] = input.shape[perm[i]]`; without `perm` the dimensions
    are reversed.

    ```mlir
    %r = tcc.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<4x16x4x8xf32>) -> tensor<4x4x16x8xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, OptionalAttr<DenseI64ArrayAttr>:$perm);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  let extraClassDeclaration = [{
    /// `perm`, or the input's dimensions reversed when it is absent.
    SmallVector<int64_t> getPermutation();
  }];
}

def Tcc_UnsqueezeOp : Tcc_Op<"unsqueeze", [Differentiable, Costed]> {
  let summary = "ONNX `Unsqueeze`: insert dimensions of size 1";
  let description = [{
    Inserts a dimension of size 1 at each of `axes`, which index the
    result (negative counts from its back).

    ```mlir
    %r = tcc.unsqueeze %x {axes = array<i64: 0>} : (tensor<16xi64>) -> tensor<1x16xi64>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_SqueezeOp : Tcc_Op<"squeeze", [Differentiable, Costed]> {
  let summary = "ONNX `Squeeze`: remove dimensions of size 1";
  let description = [{
    Removes the dimensions at `axes`, which must have size 1; without
    `axes`, removes every dimension of size 1.

    ```mlir
    %r = tcc.squeeze %x {axes = array<i64: 1>} : (tensor<4x1x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, OptionalAttr<DenseI64ArrayAttr>:$axes);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_SliceOp : Tcc_Op<"slice", [Differentiable, Costed]> {
  let summary = "ONNX `Slice` with compile-time bounds";
  let description = [{
    For each of `axes` (default: 0..n-1), takes `starts[i]:ends[i]:steps[i]`
    with ONNX's clamping (out-of-range bounds clamp, negative bounds count
    from the end; `steps` default 1, never 0).

    ```mlir
    %r = tcc.slice %x {starts = array<i64: 0>, ends = array<i64: 16>, axes = array<i64: 1>} : (tensor<1x64x32xf32>) -> tensor<1x16x32xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$ends,
                   OptionalAttr<DenseI64ArrayAttr>:$axes,
                   OptionalAttr<DenseI64ArrayAttr>:$steps);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_SplitOp : Tcc_Op<"split", [Differentiable, Costed]> {
  let summary = "ONNX `Split` into pieces of compile-time sizes";
  let description = [{
    Splits along `axis` into one result per entry of `split`, which must add
    up to the size of the axis (the importer fills it in for an even split).

    ```mlir
    %q, %k, %v = tcc.split %qkv {axis = 2 : i64, split = array<i64: 32, 32, 32>}
        : (tensor<4x16x96xf32>) -> (tensor<4x16x32xf32>, tensor<4x16x32xf32>, tensor<4x16x32xf32>)
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input,
                   DefaultValuedAttr<I64Attr, "0">:$axis,
                   DenseI64ArrayAttr:$split);
  let results = (outs Variadic<Tcc_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def Tcc_ConcatOp : Tcc_Op<"concat", [Differentiable, Costed]> {
  let summary = "ONNX `Concat` along an axis";
  let description = [{
    Concatenates along `axis`; all other dimensions and the element types
    must agree.

    ```mlir
    %r = tcc.concat %a, %b {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
    ```
  }];
  let arguments = (ins Variadic<Tcc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_ExpandOp : Tcc_Op<"expand", [Differentiable, Costed]> {
  let summary = "ONNX `Expand`: broadcast to a compile-time shape";
  let description = [{
    Broadcasts the input with `shape` (bidirectional, like NumPy's
    `x * ones(shape)`): the result may have a larger rank and dimensions of
    size 1 in `shape` keep the input's size.

    ```mlir
    %r = tcc.expand %x {shape = array<i64: 4, 1, 1>} : (tensor<3x1xf32>) -> tensor<4x3x1xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Constants and shapes
//===----------------------------------------------------------------------===//

def Tcc_ConstantOp : Tcc_Op<"constant", [ConstantLike]> {
  let summary = "ONNX `Constant`: a tensor literal";
  let description = [{
    ```mlir
    %c = tcc.constant {value = dense<[4, 16, 32]> : tensor<3xi64>} : () -> tensor<3xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_ConstantOfShapeOp : Tcc_Op<"constant_of_shape"> {
  let summary = "ONNX `ConstantOfShape`: a tensor filled with one value";
  let description = [{
    A tensor of `shape` with every element equal to the one element of
    `value` (whose element type is the result's).

    ```mlir
    %c = tcc.constant_of_shape {shape = array<i64: 4, 4>, value = dense<1.0> : tensor<1xf32>} : () -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins DenseI64ArrayAttr:$shape, ElementsAttr:$value);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_ShapeOp : Tcc_Op<"shape"> {
  let summary = "ONNX `Shape`: the input's dimensions as a 1-D i64 tensor";
  let description = [{
    The dimensions `start` to `end` (opset 15 slicing; default all) of a
    statically shaped input; always folds to a constant.

    ```mlir
    %s = tcc.shape %x : (tensor<4x16x32xf32>) -> tensor<3xi64>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, OptionalAttr<I64Attr>:$start,
                   OptionalAttr<I64Attr>:$end);
  let results = (outs Tcc_IntTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Training-specific
//===----------------------------------------------------------------------===//

def Tcc_DropoutOp : Tcc_Op<"dropout", [Differentiable]> {
  let summary = "ONNX `Dropout` (identity unless training with ratio > 0)";
  let description = [{
    With `training` false or `ratio` 0 this is the identity and `mask` is all
    true; it folds away. With a non-zero ratio in training mode,
    tcc-legalize rewrites it as `tcc.random_keep` and a `tcc.where`.

    ```mlir
    %y, %mask = tcc.dropout %x {ratio = 0.0 : f32, training = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "0.5">:$ratio,
                   DefaultValuedAttr<BoolAttr, "false">:$training,
                   OptionalAttr<I64Attr>:$seed);
  let results = (outs Tcc_FloatTensor:$output, Tcc_BoolTensor:$mask);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tcc_RandomKeepOp : Tcc_Op<"random_keep", [Costed]> {
  let summary = "Dropout's keep mask, regenerated from the step's random state";
  let description = [{
    A boolean tensor of `shape` whose element `i` is true (kept) when 24
    random bits of (`state`, `stream`, `i`) are at least `ceil(ratio * 2^24)`,
    so with probability `1 - ratio` (runtime/tcc_random.h defines the
    function). `state` is the
    step's random state, `[seed, micro-step counter]`, an argument with
    `tcc.rng` that the runtime advances after every micro-step; `stream`
    tells apart the dropouts of one step (tcc-legalize numbers them in
    order). The mask is a function of its attributes and the state alone,
    so the backward pass, or a recomputation, regenerates the forward
    pass's mask rather than storing it.

    ```mlir
    %keep = tcc.random_keep %rng {ratio = 1.000000e-01 : f32, shape = array<i64: 4, 8>, stream = 0 : i64} : (tensor<2xi64>) -> tensor<4x8xi1>
    ```
  }];
  let arguments = (ins Tcc_IntTensor:$state, F32Attr:$ratio, I64Attr:$stream,
                   DenseI64ArrayAttr:$shape);
  let results = (outs Tcc_BoolTensor:$result);
  let assemblyFormat = "$state attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tcc_SoftmaxCrossEntropyLossOp : Tcc_Op<"softmax_cross_entropy_loss", [Differentiable, NotRecomputable]> {
  let summary = "ONNX `SoftmaxCrossEntropyLoss`";
  let description = [{
    `scores` is `[N, C]` or `[N, C, d1, ...]`, `labels` is `[N]` or
    `[N, d1, ...]` of integer class indices, `weights` (optional) is `[C]`.
    Labels equal to `ignore_index` contribute nothing (and do not count in
    the mean). `output` is a scalar for `reduction` "mean" or "sum" and the
    per-element loss for "none"; `log_prob` is the log-softmax of `scores`.

    ```mlir
    %loss, %logp = tcc.softmax_cross_entropy_loss %logits, %labels {ignore_index = -100 : i64, reduction = "mean"}
        : (tensor<64x65xf32>, tensor<64xi64>) -> (tensor<f32>, tensor<64x65xf32>)
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$scores, Tcc_IndexTensor:$labels,
                   Optional<Tcc_FloatTensor>:$weights,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Tcc_FloatTensor:$output, Tcc_FloatTensor:$log_prob);
  let assemblyFormat =
      "$scores `,` $labels (`,` $weights^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// ONNX ops that only the importer and tcc-legalize see
//===----------------------------------------------------------------------===//
//
// Today's exporters write these, mostly in subgraphs that fold at import
// (masks, position tables, shapes). Those left on values computed at run time
// are rewritten by tcc-legalize into core ops (Patterns.h); an op with the
// ImportOnly trait that is still there afterwards is reported by name, so no
// later stage has to know these ops.

def Tcc_LessOrEqualOp : Tcc_BroadcastOp<"less_or_equal", "LessOrEqual", "LessOrEqual", 1, [ImportOnly]>;
def Tcc_GreaterOrEqualOp : Tcc_BroadcastOp<"greater_or_equal", "GreaterOrEqual", "GreaterOrEqual", 1, [ImportOnly]>;
def Tcc_MaxOp : Tcc_BroadcastOp<"max", "Max", "Max", 0, [ImportOnly]>;
def Tcc_MinOp : Tcc_BroadcastOp<"min", "Min", "Min", 0, [ImportOnly]>;

def Tcc_IsNaNOp : Tcc_Op<"is_nan", [ImportOnly]> {
  let summary = "ONNX `IsNaN`: whether each element is NaN";
  let description = [{
    The torch.export-based exporter writes `where(is_nan(p), 0, p)` after the
    softmax of scaled dot-product attention. tcc-legalize rewrites it as
    `not(equal(x, x))`, which is true exactly for NaN.

    ```mlir
    %m = tcc.is_nan %x : (tensor<4xf32>) -> tensor<4xi1>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input);
  let results = (outs Tcc_BoolTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_PadOp : Tcc_Op<"pad", [ImportOnly]> {
  let summary = "ONNX `Pad` (constant mode) with compile-time pads";
  let description = [{
    `pads` holds the amounts added before each axis, then after each axis
    (`[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`, negative amounts
    remove elements), over `axes` (all axes when absent, as before opset
    18). `value` is the fill (zero when absent). Only `mode = "constant"`
    is supported. tcc-legalize rewrites it as slices and a concatenation.

    ```mlir
    %r = tcc.pad %labels {pads = array<i64: 0, 0, 0, 1>, value = dense<-100> : tensor<i64>} : (tensor<2x16xi64>) -> tensor<2x17xi64>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, DenseI64ArrayAttr:$pads,
                   OptionalAttr<ElementsAttr>:$value,
                   OptionalAttr<DenseI64ArrayAttr>:$axes,
                   DefaultValuedAttr<StrAttr, "\"constant\"">:$mode);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_GatherElementsOp : Tcc_Op<"gather_elements", [ImportOnly]> {
  let summary = "ONNX `GatherElements`: index along one axis, element by element";
  let description = [{
    `result[i][j][k] = data[index[i][j][k]][j][k]` for `axis = 0` (and so
    on); the result has the shape of `indices`. BERT's exports use it on
    the token-type buffer, where it folds at import.

    ```mlir
    %r = tcc.gather_elements %data, %idx {axis = 1 : i64} : (tensor<1x64xi64>, tensor<2x16xi64>) -> tensor<2x16xi64>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$data, Tcc_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat =
      "$data `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_TriluOp : Tcc_Op<"trilu", [ImportOnly]> {
  let summary = "ONNX `Trilu`: keep the upper or lower triangle of the last two axes";
  let description = [{
    Keeps `x[..., i, j]` where `j - i >= k` (`upper = 1`) or `j - i <= k`
    (`upper = 0`), and sets the rest to zero. tcc-legalize rewrites it as a
    `where` with a constant mask.

    ```mlir
    %r = tcc.trilu %x {upper = 0 : i64, k = 0 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$input, DefaultValuedAttr<I64Attr, "1">:$upper,
                   DefaultValuedAttr<I64Attr, "0">:$k);
  let results = (outs Tcc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Tcc_RMSNormalizationOp : Tcc_Op<"rms_normalization", [ImportOnly]> {
  let summary = "ONNX `RMSNormalization` (opset 23)";
  let description = [{
    `x / sqrt(mean(x^2 over axes [axis, rank)) + epsilon) * scale`, the
    statistics in float32 (`stash_type` 1). tcc-legalize writes it as the
    elementwise chain and a `reduce_mean`, as exporters decompose RMSNorm.

    ```mlir
    %y = tcc.rms_normalization %x, %scale {epsilon = 1.0e-06 : f32} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input, Tcc_FloatTensor:$scale,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1.0e-05">:$epsilon,
                   DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$input `,` $scale attr-dict `:` functional-type(operands, results)";
}

def Tcc_RotaryEmbeddingOp : Tcc_Op<"rotary_embedding", [ImportOnly]> {
  let summary = "ONNX `RotaryEmbedding` (opset 23)";
  let description = [{
    Rotates the first `rotary_embedding_dim` (all when 0) elements of each
    head of `input` (`[B, H, S, D]`, or `[B, S, H*D]` with `num_heads`) by
    the angles whose cosines and sines are `cos_cache` and `sin_cache`
    (`[B, S, R/2]`, or `[P, R/2]` read at `position_ids` `[B, S]`): pairs
    are the two halves of the rotated part, or neighbours when `interleaved`.
    tcc-legalize writes it as slices, multiplies and concatenations.

    ```mlir
    %y = tcc.rotary_embedding %x, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<1x8x8xf32>, tensor<1x8x8xf32>) -> tensor<1x4x8x16xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input, Tcc_FloatTensor:$cos_cache,
                   Tcc_FloatTensor:$sin_cache, Optional<Tcc_IndexTensor>:$position_ids,
                   DefaultValuedAttr<I64Attr, "0">:$interleaved,
                   DefaultValuedAttr<I64Attr, "0">:$num_heads,
                   DefaultValuedAttr<I64Attr, "0">:$rotary_embedding_dim);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$input `,` $cos_cache `,` $sin_cache (`,` $position_ids^)? attr-dict `:` functional-type(operands, results)";
}

def Tcc_OnnxAttentionOp : Tcc_Op<"onnx_attention", [ImportOnly]> {
  let summary = "ONNX `Attention` (opset 23)";
  let description = [{
    `softmax(scale * Q K^T + mask) V` over heads, with grouped-query
    attention (`q_num_heads` a multiple of `kv_num_heads`): `query`, `key`
    and `value` are `[B, H, S, D]`, or `[B, S, H*D]` with the head counts as
    attributes. `attn_mask` is boolean (true attends) or additive;
    `is_causal` masks keys after each query. `scale` defaults to
    1/sqrt(D). tcc-legalize writes it as matmuls and a softmax (which
    tcc-fuse-attention then fuses into `tcc.attention`); `softcap` > 0
    gives `softcap * tanh(scores / softcap)`. Past keys and values,
    `nonpad_kv_seqlen`, the windows of opset 25 and the extra outputs are not
    supported.

    ```mlir
    %y = tcc.onnx_attention %q, %k, %v {is_causal = 1 : i64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$query, Tcc_FloatTensor:$key,
                   Tcc_FloatTensor:$value, Optional<Tcc_Tensor>:$attn_mask,
                   DefaultValuedAttr<I64Attr, "0">:$is_causal,
                   DefaultValuedAttr<I64Attr, "0">:$q_num_heads,
                   DefaultValuedAttr<I64Attr, "0">:$kv_num_heads,
                   OptionalAttr<F32Attr>:$scale,
                   DefaultValuedAttr<F32Attr, "0.0">:$softcap,
                   DefaultValuedAttr<I64Attr, "0">:$qk_matmul_output_mode,
                   DefaultValuedAttr<I64Attr, "0">:$softmax_precision);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$query `,` $key `,` $value (`,` $attn_mask^)? attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Core ops that legalization introduces
//===----------------------------------------------------------------------===//

def Tcc_GeluOp : Tcc_Op<"gelu", [Differentiable, TccElementwise, Costed]> {
  let summary = "GELU activation (recognised from its decomposed form)";
  let description = [{
    `x * 0.5 * (1 + erf(x / sqrt(2)))` with `approximate = "none"`, or
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))` with
    `approximate = "tanh"` (ONNX `Gelu`, opset 20). `tcc-legalize` makes it
    from the elementwise chains that `torch.onnx.export` writes for
    `F.gelu`, so that later stages see one op with one gradient rule.

    ```mlir
    %y = tcc.gelu %x {approximate = "tanh"} : (tensor<4x16x128xf32>) -> tensor<4x16x128xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$input,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Tcc_AttentionOp : Tcc_Op<"attention", [Differentiable, AttrSizedOperandSegments, Costed]> {
  let summary = "Scaled dot-product attention (recognised by tcc-fuse-attention)";
  let description = [{
    `softmax(scale * query key^T [+ causal mask]) value` over heads
    `[B, H]`. The optional `bias` (`[B or 1, H or 1, Sq or 1, Sk]`,
    broadcast) is added to the scaled scores, as a padding mask is; it gets
    no gradient (tcc-fuse-attention only takes one that no trainable
    parameter reaches). With `causal`, query `i` sees keys `0..i` (the
    top-left aligned lower triangle that a `tril(ones(T, T))` mask selects).
    With `softcap` (> 0, Gemma-2's attention logit soft-capping), the
    scaled product `x = scale * q k^T` becomes `softcap * tanh(x / softcap)`
    before the bias and the causal mask.
    `lse` (`[B, H, Sq]`) is each query's log-sum-exp of its scaled scores,
    kept for the backward pass so that the `Sq x Sk` probabilities are never
    stored: the CUDA target computes the op in one kernel a tile at a time.

    The operands have one of three layouts:
    - head-major (no `heads`): query `[B, H, Sq, D]`, key `[B, H, Sk, D]`,
      value `[B, H, Sk, Dv]`, result `[B, H, Sq, Dv]`;
    - token-major (`heads` = H): query `[B, Sq, H*D]`, key `[B, Sk, H*D]`,
      value `[B, Sk, H*Dv]`, result `[B, Sq, H*Dv]`; head `h` is columns
      `[h*D, (h+1)*D)`. This is the layout of the projections that feed
      attention and of the one that reads it, so no head transposes are
      stored or copied;
    - packed (`heads` and `columns`): query, key and value are one
      `[B, S, 3*H*D]` tensor (one projection's output) and are its columns
      `[c, c + H*D)` for `c` = `columns[0]`, `[1]`, `[2]`; the result is
      `[B, S, H*D]`. The projection's output is not split into copies.

    With `dropout` (a ratio in (0, 1)), `dropout_stream` and the step's
    random state `rng` (tcc.random_keep's operand), the probabilities are
    dropped before the product with value: probability `(q, k)` of head
    `(b, h)` is kept, and scaled by `1 / (1 - dropout)`, where
    `tcc.random_keep` of that stream keeps element `((b*H + h)*Sq + q)*Sk + k`
    of the `[B, H, Sq, Sk]` probabilities. `lse` is that of the undropped
    scores; the backward pass regenerates the mask.

    ```mlir
    %o, %lse = tcc.attention %q, %k, %v {scale = 0.125 : f64, causal = true}
        : (tensor<8x12x1024x64xf32>, tensor<8x12x1024x64xf32>, tensor<8x12x1024x64xf32>)
          -> (tensor<8x12x1024x64xf32>, tensor<8x12x1024xf32>)
    %o2, %lse2 = tcc.attention %qkv, %qkv, %qkv {heads = 12 : i64, columns = array<i64: 0, 768, 1536>, scale = 0.125 : f64, causal = true}
        : (tensor<8x1024x2304xf32>, tensor<8x1024x2304xf32>, tensor<8x1024x2304xf32>)
          -> (tensor<8x1024x768xf32>, tensor<8x12x1024xf32>)
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$query, Tcc_FloatTensor:$key,
                   Tcc_FloatTensor:$value, Optional<Tcc_FloatTensor>:$bias,
                   Optional<Tcc_IntTensor>:$rng,
                   F64Attr:$scale, DefaultValuedAttr<BoolAttr, "false">:$causal,
                   OptionalAttr<I64Attr>:$heads,
                   OptionalAttr<DenseI64ArrayAttr>:$columns,
                   OptionalAttr<F32Attr>:$dropout,
                   OptionalAttr<I64Attr>:$dropout_stream,
                   OptionalAttr<F64Attr>:$softcap);
  let results = (outs Tcc_FloatTensor:$result, Tcc_FloatTensor:$lse);
  let assemblyFormat =
      "$query `,` $key `,` $value (`,` $bias^)? (`rng` $rng^)? attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Backward-pass ops (built by gradient rules)
//===----------------------------------------------------------------------===//

def Tcc_GatherGradOp : Tcc_Op<"gather_grad", [NotRecomputable]> {
  let summary = "Gradient of `tcc.gather` with respect to its data";
  let description = [{
    A zero tensor of `shape` into which the slices of `grad` are added at
    `indices` along `axis`; repeated indices (a token that occurs twice)
    add up.

    ```mlir
    %d = tcc.gather_grad %g, %idx {axis = 0 : i64, shape = array<i64: 65, 32>} : (tensor<4x16x32xf32>, tensor<4x16xi64>) -> tensor<65x32xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$grad, Tcc_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis,
                   DenseI64ArrayAttr:$shape);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$grad `,` $indices attr-dict `:` functional-type(operands, results)";
}

def Tcc_SliceGradOp : Tcc_Op<"slice_grad", [NotRecomputable]> {
  let summary = "Gradient of `tcc.slice` with respect to its input";
  let description = [{
    A zero tensor of `shape` (the sliced input's) with `grad` written at the
    positions the slice with these `starts`/`ends`/`axes`/`steps` takes.

    ```mlir
    %d = tcc.slice_grad %g {shape = array<i64: 10, 96>, starts = array<i64: 32>, ends = array<i64: 64>, axes = array<i64: 1>} : (tensor<10x32xf32>) -> tensor<10x96xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$grad, DenseI64ArrayAttr:$shape,
                   DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$ends,
                   OptionalAttr<DenseI64ArrayAttr>:$axes,
                   OptionalAttr<DenseI64ArrayAttr>:$steps);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` functional-type(operands, results)";
}

def Tcc_SoftmaxCrossEntropyLossGradOp : Tcc_Op<"softmax_cross_entropy_loss_grad", [NotRecomputable]> {
  let summary = "Gradient of `tcc.softmax_cross_entropy_loss` with respect to the scores";
  let description = [{
    `(exp(log_prob) - onehot(labels)) * w * s` where `w` is the label's
    weight (0 for ignored labels) and `s` comes from `grad` (the gradient of
    the loss output): per element for "none", the scalar for "sum", the
    scalar divided by the total weight for "mean".

    ```mlir
    %d = tcc.softmax_cross_entropy_loss_grad %g, %logp, %labels {ignore_index = -100 : i64, reduction = "mean"}
        : (tensor<f32>, tensor<64x65xf32>, tensor<64xi64>) -> tensor<64x65xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$grad, Tcc_FloatTensor:$log_prob,
                   Tcc_IndexTensor:$labels, Optional<Tcc_FloatTensor>:$weights,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$grad `,` $log_prob `,` $labels (`,` $weights^)? attr-dict `:` functional-type(operands, results)";
}

def Tcc_SoftmaxCrossEntropyLossWithGradOp
    : Tcc_Op<"softmax_cross_entropy_loss_with_grad", [NotRecomputable]> {
  let summary = "A softmax cross-entropy loss and its gradient in one pass";
  let description = [{
    What `tcc.softmax_cross_entropy_loss` followed by
    `tcc.softmax_cross_entropy_loss_grad` compute, for `scores` `[N, C]` and
    reduction "mean" or "sum", without the log-probabilities in between:
    `output` is the loss, `dscores` its gradient with respect to the scores
    scaled by `grad` (the scalar gradient of the loss, the backward pass's
    seed). `tcc-fuse-loss` forms it; each row is read once for its
    log-sum-exp and once for the loss and gradient.

    ```mlir
    %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %logits, %labels, %seed {ignore_index = -100 : i64, reduction = "mean"}
        : (tensor<64x65xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<f32>, tensor<64x65xf32>)
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$scores, Tcc_IndexTensor:$labels,
                   Tcc_FloatTensor:$grad, Optional<Tcc_FloatTensor>:$weights,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Tcc_FloatTensor:$output, Tcc_FloatTensor:$dscores);
  let assemblyFormat =
      "$scores `,` $labels `,` $grad (`,` $weights^)? attr-dict `:` functional-type(operands, results)";
}

def Tcc_GeluGradOp : Tcc_Op<"gelu_grad", [TccElementwise, NotRecomputable]> {
  let summary = "Gradient of `tcc.gelu` with respect to its input";
  let description = [{
    `grad * gelu'(input)` for the same `approximate`.

    ```mlir
    %d = tcc.gelu_grad %g, %x : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xf32>
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$grad, Tcc_FloatTensor:$input,
                   DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs Tcc_FloatTensor:$result);
  let assemblyFormat =
      "$grad `,` $input attr-dict `:` functional-type(operands, results)";
}

def Tcc_AttentionGradOp : Tcc_Op<"attention_grad", [AttrSizedOperandSegments, NotRecomputable]> {
  let summary = "Gradients of `tcc.attention` with respect to query, key and value";
  let description = [{
    From the forward op's operands and attributes, its `result` and `lse`,
    and `grad` (the gradient of `result`): the gradients of query, key and
    value, with the probabilities recomputed from `lse` (and the forward
    op's `bias`). In the packed layout (`columns`), where query, key and
    value are one tensor, there is one result: that tensor's gradient, each
    column range written by its operand's gradient. With the forward op's
    `dropout`, `dropout_stream` and `rng`, the same mask is regenerated.

    ```mlir
    %dq, %dk, %dv = tcc.attention_grad %q, %k, %v, %o, %lse, %g {scale = 0.125 : f64, causal = true}
        : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>,
           tensor<2x4x16xf32>, tensor<2x4x16x8xf32>)
          -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
    ```
  }];
  let arguments = (ins Tcc_FloatTensor:$query, Tcc_FloatTensor:$key,
                   Tcc_FloatTensor:$value, Tcc_FloatTensor:$result,
                   Tcc_FloatTensor:$lse, Tcc_FloatTensor:$grad,
                   Optional<Tcc_FloatTensor>:$bias, Optional<Tcc_IntTensor>:$rng,
                   F64Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal,
                   OptionalAttr<I64Attr>:$heads,
                   OptionalAttr<DenseI64ArrayAttr>:$columns,
                   OptionalAttr<F32Attr>:$dropout,
                   OptionalAttr<I64Attr>:$dropout_stream,
                   OptionalAttr<F64Attr>:$softcap);
  let results = (outs Variadic<Tcc_FloatTensor>:$grads);
  let assemblyFormat =
      "$query `,` $key `,` $value `,` $result `,` $lse `,` $grad (`,` $bias^)? (`rng` $rng^)? attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Tcc_FusionOp : Op<Tcc_Dialect, "fusion",
                      [Pure, IsolatedFromAbove, SingleBlock,
                       DeclareOpInterfaceMethods<Tcc_CostOpInterface, ["isRecomputable"]>]> {
  let summary = "A group of ops that becomes one kernel";
  let description = [{
    `tcc-fuse` moves a group of ops that become one kernel into the body of
    a `tcc.fusion`; the body's block arguments are the group's inputs and
    `tcc.yield` returns the values that are used outside the group. Inside,
    the ops keep their tensor semantics (they verify as usual). `kind` says
    what kernel the body is (`loop`, `reduction`, `gemm` or `move`, see
    `FusionKind`): tcc-fuse sets it, the verifier checks it against the
    body, and a code generator emits the body as that one kernel with no
    intermediate buffers.

    ```mlir
    %r = tcc.fusion loop(%a, %b) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32> {
    ^bb0(%x: tensor<64xf32>, %y: tensor<64xf32>):
      %0 = tcc.mul %x, %y : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
      %1 = tcc.tanh %0 : (tensor<64xf32>) -> tensor<64xf32>
      tcc.yield %1 : tensor<64xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Tcc_Tensor>:$inputs, Tcc_FusionKind:$kind);
  let results = (outs Variadic<Tcc_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "$kind `(` $inputs `)` attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
}

def Tcc_YieldOp : Op<Tcc_Dialect, "yield",
                     [Pure, Terminator, ReturnLike, HasParent<"FusionOp">]> {
  let summary = "The values a `tcc.fusion` returns";
  let arguments = (ins Variadic<Tcc_Tensor>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

include "compiler/Dialect/TccSwapOps.td"

#endif // TCC_DIALECT_TCCOPS_TD
