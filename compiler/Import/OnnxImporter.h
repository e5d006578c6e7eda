//===- OnnxImporter.h - ONNX protobuf to the tcc dialect --------*- C++ -*-===//
//
// The importer is thin and 1:1: each ONNX node becomes one tcc op with its
// attributes. What it adds is what static shapes need: inputs that must be
// compile-time constants (Reshape's shape, Slice's bounds, ...) become
// attributes, and ops whose operands are all constants fold as they are
// created, so the shape subgraphs of exported models disappear.
//
// Problems are diagnostics at a location that names the file and, for a
// node, its name, ONNX op type and opset (see OnnxLocation.h); the importer
// never crashes on bad input.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_COMPILER_IMPORT_ONNXIMPORTER_H
#define TCC_COMPILER_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::tcc {

/// The oldest and newest default-domain opsets the importer accepts; within
/// that range each op also has its own oldest supported version.
inline constexpr int64_t kMaxOpset = 28;

struct ImportOptions {
  /// Shapes for graph inputs with dynamic dimensions (`--shape NAME=8x1024`).
  llvm::StringMap<std::vector<int64_t>> inputShapes;
  /// Floating-point initializers that stay fixed (`--frozen=NAME,...`).
  llvm::StringSet<> frozen;
  /// Floating-point initializers to train whatever the model's metadata or
  /// their evident role says (`--trainable=NAME,...`; see Trainable.h).
  llvm::StringSet<> trainable;
  /// Train a model without tcc.trainable metadata whose initializers carry
  /// an exporter's folded names (`--allow-unrecorded`).
  bool allowUnrecorded = false;
};

struct ImportStats {
  int64_t opset = 0;
  std::string producer;
  int64_t numNodes = 0;
  /// Nodes that folded into constants or into their operand at import.
  int64_t numFolded = 0;
  /// Floating-point initializers imported as constants, not parameters,
  /// with the reason (Trainable.h).
  std::vector<std::pair<std::string, std::string>> constants;
  /// Whether the model says which initializers are parameters.
  bool hasTrainableMetadata = false;
  /// The first BatchNormalization in training mode, if any (tcc --with-eval
  /// refuses it: its evaluation would need running statistics that tcc-run
  /// does not update).
  std::optional<Location> trainingBatchNorm;
};

/// Reads the ONNX model at `path` and returns it as a module holding one
/// `func.func @main`. On failure, diagnostics have been emitted and the
/// result is null.
OwningOpRef<ModuleOp> importOnnxFile(MLIRContext *context, llvm::StringRef path,
                                     const ImportOptions &options,
                                     ImportStats *stats = nullptr);

/// Reads the named floating-point initializers of the model at `path`, in
/// the given order, as one blob of little-endian float (or double) values:
/// the initial weights of a step. Failures are diagnostics.
LogicalResult readParameterValues(MLIRContext *context, llvm::StringRef path,
                                  llvm::ArrayRef<std::string> names,
                                  bool asDouble, std::string &blob);

/// The ONNX op types the importer knows, in the order of its table.
std::vector<llvm::StringRef> supportedOnnxOps();

/// One ONNX op the importer knows, as `tcc --list-ops` prints it.
struct SupportedOp {
  llvm::StringRef onnx;
  int64_t minOpset;
  /// The tcc op it becomes, or "composite" (several tcc ops: Composites.h).
  std::string writtenAs;
  /// How a gradient flows through it: "rule" (the tcc op's gradient rule),
  /// "parts" (a composite: its ops' rules), "lowered" (tcc-legalize writes
  /// the op as others before autodiff: their rules), or "none" (no rule: an
  /// op on integers, shapes or booleans).
  llvm::StringRef gradient;
};
std::vector<SupportedOp> describeSupportedOps(MLIRContext *context);

} // namespace mlir::tcc

#endif // TCC_COMPILER_IMPORT_ONNXIMPORTER_H
