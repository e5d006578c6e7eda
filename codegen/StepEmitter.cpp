//===- StepEmitter.cpp - the step's source for the CPU and CUDA targets ---===//

#include "codegen/StepEmitter.h"
#include "codegen/EmitterImpl.h"
#include "codegen/cpu/ShardedApply.h"
#include "passes/PlanMemory.h"
#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/FusionCostModel.h"
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

std::string Emitter::storageType(Value v) const {
  // A kernel-IR buffer's element type is its storage type.
  Type elt = tensor(v).getElementType();
  if (cuda && isa<FloatType>(elt))
    return elt.isF16() ? "__half" : "float";
  return ctype(elt);
}

const Buffer &Emitter::define(Value v) {
  auto t = tensor(v);
  Buffer b;
  b.type = storageType(v);
  b.bytes = t.getNumElements() * (t.getElementType().isF16() ? 2 : elementBytes(t.getElementType()));
  if (cuda && isa<BlockArgument>(v) && isa<FloatType>(t.getElementType())) {
    // A float argument's slot holds its fp32 master (or fp32 input); the
    // kernel IR types the argument as the working copy its body reads.
    b.type = "float";
    b.bytes = t.getNumElements() * 4;
  }
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

/// The element of a tensor of `t` shape (rank <= the loop's, numpy
/// broadcasting) read at output index `i` of a loop over `shape`.
std::string mlir::tcc::codegen::broadcastIndexOf(ArrayRef<int64_t> t, ArrayRef<int64_t> shape,
                                    ArrayRef<int64_t> outStrides,
                                    StringRef var) {
  std::string expr;
  int64_t offset = shape.size() - t.size(), stride = 1;
  for (int64_t d = (int64_t)shape.size() - 1; d >= offset; --d) {
    int64_t dim = t[d - offset];
    if (dim != 1) {
      std::string term = "((" + var.str() + " / " + std::to_string(outStrides[d]) + "LL) % " +
                         std::to_string(shape[d]) + "LL)";
      if (stride != 1)
        term += " * " + std::to_string(stride) + "LL";
      expr = expr.empty() ? term : expr + " + " + term;
    }
    stride *= dim;
  }
  return expr.empty() ? "0" : expr;
}

/// The element of fused input `v` read at output index `i` of a loop over
/// `shape` (numpy broadcasting), as a C++ expression.
std::string mlir::tcc::codegen::broadcastIndex(Value v, ArrayRef<int64_t> shape,
                                  ArrayRef<int64_t> outStrides, int64_t n) {
  auto t = cast<ShapedType>(v.getType());
  if (t.getNumElements() == n && t.getShape() == shape)
    return "i";
  if (t.getNumElements() == 1)
    return "0";
  return broadcastIndexOf(t.getShape(), shape, outStrides);
}

/// Whether a value of shape `t`, read in a row loop whose rows are
/// `rowLength` long, is read along the row (its last dimension is the
/// row's), rather than once per row.
bool mlir::tcc::codegen::readAlongRow(ArrayRef<int64_t> t, int64_t rowLength) {
  return !t.empty() && t.back() == rowLength && rowLength != 1;
}

/// The scalar expression of one op of a fused loop, over its operands'
/// scalar names; `ty` is the type it computes in.
FailureOr<std::string>
Emitter::scalarExpr(Operation &op, llvm::function_ref<std::string(unsigned)> arg,
                    const std::string &ty) {
  std::string expr;
  std::optional<EwKind> kind = runtimeEwKind(&op);
  if (kind && op.getNumOperands() == 2)
    expr = "binary_scalar<BinaryOp::" + stringifyEwKind(*kind).str() + ", " + ty +
           ">(" + arg(0) + ", " + arg(1) + ")";
  else if (kind)
    expr = "unary_scalar<UnaryOp::" + stringifyEwKind(*kind).str() + ">(" + arg(0) + ")";
  else if (isa<IdentityOp>(op))
    expr = arg(0);
  else if (isa<WhereOp>(op))
    expr = "(" + arg(0) + " ? " + arg(1) + " : " + arg(2) + ")";
  else if (auto c = dyn_cast<CastOp>(op))
    expr = c.getTo().isInteger(1)
               ? "(uint8_t)(" + arg(0) + " != 0)"
               : std::string(cuda ? "conv<" : "detail::conv<") + ty + ">(" + arg(0) + ")";
  else if (auto g = dyn_cast<GeluOp>(op))
    expr = "gelu_scalar(" + arg(0) + ", " +
           (g.getApproximate() == "tanh" ? "true" : "false") + ")";
  else if (auto g = dyn_cast<GeluGradOp>(op))
    expr = "gelu_grad_scalar(" + arg(0) + ", " + arg(1) + ", " +
           (g.getApproximate() == "tanh" ? "true" : "false") + ")";
  else
    return op.emitOpError("cannot be part of a fused loop on the ")
           << (cuda ? "CUDA" : "CPU") << " target";
  return expr;
}

/// The C++ array of a shape (at least one element, for rank 0).
static std::string dimsArray(ArrayRef<int64_t> shape) {
  std::string s = "{";
  for (auto [k, d] : llvm::enumerate(shape))
    s += (k ? ", " : "") + std::to_string(d) + "LL";
  return s + (shape.empty() ? "1LL}" : "}");
}

/// Code that moves the coordinates `c` of an element of `from`'s value to
/// those of the same element in `to`'s value, through the view or transpose
/// `op` (forward: from its operand to its result; else back).
static std::string moveCoords(Operation *op, bool forward, bool deviceCode = false) {
  // Device code has no static locals: the shape arrays are plain constants.
  const std::string constArray = deviceCode ? "const int64_t" : "static const int64_t";
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  if (auto t = dyn_cast<TransposeOp>(op)) {
    int64_t rank = in.getRank();
    SmallVector<int64_t> perm = t.getPermutation();
    // result[i] = operand[perm[i]]
    std::string s = "      { int64_t t[8]; for (int d = 0; d < " + std::to_string(rank) +
                    "; ++d) t[d] = c[d];";
    for (int64_t i = 0; i < rank; ++i)
      s += forward ? " c[" + std::to_string(i) + "] = t[" + std::to_string(perm[i]) + "];"
                   : " c[" + std::to_string(perm[i]) + "] = t[" + std::to_string(i) + "];";
    return s + " }\n";
  }
  // A view: the same flat index in the other shape.
  auto fromShape = forward ? in.getShape() : out.getShape();
  auto toShape = forward ? out.getShape() : in.getShape();
  return "      { " + constArray + " sf[] = " + dimsArray(fromShape) +
         ", st[] = " + dimsArray(toShape) + "; move_delin(move_lin(c, sf, " +
         std::to_string(fromShape.size()) + "), st, " + std::to_string(toShape.size()) +
         ", c); }\n";
}


/// A loop nest that copies `from` (a strided view of `src`) into `to` (one of
/// `dst`), both of the same shape.
std::string mlir::tcc::codegen::stridedCopy(const std::string &dst, const StridedView &to,
                               const std::string &src, const StridedView &from) {
  std::string s, indent = "  ";
  for (size_t d = 0; d < from.shape.size(); ++d) {
    s += indent + "for (int64_t i" + std::to_string(d) + " = 0; i" + std::to_string(d) +
         " < " + std::to_string(from.shape[d]) + "LL; ++i" + std::to_string(d) + ")\n";
    indent += "  ";
  }
  auto index = [](const StridedView &v) {
    std::string e = std::to_string(v.offset) + "LL";
    for (size_t d = 0; d < v.shape.size(); ++d)
      if (v.shape[d] != 1)
        e += " + i" + std::to_string(d) + " * " + std::to_string(v.strides[d]) + "LL";
    return e;
  };
  return s + indent + dst + "[" + index(to) + "] = " + src + "[" + index(from) + "];\n";
}

LogicalResult Emitter::emitMoveLoop(Operation *owner, Block &body, ValueRange inputs,
                                    ValueRange results) {
  ValueRange yielded = body.getTerminator()->getOperands();
  auto argInput = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg ? inputs[arg.getArgNumber()] : Value();
  };
  // On CUDA the loop is a kernel (one thread per element, grid-stride) over
  // parameters o<k> (results) and a<k> (inputs); on the CPU it is inline.
  std::string kernelText;
  llvm::raw_string_ostream ks(kernelText);
  llvm::raw_ostream &out = cuda ? static_cast<llvm::raw_ostream &>(ks) : os;
  const std::string constArray = cuda ? "const int64_t" : "static const int64_t";
  SmallVector<std::string> outs, outTypes, params, args;
  for (auto [k, r] : llvm::enumerate(results)) {
    const Buffer &b = buffers.count(r) ? buffers[r] : define(r);
    outs.push_back(cuda ? "o" + std::to_string(k) : b.name);
    outTypes.push_back(b.type);
    params.push_back(b.type + " *" + (cuda ? restrictFor(inputs, results, r) : "") + "o" +
                     std::to_string(k));
    args.push_back(b.name);
  }
  auto inputName = [&](Value input) -> std::string {
    if (!cuda)
      return ref(input);
    unsigned k = llvm::find(inputs, input) - inputs.begin();
    return "a" + std::to_string(k);
  };
  for (auto [k, input] : llvm::enumerate(inputs)) {
    params.push_back("const " + buffers.lookup(input).type + " *" +
                     (cuda ? restrictFor(inputs, results, input) : "") + "a" + std::to_string(k));
    args.push_back(buffers.lookup(input).name);
  }
  auto copy = [&](unsigned result, const std::string &src) {
    return cuda ? "conv<" + outTypes[result] + ">(ld(" + src + "))" : src;
  };
  auto loop = [&](int64_t n) {
    return cuda ? "  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < " +
                      std::to_string(n) + "LL; i += (int64_t)gridDim.x * blockDim.x) {\n"
                : "  for (int64_t i = 0; i < " + std::to_string(n) + "LL; ++i) {\n";
  };
  std::string name = "move" + std::to_string(nextKernel++);
  if (cuda) {
    ks << "// " << owner->getName() << " (a copy loop) at " << owner->getLoc() << "\n"
       << "__global__ void __launch_bounds__(256) " << name << "(";
    for (auto [k, p] : llvm::enumerate(params))
      ks << (k ? ", " : "") << p;
    ks << ") {\n";
  }
  // Launches the kernel over `n` elements (CUDA).
  auto finish = [&](int64_t n) {
    out << "  }\n  }\n";
    if (!cuda)
      return;
    ks << "}\n\n";
    addKernel(kernelText);
    launched = name;
    os << "  if (" << n << "LL > 0) TCC_LAUNCH(grid_for(" << n << "LL), 256, 0, stream(), " << name
       << ")(";
    for (auto [k, a] : llvm::enumerate(args))
      os << (k ? ", " : "") << a;
    os << ");\n";
  };
  out << "  {\n";
  for (Operation &op : body.without_terminator()) {
    if (auto split = dyn_cast<SplitOp>(op)) {
      // Scatter: one loop over the split's input; each element goes to its
      // part, through the part's views and transposes, to the result.
      Value input = argInput(split.getInput());
      if (!input)
        return owner->emitOpError("a split in a copy loop must read a fusion input");
      auto t = tensor(split.getInput());
      int64_t rank = t.getRank();
      int64_t axis = *normalizeAxis(split.getAxis(), rank);
      out << loop(t.getNumElements()) << "    " << constArray
          << " sx[] = " << dimsArray(t.getShape()) << ";\n"
          << "    int64_t c[8];\n    move_delin(i, sx, " << rank << ", c);\n";
      int64_t offset = 0;
      for (auto [k, part] : llvm::enumerate(split.getResults())) {
        int64_t size = split.getSplit()[k];
        out << "    " << (k ? "else " : "") << "if (c[" << axis << "] < " << offset + size
            << "LL) {\n      c[" << axis << "] -= " << offset << "LL;\n";
        offset += size;
        Value v = part;
        while (!llvm::is_contained(yielded, v)) {
          if (!v.hasOneUse())
            return owner->emitOpError("a split part in a copy loop must end at a result");
          Operation *u = *v.getUsers().begin();
          out << moveCoords(u, /*forward=*/true, cuda);
          v = u->getResult(0);
        }
        unsigned k2 = llvm::find(yielded, v) - yielded.begin();
        auto rt = tensor(v);
        out << "      " << constArray << " so[] = " << dimsArray(rt.getShape()) << ";\n"
            << "      " << outs[k2] << "[move_lin(c, so, " << rt.getRank() << ")] = "
            << copy(k2, inputName(input) + "[i]") << ";\n    }\n";
      }
      finish(t.getNumElements());
      return success();
    }
  }
  // Gather: one loop over the concat's result; each element comes from its
  // operand, back through that operand's transposes and views, from an input.
  auto concat = dyn_cast_or_null<ConcatOp>(yielded[0].getDefiningOp());
  if (!concat || results.size() != 1)
    return owner->emitOpError("a copy loop is a split or ends in a concat");
  auto t = tensor(concat.getResult());
  int64_t rank = t.getRank();
  int64_t axis = *normalizeAxis(concat.getAxis(), rank);
  out << loop(t.getNumElements()) << "    " << constArray << " sy[] = " << dimsArray(t.getShape())
      << ";\n"
      << "    int64_t c[8];\n    move_delin(i, sy, " << rank << ", c);\n";
  int64_t offset = 0;
  for (auto [k, operand] : llvm::enumerate(concat.getInputs())) {
    int64_t size = tensor(operand).getShape()[axis];
    out << "    " << (k ? "else " : "") << "if (c[" << axis << "] < " << offset + size
        << "LL) {\n      c[" << axis << "] -= " << offset << "LL;\n";
    offset += size;
    Value v = operand;
    while (Operation *def = v.getDefiningOp()) {
      out << moveCoords(def, /*forward=*/false, cuda);
      v = def->getOperand(0);
    }
    Value input = argInput(v);
    if (!input)
      return owner->emitOpError("a concat operand's chain in a copy loop must start at an input");
    auto st = tensor(v);
    out << "      " << constArray << " ss[] = " << dimsArray(st.getShape()) << ";\n"
        << "      " << outs[0] << "[i] = "
        << copy(0, inputName(input) + "[move_lin(c, ss, " + std::to_string(st.getRank()) + ")]")
        << ";\n    }\n";
  }
  finish(t.getNumElements());
  return success();
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
  std::string escaped;
  for (char c : name) {
    if (c == '"' || c == '\\')
      escaped += '\\';
    escaped += c;
  }
  return llvm::formatv("{{\"{0}\", {1}, {2}, {3}, {4}ULL, {5}ULL{6}}", escaped,
                       dtypeCode(t.getElementType()), t.getRank(), dims, offset,
                       bytes, onHost ? ", TCC_LOCATION_HOST" : "")
      .str();
}

