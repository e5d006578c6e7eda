//===- Conv.cpp - ONNX Conv as a gather and a batched MatMul --------------===//
//
// ONNX `Conv` (1-D, 2-D and 3-D; groups, strides, dilations, explicit pads and
// auto_pad) written as tcc ops the importer already has, the im2col way:
//
//   x [N, C, D...] --reshape--> [N, C, P] (--concat a zero column--> [N, C, P+1]
//   where there is padding) --gather(axis 2, constant [O, Kt] positions)-->
//   [N, C, O, Kt] --transpose, reshape--> [N, G, O, C/G * Kt]
//   w [M, C/G, K...] --reshape, transpose--> [G, C/G * Kt, M/G]
//   y = the batched MatMul of the two, [N, G, O, M/G] --transpose, reshape-->
//   [N, M, O...] (+ bias [M, 1...])
//
// where P is the input's spatial size, O the output's, Kt the kernel's, and
// each of the O x Kt positions is the input element the kernel's tap reads
// at that output position, or the zero column where the tap falls in the
// padding. The gradient is the gather's (a scatter-add into the input) and
// the MatMul's; the kernels are the GEMM's, cuBLASLt on CUDA and the BLAS on
// the CPU. The cost is the [N, C, O, Kt] patch matrix, which a patch
// embedding (stride = kernel, ViT's) does not enlarge and a convolution of
// stride 1 enlarges Kt times: tcc refuses one whose patch matrix would pass
// 2^31 elements.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/Composer.h"
#include "compiler/Import/Composites.h"

#include <onnx/onnx_pb.h>

#include <string>

using namespace mlir;
using namespace mlir::tcc;

