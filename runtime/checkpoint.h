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
//      152     4  shards R: 0, or the ranks whose optimizer state the
//                 shard files hold (tcc --data-parallel=R, ZeRO-1)
//      156     4  in a shard file: its rank; else zero
//      160    32  zero
//      192        every parameter's bytes (descriptor order), then every
//                 state tensor's bytes (with R > 0: the state tensors that
//                 are not TCC_LOCATION_SHARD)
//      ...   16R  with R > 0, the manifest: each shard file's size and
//                 checksum (its last 8 bytes), rank by rank
//      end-8   8  checksum of everything before it
//
// A sharded step's checkpoint is that file and one shard file per rank,
// DIR/checkpoint.shard-<r>-of-<R>.step-<S>.bin: the same header (with its
// rank) and the rank's TCC_LOCATION_SHARD state tensors. Each rank writes
// its shard atomically first; rank 0 then writes checkpoint.bin, whose
// rename commits the checkpoint, and removes the shards of other steps. A
// resume needs every shard the manifest names, byte for byte.
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
#include <utility>
#include <vector>

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

/// A shard file as checkpoint.bin's manifest records it.
struct ShardEntry {
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};
/// DIR/checkpoint.shard-<rank>-of-<ranks>.step-<step>.bin.
std::string shardPath(const std::string &dir, int rank, int ranks, int64_t step);
/// Writes this rank's shard file atomically (the TCC_LOCATION_SHARD state
/// in `arena`); `entry` gets what the manifest records. "" on success.
std::string writeShard(const std::string &dir, const State &state, const tcc_step_info &info,
                       const char *arena, int rank, int ranks, ShardEntry &entry);
/// Writes checkpoint.bin of a sharded step: as write(), without the shard
/// tensors, with the manifest of every rank's shard file.
std::string writeSharded(const std::string &dir, const State &state, const tcc_step_info &info,
                         const char *arena, const std::vector<ShardEntry> &manifest);
/// Removes DIR's shard files of steps other than `step`; "" or what failed.
std::string removeStaleShards(const std::string &dir, int64_t step);

/// tcc-run --keep-checkpoints N: keeps the checkpoint just written in `dir`
/// (checkpoint.bin and, if there, training-flags) at step `step` also as the
/// folder DIR/step-<step>/ (hard links: no bytes copied; a copy where the
/// filesystem has no links), a checkpoint folder `--resume` takes, then
/// removes all but the newest `keep` of those folders. Returns an error.
std::string keepHistory(const std::string &dir, int64_t step, int64_t keep);

/// The folders keepHistory made in `dir`, oldest first, as (step, path).
std::vector<std::pair<int64_t, std::string>> historyFolders(const std::string &dir);
/// Reads DIR/checkpoint.bin: checks its magic, version, fingerprint (against
/// `info`), size and checksum, and restores the parameters and optimizer
/// state into `arena`. Returns "" on success; on failure the arena's
/// parameters and state may be partly overwritten.
/// A sharded checkpoint also needs this rank's shard file (`rank` of
/// `ranks`, which must be the ranks that wrote it), with the manifest's
/// size and checksum.
std::string read(const std::string &dir, const tcc_step_info &info,
                 State &state, char *arena, int rank = 0, int ranks = 1);

} // namespace tcc::ckpt

#endif // TCC_RUNTIME_CHECKPOINT_H
