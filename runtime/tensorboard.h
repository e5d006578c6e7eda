//===- tensorboard.h - TensorBoard event files for tcc-run ------*- C++ -*-===//
//
// Writes TensorBoard event files, so that `tensorboard --logdir DIR` plots
// tcc-run's scalars (loss, learning rate, ...). An event file is a sequence
// of TFRecords, each holding one serialized tensorboard.Event protobuf:
//
//   uint64 length (little-endian) | uint32 masked CRC32C of the length bytes
//   | length bytes of data        | uint32 masked CRC32C of the data
//
// The first event names the format ("brain.Event:2"); each later one holds a
// Summary of scalar (simple_value) values at one step. The protobuf is
// encoded by hand; C++ standard library and POSIX only, no exceptions: every
// failure is a returned message ("" means success).
//
// Each event goes to the file in one write(2), straight to the descriptor
// (no user-space buffering and no fsync), so a run that is killed leaves whole
// records only, and TensorBoard sees each event as soon as it is written.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_TENSORBOARD_H
#define TCC_RUNTIME_TENSORBOARD_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tcc::tb {

/// One event file being written. Not thread-safe: one thread writes it.
class EventWriter {
public:
  EventWriter() = default;
  ~EventWriter();
  EventWriter(const EventWriter &) = delete;
  EventWriter &operator=(const EventWriter &) = delete;

  /// Creates `dir` (and its missing parents) and a new event file in it,
  /// "events.out.tfevents.<unix seconds>.<hostname>.<pid>.tcc" (TensorBoard
  /// finds event files by the "tfevents" in their name), opened with
  /// O_CREAT|O_EXCL|O_CLOEXEC, and writes the first event (file_version
  /// "brain.Event:2"). Fails if the writer is already open, or if the file
  /// exists (a second open in the same second by the same process). Returns
  /// "" on success, otherwise a message that names the directory or file; a
  /// file that was created but whose first event could not be written is
  /// removed again.
  std::string open(const std::string &dir);

  /// Writes one Event at `step` (wall_time `wallTime`, seconds since the
  /// epoch) whose Summary holds one simple_value per (tag, value), in order.
  /// The values are stored as float (simple_value is a float field), rounded
  /// to nearest: a finite value too large for float becomes +-inf; NaN and
  /// +-inf are written as they are. If the write fails, the file is cut back
  /// to its last whole record. Returns "" on success, otherwise a message
  /// that names the file.
  std::string
  scalars(int64_t step, double wallTime,
          const std::vector<std::pair<std::string, double>> &values);

  /// The event file's path ("" before a successful open()).
  const std::string &path() const { return path_; }

private:
  /// Frames `event` (a serialized Event) as one TFRecord and writes it.
  std::string writeRecord(const std::string &event);

  int fd_ = -1;
  uint64_t size_ = 0; // bytes of whole records in the file
  std::string path_;
};

/// The masked CRC32C (Castagnoli) of `n` bytes at `data`, as TFRecord framing
/// stores it: ((crc >> 15) | (crc << 17)) + 0xa282ead8. Exposed for tests.
uint32_t maskedCrc32c(const void *data, size_t n);

/// The plain (unmasked) CRC32C of `n` bytes at `data`; "123456789" gives
/// 0xE3069283. Exposed for tests.
uint32_t crc32c(const void *data, size_t n);

} // namespace tcc::tb

#endif // TCC_RUNTIME_TENSORBOARD_H
