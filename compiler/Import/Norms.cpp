//===- Norms.cpp - ONNX normalizations written as tcc ops -----------------===//
//
// InstanceNormalization (a group norm's export: torch's GroupNorm with one
// group per channel, or its reshaped form) as the ops it is defined by:
// per sample and channel, the mean and the biased variance over the
// spatial dimensions, then (x - mean) / sqrt(var + epsilon) * scale + B with
// scale and B per channel. Its gradient is that of those ops.
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
