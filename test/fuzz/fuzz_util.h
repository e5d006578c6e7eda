//===- fuzz_util.h - shared helpers of tcc's libFuzzer harnesses -*- C++ -*-===//
//
// The readers under test take paths, so each input is written to a file in
// a per-process scratch folder first.
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

/// A folder of this process's own under $TMPDIR (or /tmp), made once.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string d = std::string(tmp && *tmp ? tmp : "/tmp") + "/tcc-fuzz-" +
                    std::to_string(::getpid());
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
