//===- TcckOps.cpp - kernel-level operations -------------------------------===//

#include "compiler/Kernel/TcckOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tcck;

#include "compiler/Kernel/TcckEnums.cpp.inc"
#include "compiler/Kernel/TcckOpsDialect.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "compiler/Kernel/TcckAttrs.cpp.inc"

void TcckDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "compiler/Kernel/TcckAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "compiler/Kernel/TcckOps.cpp.inc"
      >();
}

LogicalResult TcckDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() == kRoleAttr) {
    auto s = dyn_cast<StringAttr>(attr.getValue());
    if (!s || !symbolizeLoopRole(s.getValue()))
      return op->emitError("'") << kRoleAttr << "' must name a loop role (element, row, "
                                                 "row_reduction or reduction)";
    if (!op->getParentOfType<LoopOp>())
      return op->emitError("'") << kRoleAttr << "' is only meaningful inside a tcck.loop";
    return success();
  }
  if (attr.getName() == kStageAttr) {
    auto i = dyn_cast<IntegerAttr>(attr.getValue());
    if (!i || i.getInt() < 0)
      return op->emitError("'") << kStageAttr << "' must be a non-negative integer";
    return success();
  }
  if (attr.getName() == kApplyAttr) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<func::FuncOp>(op))
      return op->emitError("'") << kApplyAttr << "' is a unit attribute of a function";
    return success();
  }
  return op->emitError("unknown tcck attribute '") << attr.getName() << "'";
}

LogicalResult TcckDialect::verifyRegionArgAttribute(Operation *op, unsigned region, unsigned arg,
                                                    NamedAttribute attr) {
  if (attr.getName() != kSlotAttr)
    return op->emitError("unknown tcck argument attribute '") << attr.getName() << "'";
  auto fn = dyn_cast<func::FuncOp>(op);
  auto slot = dyn_cast<TypeAttr>(attr.getValue());
  if (!fn || !slot || !isa<FloatType>(slot.getValue()))
    return op->emitError("'") << kSlotAttr << "' is a float type on a function argument";
  auto buffer = dyn_cast<MemRefType>(fn.getArgument(arg).getType());
  if (!buffer || !isa<FloatType>(buffer.getElementType()))
    return op->emitError("'") << kSlotAttr << "' is on a float buffer argument, not on argument "
                              << arg << " of type " << fn.getArgument(arg).getType();
  return success();
}

static int64_t numElements(Value v) { return cast<MemRefType>(v.getType()).getNumElements(); }

/// A buffer made by tcck.host_view (host memory), not tcck.view (the arena).
static bool isHostBuffer(Value v) { return v.getDefiningOp<HostViewOp>() != nullptr; }

/// What update and shard_update check: the master fp32 or fp64, the fp16
/// copy (if any) as long, and, on the host, a copy to refresh.
template <typename Op> static LogicalResult verifyMaster(Op op) {
  auto master = cast<MemRefType>(op.getMaster().getType());
  if (!master.getElementType().isF32() && !master.getElementType().isF64())
    return op.emitOpError("updates master weights of type ")
           << master.getElementType() << "; f32 or f64 expected";
  if (Value half = op.getHalf()) {
    auto h = cast<MemRefType>(half.getType());
    if (!h.getElementType().isF16() || h.getNumElements() != master.getNumElements())
      return op.emitOpError("'s working copy must be f16 with the master's ")
             << master.getNumElements() << " elements";
    if (isHostBuffer(half))
      return op.emitOpError("'s working copy must be in the arena (tcck.view)");
  }
  return success();
}

bool UpdateOp::onHost() { return isHostBuffer(getMaster()); }
bool UpdateOp::gradOnHost() { return isHostBuffer(getGrad()); }

LogicalResult UpdateOp::verify() {
  if (failed(verifyMaster(*this)))
    return failure();
  Type elt = getMaster().getType().getElementType();
  int64_t n = numElements(getMaster());
  if (getState().size() != 1 && getState().size() != 2)
    return emitOpError("has ") << getState().size()
                               << " state buffers; 2 (AdamW) or 1 (SGD) expected";
  SmallVector<Value> checked(getState().begin(), getState().end());
  checked.push_back(getGrad());
  for (Value v : checked)
    if (cast<MemRefType>(v.getType()).getElementType() != elt || numElements(v) != n)
      return emitOpError("'s gradient and state must be ") << n << " elements of " << elt
                                                          << ", as the master";
  for (Value s : getState())
    if (isHostBuffer(s) != onHost())
      return emitOpError("keeps its state in another memory than its master weights");
  if (gradOnHost() && !onHost())
    return emitOpError("has its gradient in host memory but its master on the device");
  if (onHost() && !getHalf())
    return emitOpError("keeps its master in host memory but has no fp16 working copy");
  return success();
}

