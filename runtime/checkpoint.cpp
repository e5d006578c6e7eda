//===- checkpoint.cpp - tcc-run's training checkpoints --------------------===//

#include "runtime/checkpoint.h"
#include "runtime/posix_io.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the tcc runtime supports little-endian hosts only"
#endif

namespace tcc::ckpt {

using io::errnoText;
using io::readAll;
using io::writeAll;

namespace {

constexpr char kMagic[8] = {'T', 'C', 'C', 'C', 'K', 'P', 'T', '1'};

//===----------------------------------------------------------------------===//
// Hashing
//===----------------------------------------------------------------------===//

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void *p, size_t n) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 0x100000001b3ull;
    }
  }
  template <typename T> void value(T v) { bytes(&v, sizeof v); }
  void str(const char *s) { bytes(s ? s : "", std::strlen(s ? s : "") + 1); }
};

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A fast non-cryptographic hash of one buffer (four independent lanes of
/// 64-bit words), to detect a corrupted checkpoint.
uint64_t blockHash(const void *data, uint64_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  const uint64_t P1 = 0x9e3779b185ebca87ull, P2 = 0xc2b2ae3d27d4eb4full;
  uint64_t a = P1, b = P2, c = 0x165667b19e3779f9ull, d = 0x27d4eb2f165667c5ull;
  uint64_t len = n;
  while (n >= 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    a = rotl(a + w[0] * P2, 31) * P1;
    b = rotl(b + w[1] * P2, 31) * P1;
    c = rotl(c + w[2] * P2, 31) * P1;
    d = rotl(d + w[3] * P2, 31) * P1;
    p += 32;
    n -= 32;
  }
  uint64_t h = mix(a) ^ rotl(mix(b), 17) ^ rotl(mix(c), 29) ^
               rotl(mix(d), 43) ^ len;
  Fnv tail;
  tail.bytes(p, static_cast<size_t>(n));
  return mix(h ^ tail.h);
}

struct Checksum {
  uint64_t h = 0x74636363686b7331ull;
  void add(const void *p, uint64_t n) { h = mix(h ^ blockHash(p, n)) + 1; }
};

//===----------------------------------------------------------------------===//
// Header encoding
//===----------------------------------------------------------------------===//

void put32(unsigned char *p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(unsigned char *p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get32(const unsigned char *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get64(const unsigned char *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

/// Which tensors a file holds: checkpoint.bin the parameters and the state
/// that is not sharded, a shard file the rank's sharded state.
enum class Part { Main, Shard };

bool inPart(const tcc_tensor_desc &d, Part part) {
  return (d.location == TCC_LOCATION_SHARD) == (part == Part::Shard);
}

uint64_t payloadBytes(const tcc_step_info &info, Part part = Part::Main) {
  uint64_t n = 0;
  if (part == Part::Main)
    for (int32_t i = 0; i < info.num_params; ++i)
      n += info.params[i].bytes;
  for (int32_t i = 0; i < info.num_state; ++i)
    if (inPart(info.state[i], part))
      n += info.state[i].bytes;
  return n;
}

void encode(const State &s, const tcc_step_info &info, unsigned char *h,
            Part part = Part::Main, uint32_t ranks = 0, uint32_t rank = 0) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h, kMagic, 8);
  put32(h + 8, kFormatVersion);
  put32(h + 12, kHeaderBytes);
  put64(h + 16, s.fingerprint);
  put64(h + 24, static_cast<uint64_t>(s.step));
  put64(h + 32, s.rng);
  put64(h + 40, s.seed);
  put64(h + 48, s.position);
  put64(h + 56, s.losses);
  put64(h + 64, static_cast<uint64_t>(s.accum));
  put32(h + 72, s.dataKind);
  put32(h + 76, s.dataOrder);
  put64(h + 80, s.dataLength);
  put64(h + 88, static_cast<uint64_t>(info.num_params));
  put64(h + 96, static_cast<uint64_t>(info.num_state));
  put64(h + 104, payloadBytes(info, part));
  put64(h + 112, static_cast<uint64_t>(s.optimizerSteps));
  put32(h + 120, s.lossScaleMode);
  std::memcpy(h + 128, &s.lossScale, 8);
  put64(h + 136, static_cast<uint64_t>(s.growthTracker));
  put64(h + 144, static_cast<uint64_t>(s.skipped));
  put32(h + 152, ranks);
  put32(h + 156, rank);
}

/// Writes `path` atomically: the header, the part's tensors from `arena`,
/// the manifest (checkpoint.bin of a sharded step), the checksum, which
/// `checksum` gets with the file's size in `bytes`.
std::string writeFile(const std::string &dir, const std::string &path, const unsigned char *header,
                      const tcc_step_info &info, const char *arena, Part part,
                      const std::vector<ShardEntry> &manifest, ShardEntry *written) {
  // The folder is this run's (locked): what a killed run left is stale.
  io::removeStaleTemporaries(path);
  io::AtomicFile out;
  if (!out.createBeside(path))
    return "cannot write the checkpoint " + path + " (creating its temporary): " +
           errnoText(errno);
  int fd = out.fd();
  auto fail = [&](const char *what) {
    int err = errno;
    out.discard();
    return "cannot write the checkpoint " + path +
           (what[0] ? std::string(" (") + what + ")" : std::string()) + ": " +
           errnoText(err);
  };
  Checksum sum;
  sum.add(header, kHeaderBytes);
  if (!writeAll(fd, header, kHeaderBytes))
    return fail("");
  auto tensors = [&](const tcc_tensor_desc *t, int32_t n, bool all) {
    for (int32_t i = 0; i < n; ++i) {
      if (!all && !inPart(t[i], part))
        continue;
      sum.add(arena + t[i].offset, t[i].bytes);
      if (!writeAll(fd, arena + t[i].offset, t[i].bytes))
        return false;
    }
    return true;
  };
  if ((part == Part::Main && !tensors(info.params, info.num_params, true)) ||
      !tensors(info.state, info.num_state, false))
    return fail("");
  if (!manifest.empty()) {
    std::vector<unsigned char> m(manifest.size() * 16);
    for (size_t r = 0; r < manifest.size(); ++r) {
      put64(m.data() + 16 * r, manifest[r].bytes);
      put64(m.data() + 16 * r + 8, manifest[r].checksum);
    }
    sum.add(m.data(), m.size());
    if (!writeAll(fd, m.data(), m.size()))
      return fail("");
  }
  unsigned char trailer[8];
  put64(trailer, sum.h);
  if (!writeAll(fd, trailer, 8))
    return fail("");
  if (const char *what = out.commit(path, dir))
    return fail(what);
  if (written) {
    written->bytes = kHeaderBytes + payloadBytes(info, part) + 8;
    written->checksum = sum.h;
  }
  return "";
}

} // namespace

uint64_t fingerprint(const tcc_step_info &info) {
  Fnv f;
  f.value<int32_t>(info.num_params);
  f.value<int32_t>(info.num_state);
  auto desc = [&](const tcc_tensor_desc &d) {
    f.str(d.name);
    f.value<int32_t>(d.dtype);
    f.value<int32_t>(d.rank);
    for (int32_t i = 0; i < d.rank; ++i)
      f.value<int64_t>(d.dims[i]);
  };
  for (int32_t i = 0; i < info.num_params; ++i)
    desc(info.params[i]);
  for (int32_t i = 0; i < info.num_state; ++i)
    desc(info.state[i]);
  f.str(info.optimizer);
  return f.h;
}

std::string filePath(const std::string &dir) {
  return io::joinPath(dir, "checkpoint.bin");
}

std::string write(const std::string &dir, const State &state,
                  const tcc_step_info &info, const char *arena) {
  unsigned char header[kHeaderBytes];
  encode(state, info, header);
  return writeFile(dir, filePath(dir), header, info, arena, Part::Main, {}, nullptr);
}

std::string shardPath(const std::string &dir, int rank, int ranks, int64_t step) {
  return io::joinPath(dir, "checkpoint.shard-" + std::to_string(rank) + "-of-" +
                               std::to_string(ranks) + ".step-" + std::to_string(step) + ".bin");
}

std::string writeShard(const std::string &dir, const State &state, const tcc_step_info &info,
                       const char *arena, int rank, int ranks, ShardEntry &entry) {
  unsigned char header[kHeaderBytes];
  encode(state, info, header, Part::Shard, static_cast<uint32_t>(ranks),
         static_cast<uint32_t>(rank));
  return writeFile(dir, shardPath(dir, rank, ranks, state.step), header, info, arena,
                   Part::Shard, {}, &entry);
}

std::string writeSharded(const std::string &dir, const State &state, const tcc_step_info &info,
                         const char *arena, const std::vector<ShardEntry> &manifest) {
  unsigned char header[kHeaderBytes];
  encode(state, info, header, Part::Main, static_cast<uint32_t>(manifest.size()));
  return writeFile(dir, filePath(dir), header, info, arena, Part::Main, manifest, nullptr);
}

std::string removeStaleShards(const std::string &dir, int64_t step) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return "cannot list " + dir + ": " + errnoText(errno);
  std::string keep = ".step-" + std::to_string(step) + ".bin", failed;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    const std::string prefix = "checkpoint.shard-";
    if (name.compare(0, prefix.size(), prefix) != 0 ||
        (name.size() >= keep.size() &&
         name.compare(name.size() - keep.size(), keep.size(), keep) == 0))
      continue;
    std::string path = io::joinPath(dir, name);
    if (::unlink(path.c_str()) != 0 && failed.empty())
      failed = "cannot remove the old checkpoint shard " + path + ": " + errnoText(errno);
  }
  ::closedir(d);
  return failed;
}

