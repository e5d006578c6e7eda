//===- CudaKernels.cpp - the CUDA step's kernels, from the tcck dialect ---===//
//
// CudaEmitter's kernels: the CUDA C++ of each kernel of the step lowered to
// kernels (tcc-lower-to-kernels), as calls of the CUDA kernel library
// (runtime/cuda/kernels.cuh), cuBLASLt GEMMs (runtime/cuda/gemm.cuh) and
// generated __global__ kernels, which go to the step's kernels unit
// (step_kernels.cu). Each buffer's element type is its storage type: fp16
// (`__half`), or fp32 where the plan keeps it. The frame is the base's
// (StepEmitter.cpp) and CudaStep.cpp's.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "codegen/FusedLoopWriter.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

using namespace mlir;
using namespace mlir::tcc;
using namespace mlir::tcc::codegen;

namespace {
using Kind = LoopFusion::Kind;

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Whether only kernels that add into it use the view `v`: an accumulator
/// that a GEMM or a reduce adds a gradient into, which the step also
/// returns (maybe through aliases).
bool onlyAccumulatedInto(Value v) {
  bool added = false;
  std::function<bool(Value)> ok = [&](Value x) {
    return llvm::all_of(x.getUsers(), [&](Operation *u) {
      if (isa<func::ReturnOp, tcck::MarkOp>(u))
        return true;
      if (auto alias = dyn_cast<tcck::AliasOp>(u))
        return ok(alias.getResult());
      added = true;
      if (auto mm = dyn_cast<tcck::MatMulOp>(u))
        return bool(mm.getAccumulate());
      auto call = dyn_cast<tcck::CallOp>(u);
      return call && call.getOptions().get("accumulate");
    });
  };
  return ok(v) && added;
}
} // namespace

