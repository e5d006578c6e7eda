//===- OnnxOpTable.cpp - the ONNX ops the importer knows -----------------===//

#include "compiler/Import/OnnxOpTable.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Import/Composites.h"
#include "compiler/Import/OnnxImporter.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::tcc;

namespace mlir::tcc::onnx_ops {

namespace {
const std::vector<OpSpec> &opTable() {
  static const std::vector<OpSpec> table = {
      {"Add", AddOp::getOperationName(), 7, 1, {}},
      {"Sub", SubOp::getOperationName(), 7, 1, {}},
      {"Mul", MulOp::getOperationName(), 7, 1, {}},
      {"Div", DivOp::getOperationName(), 7, 1, {}},
      {"Pow", PowOp::getOperationName(), 7, 1, {}},
      {"Equal", EqualOp::getOperationName(), 7, 1, {}},
      {"Less", LessOp::getOperationName(), 7, 1, {}},
      {"Greater", GreaterOp::getOperationName(), 7, 1, {}},
      {"And", AndOp::getOperationName(), 7, 1, {}},
      {"Or", OrOp::getOperationName(), 7, 1, {}},
      {"Sqrt", SqrtOp::getOperationName(), 6, 1, {}},
      {"Neg", NegOp::getOperationName(), 6, 1, {}},
      {"Exp", ExpOp::getOperationName(), 6, 1, {}},
      {"Log", LogOp::getOperationName(), 6, 1, {}},
      {"Erf", ErfOp::getOperationName(), 9, 1, {}},
      {"Tanh", TanhOp::getOperationName(), 6, 1, {}},
      {"Sigmoid", SigmoidOp::getOperationName(), 6, 1, {}},
      {"Relu", ReluOp::getOperationName(), 6, 1, {}},
      {"Reciprocal", ReciprocalOp::getOperationName(), 6, 1, {}},
      {"Abs", AbsOp::getOperationName(), 6, 1, {}},
      {"Not", NotOp::getOperationName(), 1, 1, {}},
      {"Identity", IdentityOp::getOperationName(), 1, 1, {}},
      {"Where", WhereOp::getOperationName(), 9, 1, {}},
      {"Cast", CastOp::getOperationName(), 6, 1, {}},
      {"MatMul", MatMulOp::getOperationName(), 1, 1, {}},
      {"Gemm", GemmOp::getOperationName(), 7, 1, {}},
      {"Softmax", SoftmaxOp::getOperationName(), 13, 1, {}},
      {"LogSoftmax", LogSoftmaxOp::getOperationName(), 13, 1, {}},
      {"LayerNormalization", LayerNormalizationOp::getOperationName(), 17, 3, {}},
      {"ReduceMean", ReduceMeanOp::getOperationName(), 1, 1,
       {{1, "axes", ConstKind::Ints, 18}}},
      {"ReduceSum", ReduceSumOp::getOperationName(), 1, 1,
       {{1, "axes", ConstKind::Ints}}},
      {"Gather", GatherOp::getOperationName(), 1, 1, {}},
      {"Reshape", ReshapeOp::getOperationName(), 5, 1,
       {{1, "shape", ConstKind::Ints}}},
      {"Transpose", TransposeOp::getOperationName(), 1, 1, {}},
      {"Unsqueeze", UnsqueezeOp::getOperationName(), 1, 1,
       {{1, "axes", ConstKind::Ints}}},
      {"Squeeze", SqueezeOp::getOperationName(), 1, 1,
       {{1, "axes", ConstKind::Ints}}},
      {"Slice", SliceOp::getOperationName(), 1, 1,
       {{1, "starts", ConstKind::Ints},
        {2, "ends", ConstKind::Ints},
        {3, "axes", ConstKind::Ints},
        {4, "steps", ConstKind::Ints}}},
      {"Split", SplitOp::getOperationName(), 2, -1,
       {{1, "split", ConstKind::Ints}}},
      {"Concat", ConcatOp::getOperationName(), 4, 1, {}},
      {"Expand", ExpandOp::getOperationName(), 8, 1,
       {{1, "shape", ConstKind::Ints}}},
      {"Constant", ConstantOp::getOperationName(), 1, 1, {}},
      {"ConstantOfShape", ConstantOfShapeOp::getOperationName(), 9, 1,
       {{0, "shape", ConstKind::Ints}}},
      {"Shape", ShapeOp::getOperationName(), 1, 1, {}},
      {"Dropout", DropoutOp::getOperationName(), 7, 2,
       {{1, "ratio", ConstKind::Float}, {2, "training", ConstKind::Bool}}},
      {"SoftmaxCrossEntropyLoss",
       SoftmaxCrossEntropyLossOp::getOperationName(), 12, 2, {}},
      {"Gelu", GeluOp::getOperationName(), 20, 1, {}},
      // Folded at import or rewritten by tcc-legalize (ImportOnly).
      {"LessOrEqual", LessOrEqualOp::getOperationName(), 12, 1, {}},
      {"GreaterOrEqual", GreaterOrEqualOp::getOperationName(), 12, 1, {}},
      {"Max", MaxOp::getOperationName(), 8, 1, {}},
      {"Min", MinOp::getOperationName(), 8, 1, {}},
      {"Sin", SinOp::getOperationName(), 7, 1, {}},
      {"Cos", CosOp::getOperationName(), 7, 1, {}},
      {"IsNaN", IsNaNOp::getOperationName(), 9, 1, {}},
      {"Pad", PadOp::getOperationName(), 11, 1,
       {{1, "pads", ConstKind::Ints},
        {2, "value", ConstKind::Tensor},
        {3, "axes", ConstKind::Ints, 18}}},
      {"GatherElements", GatherElementsOp::getOperationName(), 11, 1, {}},
      {"RMSNormalization", RMSNormalizationOp::getOperationName(), 23, 1, {}},
      {"RotaryEmbedding", RotaryEmbeddingOp::getOperationName(), 23, 1, {}},
      {"Attention", OnnxAttentionOp::getOperationName(), 23, 1, {}},
      {"Trilu", TriluOp::getOperationName(), 14, 1, {{1, "k", ConstKind::Int}}},
      // Written as several tcc ops (Composites.h); the op named is the last.
      {"Clip", WhereOp::getOperationName(), 6, 1, {}},
      {"LeakyRelu", WhereOp::getOperationName(), 6, 1, {}},
      {"PRelu", WhereOp::getOperationName(), 7, 1, {}},
      {"ThresholdedRelu", WhereOp::getOperationName(), 10, 1, {}},
      {"Elu", WhereOp::getOperationName(), 6, 1, {}},
      {"Selu", MulOp::getOperationName(), 6, 1, {}},
      {"Celu", WhereOp::getOperationName(), 12, 1, {}},
      {"HardSigmoid", WhereOp::getOperationName(), 6, 1, {}},
      {"HardSwish", MulOp::getOperationName(), 14, 1, {}},
      {"Softsign", DivOp::getOperationName(), 1, 1, {}},
      {"Softplus", AddOp::getOperationName(), 1, 1, {}},
      {"Mish", MulOp::getOperationName(), 18, 1, {}},
      {"GlobalAveragePool", ReduceMeanOp::getOperationName(), 1, 1, {}},
      {"ReduceSumSquare", ReduceSumOp::getOperationName(), 1, 1, {}},
      {"ReduceL1", ReduceSumOp::getOperationName(), 1, 1, {}},
      {"ReduceL2", SqrtOp::getOperationName(), 1, 1, {}},
      {"Tile", ReshapeOp::getOperationName(), 6, 1, {}},
      {"CumSum", ReduceSumOp::getOperationName(), 11, 1, {}},
      {"GatherND", GatherOp::getOperationName(), 11, 1, {}},
      {"ScatterND", WhereOp::getOperationName(), 11, 1, {}},
      {"ScatterElements", WhereOp::getOperationName(), 11, 1, {}},
      {"ReduceMax", MaxOp::getOperationName(), 1, 1, {}},
      {"ReduceMin", MinOp::getOperationName(), 1, 1, {}},
      {"ReduceLogSumExp", AddOp::getOperationName(), 1, 1, {}},
      {"ReduceProd", MulOp::getOperationName(), 1, 1, {}},
      {"Einsum", MatMulOp::getOperationName(), 12, 1, {}},
      {"Conv", MatMulOp::getOperationName(), 1, 1, {}},
      {"ConvTranspose", MatMulOp::getOperationName(), 1, 1, {}},
      {"InstanceNormalization", AddOp::getOperationName(), 6, 1, {}},
      {"GroupNormalization", AddOp::getOperationName(), 18, 1, {}},
      {"BatchNormalization", AddOp::getOperationName(), 9, -1, {}},
      {"GlobalMaxPool", MaxOp::getOperationName(), 1, 1, {}},
      {"Sign", WhereOp::getOperationName(), 9, 1, {}},
      {"Floor", WhereOp::getOperationName(), 6, 1, {}},
      {"Ceil", WhereOp::getOperationName(), 6, 1, {}},
      {"Round", WhereOp::getOperationName(), 11, 1, {}},
      {"Mod", WhereOp::getOperationName(), 10, 1, {}},
      {"ArgMax", MinOp::getOperationName(), 1, 1, {}},
      {"ArgMin", MinOp::getOperationName(), 1, 1, {}},
      {"OneHot", WhereOp::getOperationName(), 9, 1, {}},
      {"TopK", GatherElementsOp::getOperationName(), 10, 2, {}},
      {"MaxPool", MaxOp::getOperationName(), 8, -1, {}},
      {"AveragePool", DivOp::getOperationName(), 7, 1, {}},
      // Written as another op (Importer::rewriteNode).
      {"Flatten", ReshapeOp::getOperationName(), 13, 1, {}},
      {"CastLike", CastOp::getOperationName(), 15, 1, {}},
      {"Range", ConstantOp::getOperationName(), 11, 1, {}},
  };
  return table;
}

} // namespace

ArrayRef<Arity> arityOf(StringRef op) {
  static const llvm::StringMap<std::vector<Arity>> table = [] {
    llvm::StringMap<std::vector<Arity>> t;
    for (StringRef u : {"Sqrt", "Neg", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu",
                        "Reciprocal", "Abs", "Not", "Identity", "Cast", "Softmax",
                        "LogSoftmax", "Transpose", "ConstantOfShape", "Shape", "Gelu",
                        "Sin", "Cos", "IsNaN", "Flatten", "LeakyRelu", "ThresholdedRelu",
                        "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softsign",
                        "Softplus", "Mish",
                        "GlobalAveragePool", "GlobalMaxPool", "Sign", "Floor", "Ceil", "Round",
                        "ArgMax", "ArgMin"})
      t[u] = {{0, 1, 1, 1, 1}};
    for (StringRef b : {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater",
                        "And", "Or", "MatMul", "Gather", "Expand",
                        "LessOrEqual", "GreaterOrEqual", "GatherElements", "CastLike",
                        "PRelu", "Tile", "CumSum", "GatherND", "Mod"})
      t[b] = {{0, 2, 2, 1, 1}};
    t["Where"] = {{0, 3, 3, 1, 1}};
    t["ScatterND"] = t["ScatterElements"] = {{0, 3, 3, 1, 1}};
    t["Clip"] = {{0, 1, 1, 1, 1}, {11, 1, 3, 1, 1}};
    t["ReduceSumSquare"] = t["ReduceL1"] = t["ReduceL2"] = {{0, 1, 1, 1, 1}, {18, 1, 2, 1, 1}};
    t["ReduceMax"] = t["ReduceMin"] = t["ReduceLogSumExp"] = t["ReduceProd"] =
        {{0, 1, 1, 1, 1}, {18, 1, 2, 1, 1}};
    t["Einsum"] = {{0, 1, kMany, 1, 1}};
    t["Conv"] = t["ConvTranspose"] = {{0, 2, 3, 1, 1}};
    t["InstanceNormalization"] = t["GroupNormalization"] = t["OneHot"] = {{0, 3, 3, 1, 1}};
    t["BatchNormalization"] = {{0, 5, 5, 1, 1}, {14, 5, 5, 1, 3}};
    t["TopK"] = {{0, 2, 2, 2, 2}};
    t["MaxPool"] = {{0, 1, 1, 1, 2}};
    t["AveragePool"] = {{0, 1, 1, 1, 1}};
    t["Range"] = {{0, 3, 3, 1, 1}};
    t["Gemm"] = {{0, 3, 3, 1, 1}, {11, 2, 3, 1, 1}};
    t["Reshape"] = {{0, 1, 1, 1, 1}, {5, 2, 2, 1, 1}};
    t["Unsqueeze"] = {{0, 1, 1, 1, 1}, {13, 2, 2, 1, 1}};
    t["LayerNormalization"] = {{0, 2, 3, 1, 3}};
    t["ReduceMean"] = {{0, 1, 1, 1, 1}, {18, 1, 2, 1, 1}};
    t["ReduceSum"] = {{0, 1, 1, 1, 1}, {13, 1, 2, 1, 1}};
    t["Squeeze"] = {{0, 1, 1, 1, 1}, {13, 1, 2, 1, 1}};
    t["Slice"] = {{0, 1, 1, 1, 1}, {10, 3, 5, 1, 1}};
    t["Split"] = {{0, 1, 2, 1, kMany}, {2, 1, 1, 1, kMany}, {13, 1, 2, 1, kMany}};
    t["Concat"] = {{0, 1, kMany, 1, 1}};
    t["Max"] = t["Min"] = {{0, 1, kMany, 1, 1}};
    t["Constant"] = {{0, 0, 0, 1, 1}};
    t["Dropout"] = {{0, 1, 1, 1, 2}, {12, 1, 3, 1, 2}};
    t["SoftmaxCrossEntropyLoss"] = {{0, 2, 3, 1, 2}};
    t["Pad"] = {{0, 1, 1, 1, 1}, {11, 2, 3, 1, 1}, {18, 2, 4, 1, 1}};
    t["Trilu"] = {{0, 1, 2, 1, 1}};
    t["RMSNormalization"] = {{0, 2, 2, 1, 1}};
    t["RotaryEmbedding"] = {{0, 3, 4, 1, 1}};
    t["Attention"] = {{0, 3, 6, 1, 4}, {24, 3, 7, 1, 4}};
    return t;
  }();
  auto it = table.find(op);
  return it == table.end() ? ArrayRef<Arity>() : ArrayRef<Arity>(it->second);
}

/// Attributes a node must have (ONNX marks them required).
bool requiresAttribute(StringRef op, int64_t opset, StringRef &name) {
  if (op == "Cast")
    name = "to";
  else if (op == "Concat")
    name = "axis";
  else if (op == "Unsqueeze" && opset < 13) // an input from opset 13 on
    name = "axes";
  else
    return false;
  return true;
}

const OpSpec *lookupOp(StringRef onnxName) {
  for (const OpSpec &spec : opTable())
    if (spec.onnx == onnxName)
      return &spec;
  return nullptr;
}


} // namespace mlir::tcc::onnx_ops

std::vector<StringRef> mlir::tcc::supportedOnnxOps() {
  std::vector<StringRef> names;
  for (const onnx_ops::OpSpec &spec : onnx_ops::opTable())
    names.push_back(spec.onnx);
  return names;
}


std::vector<mlir::tcc::SupportedOp> mlir::tcc::describeSupportedOps(MLIRContext *context) {
  std::vector<SupportedOp> ops;
  for (const onnx_ops::OpSpec &spec : onnx_ops::opTable()) {
    SupportedOp op{spec.onnx, spec.minOpset, spec.tcc.str(), "none"};
    if (isCompositeOp(spec.onnx)) {
      op.writtenAs = "composite";
      op.gradient = "parts";
    } else if (std::optional<RegisteredOperationName> name =
                   RegisteredOperationName::lookup(spec.tcc, context)) {
      if (name->hasInterface<GradientOpInterface>())
        op.gradient = "rule";
      else if (name->hasTrait<OpTrait::tcc::ImportOnly>())
        op.gradient = "lowered";
    }
    ops.push_back(std::move(op));
  }
  return ops;
}
