//===- trace.cpp - tcc-run --trace: a timeline in the Chrome trace format -===//
#include "runtime/trace.h"

#include "runtime/posix_io.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

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

void Writer::start(const std::string &path, const std::string &processName, bool device) {
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
  std::string dir = io::dirOf(path_);
  std::string base = path_.substr(path_.find_last_of('/') + 1);
  std::string tmpl = (dir == "." && path_.find('/') == std::string::npos ? std::string()
                                                                          : dir + "/") +
                     "." + base + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  io::AtomicFile out;
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    return "cannot write the trace " + path_ + ": " + io::errnoText(errno);
  out.adopt(fd, name.data());
  auto fail = [&](const char *what) {
    int err = errno;
    out.discard();
    return "cannot write the trace " + path_ +
           (what[0] ? std::string(" (") + what + ")" : std::string()) + ": " +
           io::errnoText(err);
  };
  // mkstemp creates the file 0600; give it the mode a plain creat() would.
  mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0)
    return fail("chmod");
  if (!io::writeAll(fd, text.data(), text.size()))
    return fail("");
  if (const char *what = out.commit(path_, dir))
    return fail(what);
  return "";
}

} // namespace tcc::trace
