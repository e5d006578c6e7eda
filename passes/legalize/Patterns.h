//===- Patterns.h - legalization pattern families --------------*- C++ -*-===//
//
// One family per file; tcc-legalize (passes/Legalize.cpp) assembles them.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_LEGALIZE_PATTERNS_H
#define TCC_PASSES_LEGALIZE_PATTERNS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::tcc {

/// Gemm -> transpose / matmul / mul / add.
void populateGemmLegalizationPatterns(RewritePatternSet &patterns);
/// The opset-14 decomposed LayerNorm -> layer_normalization.
void populateLayerNormRecognitionPatterns(RewritePatternSet &patterns);
/// The erf and tanh GELU chains -> gelu.
void populateGeluRecognitionPatterns(RewritePatternSet &patterns);

/// The ImportOnly ONNX ops left on run-time values -> core ops
/// (LowerOnnxOps.cpp).
void populateOnnxOpLoweringPatterns(RewritePatternSet &patterns);
/// Opset 23's RMSNormalization, RotaryEmbedding and Attention -> core ops
/// (LowerTransformerOps.cpp).
void populateTransformerOpLoweringPatterns(RewritePatternSet &patterns);
/// Whether every row (along the last axis) of the float constant `c` has a
/// finite element, so that an additive mask of it leaves every softmax row
/// something to attend (LowerOnnxOps.cpp).
bool everyRowHasFinite(DenseElementsAttr c);
/// Reports each ImportOnly op still in `func`; fails if there is one.
LogicalResult checkImportOnlyOpsLowered(func::FuncOp func);

/// Training-mode dropout with a non-zero ratio -> random_keep + where, the
/// dropouts numbered in order as random streams (LowerDropout.cpp).
void lowerTrainingDropout(func::FuncOp func);

/// Whether `v` is a constant whose elements all equal `value` (within a
/// relative 1e-6, for constants that went through float32).
bool isUniformConstant(Value v, double value);

} // namespace mlir::tcc

#endif // TCC_PASSES_LEGALIZE_PATTERNS_H
