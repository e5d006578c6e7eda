//===- StepEmitter.cpp - the step's source for the CPU and CUDA targets ---===//
//
// emitStep, and the target-neutral half of the emitters (Emitter): types,
// buffers, scalar expressions, a copy's flat indices and the frame (the
// tables from the kernel function's signature, #tcc.layout and @apply).
// Each target's emitter (codegen/cpu/, codegen/cuda/) supplies the rest.
//
//===----------------------------------------------------------------------===//

#include "codegen/StepEmitter.h"
#include "codegen/EmitterImpl.h"
#include "codegen/cpu/CpuEmitter.h"
#include "codegen/cuda/CudaEmitter.h"
#include "passes/PlanMemory.h"
#include "passes/fusion/LoopStructure.h"
#include "passes/LowerToKernels.h"
#include "passes/Pipeline.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckOps.h"
#include "passes/Passes.h"
#include "runtime/tcc_random.h"
#include "runtime/tcc_step.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tcc;

using namespace mlir::tcc::codegen;

std::unique_ptr<Emitter> Emitter::create(func::FuncOp kernels, TargetAttr target,
                                         const StepEmitOptions &options) {
  if (target.isCuda())
    return std::make_unique<CudaEmitter>(kernels, target, options);
  return std::make_unique<CpuEmitter>(kernels, target, options);
}

std::string Emitter::ctype(Type elt) const {
  if (isa<FloatType>(elt))
    return "F";
  if (elt.isInteger(1))
    return "uint8_t";
  auto it = cast<IntegerType>(elt);
  return (it.isUnsigned() ? "uint" : "int") + std::to_string(it.getWidth()) +
         "_t";
}

int Emitter::dtypeCode(Type elt) const {
  if (isa<FloatType>(elt))
    return useDouble ? 11 : 1;
  if (elt.isInteger(1))
    return 9;
  auto it = cast<IntegerType>(elt);
  bool u = it.isUnsigned();
  switch (it.getWidth()) {
  case 8: return u ? 2 : 3;
  case 16: return u ? 4 : 5;
  case 32: return u ? 12 : 6;
  default: return u ? 13 : 7;
  }
}

uint64_t Emitter::elementBytes(Type elt) const {
  if (isa<FloatType>(elt))
    return useDouble ? 8 : 4;
  if (elt.isInteger(1))
    return 1;
  return cast<IntegerType>(elt).getWidth() / 8;
}

std::string Emitter::i64List(ArrayRef<int64_t> values) {
  std::string s;
  llvm::raw_string_ostream o(s);
  o << "{";
  llvm::interleave(values, o, [&](int64_t v) {
    if (v == INT64_MIN)
      o << "INT64_MIN";
    else
      o << v << "LL";
  }, ", ");
  if (values.empty())
    o << "0";
  o << "}";
  return s;
}

std::string Emitter::shape(Value v) {
  auto t = tensor(v);
  std::string s = "Shape{" + std::to_string(t.getRank()) + ", {";
  llvm::raw_string_ostream o(s);
  llvm::interleave(t.getShape(), o, ", ");
  o << "}}";
  return s;
}

int64_t Emitter::plannedOffset(Value v) {
  if (auto view = v.getDefiningOp<tcck::ViewOp>())
    return view.getOffset();
  if (auto arg = dyn_cast<BlockArgument>(v))
    return argOffsets.lookup(arg);
  auto offsets = v.getDefiningOp()->getAttrOfType<DenseI64ArrayAttr>("tcc.offsets");
  if (!offsets)
    return -1;
  return offsets[cast<OpResult>(v).getResultNumber()];
}

std::pair<std::string, uint64_t> Emitter::slotOf(Value v) const {
  auto t = tensor(v);
  Type elt = t.getElementType();
  // An argument whose slot holds another type (#tcck.slot: CUDA's fp32
  // master of an fp16 working copy).
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto slot = fn.getArgAttrOfType<TypeAttr>(arg.getArgNumber(), tcck::kSlotAttr))
        return {floatType(/*working=*/slot.getValue().isF16()),
                t.getNumElements() * (slot.getValue().getIntOrFloatBitWidth() / 8)};
  return {storageType(v), t.getNumElements() * (elt.isF16() ? 2 : elementBytes(elt))};
}

