//===- Conv.cpp - ONNX Conv and pooling as a gather of patches ------------===//
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
// MaxPool and AveragePool gather the same patches (the padding column -inf
// for the maximum) and reduce them over the taps: Composer::extremum's max
// tree, or a sum divided by the taps inside the input (count_include_pad:
// inside the padded input), ceil_mode as ONNX defines it.
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

namespace {

/// Where a sliding window (Conv's kernel, a pooling's) reads its input x
/// [N, C, D...]: the padding, the output's spatial shape O and, for each of
/// the Ot x Kt (output position, tap) pairs, the input element it reads, or
/// P (one past the flattened spatial size: a padding column) where the tap
/// falls outside the input.
struct Window {
  SmallVector<int64_t> K, D, strides, dil, begin, end, O;
  int64_t P = 1, Ot = 1, Kt = 1;
  SmallVector<int64_t> positions;
  /// Per output position: its taps inside the input, and inside the padded
  /// input (AveragePool's divisors without and with count_include_pad).
  SmallVector<int64_t> inside, insidePadded;
  bool padded = false;
};

/// Reads the window's attributes (strides, dilations, pads or auto_pad;
/// ceil_mode where `ceilMode` says it may be set) for kernel `K` over x.
LogicalResult window(Location loc, StringRef op, const onnx::NodeProto &node,
                     RankedTensorType xt, ArrayRef<int64_t> K, bool allowCeil, Window &w) {
  const int64_t k = xt.getRank() - 2;
  w.K.assign(K.begin(), K.end());
  w.D.assign(xt.getShape().begin() + 2, xt.getShape().end());
  w.strides = ints(node, "strides", k, 1);
  w.dil = ints(node, "dilations", k, 1);
  if (w.K.size() != size_t(k) || llvm::any_of(w.K, [](int64_t v) { return v < 1; }))
    return emitError(loc) << op << "'s kernel " << list(w.K) << " must be " << k
                          << " positive sizes";
  if (w.strides.size() != size_t(k) || w.dil.size() != size_t(k) ||
      llvm::any_of(w.strides, [](int64_t s) { return s < 1; }) ||
      llvm::any_of(w.dil, [](int64_t d) { return d < 1; }))
    return emitError(loc) << op << "'s strides " << list(w.strides) << " and dilations "
                          << list(w.dil) << " must be " << k << " positive integers each";
  const onnx::AttributeProto *ceilAttr = findAttr(node, "ceil_mode");
  const bool ceil = ceilAttr && ceilAttr->i() != 0;
  if (ceil && !allowCeil)
    return emitError(loc) << op << "'s ceil_mode is not supported";
  const onnx::AttributeProto *autoPad = findAttr(node, "auto_pad");
  std::string mode = autoPad ? autoPad->s() : "NOTSET";
  w.begin.assign(k, 0);
  w.end.assign(k, 0);
  if (mode == "NOTSET") {
    SmallVector<int64_t> pads = ints(node, "pads", 2 * k, 0);
    if (pads.size() != size_t(2 * k) || llvm::any_of(pads, [](int64_t p) { return p < 0; }))
      return emitError(loc) << op << "'s pads " << list(pads) << " must be " << 2 * k
                            << " non-negative integers (begins, then ends)";
    for (int64_t d = 0; d < k; ++d)
      w.begin[d] = pads[d], w.end[d] = pads[k + d];
  } else if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    for (int64_t d = 0; d < k; ++d) {
      const int64_t out = (w.D[d] + w.strides[d] - 1) / w.strides[d];
      const int64_t total = std::max<int64_t>(
          0, (out - 1) * w.strides[d] + (w.K[d] - 1) * w.dil[d] + 1 - w.D[d]);
      w.begin[d] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.end[d] = total - w.begin[d];
    }
  } else if (mode != "VALID") {
    return emitError(loc) << op << "'s auto_pad \"" << mode
                          << "\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID";
  }
  w.O.resize(k);
  for (int64_t d = 0; d < k; ++d) {
    const int64_t span = (w.K[d] - 1) * w.dil[d] + 1, room = w.D[d] + w.begin[d] + w.end[d];
    if (room < span)
      return emitError(loc) << op << "'s kernel " << list(w.K) << " (dilations " << list(w.dil)
                            << ") is larger than the padded input " << xt;
    w.O[d] = (room - span + (ceil ? w.strides[d] - 1 : 0)) / w.strides[d] + 1;
    // ceil_mode: a last window that starts in the end padding is dropped
    // (ONNX's and PyTorch's rule).
    if (ceil && (w.O[d] - 1) * w.strides[d] >= w.D[d] + w.begin[d])
      --w.O[d];
    w.P *= w.D[d], w.Ot *= w.O[d], w.Kt *= w.K[d];
  }
  const int64_t N = xt.getDimSize(0), C = xt.getDimSize(1);
  if (w.Ot * w.Kt > (int64_t(1) << 24) || N * C * w.Ot * w.Kt > (int64_t(1) << 31))
    return emitError(loc) << op << " of X " << xt << " with a kernel " << list(w.K)
                          << " would need a patch matrix of " << N * C * w.Ot * w.Kt
                          << " elements (tcc writes it as a gather of patches; at most 2^31 "
                             "elements and 2^24 positions)";
  w.positions.reserve(static_cast<size_t>(w.Ot * w.Kt));
  SmallVector<int64_t> o(k, 0), t(k, 0);
  for (int64_t oi = 0; oi < w.Ot; ++oi) {
    for (int64_t rest = oi, d = k - 1; d >= 0; --d)
      o[d] = rest % w.O[d], rest /= w.O[d];
    int64_t in = 0, inPadded = 0;
    for (int64_t ti = 0; ti < w.Kt; ++ti) {
      for (int64_t rest = ti, d = k - 1; d >= 0; --d)
        t[d] = rest % w.K[d], rest /= w.K[d];
      int64_t linear = 0;
      bool inside = true, insidePadded = true;
      for (int64_t d = 0; d < k; ++d) {
        const int64_t at = o[d] * w.strides[d] - w.begin[d] + t[d] * w.dil[d];
        inside = inside && at >= 0 && at < w.D[d];
        insidePadded = insidePadded && at >= -w.begin[d] && at < w.D[d] + w.end[d];
        linear = linear * w.D[d] + at;
      }
      w.positions.push_back(inside ? linear : w.P);
      w.padded = w.padded || !inside;
      in += inside;
      inPadded += insidePadded;
    }
    w.inside.push_back(in);
    w.insidePadded.push_back(inPadded);
  }
  return success();
}

