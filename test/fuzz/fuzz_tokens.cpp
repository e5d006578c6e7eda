//===- fuzz_tokens.cpp - libFuzzer harness: the token-data reader --------===//
//
// Any bytes as a token file (.npy when the first byte is odd, else .bin):
// TokenStream::open accepts it or says why not; an accepted stream's first
// and last windows read back.
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
  for (int width : {1, 2, 4, 8}) {
    if (!tokens.copy(0, n, out.data(), width).empty())
      __builtin_trap(); // the file did not change: reading what open accepted works
    if (!tokens.copy(tokens.size() - n, n, out.data(), width).empty())
      __builtin_trap();
  }
  return 0;
}
