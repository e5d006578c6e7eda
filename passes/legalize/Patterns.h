//===- Patterns.h - legalization pattern families --------------*- C++ -*-===//
//
// One family per file; tcc-legalize (passes/Legalize.cpp) assembles them.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_PASSES_LEGALIZE_PATTERNS_H
#define TCC_PASSES_LEGALIZE_PATTERNS_H

#include "mlir/IR/PatternMatch.h"

namespace mlir::tcc {

/// Gemm -> transpose / matmul / mul / add.
void populateGemmLegalizationPatterns(RewritePatternSet &patterns);
/// The opset-14 decomposed LayerNorm -> layer_normalization.
void populateLayerNormRecognitionPatterns(RewritePatternSet &patterns);
/// The erf and tanh GELU chains -> gelu.
void populateGeluRecognitionPatterns(RewritePatternSet &patterns);

/// Whether `v` is a constant whose elements all equal `value` (within a
/// relative 1e-6, for constants that went through float32).
bool isUniformConstant(Value v, double value);

} // namespace mlir::tcc

#endif // TCC_PASSES_LEGALIZE_PATTERNS_H
