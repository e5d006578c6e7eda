//===- Legalize.cpp - the tcc-legalize pass -------------------------------===//
//
// Assembles the pattern families of passes/legalize/; the patterns hold the
// knowledge, this file only runs them.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "compiler/Dialect/TccOps.h"
#include "passes/legalize/Patterns.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tcc {
#define GEN_PASS_DEF_LEGALIZE
#include "passes/Passes.h.inc"
} // namespace mlir::tcc

using namespace mlir;
using namespace mlir::tcc;

namespace {
class LegalizePass : public tcc::impl::LegalizeBase<LegalizePass> {
public:
  void runOnOperation() override {
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>())
      lowerTrainingDropout(func);
    RewritePatternSet patterns(&getContext());
    populateGemmLegalizationPatterns(patterns);
    populateLayerNormRecognitionPatterns(patterns);
    populateGeluRecognitionPatterns(patterns);
    populateOnnxOpLoweringPatterns(patterns);
    populateTransformerOpLoweringPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      getOperation().emitWarning("tcc-legalize did not converge");
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>())
      if (failed(checkImportOnlyOpsLowered(func)))
        signalPassFailure();
  }
};
} // namespace
