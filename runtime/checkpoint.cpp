//===- checkpoint.cpp - tcc-run's training checkpoints --------------------===//

#include "runtime/checkpoint.h"
#include "runtime/posix_io.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

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

uint64_t payloadBytes(const tcc_step_info &info) {
  uint64_t n = 0;
  for (int32_t i = 0; i < info.num_params; ++i)
    n += info.params[i].bytes;
  for (int32_t i = 0; i < info.num_state; ++i)
    n += info.state[i].bytes;
  return n;
}

void encode(const State &s, const tcc_step_info &info, unsigned char *h) {
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
  put64(h + 104, payloadBytes(info));
  put64(h + 112, static_cast<uint64_t>(s.optimizerSteps));
  put32(h + 120, s.lossScaleMode);
  std::memcpy(h + 128, &s.lossScale, 8);
  put64(h + 136, static_cast<uint64_t>(s.growthTracker));
  put64(h + 144, static_cast<uint64_t>(s.skipped));
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
  std::string path = filePath(dir);
  std::string tmp = path + ".tmp";
  unsigned char header[kHeaderBytes];
  encode(state, info, header);

  io::AtomicFile out;
  if (!out.create(tmp))
    return "cannot write the checkpoint " + tmp + ": " + errnoText(errno);
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
  auto tensors = [&](const tcc_tensor_desc *t, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
      sum.add(arena + t[i].offset, t[i].bytes);
      if (!writeAll(fd, arena + t[i].offset, t[i].bytes))
        return false;
    }
    return true;
  };
  if (!tensors(info.params, info.num_params) ||
      !tensors(info.state, info.num_state))
    return fail("");
  unsigned char trailer[8];
  put64(trailer, sum.h);
  if (!writeAll(fd, trailer, 8))
    return fail("");
  if (const char *what = out.commit(path, dir))
    return fail(what);
  return "";
}

std::string read(const std::string &dir, const tcc_step_info &info,
                 State &state, char *arena) {
  std::string path = filePath(dir);
  int fd = io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return "there is no checkpoint " + path + " to resume from";
    return "cannot open the checkpoint " + path + ": " + errnoText(errno);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
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
  uint64_t payload = payloadBytes(info);
  if (s.fingerprint != fingerprint(info) ||
      get64(h + 88) != static_cast<uint64_t>(info.num_params) ||
      get64(h + 96) != static_cast<uint64_t>(info.num_state) ||
      get64(h + 104) != payload)
    return "checkpoint " + path +
           " was written for a different model (parameters/optimizer differ)";
  uint64_t expect = headerBytes + payload + 8;
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
  if (r == 0)
    r = tensors(info.state, info.num_state);
  unsigned char trailer[8];
  if (r == 0)
    r = readAll(fd, trailer, 8);
  if (r < 0)
    return "cannot read the checkpoint " + path + ": " + errnoText(errno);
  if (r > 0)
    return "the checkpoint " + path + " is truncated";
  if (get64(trailer) != sum.h)
    return "the checkpoint " + path + " is corrupt (checksum mismatch)";
  state = s;
  return "";
}

} // namespace tcc::ckpt
