//===- report.h - the runtime's errors, warnings and progress line -*- C++ -*-===//
//
// Messages on stderr, "tcc-run: error: ..." and "tcc-run: warning: ...",
// with the rank in a world of several processes, after ending the progress
// line a terminal may show.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_REPORT_H
#define TCC_RUNTIME_LIB_REPORT_H

#include "runtime/data_parallel.h"

#include <string>

namespace tcc::run {

/// Whether a progress line is open on a terminal (to be ended before any
/// other message).
extern bool gProgressOpen;
/// The world whose rank the messages name (null: none).
void setReportWorld(const tcc::dp::World *world);
void endProgressLine();
/// Prints the error; returns 1 (the exit code).
int error(const std::string &msg);
void warning(const std::string &msg);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_REPORT_H
