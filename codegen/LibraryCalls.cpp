//===- LibraryCalls.cpp - the runtime library's kernels, called from a step -===//
//
// Both targets' steps call the same kernel library by name
// (runtime/cpu/kernels.h, runtime/cuda/kernels.cuh): one tcck.call is one
// call, with the same arguments on both. What differs by target is small
// and said where it is: how an index error is returned, the CUDA loss's
// scratch buffer, the attention launchers' template arguments, and the
// accumulating reduce (CUDA's bias gradients).
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterImpl.h"
#include "runtime/tcc_random.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::tcc;
using namespace mlir::tcc::codegen;

LoopFusion mlir::tcc::codegen::loopStructure(tcck::LoopOp loop) {
  using Kind = LoopFusion::Kind;
  LoopFusion lf;
  lf.shape.assign(loop.getSpace().begin(), loop.getSpace().end());
  lf.rows = loop.getRows();
  lf.lastPass = loop.getPasses();
  for (Operation &op : loop.getBody().front().without_terminator()) {
    auto role = tcck::symbolizeLoopRole(op.getAttrOfType<StringAttr>(tcck::kRoleAttr).getValue());
    int64_t stage = op.getAttrOfType<IntegerAttr>(tcck::kStageAttr).getInt();
    switch (*role) {
    case tcck::LoopRole::Element:
      lf.kind[&op] = Kind::Element;
      lf.stage[op.getResult(0)] = stage;
      break;
    case tcck::LoopRole::Row:
      lf.kind[&op] = Kind::Row;
      lf.stage[op.getResult(0)] = stage;
      break;
    case tcck::LoopRole::RowReduction:
      lf.kind[&op] = Kind::RowReduction;
      lf.stage[op.getResult(0)] = stage + 1;
      break;
    case tcck::LoopRole::Reduction:
      lf.kind[&op] = Kind::Reduction;
      break;
    }
  }
  return lf;
}

/// The kernels' Shape holds at most this many dimensions (runtime/cpu/kernels.h).
constexpr int64_t kKernelRank = 8;

/// An error naming the first operand of `op` whose rank passes the kernels'.
static LogicalResult checkKernelRanks(Operation *op) {
  for (Value v : op->getOperands())
    if (auto t = dyn_cast<ShapedType>(v.getType()); t && t.hasRank() && t.getRank() > kKernelRank)
      return op->emitError("has a rank-")
             << t.getRank() << " operand " << t << "; the step's kernels take at most "
             << kKernelRank << " dimensions";
  return success();
}

/// broadcast_to's shapes with the dimensions that are 1 in the result
/// dropped, and runs of dimensions that are all copied or all broadcast
/// merged: the same copy at the smallest rank (a rank-10 Expand of 16 x 4 x 2
/// values becomes rank 3).
static std::pair<SmallVector<int64_t>, SmallVector<int64_t>>
collapsedBroadcast(ArrayRef<int64_t> out, ArrayRef<int64_t> in) {
  SmallVector<int64_t> aligned(out.size() - std::min(out.size(), in.size()), 1);
  llvm::append_range(aligned, in);
  SmallVector<int64_t> o, i;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1)
      continue;
    bool broadcast = aligned[d] == 1;
    if (!o.empty() && (i.back() == 1) == broadcast && (broadcast || i.back() == o.back())) {
      o.back() *= out[d];
      if (!broadcast)
        i.back() *= aligned[d];
      continue;
    }
    o.push_back(out[d]);
    i.push_back(aligned[d]);
  }
  return {o, i};
}

static std::string shapeOf(ArrayRef<int64_t> dims) {
  std::string s = "Shape{" + std::to_string(dims.size()) + ", {";
  llvm::raw_string_ostream os(s);
  llvm::interleave(dims, os, ", ");
  if (dims.empty())
    os << "0";
  os << "}}";
  return s;
}

LogicalResult Emitter::emitElementwise(tcck::ElementwiseOp e) {
  if (e.getIns().size() == 2 && failed(checkKernelRanks(e))) // unary: by element count
    return failure();
  Value r = e.getOut();
  if (e.getIns().size() == 2) {
    Value a = e.getIns()[0], b = e.getIns()[1];
    os << "  binary(BinaryOp::" << e.getKind() << ", " << ref(r) << ", " << shape(r) << ", "
       << ref(a) << ", " << shape(a) << ", " << ref(b) << ", " << shape(b) << ");\n";
  } else {
    os << "  unary(UnaryOp::" << e.getKind() << ", " << ref(r) << ", " << ref(e.getIns()[0])
       << ", " << numel(r) << "LL);\n";
  }
  return success();
}