/// x [N, C, D...] as patches [N, C, Ot, Kt] (a gather at the window's
/// positions; the taps outside the input read 0, or with `lowest` -inf, the
/// type's least integer).
Value gatherPatches(Composer &c, Value x, const Window &w, bool lowest) {
  OpBuilder &b = c.builder();
  auto xt = cast<RankedTensorType>(x.getType());
  Type elt = xt.getElementType();
  const int64_t N = xt.getDimSize(0), C = xt.getDimSize(1);
  Value flat = c.reshape(x, {N, C, w.P});
  if (w.padded) {
    auto padType = RankedTensorType::get({N, C, 1}, elt);
    Attribute pad;
    if (auto ft = dyn_cast<FloatType>(elt))
      pad = lowest ? FloatAttr::get(ft, APFloat::getInf(ft.getFloatSemantics(), /*Negative=*/true))
                   : FloatAttr::get(ft, 0.0);
    else if (auto it = dyn_cast<IntegerType>(elt); it && lowest)
      pad = IntegerAttr::get(it, it.isUnsigned() ? APInt::getMinValue(it.getWidth())
                                                 : APInt::getSignedMinValue(it.getWidth()));
    else
      pad = IntegerAttr::get(elt, 0);
    Value fill = c.constant(DenseElementsAttr::get(padType, pad));
    flat = c.make<ConcatOp>({flat, fill}, {b.getNamedAttr("axis", b.getI64IntegerAttr(2))});
  }
  auto posType = RankedTensorType::get({w.Ot, w.Kt}, b.getI64Type());
  Value pos = c.constant(DenseElementsAttr::get(posType, ArrayRef<int64_t>(w.positions)));
  return c.make<GatherOp>({flat, pos}, {b.getNamedAttr("axis", b.getI64IntegerAttr(2))});
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
  SmallVector<int64_t> K(wt.getShape().drop_front(2));
  if (const onnx::AttributeProto *ks = findAttr(node, "kernel_shape");
      ks && SmallVector<int64_t>(ks->ints().begin(), ks->ints().end()) != K)
    return emitError(loc) << "Conv's kernel_shape " << list(SmallVector<int64_t>(ks->ints().begin(),
                                                                                 ks->ints().end()))
                          << " is not W's spatial shape " << list(K);
  Window win;
  if (failed(window(loc, "Conv", node, xt, K, /*allowCeil=*/false, win)))
    return failure();
  if (bias) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != M || bt.getElementType() != elt)
      return emitError(loc) << "Conv's bias " << bt << " must be [" << M << "] of X's type";
  }

  Composer c(builder, loc);
  auto i64s = [&](ArrayRef<int64_t> v) { return builder.getDenseI64ArrayAttr(v); };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return c.make<TransposeOp>({v}, {builder.getNamedAttr("perm", i64s(perm))});
  };
  const int64_t Cg = C / G, Mg = M / G, Ot = win.Ot, Kt = win.Kt;
  Value patches = gatherPatches(c, x, win, /*lowest=*/false);   // [N, C, O, Kt]
  Value rows = transpose(patches, {0, 2, 1, 3});               // [N, O, C, Kt]
  rows = transpose(c.reshape(rows, {N, Ot, G, Cg * Kt}), {0, 2, 1, 3}); // [N, G, O, Cg Kt]
  Value weights = transpose(c.reshape(w, {G, Mg, Cg * Kt}), {0, 2, 1}); // [G, Cg Kt, Mg]
  Value y = c.make<MatMulOp>({rows, weights});                  // [N, G, O, Mg]
  SmallVector<int64_t> outShape = {N, M};
  outShape.append(win.O.begin(), win.O.end());
  y = c.reshape(transpose(y, {0, 1, 3, 2}), outShape);
  if (bias) {
    SmallVector<int64_t> biasShape(k + 1, 1);
    biasShape[0] = M;
    y = c.add(y, c.reshape(bias, biasShape));
  }
  return c.finish(y);
}

