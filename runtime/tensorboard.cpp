//===- tensorboard.cpp - TensorBoard event files for tcc-run --------------===//
//
// The protobuf messages written (tensorboard/compat/proto/event.proto and
// summary.proto), with their field numbers and wire types:
//
//   Event          wall_time = 1 (double, 64-bit)   step = 2 (int64, varint)
//                  file_version = 3 (string)        summary = 5 (Summary)
//   Summary        value = 1 (repeated Summary.Value)
//   Summary.Value  tag = 1 (string)                 simple_value = 2 (float,
//                                                   32-bit)
//
// A field is its key, varint (number << 3 | wire type), then its payload:
// 8 or 4 little-endian bytes for wire types 1 and 5, a varint for 0, a varint
// length and the bytes for 2 (strings and messages).
//
//===----------------------------------------------------------------------===//

#include "runtime/tensorboard.h"
#include "runtime/posix_io.h"

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>

#include <fcntl.h>
#include <unistd.h>

namespace tcc::tb {

using io::errnoText;

namespace {

//===----------------------------------------------------------------------===//
// CRC32C
//===----------------------------------------------------------------------===//

/// The byte-at-a-time table of the reflected Castagnoli polynomial.
struct Crc32cTable {
  uint32_t entry[256];
  constexpr Crc32cTable() : entry() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      entry[i] = c;
    }
  }
};

constexpr Crc32cTable kCrcTable;

//===----------------------------------------------------------------------===//
// Protobuf encoding
//===----------------------------------------------------------------------===//

enum WireType : uint32_t { Varint = 0, Fixed64 = 1, Bytes = 2, Fixed32 = 5 };

void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void putKey(std::string &out, uint32_t field, WireType type) {
  putVarint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void putLE(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void putDouble(std::string &out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(out, field, Fixed64);
  putLE(out, bits, 8);
}

void putFloat(std::string &out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(out, field, Fixed32);
  putLE(out, bits, 4);
}

void putInt64(std::string &out, uint32_t field, int64_t v) {
  putKey(out, field, Varint);
  putVarint(out, static_cast<uint64_t>(v)); // negative: 10 bytes, as protobuf
}

void putBytes(std::string &out, uint32_t field, const std::string &bytes) {
  putKey(out, field, Bytes);
  putVarint(out, bytes.size());
  out += bytes;
}

/// `v` rounded to float as IEEE 754 does (to nearest, ties to even), with a
/// finite value beyond float's range going to +-inf explicitly: a C++
/// conversion of such a value is undefined behaviour.
float toFloat(double v) {
  static_assert(std::numeric_limits<float>::is_iec559 &&
                    std::numeric_limits<double>::is_iec559,
                "IEEE 754 float and double are required");
  if (std::isfinite(v) && std::fabs(v) > static_cast<double>(FLT_MAX)) {
    // Halfway between FLT_MAX and 2^128: anything below rounds to FLT_MAX,
    // the midpoint itself to 2^128 (FLT_MAX's last mantissa bit is odd).
    const double half = static_cast<double>(FLT_MAX) + std::ldexp(1.0, 103);
    float mag = std::fabs(v) >= half ? HUGE_VALF : FLT_MAX;
    return v < 0 ? -mag : mag;
  }
  return static_cast<float>(v);
}

/// The wall-clock time, seconds since the epoch.
double nowSeconds() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) +
         static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// The host name, with anything but [A-Za-z0-9._-] replaced by '_' so that it
/// is safe in a file name; "localhost" if it is unknown.
std::string hostName() {
  char buf[256];
  if (::gethostname(buf, sizeof buf) != 0)
    return "localhost";
  buf[sizeof buf - 1] = '\0';
  std::string name = buf;
  for (char &c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok)
      c = '_';
  }
  return name.empty() ? "localhost" : name;
}

} // namespace

uint32_t crc32c(const void *data, size_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i)
    crc = kCrcTable.entry[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t maskedCrc32c(const void *data, size_t n) {
  uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

//===----------------------------------------------------------------------===//
// EventWriter
//===----------------------------------------------------------------------===//

EventWriter::~EventWriter() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::string EventWriter::open(const std::string &dir) {
  if (fd_ >= 0)
    return "the TensorBoard event file " + path_ + " is already open";
  std::string err = io::makeDirs(dir);
  if (!err.empty())
    return err;

  double now = nowSeconds();
  char name[384];
  std::snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%ld.tcc",
                static_cast<long long>(now), hostName().c_str(),
                static_cast<long>(::getpid()));
  std::string path = io::joinPath(dir, name);
  int fd = io::openRetry(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                         0666);
  if (fd < 0)
    return "cannot create the TensorBoard event file " + path + ": " +
           errnoText(errno);
  fd_ = fd;
  size_ = 0;
  path_ = path;

  std::string event;
  putDouble(event, 1, now);
  putBytes(event, 3, "brain.Event:2");
  err = writeRecord(event);
  if (!err.empty()) {
    if (fd_ >= 0)
      ::close(fd_);
    ::unlink(path_.c_str());
    fd_ = -1;
    path_.clear();
  }
  return err;
}

std::string EventWriter::scalars(
    int64_t step, double wallTime,
    const std::vector<std::pair<std::string, double>> &values) {
  if (fd_ < 0)
    return path_.empty() ? std::string("the TensorBoard event file is not open")
                         : "the TensorBoard event file " + path_ +
                               " was closed after a failed write";
  std::string summary, value;
  for (const auto &[tag, v] : values) {
    value.clear();
    putBytes(value, 1, tag);
    putFloat(value, 2, toFloat(v));
    putBytes(summary, 1, value);
  }
  std::string event;
  putDouble(event, 1, wallTime);
  putInt64(event, 2, step);
  putBytes(event, 5, summary);
  return writeRecord(event);
}

std::string EventWriter::writeRecord(const std::string &event) {
  std::string rec;
  rec.reserve(event.size() + 16);
  putLE(rec, event.size(), 8);
  putLE(rec, maskedCrc32c(rec.data(), 8), 4);
  rec += event;
  putLE(rec, maskedCrc32c(event.data(), event.size()), 4);
  if (!io::writeAll(fd_, rec.data(), rec.size())) {
    int err = errno;
    // Drop a partial record, so that later events still follow whole ones;
    // if that fails too, write no more.
    bool cut = ::ftruncate(fd_, static_cast<off_t>(size_)) == 0 &&
               ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET) ==
                   static_cast<off_t>(size_);
    if (!cut) {
      ::close(fd_);
      fd_ = -1;
    }
    return "cannot write the TensorBoard event file " + path_ + ": " +
           errnoText(err) + (cut ? "" : " (the file is closed)");
  }
  size_ += rec.size();
  return "";
}

} // namespace tcc::tb