LogicalResult ShardUpdateOp::verify() {
  if (failed(verifyMaster(*this)))
    return failure();
  if (isHostBuffer(getMaster()))
    return emitOpError("'s master weights must be in the arena: ZeRO-1 does not combine "
                       "with host memory tiers");
  return success();
}

LogicalResult GlobalOp::verify() {
  auto t = getType();
  auto value = getValue();
  if (value.getShapedType().getShape() != t.getShape())
    return emitOpError("holds a value of another shape than its buffer");
  return success();
}

LogicalResult AliasOp::verify() {
  if (getSource().getType().getElementType() != getType().getElementType())
    return emitOpError("changes the element type; an alias only reshapes");
  if (numElements(getSource()) != getType().getNumElements())
    return emitOpError("names ") << getType().getNumElements() << " elements of a buffer of "
                                 << numElements(getSource());
  return success();
}

LogicalResult CopyOp::verify() {
  if (numElements(getOut()) != numElements(getIn()))
    return emitOpError("copies ") << numElements(getIn()) << " elements into a buffer of "
                                  << numElements(getOut());
  return success();
}

static bool isScalar(Type t) { return t.isIntOrIndexOrFloat(); }

/// An indexing map `attr` of a fused kernel over `space`, for `buffer`
/// (named `what` in errors): one result per dimension of the buffer, each a
/// dimension of the space of the same size, or 0 for a size-1 dimension.
static LogicalResult verifyIndexingMap(Operation *op, Attribute attr, Value buffer,
                                       ArrayRef<int64_t> space, const std::string &what) {
  auto mapAttr = dyn_cast<AffineMapAttr>(attr);
  if (!mapAttr)
    return op->emitOpError("has an indexing map for ") << what << " that is not an affine map";
  AffineMap map = mapAttr.getValue();
  ArrayRef<int64_t> shape = cast<MemRefType>(buffer.getType()).getShape();
  if (map.getNumDims() != space.size() || map.getNumSymbols() != 0)
    return op->emitOpError("has an indexing map for ")
           << what << " over " << map.getNumDims() << " dimensions (and "
           << map.getNumSymbols() << " symbols); the space has " << space.size();
  if (map.getNumResults() != shape.size())
    return op->emitOpError("has an indexing map for ")
           << what << " with " << map.getNumResults() << " results; its buffer has rank "
           << shape.size();
  for (auto [d, e] : llvm::enumerate(map.getResults())) {
    if (auto dim = dyn_cast<AffineDimExpr>(e)) {
      if (shape[d] != space[dim.getPosition()])
        return op->emitOpError("maps dimension ")
               << d << " of " << what << " (size " << shape[d] << ") to dimension "
               << dim.getPosition() << " of the space (size " << space[dim.getPosition()] << ")";
      continue;
    }
    auto c = dyn_cast<AffineConstantExpr>(e);
    if (!c || c.getValue() != 0 || shape[d] != 1)
      return op->emitOpError("maps dimension ")
             << d << " of " << what
             << " to something other than a dimension of the space or 0 for a size-1 dimension";
  }
  return success();
}

/// A scalar body (a tcck.loop's, a tcck.matmul's epilogue): scalar
/// arguments, the dialect's scalar ops, scalars yielded.
static LogicalResult verifyScalarBody(Operation *owner, Block &body) {
  for (BlockArgument a : body.getArguments())
    if (!isScalar(a.getType()))
      return owner->emitOpError("has a body argument of type ")
             << a.getType() << "; a scalar expected";
  for (Operation &op : body.without_terminator())
    if (!isa<ScalarEwOp, SelectOp, ConvertOp, GeluOp, GeluGradOp, ReduceOp>(op))
      return op.emitOpError("is not a scalar op of a fused kernel's body");
  for (Value v : body.getTerminator()->getOperands())
    if (!isScalar(v.getType()))
      return owner->emitOpError("yields a value of type ") << v.getType() << "; a scalar expected";
  return success();
}

/// Whether an elementwise kind takes two operands (else one).
static bool isBinary(tcc::EwKind k) {
  return k <= tcc::EwKind::Or || (k >= tcc::EwKind::LessOrEqual && k <= tcc::EwKind::Min);
}

