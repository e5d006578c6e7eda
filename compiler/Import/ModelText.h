//===- ModelText.h - the model's names are text -----------------*- C++ -*-===//
//
// ONNX names (graph inputs, outputs, initializers, nodes and their operands,
// op types, attributes, metadata) are UTF-8 strings, but protobuf's proto2
// does not check that, so a damaged or hostile file can name things with
// arbitrary bytes, NUL included. The importer refuses such a model before it
// quotes any of its names: every later diagnostic can print names as they
// are.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_COMPILER_IMPORT_MODELTEXT_H
#define TCC_COMPILER_IMPORT_MODELTEXT_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace mlir::tcc {

/// Whether `s` is UTF-8 text without control characters (tab aside): what a
/// name may be.
bool isNameText(llvm::StringRef s);

/// `s` as a diagnostic may quote it: valid UTF-8 without control characters
/// is kept, every other byte (and a backslash) written as \xHH.
std::string escapeName(llvm::StringRef s);

/// Fails, with one diagnostic at `fileLoc` that says which string of which
/// node or table it is (escaped), when a name of `model` is not text.
LogicalResult checkModelText(const onnx::ModelProto &model, Location fileLoc);

} // namespace mlir::tcc

#endif // TCC_COMPILER_IMPORT_MODELTEXT_H