LogicalResult CudaEmitter::emitKernel(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<tcck::ViewOp>([&](tcck::ViewOp v) -> LogicalResult {
        // An accumulator that a GEMM or a reduce adds into is named by its
        // address; other views get a local.
        if (onlyAccumulatedInto(v.getResult())) {
          Buffer b;
          b.type = "float";
          b.offset = v.getOffset();
          b.bytes = tensor(v.getResult()).getNumElements() * 4;
          b.name = "(float *)(arena + " + std::to_string(v.getOffset()) + "ULL)";
          buffers[v.getResult()] = b;
          return success();
        }
        define(v.getResult());
        return success();
      })
      .Case<tcck::GlobalOp>([&](tcck::GlobalOp c) -> LogicalResult {
        // Static arrays, copied to the device after the arena when the arena
        // is opened.
        auto value = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!value)
          return c.emitOpError("the CUDA step needs a dense value");
        Type elt = value.getElementType();
        std::string name = "c" + std::to_string(nextId++);
        int64_t n = tensor(c.getResult()).getNumElements();
        g << constantArray("alignas(16) static const ", ctype(elt), name, value);
        Buffer b;
        b.type = isa<FloatType>(elt) ? "float" : ctype(elt);
        b.inArena = false;
        uint64_t bytes = std::max<int64_t>(n, 1) * elementBytes(elt);
        constTable += "    {" + name + ", " + std::to_string(bytes) + "ULL, " +
                      std::to_string(constBytes) + "ULL},\n";
        b.name = name + "_d";
        os << "  const " << b.type << " *" << b.name << " = (const " << b.type << " *)(arena + "
           << arena + constBytes << "ULL);\n";
        constBytes += (bytes + 63) / 64 * 64;
        buffers[c.getResult()] = b;
        return success();
      })
      .Case<tcck::AliasOp>([&](tcck::AliasOp a) -> LogicalResult {
        buffers[a.getResult()] = buffers.lookup(a.getSource());
        return success();
      })
      .Case<tcck::FillOp>([&](tcck::FillOp f) -> LogicalResult {
        // The CUDA fill takes its value as a double, converted per element;
        // a mask's ones are a byte.
        Type elt = tensor(f.getOut()).getElementType();
        auto value = cast<TypedAttr>(f.getValue());
        os << "  fill(" << ref(f.getOut()) << ", " << numel(f.getOut()) << "LL, ("
           << (elt.isInteger(1) ? "uint8_t" : "double") << ")" << literal(value, value.getType())
           << ");\n";
        return success();
      })
      .Case<tcck::SeedOp>([&](tcck::SeedOp s) -> LogicalResult {
        // Outside the micro-step's graph: the fixed half sets it before each
        // launch, as the loss scale may change between them.
        // By its arena address (seed_fill has no locals), or by name when
        // it is an argument of a translated function (tcc-translate).
        const Buffer &b = buffers.lookup(s.getOut());
        std::string out = b.inArena ? "(" + b.type + " *)(arena + " + std::to_string(b.offset) + "ULL)"
                                    : b.name;
        seedFill = "  fill(" + out + ", 1LL, grad_scale);\n";
        return success();
      })
      .Case<tcck::CopyOp>([&](tcck::CopyOp c) -> LogicalResult {
        os << "  copy(" << ref(c.getOut()) << ", " << ref(c.getIn()) << ", " << numel(c.getOut())
           << "LL);\n";
        return success();
      })
      .Case<tcck::StoreOp>([&](tcck::StoreOp s) -> LogicalResult {
        // Outputs are fp32 in their slots.
        Type elt = tensor(s.getValue()).getElementType();
        std::string ty = isa<FloatType>(elt) ? "float" : ctype(elt);
        os << "  copy((" << ty << " *)(arena + " << s.getSlot() << "ULL), " << ref(s.getValue())
           << ", " << numel(s.getValue()) << "LL);\n";
        return success();
      })
      .Case<tcck::AccumulateOp>([&](tcck::AccumulateOp a) -> LogicalResult {
        os << "  accumulate((float *)(arena + " << a.getSlot() << "ULL), " << ref(a.getValue())
           << ", " << numel(a.getValue()) << "LL);\n";
        return success();
      })
      .Case<tcck::HostAccumulateOp>([&](tcck::HostAccumulateOp h) -> LogicalResult {
        // The fixed half's table of copies (HostGradRow: host offset,
        // elements, whether the gradient is fp16), in the order they are
        // queued.
        if (h.getCopy() != static_cast<uint64_t>(hostGradCount))
          return h.emitOpError("is copy ") << h.getCopy() << ", but " << hostGradCount
                                           << " copies come before it";
        bool half = buffers.lookup(h.getValue()).type == "__half";
        hostGradTable += "    {" + std::to_string(h.getHostSlot()) + "ULL, " +
                         numel(h.getValue()) + "LL, " + (half ? "1" : "0") + "},\n";
        os << "  host_grad_copy(" << hostGradCount++ << ", " << ref(h.getValue()) << ");\n";
        return success();
      })
      .Case<tcck::WaitHostCopyOp>([&](tcck::WaitHostCopyOp w) -> LogicalResult {
        os << "  host_grad_wait(" << w.getCopy() << ");\n";
        return success();
      })
      .Case<tcck::SwapOutOp>([&](tcck::SwapOutOp s) -> LogicalResult {
        // The fixed half's table of swaps (SwapRow: host offset, bytes),
        // by swap number, in the order the copies out are queued.
        if (s.getSwap() != static_cast<uint64_t>(swapCount))
          return s.emitOpError("is swap ") << s.getSwap() << ", but " << swapCount
                                           << " swaps come before it";
        auto t = cast<MemRefType>(s.getValue().getType());
        // As the plan sizes buffers (bufferBytes): a boolean is a byte.
        int64_t bytes = t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
        swapTable += "    {" + std::to_string(s.getHostSlot()) + "ULL, " + std::to_string(bytes) + "ULL},\n";
        ++swapCount;
        os << "  swap_out(" << s.getSwap() << ", " << ref(s.getValue()) << ");\n";
        return success();
      })
      .Case<tcck::SwapInOp>([&](tcck::SwapInOp s) -> LogicalResult {
        if (s.getSwap() >= static_cast<uint64_t>(swapCount))
          return s.emitOpError("copies back swap ") << s.getSwap() << " before its copy out";
        os << "  swap_in(" << s.getSwap() << ", " << ref(s.getValue()) << ");\n";
        return success();
      })
      .Case<tcck::WaitSwapOutOp>([&](tcck::WaitSwapOutOp w) -> LogicalResult {
        os << "  swap_out_wait(" << w.getSwap() << ");\n";
        return success();
      })
      .Case<tcck::WaitSwapInOp>([&](tcck::WaitSwapInOp w) -> LogicalResult {
        os << "  swap_in_wait(" << w.getSwap() << ");\n";
        return success();
      })
      .Case<tcck::AwaitWeightsOp>([&](tcck::AwaitWeightsOp w) -> LogicalResult {
        os << "  host_await(" << w.getParam() << "); // " << w.getName() << "\n";
        return success();
      })
      .Case<tcck::AwaitUpdateOp>([&](tcck::AwaitUpdateOp) -> LogicalResult {
        os << "  host_await_all();\n";
        return success();
      })
      .Case<tcck::GradReadyOp>([&](tcck::GradReadyOp r) -> LogicalResult {
        os << "  grad_ready((float *)(arena + " << r.getSlot() << "ULL), " << r.getElements()
           << "LL);\n";
        return success();
      })
      .Case<tcck::AdvanceRngOp>([&](tcck::AdvanceRngOp r) -> LogicalResult {
        const Buffer &state = buffers.lookup(r.getState());
        if (state.inArena)
          os << "  advance_rng((int64_t *)(arena + " << state.offset << "ULL));\n";
        else // tcc-translate: an argument of the function
          os << "  advance_rng((int64_t *)" << state.name << ");\n";
        return success();
      })
      .Case<tcck::MarkOp>([&](tcck::MarkOp m) -> LogicalResult {
        // The op table names what the op launched (a generated kernel, a
        // cuBLASLt call) before the op.
        recordMark(m, launched.empty() ? m.getLabel().str()
                                       : launched + ": " + m.getLabel().str());
        launched.clear();
        os << markText(opLabels.size());
        return success();
      })
      .Case<tcck::ElementwiseOp>([&](tcck::ElementwiseOp e) { return emitElementwise(e); })
      .Case<tcck::MatMulOp>([&](tcck::MatMulOp m) -> LogicalResult {
        if (!m.getEpilogue().empty())
          return emitCublasLtEpilogue(m);
        return emitMatMul(m);
      })
      .Case<tcck::LoopOp>([&](tcck::LoopOp l) -> LogicalResult {
        LoopFusion lf = loopStructure(l);
        bool reduces = llvm::any_of(lf.kind, [](auto &k) {
          return k.second == Kind::RowReduction || k.second == Kind::Reduction;
        });
        return reduces ? emitRowLoop(l, lf) : emitLoop(l);
      })
      .Case<tcck::CopyLoopOp>([&](tcck::CopyLoopOp l) { return emitCopyLoop(l); })
      .Case<tcck::CallOp>([&](tcck::CallOp c) { return emitCall(c); })
      .Default([&](Operation *o) -> LogicalResult {
        return o->emitOpError("the CUDA target has no code for this kernel");
      });
}