LogicalResult Emitter::emitLibraryCall(tcck::CallOp c) {
  auto flag = [](bool t) { return t ? "true" : "false"; };
  // Index errors: as the target reports them (checkedCall).
  auto check = [&](const std::string &call) { os << checkedCall(call); };
  auto f64 = [](Attribute a) {
    return llvm::formatv("{0:e17}", cast<FloatAttr>(a).getValueAsDouble()).str();
  };
  ValueRange ins = c.getIns(), outs = c.getOuts();
  DictionaryAttr o = c.getOptions();
  auto i64 = [&](StringRef k) { return cast<IntegerAttr>(o.get(k)).getInt(); };
  auto b = [&](StringRef k) { return flag(cast<BoolAttr>(o.get(k)).getValue()); };
  auto list = [&](StringRef k) { return i64List(cast<DenseI64ArrayAttr>(o.get(k)).asArrayRef()); };
  // The calls that take Shapes (not gelu, cast, random_keep: element counts).
  using tcck::LibraryCall;
  if (!llvm::is_contained({LibraryCall::BroadcastTo, LibraryCall::Gelu, LibraryCall::GeluGrad,
                           LibraryCall::Cast, LibraryCall::RandomKeep},
                          c.getCallee()) &&
      failed(checkKernelRanks(c)))
    return failure();
  std::string out = ref(outs[0]);
  auto optional = [&](size_t k) {
    return k < ins.size() ? ref(ins[k]) : std::string("(const F *)nullptr");
  };
  auto ignore = [&]() {
    auto i = o.getAs<IntegerAttr>("ignore_index");
    return std::string(i ? "true" : "false") + ", " + std::to_string(i ? i.getInt() : 0) +
           "LL";
  };
  switch (c.getCallee()) {
  case tcck::LibraryCall::Gelu:
    os << "  gelu(" << out << ", " << ref(ins[0]) << ", " << numel(outs[0]) << "LL, "
       << b("tanh") << ");\n";
    break;
  case tcck::LibraryCall::GeluGrad:
    os << "  gelu_grad(" << out << ", " << ref(ins[0]) << ", " << ref(ins[1]) << ", "
       << numel(outs[0]) << "LL, " << b("tanh") << ");\n";
    break;
  case tcck::LibraryCall::Cast:
    os << "  " << (tensor(outs[0]).getElementType().isInteger(1) ? "cast_to_bool" : "cast")
       << "(" << out << ", " << ref(ins[0]) << ", " << numel(outs[0]) << "LL);\n";
    break;
  case tcck::LibraryCall::Where:
    os << "  where(" << out << ", " << shape(outs[0]) << ", " << ref(ins[0]) << ", "
       << shape(ins[0]) << ", " << ref(ins[1]) << ", " << shape(ins[1]) << ", "
       << ref(ins[2]) << ", " << shape(ins[2]) << ");\n";
    break;
  case tcck::LibraryCall::Softmax:
    os << "  softmax(" << out << ", " << ref(ins[0]) << ", " << shape(ins[0]) << ", "
       << i64("axis") << ", " << b("log") << ");\n";
    break;
  case tcck::LibraryCall::LayerNorm:
    os << "  layer_norm(" << out << ", " << ref(outs[1]) << ", " << ref(outs[2]) << ", "
       << ref(ins[0]) << ", " << shape(ins[0]) << ", " << i64("axis") << ", "
       << ref(ins[1]) << ", " << shape(ins[1]) << ", " << optional(2) << ", "
       << (ins.size() > 2 ? shape(ins[2]) : std::string("Shape{0, {}}")) << ", "
       << f64(o.get("epsilon")) << ");\n";
    break;
  case tcck::LibraryCall::Reduce:
    if (o.get("accumulate")) // CudaEmitter::emitCall's
      return c.emitOpError("the ") << targetName() << " target has no accumulating reduce";
    os << "  reduce(" << out << ", " << ref(ins[0]) << ", " << shape(ins[0]) << ", "
       << i64("mask") << "u, " << b("mean") << ");\n";
    break;
  case tcck::LibraryCall::Gather:
    check("gather(" + out + ", " + ref(ins[0]) + ", " + shape(ins[0]) + ", " + ref(ins[1]) +
          ", " + numel(ins[1]) + "LL, " + std::to_string(i64("axis")) + ")");
    break;
  case tcck::LibraryCall::GatherGrad:
    check("gather_grad(" + out + ", " + shape(outs[0]) + ", " + ref(ins[0]) + ", " +
          ref(ins[1]) + ", " + numel(ins[1]) + "LL, " + std::to_string(i64("axis")) + ")");
    break;
  case tcck::LibraryCall::Transpose:
    os << "  { static const int64_t perm[] = " << list("perm") << "; transpose(" << out
       << ", " << ref(ins[0]) << ", " << shape(ins[0]) << ", perm); }\n";
    break;
  case tcck::LibraryCall::Slice:
  case tcck::LibraryCall::SliceGrad:
    os << "  { static const int64_t st[] = " << list("starts") << ", sp[] = "
       << list("steps") << "; "
       << (c.getCallee() == tcck::LibraryCall::SliceGrad ? "slice_grad(" : "slice(") << out
       << ", " << shape(outs[0]) << ", " << ref(ins[0]) << ", " << shape(ins[0])
       << ", st, sp); }\n";
    break;
  case tcck::LibraryCall::Concat: {
    for (Value in : ins)
      if (buffers.lookup(in).type != buffers.lookup(outs[0]).type)
        return c.emitOpError("the ")
               << targetName() << " target concatenates tensors of one storage type only";
    int64_t axis = i64("axis");
    SmallVector<int64_t> sizes;
    std::string names;
    for (Value in : ins) {
      sizes.push_back(tensor(in).getDimSize(axis));
      names += (names.empty() ? "" : ", ") + ref(in);
    }
    os << "  { const " << buffers.lookup(outs[0]).type << " *ins[] = {" << names
       << "}; static const int64_t sz[] = " << i64List(sizes) << "; concat(" << out << ", "
       << shape(outs[0]) << ", " << axis << ", " << sizes.size() << ", ins, sz); }\n";
    break;
  }
  case tcck::LibraryCall::BroadcastTo: {
    auto [o, i] = collapsedBroadcast(tensor(outs[0]).getShape(), tensor(ins[0]).getShape());
    if (static_cast<int64_t>(o.size()) > kKernelRank)
      return c.emitError("broadcasts to ")
             << tensor(outs[0]) << ", which is " << o.size()
             << " dimensions at the fewest; the step's kernels take at most " << kKernelRank;
    os << "  broadcast_to(" << out << ", " << shapeOf(o) << ", " << ref(ins[0]) << ", "
       << shapeOf(i) << ");\n";
    break;
  }
  case tcck::LibraryCall::RandomKeep:
    os << "  random_keep(" << out << ", (const int64_t *)" << ref(ins[0]) << ", "
       << i64("stream") << "ULL, " << static_cast<uint32_t>(i64("threshold")) << "u, "
       << numel(outs[0]) << "LL);\n";
    break;
  case tcck::LibraryCall::Gemm: { // CudaEmitter::emitCall refuses it
    auto rt = tensor(outs[0]);
    int64_t k = tensor(ins[0]).getDimSize(cast<BoolAttr>(o.get("trans_a")).getValue() ? 0 : 1);
    os << "  gemm(" << out << ", " << ref(ins[0]) << ", " << ref(ins[1]) << ", "
       << rt.getDimSize(0) << "LL, " << rt.getDimSize(1) << "LL, " << k << "LL, "
       << b("trans_a") << ", " << b("trans_b") << ", " << f64(o.get("alpha")) << ", "
       << f64(o.get("beta")) << ", " << optional(2) << ", "
       << (ins.size() > 2 ? shape(ins[2]) : std::string("Shape{0, {}}")) << ");\n";
    break;
  }
  case tcck::LibraryCall::SceLoss:
    check("sce_loss(" + out + ", " + ref(outs[1]) + ", " + ref(ins[0]) + ", " +
          shape(ins[0]) + ", " + ref(ins[1]) + ", " + optional(2) + ", " +
          std::to_string(i64("reduction")) + ", " + ignore() + ")");
    break;
  case tcck::LibraryCall::SceLossWithGrad: {
    auto st = tensor(ins[0]);
    check("sce_loss_with_grad(" + out + ", " + ref(outs[1]) + ", " + ref(ins[0]) + ", " +
          std::to_string(st.getDimSize(0)) + "LL, " + std::to_string(st.getDimSize(1)) +
          "LL, " + ref(ins[1]) + ", " +
          (ins.size() > 3 ? ref(ins[3]) : "(const " + floatType(false) + " *)nullptr") +
          ", " + ref(ins[2]) + ", " +
          (i64("reduction") == 1 ? "1" : "2") + ", " + ignore() + lossScratch() + ")");
    break;
  }
  case tcck::LibraryCall::SceLossGrad:
    check("sce_loss_grad(" + out + ", " + ref(ins[0]) + ", " + ref(ins[1]) + ", " +
          shape(ins[1]) + ", " + ref(ins[2]) + ", " + optional(3) + ", " +
          std::to_string(i64("reduction")) + ", " + ignore() + ")");
    break;
  case tcck::LibraryCall::AttentionForward:
  case tcck::LibraryCall::AttentionBackward:
    return emitAttentionCall(c);
  }
  return success();
}