LogicalResult ElementwiseOp::verify() {
  std::optional<tcc::EwKind> kind = tcc::symbolizeEwKind(getKind());
  if (!kind)
    return emitOpError("names no elementwise computation: '") << getKind() << "'";
  bool binary = isBinary(*kind);
  if (getIns().size() != (binary ? 2u : 1u))
    return emitOpError("'") << getKind() << "' takes "
                            << (binary ? 2 : 1) << " inputs, not " << getIns().size();
  return success();
}

const LibraryCallSignature &mlir::tcck::libraryCallSignature(LibraryCall callee) {
  static const StringRef tanh[] = {"tanh"};
  static const StringRef axisLog[] = {"axis", "log"};
  static const StringRef layerNorm[] = {"axis", "epsilon"};
  static const StringRef reduce[] = {"mask", "mean"};
  static const StringRef axis[] = {"axis"};
  static const StringRef perm[] = {"perm"};
  static const StringRef slice[] = {"starts", "steps"};
  static const StringRef keep[] = {"stream", "threshold"};
  static const StringRef gemm[] = {"trans_a", "trans_b", "alpha", "beta"};
  static const StringRef sce[] = {"reduction"};
  static const StringRef attention[] = {"shape", "columns", "token_major", "packed",
                                        "scale", "causal"};
  // {outs, ins (-1: one or more), options, can fail}; optional inputs
  // (a bias, weights) are counted by `optionalIns` below.
  static const LibraryCallSignature table[] = {
      /*gelu*/ {1, 1, tanh, false},
      /*gelu_grad*/ {1, 2, tanh, false},
      /*cast*/ {1, 1, {}, false},
      /*where*/ {1, 3, {}, false},
      /*softmax*/ {1, 1, axisLog, false},
      /*layer_norm*/ {3, 2, layerNorm, false},
      /*reduce*/ {1, 1, reduce, false},
      /*gather*/ {1, 2, axis, true},
      /*gather_grad*/ {1, 2, axis, true},
      /*transpose*/ {1, 1, perm, false},
      /*slice*/ {1, 1, slice, false},
      /*slice_grad*/ {1, 1, slice, false},
      /*concat*/ {1, -1, axis, false},
      /*broadcast_to*/ {1, 1, {}, false},
      /*random_keep*/ {1, 1, keep, false},
      /*gemm*/ {1, 2, gemm, false},
      /*sce_loss*/ {2, 2, sce, true},
      /*sce_loss_with_grad*/ {2, 3, sce, true},
      /*sce_loss_grad*/ {1, 3, sce, true},
      /*attention_forward*/ {2, 3, attention, false},
      /*attention_backward*/ {-1, 6, attention, false},
  };
  return table[static_cast<unsigned>(callee)];
}

/// How many inputs a call may have beyond its signature's: a LayerNorm's
/// bias, a Gemm's C, the loss's weights, an attention's bias and random
/// state.
static unsigned optionalIns(LibraryCall callee) {
  switch (callee) {
  case LibraryCall::LayerNorm:
  case LibraryCall::Gemm:
  case LibraryCall::SceLoss:
  case LibraryCall::SceLossWithGrad:
  case LibraryCall::SceLossGrad:
    return 1;
  case LibraryCall::AttentionForward:
  case LibraryCall::AttentionBackward:
    return 2;
  default:
    return 0;
  }
}

bool CallOp::canFail() { return libraryCallSignature(getCallee()).canFail; }

LogicalResult CallOp::verify() {
  const LibraryCallSignature &sig = libraryCallSignature(getCallee());
  StringRef name = stringifyLibraryCall(getCallee());
  unsigned ins = getIns().size(), outs = getOuts().size();
  if (sig.outs >= 0 ? outs != unsigned(sig.outs) : outs == 0)
    return emitOpError("'") << name << "' writes "
                            << (sig.outs >= 0 ? std::to_string(sig.outs) : "one or more")
                            << " outputs, not " << outs;
  if (sig.ins >= 0 ? ins < unsigned(sig.ins) || ins > sig.ins + optionalIns(getCallee())
                   : ins == 0)
    return emitOpError("'") << name << "' takes "
                            << (sig.ins >= 0 ? std::to_string(sig.ins) : "one or more")
                            << (optionalIns(getCallee()) ? " (or a few more optional)" : "")
                            << " inputs, not " << ins;
  for (StringRef key : sig.options)
    if (!getOptions().get(key))
      return emitOpError("'") << name << "' needs the option '" << key << "'";
  return success();
}

