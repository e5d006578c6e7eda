//===- checkpoint.h - tcc-run's training checkpoints ------------*- C++ -*-===//
//
// One file, DIR/checkpoint.bin, little-endian:
//
//   offset  size  field
//        0     8  magic "TCCCKPT1"
//        8     4  format version (kFormatVersion)
//       12     4  header size (kHeaderBytes)
//       16     8  fingerprint of the step (see fingerprint())
//       24     8  optimizer steps done (attempted, skipped ones included)
//       32     8  PRNG state after the micro-batches consumed
//       40     8  the --seed the run started with
//       48     8  micro-batches consumed (the data position)
//       56     8  micro-step losses recorded so far
//       64     8  --accum the checkpoint was written with
//       72     4  data kind (DataKind)
//       76     4  data order (0 random, 1 sequential)
//       80     8  data length (tokens in the stream, or feed folders)
//       88     8  number of parameters
//       96     8  number of optimizer state tensors
//      104     8  payload bytes
//      112     8  optimizer updates applied (the optimizer's own step
//                 counter, tcc_optim_args.step; less than the steps done
//                 when dynamic loss scaling skipped some)          [v2]
//      120     4  loss scaling mode (LossScaler::Mode: 0 off, 1 static,
//                 2 dynamic)                                       [v2]
//      124     4  zero
//      128     8  loss scale (float64)                             [v2]
//      136     8  loss scaler growth tracker                       [v2]
//      144     8  steps skipped so far (gradient norm not finite)  [v2]
//      152    40  zero
//      192        every parameter's bytes (descriptor order), then every
//                 state tensor's bytes
//      end-8   8  checksum of everything before it
//
// Version 1 (a 128-byte header, bytes 112-127 zero) is still read: its
// optimizer updates equal its steps done, without loss scaling.
//
// Gradient accumulators are zero between optimizer steps and not saved.
// Writing is atomic: DIR/checkpoint.bin.tmp, fsync, rename, fsync DIR (with
// the terminating signals held back), so a kill at any moment leaves the
// previous checkpoint whole.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_CHECKPOINT_H
#define TCC_RUNTIME_CHECKPOINT_H

#include "runtime/tcc_step.h"

#include <cstdint>
#include <string>

namespace tcc::ckpt {

constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kHeaderBytes = 192;
constexpr uint32_t kHeaderBytesV1 = 128;

enum DataKind : uint32_t { FeedOne = 0, FeedFolders = 1, Tokens = 2 };

struct State {
  uint64_t fingerprint = 0;
  int64_t step = 0;
  uint64_t rng = 0;
  uint64_t seed = 0;
  uint64_t position = 0;
  uint64_t losses = 0;
  int64_t accum = 0;
  uint32_t dataKind = 0;
  uint32_t dataOrder = 0;
  uint64_t dataLength = 0;
  int64_t optimizerSteps = 0;  // tcc_optim_args.step of the last update
  uint32_t lossScaleMode = 0;  // LossScaler::Mode
  double lossScale = 1.0;
  int64_t growthTracker = 0;
  int64_t skipped = 0;
};

/// FNV-1a (64-bit) over the number of parameters and state tensors, every
/// parameter's and state tensor's name, dtype, rank and dims, and the
/// optimizer's name.
uint64_t fingerprint(const tcc_step_info &info);

/// DIR/checkpoint.bin.
std::string filePath(const std::string &dir);

/// Writes DIR/checkpoint.bin atomically from `state` and the parameters and
/// optimizer state in `arena`. Returns "" on success.
std::string write(const std::string &dir, const State &state,
                  const tcc_step_info &info, const char *arena);

/// Reads DIR/checkpoint.bin: checks its magic, version, fingerprint (against
/// `info`), size and checksum, and restores the parameters and optimizer
/// state into `arena`. Returns "" on success; on failure the arena's
/// parameters and state may be partly overwritten.
std::string read(const std::string &dir, const tcc_step_info &info,
                 State &state, char *arena);

} // namespace tcc::ckpt

#endif // TCC_RUNTIME_CHECKPOINT_H
