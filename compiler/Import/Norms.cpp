//===- Norms.cpp - ONNX normalizations written as tcc ops -----------------===//
//
// InstanceNormalization (a group norm's export: torch's GroupNorm with one
// group per channel, or its reshaped form) as the ops it is defined by:
// per sample and channel, the mean and the biased variance over the
// spatial dimensions, then (x - mean) / sqrt(var + epsilon) * scale + B with
// scale and B per channel. GroupNormalization the same per sample and group
// of channels (scale and B per group at opsets 18-20, per channel from 21).
// BatchNormalization with the given statistics, or in training mode with
// the batch's (per channel, over the batch and spatial dimensions), its
// running mean and variance outputs computed as ONNX defines them (biased
// variance; tcc-run does not carry them from step to step: a warning says
// so). Their gradients are those of the ops.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Composer.h"
#include "compiler/Import/Composites.h"

#include <onnx/onnx_pb.h>

using namespace mlir;
using namespace mlir::tcc;

FailureOr<Value> mlir::tcc::buildInstanceNorm(OpBuilder &builder, Location loc,
                                              const onnx::NodeProto &node,
                                              ArrayRef<Value> operands) {
  if (operands.size() != 3 || !operands[0] || !operands[1] || !operands[2])
    return emitError(loc) << "InstanceNormalization needs its input, scale and B";
  Value x = operands[0], scale = operands[1], bias = operands[2];
  auto xt = cast<RankedTensorType>(x.getType());
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt) || xt.getRank() < 3)
    return emitError(loc) << "InstanceNormalization needs a floating-point input of rank 3 or "
                             "more (N, C, D1...); this one is "
                          << xt;
  const int64_t C = xt.getDimSize(1);
  for (Value v : {scale, bias}) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() != 1 || t.getDimSize(0) != C || t.getElementType() != elt)
      return emitError(loc) << "InstanceNormalization's scale and B must be [" << C
                            << "] of the input's type; one is " << t;
  }
  const onnx::AttributeProto *epsilon = findAttr(node, "epsilon");
  const double eps = epsilon ? epsilon->f() : 1e-5;
  SmallVector<int64_t> axes, perChannel(xt.getRank() - 1, 1);
  for (int64_t d = 2; d < xt.getRank(); ++d)
    axes.push_back(d);
  perChannel[0] = C;
  Composer c(builder, loc);
  auto mean = [&](Value v) {
    return c.make<ReduceMeanOp>({v}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
                                      builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
  };
  auto perC = [&](Value v) {
    return c.make<ReshapeOp>({v}, {builder.getNamedAttr("shape", builder.getDenseI64ArrayAttr(perChannel))});
  };
  Value d = c.sub(x, mean(x));
  Value var = mean(c.mul(d, d));
  Value inv = c.make<ReciprocalOp>({c.make<SqrtOp>({c.add(var, c.scalar(eps, elt))})});
  Value y = c.add(c.mul(c.mul(d, inv), perC(scale)), perC(bias));
  return c.finish(y);
}

namespace {

/// Checks that each of `vs` is a [n] tensor of `elt`.
LogicalResult perChannelOperands(Location loc, StringRef op, ArrayRef<Value> vs, int64_t n,
                                 Type elt, StringRef what) {
  for (Value v : vs) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() != 1 || t.getDimSize(0) != n || t.getElementType() != elt)
      return emitError(loc) << op << "'s " << what << " must be [" << n
                            << "] of the input's type; one is " << t;
  }
  return success();
}

/// (x - mean) * rsqrt(var + epsilon).
Value normalized(Composer &c, Value d, Value var, double eps, Type elt) {
  Value inv = c.make<ReciprocalOp>({c.make<SqrtOp>({c.add(var, c.scalar(eps, elt))})});
  return c.mul(d, inv);
}

} // namespace

