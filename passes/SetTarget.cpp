//===- SetTarget.cpp - the module's #tcc.target ---------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_SETTARGET
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {

class SetTargetPass : public tcc::impl::SetTargetBase<SetTargetPass> {
public:
  using SetTargetBase::SetTargetBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    auto error = [&]() { return module.emitError("tcc-set-target: "); };
    std::optional<TargetKind> kind = symbolizeTargetKind(target);
    if (!kind) {
      error() << "unknown target '" << target << "' (expected cuda or cpu)";
      return signalPassFailure();
    }
    Type storage = b.getF16Type();
    int64_t targetArch = arch;
    if (*kind == TargetKind::Cuda && !precision.empty()) {
      error() << "the cuda target stores floats in f16 and keeps f32 masters; "
                 "precision=" << precision << " applies to the cpu target only";
      return signalPassFailure();
    }
    if (*kind == TargetKind::Cpu) {
      if (!precision.empty() && precision != "f32" && precision != "f64") {
        error() << "unknown CPU precision '" << precision << "' (expected f32 or f64)";
        return signalPassFailure();
      }
      storage = precision == "f64" ? Type(b.getF64Type()) : Type(b.getF32Type());
      targetArch = 0;
    }
    TargetAttr attr = TargetAttr::getChecked(error, module.getContext(), *kind,
                                             storage, targetArch);
    if (!attr)
      return signalPassFailure();
    module->setAttr(TargetAttr::kAttrName, attr);
  }
};

} // namespace
