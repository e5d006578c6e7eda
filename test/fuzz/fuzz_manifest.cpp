//===- fuzz_manifest.cpp - libFuzzer harness: a sharded checkpoint ------===//
//
// Any bytes as a ZeRO-1 checkpoint of two ranks: DIR/checkpoint.bin (whose
// manifest records each rank's shard file: its size and checksum) and rank
// 0's shard file, the input split at the first "TCCSHARD" (the shard's name
// takes the step its header claims), then DIR/training-flags, the flags a
// resume takes, after the first "TCCFLAGS". ckpt::read restores rank 0's
// part or says why not, never writing outside the arena; the recorded
// flags are applied through a parser that accepts anything, or refused
// with a reason.
//
//===----------------------------------------------------------------------===//
#include "fuzz_util.h"
#include "runtime/checkpoint.h"
#include "runtime/lib/resume_flags.h"

#include <cstring>
#include <dirent.h>
#include <unistd.h>
#include <fstream>
#include <string>
#include <vector>

namespace {
const int64_t kDimsW[] = {4, 8};
const int64_t kChunk[] = {16};
// name, dtype, rank, dims, offset, bytes, location: the parameter and the
// two AdamW moments of rank 0's chunk (16 of the 32 elements).
const tcc_tensor_desc kParams[] = {{"w", 1, 2, kDimsW, 0, 128, TCC_LOCATION_ARENA}};
const tcc_tensor_desc kState[] = {{"exp_avg/shard", 1, 1, kChunk, 128, 64, TCC_LOCATION_SHARD},
                                  {"exp_avg_sq/shard", 1, 1, kChunk, 192, 64, TCC_LOCATION_SHARD}};

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(),
                                                                 static_cast<std::streamsize>(bytes.size()));
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const tcc_step_info info = tcc::fuzz::adamwStepInfo(kParams, kState, 256);
  const std::string &dir = tcc::fuzz::scratchDir();
  std::string in(reinterpret_cast<const char *>(data), size), flags;
  if (size_t at = in.find("TCCFLAGS"); at != std::string::npos) {
    flags = in.substr(at + 8);
    in.resize(at);
  }
  std::string main = in, shard;
  if (size_t at = in.find("TCCSHARD"); at != std::string::npos) {
    main = in.substr(0, at);
    shard = in.substr(at + 8);
  }
  // The last input's shard file (its name took that input's step).
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d))
      if (std::strncmp(e->d_name, "checkpoint.shard-", 17) == 0)
        ::unlink((dir + "/" + e->d_name).c_str());
    ::closedir(d);
  }
  writeFile(tcc::ckpt::filePath(dir), main);
  int64_t step = 0;
  if (main.size() >= 32)
    std::memcpy(&step, main.data() + 24, sizeof step);
  writeFile(tcc::ckpt::shardPath(dir, 0, 2, step), shard);
  // The arena with a guard after it: a write past arena_bytes shows.
  std::vector<char> arena(info.arena_bytes + 64, 0x5a);
  tcc::ckpt::State state;
  (void)tcc::ckpt::read(dir, info, state, arena.data(), /*rank=*/0, /*ranks=*/2);
  for (size_t i = info.arena_bytes; i < arena.size(); ++i)
    if (arena[i] != 0x5a)
      __builtin_trap();

  writeFile(tcc::run::flagsPath(dir), flags);
  tcc::run::Options opts;
  std::vector<std::string> notes;
  (void)tcc::run::applyRecordedFlags(
      dir, opts,
      [](const std::string &flag, const std::string &value) {
        // Every byte of what the parser hands over must be readable.
        size_t n = 0;
        for (char c : flag + value)
          n += static_cast<unsigned char>(c);
        return n % 7 == 0 ? std::string("refused") : std::string();
      },
      notes);
  return 0;
}