LogicalResult MatMulOp::verify() {
  if (getOuts().empty())
    return emitOpError("writes no output");
  Region &r = getEpilogue();
  if (getAccumulate() &&
      (!r.empty() || !cast<MemRefType>(getOuts()[0].getType()).getElementType().isF32()))
    return emitOpError("with 'accumulate' adds its product into one fp32 accumulator, "
                       "without an epilogue");
  if (r.empty()) {
    if (getOuts().size() != 1 || !getEpilogueIns().empty())
      return emitOpError("without an epilogue writes one output and reads no epilogue inputs");
    return success();
  }
  if (!r.hasOneBlock())
    return emitOpError("has an epilogue of more than one block");
  Block &b = r.front();
  if (b.getNumArguments() != getEpilogueIns().size() + 1)
    return emitOpError("has an epilogue of ")
           << b.getNumArguments() << " arguments; it takes the product and "
           << getEpilogueIns().size() << " epilogue inputs";
  auto yield = dyn_cast<YieldOp>(b.getTerminator());
  if (!yield || yield.getValues().size() != getOuts().size())
    return emitOpError("has an epilogue that does not yield one value per output");
  // Every output is an element of the product: one space, the outputs'.
  ArrayRef<int64_t> space = cast<MemRefType>(getOuts()[0].getType()).getShape();
  for (Value out : getOuts())
    if (cast<MemRefType>(out.getType()).getShape() != space)
      return emitOpError("has outputs of different shapes");
  if (!getEpilogueMaps() || getEpilogueMaps()->size() != getEpilogueIns().size())
    return emitOpError("needs one indexing map per epilogue input");
  for (auto [k, in] : llvm::enumerate(getEpilogueIns()))
    if (failed(verifyIndexingMap(*this, (*getEpilogueMaps())[k], in, space,
                                 "epilogue input " + std::to_string(k))))
      return failure();
  if (CublasLtAttr lt = getCublasltAttr()) {
    int64_t ins = getEpilogueIns().size(), outs = getOuts().size();
    auto in = [](int64_t k, int64_t n, bool optional) {
      return (k >= 0 && k < n) || (optional && k == -1);
    };
    if (!in(lt.getBias(), ins, false) || !in(lt.getResidual(), ins, true) ||
        !in(lt.getResult(), outs, false) || !in(lt.getAux(), outs, true) ||
        lt.getAux() == lt.getResult() || (lt.getAux() >= 0 && !lt.getGelu()) ||
        (lt.getGelu() && lt.getResidual() >= 0) || outs != 1 + (lt.getAux() >= 0))
      return emitOpError("has a cuBLASLt epilogue whose operands or outputs are not its own "
                         "(a bias input, an optional residual input without a GELU, the "
                         "result and, with a GELU, an optional auxiliary output)");
  }
  return success();
}

LogicalResult MatMulOp::verifyRegions() {
  Region &r = getEpilogue();
  return r.empty() ? success() : verifyScalarBody(*this, r.front());
}

/// A fused body: one block argument per input, a tcck.yield of one value
/// per output.
static LogicalResult verifyFusedBody(Operation *op, Region &body, size_t ins, size_t outs) {
  Block &b = body.front();
  if (b.getNumArguments() != ins)
    return op->emitOpError("has a body of ")
           << b.getNumArguments() << " arguments for " << ins << " inputs";
  auto yield = dyn_cast<YieldOp>(b.getTerminator());
  if (!yield || yield.getValues().size() != outs)
    return op->emitOpError("has a body that does not yield one value per output");
  return success();
}

LogicalResult LoopOp::verify() {
  if (failed(verifyFusedBody(*this, getBody(), getIns().size(), getOuts().size())))
    return failure();
  if (getPassesAttr().getInt() < 0)
    return emitOpError("has a negative number of passes");
  ArrayRef<int64_t> space = getSpace();
  if (llvm::any_of(space, [](int64_t d) { return d < 0; }))
    return emitOpError("has a space with a negative dimension");
  if (getRows() && space.empty())
    return emitOpError("is a loop over rows of a rank-0 space");
  // One map per buffer, from the space to that buffer's elements.
  size_t numIns = getIns().size();
  if (getIndexingMaps().size() != numIns + getOuts().size())
    return emitOpError("has ") << getIndexingMaps().size() << " indexing maps for "
                               << numIns + getOuts().size() << " inputs and outputs";
  for (auto [k, buffer] : llvm::enumerate(getOperands())) {
    std::string what = k < numIns ? "input " + std::to_string(k)
                                  : "output " + std::to_string(k - numIns);
    if (failed(verifyIndexingMap(*this, getIndexingMaps()[k], buffer, space, what)))
      return failure();
  }
  return success();
}

