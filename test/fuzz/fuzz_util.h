//===- fuzz_util.h - shared helpers of tcc's libFuzzer harnesses -*- C++ -*-===//
//
// The readers under test take paths, so each input is written to a file in
// a per-process scratch folder first: under $TCC_FUZZ_TMPDIR, else /dev/shm
// where it is writable (a file there costs no disk write: the readers'
// harnesses run about 9x faster than on /tmp), else $TMPDIR or /tmp.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_TEST_FUZZ_FUZZ_UTIL_H
#define TCC_TEST_FUZZ_FUZZ_UTIL_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace tcc::fuzz {

/// The folder scratchDir() is made in.
inline std::string scratchRoot() {
  if (const char *own = std::getenv("TCC_FUZZ_TMPDIR"); own && *own)
    return own;
  if (::access("/dev/shm", W_OK | X_OK) == 0)
    return "/dev/shm";
  const char *tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

/// A folder of this process's own under scratchRoot(), made once (fuzz.sh
/// points TCC_FUZZ_TMPDIR at a folder it removes afterwards).
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    std::string d = scratchRoot() + "/tcc-fuzz-" + std::to_string(::getpid());
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0)
      std::abort();
    return d;
  }();
  return dir;
}

/// Writes `data` to scratchDir()/name and returns the path.
inline std::string writeInput(const std::string &name, const uint8_t *data, size_t size) {
  std::string path = scratchDir() + "/" + name;
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort();
  if (size && std::fwrite(data, 1, size, f) != size)
    std::abort();
  std::fclose(f);
  return path;
}

} // namespace tcc::fuzz

#endif // TCC_TEST_FUZZ_FUZZ_UTIL_H