namespace {

/// Links `from` as `to`, or copies it where the filesystem has no links.
std::string linkOrCopy(const std::string &from, const std::string &to) {
  if (::link(from.c_str(), to.c_str()) == 0)
    return "";
  if (errno != EPERM && errno != EXDEV && errno != ENOTSUP && errno != EMLINK)
    return "cannot link " + from + " as " + to + ": " + errnoText(errno);
  int in = io::openRetry(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return "cannot read " + from + ": " + errnoText(errno);
  int out = io::openRetry(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (out < 0) {
    int e = errno;
    ::close(in);
    return "cannot create " + to + ": " + errnoText(e);
  }
  std::vector<char> buf(1 << 20);
  std::string failed;
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (n > 0 && !io::writeAll(out, buf.data(), static_cast<uint64_t>(n)))) {
      failed = "cannot copy " + from + " to " + to + ": " + errnoText(errno);
      break;
    }
    if (n == 0)
      break;
  }
  if (failed.empty() && ::fsync(out) != 0)
    failed = "cannot write " + to + ": " + errnoText(errno);
  ::close(in);
  ::close(out);
  if (!failed.empty())
    ::unlink(to.c_str());
  return failed;
}

/// Removes the folder keepHistory made: its two files, then itself.
std::string removeHistoryFolder(const std::string &path) {
  for (const char *name : {"checkpoint.bin", "training-flags"}) {
    std::string f = io::joinPath(path, name);
    if (::unlink(f.c_str()) != 0 && errno != ENOENT)
      return "cannot remove the old checkpoint " + f + ": " + errnoText(errno);
  }
  if (::rmdir(path.c_str()) != 0)
    return "cannot remove the old checkpoint folder " + path + ": " + errnoText(errno) +
           " (it holds files tcc-run did not write)";
  return "";
}

} // namespace