FailureOr<Value> mlir::tcc::buildPool(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                                      ArrayRef<Value> operands) {
  StringRef op = node.op_type();
  const bool isMax = op == "MaxPool";
  Value x = operands.empty() ? Value() : operands[0];
  if (!x)
    return emitError(loc) << op << " needs its input X";
  if (isMax && node.output_size() > 1 && !node.output(1).empty())
    return emitError(loc) << "MaxPool's Indices output is not supported";
  auto xt = cast<RankedTensorType>(x.getType());
  Type elt = xt.getElementType();
  const int64_t k = xt.getRank() - 2;
  if ((!isa<FloatType>(elt) && !(isMax && elt.isIntOrIndex() && !elt.isInteger(1))) || k < 1 ||
      k > 3)
    return emitError(loc) << op << " is supported on " << (isMax ? "numeric" : "floating-point")
                          << " X with 1, 2 or 3 spatial dimensions; X is " << xt;
  const onnx::AttributeProto *ks = findAttr(node, "kernel_shape");
  if (!ks)
    return emitError(loc) << op << " needs its kernel_shape";
  SmallVector<int64_t> K(ks->ints().begin(), ks->ints().end());
  Window win;
  if (failed(window(loc, op, node, xt, K, /*allowCeil=*/true, win)))
    return failure();
  const onnx::AttributeProto *storage = findAttr(node, "storage_order");
  if (storage && storage->i() != 0 && isMax && node.output_size() > 1)
    return emitError(loc) << "MaxPool's storage_order is not supported";
  const onnx::AttributeProto *includePad = findAttr(node, "count_include_pad");
  const bool countPad = includePad && includePad->i() != 0;

  const int64_t N = xt.getDimSize(0), C = xt.getDimSize(1);
  Composer c(builder, loc);
  // A tap in the padding is never the maximum, and adds 0 to a sum.
  Value patches = gatherPatches(c, x, win, /*lowest=*/isMax);
  Value pooled;
  if (isMax) {
    pooled = c.extremum(patches, {3}, /*isMin=*/false);
  } else {
    pooled = c.make<ReduceSumOp>({patches}, {builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr({3})),
                                             builder.getNamedAttr("keepdims", builder.getI64IntegerAttr(1))});
    SmallVector<double> divisors;
    for (int64_t n : countPad ? win.insidePadded : win.inside)
      divisors.push_back(static_cast<double>(std::max<int64_t>(n, 1)));
    auto dt = RankedTensorType::get({win.Ot, 1}, elt);
    SmallVector<Attribute> attrs;
    for (double d : divisors)
      attrs.push_back(builder.getFloatAttr(elt, d));
    pooled = c.div(pooled, c.constant(DenseElementsAttr::get(dt, attrs)));
  }
  SmallVector<int64_t> outShape = {N, C};
  outShape.append(win.O.begin(), win.O.end());
  return c.finish(c.reshape(pooled, outShape));
}
