//===- text.h - numbers and sizes as the runtime prints them ------*- C++ -*-===//
#ifndef TCC_RUNTIME_LIB_TEXT_H
#define TCC_RUNTIME_LIB_TEXT_H

#include <cstdint>
#include <string>

namespace tcc::run {

/// printf into a string (at most 255 characters).
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/// "9.61 GiB", "512 MiB", "12 KiB" (two decimals at most).
std::string formatBytes(uint64_t bytes);
/// "950", "12.3k", "4.5M", "1.2G".
std::string formatCount(double x);
/// "12.3s", "4m05s", "2h10m"; "?" when not finite.
std::string formatDuration(double s);
/// A number for JSON (which has no NaN or infinity: null).
std::string jsonNumber(double v, const char *fmt = "%.17g");

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_TEXT_H