std::string CudaEmitter::restrictFor(ValueRange ins, ValueRange outs, Value v) {
  auto arenaOffset = [&](Value x) -> int64_t {
    auto it = buffers.find(x);
    return it != buffers.end() && it->second.inArena ? (int64_t)it->second.offset : -1;
  };
  int64_t at = arenaOffset(v);
  if (at < 0)
    return "__restrict__ ";
  bool isOut = llvm::is_contained(outs, v);
  for (Value other : isOut ? ins : outs)
    if (arenaOffset(other) == at)
      return "";
  return "__restrict__ ";
}

LogicalResult CudaEmitter::emitMatMul(tcck::MatMulOp m) {
  auto flag = [](bool t) { return t ? "true" : "false"; };
  Value result = m.getOuts()[0], a = m.getLhs(), b = m.getRhs();
  bool ta = m.getTransLhs(), tb = m.getTransRhs();
  for (Value v : {a, b})
    if (buffers.lookup(v).type != "__half")
      return m.emitOpError("the CUDA target multiplies fp16 tensors; an operand is stored as ")
             << buffers.lookup(v).type;
  const Buffer &out = buffers.lookup(result);
  if (m.getAccumulate()) { // a weight's gradient, added into its accumulator
    launched = "cuBLASLt matmul_acc";
    os << "  if (matmul_acc(" << nextGemm++ << ", " << out.name << ", " << ref(a) << ", "
       << shape(a) << ", " << flag(ta) << ", " << ref(b) << ", " << shape(b) << ", " << flag(tb)
       << ") != 0) return gemm_failed();\n";
    return success();
  }
  // A product of two vectors is a scalar, which the CUDA target keeps in
  // fp32: a dot-product kernel computes it.
  if (out.type == "float" && tensor(result).getRank() == 0 && tensor(a).getRank() == 1 &&
      tensor(b).getRank() == 1) {
    launched = "dot";
    os << "  dot(" << out.name << ", " << ref(a) << ", " << ref(b) << ", "
       << tensor(a).getNumElements() << "LL);\n";
    return success();
  }
  // An fp32 product (keepsF32: a gradient for an accumulator in host
  // memory): as matmul_acc adds it into a device accumulator, from zero.
  if (out.type == "float") {
    launched = "cuBLASLt matmul_acc";
    os << "  cudaMemsetAsync(" << out.name << ", 0, " << out.bytes << "ULL, stream());\n"
       << "  if (matmul_acc(" << nextGemm++ << ", " << out.name << ", " << ref(a) << ", "
       << shape(a) << ", " << flag(ta) << ", " << ref(b) << ", " << shape(b) << ", " << flag(tb)
       << ") != 0) return gemm_failed();\n";
    return success();
  }
  if (out.type != "__half")
    return m.emitOpError("the CUDA target writes GEMM results in fp16");
  launched = "cuBLASLt matmul";
  os << "  if (matmul(" << nextGemm++ << ", " << out.name << ", " << ref(a) << ", " << shape(a)
     << ", " << flag(ta) << ", " << ref(b) << ", " << shape(b) << ", " << flag(tb)
     << ") != 0) return gemm_failed();\n";
  return success();
}