const Buffer &Emitter::define(Value v) {
  Buffer b;
  std::tie(b.type, b.bytes) = slotOf(v);
  int64_t offset = plannedOffset(v);
  if (offset < 0) {
    planError = true;
    offset = 0;
  }
  b.offset = offset;
  b.name = "v" + std::to_string(nextId++);
  os << "  " << b.type << " *" << b.name << " = (" << b.type
     << " *)(arena + " << b.offset << "ULL);\n";
  buffers[v] = b;
  return buffers[v];
}

/// A C++ literal for one element.
std::string mlir::tcc::codegen::literal(Attribute a, Type elt) {
  std::string s;
  llvm::raw_string_ostream o(s);
  if (auto f = dyn_cast<FloatAttr>(a)) {
    double d = f.getValueAsDouble();
    if (std::isnan(d))
      o << "F(NAN)";
    else if (std::isinf(d))
      o << (d < 0 ? "F(-INFINITY)" : "F(INFINITY)");
    else
      o << "F(" << llvm::formatv("{0:e17}", d) << ")";
  } else if (auto i = dyn_cast<IntegerAttr>(a)) {
    if (elt.isInteger(1))
      o << (i.getValue().isZero() ? "0" : "1");
    else if (cast<IntegerType>(elt).isUnsigned())
      o << i.getValue().getZExtValue() << "ULL";
    else if (i.getValue().getSExtValue() == INT64_MIN)
      o << "INT64_MIN";
    else
      o << i.getValue().getSExtValue() << "LL";
  }
  return s;
}

std::string mlir::tcc::codegen::constantArray(StringRef qualifiers, StringRef ctype,
                                              StringRef name, DenseElementsAttr value) {
  std::string text;
  llvm::raw_string_ostream g(text);
  Type elt = value.getElementType();
  g << qualifiers << ctype << " " << name << "[] = {";
  int64_t n = value.getNumElements();
  if (n == 0)
    g << "0";
  auto values = value.getValues<Attribute>();
  for (int64_t i = 0; i < n; ++i) {
    if (i)
      g << (i % 16 ? ", " : ",\n    ");
    g << literal(values[value.isSplat() ? 0 : i], elt);
  }
  g << "};\n";
  return text;
}

std::string mlir::tcc::codegen::mapIndexOf(AffineMap map, ArrayRef<int64_t> shape,
                                          ArrayRef<int64_t> space, ArrayRef<int64_t> outStrides,
                                          StringRef var) {
  std::string expr;
  int64_t stride = 1;
  for (int64_t k = (int64_t)shape.size() - 1; k >= 0; --k) {
    if (auto dim = dyn_cast<AffineDimExpr>(map.getResult(k))) {
      unsigned d = dim.getPosition();
      std::string term = "((" + var.str() + " / " + std::to_string(outStrides[d]) + "LL) % " +
                         std::to_string(space[d]) + "LL)";
      if (stride != 1)
        term += " * " + std::to_string(stride) + "LL";
      expr = expr.empty() ? term : expr + " + " + term;
    }
    stride *= shape[k];
  }
  return expr.empty() ? "0" : expr;
}

std::string mlir::tcc::codegen::loopInputIndex(tcck::LoopOp loop, unsigned k,
                                              ArrayRef<int64_t> outStrides) {
  return readIndex(loop.getInputMap(k),
                   cast<MemRefType>(loop.getIns()[k].getType()).getShape(), loop.getSpace(),
                   outStrides);
}

std::string mlir::tcc::codegen::readIndex(AffineMap map, ArrayRef<int64_t> shape,
                                         ArrayRef<int64_t> space,
                                         ArrayRef<int64_t> outStrides) {
  auto laidOutAsSpace = [&] {
    if (shape != space)
      return false;
    for (auto [d, e] : llvm::enumerate(map.getResults()))
      if (auto dim = dyn_cast<AffineDimExpr>(e); dim && dim.getPosition() != d)
        return false;
    return true;
  };
  if (laidOutAsSpace())
    return "i";
  return mapIndexOf(map, shape, space, outStrides, "i");
}