/// The body, after its ops have verified themselves (their roles name one).
LogicalResult LoopOp::verifyRegions() {
  ArrayRef<int64_t> space = getSpace();
  // A scalar body: one scalar per input, scalar ops with a role, a scalar
  // yielded per output.
  Block &body = getBody().front();
  if (failed(verifyScalarBody(*this, body)))
    return failure();
  for (Operation &op : body.without_terminator()) {
    auto role = op.getAttrOfType<StringAttr>(kRoleAttr);
    if (!role)
      return op.emitOpError("in a tcck.loop has no '") << kRoleAttr << "'";
    if (!op.hasAttr(kStageAttr))
      return op.emitOpError("in a tcck.loop has no '") << kStageAttr << "'";
    std::optional<LoopRole> r = symbolizeLoopRole(role.getValue());
    bool reduction = r == LoopRole::RowReduction || r == LoopRole::Reduction;
    if (reduction != isa<ReduceOp>(op))
      return op.emitOpError("has the role '") << role.getValue() << "'; "
             << (reduction ? "only tcck.reduce reduces" : "a tcck.reduce's role is a reduction");
    if (auto red = dyn_cast<ReduceOp>(op)) {
      llvm::SmallDenseSet<int64_t> seen;
      for (int64_t d : red.getDims())
        if (d < 0 || d >= (int64_t)space.size() || !seen.insert(d).second)
          return op.emitOpError("reduces dimension ")
                 << d << ", which is not a dimension of the space (once)";
      if (r == LoopRole::RowReduction &&
          (!getRows() || red.getDims().size() != 1 || red.getDims()[0] != (int64_t)space.size() - 1))
        return op.emitOpError("is a row reduction of a loop that is not over rows, or not over "
                              "the last dimension");
    }
  }
  // Each output is written as its value's role says: an element at each
  // point (the output laid out as the space), a row value once per row, a
  // reduction across rows at each point of the dimensions it keeps.
  for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands())) {
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != &body)
      return emitOpError("yields for output ") << k << " a value its body does not compute";
    LoopRole role = *symbolizeLoopRole(def->getAttrOfType<StringAttr>(kRoleAttr).getValue());
    AffineMap map = getOutputMap(k);
    auto dimAt = [&](unsigned d) -> std::optional<unsigned> {
      if (auto dim = dyn_cast<AffineDimExpr>(map.getResult(d)))
        return dim.getPosition();
      return std::nullopt;
    };
    bool ok = true;
    if (role == LoopRole::Reduction) {
      ArrayRef<int64_t> reduced = cast<ReduceOp>(def).getDims();
      int64_t last = -1;
      for (unsigned d = 0; d < map.getNumResults(); ++d)
        if (std::optional<unsigned> p = dimAt(d)) {
          ok &= !llvm::is_contained(reduced, (int64_t)*p) && (int64_t)*p > last;
          last = *p;
        }
    } else {
      bool row = role != LoopRole::Element;
      ok = map.getNumResults() == space.size();
      for (unsigned d = 0; ok && d < map.getNumResults(); ++d) {
        std::optional<unsigned> p = dimAt(d);
        ok = p ? *p == d && !(row && d + 1 == space.size()) : true;
      }
    }
    if (!ok)
      return emitOpError("writes output ")
             << k << " (" << (role == LoopRole::Element ? "an " : "a ") << stringifyLoopRole(role)
             << " value) through a map that does not lay it out "
             << (role == LoopRole::Reduction ? "over the dimensions its reduction keeps"
                 : role == LoopRole::Element ? "as the space"
                                             : "one element per row");
  }
  return success();
}

LogicalResult ScalarEwOp::verify() {
  std::optional<tcc::EwKind> kind = tcc::symbolizeEwKind(getKind());
  if (!kind)
    return emitOpError("names no elementwise computation: '") << getKind() << "'";
  unsigned arity = isBinary(*kind) ? 2 : 1;
  if (getOperands().size() != arity)
    return emitOpError("'") << getKind() << "' takes " << arity << " operands, not "
                            << getOperands().size();
  return success();
}