LogicalResult CudaEmitter::emitCublasLtEpilogue(tcck::MatMulOp mm) {
  // What cuBLASLt computes, as tcc-lower-to-kernels decided it.
  tcck::CublasLtAttr e = mm.getCublasltAttr();
  if (!e)
    return mm.emitOpError("has an epilogue without a cuBLASLt decision (tcc-lower-to-kernels "
                          "records one for the CUDA target)");
  Value bias = mm.getEpilogueIns()[e.getBias()];
  Value residual = e.getResidual() >= 0 ? Value(mm.getEpilogueIns()[e.getResidual()]) : Value();
  std::string out = ref(mm.getOuts()[e.getResult()]);
  std::string aux = e.getAux() >= 0 ? ref(mm.getOuts()[e.getAux()]) : std::string("nullptr");
  for (Value r : mm.getOuts())
    if (buffers.lookup(r).type != "__half")
      return mm.emitOpError("the CUDA target writes GEMM results in fp16");
  for (Value v : {Value(mm.getLhs()), Value(mm.getRhs()), bias, residual})
    if (v && buffers.lookup(v).type != "__half")
      return mm.emitOpError("cuBLASLt's epilogue reads fp16 operands; one is stored as ")
             << buffers.lookup(v).type;
  auto flag = [](bool t) { return t ? "true" : "false"; };
  launched = "cuBLASLt matmul_epilogue";
  os << "  if (matmul_epilogue(" << nextGemm++ << ", " << out << ", " << ref(mm.getLhs()) << ", "
     << shape(mm.getLhs()) << ", " << flag(mm.getTransLhs()) << ", " << ref(mm.getRhs()) << ", "
     << shape(mm.getRhs()) << ", " << flag(mm.getTransRhs()) << ", " << ref(bias) << ", "
     << (residual ? ref(residual) : std::string("nullptr")) << ", " << aux << ", "
     << flag(e.getGelu()) << ") != 0) return gemm_failed();\n";
  return success();
}

LogicalResult CudaEmitter::emitCall(tcck::CallOp c) {
  ValueRange ins = c.getIns(), outs = c.getOuts();
  switch (c.getCallee()) {
  case tcck::LibraryCall::Gemm:
    return c.emitOpError("reaches the CUDA emitter; tcc-legalize lowers Gemm to matmul first");
  case tcck::LibraryCall::Reduce:
    if (!c.getOptions().get("accumulate"))
      break;
    // Sums added into the fp32 accumulator `out`.
    os << "  reduce(" << ref(outs[0]) << ", " << ref(ins[0]) << ", " << shape(ins[0]) << ", "
       << cast<IntegerAttr>(c.getOptions().get("mask")).getInt() << "u, false, true);\n";
    return success();
  default:
    break;
  }
  return emitLibraryCall(c);
}

