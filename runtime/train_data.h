//===- train_data.h - micro-batches for tcc-run's training loop -*- C++ -*-===//
//
// Where tcc-run's micro-batches come from, and the background thread that
// prepares them ahead of compute.
//
// A micro-batch is a function of its 0-based index in the run and of the
// PRNG state before it (and nothing else), so the sequence is the same with
// and without the prefetch thread, and a resumed run continues it exactly
// from the (index, PRNG state) pair a checkpoint stores.
//
// Built with -fno-exceptions; every failure is a returned message.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_TRAIN_DATA_H
#define TCC_RUNTIME_TRAIN_DATA_H

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tcc::data {

//===----------------------------------------------------------------------===//
// The PRNG
//===----------------------------------------------------------------------===//

/// SplitMix64 (Steele, Lea, Flood 2014): the whole state is one uint64, which
/// the checkpoint stores.
inline uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A uniform integer in [0, n), n > 0, without modulo bias (rejection of the
/// low 2^64 mod n values). Platform-independent, unlike std:: distributions.
inline uint64_t uniformBelow(uint64_t &state, uint64_t n) {
  uint64_t threshold = (0 - n) % n; // 2^64 mod n
  for (;;) {
    uint64_t r = splitmix64(state);
    if (r >= threshold)
      return r % n;
  }
}

/// The PRNG state a run with `--seed seed` starts from.
inline uint64_t initialRngState(uint64_t seed) {
  uint64_t s = seed ^ 0x7463632d72756e31ull; // "tcc-run1"
  splitmix64(s);
  return s;
}

//===----------------------------------------------------------------------===//
// Making micro-batches
//===----------------------------------------------------------------------===//

/// Makes micro-batch `index` into `buf` (`batchBytes()` bytes), advancing
/// `rng` by the draws it takes. Must be callable from another thread (one at
/// a time) and depend on nothing but its arguments and immutable state.
class BatchMaker {
public:
  virtual ~BatchMaker() = default;
  virtual uint64_t batchBytes() const = 0;
  /// Returns "" on success.
  virtual std::string make(uint64_t index, uint64_t &rng, char *buf) = 0;
  /// Advances `rng` as make(index, rng, ...) would, without the batch (a
  /// batch another rank trains on). The default makes it and drops it.
  virtual std::string skip(uint64_t index, uint64_t &rng);
};

/// A token stream: `.bin` (little-endian uint16, as nanoGPT's prepare.py
/// writes) or a 1-D integer `.npy`, read as windows are needed (not mapped,
/// so that a file that shrinks during a run is an error, not a SIGBUS).
/// copy() is not thread-safe: one batch maker calls it.
class TokenStream {
public:
  TokenStream() = default;
  ~TokenStream();
  TokenStream(const TokenStream &) = delete;
  TokenStream &operator=(const TokenStream &) = delete;

  /// Opens `path` and checks its header and size. Returns "" on success,
  /// otherwise a message that names the file.
  std::string open(const std::string &path);
  uint64_t size() const { return count; }
  const std::string &path() const { return file; }
  /// "uint16", "int64", ...
  const char *typeName() const;
  /// Copies elements [begin, begin + n) to `dst`, converting each to an
  /// integer of `dstSize` bytes (1, 2, 4 or 8; two's complement truncation).
  /// Returns "" or why not (the file shrank, a read error).
  std::string copy(uint64_t begin, uint64_t n, void *dst, int dstSize) const;

private:
  std::string file;
  int fd = -1;
  uint64_t dataOffset = 0; // of the first element
  mutable std::vector<unsigned char> scratch;
  uint64_t count = 0;
  int elemSize = 0;
  bool isSigned = false;
};

enum class Order { Random, Sequential };

/// What a token window gives one step input (tcc-run --data).
enum class TokenRole {
  Ids,    ///< data[i : i+T], the tokens
  Next,   ///< data[i+1 : i+T+1], the next tokens (labels a loss reads aligned)
  Ones,   ///< all ones (an attention mask over a packed window)
};

/// One step input that a token batch fills: its role and bytes per element
/// (integers of 1, 2, 4 or 8 bytes).
struct TokenColumn {
  TokenRole role;
  int elemSize;
};

/// Micro-batches of B windows of the stream: window i fills each step input
/// (`columns`, in the step's input order, each [B, T] after the previous) by
/// its role. nanoGPT's tokens and targets are {Ids, Next}; a Hugging Face
/// causal LM that shifts its labels itself takes {Ids, Ids} (labels = ids).
/// `random` draws each i uniformly from [0, len - T) (every window whose
/// next tokens fit); `sequential` takes windows at 0, T, 2T, ... (those that
/// fit), the k-th window of the run being window k mod count, so the order
/// wraps around.
class TokenBatchMaker : public BatchMaker {
public:
  TokenBatchMaker(const TokenStream &stream, int64_t B, int64_t T,
                  std::vector<TokenColumn> columns, Order order)
      : stream(stream), B(B), T(T), columns(std::move(columns)), order(order) {}
  uint64_t batchBytes() const override {
    uint64_t n = 0;
    for (const TokenColumn &c : columns)
      n += static_cast<uint64_t>(B * T) * static_cast<uint64_t>(c.elemSize);
    return n;
  }
  std::string make(uint64_t index, uint64_t &rng, char *buf) override;
  /// Draws the windows' positions only.
  std::string skip(uint64_t index, uint64_t &rng) override;
  /// The number of sequential windows.
  uint64_t windows() const { return (stream.size() - 1) / T; }

private:
  const TokenStream &stream;
  int64_t B, T;
  std::vector<TokenColumn> columns;
  Order order;
};

//===----------------------------------------------------------------------===//
// Prefetching
//===----------------------------------------------------------------------===//

/// Delivers micro-batches start, start + 1, ... from a BatchMaker. With a
/// thread, a producer fills a queue of `kSlots` batches ahead of the
/// consumer; without, each batch is made on demand. The batches are the same
/// either way.
class Prefetcher {
public:
  static constexpr int kSlots = 2;

  /// Starts at micro-batch `index` with PRNG state `rng`.
  Prefetcher(BatchMaker &maker, uint64_t index, uint64_t rng, bool thread);
  ~Prefetcher();
  Prefetcher(const Prefetcher &) = delete;
  Prefetcher &operator=(const Prefetcher &) = delete;

  /// Hands the next batch to `consume(const char *data)` (the buffer is valid
  /// during the call only). Returns "" on success, else the maker's error.
  /// After it, position() and rng() describe the state after that batch.
  template <typename F> std::string next(F &&consume) {
    Slot *s = acquire();
    if (!s->err.empty())
      return s->err;
    made = {s->madeFrom, s->madeTo};
    consume(static_cast<const char *>(s->data.data()));
    pos = s->index + 1;
    rngState = s->rngAfter;
    release(s);
    return "";
  }
  /// Micro-batches consumed so far (counting from the run's start).
  uint64_t position() const { return pos; }
  /// The PRNG state after the last consumed batch.
  uint64_t rng() const { return rngState; }
  /// When the batch that next() hands over (or handed over last) was made:
  /// on the reader thread, or in next() itself without one (tcc-run --trace).
  std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>
  lastMade() const {
    return made;
  }
  /// Whether batches are made on a thread of their own.
  bool threadedReader() const { return threaded; }

private:
  struct Slot {
    std::vector<char> data;
    uint64_t index = 0, rngAfter = 0;
    std::string err;
    bool full = false;
    std::chrono::steady_clock::time_point madeFrom, madeTo;
  };

  Slot *acquire();
  void release(Slot *s);
  void produce();

  BatchMaker &maker;
  bool threaded;
  uint64_t pos, rngState;
  std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point> made;
  // Producer state: the next batch to make.
  uint64_t prodIndex, prodRng;
  Slot slots[kSlots];
  int head = 0, tail = 0; // consumer, producer
  bool stop = false;
  std::mutex mu;
  std::condition_variable cv;
  std::thread worker;
};

} // namespace tcc::data

#endif // TCC_RUNTIME_TRAIN_DATA_H
