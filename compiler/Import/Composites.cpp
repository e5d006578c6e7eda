//===- Composites.cpp - ONNX ops written as several tcc ops ---------------===//

#include "compiler/Import/Composites.h"
#include "compiler/Import/Composer.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/STLExtras.h"

#include <onnx/onnx_pb.h>

#include <cctype>
#include <map>
#include <optional>
#include <string>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// Each composite op and the attributes it knows.
struct Composite {
  const char *onnx;
  const char *attrs[8]; // unused entries null
  int outputs = 1;      // the most outputs a node may name
  bool knows(StringRef attr) const {
    return llvm::any_of(attrs, [&](const char *a) { return a && attr == a; });
  }
};
const Composite kComposites[] = {
    {"Clip", {"min", "max"}},
    {"LeakyRelu", {"alpha"}},
    {"PRelu", {}},
    {"ThresholdedRelu", {"alpha"}},
    {"Elu", {"alpha"}},
    {"Selu", {"alpha", "gamma"}},
    {"Celu", {"alpha"}},
    {"HardSigmoid", {"alpha", "beta"}},
    {"HardSwish", {}},
    {"Softsign", {}},
    {"Softplus", {}},
    {"Mish", {}},
    {"GlobalAveragePool", {}},
    {"GlobalMaxPool", {}},
    {"ReduceSumSquare", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceL1", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceL2", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"Tile", {}},
    {"CumSum", {"exclusive", "reverse"}},
    {"GatherND", {"batch_dims"}},
    {"ScatterND", {"reduction"}},
    {"ScatterElements", {"axis", "reduction"}},
    {"ReduceMax", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceMin", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceLogSumExp", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"ReduceProd", {"axes", "keepdims", "noop_with_empty_axes"}},
    {"Einsum", {"equation"}},
    {"Conv", {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
    {"ConvTranspose",
     {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
      "strides"}},
    {"InstanceNormalization", {"epsilon"}},
    {"GroupNormalization", {"epsilon", "num_groups", "stash_type"}},
    {"BatchNormalization", {"epsilon", "momentum", "training_mode"}, 3},
    {"Sign", {}},
    {"Floor", {}},
    {"Ceil", {}},
    {"Round", {}},
    {"Mod", {"fmod"}},
    {"ArgMax", {"axis", "keepdims", "select_last_index"}},
    {"ArgMin", {"axis", "keepdims", "select_last_index"}},
    {"OneHot", {"axis"}},
    {"TopK", {"axis", "largest", "sorted"}, 2},
    {"MaxPool",
     {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
     2},
    {"AveragePool",
     {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}},
};

const Composite *lookup(StringRef op) {
  for (const Composite &c : kComposites)
    if (op == c.onnx)
      return &c;
  return nullptr;
}

/// An Einsum operand or result: one letter per dimension.
using Letters = std::string;

/// Parses `equation` for operands of `ranks`: each operand's letters and the
/// output's ('...' expanded to upper-case letters, the implicit output the
/// letters used once, in order). Returns an error, or "".
std::string parseEinsum(StringRef equation, ArrayRef<int64_t> ranks, SmallVector<Letters> &ins,
                        Letters &out) {
  std::string eq;
  for (char ch : equation)
    if (ch != ' ')
      eq += ch;
  size_t arrow = eq.find("->");
  std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  SmallVector<StringRef> terms;
  StringRef(lhs).split(terms, ',');
  if (terms.size() != ranks.size())
    return "the equation has " + std::to_string(terms.size()) + " operand terms for " +
           std::to_string(ranks.size()) + " operands";
  int64_t ellipsisRank = 0;
  for (auto [t, rank] : llvm::zip(terms, ranks)) {
    int64_t named = static_cast<int64_t>(t.size());
    if (t.contains("..."))
      ellipsisRank = std::max(ellipsisRank, rank - (named - 3));
  }
  std::string ell;
  for (int64_t k = 0; k < ellipsisRank; ++k)
    ell += static_cast<char>('A' + k);
  for (auto [t, rank] : llvm::zip(terms, ranks)) {
    std::string term = t.str();
    if (size_t at = term.find("..."); at != std::string::npos) {
      int64_t here = rank - (static_cast<int64_t>(term.size()) - 3);
      if (here < 0)
        return "term '" + t.str() + "' names more dimensions than its operand has";
      term = term.substr(0, at) + ell.substr(ell.size() - here) + term.substr(at + 3);
    }
    if (static_cast<int64_t>(term.size()) != rank)
      return "term '" + t.str() + "' has " + std::to_string(term.size()) + " letters for an operand of rank " +
             std::to_string(rank);
    for (char ch : term)
      if (!std::isalpha(static_cast<unsigned char>(ch)))
        return "term '" + t.str() + "' holds '" + std::string(1, ch) + "'";
    for (size_t i = 0; i < term.size(); ++i)
      if (term.find(term[i], i + 1) != std::string::npos)
        return "term '" + t.str() + "' repeats '" + std::string(1, term[i]) +
               "' (a diagonal or trace), which is not supported";
    ins.push_back(term);
  }
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (size_t at = out.find("..."); at != std::string::npos)
      out = out.substr(0, at) + ell + out.substr(at + 3);
  } else { // implicit: the ellipsis, then the letters used once, sorted
    std::map<char, int> uses;
    for (const Letters &term : ins)
      for (char ch : term)
        ++uses[ch];
    out = ell;
    for (auto [ch, n] : uses)
      if (n == 1 && !std::isupper(static_cast<unsigned char>(ch)))
        out += ch;
  }
  for (char ch : out)
    if (llvm::none_of(ins, [&](const Letters &t) { return t.find(ch) != std::string::npos; }))
      return "the output names '" + std::string(1, ch) + "', which no operand has";
  return "";
}

} // namespace

bool mlir::tcc::isCompositeOp(StringRef onnxOp) { return lookup(onnxOp) != nullptr; }

static FailureOr<Value> buildOne(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                                 int64_t opset, ArrayRef<Value> operands);

FailureOr<SmallVector<Value>> mlir::tcc::buildComposite(OpBuilder &builder, Location loc,
                                                        const onnx::NodeProto &node,
                                                        int64_t opset,
                                                        ArrayRef<Value> operands) {
  StringRef opType = node.op_type();
  const Composite *spec = lookup(opType);
  assert(spec && "buildComposite on an op that is not a composite");
  for (const onnx::AttributeProto &a : node.attribute())
    if (!spec->knows(a.name()) ||
        (opType == "Clip" && opset >= 11) ||
        (a.name() == "axes" && opset >= 18))
      return emitError(loc) << "attribute \"" << a.name() << "\" of " << opType
                            << " is not supported at opset " << opset;
  if (node.output_size() < 1 || node.output_size() > spec->outputs || operands.empty() ||
      !operands[0])
    return emitError(loc) << opType << " needs its input and "
                          << (spec->outputs == 1 ? "one output" : "at most ")
                          << (spec->outputs == 1 ? "" : std::to_string(spec->outputs) + " outputs");
  if (isDiscreteOp(opType))
    return buildDiscrete(builder, loc, node, operands);
  if (opType == "BatchNormalization")
    return buildBatchNorm(builder, loc, node, operands);
  FailureOr<Value> one = buildOne(builder, loc, node, opset, operands);
  if (failed(one))
    return failure();
  return SmallVector<Value>{*one};
}

/// The composites of one result.
static FailureOr<Value> buildOne(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                                 int64_t opset, ArrayRef<Value> operands) {
  StringRef opType = node.op_type();
  if (opType == "GroupNormalization")
    return buildGroupNorm(builder, loc, node, opset, operands);
  if (opType == "MaxPool" || opType == "AveragePool")
    return buildPool(builder, loc, node, operands);
  if (opType == "ConvTranspose")
    return buildConvTranspose(builder, loc, node, operands);
  if (opType == "Conv")
    return buildConv(builder, loc, node, operands);
  if (opType == "InstanceNormalization")
    return buildInstanceNorm(builder, loc, node, operands);
  auto attrF = [&](StringRef name, double dflt) { return attrFloat(node, name, dflt); };
  auto attrI = [&](StringRef name, int64_t dflt) { return attrInt(node, name, dflt); };

  Value x = operands[0];
  auto type = cast<RankedTensorType>(x.getType());
  Type elt = type.getElementType();
  Value in1 = operands.size() > 1 ? operands[1] : Value();
  Value in2 = operands.size() > 2 ? operands[2] : Value();
  bool isActivation = opType != "Clip" && opType != "Tile" && !opType.starts_with("Reduce") &&
                      !opType.starts_with("Global") && opType != "CumSum" &&
                      opType != "GatherND" && opType != "ScatterND" &&
                      opType != "ScatterElements" && opType != "Einsum";
  if (isActivation && !isa<FloatType>(elt))
    return emitError(loc) << opType << " needs a floating-point input; this one is " << type;

  // What is checked before anything is built.
  if (opType == "Clip")
    for (Value bound : {in1, in2})
      if (bound && cast<RankedTensorType>(bound.getType()).getNumElements() != 1)
        return emitError(loc) << "Clip's bounds must be scalars; this one is " << bound.getType();
  if (opType == "PRelu" && !in1)
    return emitError(loc) << "PRelu needs its slope input";
  if (opType == "Celu" && attrF("alpha", 1.0) == 0)
    return emitError(loc) << "Celu's alpha must not be 0";
  if (opType.starts_with("Global") && type.getRank() < 3)
    return emitError(loc) << opType << " needs an input of rank 3 or more (N, C, D1...); "
                                       "this one is "
                          << type;
  std::optional<int64_t> cumAxis;
  if (opType == "CumSum") {
    std::optional<SmallVector<int64_t>> axis = constInts(in1);
    if (!axis || axis->size() != 1)
      return emitError(loc) << "CumSum's axis must be a compile-time scalar";
    cumAxis = normalizeAxis((*axis)[0], type.getRank());
    if (!cumAxis)
      return emitError(loc) << "CumSum's axis " << (*axis)[0] << " is out of range for " << type;
    int64_t n = type.getDimSize(*cumAxis), rest = 1;
    for (int64_t d = *cumAxis + 1; d < type.getRank(); ++d)
      rest *= type.getDimSize(d);
    if (n > 8192 || n * n * rest > (int64_t(1) << 26))
      return emitError(loc) << "CumSum over an axis of " << n << " elements of " << type
                            << " is not supported: tcc writes it as a masked sum of n x n "
                               "products (at most 8192 along the axis and 2^26 products a row)";
  }
  // GatherND and ScatterND: the first k dimensions of the data, indexed by
  // the indices' last axis.
  int64_t ndK = 0;
  if (opType == "GatherND" || opType == "ScatterND") {
    if (!in1 || (opType == "ScatterND" && !in2))
      return emitError(loc) << opType << " needs its data, indices"
                            << (opType == "ScatterND" ? " and updates" : "");
    if (attrI("batch_dims", 0) != 0)
      return emitError(loc) << "GatherND with batch_dims " << attrI("batch_dims", 0)
                            << " is not supported (only 0)";
    if (const onnx::AttributeProto *r = findAttr(node, "reduction"); r && r->s() != "none")
      return emitError(loc) << "ScatterND with reduction \"" << r->s()
                            << "\" is not supported (only \"none\")";
    auto indicesType = cast<RankedTensorType>(in1.getType());
    ndK = indicesType.getRank() ? indicesType.getDimSize(indicesType.getRank() - 1) : 0;
    if (!indicesType.getElementType().isInteger(64) || ndK < 1 || ndK > type.getRank())
      return emitError(loc) << opType << "'s indices " << indicesType
                            << " must be int64 with a last dimension of 1 to the data's rank "
                            << type.getRank();
    if (opType == "ScatterND" && !constInts(in1))
      return emitError(loc) << "ScatterND's indices must be a compile-time constant (tcc "
                               "compiles static shapes; a slice assignment's are)";
  }
  if (opType == "ScatterElements") {
    if (!in1 || !in2)
      return emitError(loc) << "ScatterElements needs its data, indices and updates";
    if (const onnx::AttributeProto *r = findAttr(node, "reduction"); r && r->s() != "none")
      return emitError(loc) << "ScatterElements with reduction \"" << r->s()
                            << "\" is not supported (only \"none\")";
    if (!constInts(in1))
      return emitError(loc) << "ScatterElements' indices must be a compile-time constant (tcc "
                               "compiles static shapes; a slice assignment's are)";
    auto it = cast<RankedTensorType>(in1.getType()), ut = cast<RankedTensorType>(in2.getType());
    if (it.getShape() != ut.getShape() || it.getRank() != type.getRank() ||
        !normalizeAxis(attrI("axis", 0), type.getRank()))
      return emitError(loc) << "ScatterElements' indices " << it << " and updates " << ut
                            << " must have one shape, of the data's rank " << type.getRank()
                            << ", and its axis must be in range";
  }
  SmallVector<Letters> einsumIn;
  Letters einsumOut;
  if (opType == "Einsum") {
    const onnx::AttributeProto *eq = findAttr(node, "equation");
    SmallVector<int64_t> ranks;
    for (Value v : operands) {
      if (!v)
        return emitError(loc) << "Einsum has an omitted operand";
      ranks.push_back(cast<RankedTensorType>(v.getType()).getRank());
      if (cast<RankedTensorType>(v.getType()).getElementType() != elt)
        return emitError(loc) << "Einsum's operands must have one element type";
    }
    if (!eq)
      return emitError(loc) << "Einsum needs its \"equation\" attribute";
    if (std::string err = parseEinsum(eq->s(), ranks, einsumIn, einsumOut); !err.empty())
      return emitError(loc) << "Einsum \"" << eq->s() << "\": " << err;
    // Each letter's size must agree (no broadcasting of size-1 dimensions).
    std::map<char, int64_t> sizes;
    for (auto [term, v] : llvm::zip(einsumIn, operands))
      for (size_t d = 0; d < term.size(); ++d) {
        int64_t n = cast<RankedTensorType>(v.getType()).getDimSize(d);
        auto [it, fresh] = sizes.emplace(term[d], n);
        if (!fresh && it->second != n)
          return emitError(loc) << "Einsum \"" << eq->s() << "\": '" << term[d] << "' is " << it->second
                                << " in one operand and " << n << " in another";
      }
  }
  std::optional<SmallVector<int64_t>> repeats;
  if (opType == "Tile") {
    repeats = constInts(in1);
    if (!repeats)
      return emitError(loc) << "Tile's repeats must be a compile-time constant (tcc compiles static "
                               "shapes)";
    if (static_cast<int64_t>(repeats->size()) != type.getRank() ||
        llvm::any_of(*repeats, [](int64_t r) { return r < 1; }))
      return emitError(loc) << "Tile's repeats must hold one count of at least 1 per dimension of "
                            << type;
  }

  // Statements, not nested calls: the ops come out in reading order.
  Composer c(builder, loc);
  Value zeroValue, oneValue;
  auto zero = [&]() { return zeroValue ? zeroValue : (zeroValue = c.scalar(0.0, elt)); };
  auto one = [&]() { return oneValue ? oneValue : (oneValue = c.scalar(1.0, elt)); };
  // x > 0 ? x : f(x'), x' = min(x, 0) written as a select on that same
  // condition, so that x = 0 takes f's side: the gradient there is f's
  // (PyTorch's for Elu, Selu and Celu).
  auto negativeBranch = [&](auto f) {
    Value positive = c.greater(x, zero());
    Value negativePart = c.where(positive, zero(), x);
    Value fx = f(negativePart);
    return c.where(positive, x, fx);
  };
  auto expMinus1 = [&](Value v, double alpha) { // alpha * (exp(v) - 1)
    Value e = c.make<ExpOp>({v});
    Value em1 = c.sub(e, one());
    return c.mul(c.scalar(alpha, elt), em1);
  };
  // alpha * x + beta clamped to [0, 1]; the corners take the constant.
  auto hardSigmoid = [&](double alpha, double beta) {
    Value ax = c.mul(x, c.scalar(alpha, elt));
    Value y = c.add(ax, c.scalar(beta, elt));
    Value belowOne = c.less(y, one());
    Value upper = c.where(belowOne, y, one());
    Value positive = c.greater(y, zero());
    return c.where(positive, upper, zero());
  };
  // Row-major strides of the data's first k dimensions (GatherND, ScatterND).
  auto leadingStrides = [&](int64_t k) {
    SmallVector<int64_t> strides(k, 1);
    for (int64_t t = k - 2; t >= 0; --t)
      strides[t] = strides[t + 1] * type.getDimSize(t + 1);
    return strides;
  };
  // The scatters with constant indices: the data seen as `map.size()` rows
  // of shape `rowShape`; row p takes update row map[p] where taken[p] (the
  // last update naming it), else keeps its own: where(taken, gather(updates,
  // map), data), which differentiates to both.
  auto scatterRows = [&](ArrayRef<int64_t> map, ArrayRef<bool> taken, ArrayRef<int64_t> rowShape,
                         int64_t updateRows) {
    int64_t rows = static_cast<int64_t>(map.size());
    SmallVector<int64_t> dataShape = {rows}, updShape = {updateRows}, maskShape = {rows};
    dataShape.append(rowShape.begin(), rowShape.end());
    updShape.append(rowShape.begin(), rowShape.end());
    maskShape.append(rowShape.size(), 1);
    SmallVector<Attribute> bits;
    for (bool t : taken)
      bits.push_back(builder.getBoolAttr(t));
    Value mapC = c.constant(
        DenseElementsAttr::get(RankedTensorType::get({rows}, builder.getI64Type()), map));
    Value maskC = c.constant(
        DenseElementsAttr::get(RankedTensorType::get(maskShape, builder.getI1Type()), bits));
    Value upd = c.make<ReshapeOp>({in2}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(updShape))});
    Value picked = c.make<GatherOp>({upd, mapC}, {builder.getNamedAttr("axis", builder.getI64IntegerAttr(0))});
    Value data = c.make<ReshapeOp>({x}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(dataShape))});
    Value merged = c.where(maskC, picked, data);
    return c.make<ReshapeOp>(
        {merged}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(type.getShape()))});
  };
  // The reductions' axes: an attribute before opset 18, then a constant input.
  auto reduceAttrs = [&]() -> std::optional<SmallVector<NamedAttribute>> {
    SmallVector<NamedAttribute> attrs;
    std::optional<SmallVector<int64_t>> axes;
    if (opset >= 18) {
      if (in1) {
        axes = constInts(in1);
        if (!axes) {
          emitError(loc) << opType << "'s axes must be a compile-time constant";
          return std::nullopt;
        }
      }
    } else if (const onnx::AttributeProto *a = findAttr(node, "axes")) {
      axes = SmallVector<int64_t>(a->ints().begin(), a->ints().end());
    }
    if (axes)
      attrs.push_back(builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(*axes)));
    attrs.push_back(builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(attrI("keepdims", 1))));
    attrs.push_back(builder.getNamedAttr("noop_with_empty_axes",
                                         builder.getI64IntegerAttr(attrI("noop_with_empty_axes", 0))));
    return attrs;
  };

  Value result;
  if (opType == "Clip") {
    // min(max(x, lo), hi), as ONNX defines it (lo > hi gives hi); x on a
    // bound takes the bound (gradient 0 there, as PyTorch's clamp), and NaN
    // stays NaN.
    Value lo = in1, hi = in2;
    if (opset < 11) {
      if (findAttr(node, "min"))
        lo = c.scalar(attrF("min", 0), elt);
      if (findAttr(node, "max"))
        hi = c.scalar(attrF("max", 0), elt);
    }
    if (!lo && !hi)
      return c.finish(x);
    result = x;
    if (lo) {
      Value below = c.make<LessOrEqualOp>({result, lo});
      result = c.where(below, lo, result);
    }
    if (hi) {
      Value above = c.make<GreaterOrEqualOp>({result, hi});
      result = c.where(above, hi, result);
    }
  } else if (opType == "LeakyRelu" || opType == "PRelu") {
    Value slope = opType == "PRelu" ? in1 : c.scalar(attrF("alpha", 0.01), elt);
    Value positive = c.greater(x, zero());
    Value scaled = c.mul(x, slope);
    result = c.where(positive, x, scaled);
    if (result && result.getType() != x.getType()) {
      (void)c.finish(Value());
      return emitError(loc) << "PRelu's slope " << in1.getType()
                            << " does not broadcast to its input " << x.getType()
                            << " (unidirectionally)";
    }
  } else if (opType == "ThresholdedRelu") {
    Value above = c.greater(x, c.scalar(attrF("alpha", 1.0), elt));
    result = c.where(above, x, zero());
  } else if (opType == "Elu") {
    double alpha = attrF("alpha", 1.0);
    result = negativeBranch([&](Value v) { return expMinus1(v, alpha); });
  } else if (opType == "Selu") {
    double alpha = attrF("alpha", 1.67326319217681884765625);
    Value elu = negativeBranch([&](Value v) { return expMinus1(v, alpha); });
    result = c.mul(c.scalar(attrF("gamma", 1.05070102214813232421875), elt), elu);
  } else if (opType == "Celu") {
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): one of the two is 0.
    double alpha = attrF("alpha", 1.0);
    result = negativeBranch([&](Value v) {
      Value scaled = c.div(v, c.scalar(alpha, elt));
      return expMinus1(scaled, alpha);
    });
  } else if (opType == "HardSigmoid") {
    result = hardSigmoid(attrF("alpha", 0.2), attrF("beta", 0.5));
  } else if (opType == "HardSwish") {
    Value gate = hardSigmoid(1.0 / 6.0, 0.5);
    result = c.mul(x, gate);
  } else if (opType == "Softplus" || opType == "Mish") {
    // log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)): exp never exceeds
    // 1 (no fp16 overflow). Both selects are on x > 0, so x = 0 takes
    // max's constant and -|x|'s x: the gradient there is 0.5, PyTorch's.
    // Mish is x * tanh(softplus(x)).
    Value positive = c.greater(x, zero());
    Value relu = c.where(positive, x, zero());
    Value negX = c.make<NegOp>({x});
    Value negAbs = c.where(positive, negX, x);
    Value e = c.make<ExpOp>({negAbs});
    Value onePlus = c.add(one(), e);
    Value log = c.make<LogOp>({onePlus});
    result = c.add(relu, log);
    if (opType == "Mish") {
      Value t = c.make<TanhOp>({result});
      result = c.mul(x, t);
    }
  } else if (opType == "Softsign") {
    Value magnitude = c.make<AbsOp>({x});
    Value denominator = c.add(one(), magnitude);
    result = c.div(x, denominator);
  } else if (opType.starts_with("Global")) {
    SmallVector<int64_t> axes;
    for (int64_t d = 2; d < type.getRank(); ++d)
      axes.push_back(d);
    if (opType == "GlobalMaxPool")
      result = c.extremum(x, axes, /*isMin=*/false);
    else
      result = c.make<ReduceMeanOp>({x}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
                                        builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
  } else if (opType == "ReduceMax" || opType == "ReduceMin" || opType == "ReduceLogSumExp" ||
             opType == "ReduceProd") {
    // Max (min) over each axis as Composer::extremum's tree. LogSumExp is
    // m + log(sum(exp(x - m))) with m that maximum, the stable form.
    std::optional<SmallVector<NamedAttribute>> attrs = reduceAttrs();
    if (!attrs) {
      (void)c.finish(Value());
      return failure();
    }
    SmallVector<int64_t> axes;
    int64_t keepdims = attrI("keepdims", 1), noop = attrI("noop_with_empty_axes", 0);
    for (const NamedAttribute &a : *attrs)
      if (a.getName() == "axes")
        for (int64_t v : cast<DenseI64ArrayAttr>(a.getValue()).asArrayRef())
          axes.push_back(v);
    if (axes.empty() && noop)
      return c.finish(x);
    if (axes.empty())
      for (int64_t d = 0; d < type.getRank(); ++d)
        axes.push_back(d);
    for (int64_t &a : axes) {
      std::optional<int64_t> n = normalizeAxis(a, type.getRank());
      if (!n) {
        (void)c.finish(Value());
        return emitError(loc) << opType << "'s axis " << a << " is out of range for " << type;
      }
      a = *n;
    }
    bool isMin = opType == "ReduceMin";
    if (llvm::any_of(axes, [&](int64_t a) { return type.getDimSize(a) == 0; })) {
      // An empty set: the identity of the reduction, -inf for max and
      // log-sum-exp, +inf for min (the type's extremes for integers, false
      // and true for booleans), 1 for a product.
      SmallVector<int64_t> shape;
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (!llvm::is_contained(axes, d) || keepdims)
          shape.push_back(llvm::is_contained(axes, d) ? 1 : type.getDimSize(d));
      auto outType = RankedTensorType::get(shape, elt);
      Attribute fill;
      if (opType == "ReduceProd")
        fill = isa<FloatType>(elt) ? Attribute(builder.getFloatAttr(elt, 1.0))
                                   : Attribute(builder.getIntegerAttr(elt, 1));
      else if (auto ft = dyn_cast<FloatType>(elt))
        fill = FloatAttr::get(ft, APFloat::getInf(ft.getFloatSemantics(), /*Negative=*/!isMin));
      else if (elt.isInteger(1))
        fill = builder.getBoolAttr(isMin);
      else if (auto it = dyn_cast<IntegerType>(elt))
        fill = IntegerAttr::get(it, isMin ? APInt::getSignedMaxValue(it.getWidth())
                                          : APInt::getSignedMinValue(it.getWidth()));
      return c.finish(c.constant(DenseElementsAttr::get(outType, fill)));
    }
    // A product as the same tree of elementwise products: exact for
    // integers (shape arithmetic folds), and each factor's gradient the
    // product of the others.
    Value m = opType == "ReduceProd" ? c.tree(x, axes, [&](Value a, Value b) { return c.mul(a, b); })
                                     : c.extremum(x, axes, isMin);
    if (opType == "ReduceLogSumExp") {
      Value shifted = c.sub(x, m);
      Value e = c.make<ExpOp>({shifted});
      Value sum = c.make<ReduceSumOp>(
          {e}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
                builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
      Value logSum = c.make<LogOp>({sum});
      m = c.add(m, logSum);
    }
    result = m;
    if (!keepdims && result) {
      SmallVector<int64_t> shape;
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (!llvm::is_contained(axes, d))
          shape.push_back(type.getDimSize(d));
      result = c.make<ReshapeOp>({result}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(shape))});
    }
  } else if (opType.starts_with("Reduce")) {
    std::optional<SmallVector<NamedAttribute>> attrs = reduceAttrs();
    if (!attrs) {
      (void)c.finish(Value());
      return failure();
    }
    Value term = opType == "ReduceL1" ? c.make<AbsOp>({x}) : c.mul(x, x);
    result = c.make<ReduceSumOp>({term}, *attrs);
    if (opType == "ReduceL2")
      result = c.make<SqrtOp>({result});
  } else if (opType == "CumSum") {
    // out[.., i, ..] = sum over j of x[.., j, ..] * M[j, i], M a constant
    // 0/1 mask (j <= i; j < i when exclusive; reversed when reverse): exact
    // for integers (position ids from a mask), and differentiable as a
    // product and a sum. x gains the axis i after its axis j; M is [n, n]
    // followed by ones for x's later axes, so it broadcasts.
    int64_t axis = *cumAxis, n = type.getDimSize(axis);
    bool exclusive = attrI("exclusive", 0) != 0, reverse = attrI("reverse", 0) != 0;
    SmallVector<int64_t> maskShape = {n, n};
    for (int64_t d = axis + 1; d < type.getRank(); ++d)
      maskShape.push_back(1);
    auto maskType = RankedTensorType::get(maskShape, elt);
    SmallVector<Attribute> bits;
    bits.reserve(n * n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i) {
        bool in = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
        bits.push_back(isa<FloatType>(elt) ? Attribute(FloatAttr::get(elt, in ? 1.0 : 0.0))
                                           : Attribute(IntegerAttr::get(elt, in ? 1 : 0)));
      }
    Value mask = c.constant(DenseElementsAttr::get(maskType, bits));
    Value xj = c.make<UnsqueezeOp>(
        {x}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({axis + 1}))});
    Value products = c.mul(xj, mask);
    result = c.make<ReduceSumOp>(
        {products}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({axis})),
                     builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(0))});
  } else if (opType == "GatherND") {
    // A gather on the data's first k dimensions flattened into one, at the
    // linear index sum_t idx[..., t] * stride_t (each idx normalised from
    // negative first): the gradient is the gather's.
    auto indicesType = cast<RankedTensorType>(in1.getType());
    SmallVector<int64_t> flat = {1}, strides = leadingStrides(ndK), dims;
    for (int64_t t = 0; t < ndK; ++t) {
      flat[0] *= type.getDimSize(t);
      dims.push_back(type.getDimSize(t));
    }
    for (int64_t d = ndK; d < type.getRank(); ++d)
      flat.push_back(type.getDimSize(d));
    Type i64 = indicesType.getElementType();
    auto vecType = RankedTensorType::get({ndK}, i64);
    Value dimsC = c.constant(DenseElementsAttr::get(vecType, ArrayRef<int64_t>(dims)));
    Value stridesC = c.constant(DenseElementsAttr::get(vecType, ArrayRef<int64_t>(strides)));
    Value negative = c.less(in1, c.scalar(0, i64));
    Value wrapped = c.add(in1, dimsC);
    Value idx = c.where(negative, wrapped, in1);
    Value scaled = c.mul(idx, stridesC);
    Value linear = c.make<ReduceSumOp>(
        {scaled}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({-1})),
                   builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(0))});
    Value data = c.make<ReshapeOp>({x}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(flat))});
    result = c.make<GatherOp>({data, linear}, {builder.getNamedAttr("axis", builder.getI64IntegerAttr(0))});
  } else if (opType == "ScatterND") {
    // Constant indices: each update row's linear position among the data's
    // first k dimensions.
    SmallVector<int64_t> idx = *constInts(in1), strides = leadingStrides(ndK), rowShape;
    auto updatesType = cast<RankedTensorType>(in2.getType());
    int64_t positions = 1, rows = static_cast<int64_t>(idx.size()) / ndK, rowElems = 1;
    for (int64_t t = 0; t < ndK; ++t)
      positions *= type.getDimSize(t);
    for (int64_t d = ndK; d < type.getRank(); ++d) {
      rowShape.push_back(type.getDimSize(d));
      rowElems *= type.getDimSize(d);
    }
    if (updatesType.getNumElements() != rows * rowElems)
      return emitError(loc) << "ScatterND's updates " << updatesType << " do not match "
                            << rows << " rows of the data " << type;
    SmallVector<int64_t> map(positions, 0);
    SmallVector<bool> taken(positions, false);
    for (int64_t u = 0; u < rows; ++u) {
      int64_t linear = 0;
      for (int64_t t = 0; t < ndK; ++t) {
        int64_t v = idx[u * ndK + t], n = type.getDimSize(t);
        if (v < 0)
          v += n;
        if (v < 0 || v >= n)
          return emitError(loc) << "ScatterND's index " << idx[u * ndK + t]
                                << " is out of range for dimension " << t << " of " << type;
        linear += v * strides[t];
      }
      map[linear] = u;
      taken[linear] = true;
    }
    result = scatterRows(map, taken, rowShape, rows);
  } else if (opType == "ScatterElements") {
    // Constant indices: the flattened data element each update names (its
    // own position, with the index on `axis`); each element a row of one.
    SmallVector<int64_t> idx = *constInts(in1);
    auto ut = cast<RankedTensorType>(in2.getType());
    int64_t axis = *normalizeAxis(attrI("axis", 0), type.getRank());
    int64_t total = type.getNumElements(), rank = type.getRank();
    SmallVector<int64_t> map(total, 0), dataStrides = leadingStrides(rank);
    SmallVector<bool> taken(total, false);
    SmallVector<int64_t> q(rank, 0); // the multi-index into the indices
    for (int64_t u = 0; u < static_cast<int64_t>(idx.size()); ++u) {
      int64_t v = idx[u], n = type.getDimSize(axis);
      if (v < 0)
        v += n;
      if (v < 0 || v >= n)
        return emitError(loc) << "ScatterElements' index " << idx[u] << " is out of range for axis "
                              << axis << " of " << type;
      int64_t target = 0;
      for (int64_t d = 0; d < rank; ++d)
        target += (d == axis ? v : q[d]) * dataStrides[d];
      map[target] = u;
      taken[target] = true;
      for (int64_t d = rank - 1; d >= 0; --d) { // next q, row-major
        if (++q[d] < ut.getDimSize(d))
          break;
        q[d] = 0;
      }
    }
    result = scatterRows(map, taken, {}, ut.getNumElements());
  } else if (opType == "Einsum") {
    // Operands folded pairwise from the left: each pair as one batched
    // MatMul ([batch, free_a, contract] x [batch, contract, free_b]), with
    // the letters only one side has and nothing later needs summed first;
    // a single operand is summed and transposed.
    auto sizeOf = [&](Value v, const Letters &t, char ch) {
      return cast<RankedTensorType>(v.getType()).getDimSize(t.find(ch));
    };
    auto transpose = [&](Value v, const Letters &from, const Letters &to) {
      if (from == to)
        return v;
      SmallVector<int64_t> perm;
      for (char ch : to)
        perm.push_back(static_cast<int64_t>(from.find(ch)));
      return c.make<TransposeOp>({v}, {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr(perm))});
    };
    auto reshape = [&](Value v, ArrayRef<int64_t> shape) {
      return c.make<ReshapeOp>({v}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(shape))});
    };
    // Sums the letters of (v, t) that `keep` lacks.
    auto sumAway = [&](Value v, Letters &t, const Letters &keep) {
      SmallVector<int64_t> axes;
      Letters kept;
      for (size_t d = 0; d < t.size(); ++d)
        (keep.find(t[d]) == std::string::npos ? axes.push_back(static_cast<int64_t>(d)) : (void)(kept += t[d]));
      if (axes.empty())
        return v;
      t = kept;
      return c.make<ReduceSumOp>({v}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
                                       builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(0))});
    };
    Value acc = operands[0];
    Letters accT = einsumIn[0];
    for (size_t k = 1; k < einsumIn.size(); ++k) {
      Value b = operands[k];
      Letters bT = einsumIn[k];
      Letters later = einsumOut; // what the rest of the fold needs
      for (size_t j = k + 1; j < einsumIn.size(); ++j)
        later += einsumIn[j];
      acc = sumAway(acc, accT, later + bT);
      b = sumAway(b, bT, later + accT);
      Letters batch, freeA, freeB, contract;
      for (char ch : accT)
        (bT.find(ch) == std::string::npos ? freeA : later.find(ch) != std::string::npos ? batch : contract) += ch;
      for (char ch : bT)
        if (accT.find(ch) == std::string::npos)
          freeB += ch;
      int64_t nb = 1, na = 1, nbB = 1, nc = 1;
      SmallVector<int64_t> outShape;
      for (char ch : batch) {
        nb *= sizeOf(acc, accT, ch);
        outShape.push_back(sizeOf(acc, accT, ch));
      }
      for (char ch : freeA) {
        na *= sizeOf(acc, accT, ch);
        outShape.push_back(sizeOf(acc, accT, ch));
      }
      for (char ch : freeB) {
        nbB *= sizeOf(b, bT, ch);
        outShape.push_back(sizeOf(b, bT, ch));
      }
      for (char ch : contract)
        nc *= sizeOf(acc, accT, ch);
      Value a3 = reshape(transpose(acc, accT, batch + freeA + contract), {nb, na, nc});
      Value b3 = reshape(transpose(b, bT, batch + contract + freeB), {nb, nc, nbB});
      Value product = c.make<MatMulOp>({a3, b3});
      acc = reshape(product, outShape);
      accT = batch + freeA + freeB;
    }
    acc = sumAway(acc, accT, einsumOut);
    result = transpose(acc, accT, einsumOut);
  } else { // Tile: x reshaped to [1, d0, 1, d1, ...], expanded, merged.
    if (llvm::all_of(*repeats, [](int64_t r) { return r == 1; }))
      return c.finish(x);
    SmallVector<int64_t> split, expanded, merged;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      split.append({1, type.getDimSize(d)});
      expanded.append({(*repeats)[d], type.getDimSize(d)});
      merged.push_back((*repeats)[d] * type.getDimSize(d));
    }
    Value v = c.make<ReshapeOp>({x}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(split))});
    v = c.make<ExpandOp>({v}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(expanded))});
    result = c.make<ReshapeOp>({v}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(merged))});
  }
  return c.finish(result);
}
