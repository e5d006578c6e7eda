//===- npy.h - reading and writing NumPy .npy files -------------*- C++ -*-===//
//
// The runtime's only file format: NumPy's .npy (format versions 1.0, 2.0 and
// 3.0), for feeds in and outputs/gradients out. Built with -fno-exceptions and
// only the C++ standard library and POSIX: every failure is a returned
// message, never an exception or an abort.
//
// Only little-endian hosts are supported (checked at compile time).
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_NPY_H
#define TCC_RUNTIME_NPY_H

#include <cstdint>
#include <string>
#include <vector>

namespace tcc::npy {

/// What an .npy header says about the array that follows it.
struct Header {
  int major = 0, minor = 0;   // format version
  std::string descr;          // e.g. "<f4"; for a structured dtype, its text
  bool structured = false;    // descr was not a plain string (a list)
  bool fortranOrder = false;
  std::vector<int64_t> shape; // empty for a 0-d array
  uint64_t dataOffset = 0;    // where the data begins in the file
  uint64_t dataBytes = 0;     // bytes in the file after the header
};

/// An .npy file open for reading. Error messages describe the problem without
/// naming the file, so that the caller can prefix the path: "is missing",
/// "is not a valid .npy file (truncated?)", ...
class Reader {
public:
  Reader() = default;
  ~Reader();
  Reader(const Reader &) = delete;
  Reader &operator=(const Reader &) = delete;

  /// Opens `path` and parses its header. Returns "" on success.
  std::string open(const std::string &path);
  const Header &header() const { return hdr; }
  /// Reads the first `bytes` bytes of the data (which the caller has checked
  /// against header().dataBytes) into `dst`. Returns "" on success.
  std::string readData(void *dst, uint64_t bytes);

private:
  int fd = -1;
  Header hdr;
};

/// "[4, 8]"; "[]" for a 0-d shape.
std::string shapeToString(const int64_t *shape, int rank);
inline std::string shapeToString(const std::vector<int64_t> &shape) {
  return shapeToString(shape.data(), static_cast<int>(shape.size()));
}

/// The header of a C-order array (magic through the final '\n'), padded so
/// that the data starts at a multiple of 64 bytes; version 1.0 unless the
/// header needs 2.0's longer length field.
std::string makeHeader(const std::string &descr, const int64_t *shape,
                       int rank);

/// Writes an .npy file atomically: to a temporary file in the same directory,
/// fsync, rename over `path` (then fsync the directory). SIGINT, SIGTERM,
/// SIGHUP and SIGQUIT are held back meanwhile, so neither a partial file nor a
/// temporary is left behind. Returns "" on success, otherwise a message that
/// names `path`.
std::string writeFile(const std::string &path, const std::string &descr,
                      const int64_t *shape, int rank, const void *data,
                      uint64_t bytes);

} // namespace tcc::npy

#endif // TCC_RUNTIME_NPY_H
