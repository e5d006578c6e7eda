//===- fuzz_tokens.cpp - libFuzzer harness: the token-data reader --------===//
//
// Any bytes as a token file (.npy when the first byte is odd, else .bin):
// TokenStream::open accepts it or says why not; an accepted stream's first
// and last windows read back, or name the token id the input cannot hold.
//
//===----------------------------------------------------------------------===//
#include "fuzz_util.h"
#include "runtime/train_data.h"

#include <algorithm>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const bool npy = data[0] & 1;
  std::string path = tcc::fuzz::writeInput(npy ? "tokens.npy" : "tokens.bin", data + 1, size - 1);
  tcc::data::TokenStream tokens;
  if (!tokens.open(path).empty())
    return 0;
  const uint64_t n = std::min<uint64_t>(tokens.size(), 64);
  std::vector<int64_t> out(static_cast<size_t>(n) + 1);
  // The file did not change, so reading what open accepted works; the one
  // refusal is a token id the step's input cannot hold (negative, or too
  // wide for `width` bytes).
  auto readable = [](const std::string &err) {
    return err.empty() || err.find(" holds the token id ") != std::string::npos;
  };
  for (int width : {1, 2, 4, 8}) {
    if (!readable(tokens.copy(0, n, out.data(), width)))
      __builtin_trap();
    if (!readable(tokens.copy(tokens.size() - n, n, out.data(), width)))
      __builtin_trap();
  }
  return 0;
}