/// A copy loop as one kernel: a grid-stride loop over the copies' spaces one
/// after another; each element's coordinates in its copy's space give the
/// flat indices of its source and destination (#tcck.copy's maps). Kernel
/// parameters o<k> are the outputs, a<k> the inputs.
LogicalResult CudaEmitter::emitCopyLoop(tcck::CopyLoopOp loop) {
  ValueRange inputs = loop.getIns(), results = loop.getOuts();
  SmallVector<std::string> params, args, outTypes;
  for (auto [k, r] : llvm::enumerate(results)) {
    const Buffer &b = buffers.count(r) ? buffers[r] : define(r);
    outTypes.push_back(b.type);
    params.push_back(b.type + " *" + restrictFor(inputs, results, r) + "o" + std::to_string(k));
    args.push_back(b.name);
  }
  for (auto [k, input] : llvm::enumerate(inputs)) {
    params.push_back("const " + buffers.lookup(input).type + " *" +
                     restrictFor(inputs, results, input) + "a" + std::to_string(k));
    args.push_back(buffers.lookup(input).name);
  }
  int64_t n = 0;
  for (Attribute a : loop.getCopies())
    n += ShapedType::getNumElements(cast<tcck::CopyAttr>(a).getShape().asArrayRef());
  const std::string named = "move" + std::to_string(nextKernel++);
  std::string text;
  llvm::raw_string_ostream ks(text);
  ks << "// " << loop->getName() << " (a copy loop) at " << loop->getLoc() << "\n"
     << "__global__ void __launch_bounds__(256) " << named << "(";
  for (auto [k, p] : llvm::enumerate(params))
    ks << (k ? ", " : "") << p;
  ks << ") {\n  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < " << n
     << "LL; i += (int64_t)gridDim.x * blockDim.x) {\n";
  int64_t start = 0;
  for (auto [k, a] : llvm::enumerate(loop.getCopies())) {
    auto copy = cast<tcck::CopyAttr>(a);
    ArrayRef<int64_t> shape = copy.getShape().asArrayRef();
    int64_t count = ShapedType::getNumElements(shape);
    ks << "    " << (k ? "else " : "") << "if (i < " << start + count << "LL) {\n"
       << "      int64_t j = i - " << start << "LL;\n";
    start += count;
    // The coordinates, innermost first.
    SmallVector<std::string> dims(shape.size(), "0LL");
    int64_t outer = 0; // the first dimension longer than 1: j itself
    while (outer < (int64_t)shape.size() && shape[outer] == 1)
      ++outer;
    for (int64_t d = (int64_t)shape.size() - 1; d >= outer; --d) {
      if (shape[d] == 1)
        continue;
      dims[d] = "c" + std::to_string(d);
      if (d == outer)
        ks << "      const int64_t " << dims[d] << " = j;\n";
      else
        ks << "      const int64_t " << dims[d] << " = j % " << shape[d] << "LL; j /= " << shape[d]
           << "LL;\n";
    }
    ks << "      o" << copy.getOut() << "[" << flatIndex(copy.getTo(), dims) << "] = conv<"
       << outTypes[copy.getOut()] << ">(ld(a" << copy.getIn() << "["
       << flatIndex(copy.getFrom(), dims) << "]));\n    }\n";
  }
  ks << "  }\n}\n\n";
  const std::string name = addKernel(text, named);
  launched = name;
  os << "  if (" << n << "LL > 0) TCC_LAUNCH(grid_for(" << n << "LL), 256, 0, stream(), " << name
     << ")(";
  for (auto [k, a] : llvm::enumerate(args))
    os << (k ? ", " : "") << a;
  os << ");\n";
  return success();
}

