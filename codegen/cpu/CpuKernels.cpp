//===- CpuKernels.cpp - the CPU step's kernels, from the tcck dialect -----===//
//
// CpuEmitter's kernels: the C++ of each kernel of the step lowered to
// kernels (tcc-lower-to-kernels), as calls of runtime/cpu/kernels.h and loop
// nests. The frame is the base's (StepEmitter.cpp) and CpuStep.cpp's.
//
//===----------------------------------------------------------------------===//

#include "codegen/cpu/CpuEmitter.h"
#include "codegen/FusedLoopWriter.h"
#include "runtime/tcc_random.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::tcc;
using namespace mlir::tcc::codegen;

/// One kernel of the CPU step: the text the CPU target's step runs for it,
/// over the arena views the lowering made (the same calls of
/// runtime/cpu/kernels.h the planned ops used to get).
LogicalResult CpuEmitter::emitKernel(Operation *op) {
  auto flag = [](bool t) { return t ? "true" : "false"; };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<tcck::ViewOp>([&](tcck::ViewOp v) -> LogicalResult {
        define(v.getResult());
        return success();
      })
      .Case<tcck::GlobalOp>([&](tcck::GlobalOp c) -> LogicalResult {
        auto value = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!value)
          return c.emitOpError("the CPU step needs a dense value");
        Type elt = value.getElementType();
        std::string name = "c" + std::to_string(nextId++);
        g << constantArray("static const ", ctype(elt), name, value);
        Buffer b;
        b.name = name;
        b.type = ctype(elt);
        b.inArena = false;
        buffers[c.getResult()] = b;
        return success();
      })
      .Case<tcck::AliasOp>([&](tcck::AliasOp a) -> LogicalResult {
        buffers[a.getResult()] = buffers.lookup(a.getSource());
        return success();
      })
      .Case<tcck::FillOp>([&](tcck::FillOp f) -> LogicalResult {
        Type elt = tensor(f.getOut()).getElementType();
        auto value = cast<TypedAttr>(f.getValue());
        os << "  fill(" << ref(f.getOut()) << ", " << numel(f.getOut()) << "LL, (" << ctype(elt)
           << ")" << literal(value, value.getType()) << ");\n";
        return success();
      })
      .Case<tcck::SeedOp>([&](tcck::SeedOp s) -> LogicalResult {
        os << "  " << ref(s.getOut()) << "[0] = (F)grad_scale;\n";
        return success();
      })
      .Case<tcck::CopyOp>([&](tcck::CopyOp c) -> LogicalResult {
        os << "  copy(" << ref(c.getOut()) << ", " << ref(c.getIn()) << ", " << numel(c.getOut())
           << "LL);\n";
        return success();
      })
      .Case<tcck::StoreOp>([&](tcck::StoreOp s) -> LogicalResult {
        auto t = tensor(s.getValue());
        os << "  std::memcpy((arena + " << s.getSlot() << "ULL), " << ref(s.getValue()) << ", "
           << t.getNumElements() * elementBytes(t.getElementType()) << "ULL);\n";
        return success();
      })
      .Case<tcck::AccumulateOp>([&](tcck::AccumulateOp a) -> LogicalResult {
        os << "  { F *acc = (F *)(arena + " << a.getSlot() << "ULL); const F *g = "
           << ref(a.getValue()) << "; for (int64_t i = 0; i < " << numel(a.getValue())
           << "LL; ++i) acc[i] += g[i]; }\n";
        return success();
      })
      .Case<tcck::AdvanceRngOp>([&](tcck::AdvanceRngOp r) -> LogicalResult {
        const Buffer &state = buffers.lookup(r.getState());
        if (state.inArena)
          os << "  ((int64_t *)(arena + " << state.offset << "ULL))[1] += 1;\n";
        else // tcc-translate: an argument of the function
          os << "  ((int64_t *)" << state.name << ")[1] += 1;\n";
        return success();
      })
      .Case<tcck::MarkOp>([&](tcck::MarkOp m) -> LogicalResult {
        recordMark(m, m.getLabel().str());
        os << markText(opLabels.size());
        return success();
      })
      .Case<tcck::ElementwiseOp>([&](tcck::ElementwiseOp e) { return emitElementwise(e); })
      .Case<tcck::MatMulOp>([&](tcck::MatMulOp m) -> LogicalResult {
        if (!m.getEpilogue().empty())
          return emitGemmEpilogue(m);
        Value a = m.getLhs(), b = m.getRhs();
        os << "  matmul(" << ref(m.getOuts()[0]) << ", " << ref(a) << ", " << shape(a) << ", "
           << ref(b) << ", " << shape(b);
        if (m.getTransLhs() || m.getTransRhs())
          os << ", " << flag(m.getTransLhs()) << ", " << flag(m.getTransRhs());
        os << ");\n";
        return success();
      })
      .Case<tcck::LoopOp>([&](tcck::LoopOp l) { return emitLoop(l); })
      .Case<tcck::CopyLoopOp>([&](tcck::CopyLoopOp l) { return emitCopyLoop(l); })
      .Case<tcck::CallOp>([&](tcck::CallOp c) { return emitLibraryCall(c); })
      .Default([&](Operation *o) -> LogicalResult {
        return o->emitOpError("the CPU target has no code for this kernel");
      });
}