bool mlir::tcc::codegen::readsAlongLast(AffineMap map, ArrayRef<int64_t> space) {
  if (map.getNumResults() == 0 || space.empty() || space.back() == 1)
    return false;
  auto dim = dyn_cast<AffineDimExpr>(map.getResults().back());
  return dim && dim.getPosition() == space.size() - 1;
}

/// The scalar expression of one scalar op of a fused body (a tcck.loop's,
/// a GEMM epilogue's), over its operands' scalar names; `ty` is the type it
/// computes in.
FailureOr<std::string>
Emitter::scalarExpr(Operation &op, llvm::function_ref<std::string(unsigned)> arg,
                    const std::string &ty) {
  auto flag = [](bool t) { return std::string(t ? "true" : "false"); };
  using Expr = FailureOr<std::string>;
  return llvm::TypeSwitch<Operation *, Expr>(&op)
      .Case([&](tcck::ScalarEwOp s) -> Expr {
        EwKind kind = s.getEwKind();
        if (kind == EwKind::Identity)
          return arg(0);
        std::string name = stringifyEwKind(kind).str();
        if (s.getOperands().size() == 2)
          return "binary_scalar<BinaryOp::" + name + ", " + ty + ">(" + arg(0) + ", " + arg(1) +
                 ")";
        return "unary_scalar<UnaryOp::" + name + ">(" + arg(0) + ")";
      })
      .Case([&](tcck::SelectOp) -> Expr {
        return "(" + arg(0) + " ? " + arg(1) + " : " + arg(2) + ")";
      })
      .Case([&](tcck::ConvertOp c) -> Expr {
        return c.getType().isInteger(1) ? "(uint8_t)(" + arg(0) + " != 0)" : convert(ty, arg(0));
      })
      .Case([&](tcck::GeluOp g) -> Expr {
        return "gelu_scalar(" + arg(0) + ", " + flag(g.getTanh()) + ")";
      })
      .Case([&](tcck::GeluGradOp g) -> Expr {
        return "gelu_grad_scalar(" + arg(0) + ", " + arg(1) + ", " + flag(g.getTanh()) + ")";
      })
      .Default([&](Operation *o) -> Expr {
        return o->emitOpError("cannot be part of a fused loop on the ")
               << targetName() << " target";
      });
}

LogicalResult Emitter::scalarLocal(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                                   const std::string &name, StringRef indent,
                                   llvm::raw_ostream &out) {
  Value r = op.getResult(0);
  std::string ty = computeType(r.getType());
  FailureOr<std::string> expr =
      scalarExpr(op, [&](unsigned k) { return scalar.lookup(op.getOperand(k)); }, ty);
  if (failed(expr))
    return failure();
  out << indent << "const " << ty << " " << name << " = " << *expr << ";\n";
  scalar[r] = name;
  return success();
}

/// `e` as a C++ expression over `dims`, parenthesised where it is not a
/// single term.
static std::string cExpr(AffineExpr e, ArrayRef<std::string> dims) {
  if (auto c = dyn_cast<AffineConstantExpr>(e))
    return std::to_string(c.getValue()) + "LL";
  if (auto d = dyn_cast<AffineDimExpr>(e))
    return dims[d.getPosition()];
  auto bin = cast<AffineBinaryOpExpr>(e);
  std::string lhs = cExpr(bin.getLHS(), dims), rhs = cExpr(bin.getRHS(), dims);
  switch (e.getKind()) {
  case AffineExprKind::Add:
    return "(" + lhs + " + " + rhs + ")";
  case AffineExprKind::Mul:
    return lhs + " * " + rhs;
  case AffineExprKind::FloorDiv:
    return "(" + lhs + " / " + rhs + ")";
  case AffineExprKind::Mod:
    return "(" + lhs + " % " + rhs + ")";
  default:
    llvm_unreachable("tcck.copy_loop's verifier admits no ceildiv in a flat index");
  }
}

