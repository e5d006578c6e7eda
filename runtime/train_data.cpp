//===- train_data.cpp - micro-batches for tcc-run's training loop ---------===//

#include "runtime/train_data.h"

#include "runtime/posix_io.h"

#include "runtime/npy.h"

#include <cerrno>
#include <cstdint>
#include <csignal>
#include <cstring>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the tcc runtime supports little-endian hosts only"
#endif

namespace tcc::data {

namespace {

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

} // namespace

//===----------------------------------------------------------------------===//
// TokenStream
//===----------------------------------------------------------------------===//

TokenStream::~TokenStream() {
  if (fd >= 0)
    ::close(fd);
}

const char *TokenStream::typeName() const {
  switch (elemSize) {
  case 1:
    return isSigned ? "int8" : "uint8";
  case 2:
    return isSigned ? "int16" : "uint16";
  case 4:
    return isSigned ? "int32" : "uint32";
  case 8:
    return isSigned ? "int64" : "uint64";
  }
  return "?";
}

std::string TokenStream::open(const std::string &path) {
  file = path;
  uint64_t dataOffset = 0;
  if (endsWith(path, ".bin")) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT)
        return "the data file " + path + " does not exist";
      return "cannot read the data file " + path + ": " + std::strerror(errno);
    }
    if (!S_ISREG(st.st_mode))
      return "the data file " + path + " is not a regular file";
    uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size % 2 != 0)
      return "the data file " + path + " has an odd number of bytes (" +
             std::to_string(size) +
             "); a .bin token file holds little-endian uint16 tokens "
             "(truncated?)";
    elemSize = 2;
    isSigned = false;
    count = size / 2;
  } else if (endsWith(path, ".npy")) {
    tcc::npy::Reader reader;
    std::string err = reader.open(path);
    if (!err.empty()) {
      if (err == "is missing")
        return "the data file " + path + " does not exist";
      return "the data file " + path + " " + err;
    }
    const tcc::npy::Header &h = reader.header();
    const std::string &d = h.descr;
    bool ok = !h.structured && d.size() == 3 &&
              (d[0] == '<' || d[0] == '=' || d[0] == '|') &&
              (d[1] == 'i' || d[1] == 'u') &&
              (d[2] == '1' || d[2] == '2' || d[2] == '4' || d[2] == '8') &&
              (d[0] != '|' || d[2] == '1');
    if (!ok)
      return "the data file " + path + " has dtype " + d +
             "; a token .npy must hold little-endian integers (e.g. <u2, "
             "<i4, <i8)";
    if (h.shape.size() != 1)
      return "the data file " + path + " has shape " +
             tcc::npy::shapeToString(h.shape) +
             "; a token .npy must be 1-D";
    elemSize = d[2] - '0';
    isSigned = d[1] == 'i';
    count = static_cast<uint64_t>(h.shape[0]);
    uint64_t need;
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(elemSize), &need) ||
        h.dataBytes < need)
      return "the data file " + path +
             " is not a valid .npy file (truncated? it has " +
             std::to_string(h.dataBytes) + " bytes of data, shape " +
             tcc::npy::shapeToString(h.shape) + " needs " +
             std::to_string(count * static_cast<uint64_t>(elemSize)) + ")";
    if (h.dataBytes > need)
      return "the data file " + path + " has " +
             std::to_string(h.dataBytes - need) +
             " bytes after the data for shape " +
             tcc::npy::shapeToString(h.shape) + " (corrupt file?)";
    dataOffset = h.dataOffset;
  } else {
    return "the data file " + path +
           " is neither a .bin (little-endian uint16 tokens, as nanoGPT "
           "writes) nor a 1-D integer .npy";
  }
  if (count == 0)
    return "";
  int fd = tcc::io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "cannot open the data file " + path + ": " + std::strerror(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return "cannot read the data file " + path + ": " + std::strerror(e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return "the data file " + path + " is not a regular file";
  }
  if (static_cast<uint64_t>(st.st_size) < dataOffset + count * static_cast<uint64_t>(elemSize)) {
    ::close(fd);
    return "the data file " + path + " changed while it was being opened";
  }
  this->fd = fd;
  this->dataOffset = dataOffset;
  return "";
}

std::string TokenStream::copy(uint64_t begin, uint64_t n, void *dst, int dstSize) const {
  // Read, not mapped: a file that shrinks under a running job is an error
  // here, not a SIGBUS.
  const uint64_t bytes = n * static_cast<uint64_t>(elemSize);
  scratch.resize(static_cast<size_t>(bytes));
  uint64_t got = 0;
  const uint64_t at = dataOffset + begin * static_cast<uint64_t>(elemSize);
  while (got < bytes) {
    ssize_t r = ::pread(fd, scratch.data() + got, static_cast<size_t>(bytes - got),
                        static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return "cannot read the data file " + file + ": " + std::strerror(errno);
    if (r == 0) {
      struct stat st;
      std::string now = ::fstat(fd, &st) == 0
                            ? " (it has " + std::to_string(st.st_size) + " bytes now)"
                            : std::string();
      return "the data file " + file + " shrank while training" + now + ": tokens " +
             std::to_string(begin) + " to " + std::to_string(begin + n) +
             " are gone (was it rewritten during the run?)";
    }
    got += static_cast<uint64_t>(r);
  }
  char *out = static_cast<char *>(dst);
  for (uint64_t k = 0; k < n; ++k) {
    const unsigned char *p = scratch.data() + k * static_cast<uint64_t>(elemSize);
    int64_t v;
    switch (elemSize) {
    case 1:
      v = isSigned ? static_cast<int64_t>(static_cast<int8_t>(*p)) : static_cast<int64_t>(*p);
      break;
    case 2: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v = isSigned ? static_cast<int64_t>(static_cast<int16_t>(x)) : static_cast<int64_t>(x);
      break;
    }
    case 4: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      v = isSigned ? static_cast<int64_t>(static_cast<int32_t>(x)) : static_cast<int64_t>(x);
      break;
    }
    default:
      std::memcpy(&v, p, 8);
    }
    // A token id is an index into the vocabulary: a negative one would be
    // read as counting from its end (ONNX Gather's rule), and one too wide
    // for the step's input would wrap into range.
    const int64_t widest = dstSize >= 8 ? INT64_MAX : dstSize == 4 ? INT32_MAX
                                          : dstSize == 2 ? 0xffff : 0xff;
    if (v < 0 || v > widest)
      return "the data file " + file + " holds the token id " + std::to_string(v) +
             " at token " + std::to_string(begin + k) + (v < 0 ? "; a token id is never negative"
                                                               : "; the step's input holds at most " +
                                                                     std::to_string(widest));
    switch (dstSize) {
    case 1: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(out + k, &x, 1);
      break;
    }
    case 2: {
      uint16_t x = static_cast<uint16_t>(v);
      std::memcpy(out + 2 * k, &x, 2);
      break;
    }
    case 4: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(out + 4 * k, &x, 4);
      break;
    }
    default:
      std::memcpy(out + 8 * k, &v, 8);
    }
  }
  return "";
}

