//===- trace.cpp - tcc-run --trace: a timeline in the Chrome trace format -===//
#include "runtime/trace.h"

#include "runtime/posix_io.h"

#include <cerrno>
#include <cmath>
#include <cstdio>

namespace tcc::trace {

std::string jsonEscape(const std::string &s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

namespace {

std::string number(double v) {
  if (!std::isfinite(v))
    return "0";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

} // namespace

void Writer::start(const std::string &path, const std::string &processName, bool device, bool comm) {
  active_ = true;
  path_ = path;
  events_.clear();
  t0_ = Clock::now();
  event("{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"tcc-run " +
        jsonEscape(processName) + "\"}}");
  auto thread = [&](int tid, const char *name) {
    event("{\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(tid) +
          ",\"name\":\"thread_name\",\"args\":{\"name\":\"" + name + "\"}}");
    event("{\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(tid) +
          ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" + std::to_string(tid) +
          "}}");
  };
  thread(kLoop, "training loop");
  thread(kReader, "data reader");
  if (device)
    thread(kDevice, "device stream");
  if (comm)
    thread(kComm, "NCCL communicator stream");
}

void Writer::event(const std::string &json) {
  if (!events_.empty())
    events_ += ",\n";
  events_ += json;
}

void Writer::complete(int lane, const std::string &name, const char *category, double ts,
                      double dur, const std::string &args) {
  if (!active_)
    return;
  event("{\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(lane) + ",\"name\":\"" +
        jsonEscape(name) + "\",\"cat\":\"" + category + "\",\"ts\":" + number(ts) +
        ",\"dur\":" + number(std::max(dur, 0.0)) +
        (args.empty() ? std::string() : ",\"args\":{" + args + "}") + "}");
}

void Writer::counter(const char *name, const char *series, double ts, double value) {
  if (!active_)
    return;
  char v[40];
  std::snprintf(v, sizeof v, "%.17g", std::isfinite(value) ? value : 0.0);
  event(std::string("{\"ph\":\"C\",\"pid\":1,\"name\":\"") + name + "\",\"ts\":" + number(ts) +
        ",\"args\":{\"" + series + "\":" + v + "}}");
}

std::string Writer::finish() {
  if (!active_)
    return "";
  active_ = false;
  std::string text = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + events_ + "\n]}\n";
  events_.clear();
  io::AtomicFile out;
  auto fail = [&](const char *what) {
    int err = errno;
    out.discard();
    return "cannot write the trace " + path_ +
           (what[0] ? std::string(" (") + what + ")" : std::string()) + ": " +
           io::errnoText(err);
  };
  if (!out.createBeside(path_))
    return fail("");
  const int fd = out.fd();
  if (!io::writeAll(fd, text.data(), text.size()))
    return fail("");
  if (const char *what = out.commit(path_, io::dirOf(path_)))
    return fail(what);
  return "";
}

} // namespace tcc::trace