std::string mlir::tcc::codegen::flatIndex(AffineMap map, ArrayRef<std::string> dims) {
  // The outermost sum without its parentheses: i0 * 24LL + i1 * 6LL + 3LL.
  SmallVector<AffineExpr> terms;
  std::function<void(AffineExpr)> collect = [&](AffineExpr e) {
    if (e.getKind() == AffineExprKind::Add) {
      auto bin = cast<AffineBinaryOpExpr>(e);
      collect(bin.getLHS());
      collect(bin.getRHS());
      return;
    }
    terms.push_back(e);
  };
  collect(map.getResult(0));
  std::string s;
  for (AffineExpr t : terms)
    s += (s.empty() ? "" : " + ") + cExpr(t, dims);
  return s;
}

std::string Emitter::descriptor(StringRef name, Value v, uint64_t offset,
                                uint64_t bytes) {
  return descriptor(name, v, offset, bytes, /*onHost=*/false);
}

/// A tcc_tensor_desc initializer; `onHost`: the offset is in the host
/// buffer (TCC_LOCATION_HOST), else in the arena (the field left zero).
std::string Emitter::descriptor(StringRef name, Value v, uint64_t offset,
                                uint64_t bytes, bool onHost) {
  auto t = tensor(v);
  std::string dims = "d" + std::to_string(nextId++);
  g << "static const int64_t " << dims << "[] = " << i64List(t.getShape())
    << ";\n";
  return llvm::formatv("{{{0}, {1}, {2}, {3}, {4}ULL, {5}ULL{6}}", cstring(name),
                       dtypeCode(t.getElementType()), t.getRank(), dims, offset,
                       bytes, onHost ? ", TCC_LOCATION_HOST" : "")
      .str();
}

