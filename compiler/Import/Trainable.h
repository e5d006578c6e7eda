//===- Trainable.h - which initializers are trained -------------*- C++ -*-===//
//
// ONNX does not say which initializers are parameters and which are buffers
// (masks, position tables) or an exporter's constants. tcc decides, in this
// order:
//   1. `--trainable=NAME`: trained, whatever else says.
//   2. the model's `tcc.trainable` metadata (written by python/tcc_export.py
//      from `named_parameters()` that require gradients): trained when
//      listed; a name in its `tcc.frozen` metadata (parameters with
//      `requires_grad=False`, such as a LoRA model's base) is a frozen step
//      argument, as with `--frozen`; any other initializer is a constant;
//   3. without that metadata, a floating-point initializer is trained unless
//      its evident role says it is not a parameter: it holds a non-finite
//      value or finite values below -1e30 (an additive mask), it only reaches the loss through comparisons, Where conditions,
//      shapes or Sin/Cos (a mask, or what builds a position table), it is a
//      sinusoidal position table itself, or it has one element (the
//      torch.export-based exporter stores its scalar constants as
//      initializers), or its values are 0 and 1 and it reaches a Softmax
//      through elementwise ops (an attention mask folded into a float).
//      Such an initializer becomes a constant, with a warning that names it
//      and says how to train it. A parameter that is a value-identical copy
//      of another (or its transpose), as tied weights come out of tf2onnx,
//      is named in a warning: tcc trains the two apart.
// `--frozen=NAME` keeps a parameter fixed (it stays a step argument).
//
// tcc never trains silently what PyTorch would not.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_COMPILER_IMPORT_TRAINABLE_H
#define TCC_COMPILER_IMPORT_TRAINABLE_H

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <string>

namespace onnx {
class ModelProto;
}

namespace mlir::tcc {

/// The metadata key python/tcc_export.py writes: comma-separated initializer
/// names that are the module's parameters.
inline constexpr const char *kTrainableMetadataKey = "tcc.trainable";
/// How the model's loss reads its inputs (python/tcc_export.py):
/// `task=causal-lm;ids=NAME;labels=NAME;mask=NAME;labels-shift=shifted`.
inline constexpr const char *kObjectiveMetadataKey = "tcc.objective";
/// Comma-separated initializer names that are the module's parameters with
/// requires_grad=False: frozen step arguments.
inline constexpr const char *kFrozenMetadataKey = "tcc.frozen";

/// Why an initializer is not trained (empty: it is a parameter).
struct InitializerRole {
  bool parameter = true;
  /// For a constant: why, for the diagnostic and the summary.
  std::string reason;
  /// Whether tcc guessed (no metadata), so the user is told.
  bool guessed = false;
  /// Without metadata, for a parameter whose values are another parameter's
  /// (`copyOf`), element for element or as its 2-D transpose
  /// (`copyTransposed`), and not all one value: a tied weight an exporter
  /// wrote twice (tf2onnx's tied embeddings), which tcc would train as two.
  std::string copyOf;
  bool copyTransposed = false;
};

/// Classifies every floating-point initializer of `model` (by name). Names in
/// `trainable` are parameters. `metadataNames` receives the metadata's list
/// when the model has one (so the caller can report names it lacks), and
/// `frozenNames` its tcc.frozen list (parameters the caller keeps fixed).
llvm::StringMap<InitializerRole>
classifyInitializers(const onnx::ModelProto &model,
                     const llvm::StringSet<> &trainable, bool &hasMetadata,
                     llvm::StringSet<> &metadataNames,
                     llvm::StringSet<> &frozenNames);

/// Whether `name` is one an exporter gives a value it computed, not a
/// module's parameter name: `val_12` (the torch.export-based exporter's
/// constant folding), `onnx::MatMul_123` (the TorchScript exporter's
/// `do_constant_folding=True`). A trainable initializer with such a name in a
/// model without tcc.trainable metadata is a parameter folded into a copy
/// (transposed, merged with another), which tcc would train instead of it.
bool isExporterFoldedName(llvm::StringRef name);

} // namespace mlir::tcc

#endif // TCC_COMPILER_IMPORT_TRAINABLE_H