/// A C string literal of `text`.
static std::string cstring(StringRef text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

/// The step's descriptor tables (tcc_step_info's params, grads, inputs,
/// outputs and optimizer state), one row per entry (a placeholder row keeps
/// an empty table valid C++).
static void writeTables(llvm::raw_ostream &s, const std::vector<std::string> &params,
                        const std::vector<std::string> &grads,
                        const std::vector<std::string> &inputs,
                        const std::vector<std::string> &outputs,
                        const std::vector<std::string> &state,
                        const std::vector<std::string> &ops,
                        const std::vector<uint64_t> &opLive) {
  auto table = [&](StringRef name, const std::vector<std::string> &rows) {
    s << "static const tcc_tensor_desc " << name << "[] = {\n";
    for (const std::string &r : rows)
      s << "    " << r << ",\n";
    if (rows.empty())
      s << "    {\"\", 0, 0, nullptr, 0, 0},\n";
    s << "};\n";
  };
  table("kParams", params);
  table("kGrads", grads);
  table("kInputs", inputs);
  table("kOutputs", outputs);
  table("kState", state);
  s << "// The op table (tcc-run --trace): what each op that runs code is, and\n"
    << "// the plan's arena bytes live while it runs.\n"
    << "static const char *const kOps[] = {\n";
  for (const std::string &o : ops)
    s << "    " << cstring(o) << ",\n";
  s << (ops.empty() ? "    \"\",\n" : "") << "};\nstatic const uint64_t kOpLive[] = {";
  for (uint64_t b : opLive)
    s << b << "ULL, ";
  s << (opLive.empty() ? "0};\n" : "};\n");
}

std::string Emitter::assembleCuda(bool training,
                                  const std::vector<std::string> &params,
                                  const std::vector<std::string> &grads,
                                  const std::vector<std::string> &inputs,
                                  const std::vector<std::string> &outputs,
                                  const std::vector<std::string> &state,
                                  const std::string &applyRows, int numTrainable,
                                  const std::string &zero) {
  LayoutAttr layout = LayoutAttr::of(kernelFunc);
  int64_t workspace = layout.getWorkspace(), workspaceBytes = layout.getWorkspaceBytes();
  std::string src;
  llvm::raw_string_ostream s(src);
  // The generated half of the step; runtime/cuda/step_host.cu is the fixed
  // half, the tcc_step ABI's entry points over generated_step().
  s << "// Generated by tcc for " << options.modelName
    << " (CUDA target: fp16 storage, fp32 math, cuBLASLt GEMMs). Do not edit.\n"
    << "// The step's tables, kernels and micro-step body; step_host.cu holds\n"
    << "// the tcc_step entry points (step_host.h).\n"
    << "// The runtime headers, and the prebuilt launchers declared extern.\n"
    << "#include \"step_prelude.cuh\"\n\n"
    << "// The generated kernels, compiled in their own unit (step_kernels.cu),\n"
    << "// in parallel with this one.\n"
    << "namespace tcc_step_kernels {\nusing namespace tcc::cuda;\nusing F = float;\n"
    << kernelDecls << "} // namespace tcc_step_kernels\n\n"
    << "namespace {\nusing namespace tcc::cuda;\nusing namespace tcc::cuda::host;\n"
    << "using namespace tcc_step_kernels;\nusing F = float;\n\n"
    << kCudaGridFor
    << "// The index errors of this unit's kernels and of the prebuilt ones.\n"
    << "int read_error_flags() {\n"
    << "  int own = read_and_clear_error_flag(), prebuilt = read_and_clear_prebuilt_error_flag();\n"
    << "  return own < 0 || prebuilt < 0 ? -1 : (own | prebuilt);\n"
    << "}\n\n"
    << globals << "\n";
  writeTables(s, params, grads, inputs, outputs, state, opLabels, opLive);
  std::string optimizer = training ? options.optimizer : "";
  bool adam = options.optimizer == "adamw";
  s << "static const ApplyRow kApply[] = {\n" << applyRows
    << (numTrainable ? "" : "    {0, 0, 0, 0, 0, 0, 0, 0},\n") << "};\n"
    << "static const HostGradRow kHostGrads[] = {\n"
    << (hostGradTable.empty() ? std::string("    {0, 0, 0},\n") : hostGradTable) << "};\n"
    << cudaShards
    << "static const ConstRow kConsts[] = {\n"
    << (constTable.empty() ? "    {nullptr, 0, 0},\n" : constTable) << "};\n"
    << "static const tcc_step_info kInfo = {TCC_STEP_ABI_VERSION, "
    << cstring(options.modelName) << ", " << cstring(options.modelPath)
    << ", \"cuda\", " << arena << "ULL, " << (training ? 1 : 0) << ", "
    << params.size() << ", kParams, kGrads, " << inputs.size() << ", kInputs, "
    << outputs.size() << ", kOutputs, " << cstring(optimizer) << ", "
    << state.size() << ", kState, " << options.memBudget << "ULL, 1, "
    << (options.embedWeights ? 1 : 0) << ", " << opLabels.size() << ", kOps, kOpLive, "
    << layout.getHostBytes() << "ULL};\n\n"
    << "// The initial parameter values, in kParams order.\n"
    << "extern \"C\" const unsigned char tcc_initial_weights[];\n"
    << "#if !defined(__CUDA_ARCH__)\n"
    << "__asm__(\".section .rodata\\n.balign 64\\n.local tcc_initial_weights\\n"
    << "tcc_initial_weights:\\n.incbin \\\"weights.bin\\\"\\n.previous\\n\");\n"
    << "#endif\n\n"
    << "void zero_grads(char *arena) {\n  (void)arena;\n" << zero << "}\n\n"
    << "void refresh_shadows(char *arena) {\n  (void)arena;\n" << shadowRefresh << "}\n\n"
    << "void init_rng(char *arena) {\n  (void)arena;\n" << rngInit << "}\n\n"
    << "void seed_fill(char *arena, double grad_scale) {\n  (void)arena;\n"
    << (seedFill.empty() ? std::string("  (void)grad_scale;\n") : seedFill) << "}\n\n"
    << "// The micro-step's kernels and GEMMs, with no host synchronisation: what\n"
    << "// a CUDA graph captures.\n"
    << "int micro_step_body(void *arena_) {\n"
    << "  {\n" << body << "  }\n  return 0;\n}\n"
    << "} // namespace\n\n"
    << "const tcc::cuda::host::StepDesc &tcc::cuda::host::generated_step() {\n"
    << "  static const StepDesc d = {&kInfo, kApply, " << numTrainable << ", "
    << (adam ? "true" : "false") << ", kConsts, "
    << (constTable.empty() ? 0 : llvm::count(constTable, '\n')) << ", " << constBytes << "ULL,\n"
    << "      tcc_initial_weights, " << (workspace >= 0 ? std::to_string(workspace) : "-1")
    << "LL, " << std::max<int64_t>(workspaceBytes, 0) << "ULL,\n"
    << "      micro_step_body, zero_grads, refresh_shadows, init_rng, seed_fill,\n"
    << "      read_error_flags, kHostGrads, " << hostGradCount << ",\n"
    << "      " << (cudaShardDesc.empty() ? "nullptr, nullptr, 0, 0ULL, 0ULL" : cudaShardDesc)
    << "};\n"
    << "  return d;\n}\n";
  // The kernels' unit: device code only (they take every buffer as a
  // parameter and set no error flag, which is per unit: read_error_flags
  // reads step.cu's and the prebuilt launchers').
  if (kernels.empty())
    return src;
  llvm::raw_string_ostream k(step.kernelSource);
  k << "// Generated by tcc for " << options.modelName
    << " (CUDA target). Do not edit.\n"
    << "// The step's generated kernels, which step.cu declares and launches;\n"
    << "// compiled as a unit of their own, in parallel with step.cu. They need\n"
    << "// only the device helpers (loads, stores, conversions, warp reductions).\n"
    << "#include \"common.cuh\"\n\n"
    << "namespace tcc_step_kernels {\nusing namespace tcc::cuda;\nusing F = float;\n\n"
    << kernels << "} // namespace tcc_step_kernels\n";
  return src;
}

void Emitter::addKernel(const std::string &text) {
  kernels += text;
  // The signature, the line "__global__ void ... name(params) {", declared
  // in step.cu, which launches it.
  size_t at = text.find("__global__ ");
  size_t end = at == std::string::npos ? at : text.find(" {\n", at);
  assert(end != std::string::npos && "the emitter writes every kernel's signature on one line");
  kernelDecls += text.substr(at, end - at) + ";\n";
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
/// (on CUDA, with the fp16 working copy the body reads).
LogicalResult Emitter::bindArguments(Frame &f) {
  // Arguments: parameters, then inputs, each in its arena slot.
  os << "  char *arena = static_cast<char *>(arena_);\n";
  ArrayRef<int64_t> shadowSlots = f.layout.getShadows().asArrayRef();
  // The fp16 working copy of argument `arg` at arena offset `at`, declared
  // in the body.
  auto shadowBuffer = [&](Value arg, int64_t at) {
    Buffer sb;
    sb.name = "v" + std::to_string(nextId++);
    sb.type = "__half";
    sb.offset = at;
    sb.bytes = tensor(arg).getNumElements() * 2;
    os << "  __half *" << sb.name << " = (__half *)(arena + " << sb.offset << "ULL);\n";
    return sb;
  };
  for (unsigned i = 0; i < kernelFunc.getNumArguments(); ++i) {
    Value arg = kernelFunc.getArgument(i);
    if (auto host = hostOffsets.find(arg); host != hostOffsets.end()) {
      // Master weights and optimizer state in the host buffer (#tcc.tiers):
      // the body reads only the fp16 working copy, which the fixed half
      // refreshes from the host (init, apply, a copy into the buffer).
      auto n = kernelFunc.getArgAttrOfType<StringAttr>(i, kParamAttr);
      if (!cuda || i >= shadowSlots.size() || shadowSlots[i] < 0)
        return kernelFunc.emitError("parameter ")
               << n << " keeps its master weights in host memory but has no fp16 working copy";
      uint64_t bytes = tensor(arg).getNumElements() * 4; // fp32 masters
      f.params.push_back(descriptor(n.getValue(), arg, host->second, bytes, /*onHost=*/true));
      step.params.push_back(n.getValue().str());
      f.paramBytes.push_back({arg, bytes});
      buffers[arg] = shadowBuffer(arg, shadowSlots[i]);
      shadowOffsets[arg] = shadowSlots[i];
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
    // CUDA: the body reads the fp16 working copy of a float parameter or
    // input. Parameters' copies are refreshed after every change of the
    // masters (init, apply, a copy into the arena); inputs' at each step.
    if (cuda && i < shadowSlots.size() && shadowSlots[i] >= 0) {
      int64_t n = tensor(arg).getNumElements();
      std::string master = buffers.lookup(arg).name;
      Buffer sb = shadowBuffer(arg, shadowSlots[i]);
      if (kernelFunc.getArgAttr(i, kParamAttr))
        shadowRefresh += "  refresh_half((__half *)(arena + " +
                         std::to_string(sb.offset) + "ULL), (const float *)(arena + " +
                         std::to_string(buffers.lookup(arg).offset) + "ULL), " +
                         std::to_string(n) + "LL);\n";
      else
        os << "  copy(" << sb.name << ", " << master << ", " << n << "LL);\n";
      os << "  (void)" << master << ";\n";
      buffers[arg] = sb;
      shadowOffsets[arg] = sb.offset;
    }
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
      if (cuda)
        zo << "  cudaMemsetAsync(arena + " << offset << "ULL, 0, " << bytes
           << "ULL, stream());\n";
      else
        zo << "  std::memset(arena + " << offset << "ULL, 0, " << bytes << "ULL);\n";
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
  if (f.rngOffset >= 0) {
    if (cuda) {
      rngInit = "  cudaMemsetAsync(arena + " + std::to_string(f.rngOffset) +
                "ULL, 0, 16, stream());\n";
    } else {
      rngInit = "  std::memset(arena + " + std::to_string(f.rngOffset) + "ULL, 0, 16);\n";
    }
  }

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
      sr << "    {" << param << ", " << offsetOf(su.getMaster()) << "ULL, ";
      if (cuda)
        sr << halfOf(su.getHalf()) << "ULL, ";
      sr << flat << "LL, " << n << "LL},\n";
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
    ar << "    {" << param << ", " << offsetOf(up.getMaster()) << "ULL, " << offsetOf(up.getGrad())
       << "ULL, " << s0 << "ULL, " << s1 << "ULL, ";
    if (cuda)
      ar << halfOf(up.getHalf()) << "ULL, ";
    ar << elements(up.getMaster()) << "LL";
    if (cuda)
      ar << ", " << (up.gradOnHost() ? 2 : onHost ? 1 : 0);
    ar << "},\n";
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

/// CUDA, ZeRO-1: the flat spaces' table and each trainable parameter's
/// place in them, and their part of the StepDesc.
void Emitter::cudaShardTables(const Frame &f) {
  ArrayRef<int64_t> chunks = f.shards.getState().asArrayRef();
  llvm::raw_string_ostream t(cudaShards);
  t << "// ZeRO-1: the flat spaces, and where each trainable parameter lies in them.\n"
    << "static const tcc_shard_info kShards = {" << f.shards.getRanks() << ", TCC_DTYPE_F32, "
    << f.shards.getFlatElems() << "ULL, " << f.shards.getChunkElems() << "ULL, "
    << f.shards.getParams() << "ULL, " << f.shards.getGrads() << "ULL, " << f.shards.getShardGrads()
    << "ULL};\n"
    << "static const ShardRow kShardRows[] = {\n" << f.shardRows
    << (f.numTrainable ? "" : "    {0, 0, 0, 0, 0},\n") << "};\n";
  cudaShardDesc = llvm::formatv("&kShards, kShardRows, {0}, {1}ULL, {2}ULL", f.numTrainable,
                                chunks[0], f.adam ? chunks[1] : 0);
}

/// The CPU step's source: the tables, the ABI's functions around the body.
std::string Emitter::assembleCpu(const Frame &f) {
  std::string src;
  llvm::raw_string_ostream s(src);
  s << "// Generated by tcc for " << options.modelName
    << " (CPU target). Do not edit.\n"
    << "#include \"step_prelude.h\"\n\n"
    << "#define TCC_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n"
    << "namespace {\nusing namespace tcc::cpu;\nusing F = "
    << (useDouble ? "double" : "float") << ";\n\n"
    << "// tcc-run --trace: the hook called at each mark of the micro-step (mark\n"
    << "// k ends kOps[k-1]); a load and a branch per op while none is set.\n"
    << "tcc_step_trace_hook g_trace_hook = nullptr;\nvoid *g_trace_ctx = nullptr;\n"
    << "#define TCC_MARK(k) do { if (__builtin_expect(g_trace_hook != nullptr, 0)) "
       "g_trace_hook(g_trace_ctx, (k), -1.0); } while (0)\n\n"
    << globals << "\n";
  writeTables(s, f.params, f.grads, f.inputs, f.outputs, f.state, opLabels, opLive);
  s << "struct ApplyRow { int param; uint64_t p, g, s0, s1; int64_t n; };\n"
    << "static const ApplyRow kApply[] = {\n" << f.applyRows
    << (f.applyRows.empty() ? "    {0, 0, 0, 0, 0, 0},\n" : "") << "};\n"
    << "static const int kNumApply = " << (f.shards ? 0 : f.numTrainable) << ";\n";
  std::string optimizer = f.training ? options.optimizer : "";
  s << "static const tcc_step_info kInfo = {TCC_STEP_ABI_VERSION, "
    << cstring(options.modelName) << ", " << cstring(options.modelPath)
    << ", \"cpu\", " << arena << "ULL, " << (f.training ? 1 : 0) << ", "
    << f.params.size() << ", kParams, kGrads, " << f.inputs.size() << ", kInputs, "
    << f.outputs.size() << ", kOutputs, " << cstring(optimizer) << ", "
    << f.state.size() << ", kState, " << options.memBudget << "ULL, 0, "
    << (options.embedWeights ? 1 : 0) << ", " << opLabels.size() << ", kOps, kOpLive, "
    << f.layout.getHostBytes() << "ULL};\n\n"
    << "// The initial parameter values, in kParams order.\n"
    << "extern \"C\" const unsigned char tcc_initial_weights[];\n"
    << "__asm__(\".section .rodata\\n.balign 64\\n.local tcc_initial_weights\\n"
    << "tcc_initial_weights:\\n.incbin \\\"weights.bin\\\"\\n.previous\\n\");\n"
    << "} // namespace\n\n"
    << "TCC_EXPORT const tcc_step_info *tcc_step_get_info(void) { return &kInfo; }\n\n"
    << "TCC_EXPORT int tcc_step_set_trace_hook(tcc_step_trace_hook hook, void *ctx) {\n"
    << "  g_trace_hook = hook;\n  g_trace_ctx = ctx;\n  return 0;\n}\n\n"
    << "TCC_EXPORT int tcc_step_zero_grads(void *arena_) {\n"
    << "  char *arena = static_cast<char *>(arena_);\n  (void)arena;\n" << f.zero
    << "  return 0;\n}\n\n"
    << "TCC_EXPORT int tcc_step_init(void *arena_) {\n"
    << "  char *arena = static_cast<char *>(arena_);\n  uint64_t at = 0;\n"
    << "  for (int i = 0; i < kInfo.num_params; ++i) {\n"
    << "    if (!kInfo.weights_embedded) std::memset(arena + kParams[i].offset, 0, kParams[i].bytes);\n"
    << "    else std::memcpy(arena + kParams[i].offset, tcc_initial_weights + at, "
       "kParams[i].bytes);\n"
    << "    at += kParams[i].bytes;\n  }\n"
    << rngInit
    << "  return tcc_step_zero_grads(arena_);\n}\n\n"
    << "TCC_EXPORT int tcc_step_apply(void *arena_, tcc_optim_args *a) {\n"
    << "  char *arena = static_cast<char *>(arena_);\n"
    << "  if (!kInfo.has_backward) return 3;\n"
    << (f.shards ? "  // Sharded (ZeRO-1): tcc_step_shard_apply updates this rank's chunk.\n"
                 "  return 7;\n"
               : "")
    << "  double sq = 0.0;\n"
    << "  for (int i = 0; i < kNumApply; ++i)\n"
    << "    sq += sum_squares((const F *)(arena + kApply[i].g), kApply[i].n);\n"
    << "  // Accumulators hold gradients times the loss scale.\n"
    << "  const double unscale = a->loss_scale > 0.0 ? 1.0 / a->loss_scale : 1.0;\n"
    << "  const double norm = std::sqrt(sq) * unscale;\n"
    << "  a->grad_norm = norm;\n"
    << "  if (!std::isfinite(norm)) { tcc_step_zero_grads(arena_); return 2; }\n"
    << "  // clip_grad_norm_: scale by max_norm / (norm + 1e-6), clamped to 1.\n"
    << "  double clip = 1.0;\n"
    << "  if (a->clip_norm > 0.0 && a->clip_norm / (norm + 1e-6) < 1.0)\n"
    << "    clip = a->clip_norm / (norm + 1e-6);\n"
    << "  clip *= unscale;\n"
    << "  for (int i = 0; i < kNumApply; ++i) {\n"
    << "    const ApplyRow &r = kApply[i];\n"
    << "    double wd = (a->decay && !a->decay[r.param]) ? 0.0 : a->weight_decay;\n"
    << "    F *p = (F *)(arena + r.p), *g = (F *)(arena + r.g);\n"
    << (f.adam ? "    adamw_update(p, g, (F *)(arena + r.s0), (F *)(arena + r.s1), r.n, "
               "a->lr, a->beta1, a->beta2, a->eps, wd, a->step, clip);\n"
             : "    sgd_update(p, g, (F *)(arena + r.s0), r.n, a->lr, a->momentum, "
               "wd, a->nesterov != 0, a->step, clip);\n")
    << "  }\n"
    << "  return tcc_step_zero_grads(arena_);\n}\n\n"
    << "TCC_EXPORT int tcc_step_micro_step(void *arena_, double grad_scale) {\n"
    << "  (void)grad_scale;\n"
    << body << "  return 0;\n}\n";
  if (f.shards)
    s << cpu::shardedApply(f.shards, f.shardRows, f.numTrainable, f.adam);
  return src;
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
  os << (cuda ? "  if (g_prof == 1) prof_mark(0);\n" : "  TCC_MARK(0);\n");
  for (Operation &op : kernelFunc.getBody().front().without_terminator())
    if (failed(cuda ? emitCudaKernel(&op) : emitKernel(&op)))
      return failure();
  if (failed(bindResults(f)) || failed(optimizerTables(f)))
    return failure();
  if (cuda) {
    if (f.shards)
      cudaShardTables(f);
    step.source = assembleCuda(f.training, f.params, f.grads, f.inputs, f.outputs, f.state,
                               f.applyRows, f.shards ? 0 : f.numTrainable, f.zero);
    step.target = "cuda";
  } else {
    step.source = assembleCpu(f);
  }
  step.arenaBytes = arena;
  return std::move(step);
}

FailureOr<EmittedStep> mlir::tcc::emitStep(ModuleOp module,
                                          const StepEmitOptions &options) {
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
  Emitter emitter(kernelStep, target, options);
  return emitter.run();
}