/// A C string literal of `text`.
std::string mlir::tcc::codegen::cstring(StringRef text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

void Emitter::recordMark(tcck::MarkOp m, std::string label) {
  const int64_t op = static_cast<int64_t>(opLabels.size());
  opLabels.push_back(std::move(label));
  opLive.push_back(m.getLive());
  auto add = [&](int role, unsigned index, Value v) {
    if (!valueTable)
      return;
    auto it = buffers.find(v);
    if (it == buffers.end() || !it->second.inArena)
      return; // read-only data, or tcc-translate's arguments
    auto t = tensor(v);
    Type elt = t.getElementType();
    // A buffer's element type is its storage type (f16 on CUDA), but the
    // CPU target's floats are all F (double with --cpu-precision=f64).
    int dtype = elt.isF16() ? 10 : dtypeCode(elt);
    uint64_t bytes = static_cast<uint64_t>(t.getNumElements()) *
                     (elt.isF16() ? 2 : elementBytes(elt));
    std::string dims = i64List(t.getShape());
    std::string &id = dimsArrays[dims];
    if (id.empty()) {
      id = "od" + std::to_string(dimsArrays.size());
      g << "static const int64_t " << id << "[] = " << dims << ";\n";
    }
    opValues.push_back(llvm::formatv("{{{0}, {1}, {2}, {{\"\", {3}, {4}, {5}, {6}ULL, {7}ULL, 0}}",
                                     op, role, index, dtype, t.getRank(), id, it->second.offset,
                                     bytes)
                           .str());
  };
  for (auto [k, v] : llvm::enumerate(m.getIns()))
    add(0, k, v);
  for (auto [k, v] : llvm::enumerate(m.getOuts()))
    add(1, k, v);
}

/// The step's descriptor tables (tcc_step_info's params, grads, inputs,
/// outputs and optimizer state), one row per entry (a placeholder row keeps
/// an empty table valid C++).
void Emitter::writeTables(llvm::raw_ostream &s, const Frame &f) const {
  auto table = [&](StringRef name, const std::vector<std::string> &rows) {
    s << "static const tcc_tensor_desc " << name << "[] = {\n";
    for (const std::string &r : rows)
      s << "    " << r << ",\n";
    if (rows.empty())
      s << "    {\"\", 0, 0, nullptr, 0, 0},\n";
    s << "};\n";
  };
  table("kParams", f.params);
  table("kGrads", f.grads);
  table("kInputs", f.inputs);
  table("kOutputs", f.outputs);
  table("kState", f.state);
  s << "// The op table (tcc-run --trace): what each op that runs code is, and\n"
    << "// the plan's arena bytes live while it runs.\n"
    << "static const char *const kOps[] = {\n";
  for (const std::string &o : opLabels)
    s << "    " << cstring(o) << ",\n";
  s << (opLabels.empty() ? "    \"\",\n" : "") << "};\nstatic const uint64_t kOpLive[] = {";
  for (uint64_t b : opLive)
    s << b << "ULL, ";
  s << (opLive.empty() ? "0};\n" : "};\n");
  s << "// The value table (tcc-run --check-numerics): the arena buffers each op\n"
    << "// of kOps read (role 0) and wrote (role 1).\n"
    << "static const tcc_op_value kOpValues[] = {\n";
  for (const std::string &v : opValues)
    s << "    " << v << ",\n";
  s << (opValues.empty() ? "    {-1, 0, 0, {\"\", 0, 0, nullptr, 0, 0, 0}},\n" : "") << "};\n"
    << "static const int32_t kNumOpValues = " << opValues.size() << ";\n";
}


/// Each argument's slot in the arena from the memory plan: parameters,
/// inputs, the backward seed and dropout's random state (and, for
/// parameters in the host tier, their masters' offsets in the host buffer).
LogicalResult Emitter::bindSlots(const Frame &f) {
  LayoutAttr layout = f.layout;
  ArrayRef<int64_t> paramSlots = layout.getParams().asArrayRef(),
                    inputSlots = layout.getInputs().asArrayRef(), hostParamSlots;
  if (DenseI64ArrayAttr h = layout.getHostParams())
    hostParamSlots = h.asArrayRef();
  size_t p = 0, in = 0;
  for (unsigned i = 0; i < kernelFunc.getNumArguments(); ++i) {
    Value arg = kernelFunc.getArgument(i);
    if (kernelFunc.getArgAttr(i, kParamAttr) && p < hostParamSlots.size() && hostParamSlots[p] >= 0)
      hostOffsets[arg] = hostParamSlots[p];
    if (kernelFunc.getArgAttr(i, kSeedAttr))
      argOffsets[arg] = layout.getSeed();
    else if (kernelFunc.getArgAttr(i, kRngAttr) && layout.getRng() >= 0)
      argOffsets[arg] = layout.getRng();
    else if (kernelFunc.getArgAttr(i, kParamAttr) && p < paramSlots.size())
      argOffsets[arg] = paramSlots[p++];
    else if (kernelFunc.getArgAttr(i, kInputAttr) && in < inputSlots.size())
      argOffsets[arg] = inputSlots[in++];
    else
      return kernelFunc.emitError("the memory plan does not match the function");
  }
  if (layout.getResults().size() != kernelFunc.getNumResults())
    return kernelFunc.emitError("the memory plan does not match the function");
  return success();
}

/// Declares each argument's buffer in the body and adds it to the tables
/// (with the working copy the body reads, where the target keeps one).
LogicalResult Emitter::bindArguments(Frame &f) {
  // Arguments: parameters, then inputs, each in its arena slot.
  os << "  char *arena = static_cast<char *>(arena_);\n";
  for (unsigned i = 0; i < kernelFunc.getNumArguments(); ++i) {
    Value arg = kernelFunc.getArgument(i);
    if (auto host = hostOffsets.find(arg); host != hostOffsets.end()) {
      // Master weights and optimizer state in the host buffer (#tcc.tiers):
      // the body reads only the working copy, which the fixed half
      // refreshes from the host (init, apply, a copy into the buffer).
      auto n = kernelFunc.getArgAttrOfType<StringAttr>(i, kParamAttr);
      uint64_t bytes = tensor(arg).getNumElements() * 4; // fp32 masters
      f.params.push_back(descriptor(n.getValue(), arg, host->second, bytes, /*onHost=*/true));
      step.params.push_back(n.getValue().str());
      f.paramBytes.push_back({arg, bytes});
      FailureOr<Buffer> copy = hostParamBuffer(f, i, arg);
      if (failed(copy))
        return failure();
      buffers[arg] = *copy;
      continue;
    }
    const Buffer &b = define(arg);
    if (auto n = kernelFunc.getArgAttrOfType<StringAttr>(i, kParamAttr)) {
      f.params.push_back(descriptor(n.getValue(), arg, b.offset, b.bytes));
      step.params.push_back(n.getValue().str());
      f.paramBytes.push_back({arg, b.bytes});
    } else if (auto n = kernelFunc.getArgAttrOfType<StringAttr>(i, kInputAttr)) {
      f.inputs.push_back(descriptor(n.getValue(), arg, b.offset, b.bytes));
    } else if (kernelFunc.getArgAttr(i, kRngAttr)) {
      // Dropout's random state: checkpointed with the optimizer state,
      // zeroed by init, advanced after every micro-step (below).
      f.rngState = descriptor(TCC_STEP_DROPOUT_STATE, arg, b.offset, b.bytes);
      f.rngOffset = b.offset;
    } else if (kernelFunc.getArgAttr(i, kSeedAttr)) {
      // The backward pass starts from d(loss) = grad_scale: the kernel IR's
      // tcck.seed.
    } else {
      return kernelFunc.emitError("argument ") << i << " is neither a parameter nor an input";
    }
    if (failed(bindWorkingCopy(f, i, arg)))
      return failure();
  }
  return success();
}

/// The results: the outputs' slots and the accumulators the step zeroes
/// (the body's kernel IR stores and accumulates into them); each
/// parameter's accumulator; init's zeroing of dropout's random state.
LogicalResult Emitter::bindResults(Frame &f) {
  auto ret = cast<func::ReturnOp>(kernelFunc.getBody().front().getTerminator());
  ArrayRef<int64_t> resultSlots = f.layout.getResults().asArrayRef();
  // Accumulators in host memory (#tcc.tiers host_grads): by parameter name,
  // their offsets in the host buffer (the micro-step copies each gradient
  // down, tcck.host_accumulate; the fixed half adds the copies in).
  llvm::StringMap<int64_t> hostGradOffset;
  if (DenseI64ArrayAttr hg = f.layout.getHostGrads()) {
    int64_t p = 0;
    for (unsigned a = 0; a < kernelFunc.getNumArguments(); ++a)
      if (auto n = kernelFunc.getArgAttrOfType<StringAttr>(a, kParamAttr)) {
        if (p < hg.size() && hg[p] >= 0)
          hostGradOffset[n.getValue()] = hg[p];
        ++p;
      }
  }
  if (planError)
    return kernelFunc.emitError("a value has no slot in the memory plan");

  // Results: the outputs' slots and the accumulators the step zeroes (the
  // body's kernel IR stores and accumulates into them).
  llvm::StringMap<uint64_t> gradOffsets;
  llvm::raw_string_ostream zo(f.zero);
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    Value v = ret.getOperand(i);
    auto t = tensor(v);
    uint64_t bytes = t.getNumElements() * elementBytes(t.getElementType());
    uint64_t offset = resultSlots[i];
    if (auto n = kernelFunc.getResultAttrOfType<StringAttr>(i, kGradAttr)) {
      if (hostGradOffset.count(n.getValue())) {
        // In the host buffer: the fixed half zeroes it.
        gradOffsets.insert({n.getValue(), hostGradOffset.lookup(n.getValue())});
        continue;
      }
      // Zeroed once, however many results add into it.
      if (!gradOffsets.insert({n.getValue(), offset}).second)
        continue;
      zo << zeroText(offset, std::to_string(bytes) + "ULL");
      continue;
    }
    auto n = kernelFunc.getResultAttrOfType<StringAttr>(i, kOutputAttr);
    f.outputs.push_back(descriptor(n ? n.getValue() : "output", v, offset, bytes));
  }
  for (auto &[arg, bytes] : f.paramBytes) {
    unsigned idx = cast<BlockArgument>(arg).getArgNumber();
    StringRef name = kernelFunc.getArgAttrOfType<StringAttr>(idx, kParamAttr).getValue();
    auto it = gradOffsets.find(name);
    if (it == gradOffsets.end())
      f.grads.push_back(descriptor(name, arg, 0, 0)); // frozen: no accumulator
    else
      f.grads.push_back(descriptor(name, arg, it->second, bytes, hostGradOffset.count(name) > 0));
  }

  // init zeroes dropout's random state (the kernel IR advances it after
  // each micro-step).
  if (f.rngOffset >= 0)
    rngInit = zeroText(f.rngOffset, "16");

  return success();
}

