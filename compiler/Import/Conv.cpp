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
// ConvTranspose is the same product with the patches read the other way
// round: output position o's tap t reads the input element i with
// i * stride + t * dilation = o + pad (none where that is not whole), and
// W [C, M/G, K...] is read per group as [C/G * Kt, M/G].
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

static Value groupedProduct(Composer &c, Value x, const Window &win, Value weights, int64_t G,
                            int64_t M, Value bias);

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
  const int64_t C = xt.getDimSize(1), M = wt.getDimSize(0);
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
  const int64_t Cg = C / G, Mg = M / G;
  // W [M, Cg, K...] as [G, Cg Kt, Mg].
  Value weights = c.make<TransposeOp>({c.reshape(w, {G, Mg, Cg * win.Kt})},
                                      {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr({0, 2, 1}))});
  return c.finish(groupedProduct(c, x, win, weights, G, M, bias));
}

/// y [N, M, O...] = the patches of x [N, C, D...] at the window's positions,
/// per group one batched MatMul with `weights` [G, C/G Kt, M/G] (+ bias [M]).
static Value groupedProduct(Composer &c, Value x, const Window &win, Value weights, int64_t G,
                            int64_t M, Value bias) {
  OpBuilder &b = c.builder();
  auto xt = cast<RankedTensorType>(x.getType());
  const int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), Cg = C / G, Ot = win.Ot, Kt = win.Kt;
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return c.make<TransposeOp>({v}, {b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))});
  };
  Value patches = gatherPatches(c, x, win, /*lowest=*/false);   // [N, C, O, Kt]
  Value rows = transpose(patches, {0, 2, 1, 3});               // [N, O, C, Kt]
  rows = transpose(c.reshape(rows, {N, Ot, G, Cg * Kt}), {0, 2, 1, 3}); // [N, G, O, Cg Kt]
  Value y = c.make<MatMulOp>({rows, weights});                  // [N, G, O, M/G]
  SmallVector<int64_t> outShape = {N, M};
  outShape.append(win.O.begin(), win.O.end());
  y = c.reshape(transpose(y, {0, 1, 3, 2}), outShape);
  if (bias) {
    SmallVector<int64_t> biasShape(win.O.size() + 1, 1);
    biasShape[0] = M;
    y = c.add(y, c.reshape(bias, biasShape));
  }
  return y;
}

