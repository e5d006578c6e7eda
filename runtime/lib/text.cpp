//===- text.cpp - numbers and sizes as the runtime prints them ------------===//

#include "runtime/lib/text.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace tcc::run {

std::string format(const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}


/// "9.61 GiB", "512 MiB", "12 KiB" (two decimals at most).
std::string formatBytes(uint64_t bytes) {
  double v = static_cast<double>(bytes);
  const char *unit = "bytes";
  if (bytes >= (1ull << 30)) {
    v /= 1073741824.0;
    unit = "GiB";
  } else if (bytes >= (1ull << 20)) {
    v /= 1048576.0;
    unit = "MiB";
  } else if (bytes >= (1ull << 10)) {
    v /= 1024.0;
    unit = "KiB";
  }
  std::string s = format("%.2f", v);
  while (s.back() == '0')
    s.pop_back();
  if (s.back() == '.')
    s.pop_back();
  return s + " " + unit;
}


std::string formatCount(double x) {
  if (x < 1e3)
    return format("%.0f", x);
  if (x < 1e6)
    return format("%.1fk", x / 1e3);
  if (x < 1e9)
    return format("%.1fM", x / 1e6);
  return format("%.1fG", x / 1e9);
}

std::string formatDuration(double s) {
  if (!std::isfinite(s) || s < 0)
    return "?";
  if (s < 60)
    return format("%.1fs", s);
  long long t = static_cast<long long>(s + 0.5);
  if (t < 3600)
    return format("%lldm%02llds", t / 60, t % 60);
  return format("%lldh%02lldm", t / 3600, (t % 3600) / 60);
}

/// A number for JSON (which has no NaN or infinity).
std::string jsonNumber(double v, const char *fmt) {
  if (!std::isfinite(v))
    return "null";
  return format(fmt, v);
}

} // namespace tcc::run