/// The optimizer's tables from the kernel IR's @apply: one row per
/// tcck.update (the state tensors' descriptors too), or, for ZeRO-1, one per
/// tcck.shard_update and one chunk per state kind.
LogicalResult Emitter::optimizerTables(Frame &f) {
  // The optimizer: one row per tcck.update of the kernel IR's @apply, which
  // `apply` walks (AdamW's two state tensors, SGD's momentum); for ZeRO-1
  // (#tcc.shards), one per tcck.shard_update, where each parameter lies in
  // the flat space (and, on CUDA, where its fp16 working copy is).
  llvm::raw_string_ostream ar(f.applyRows), sr(f.shardRows);
  const bool adam = f.adam;
  size_t perParam = adam ? 2 : 1;
  ShardsAttr shards = f.shards;
  std::vector<std::string> &state = f.state;
  func::FuncOp applyFunc = f.training ? applyFunction(kernelFunc) : nullptr;
  if (f.training && !applyFunc)
    return kernelFunc.emitError("the step needs its optimizer in kernel IR (@apply, from "
                          "tcc-lower-to-kernels)");
  auto offsetOf = [](Value v) -> int64_t {
    if (auto h = v.getDefiningOp<tcck::HostViewOp>())
      return h.getOffset();
    return v.getDefiningOp<tcck::ViewOp>().getOffset();
  };
  auto halfOf = [&](Value h) { return h ? std::to_string(offsetOf(h)) : std::string("~0"); };
  auto elements = [](Value v) { return cast<MemRefType>(v.getType()).getNumElements(); };
  Block &none = kernelFunc.getBody().front();
  for (Operation &op : applyFunc ? applyFunc.getBody().front().without_terminator()
                                 : llvm::iterator_range<Block::iterator>(none.end(), none.end())) {
    if (isa<tcck::ViewOp, tcck::HostViewOp>(op))
      continue; // read through the updates' operands
    auto up = dyn_cast<tcck::UpdateOp>(op);
    auto su = dyn_cast<tcck::ShardUpdateOp>(op);
    if (!up && !su)
      return op.emitError("the step emitter does not know this op of the optimizer's @apply");
    int64_t param = up ? up.getParam() : su.getParam();
    if (param >= static_cast<int64_t>(f.paramBytes.size()))
      return op.emitError("names parameter ") << param << "; the step has " << f.paramBytes.size();
    if (!su != !shards)
      return op.emitError(shards ? "updates a whole parameter of a sharded (ZeRO-1) step"
                                 : "updates a shard of a step whose state is not sharded");
    auto [arg, bytes] = f.paramBytes[param];
    if (su) {
      int64_t flat = su.getFlat(), n = elements(su.getMaster());
      if (flat + n > shards.getFlatElems())
        return kernelFunc.emitError("parameter ")
               << su.getName() << " lies outside the sharded plan's flat space";
      sr << shardRow({param, offsetOf(su.getMaster()), halfOf(su.getHalf()), flat, n});
      ++f.numTrainable;
      continue;
    }
    if (up.getState().size() != perParam)
      return kernelFunc.emitError("the memory plan's optimizer state does not match --optimizer");
    const bool onHost = up.onHost();
    int64_t s0 = offsetOf(up.getState()[0]), s1 = adam ? offsetOf(up.getState()[1]) : 0;
    state.push_back(descriptor((adam ? "exp_avg/" : "momentum_buffer/") + up.getName().str(), arg,
                               s0, bytes, onHost));
    if (adam)
      state.push_back(descriptor("exp_avg_sq/" + up.getName().str(), arg, s1, bytes, onHost));
    ar << applyRow({param, offsetOf(up.getMaster()), offsetOf(up.getGrad()), s0, s1,
                    halfOf(up.getHalf()), elements(up.getMaster()),
                    up.gradOnHost() ? 2 : onHost ? 1 : 0});
    ++f.numTrainable;
  }
  if (shards) {
    // One chunk per state kind: this rank's part, different on every rank.
    auto chunkDesc = [&](StringRef kind, int64_t offset) {
      std::string dims = "d" + std::to_string(nextId++);
      g << "static const int64_t " << dims << "[] = {" << shards.getChunkElems() << "};\n";
      return llvm::formatv("{{\"{0}/(zero1 chunk)\", {1}, 1, {2}, {3}ULL, {4}ULL, "
                           "TCC_LOCATION_SHARD}",
                           kind, shards.getElemBytes() == 8 ? "TCC_DTYPE_F64" : "TCC_DTYPE_F32",
                           dims, offset, shards.getChunkBytes())
          .str();
    };
    ArrayRef<int64_t> chunks = shards.getState().asArrayRef();
    if (chunks.size() != perParam)
      return kernelFunc.emitError("the sharded plan's optimizer state does not match --optimizer");
    state.push_back(chunkDesc(adam ? "exp_avg" : "momentum_buffer", chunks[0]));
    if (adam)
      state.push_back(chunkDesc("exp_avg_sq", chunks[1]));
  }
  if (!f.rngState.empty())
    state.push_back(f.rngState);

  return success();
}