/// An attention kernel call: its buffers in the op's layout (attentionArg),
/// its shape and options as the lowering recorded them.
LogicalResult Emitter::emitAttentionCall(tcck::CallOp c) {
  ValueRange ins = c.getIns(), outs = c.getOuts();
  DictionaryAttr o = c.getOptions();
  bool backward = c.getCallee() == tcck::LibraryCall::AttentionBackward;
  ArrayRef<int64_t> dims = cast<DenseI64ArrayAttr>(o.get("shape")).asArrayRef();
  ArrayRef<int64_t> columns = cast<DenseI64ArrayAttr>(o.get("columns")).asArrayRef();
  if (dims.size() != 6 || columns.size() != 3)
    return c.emitOpError("has an attention shape of ") << dims.size() << " dimensions and "
                                                       << columns.size() << " columns";
  AttentionShape s{dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
                   cast<BoolAttr>(o.get("token_major")).getValue(),
                   cast<BoolAttr>(o.get("packed")).getValue(),
                   {columns[0], columns[1], columns[2]}};
  size_t next = backward ? 6 : 3;
  Value bias = o.get("bias") ? ins[next++] : Value();
  std::string dropout;
  if (auto ratio = o.getAs<FloatAttr>("dropout")) {
    double p = ratio.getValueAsDouble();
    dropout = llvm::formatv(", AttentionDropout{{(const int64_t *){0}, {1}ULL, {2}u, {3:e17}}",
                            ref(ins[next]), o.getAs<IntegerAttr>("dropout_stream").getInt(),
                            ::tcc::random::threshold(p), 1.0 / (1.0 - p))
                  .str();
  }
  auto softcap = o.getAs<FloatAttr>("softcap");
  if (softcap) // after the dropout argument, which it then needs
    dropout = llvm::formatv("{0}, {1:e17}", dropout.empty() ? ", AttentionDropout{}" : dropout,
                            softcap.getValueAsDouble())
                  .str();
  std::string operands =
      llvm::formatv("{0}, {1}, {2}", attentionArg(ins[0], s, s.columns[0], s.d),
                    attentionArg(ins[1], s, s.columns[1], s.d),
                    attentionArg(ins[2], s, s.columns[2], s.dv))
          .str();
  std::string tail =
      llvm::formatv(", {0}, AttentionDims{{{1}LL, {2}LL, {3}LL, {4}LL, {5}LL, {6}LL}, "
                    "{7:e17}, {8}{9});\n",
                    attentionBias(bias), s.b, s.h, s.sq, s.sk, s.d, s.dv,
                    cast<FloatAttr>(o.get("scale")).getValueAsDouble(),
                    cast<BoolAttr>(o.get("causal")).getValue() ? "true" : "false", dropout)
          .str();
  if (!backward) {
    os << "  attention_forward" << attentionKernel(s, bias, bool(softcap)) << "(" << attentionArg(outs[0], s, 0, s.dv, ref(outs[0])) << ", "
       << ref(outs[1]) << ", " << operands << tail;
    return success();
  }
  SmallVector<std::string> grads;
  for (int i = 0; i < 3; ++i) {
    Value g = outs[s.packed ? 0 : i];
    grads.push_back(attentionArg(g, s, s.columns[i], i == 2 ? s.dv : s.d, ref(g)));
  }
  os << "  attention_backward" << attentionKernel(s, bias, bool(softcap)) << "(" << llvm::join(grads, ", ") << ", " << operands << ", "
     << attentionArg(ins[3], s, 0, s.dv) << ", " << attentionArg(ins[4], s, 0, s.dv) << ", "
     << ref(ins[5]) << tail;
  return success();
}


