//===- fuzz_import.cpp - libFuzzer harness: the ONNX importer ------------===//
//
// Any bytes as a model file: import, verify, then the training pipeline up
// to the memory plan (the CPU target's: legalize, the backward pass when
// there are parameters, canonicalize, fusion, the plan). Whatever the input,
// the result is success or diagnostics; a crash, a sanitizer report, an
// allocation over -rss_limit_mb or a hang is a finding.
//
// Static shapes only come from the model (no --shape), and inputs whose
// declared size is huge are diagnosed by the importer or the planner.
//
//===----------------------------------------------------------------------===//
#include "fuzz_util.h"

#include "compiler/Dialect/TccDialect.h"
#include "compiler/Dialect/TccOps.h"
#include "compiler/Import/OnnxImporter.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = ::tcc::fuzz::writeInput("model.onnx", data, size);
  // No thread pool: one per input would cost more than the import itself.
  MLIRContext context(MLIRContext::Threading::DISABLED);
  context.loadDialect<mlir::tcc::TccDialect, func::FuncDialect>();
  context.printOpOnDiagnostic(false);
  // Diagnostics are expected; they are not printed.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  mlir::tcc::ImportOptions options;
  OwningOpRef<ModuleOp> module = mlir::tcc::importOnnxFile(&context, path, options);
  if (!module)
    return 0;
  PassManager contract(&context);
  contract.addPass(mlir::tcc::createCheckImportContract());
  if (failed(contract.run(*module)))
    return 0;
  // As tcc: the backward pass when a parameter is trainable.
  auto model = *module->getOps<func::FuncOp>().begin();
  bool trainable = false;
  for (unsigned i = 0; i < model.getNumArguments(); ++i)
    trainable |= model.getArgAttr(i, mlir::tcc::kParamAttr) && !model.getArgAttr(i, mlir::tcc::kFrozenAttr);
  PassManager pm(&context);
  pm.addPass(mlir::tcc::createLegalize());
  if (trainable)
    pm.addPass(mlir::tcc::createBuildBackward());
  pm.addPass(createCanonicalizerPass());
  mlir::tcc::FuseOptions fuse;
  fuse.reductions = true;
  fuse.moves = true;
  fuse.gemmEpilogues = true;
  pm.addPass(mlir::tcc::createFuse(fuse));
  mlir::tcc::PlanMemoryOptions plan;
  plan.floatBytesOption = 4;
  plan.statePerParam = 2;
  pm.addPass(mlir::tcc::createPlanMemory(plan));
  (void)pm.run(*module);
  return 0;
}