/// One loop nest over the fusion's loop shape; every op of the body becomes
/// a scalar expression (the same scalar functions the unfused kernels
/// apply), inputs are read with their broadcast index, outputs written once.
///
/// With row reductions (a reduce over the last axis whose result later ops
/// read: softmax, LayerNorm and their backward passes) the nest is a loop
/// over rows with one pass over the row per stage (FusedLoopWriter). Other
/// reductions accumulate (in double, in the order the reduce kernel sums)
/// across the whole nest; sums and means are computed as the reduce kernel
/// computes them, so the fused step is bit-identical to the unfused one.
class CpuEmitter::LoopWriter final : public FusedLoopWriter {
public:
  LoopWriter(CpuEmitter &e, tcck::LoopOp loop, const LoopFusion &lf)
      : FusedLoopWriter(loop, lf, e.os), e(e) {}

  LogicalResult write() {
    out << "  {\n";
    declareReductions();
    // Rows, or elements, split across the step's threads
    // (runtime/cpu/threads.h) when nothing accumulates across them: each
    // row or element is computed as on one thread, so the results do not
    // depend on the thread count. About 16K elements per chunk at least.
    parallel = acc.empty();
    const int64_t grain = lf.rows ? std::max<int64_t>(1, kGrainElements / std::max<int64_t>(rowLength, 1))
                                  : kGrainElements;
    if (parallel)
      out << "  parallel_for(" << (lf.rows ? rowCount : elements) << "LL, " << grain
          << "LL, [&](int64_t lo, int64_t hi) {\n";
    if (lf.rows)
      out << "  for (int64_t row = " << (parallel ? "lo" : "0") << "; row < "
          << (parallel ? std::string("hi") : std::to_string(rowCount) + "LL") << "; ++row) {\n"
          << "    const int64_t row0 = row * " << rowLength << "LL;\n";
    if (failed(writePasses()))
      return failure();
    if (lf.rows)
      out << "  }\n";
    if (parallel)
      out << "  });\n";
    finishReductions();
    out << "  }\n";
    return success();
  }

private:
  /// The reductions across the whole nest: their accumulators, in double,
  /// laid out as their outputs.
  void declareReductions() {
    for (Operation &op : body.without_terminator())
      if (kindOf(op) == Kind::Reduction && isResult(op.getResult(0))) {
        acc[&op] = fresh("acc");
        out << "  std::vector<double> " << acc[&op] << "("
            << std::max<int64_t>(output(op.getResult(0)).getNumElements(), 1) << ", 0.0);\n";
      }
  }
  /// Their results, as the reduce kernel computes them.
  void finishReductions() {
    for (Operation &op : body.without_terminator()) {
      Value r = op.getResult(0);
      if (kindOf(op) != Kind::Reduction || !isResult(r))
        continue;
      int64_t outN = output(r).getNumElements();
      int64_t count = outN ? elements / outN : 0;
      std::string ty = e.ctype(r.getType());
      out << "  for (int64_t j = 0; j < " << outN << "LL; ++j) " << result(r)
          << "[j] = detail::conv<" << ty << ">("
          << (cast<tcck::ReduceOp>(op).getMean()
                  ? (count == 0 ? std::string("std::numeric_limits<double>::quiet_NaN()")
                                : acc[&op] + "[j] * (1.0 / (double)" + std::to_string(count) +
                                      ")")
                  : acc[&op] + "[j]")
          << ");\n";
    }
  }
  MemRefType output(Value r) {
    return cast<MemRefType>(loop.getOuts()[resultIndex.lookup(r)].getType());
  }
  std::string result(Value r) { return e.ref(loop.getOuts()[resultIndex.lookup(r)]); }