/// One CUDA kernel per elementwise loop: a grid-stride loop over the output;
/// fp16 operands are loaded as float, computed in float and stored once.
/// When the outputs are fp16 and 8 consecutive outputs read either 8
/// consecutive elements of an operand (same shape, or broadcast along outer
/// dimensions with the same innermost one) or one element (broadcast along
/// the innermost dimension), each thread handles 8 outputs: one 16-byte load
/// per fp16 operand row and one 16-byte store per output.
LogicalResult CudaEmitter::emitLoop(tcck::LoopOp loop) {
  Block &body = loop.getBody().front();
  auto yield = cast<tcck::YieldOp>(body.getTerminator());
  ValueRange ins = loop.getIns(), outs = loop.getOuts();
  ArrayRef<int64_t> shape = loop.getSpace();
  for (Value r : outs)
    if (tensor(r).getShape() != shape)
      return loop.emitOpError("results of different shapes cannot share a kernel");
  int64_t n = ShapedType::getNumElements(shape);
  SmallVector<int64_t> outStrides = stridesOf(shape);

  SmallVector<std::string> outTypes, params, args;
  for (auto [k, r] : llvm::enumerate(outs)) {
    const Buffer &b = buffers.lookup(r);
    outTypes.push_back(b.type);
    params.push_back(b.type + " *" + restrictFor(ins, outs, r) + "o" + std::to_string(k));
    args.push_back(b.name);
  }
  // How 8 consecutive outputs read each operand (vector mode).
  enum class Lanes { Row, Splat };
  SmallVector<Lanes> lanes;
  int64_t inner = shape.empty() ? 1 : shape.back();
  bool vec = n > 0 && n % 8 == 0;
  for (const std::string &t : outTypes)
    vec &= t == "__half";
  for (auto [k, input] : llvm::enumerate(ins)) {
    const Buffer &b = buffers.lookup(input);
    params.push_back("const " + b.type + " *" + restrictFor(ins, outs, input) + "a" +
                     std::to_string(k));
    args.push_back(b.name);
    // Along the innermost dimension (8 consecutive elements), or one
    // element for all 8 (its last dimension is a broadcast).
    bool same = loopInputIndex(loop, k, outStrides) == "i";
    bool along = readsAlongLast(loop.getInputMap(k), shape);
    if (same || (along && inner % 8 == 0))
      lanes.push_back(Lanes::Row);
    else if (!along && inner % 8 == 0)
      lanes.push_back(Lanes::Splat);
    else
      vec = false;
  }

  const std::string named = "fusion" + std::to_string(nextKernel++);
  std::string k;
  llvm::raw_string_ostream ks(k);
  ks << "// " << loop->getName() << " at " << loop.getLoc() << "\n";
  ks << "__global__ void __launch_bounds__(256) " << named << "(int64_t n";
  for (const std::string &p : params)
    ks << ", " << p;
  ks << ") {\n";
  llvm::DenseMap<Value, std::string> scalar;
  unsigned id = 0;
  auto bodyText = [&](StringRef indent) -> LogicalResult {
    for (Operation &op : body.without_terminator())
      if (failed(scalarLocal(op, scalar, "e" + std::to_string(id++), indent, ks)))
        return failure();
    return success();
  };
  if (vec) {
    ks << "  const int64_t nv = n / 8;\n"
       << "  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; "
          "v < nv; v += (int64_t)gridDim.x * blockDim.x) {\n"
       << "    const int64_t i = v * 8;\n";
    for (auto [j, input] : llvm::enumerate(ins)) {
      std::string at = loopInputIndex(loop, j, outStrides);
      std::string ty = computeType(body.getArgument(j).getType());
      std::string x = "x" + std::to_string(j), a = "a" + std::to_string(j);
      if (lanes[j] == Lanes::Splat)
        ks << "    " << ty << " " << x << "[8];\n    { const " << ty << " s = ld(" << a << "["
           << at << "]); for (int j = 0; j < 8; ++j) " << x << "[j] = s; }\n";
      else if (buffers.lookup(input).type == "__half")
        ks << "    float " << x << "[8];\n    load8(" << a << " + (" << at << "), " << x
           << ");\n";
      else
        ks << "    " << ty << " " << x << "[8];\n    for (int j = 0; j < 8; ++j) " << x
           << "[j] = ld(" << a << "[(" << at << ") + j]);\n";
    }
    for (unsigned j = 0; j < outs.size(); ++j)
      ks << "    float y" << j << "[8];\n";
    ks << "#pragma unroll\n    for (int j = 0; j < 8; ++j) {\n";
    for (auto [j, arg] : llvm::enumerate(body.getArguments())) {
      std::string e = "e" + std::to_string(id++);
      ks << "      const " << computeType(arg.getType()) << " " << e << " = x"
         << j << "[j];\n";
      scalar[arg] = e;
    }
    if (failed(bodyText("      ")))
      return failure();
    for (auto [j, v] : llvm::enumerate(yield.getValues()))
      ks << "      y" << j << "[j] = (float)" << scalar.lookup(v) << ";\n";
    ks << "    }\n";
    for (unsigned j = 0; j < outs.size(); ++j)
      ks << "    store8(o" << j << " + v * 8, y" << j << ");\n";
    ks << "  }\n}\n\n";
  } else {
    ks << "  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; "
          "i < n; i += (int64_t)gridDim.x * blockDim.x) {\n";
    for (auto [j, pair] : llvm::enumerate(llvm::zip(ins, body.getArguments()))) {
      auto [input, arg] = pair;
      std::string e = "e" + std::to_string(id++);
      ks << "    const " << computeType(arg.getType()) << " " << e << " = ld(a" << j << "["
         << loopInputIndex(loop, j, outStrides) << "]);\n";
      scalar[arg] = e;
    }
    if (failed(bodyText("    ")))
      return failure();
    for (auto [j, v] : llvm::enumerate(yield.getValues()))
      ks << "    o" << j << "[i] = conv<" << outTypes[j] << ">(" << scalar.lookup(v) << ");\n";
    ks << "  }\n}\n\n";
  }
  const std::string name = addKernel(k, named);
  launched = name;
  os << "  if (" << n << "LL > 0) TCC_LAUNCH(grid_for(" << (vec ? n / 8 : n)
     << "LL), 256, 0, stream(), " << name << ")(" << n << "LL";
  for (const std::string &a : args)
    os << ", " << a;
  os << ");\n";
  return success();
}

/// A loop with row reductions (softmax, LayerNorm and their backward
/// passes) as one kernel: one warp per row (one block for rows over 1024),
/// one pass over the row per stage of its structure (FusedLoopWriter). Each
/// thread takes 8 consecutive elements of the row at a time when rows are a
/// multiple of 8 long: fp16 operands and results along the row move 16
/// bytes per load and store (their row starts are multiples of the row
/// length, so 16-byte aligned); others element by element.
class CudaEmitter::RowLoopWriter final : public FusedLoopWriter {
public:
  /// `args`: each body argument's kernel parameter; `results`: each yielded
  /// value's parameter and storage type.
  RowLoopWriter(CudaEmitter &e, tcck::LoopOp loop, const LoopFusion &lf, llvm::raw_ostream &ks,
                llvm::DenseMap<Value, std::string> args,
                llvm::DenseMap<Value, std::pair<std::string, std::string>> results)
      : FusedLoopWriter(loop, lf, ks), e(e), argName(std::move(args)),
        param(std::move(results)), warpRows(rowLength <= 1024) {}