FailureOr<EmittedStep> Emitter::run() {
  Frame f;
  f.training = kernelFunc.getSymName() == kMicroStepName;
  // The arena layout comes from tcc-plan-memory.
  f.layout = LayoutAttr::of(kernelFunc);
  if (!f.layout)
    return kernelFunc.emitError("the step emitter needs the memory plan "
                                "(run tcc-plan-memory first)");
  f.shards = f.layout.getShards();
  f.adam = options.optimizer == "adamw";
  arena = f.layout.getArenaBytes();
  if (failed(bindSlots(f)) || failed(bindArguments(f)))
    return failure();
  // A mark after each op that runs code times it for tcc-run --trace (and
  // TCC_CUDA_PROFILE=1): mark k ends op k-1 of the op table, mark 0 starts
  // the body. CUDA records an event on the step's stream; the CPU step calls
  // the runtime's hook, if one is set. The lowering placed the marks, the
  // accumulations, the stores, and on CUDA the copies to host accumulators
  // and the all-reduce's hand-offs.
  os << markText(0);
  for (Operation &op : kernelFunc.getBody().front().without_terminator())
    if (failed(emitKernel(&op)))
      return failure();
  if (failed(bindResults(f)) || failed(optimizerTables(f)))
    return failure();
  step.source = assemble(f);
  step.arenaBytes = arena;
  return std::move(step);
}