FailureOr<Value> mlir::tcc::buildConvTranspose(OpBuilder &builder, Location loc,
                                               const onnx::NodeProto &node,
                                               ArrayRef<Value> operands) {
  Value x = operands.size() > 0 ? operands[0] : Value();
  Value w = operands.size() > 1 ? operands[1] : Value();
  Value bias = operands.size() > 2 ? operands[2] : Value();
  if (!x || !w)
    return emitError(loc) << "ConvTranspose needs its input X and its weights W";
  auto xt = cast<RankedTensorType>(x.getType());
  auto wt = cast<RankedTensorType>(w.getType());
  Type elt = xt.getElementType();
  const int64_t rank = xt.getRank(), k = rank - 2;
  if (!isa<FloatType>(elt) || wt.getElementType() != elt || k < 1 || k > 3 ||
      wt.getRank() != rank)
    return emitError(loc) << "ConvTranspose needs floating-point X and W of one type and rank, "
                             "with 1, 2 or 3 spatial dimensions; these are "
                          << xt << " and " << wt;
  const int64_t C = xt.getDimSize(1);
  const onnx::AttributeProto *groupAttr = findAttr(node, "group");
  const int64_t G = groupAttr ? groupAttr->i() : 1;
  if (G < 1 || wt.getDimSize(0) != C || C % G)
    return emitError(loc) << "ConvTranspose's group " << G << " does not fit X " << xt
                          << " and W " << wt << " (W's first dimension must be X's channels)";
  const int64_t Mg = wt.getDimSize(1), M = Mg * G;
  SmallVector<int64_t> K(wt.getShape().drop_front(2));
  if (const onnx::AttributeProto *ks = findAttr(node, "kernel_shape");
      ks && SmallVector<int64_t>(ks->ints().begin(), ks->ints().end()) != K)
    return emitError(loc) << "ConvTranspose's kernel_shape does not match W " << wt;
  Window win;
  win.K = K;
  win.D.assign(xt.getShape().begin() + 2, xt.getShape().end());
  win.strides = ints(node, "strides", k, 1);
  win.dil = ints(node, "dilations", k, 1);
  SmallVector<int64_t> outPad = ints(node, "output_padding", k, 0);
  if (win.strides.size() != size_t(k) || win.dil.size() != size_t(k) ||
      outPad.size() != size_t(k) || llvm::any_of(win.strides, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(win.dil, [](int64_t v) { return v < 1; }))
    return emitError(loc) << "ConvTranspose's strides " << list(win.strides) << ", dilations "
                          << list(win.dil) << " and output_padding " << list(outPad) << " must be "
                          << k << " integers each (strides and dilations positive)";
  // The full output of each dimension, before the pads are cut from it.
  SmallVector<int64_t> full(k);
  for (int64_t d = 0; d < k; ++d)
    full[d] = win.strides[d] * (win.D[d] - 1) + outPad[d] + (K[d] - 1) * win.dil[d] + 1;
  const onnx::AttributeProto *autoPad = findAttr(node, "auto_pad");
  std::string mode = autoPad ? autoPad->s() : "NOTSET";
  const onnx::AttributeProto *outShapeAttr = findAttr(node, "output_shape");
  win.begin.assign(k, 0);
  win.end.assign(k, 0);
  if (outShapeAttr || mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    // The output's size is given (output_shape, or D * stride for SAME):
    // the total padding follows, split as ONNX says (SAME_UPPER puts the
    // extra one at the end).
    SmallVector<int64_t> want;
    if (outShapeAttr)
      want.assign(outShapeAttr->ints().begin(), outShapeAttr->ints().end());
    if (want.size() == size_t(k + 2))
      want.erase(want.begin(), want.begin() + 2);
    if (!outShapeAttr)
      for (int64_t d = 0; d < k; ++d)
        want.push_back(win.D[d] * win.strides[d]);
    if (want.size() != size_t(k))
      return emitError(loc) << "ConvTranspose's output_shape " << list(want) << " must name "
                            << k << " spatial sizes";
    for (int64_t d = 0; d < k; ++d) {
      // Negative where the output is larger than the full one: positions
      // no input reaches (the bias alone) at the end.
      const int64_t total = full[d] - want[d];
      if (want[d] < 1)
        return emitError(loc) << "ConvTranspose's output_shape " << list(want)
                              << " must be positive sizes";
      win.begin[d] = mode == "SAME_LOWER" ? total - total / 2 : total / 2;
      win.end[d] = total - win.begin[d];
    }
  } else if (mode == "NOTSET") {
    SmallVector<int64_t> pads = ints(node, "pads", 2 * k, 0);
    if (pads.size() != size_t(2 * k) || llvm::any_of(pads, [](int64_t p) { return p < 0; }))
      return emitError(loc) << "ConvTranspose's pads " << list(pads) << " must be " << 2 * k
                            << " non-negative integers (begins, then ends)";
    for (int64_t d = 0; d < k; ++d)
      win.begin[d] = pads[d], win.end[d] = pads[k + d];
  } else if (mode != "VALID") {
    return emitError(loc) << "ConvTranspose's auto_pad \"" << mode
                          << "\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID";
  }
  win.O.resize(k);
  for (int64_t d = 0; d < k; ++d) {
    win.O[d] = full[d] - win.begin[d] - win.end[d];
    if (win.O[d] < 1)
      return emitError(loc) << "ConvTranspose's pads leave no output of " << list(full);
    win.P *= win.D[d], win.Ot *= win.O[d], win.Kt *= K[d];
  }
  const int64_t N = xt.getDimSize(0);
  if (win.Ot * win.Kt > (int64_t(1) << 24) || N * C * win.Ot * win.Kt > (int64_t(1) << 31))
    return emitError(loc) << "ConvTranspose of X " << xt << " with W " << wt
                          << " would need a patch matrix of " << N * C * win.Ot * win.Kt
                          << " elements (at most 2^31 elements and 2^24 positions)";
  if (bias) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != M || bt.getElementType() != elt)
      return emitError(loc) << "ConvTranspose's bias " << bt << " must be [" << M << "] of X's type";
  }
  // Output position o of the full output, tap t: the input element i with
  // i * stride + t * dilation = o + begin, where that is whole and inside.
  SmallVector<int64_t> o(k, 0), t(k, 0);
  for (int64_t oi = 0; oi < win.Ot; ++oi) {
    for (int64_t rest = oi, d = k - 1; d >= 0; --d)
      o[d] = rest % win.O[d], rest /= win.O[d];
    for (int64_t ti = 0; ti < win.Kt; ++ti) {
      for (int64_t rest = ti, d = k - 1; d >= 0; --d)
        t[d] = rest % K[d], rest /= K[d];
      int64_t linear = 0;
      bool inside = true;
      for (int64_t d = 0; d < k; ++d) {
        const int64_t at = o[d] + win.begin[d] - t[d] * win.dil[d];
        const int64_t i = at >= 0 && at % win.strides[d] == 0 ? at / win.strides[d] : -1;
        inside = inside && i >= 0 && i < win.D[d];
        linear = linear * win.D[d] + i;
      }
      win.positions.push_back(inside ? linear : win.P);
      win.padded = win.padded || !inside;
    }
  }
  Composer c(builder, loc);
  const int64_t Cg = C / G;
  // W [C, Mg, K...] as [G, Cg Kt, Mg]: [G, Cg, Mg, Kt] with Mg and Kt swapped.
  Value weights = c.make<TransposeOp>(
      {c.reshape(w, {G, Cg, Mg, win.Kt})},
      {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr({0, 1, 3, 2}))});
  weights = c.reshape(weights, {G, Cg * win.Kt, Mg});
  return c.finish(groupedProduct(c, x, win, weights, G, M, bias));
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
