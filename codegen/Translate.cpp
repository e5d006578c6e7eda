//===- Translate.cpp - the emitters on kernel-IR text (tcc-translate) ----===//
//
// tcc-translate's translations: the kernels of one kernel-IR function (the
// tcck dialect, tcc-lower-to-kernels' output) by the target's emitter, as a
// function over the arena and the function's arguments, without the frame
// (tables, init, apply), which emitStep writes from the planned IR:
//   --tcck-to-cpp  the CPU target's, as C++ (codegen/cpu/CpuKernels.cpp);
//   --tcck-to-cu   the CUDA target's, as a CUDA unit with the generated
//                  kernels (codegen/cuda/CudaKernels.cpp).
//
//===----------------------------------------------------------------------===//

#include "codegen/EmitterImpl.h"

using namespace mlir;
using namespace mlir::tcc;
using namespace mlir::tcc::codegen;

FailureOr<std::string> Emitter::translateBody() {
  valueTable = false; // the frame's, which emitStep writes
  std::string params;
  for (BlockArgument a : kernelFunc.getArguments()) {
    if (!isa<MemRefType>(a.getType()))
      return kernelFunc.emitError("tcc-translate: argument ")
             << a.getArgNumber() << " is not a buffer (memref): run tcc-lower-to-kernels first";
    Buffer b;
    b.name = "arg" + std::to_string(a.getArgNumber());
    b.type = storageType(a);
    b.inArena = false;
    buffers[a] = b;
    params += ", " + b.type + " *" + b.name;
  }
  os << markText(0);
  for (Operation &op : kernelFunc.getBody().front().without_terminator()) {
    if (!isa<tcck::TcckDialect>(op.getDialect()))
      return op.emitOpError("tcc-translate: not a kernel (tcck) op: run tcc-lower-to-kernels first");
    if (failed(emitKernel(&op)))
      return failure();
  }
  if (planError)
    return kernelFunc.emitError("tcc-translate: a value has no arena offset");
  return params;
}

/// The module's one kernel function (besides the optimizer's @apply, whose
/// tables belong to the step's frame), translated for the module's target,
/// which must be `cuda` or not as asked.
static FailureOr<std::string> translateModule(ModuleOp module, bool cuda) {
  SmallVector<func::FuncOp> funcs;
  for (auto f : module.getOps<func::FuncOp>())
    if (!f->hasAttr(tcck::kApplyAttr))
      funcs.push_back(f);
  if (funcs.size() != 1)
    return module.emitError("tcc-translate: expected one kernel function, found ")
           << funcs.size();
  TargetAttr target = TargetAttr::of(module);
  if (!target)
    return module.emitError("tcc-translate needs the module's target "
                            "(a tcc.target = #tcc.target<...> attribute)");
  if (cuda && !target.isCuda())
    return module.emitError("tcc-translate --tcck-to-cu: the module's target is not cuda; "
                            "--tcck-to-cpp translates its kernels");
  if (!cuda && target.isCuda())
    return funcs.front().emitError("tcc-translate --tcck-to-cpp: the module's target is cuda; "
                                   "--tcck-to-cu translates its kernels");
  StepEmitOptions options;
  return Emitter::create(funcs.front(), target, options)->translate();
}

FailureOr<std::string> mlir::tcc::translateKernelsToCpp(ModuleOp module) {
  return translateModule(module, /*cuda=*/false);
}

FailureOr<std::string> mlir::tcc::translateKernelsToCu(ModuleOp module) {
  return translateModule(module, /*cuda=*/true);
}
