//===- outputs.h - where a run writes, checked before it starts ---*- C++ -*-===//
//
// A run's outputs (--dump, --save, --metrics, --checkpoint, --trace,
// --tensorboard) are checked before any work: their folders are created and
// writable, no output names an input or another output, and a checkpoint
// folder is locked against a second run.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_OUTPUTS_H
#define TCC_RUNTIME_LIB_OUTPUTS_H

#include "runtime/lib/options.h"

#include <string>

namespace tcc::run {

/// Creates `dir` if needed and checks that a file can be created in it.
std::string probeDir(const std::string &dir, const char *what);
/// Checks that `path` can be written as a file.
std::string probeFile(const std::string &path, const char *what);
/// Refuses outputs that name an input, or each other (`model`: the ONNX
/// model --save starts from).
std::string checkOutputPaths(const Options &opts, const std::string &model);
/// The error of a --dump DIR that could not be written whole (a
/// tcc::io::StagedFolder): DIR keeps what it had.
std::string dumpNotWritten(const std::string &dir, const std::string &why);
/// Locks DIR/.tcc-run.lock for the life of the process.
std::string lockCheckpointDir(const std::string &dir);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_OUTPUTS_H
