//===- report.cpp - the runtime's errors, warnings and progress line ------===//

#include "runtime/lib/report.h"

#include <cstdio>

namespace tcc::run {

/// Whether a progress line is open on a terminal (to be ended before any
/// other message).
bool gProgressOpen = false;

namespace {
const tcc::dp::World *gReportWorld = nullptr;
} // namespace

void setReportWorld(const tcc::dp::World *world) { gReportWorld = world; }

void endProgressLine() {
  if (gProgressOpen) {
    std::fputs("\r\x1b[K", stderr);
    gProgressOpen = false;
  }
}

namespace {
/// "tcc-run: KIND: [rank R of N: ]MSG" on stderr, after ending the progress
/// line.
void say(const char *kind, const std::string &msg) {
  std::fflush(stdout);
  endProgressLine();
  if (gReportWorld && gReportWorld->parallel())
    std::fprintf(stderr, "tcc-run: %s: rank %d of %d: %s\n", kind, gReportWorld->rank(),
                 gReportWorld->size(), msg.c_str());
  else
    std::fprintf(stderr, "tcc-run: %s: %s\n", kind, msg.c_str());
}
} // namespace

int error(const std::string &msg) {
  say("error", msg);
  return 1;
}

void warning(const std::string &msg) { say("warning", msg); }

} // namespace tcc::run
