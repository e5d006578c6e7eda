//===- OnnxOpTable.h - the ONNX ops the importer knows -----------*- C++ -*-===//
//
// One entry per ONNX op type: the tcc op it becomes, the oldest opset whose
// semantics that op implements, and the inputs that must be compile-time
// constants (they become attributes). Beside it, what ONNX's schemas say a
// node of each op may look like (its input and output counts per opset, its
// required attributes), which the importer checks before it builds anything.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_COMPILER_IMPORT_ONNXOPTABLE_H
#define TCC_COMPILER_IMPORT_ONNXOPTABLE_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <vector>

namespace mlir::tcc::onnx_ops {

/// How an ONNX input that must be known at compile time becomes an attribute.
enum class ConstKind { Ints, Int, Float, Bool, Tensor };

struct ConstInput {
  unsigned index;
  StringRef attr;
  ConstKind kind;
  /// The opset from which this input exists (ReduceMean's axes became an
  /// input at opset 18); before it, the node has no such input.
  int64_t sinceOpset = 0;
};

/// One ONNX op type: the tcc op it becomes, the oldest ONNX version whose
/// semantics that op implements, its result count (-1: as many as the node
/// has outputs) and the inputs that become attributes.
struct OpSpec {
  StringRef onnx;
  StringRef tcc;
  int64_t minOpset;
  int numResults;
  std::vector<ConstInput> constInputs;
};


/// The entry of an ONNX op type; null when tcc does not know it.
const OpSpec *lookupOp(StringRef onnxName);

/// How many inputs and outputs a node of an op may have, from opset `since`
/// on (ONNX's schemas; kMany is variadic). Checked before an op is built, so
/// that type inference never sees a malformed node.
constexpr int kMany = 1 << 30;
struct Arity {
  int64_t since;
  int minIn, maxIn, minOut, maxOut;
};


/// The node shapes an op allows, oldest opset first.
ArrayRef<Arity> arityOf(StringRef op);

/// Whether `op` at `opset` has an attribute ONNX requires; its name in
/// `name`.
bool requiresAttribute(StringRef op, int64_t opset, StringRef &name);

} // namespace mlir::tcc::onnx_ops

#endif // TCC_COMPILER_IMPORT_ONNXOPTABLE_H
