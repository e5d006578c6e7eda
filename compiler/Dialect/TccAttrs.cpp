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
  }
  return success();
}