  /// Rows of up to 1024 elements: one warp each (8 per block); longer rows:
  /// one block of 256 threads each.
  bool warpPerRow() const { return warpRows; }
  int64_t rows() const { return rowCount; }

  LogicalResult write(StringRef name, ArrayRef<std::string> params) {
    out << "// " << loop->getName() << " at " << loop.getLoc() << "\n"
        << "// rows of " << rowLength << ": one " << (warpRows ? "warp" : "block")
        << " per row, " << lf.lastPass + 1 << " pass(es) over each\n";
    out << "__global__ void __launch_bounds__(256) " << name << "(int64_t rows";
    for (const std::string &p : params)
      out << ", " << p;
    out << ") {\n";
    if (warpRows)
      out << "  const int lane = threadIdx.x & 31;\n"
          << "  const int64_t nrows = ((int64_t)gridDim.x * blockDim.x) >> 5;\n"
          << "  for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; "
             "row < rows; row += nrows) {\n";
    else
      out << "  __shared__ float sh[32];\n"
          << "  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n";
    out << "    const int64_t row0 = row * " << rowLength << "LL;\n";
    if (failed(writePasses()))
      return failure();
    out << "  }\n}\n\n";
    return success();
  }

private:
  std::string fresh(StringRef prefix) override { return prefix.str() + std::to_string(id++); }
  std::string computeType(Type elt) override { return e.computeType(elt); }
  LogicalResult local(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                      const std::string &name, StringRef indent) override {
    return e.scalarLocal(op, scalar, name, indent, out);
  }
  std::string rowStatistic(Operation &op, const std::string &sum, const std::string &) override {
    return sum + (cast<tcck::ReduceOp>(op).getMean()
                      ? " * (1.0f / (float)" + std::to_string(rowLength) + ")"
                      : std::string());
  }
  std::string load(Value arg, const std::string &at) override {
    return "ld(" + argName[arg] + "[" + at + "])";
  }
  void storeRow(Value r, const std::string &x) override {
    out << "    if (" << (warpRows ? "lane == 0" : "threadIdx.x == 0") << ") " << param[r].first
        << "[row] = conv<" << param[r].second << ">(" << x << ");\n";
  }
  void declareRowAccumulator(const std::string &sum) override {
    out << "    float " << sum << " = 0.0f;\n";
  }
  std::string openElements(const llvm::DenseSet<Value> &needed,
                           llvm::DenseMap<Value, std::string> &scalar) override {
    const std::string first = warpRows ? "lane" : "threadIdx.x";
    const std::string step = warpRows ? "32" : "blockDim.x";
    vec = rowLength % 8 == 0;
    std::string indent = vec ? "        " : "      ";
    out << "    for (int64_t c = " << first << (vec ? " * 8" : "") << "; c < " << rowLength
        << "LL; c += " << step << (vec ? " * 8" : "") << ") {\n";
    SmallVector<std::pair<Value, std::string>> lanes; // (argument, its 8 values)
    for (Value arg : body.getArguments()) {
      if (!needed.contains(arg))
        continue;
      std::string at = elementIndex(arg);
      std::string ty = computeType(arg.getType());
      std::string name = fresh("e");
      if (!vec || !alongRow(arg)) {
        // One value (a row statistic's input is not along the row).
        out << "      const " << ty << " " << name << " = " << load(arg, at) << ";\n";
        scalar[arg] = name;
        continue;
      }
      std::string x = fresh("x");
      Value input = loop.getIns()[cast<BlockArgument>(arg).getArgNumber()];
      if (e.buffers.lookup(input).type == "__half")
        out << "      float " << x << "[8];\n      load8(" << argName[arg] << " + " << at << ", "
            << x << ");\n";
      else
        out << "      " << ty << " " << x << "[8];\n      for (int j = 0; j < 8; ++j) " << x
            << "[j] = ld(" << argName[arg] << "[" << at << " + j]);\n";
      lanes.push_back({arg, x});
    }
    // fp16 results along the row are gathered for one 16-byte store (in
    // body order, so the source is the same from run to run).
    gathered.clear();
    if (vec)
      for (Operation &op : body.without_terminator()) {
        Value r = op.getResult(0);
        if (kindOf(op) == Kind::Element && needed.contains(r) && stageOf(r) == pass &&
            isResult(r) && param[r].second == "__half") {
          gathered[r] = fresh("y");
          out << "      float " << gathered[r] << "[8];\n";
        }
      }
    if (vec) {
      out << "#pragma unroll\n      for (int j = 0; j < 8; ++j) {\n";
      for (auto &[arg, x] : lanes) {
        std::string name = fresh("e");
        out << indent << "const " << computeType(arg.getType()) << " " << name
            << " = " << x << "[j];\n";
        scalar[arg] = name;
      }
    }
    return indent;
  }
  void storeElement(Value r, const std::string &x, StringRef indent) override {
    if (gathered.count(r))
      out << indent << gathered[r] << "[j] = (float)" << x << ";\n";
    else
      out << indent << param[r].first << "[row0 + " << (vec ? "c + j" : "c") << "] = conv<"
          << param[r].second << ">(" << x << ");\n";
  }
  void accumulate(Operation &op, const std::string &x, StringRef indent) override {
    out << indent << rowAcc[&op] << " += (float)" << x << ";\n";
  }
  void closeElements(ArrayRef<Operation *> reductions) override {
    if (vec) {
      out << "      }\n";
      for (auto &[r, y] : gathered)
        out << "      store8(" << param[r].first << " + row0 + c, " << y << ");\n";
    }
    out << "    }\n";
    for (Operation *op : reductions)
      out << "    " << rowAcc[op] << " = "
          << (warpRows ? "detail::warp_allreduce(" + rowAcc[op] + ", detail::SumOp())"
                       : "detail::block_allreduce(" + rowAcc[op] + ", detail::SumOp(), sh)")
          << ";\n";
  }