  std::string fresh(StringRef prefix) override {
    return prefix.str() + std::to_string(e.nextId++);
  }
  std::string computeType(Type elt) override { return e.ctype(elt); }
  LogicalResult local(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                      const std::string &name, StringRef indent) override {
    return e.scalarLocal(op, scalar, name, indent, out);
  }
  std::string rowStatistic(Operation &op, const std::string &sum, const std::string &ty) override {
    return "detail::conv<" + ty + ">(" + sum +
           (cast<tcck::ReduceOp>(op).getMean()
                ? " * (1.0 / (double)" + std::to_string(rowLength) + ")"
                : std::string()) +
           ")";
  }
  std::string load(Value arg, const std::string &at) override {
    return e.ref(loop.getIns()[cast<BlockArgument>(arg).getArgNumber()]) + "[" + at + "]";
  }
  void storeRow(Value r, const std::string &x) override {
    out << "    " << result(r) << "[row] = " << x << ";\n";
  }
  void declareRowAccumulator(const std::string &sum) override {
    out << "    double " << sum << " = 0.0;\n";
  }
  std::string openElements(const llvm::DenseSet<Value> &needed,
                           llvm::DenseMap<Value, std::string> &scalar) override {
    std::string indent = lf.rows ? "      " : "    ";
    if (lf.rows)
      out << "    for (int64_t c = 0; c < " << rowLength << "LL; ++c) {\n"
          << "      const int64_t i = row0 + c;\n      (void)i;\n";
    else if (parallel)
      out << "    for (int64_t i = lo; i < hi; ++i) {\n";
    else
      out << "    for (int64_t i = 0; i < " << elements << "LL; ++i) {\n";
    for (Value arg : body.getArguments()) {
      if (!needed.contains(arg))
        continue;
      std::string name = fresh("e");
      std::string at = elementIndex(arg);
      out << indent << "const " << e.ctype(arg.getType()) << " " << name << " = "
          << load(arg, at) << ";\n";
      scalar[arg] = name;
    }
    return indent;
  }
  void storeElement(Value r, const std::string &x, StringRef indent) override {
    out << indent << result(r) << "[i] = " << x << ";\n";
  }
  void accumulate(Operation &op, const std::string &x, StringRef indent) override {
    if (kindOf(op) == Kind::RowReduction) {
      out << indent << rowAcc[&op] << " += (double)" << x << ";\n";
      return;
    }
    Value r = op.getResult(0);
    if (!isResult(r)) // read by nothing
      return;
    // The output's element at this point of the space: its map drops (or
    // reads at 0) the reduced dimensions.
    out << indent << acc[&op] << "["
        << mapIndexOf(loop.getOutputMap(resultIndex.lookup(r)), output(r).getShape(), shape,
                      outStrides, "i")
        << "] += (double)" << x << ";\n";
  }
  void closeElements(ArrayRef<Operation *>) override { out << "    }\n"; }

  static constexpr int64_t kGrainElements = 16384;
  CpuEmitter &e;
  llvm::DenseMap<Operation *, std::string> acc;
  bool parallel = false;
};

LogicalResult CpuEmitter::emitLoop(tcck::LoopOp loop) {
  // The loop structure tcc-lower-to-kernels recorded: each body op's role
  // and the pass that computes it.
  LoopFusion lf = loopStructure(loop);
  return LoopWriter(*this, loop, lf).write();
}

/// Each #tcck.copy as a loop nest over its space: the destination's element
/// at its flat index gets the source's (a strided copy when the maps are
/// linear, as for the heads' split and merge).
LogicalResult CpuEmitter::emitCopyLoop(tcck::CopyLoopOp loop) {
  os << "  {\n";
  for (Attribute a : loop.getCopies()) {
    auto copy = cast<tcck::CopyAttr>(a);
    Value out = loop.getOuts()[copy.getOut()];
    const Buffer &dst = buffers.count(out) ? buffers[out] : define(out);
    SmallVector<std::string> dims;
    std::string indent = "  ";
    for (auto [d, size] : llvm::enumerate(copy.getShape().asArrayRef())) {
      if (size == 1) {
        dims.push_back("0LL");
        continue;
      }
      dims.push_back("i" + std::to_string(d));
      os << indent << "for (int64_t " << dims.back() << " = 0; " << dims.back() << " < " << size
         << "LL; ++" << dims.back() << ")\n";
      indent += "  ";
    }
    os << indent << dst.name << "[" << flatIndex(copy.getTo(), dims)
       << "] = " << ref(loop.getIns()[copy.getIn()]) << "[" << flatIndex(copy.getFrom(), dims)
       << "];\n";
  }
  os << "  }\n";
  return success();
}