/// The least and the greatest value `e` takes for dimensions in [0, size)
/// of `shape` (interval arithmetic: exact for a linear map, which names each
/// dimension once, and a bound that contains the values otherwise); none
/// for an expression that is not affine in constants.
static std::optional<std::pair<int64_t, int64_t>> valueRange(AffineExpr e,
                                                             ArrayRef<int64_t> shape) {
  if (auto c = dyn_cast<AffineConstantExpr>(e))
    return std::make_pair(c.getValue(), c.getValue());
  if (auto d = dyn_cast<AffineDimExpr>(e)) {
    if (d.getPosition() >= shape.size())
      return std::nullopt;
    return std::make_pair(int64_t(0), shape[d.getPosition()] - 1);
  }
  auto bin = dyn_cast<AffineBinaryOpExpr>(e);
  if (!bin)
    return std::nullopt;
  auto lhs = valueRange(bin.getLHS(), shape), rhs = valueRange(bin.getRHS(), shape);
  if (!lhs || !rhs)
    return std::nullopt;
  auto [a, b] = *lhs;
  if (e.getKind() == AffineExprKind::Add)
    return std::make_pair(a + rhs->first, b + rhs->second);
  // The other kinds take a constant on the right.
  if (rhs->first != rhs->second)
    return std::nullopt;
  int64_t k = rhs->first;
  switch (e.getKind()) {
  case AffineExprKind::Mul:
    return k >= 0 ? std::make_pair(a * k, b * k) : std::make_pair(b * k, a * k);
  case AffineExprKind::FloorDiv:
    if (k <= 0)
      return std::nullopt;
    return std::make_pair(llvm::divideFloorSigned(a, k), llvm::divideFloorSigned(b, k));
  case AffineExprKind::Mod:
    if (k <= 0)
      return std::nullopt;
    if (llvm::divideFloorSigned(a, k) == llvm::divideFloorSigned(b, k))
      return std::make_pair(a - k * llvm::divideFloorSigned(a, k), b - k * llvm::divideFloorSigned(b, k));
    return std::make_pair(int64_t(0), k - 1);
  default:
    return std::nullopt;
  }
}

LogicalResult CopyLoopOp::verify() {
  SmallVector<int64_t> written(getOuts().size(), 0);
  for (auto [k, attr] : llvm::enumerate(getCopies())) {
    auto copy = cast<CopyAttr>(attr);
    std::string what = "copy " + std::to_string(k);
    if (copy.getIn() < 0 || copy.getIn() >= (int64_t)getIns().size() || copy.getOut() < 0 ||
        copy.getOut() >= (int64_t)getOuts().size())
      return emitOpError() << what << " names input " << copy.getIn() << " and output "
                           << copy.getOut() << " of " << getIns().size() << " and "
                           << getOuts().size();
    ArrayRef<int64_t> shape = copy.getShape().asArrayRef();
    if (llvm::any_of(shape, [](int64_t d) { return d < 0; }))
      return emitOpError() << what << " has a negative dimension";
    int64_t count = ShapedType::getNumElements(shape);
    written[copy.getOut()] += count;
    for (auto [side, map, buffer] :
         {std::make_tuple("from", copy.getFrom(), getIns()[copy.getIn()]),
          std::make_tuple("to", copy.getTo(), getOuts()[copy.getOut()])}) {
      if (map.getNumDims() != shape.size() || map.getNumSymbols() != 0 || map.getNumResults() != 1)
        return emitOpError() << what << "'s '" << side << "' map " << AffineMapAttr::get(map) << " is not one flat index of "
                             << shape.size() << " dimensions";
      if (count == 0)
        continue;
      int64_t size = cast<MemRefType>(buffer.getType()).getNumElements();
      auto range = valueRange(map.getResult(0), shape);
      if (!range)
        return emitOpError() << what << "'s '" << side << "' map " << AffineMapAttr::get(map)
                             << " is not affine in constants";
      if (range->first < 0 || range->second >= size)
        return emitOpError() << what << "'s '" << side << "' map " << AffineMapAttr::get(map) << " reaches ["
                             << range->first << ", " << range->second << "] of a buffer of "
                             << size << " elements";
    }
  }
  for (auto [k, out] : llvm::enumerate(getOuts()))
    if (written[k] != cast<MemRefType>(out.getType()).getNumElements())
      return emitOpError() << "copies " << written[k] << " elements into output " << k << " of "
                           << cast<MemRefType>(out.getType()).getNumElements();
  return success();
}

#define GET_OP_CLASSES
#include "compiler/Kernel/TcckOps.cpp.inc"