std::string Emitter::attentionArg(Value v, const AttentionShape &s, int64_t column,
                                  int64_t headSize, std::string ptr) {
  if (ptr.empty())
    ptr = ref(v);
  ArrayRef<int64_t> d = tensor(v).getShape();
  if (!s.tokenMajor)
    return llvm::formatv("{0}, AttentionStrides{{{1}LL, {2}LL, {3}LL}", ptr, d[1] * d[2] * d[3],
                         d[2] * d[3], d[3])
        .str();
  if (column)
    ptr = "(" + ptr + " + " + std::to_string(column) + ")";
  return llvm::formatv("{0}, AttentionStrides{{{1}LL, {2}LL, {3}LL}", ptr, d[1] * d[2], headSize,
                       d[2])
      .str();
}

std::string Emitter::attentionBias(Value bias) {
  if (!bias)
    return "(const " + floatType(true) + " *)nullptr, AttentionStrides{0LL, 0LL, 0LL}";
  ArrayRef<int64_t> d = tensor(bias).getShape();
  auto stride = [&](int dim, int64_t s) { return d[dim] == 1 ? int64_t(0) : s; };
  return llvm::formatv("{0}, AttentionStrides{{{1}LL, {2}LL, {3}LL}", ref(bias),
                       stride(0, d[1] * d[2] * d[3]), stride(1, d[2] * d[3]), stride(2, d[3]))
      .str();
}
