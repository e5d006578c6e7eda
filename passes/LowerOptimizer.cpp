//===- LowerOptimizer.cpp - the step's optimizer as kernel IR -------------===//
//
// Part of tcc-lower-to-kernels: the optimizer's update of every trainable
// parameter, as the function @apply beside the step's, from the memory
// plan (tcc.layout): where each master, gradient accumulator, state tensor
// and fp16 working copy lives (the arena, or the pinned host buffer of
// #tcc.tiers), or, for a sharded step (#tcc.shards), where each parameter
// lies in the flat space. The emitters read the update's tables from it.
// Also the micro-step's waits for a host update still in flight
// (placeHostAwaits).
//
//===----------------------------------------------------------------------===//

#include "passes/LowerToKernels.h"

#include "compiler/Dialect/TccDialect.h"
#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckDialect.h"
#include "compiler/Kernel/TcckOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::tcc;

func::FuncOp mlir::tcc::applyFunction(Operation *op) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  if (!module)
    return nullptr;
  for (auto f : module.getOps<func::FuncOp>())
    if (f->hasAttr(tcck::kApplyAttr))
      return f;
  return nullptr;
}

LogicalResult mlir::tcc::buildApply(func::FuncOp step, LayoutAttr layout, bool cuda,
                                    Type storage) {
  MLIRContext *ctx = step.getContext();
  // The trainable parameters: those with a gradient result.
  llvm::StringSet<> withGrad;
  for (unsigned i = 0; i < step.getNumResults(); ++i)
    if (auto n = step.getResultAttrOfType<StringAttr>(i, kGradAttr))
      withGrad.insert(n.getValue());
  SmallVector<unsigned> paramArgs;
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (step.getArgAttr(i, kParamAttr))
      paramArgs.push_back(i);
  const size_t numParams = paramArgs.size();
  auto perParam = [&](DenseI64ArrayAttr a) { return a ? a.asArrayRef() : ArrayRef<int64_t>(); };
  ArrayRef<int64_t> params = perParam(layout.getParams()), grads = perParam(layout.getGrads()),
                    state = perParam(layout.getState()), shadows = perParam(layout.getShadows()),
                    hostParams = perParam(layout.getHostParams()),
                    hostGrads = perParam(layout.getHostGrads()),
                    hostState = perParam(layout.getHostState());
  ShardsAttr shards = layout.getShards();
  if (params.size() != numParams || grads.size() != numParams ||
      (numParams && state.size() % numParams) ||
      (!hostParams.empty() && hostParams.size() != numParams) ||
      (!hostGrads.empty() && hostGrads.size() != numParams) ||
      (!hostState.empty() && hostState.size() != state.size()))
    return step.emitError("tcc-lower-to-kernels: the memory plan's optimizer slots do not "
                          "match the step's parameters");
  const size_t statePer = numParams ? state.size() / numParams : 0;
  if (!shards && statePer != 1 && statePer != 2 && numParams)
    return step.emitError("tcc-lower-to-kernels: the memory plan keeps ")
           << statePer << " optimizer state tensors per parameter; 2 (AdamW) or 1 (SGD) expected";

  OpBuilder b(ctx);
  b.setInsertionPointAfter(step);
  auto apply = b.create<func::FuncOp>(step.getLoc(), "apply", b.getFunctionType({}, {}));
  apply->setAttr(tcck::kApplyAttr, b.getUnitAttr());
  b.setInsertionPointToStart(apply.addEntryBlock());
  Location loc = step.getLoc();
  auto slot = [](ArrayRef<int64_t> a, size_t i) { return i < a.size() ? a[i] : int64_t(-1); };
  for (auto [p, argIndex] : llvm::enumerate(paramArgs)) {
    auto name = step.getArgAttrOfType<StringAttr>(argIndex, kParamAttr);
    if (!withGrad.contains(name.getValue()))
      continue; // frozen
    auto t = cast<RankedTensorType>(step.getArgument(argIndex).getType());
    Type master = cuda ? Type(b.getF32Type()) : storage;
    // A buffer at `offset`: in the arena, or, `onHost`, the host buffer.
    auto buffer = [&](int64_t offset, bool onHost, Type elt) -> Value {
      auto mt = MemRefType::get(t.getShape(), elt);
      if (onHost)
        return b.create<tcck::HostViewOp>(loc, mt, offset);
      return b.create<tcck::ViewOp>(loc, mt, offset);
    };
    Value half;
    if (cuda && slot(shadows, argIndex) >= 0)
      half = buffer(shadows[argIndex], false, b.getF16Type());
    int64_t index = static_cast<int64_t>(p);
    if (shards) {
      if (params[p] < shards.getParams() || grads[p] < 0 ||
          (params[p] - shards.getParams()) != (grads[p] - shards.getGrads()) ||
          (params[p] - shards.getParams()) % shards.getElemBytes())
        return step.emitError("tcc-lower-to-kernels: parameter ")
               << name << " lies outside the sharded plan's flat space";
      int64_t flat = (params[p] - shards.getParams()) / shards.getElemBytes();
      b.create<tcck::ShardUpdateOp>(loc, name, index, buffer(params[p], false, master), flat,
                                    half);
      continue;
    }
    const bool onHost = slot(hostParams, p) >= 0, gradOnHost = slot(hostGrads, p) >= 0;
    Value m = buffer(onHost ? hostParams[p] : params[p], onHost, master);
    Value g = buffer(gradOnHost ? hostGrads[p] : grads[p], gradOnHost, master);
    SmallVector<Value> s;
    for (size_t k = 0; k < statePer; ++k) {
      int64_t at = onHost ? slot(hostState, p * statePer + k) : state[p * statePer + k];
      if (at < 0 || (!onHost && params[p] < 0) || (!gradOnHost && grads[p] < 0))
        return step.emitError("tcc-lower-to-kernels: parameter ")
               << name << "'s optimizer state or gradient has no slot in the memory plan";
      s.push_back(buffer(at, onHost, master));
    }
    b.create<tcck::UpdateOp>(loc, name, index, m, g, s, half);
  }
  b.create<func::ReturnOp>(loc);
  return success();
}

