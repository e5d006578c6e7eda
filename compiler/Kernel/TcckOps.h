//===- TcckOps.h - kernel-level operations ----------------------*- C++ -*-===//
#ifndef TCC_COMPILER_KERNEL_TCCKOPS_H
#define TCC_COMPILER_KERNEL_TCCKOPS_H

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "compiler/Kernel/TcckEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "compiler/Kernel/TcckAttrs.h.inc"

#define GET_OP_CLASSES
#include "compiler/Kernel/TcckOps.h.inc"

namespace mlir::tcck {

/// What a library kernel takes: its numbers of outputs and inputs (-1: any
/// number, at least one), the options it must have, and whether it returns
/// an error code.
struct LibraryCallSignature {
  int outs;
  int ins;
  ArrayRef<StringRef> options;
  bool canFail;
};
const LibraryCallSignature &libraryCallSignature(LibraryCall callee);

} // namespace mlir::tcck

#endif // TCC_COMPILER_KERNEL_TCCKOPS_H
