//===- TccAttrs.cpp - tcc dialect attributes -------------------------------===//
//
// The typed attributes of TccAttrs.td (#tcc.target, #tcc.layout): their
// generated parsers and printers, the target's helpers and verifier, and the
// dialect's check that the attributes the passes hand on have their types.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tcc;

#define GET_ATTRDEF_CLASSES
#include "compiler/Dialect/TccAttrs.cpp.inc"

void TccDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "compiler/Dialect/TccAttrs.cpp.inc"
      >();
}

TargetAttr TargetAttr::of(Operation *op) {
  auto module = llvm::isa<ModuleOp>(op) ? llvm::cast<ModuleOp>(op)
                                         : op->getParentOfType<ModuleOp>();
  return module ? module->getAttrOfType<TargetAttr>(kAttrName) : nullptr;
}

int64_t TargetAttr::getFloatBytes() const {
  return isCuda() ? 2 : getStorage().getIntOrFloatBitWidth() / 8;
}

LogicalResult TargetAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 TargetKind kind, Type storage, int64_t arch) {
  if (kind == TargetKind::Cuda && (!storage.isF16() || arch <= 0))
    return emitError() << "the cuda target stores floats in f16 and needs its "
                          "architecture (e.g. arch = 90)";
  if (kind == TargetKind::Cpu && (!(storage.isF32() || storage.isF64()) || arch != 0))
    return emitError() << "the cpu target stores floats in f32 or f64 and has arch = 0";
  return success();
}

bool TiersAttr::stateOnHost(int64_t arg) const {
  return llvm::is_contained(getHostState().asArrayRef(), arg);
}

bool TiersAttr::gradOnHost(int64_t arg) const {
  return llvm::is_contained(getHostGrads().asArrayRef(), arg);
}

LogicalResult TiersAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                DenseI64ArrayAttr hostState, DenseI64ArrayAttr hostGrads,
                                int64_t pcieMbps, int64_t hostMbps, int64_t deviceGflops,
                                int64_t deviceMbps, int64_t hostBudget) {
  for (int64_t arg : hostGrads.asArrayRef())
    if (!llvm::is_contained(hostState.asArrayRef(), arg))
      return emitError() << "argument " << arg
                         << " has its gradient accumulator on the host but not its "
                            "optimizer state: host_grads must be a subset of host_state";
  if (pcieMbps <= 0 || hostMbps <= 0 || deviceGflops <= 0 || deviceMbps <= 0 || hostBudget < 0)
    return emitError() << "the rates of #tcc.tiers must be positive";
  return success();
}

LogicalResult TccDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  // The typed attributes the passes hand on must have their type: a stale
  // dictionary would otherwise read as absent.
  if (attr.getName() == TargetAttr::kAttrName) {
    if (!isa<TargetAttr>(attr.getValue()))
      return op->emitError("'") << TargetAttr::kAttrName << "' must be a #tcc.target, got "
                                << attr.getValue();
    if (!isa<ModuleOp>(op))
      return op->emitError("'") << TargetAttr::kAttrName << "' belongs on the module";
  } else if (attr.getName() == LayoutAttr::kAttrName && !isa<LayoutAttr>(attr.getValue())) {
    return op->emitError("'") << LayoutAttr::kAttrName << "' must be a #tcc.layout, got "
                              << attr.getValue();
  } else if (attr.getName() == TiersAttr::kAttrName && !isa<TiersAttr>(attr.getValue())) {
    return op->emitError("'") << TiersAttr::kAttrName << "' must be a #tcc.tiers, got "
                              << attr.getValue();
  }
  return success();
}
