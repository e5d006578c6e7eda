//===- fuzz_npy.cpp - libFuzzer harness: the .npy reader -----------------===//
//
// Any bytes as an .npy file: Reader::open parses the header or says why
// not; a header it accepts has a consistent data size, and reading that
// data (when small) succeeds or fails with a message.
//
//===----------------------------------------------------------------------===//
#include "fuzz_util.h"
#include "runtime/npy.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = tcc::fuzz::writeInput("input.npy", data, size);
  tcc::npy::Reader reader;
  if (!reader.open(path).empty())
    return 0;
  const tcc::npy::Header &h = reader.header();
  if (h.dataOffset > size)
    __builtin_trap(); // the header claims data before the end of the file
  if (h.dataBytes <= (1u << 20)) {
    std::vector<char> buf(static_cast<size_t>(h.dataBytes));
    (void)reader.readData(buf.data(), h.dataBytes);
  }
  return 0;
}
