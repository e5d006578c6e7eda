//===- fuzz_checkpoint.cpp - libFuzzer harness: the checkpoint reader ----===//
//
// Any bytes as DIR/checkpoint.bin of a step with two parameters and their
// AdamW state: ckpt::read restores it or says why not (magic, version,
// fingerprint, size, checksum), and never writes outside the arena.
//
//===----------------------------------------------------------------------===//
#include "fuzz_util.h"
#include "runtime/checkpoint.h"

#include <cstring>
#include <vector>

namespace {
const int64_t kDimsW[] = {4, 8};
const int64_t kDimsB[] = {8};
// name, dtype, rank, dims, offset, bytes
const tcc_tensor_desc kParams[] = {{"w", 1, 2, kDimsW, 0, 128}, {"b", 1, 1, kDimsB, 128, 32}};
const tcc_tensor_desc kState[] = {{"exp_avg/w", 1, 2, kDimsW, 160, 128},
                                  {"exp_avg_sq/w", 1, 2, kDimsW, 288, 128},
                                  {"exp_avg/b", 1, 1, kDimsB, 416, 32},
                                  {"exp_avg_sq/b", 1, 1, kDimsB, 448, 32}};
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const tcc_step_info info = tcc::fuzz::adamwStepInfo(kParams, kState, 480);
  tcc::fuzz::writeInput("checkpoint.bin", data, size);
  // The arena with a guard after it: a write past arena_bytes shows.
  std::vector<char> arena(info.arena_bytes + 64, 0x5a);
  tcc::ckpt::State state;
  (void)tcc::ckpt::read(tcc::fuzz::scratchDir(), info, state, arena.data());
  for (size_t i = info.arena_bytes; i < arena.size(); ++i)
    if (arena[i] != 0x5a)
      __builtin_trap();
  return 0;
}