//===----------------------------------------------------------------------===//
// TokenBatchMaker
//===----------------------------------------------------------------------===//

std::string BatchMaker::skip(uint64_t index, uint64_t &rng) {
  std::vector<char> scratch(static_cast<size_t>(batchBytes()));
  return make(index, rng, scratch.data());
}

std::string TokenBatchMaker::skip(uint64_t, uint64_t &rng) {
  if (order == Order::Random)
    for (int64_t b = 0; b < B; ++b)
      (void)uniformBelow(rng, stream.size() - static_cast<uint64_t>(T));
  return "";
}

std::string TokenBatchMaker::make(uint64_t index, uint64_t &rng, char *buf) {
  uint64_t t = static_cast<uint64_t>(T);
  uint64_t nw = windows();
  for (int64_t b = 0; b < B; ++b) {
    uint64_t i;
    if (order == Order::Random)
      i = uniformBelow(rng, stream.size() - t);
    else
      i = ((index * static_cast<uint64_t>(B) + static_cast<uint64_t>(b)) %
           nw) *
          t;
    char *block = buf;
    for (const TokenColumn &c : columns) {
      uint64_t rowBytes = t * static_cast<uint64_t>(c.elemSize);
      char *row = block + static_cast<uint64_t>(b) * rowBytes;
      std::string err;
      if (c.role == TokenRole::Ones) {
        std::memset(row, 0, rowBytes);
        for (uint64_t k = 0; k < t; ++k)
          row[k * static_cast<uint64_t>(c.elemSize)] = 1; // little-endian 1
      } else {
        err = stream.copy(c.role == TokenRole::Next ? i + 1 : i, t, row, c.elemSize);
      }
      if (!err.empty())
        return err;
      block += static_cast<uint64_t>(B) * rowBytes;
    }
  }
  return "";
}

//===----------------------------------------------------------------------===//
// Prefetcher
//===----------------------------------------------------------------------===//

Prefetcher::Prefetcher(BatchMaker &maker, uint64_t index, uint64_t rng,
                       bool thread)
    : maker(maker), threaded(thread), pos(index), rngState(rng),
      prodIndex(index), prodRng(rng) {
  for (Slot &s : slots)
    s.data.resize(static_cast<size_t>(maker.batchBytes()));
  if (!threaded)
    return;
  // The producer must never take a terminating signal: the main thread holds
  // them back while it writes files atomically, which works only if no other
  // thread can receive them meanwhile. The new thread inherits this mask.
  tcc::io::SignalHold hold;
  worker = std::thread([this] { produce(); });
}

Prefetcher::~Prefetcher() {
  if (!threaded)
    return;
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  worker.join();
}

void Prefetcher::produce() {
  for (;;) {
    Slot *s;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !slots[tail].full; });
      if (stop)
        return;
      s = &slots[tail];
    }
    uint64_t r = prodRng;
    s->madeFrom = std::chrono::steady_clock::now();
    s->err = maker.make(prodIndex, r, s->data.data());
    s->madeTo = std::chrono::steady_clock::now();
    s->index = prodIndex;
    s->rngAfter = r;
    ++prodIndex;
    prodRng = r;
    bool failed = !s->err.empty();
    {
      std::lock_guard<std::mutex> lock(mu);
      s->full = true;
      tail = (tail + 1) % kSlots;
    }
    cv.notify_all();
    if (failed)
      return;
  }
}

Prefetcher::Slot *Prefetcher::acquire() {
  if (!threaded) {
    Slot *s = &slots[0];
    if (!s->err.empty())
      return s;
    uint64_t r = prodRng;
    s->madeFrom = std::chrono::steady_clock::now();
    s->err = maker.make(prodIndex, r, s->data.data());
    s->madeTo = std::chrono::steady_clock::now();
    s->index = prodIndex;
    s->rngAfter = r;
    ++prodIndex;
    prodRng = r;
    return s;
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return slots[head].full; });
  return &slots[head];
}

void Prefetcher::release(Slot *s) {
  if (!threaded)
    return;
  {
    std::lock_guard<std::mutex> lock(mu);
    s->full = false;
    head = (head + 1) % kSlots;
  }
  cv.notify_all();
}

} // namespace tcc::data
