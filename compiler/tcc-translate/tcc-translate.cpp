//===- tcc-translate.cpp - runs tcc's emitters on MLIR text -----------------===//
//
// MlirTranslateMain with tcc's translations out of MLIR, so that emitter
// tests start from kernel IR (`tcc --emit=kernels`, or tcc-opt's
// --tcc-lower-to-kernels) and not from ONNX:
//   --tcck-to-cpp  the CPU target's kernels of the module's function, as the
//                  C++ function its step's micro-step body is
//                  (codegen/cpu/CpuKernels.cpp).
//
//===----------------------------------------------------------------------===//

#include "codegen/StepEmitter.h"
#include "compiler/Dialect/TccDialect.h"
#include "compiler/Kernel/TcckDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"

using namespace mlir;

static void registerTccTranslations() {
  TranslateFromMLIRRegistration cpp(
      "tcck-to-cpp", "the CPU target's kernels of a kernel-IR function, as C++",
      [](Operation *op, raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("tcc-translate expects a module");
        FailureOr<std::string> text = tcc::translateKernelsToCpp(module);
        if (failed(text))
          return failure();
        os << *text;
        return success();
      },
      [](DialectRegistry &registry) {
        registry.insert<tcc::TccDialect, tcck::TcckDialect, func::FuncDialect>();
      });
}

int main(int argc, char **argv) {
  registerTccTranslations();
  return failed(mlirTranslateMain(argc, argv, "tcc translation driver\n")) ? 1 : 0;
}
