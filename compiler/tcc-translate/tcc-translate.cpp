//===- tcc-translate.cpp - runs tcc's emitters on MLIR text -----------------===//
//
// MlirTranslateMain with tcc's translations out of MLIR, so that emitter
// tests start from kernel IR (`tcc --emit=kernels`, or tcc-opt's
// --tcc-lower-to-kernels) and not from ONNX:
//   --tcck-to-cpp  the CPU target's kernels of the module's function, as the
//                  C++ function its step's micro-step body is;
//   --tcck-to-cu   the CUDA target's: a unit with the generated kernels and
//                  the micro-step body as a function over the fixed half's
//                  declarations
// (codegen/Translate.cpp, over each target's kernel emitter).
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

/// Registers one translation of a kernel-IR module by `translate`.
static void registerKernelTranslation(StringRef name, StringRef description,
                                      FailureOr<std::string> (*translate)(ModuleOp)) {
  TranslateFromMLIRRegistration(
      name, description,
      [translate](Operation *op, raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("tcc-translate expects a module");
        FailureOr<std::string> text = translate(module);
        if (failed(text))
          return failure();
        os << *text;
        return success();
      },
      [](DialectRegistry &registry) {
        registry.insert<tcc::TccDialect, tcck::TcckDialect, func::FuncDialect>();
      });
}

static void registerTccTranslations() {
  registerKernelTranslation("tcck-to-cpp", "the CPU target's kernels of a kernel-IR function, as C++",
                            tcc::translateKernelsToCpp);
  registerKernelTranslation("tcck-to-cu",
                            "the CUDA target's kernels of a kernel-IR function, as a CUDA unit",
                            tcc::translateKernelsToCu);
}

int main(int argc, char **argv) {
  registerTccTranslations();
  return failed(mlirTranslateMain(argc, argv, "tcc translation driver\n")) ? 1 : 0;
}