void mlir::tcc::placeHostAwaits(func::FuncOp func, LayoutAttr layout) {
  DenseI64ArrayAttr hostParams = layout.getHostParams();
  if (!hostParams || llvm::none_of(hostParams.asArrayRef(), [](int64_t o) { return o >= 0; }))
    return;
  Block &block = func.getBody().front();
  OpBuilder b(func.getContext());
  // Per parameter (its index p in the step's table): the wait before its
  // first reader if its master is on the host, and its accumulator's bytes
  // in the arena (fp32) if it has one.
  DenseI64ArrayAttr grads = layout.getGrads();
  SmallVector<std::pair<int64_t, int64_t>> accumulators;
  int64_t p = -1;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
    if (!name)
      continue;
    ++p;
    auto arg = func.getArgument(i);
    if (int64_t at = grads && p < grads.size() ? grads[p] : -1; at >= 0)
      accumulators.push_back({at, at + 4 * cast<MemRefType>(arg.getType()).getNumElements()});
    if (p >= hostParams.size() || hostParams[p] < 0)
      continue;
    Operation *first = nullptr;
    for (Operation *user : arg.getUsers())
      if (Operation *top = block.findAncestorOpInBlock(*user))
        if (!first || top->isBeforeInBlock(first))
          first = top;
    if (!first)
      continue; // not read: nothing waits for it
    b.setInsertionPoint(first);
    b.create<tcck::AwaitWeightsOp>(first->getLoc(), name, p);
  }
  auto touches = [&](Operation &op) {
    if (isa<tcck::AccumulateOp, tcck::HostAccumulateOp, tcck::GradReadyOp>(op))
      return true;
    for (Value v : op.getOperands()) {
      while (auto alias = v.getDefiningOp<tcck::AliasOp>()) // the same bytes, reshaped
        v = alias.getSource();
      if (auto view = v.getDefiningOp<tcck::ViewOp>()) {
        auto t = cast<MemRefType>(view.getType());
        int64_t begin = view.getOffset(),
                end = begin + t.getNumElements() * std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
        for (auto [a, z] : accumulators)
          if (begin < z && a < end)
            return true;
      }
    }
    return false;
  };
  for (Operation &op : block.without_terminator())
    if (!isa<tcck::ViewOp, tcck::AliasOp, tcck::AwaitWeightsOp>(op) && touches(op)) {
      b.setInsertionPoint(&op);
      b.create<tcck::AwaitUpdateOp>(op.getLoc());
      return;
    }
  b.setInsertionPoint(block.getTerminator());
  b.create<tcck::AwaitUpdateOp>(func.getLoc());
}
