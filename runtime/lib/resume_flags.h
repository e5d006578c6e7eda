//===- resume_flags.h - the training flags a checkpoint remembers -*- C++ -*-===//
//
// A checkpoint folder holds, beside checkpoint.bin, the flags that shape the
// training it continues: DIR/training-flags, one `--flag value` per line
// (the schedule and its horizon, the optimizer's hyperparameters,
// accumulation, clipping, loss scaling, the data order and labels). tcc-run
// --resume DIR takes every one that is not given again, and says so; a
// flag given again overrides the record, with one line naming both values.
// Written by rank 0 before each checkpoint.bin, atomically; a folder
// without it (an older tcc-run's) resumes as before, from the command line.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_RESUME_FLAGS_H
#define TCC_RUNTIME_LIB_RESUME_FLAGS_H

#include "runtime/lib/options.h"

#include <functional>
#include <string>
#include <vector>

namespace tcc::run {

/// DIR/training-flags.
std::string flagsPath(const std::string &dir);

/// The file's text for `opts`: every remembered flag's value as this run
/// trains with it (the default where the flag was not given, except
/// --weight-decay, --loss-scale and --labels, whose defaults depend on the
/// step and which are kept only when given).
std::string recordFlags(const Options &opts);

/// Writes `text` to DIR/training-flags atomically. "" on success.
std::string writeFlags(const std::string &dir, const std::string &text);

/// Reads DIR/training-flags (nothing if there is none) and applies to
/// `opts` each recorded flag not given on the command line, through
/// `apply(flag, value)` (tcc-run's own parser, which returns an error or
/// ""). `notes` gets one line for the flags taken from the record and one
/// per flag given again with another value. "" on success.
std::string applyRecordedFlags(
    const std::string &dir, Options &opts,
    const std::function<std::string(const std::string &, const std::string &)> &apply,
    std::vector<std::string> &notes);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_RESUME_FLAGS_H
