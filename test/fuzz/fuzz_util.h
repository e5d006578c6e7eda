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

#include "runtime/tcc_step.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

/// The tables of a CPU step with AdamW over `params` (each its own gradient
/// accumulator's descriptor too) and `state`, in an arena of `arenaBytes`:
/// what the checkpoint readers' harnesses restore into.
template <size_t P, size_t S>
inline tcc_step_info adamwStepInfo(const tcc_tensor_desc (&params)[P],
                                   const tcc_tensor_desc (&state)[S], uint64_t arenaBytes) {
  tcc_step_info info;
  std::memset(&info, 0, sizeof info);
  info.abi_version = TCC_STEP_ABI_VERSION;
  info.model = "fuzz.onnx";
  info.target = "cpu";
  info.arena_bytes = arenaBytes;
  info.has_backward = 1;
  info.num_params = static_cast<int32_t>(P);
  info.params = params;
  info.grads = params;
  info.optimizer = "adamw";
  info.num_state = static_cast<int32_t>(S);
  info.state = state;
  return info;
}

} // namespace tcc::fuzz

#endif // TCC_TEST_FUZZ_FUZZ_UTIL_H