  CudaEmitter &e;
  llvm::DenseMap<Value, std::string> argName;
  llvm::DenseMap<Value, std::pair<std::string, std::string>> param; // name, type
  const bool warpRows;
  unsigned id = 0;
  // The pass being written: whether it moves 8 elements at a time, and the
  // fp16 results it gathers for a 16-byte store.
  bool vec = false;
  llvm::MapVector<Value, std::string> gathered;
};

LogicalResult CudaEmitter::emitRowLoop(tcck::LoopOp loop, const LoopFusion &lf) {
  Block &body = loop.getBody().front();
  auto yield = cast<tcck::YieldOp>(body.getTerminator());
  ValueRange ins = loop.getIns(), outs = loop.getOuts();
  if (!lf.rows)
    return loop.emitOpError("a CUDA reduction fusion needs a reduction over "
                            "the last axis (run tcc-fuse with row-reductions-only)");
  for (Operation &op : body.without_terminator())
    if (lf.kind.lookup(&op) == Kind::Reduction)
      return op.emitOpError("only reductions over the last axis are fused on "
                            "CUDA (run tcc-fuse with row-reductions-only)");
  // Kernel parameters: o<k> per result, a<k> per input.
  SmallVector<std::string> params, args;
  llvm::DenseMap<Value, std::pair<std::string, std::string>> out; // name, type
  for (auto [k, pair] : llvm::enumerate(llvm::zip(outs, yield.getValues()))) {
    auto [r, v] = pair;
    const Buffer &b = buffers.lookup(r);
    std::string o = "o" + std::to_string(k);
    params.push_back(b.type + " *" + restrictFor(ins, outs, r) + o);
    args.push_back(b.name);
    out[v] = {o, b.type};
  }
  llvm::DenseMap<Value, std::string> argName;
  for (auto [k, pair] : llvm::enumerate(llvm::zip(ins, body.getArguments()))) {
    auto [input, arg] = pair;
    const Buffer &b = buffers.lookup(input);
    std::string a = "a" + std::to_string(k);
    params.push_back("const " + b.type + " *" + restrictFor(ins, outs, input) + a);
    args.push_back(b.name);
    argName[arg] = a;
  }

  const std::string named = "fusion" + std::to_string(nextKernel++);
  std::string text;
  llvm::raw_string_ostream ks(text);
  RowLoopWriter writer(*this, loop, lf, ks, std::move(argName), std::move(out));
  if (failed(writer.write(named, params)))
    return failure();
  const std::string name = addKernel(text, named);
  launched = name;
  int64_t rowCount = writer.rows();
  int64_t blocks = writer.warpPerRow() ? (rowCount + 7) / 8 : rowCount;
  blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 32));
  os << "  if (" << rowCount << "LL > 0) TCC_LAUNCH(" << blocks << "u, 256, 0, stream(), " << name
     << ")(" << rowCount << "LL";
  for (const std::string &a : args)
    os << ", " << a;
  os << ");\n";
  return success();
}