namespace {

/// The integers of attribute `name`, or `count` copies of `dflt`.
SmallVector<int64_t> ints(const onnx::NodeProto &node, StringRef name, size_t count, int64_t dflt) {
  const onnx::AttributeProto *a = findAttr(node, name);
  if (!a)
    return SmallVector<int64_t>(count, dflt);
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string list(ArrayRef<int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

} // namespace

FailureOr<Value> mlir::tcc::buildConv(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                                      ArrayRef<Value> operands) {
  Value x = operands.size() > 0 ? operands[0] : Value();
  Value w = operands.size() > 1 ? operands[1] : Value();
  Value bias = operands.size() > 2 ? operands[2] : Value();
  if (!x || !w)
    return emitError(loc) << "Conv needs its input X and its weights W";
  auto xt = cast<RankedTensorType>(x.getType());
  auto wt = cast<RankedTensorType>(w.getType());
  Type elt = xt.getElementType();
  const int64_t rank = xt.getRank(), k = rank - 2;
  if (!isa<FloatType>(elt) || wt.getElementType() != elt)
    return emitError(loc) << "Conv needs floating-point X and W of one type; these are " << xt
                          << " and " << wt;
  if (k < 1 || k > 3 || wt.getRank() != rank)
    return emitError(loc) << "Conv is supported in 1, 2 and 3 spatial dimensions, with W of X's "
                             "rank; X is "
                          << xt << ", W " << wt;
  const int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), M = wt.getDimSize(0);
  const onnx::AttributeProto *groupAttr = findAttr(node, "group");
  const int64_t G = groupAttr ? groupAttr->i() : 1;
  if (G < 1 || C % G != 0 || M % G != 0 || wt.getDimSize(1) * G != C)
    return emitError(loc) << "Conv's group " << G << " does not fit X " << xt << " and W " << wt
                          << " (W's second dimension times group must be X's channels, and "
                             "group must divide W's first)";
  SmallVector<int64_t> K(wt.getShape().drop_front(2)), D(xt.getShape().drop_front(2));
  if (const onnx::AttributeProto *ks = findAttr(node, "kernel_shape");
      ks && SmallVector<int64_t>(ks->ints().begin(), ks->ints().end()) != K)
    return emitError(loc) << "Conv's kernel_shape " << list(SmallVector<int64_t>(ks->ints().begin(),
                                                                                 ks->ints().end()))
                          << " is not W's spatial shape " << list(K);
  SmallVector<int64_t> strides = ints(node, "strides", k, 1), dil = ints(node, "dilations", k, 1);
  if (strides.size() != size_t(k) || dil.size() != size_t(k) ||
      llvm::any_of(strides, [](int64_t s) { return s < 1; }) ||
      llvm::any_of(dil, [](int64_t d) { return d < 1; }))
    return emitError(loc) << "Conv's strides " << list(strides) << " and dilations " << list(dil)
                          << " must be " << k << " positive integers each";
  const onnx::AttributeProto *autoPad = findAttr(node, "auto_pad");
  std::string mode = autoPad ? autoPad->s() : "NOTSET";
  SmallVector<int64_t> begin(k, 0), end(k, 0);
  if (mode == "NOTSET") {
    SmallVector<int64_t> pads = ints(node, "pads", 2 * k, 0);
    if (pads.size() != size_t(2 * k) || llvm::any_of(pads, [](int64_t p) { return p < 0; }))
      return emitError(loc) << "Conv's pads " << list(pads) << " must be " << 2 * k
                            << " non-negative integers (begins, then ends)";
    for (int64_t d = 0; d < k; ++d)
      begin[d] = pads[d], end[d] = pads[k + d];
  } else if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    for (int64_t d = 0; d < k; ++d) {
      const int64_t out = (D[d] + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[d] + (K[d] - 1) * dil[d] + 1 - D[d]);
      begin[d] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      end[d] = total - begin[d];
    }
  } else if (mode != "VALID") {
    return emitError(loc) << "Conv's auto_pad \"" << mode
                          << "\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID";
  }
  SmallVector<int64_t> O(k);
  int64_t P = 1, Ot = 1, Kt = 1;
  for (int64_t d = 0; d < k; ++d) {
    const int64_t span = (K[d] - 1) * dil[d] + 1;
    if (D[d] + begin[d] + end[d] < span)
      return emitError(loc) << "Conv's kernel " << list(K) << " (dilations " << list(dil)
                            << ") is larger than the padded input " << xt;
    O[d] = (D[d] + begin[d] + end[d] - span) / strides[d] + 1;
    P *= D[d], Ot *= O[d], Kt *= K[d];
  }
  if (Ot * Kt > (int64_t(1) << 24) || N * C * Ot * Kt > (int64_t(1) << 31))
    return emitError(loc) << "Conv of X " << xt << " with W " << wt << " would need a patch matrix of "
                          << N * C * Ot * Kt
                          << " elements (tcc writes Conv as a gather and a MatMul; at most 2^31 "
                             "elements and 2^24 positions)";
  if (bias) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != M || bt.getElementType() != elt)
      return emitError(loc) << "Conv's bias " << bt << " must be [" << M << "] of X's type";
  }

  // The input element each output position's kernel tap reads, or P (the
  // zero column) where it falls in the padding.
  const bool padded = llvm::any_of(begin, [](int64_t p) { return p > 0; }) ||
                      llvm::any_of(end, [](int64_t p) { return p > 0; });
  SmallVector<int64_t> positions;
  positions.reserve(static_cast<size_t>(Ot * Kt));
  SmallVector<int64_t> o(k, 0), t(k, 0);
  for (int64_t oi = 0; oi < Ot; ++oi) {
    for (int64_t rest = oi, d = k - 1; d >= 0; --d)
      o[d] = rest % O[d], rest /= O[d];
    for (int64_t ti = 0; ti < Kt; ++ti) {
      for (int64_t rest = ti, d = k - 1; d >= 0; --d)
        t[d] = rest % K[d], rest /= K[d];
      int64_t linear = 0;
      bool inside = true;
      for (int64_t d = 0; d < k; ++d) {
        const int64_t at = o[d] * strides[d] - begin[d] + t[d] * dil[d];
        inside = inside && at >= 0 && at < D[d];
        linear = linear * D[d] + at;
      }
      positions.push_back(inside ? linear : P);
    }
  }

  Composer c(builder, loc);
  auto i64s = [&](ArrayRef<int64_t> v) { return builder.getDenseI64ArrayAttr(v); };
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) {
    return c.make<ReshapeOp>({v}, {builder.getNamedAttr("shape", i64s(shape))});
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return c.make<TransposeOp>({v}, {builder.getNamedAttr("perm", i64s(perm))});
  };
  const int64_t Cg = C / G, Mg = M / G;
  Value flat = reshape(x, {N, C, P});
  if (padded) {
    auto zeroType = RankedTensorType::get({N, C, 1}, elt);
    Value zeros = c.constant(DenseElementsAttr::get(zeroType, builder.getFloatAttr(elt, 0.0)));
    flat = c.make<ConcatOp>({flat, zeros}, {builder.getNamedAttr("axis", builder.getI64IntegerAttr(2))});
  }
  auto posType = RankedTensorType::get({Ot, Kt}, builder.getI64Type());
  Value pos = c.constant(DenseElementsAttr::get(posType, ArrayRef<int64_t>(positions)));
  Value patches = c.make<GatherOp>({flat, pos}, {builder.getNamedAttr("axis", builder.getI64IntegerAttr(2))});
  Value rows = transpose(patches, {0, 2, 1, 3});               // [N, O, C, Kt]
  rows = transpose(reshape(rows, {N, Ot, G, Cg * Kt}), {0, 2, 1, 3}); // [N, G, O, Cg Kt]
  Value weights = transpose(reshape(w, {G, Mg, Cg * Kt}), {0, 2, 1}); // [G, Cg Kt, Mg]
  Value y = c.make<MatMulOp>({rows, weights});                  // [N, G, O, Mg]
  SmallVector<int64_t> outShape = {N, M};
  outShape.append(O.begin(), O.end());
  y = reshape(transpose(y, {0, 1, 3, 2}), outShape);
  if (bias) {
    SmallVector<int64_t> biasShape(k + 1, 1);
    biasShape[0] = M;
    y = c.add(y, reshape(bias, biasShape));
  }
  return c.finish(y);
}