FailureOr<Value> mlir::tcc::buildGroupNorm(OpBuilder &builder, Location loc,
                                           const onnx::NodeProto &node, int64_t opset,
                                           ArrayRef<Value> operands) {
  if (operands.size() != 3 || !operands[0] || !operands[1] || !operands[2])
    return emitError(loc) << "GroupNormalization needs its input, scale and bias";
  Value x = operands[0], scale = operands[1], bias = operands[2];
  auto xt = cast<RankedTensorType>(x.getType());
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt) || xt.getRank() < 3)
    return emitError(loc) << "GroupNormalization needs a floating-point input of rank 3 or "
                             "more (N, C, D1...); this one is "
                          << xt;
  const onnx::AttributeProto *groups = findAttr(node, "num_groups");
  const int64_t C = xt.getDimSize(1), G = groups ? groups->i() : 0;
  if (G < 1 || C % G)
    return emitError(loc) << "GroupNormalization's num_groups (" << G
                          << ") must be given and divide the " << C << " channels";
  // Opsets 18-20 scale per group, 21 on per channel.
  const bool perGroup = opset < 21;
  if (failed(perChannelOperands(loc, "GroupNormalization", {scale, bias}, perGroup ? G : C, elt,
                                perGroup ? "scale and bias (per group before opset 21)"
                                         : "scale and bias (per channel from opset 21)")))
    return failure();
  const double eps = attrFloat(node, "epsilon", 1e-5);
  const int64_t N = xt.getDimSize(0), rest = xt.getNumElements() / (N * G);
  Composer c(builder, loc);
  auto mean = [&](Value v) {
    return c.make<ReduceMeanOp>({v}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({2})),
                                      builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
  };
  Value xg = c.reshape(x, {N, G, rest});
  Value d = c.sub(xg, mean(xg));
  Value n = normalized(c, d, mean(c.mul(d, d)), eps, elt);
  Value y;
  if (perGroup) {
    y = c.add(c.mul(n, c.reshape(scale, {G, 1})), c.reshape(bias, {G, 1}));
    y = c.reshape(y, xt.getShape());
  } else {
    SmallVector<int64_t> perC(xt.getRank() - 1, 1);
    perC[0] = C;
    y = c.reshape(n, xt.getShape());
    y = c.add(c.mul(y, c.reshape(scale, perC)), c.reshape(bias, perC));
  }
  return c.finish(y);
}

FailureOr<SmallVector<Value>> mlir::tcc::buildBatchNorm(OpBuilder &builder, Location loc,
                                                        const onnx::NodeProto &node,
                                                        ArrayRef<Value> operands) {
  if (operands.size() != 5 || llvm::any_of(operands, [](Value v) { return !v; }))
    return emitError(loc) << "BatchNormalization needs its input, scale, B, input_mean and "
                             "input_var";
  Value x = operands[0];
  auto xt = cast<RankedTensorType>(x.getType());
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt) || xt.getRank() < 2)
    return emitError(loc) << "BatchNormalization needs a floating-point input of rank 2 or more "
                             "(N, C, D1...); this one is "
                          << xt;
  const int64_t C = xt.getDimSize(1);
  if (failed(perChannelOperands(loc, "BatchNormalization", operands.drop_front(), C, elt,
                                "scale, B, input_mean and input_var")))
    return failure();
  const onnx::AttributeProto *training = findAttr(node, "training_mode");
  const bool train = training && training->i() != 0;
  const bool runningNamed = llvm::any_of(llvm::drop_begin(node.output()),
                                         [](const std::string &n) { return !n.empty(); });
  if (!train && runningNamed)
    return emitError(loc) << "BatchNormalization has running mean and variance outputs only in "
                             "training mode (training_mode = 1)";
  const double eps = attrFloat(node, "epsilon", 1e-5), momentum = attrFloat(node, "momentum", 0.9);
  SmallVector<int64_t> perC(xt.getRank() - 1, 1), axes = {0};
  perC[0] = C;
  for (int64_t d = 2; d < xt.getRank(); ++d)
    axes.push_back(d);
  Composer c(builder, loc);
  auto chan = [&](Value v) { return c.reshape(v, perC); };
  SmallVector<Value> results;
  if (!train) {
    Value n = normalized(c, c.sub(x, chan(operands[3])), chan(operands[4]), eps, elt);
    results.push_back(c.add(c.mul(n, chan(operands[1])), chan(operands[2])));
  } else {
    auto mean = [&](Value v) {
      return c.make<ReduceMeanOp>({v}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
                                        builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
    };
    Value mu = mean(x);
    Value d = c.sub(x, mu);
    Value var = mean(c.mul(d, d));
    Value n = normalized(c, d, var, eps, elt);
    results.push_back(c.add(c.mul(n, chan(operands[1])), chan(operands[2])));
    // running = input * momentum + batch * (1 - momentum)
    auto running = [&](Value input, Value batch) {
      Value kept = c.mul(input, c.scalar(momentum, elt));
      return c.add(kept, c.mul(c.reshape(batch, {C}), c.scalar(1.0 - momentum, elt)));
    };
    if (node.output_size() > 1)
      results.push_back(running(operands[3], mu));
    if (node.output_size() > 2)
      results.push_back(running(operands[4], var));
  }
  for (Value r : results)
    if (failed(c.finish(r)))
      return failure();
  if (train && runningNamed)
    emitWarning(loc) << "BatchNormalization in training mode: tcc-run does not carry its running "
                        "mean and variance (outputs \""
                     << node.output(1) << "\" and after) from step to step, so \""
                     << node.input(3) << "\" and \"" << node.input(4)
                     << "\" keep their initial values in a saved model (PyTorch updates them); "
                        "the batch statistics that train the model are computed";
  return results;
}
