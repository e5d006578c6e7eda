//===- OnnxLocation.h - locations that name ONNX nodes ----------*- C++ -*-===//
//
// A node's location is `fused<[op_type, opset]>[NameLoc(node), file:0:0]`, so
// any diagnostic on an imported op (the importer's, a verifier's, a later
// pass's) can say which file, node, ONNX op and opset it is about.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_COMPILER_IMPORT_ONNXLOCATION_H
#define TCC_COMPILER_IMPORT_ONNXLOCATION_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"

#include <string>

namespace mlir::tcc {

/// The location of the whole model file.
Location fileLocation(MLIRContext *context, llvm::StringRef file);

/// The location of node `name` (op `opType`) of `file` at `opset`.
Location nodeLocation(MLIRContext *context, llvm::StringRef file,
                      llvm::StringRef name, llvm::StringRef opType,
                      int64_t opset);

/// Says where `loc` is: `model.onnx: node "/h.0/MatMul" (MatMul, opset 17)`,
/// `model.onnx`, or MLIR's own form for other locations.
std::string describeLocation(Location loc);

/// Prints diagnostics as `<where>: error: <message>` on stderr, where
/// `<where>` comes from describeLocation; notes follow on their own lines.
class OnnxDiagnosticHandler : public ScopedDiagnosticHandler {
public:
  explicit OnnxDiagnosticHandler(MLIRContext *context);
};

} // namespace mlir::tcc

#endif // TCC_COMPILER_IMPORT_ONNXLOCATION_H