std::vector<std::pair<int64_t, std::string>> historyFolders(const std::string &dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return found;
  while (struct dirent *e = ::readdir(d)) {
    const char *name = e->d_name;
    if (std::strncmp(name, "step-", 5) != 0 || !name[5])
      continue;
    char *end = nullptr;
    errno = 0;
    long long step = std::strtoll(name + 5, &end, 10);
    if (*end || errno || step < 0)
      continue;
    found.emplace_back(static_cast<int64_t>(step), io::joinPath(dir, name));
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

std::string keepHistory(const std::string &dir, int64_t step, int64_t keep) {
  std::string folder = io::joinPath(dir, "step-" + std::to_string(step));
  struct stat st;
  if (::lstat(folder.c_str(), &st) == 0) {
    // A rerun of the same step (a resume that repeats it): the new bytes win.
    if (!S_ISDIR(st.st_mode))
      return folder + " exists and is not a folder tcc-run made; move it away";
    if (std::string e = removeHistoryFolder(folder); !e.empty())
      return e;
  }
  if (::mkdir(folder.c_str(), 0755) != 0)
    return "cannot create the checkpoint folder " + folder + ": " + errnoText(errno);
  if (std::string e = linkOrCopy(filePath(dir), io::joinPath(folder, "checkpoint.bin")); !e.empty())
    return e;
  std::string flags = io::joinPath(dir, "training-flags");
  if (::access(flags.c_str(), F_OK) == 0)
    if (std::string e = linkOrCopy(flags, io::joinPath(folder, "training-flags")); !e.empty())
      return e;
  io::fsyncDir(folder);
  std::vector<std::pair<int64_t, std::string>> all = historyFolders(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i)
    if (std::string e = removeHistoryFolder(all[i].second); !e.empty())
      return e;
  io::fsyncDir(dir);
  return "";
}

namespace {

/// Reads this rank's shard file of the checkpoint at step `s.step` into the
/// arena's TCC_LOCATION_SHARD tensors, checking it against `entry`.
std::string readShard(const std::string &dir, const tcc_step_info &info, const State &s,
                      char *arena, int rank, int ranks, const ShardEntry &entry) {
  std::string path = shardPath(dir, rank, ranks, s.step);
  int fd = io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "the checkpoint in " + dir + " needs its shard " + path + " (rank " +
           std::to_string(rank) + "'s optimizer state), which " +
           (errno == ENOENT ? std::string("is missing") : "cannot be opened: " + errnoText(errno));
  io::FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != entry.bytes)
    return "the checkpoint shard " + path + " is not the one checkpoint.bin names (" +
           std::to_string(static_cast<uint64_t>(st.st_size)) + " bytes, expected " +
           std::to_string(entry.bytes) + ")";
  unsigned char h[kHeaderBytes];
  if (readAll(fd, h, kHeaderBytes) != 0 || std::memcmp(h, kMagic, 8) != 0 ||
      get64(h + 16) != s.fingerprint || static_cast<int64_t>(get64(h + 24)) != s.step ||
      get32(h + 152) != static_cast<uint32_t>(ranks) ||
      get32(h + 156) != static_cast<uint32_t>(rank) ||
      get64(h + 104) != payloadBytes(info, Part::Shard))
    return "the checkpoint shard " + path + " does not belong to checkpoint.bin (its header "
           "names another step, rank or model)";
  Checksum sum;
  sum.add(h, kHeaderBytes);
  for (int32_t i = 0; i < info.num_state; ++i) {
    const tcc_tensor_desc &t = info.state[i];
    if (!inPart(t, Part::Shard))
      continue;
    if (int r = readAll(fd, arena + t.offset, t.bytes); r != 0)
      return "the checkpoint shard " + path + " is truncated";
    sum.add(arena + t.offset, t.bytes);
  }
  unsigned char trailer[8];
  if (readAll(fd, trailer, 8) != 0 || get64(trailer) != sum.h || sum.h != entry.checksum)
    return "the checkpoint shard " + path + " is corrupt (checksum mismatch)";
  return "";
}

} // namespace

std::string read(const std::string &dir, const tcc_step_info &info,
                 State &state, char *arena, int rank, int ranks) {
  std::string path = filePath(dir);
  int fd = io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return "there is no checkpoint " + path + " to resume from";
    return "cannot open the checkpoint " + path + ": " + errnoText(errno);
  }
  io::FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return "cannot read the checkpoint " + path + ": " + errnoText(errno);
  if (!S_ISREG(st.st_mode))
    return "the checkpoint " + path + " is not a regular file";
  uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char h[kHeaderBytes];
  std::memset(h, 0, kHeaderBytes);
  if (size < 8 ||
      readAll(fd, h, size < kHeaderBytesV1 ? size : kHeaderBytesV1) != 0)
    return "the checkpoint " + path + " is not a tcc-run checkpoint (" +
           std::to_string(size) + " bytes)";
  if (std::memcmp(h, kMagic, 8) != 0)
    return "the checkpoint " + path +
           " is not a tcc-run checkpoint (no TCCCKPT1 magic)";
  if (size < kHeaderBytesV1 + 8)
    return "the checkpoint " + path + " is truncated (" +
           std::to_string(size) + " bytes)";
  uint32_t version = get32(h + 8);
  uint32_t headerBytes = get32(h + 12);
  if (!(version == kFormatVersion && headerBytes == kHeaderBytes) &&
      !(version == 1 && headerBytes == kHeaderBytesV1))
    return "the checkpoint " + path + " has format version " +
           std::to_string(version) + "; this tcc-run reads versions 1 and " +
           std::to_string(kFormatVersion);
  if (size < headerBytes + 8)
    return "the checkpoint " + path + " is truncated (" +
           std::to_string(size) + " bytes)";
  if (headerBytes > kHeaderBytesV1) {
    int r = readAll(fd, h + kHeaderBytesV1, headerBytes - kHeaderBytesV1);
    if (r < 0)
      return "cannot read the checkpoint " + path + ": " + errnoText(errno);
    if (r > 0)
      return "the checkpoint " + path + " is truncated";
  }
  State s;
  s.fingerprint = get64(h + 16);
  s.step = static_cast<int64_t>(get64(h + 24));
  s.rng = get64(h + 32);
  s.seed = get64(h + 40);
  s.position = get64(h + 48);
  s.losses = get64(h + 56);
  s.accum = static_cast<int64_t>(get64(h + 64));
  s.dataKind = get32(h + 72);
  s.dataOrder = get32(h + 76);
  s.dataLength = get64(h + 80);
  if (version >= 2) {
    s.optimizerSteps = static_cast<int64_t>(get64(h + 112));
    s.lossScaleMode = get32(h + 120);
    std::memcpy(&s.lossScale, h + 128, 8);
    s.growthTracker = static_cast<int64_t>(get64(h + 136));
    s.skipped = static_cast<int64_t>(get64(h + 144));
  } else {
    // Version 1 had no loss scaling: every step advanced the optimizer.
    s.optimizerSteps = s.step;
  }
  // Sharded optimizer state (tcc --data-parallel): the shards that wrote it.
  const uint32_t shards = version >= 2 ? get32(h + 152) : 0;
  bool stepShards = false;
  for (int32_t i = 0; i < info.num_state; ++i)
    stepShards |= info.state[i].location == TCC_LOCATION_SHARD;
  if (shards && !stepShards)
    return "the checkpoint " + path + " holds optimizer state sharded across " +
           std::to_string(shards) + " ranks (tcc --data-parallel=" + std::to_string(shards) +
           "), but this step keeps the whole state on every rank: resume it with the step "
           "it was written by";
  if (stepShards && !shards)
    return "the checkpoint " + path + " was written without sharded optimizer state (every "
           "rank keeping the whole state), but this step shards it (tcc --data-parallel): "
           "resume it with the step it was written by";
  if (stepShards && shards != static_cast<uint32_t>(ranks))
    return "the checkpoint " + path + " was written by " + std::to_string(shards) +
           " ranks, each with its shard of the optimizer state, and this world has " +
           std::to_string(ranks) + ": resume with mpirun -np " + std::to_string(shards) +
           " and a step built with --data-parallel=" + std::to_string(shards) +
           " (resharding is not supported)";
  uint64_t payload = payloadBytes(info);
  if (s.fingerprint != fingerprint(info) ||
      get64(h + 88) != static_cast<uint64_t>(info.num_params) ||
      get64(h + 96) != static_cast<uint64_t>(info.num_state) ||
      get64(h + 104) != payload)
    return "checkpoint " + path +
           " was written for a different model (parameters/optimizer differ)";
  uint64_t expect = headerBytes + payload + 16ull * shards + 8;
  if (size != expect)
    return "the checkpoint " + path + " is " +
           (size < expect ? "truncated" : "corrupt") + " (" +
           std::to_string(size) + " bytes; this model's checkpoint has " +
           std::to_string(expect) + ")";
  if (s.step < 0 || s.accum < 1 || s.optimizerSteps < 0 ||
      s.optimizerSteps > s.step || s.skipped < 0 || s.skipped > s.step ||
      s.growthTracker < 0 || s.lossScaleMode > 2 ||
      !std::isfinite(s.lossScale) || !(s.lossScale > 0))
    return "the checkpoint " + path +
           " is corrupt (bad step counts or loss scaler state)";
  Checksum sum;
  sum.add(h, headerBytes);
  auto tensors = [&](const tcc_tensor_desc *t, int32_t n) -> int {
    for (int32_t i = 0; i < n; ++i) {
      int r = readAll(fd, arena + t[i].offset, t[i].bytes);
      if (r != 0)
        return r;
      sum.add(arena + t[i].offset, t[i].bytes);
    }
    return 0;
  };
  int r = tensors(info.params, info.num_params);
  for (int32_t i = 0; r == 0 && i < info.num_state; ++i)
    if (inPart(info.state[i], Part::Main))
      r = tensors(info.state + i, 1);
  std::vector<unsigned char> manifest(16ull * shards);
  if (r == 0 && shards) {
    r = readAll(fd, manifest.data(), manifest.size());
    if (r == 0)
      sum.add(manifest.data(), manifest.size());
  }
  unsigned char trailer[8];
  if (r == 0)
    r = readAll(fd, trailer, 8);
  if (r < 0)
    return "cannot read the checkpoint " + path + ": " + errnoText(errno);
  if (r > 0)
    return "the checkpoint " + path + " is truncated";
  if (get64(trailer) != sum.h)
    return "the checkpoint " + path + " is corrupt (checksum mismatch)";
  if (shards) {
    ShardEntry mine{get64(manifest.data() + 16 * rank), get64(manifest.data() + 16 * rank + 8)};
    if (std::string bad = readShard(dir, info, s, arena, rank, ranks, mine); !bad.empty())
      return bad;
  }
  state = s;
  return "";
}

} // namespace tcc::ckpt
