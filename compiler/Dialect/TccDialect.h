//===- TccDialect.h - the tcc dialect ---------------------------*- C++ -*-===//
#ifndef TCC_COMPILER_DIALECT_TCCDIALECT_H
#define TCC_COMPILER_DIALECT_TCCDIALECT_H

#include "mlir/IR/Dialect.h"

#include "compiler/Dialect/TccOpsDialect.h.inc"

#endif // TCC_COMPILER_DIALECT_TCCDIALECT_H