LogicalResult CpuEmitter::emitGemmEpilogue(tcck::MatMulOp mm) {
  Block &body = mm.getEpilogue().front();
  ArrayRef<int64_t> outShape = tensor(mm.getOuts()[0]).getShape();
  SmallVector<int64_t> outStrides(outShape.size(), 1);
  for (int64_t d = (int64_t)outShape.size() - 2; d >= 0; --d)
    outStrides[d] = outStrides[d + 1] * outShape[d + 1];
  SmallVector<std::string> outs;
  for (Value r : mm.getOuts())
    outs.push_back(ref(r));
  auto flag = [](bool t) { return t ? "true" : "false"; };
  // The epilogue gets one row of the product at a time (its elements are
  // consecutive in the output, the row's length the output's last
  // dimension): each other input is read at its row start, plus k when its
  // last dimension is the row's, or at the row start only when it is
  // broadcast along the row.
  std::string epi = "epi" + std::to_string(nextId++);
  os << "  { auto " << epi
     << " = [&](int64_t base, const double *row, int64_t count) {\n"
     << "    const int64_t i = base;\n";
  int64_t rowLength = outShape.empty() ? 1 : outShape.back();
  llvm::DenseMap<Value, std::string> rowStart;
  SmallVector<std::pair<Value, std::string>> loads;
  // The region's first argument is the product; the others are the
  // epilogue's inputs.
  for (Operation &op : body.without_terminator())
    for (Value v : op.getOperands()) {
      auto arg = dyn_cast<BlockArgument>(v);
      if (!arg || arg.getArgNumber() == 0 || rowStart.count(v))
        continue;
      unsigned k = arg.getArgNumber() - 1;
      Value input = mm.getEpilogueIns()[k];
      AffineMap map = mm.getEpilogueMap(k);
      // Along the row (its last dimension is the row's), or once per row.
      bool along = readsAlongLast(map, outShape);
      if (!along && rowLength != 1 && !outShape.empty() &&
          map.isFunctionOfDim(outShape.size() - 1))
        return mm.emitOpError("reads epilogue input ")
               << k << " across the product's rows, not along them or once per row";
      std::string j = "j" + std::to_string(nextId++);
      os << "    const int64_t " << j << " = "
         << readIndex(map, tensor(input).getShape(), outShape, outStrides) << ";\n";
      rowStart[v] = j;
      loads.push_back({v, ref(input) + "[" + j + (along ? " + k]" : "]")});
    }
  os << "    (void)i;\n"
     << "    for (int64_t k = 0; k < count; ++k) {\n"
     << "    const F c = static_cast<F>(row[k]);\n";
  llvm::DenseMap<Value, std::string> scalar;
  scalar[body.getArgument(0)] = "c";
  for (auto &[v, load] : loads) {
    std::string name = "e" + std::to_string(nextId++);
    os << "    const " << ctype(v.getType()) << " " << name
       << " = " << load << ";\n";
    scalar[v] = name;
  }
  for (Operation &op : body.without_terminator())
    if (failed(scalarLocal(op, scalar, "e" + std::to_string(nextId++), "    ", os)))
      return failure();
  for (auto [k, v] : llvm::enumerate(cast<tcck::YieldOp>(body.getTerminator()).getValues()))
    os << "    " << outs[k] << "[base + k] = " << scalar.lookup(v) << ";\n";
  os << "    }\n  };\n";
  os << "  matmul_rows(" << ref(mm.getLhs()) << ", " << shape(mm.getLhs()) << ", "
     << ref(mm.getRhs()) << ", " << shape(mm.getRhs()) << ", " << flag(mm.getTransLhs()) << ", "
     << flag(mm.getTransRhs()) << ", RowStore::of(" << epi << ")); }\n";
  return success();
}