std::string mlir::tcc::objectiveString(ModuleOp module) {
  auto dict = module->getAttrOfType<DictionaryAttr>(kObjectiveAttr);
  std::string s;
  if (!dict)
    return s;
  for (StringRef key : {"task", "ids", "labels", "mask", "labels-shift"})
    if (auto v = dict.getAs<StringAttr>(key))
      s += (s.empty() ? "" : ";") + key.str() + "=" + v.getValue().str();
  return s;
}

FailureOr<EmittedStep> mlir::tcc::emitStep(ModuleOp module,
                                          const StepEmitOptions &givenOptions) {
  StepEmitOptions options = givenOptions;
  options.objective = objectiveString(module);
  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  if (funcs.size() != 1)
    return module.emitError("the step emitter expects one step function");
  TargetAttr target = TargetAttr::of(module);
  if (!target)
    return module.emitError("the step emitter needs the module's target "
                            "(a tcc.target = #tcc.target<...> attribute)");
  // The step is its kernel IR: a copy of the planned module lowered to
  // tcck, the frame and the optimizer included.
  OwningOpRef<ModuleOp> kernels = module.clone();
  PassManager pm(module.getContext());
  buildKernelPipeline(pm);
  if (failed(pm.run(*kernels)))
    return failure();
  func::FuncOp kernelStep;
  for (auto f : kernels->getOps<func::FuncOp>())
    if (!f->hasAttr(tcck::kApplyAttr))
      kernelStep = f;
  if (!kernelStep)
    return module.emitError("the step needs its kernel IR (tcc-lower-to-kernels)");
  return Emitter::create(kernelStep, target, options)->run();
}
