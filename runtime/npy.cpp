//===- npy.cpp - reading and writing NumPy .npy files ---------------------===//
//
// The format (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor
// version byte, the header length (little-endian uint16 for 1.0, uint32 for
// 2.0 and 3.0), then the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }
// padded with spaces and ended by '\n'; the raw data follows.
//
//===----------------------------------------------------------------------===//

#include "runtime/npy.h"
#include "runtime/posix_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the tcc runtime supports little-endian hosts only"
#endif

namespace tcc::npy {

using io::errnoText;
using io::preadAll;

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
/// A header longer than this is not something numpy writes for a plain array.
constexpr uint64_t kMaxHeaderLen = 1u << 20;

/// A tiny parser for the header's dict literal.
class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : s(text) {}

  /// Returns "" on success, otherwise what is malformed.
  std::string parse(Header &h) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    skipWs();
    if (!eat('{'))
      return "the header is not a dict";
    skipWs();
    while (!peek('}')) {
      std::string key;
      if (!parseString(key))
        return "expected a quoted key";
      skipWs();
      if (!eat(':'))
        return "expected ':' after '" + key + "'";
      skipWs();
      if (key == "descr") {
        if (peek('\'') || peek('"')) {
          if (!parseString(h.descr))
            return "bad 'descr' string";
        } else {
          size_t begin = pos;
          if (!skipValue())
            return "bad 'descr' value";
          h.descr = s.substr(begin, pos - begin);
          h.structured = true;
        }
        haveDescr = true;
      } else if (key == "fortran_order") {
        if (eatWord("True"))
          h.fortranOrder = true;
        else if (eatWord("False"))
          h.fortranOrder = false;
        else
          return "'fortran_order' is not True or False";
        haveOrder = true;
      } else if (key == "shape") {
        std::string err = parseShape(h.shape);
        if (!err.empty())
          return err;
        haveShape = true;
      } else if (!skipValue()) {
        return "bad value for '" + key + "'";
      }
      skipWs();
      if (eat(',')) {
        skipWs();
        continue;
      }
      if (!peek('}'))
        return "expected ',' or '}'";
    }
    ++pos; // '}'
    skipWs();
    if (pos != s.size())
      return "unexpected text after the dict";
    if (!haveDescr)
      return "no 'descr' key";
    if (!haveOrder)
      return "no 'fortran_order' key";
    if (!haveShape)
      return "no 'shape' key";
    return "";
  }

private:
  const std::string &s;
  size_t pos = 0;

  bool peek(char c) const { return pos < s.size() && s[pos] == c; }
  bool eat(char c) {
    if (!peek(c))
      return false;
    ++pos;
    return true;
  }
  void skipWs() {
    while (pos < s.size() &&
           (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' ||
            s[pos] == '\r'))
      ++pos;
  }
  bool eatWord(const char *w) {
    size_t n = std::strlen(w);
    if (s.compare(pos, n, w) != 0)
      return false;
    pos += n;
    return true;
  }
  bool parseString(std::string &out) {
    if (pos >= s.size() || (s[pos] != '\'' && s[pos] != '"'))
      return false;
    char q = s[pos++];
    out.clear();
    while (pos < s.size() && s[pos] != q) {
      if (s[pos] == '\\' && pos + 1 < s.size())
        ++pos;
      out += s[pos++];
    }
    return eat(q);
  }
  /// Skips any value: a string, a word or number, or a bracketed group.
  bool skipValue() {
    if (peek('\'') || peek('"')) {
      std::string ignored;
      return parseString(ignored);
    }
    if (peek('(') || peek('[') || peek('{')) {
      int depth = 0;
      while (pos < s.size()) {
        char c = s[pos];
        if (c == '\'' || c == '"') {
          std::string ignored;
          if (!parseString(ignored))
            return false;
          continue;
        }
        if (c == '(' || c == '[' || c == '{')
          ++depth;
        else if (c == ')' || c == ']' || c == '}')
          --depth;
        ++pos;
        if (depth == 0)
          return true;
      }
      return false;
    }
    size_t begin = pos;
    while (pos < s.size() && s[pos] != ',' && s[pos] != '}' && s[pos] != ' ')
      ++pos;
    return pos != begin;
  }
  std::string parseShape(std::vector<int64_t> &shape) {
    shape.clear();
    if (!eat('('))
      return "'shape' is not a tuple";
    skipWs();
    while (!peek(')')) {
      if (pos >= s.size() || s[pos] < '0' || s[pos] > '9')
        return "'shape' holds something other than non-negative integers";
      int64_t v = 0;
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
        if (__builtin_mul_overflow(v, int64_t(10), &v) ||
            __builtin_add_overflow(v, int64_t(s[pos] - '0'), &v))
          return "a 'shape' dimension is too large";
        ++pos;
      }
      eat('L'); // Python 2 longs
      shape.push_back(v);
      skipWs();
      if (eat(',')) {
        skipWs();
        continue;
      }
      if (!peek(')'))
        return "expected ',' or ')' in 'shape'";
    }
    ++pos; // ')'
    return "";
  }
};

const char *const kInvalid = "is not a valid .npy file";

} // namespace

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

Reader::~Reader() {
  if (fd >= 0)
    ::close(fd);
}

std::string Reader::open(const std::string &path) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  hdr = Header();
  int f = io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) {
    if (errno == ENOENT)
      return "is missing";
    return "cannot be opened: " + errnoText(errno);
  }
  fd = f;
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return "cannot be read: " + errnoText(errno);
  if (!S_ISREG(st.st_mode))
    return "is not a regular file";
  uint64_t size = static_cast<uint64_t>(st.st_size);

  unsigned char pre[12];
  if (size < 10)
    return std::string(kInvalid) + " (truncated?)";
  int r = preadAll(fd, pre, 10, 0);
  if (r < 0)
    return "cannot be read: " + errnoText(errno);
  if (r > 0)
    return std::string(kInvalid) + " (truncated?)";
  if (std::memcmp(pre, kMagic, kMagicLen) != 0)
    return std::string(kInvalid) + " (no \\x93NUMPY magic at its start)";
  hdr.major = pre[6];
  hdr.minor = pre[7];
  uint64_t headerLen, lenFieldEnd;
  if (hdr.major == 1 && hdr.minor == 0) {
    headerLen = uint64_t(pre[8]) | uint64_t(pre[9]) << 8;
    lenFieldEnd = 10;
  } else if ((hdr.major == 2 || hdr.major == 3) && hdr.minor == 0) {
    if (size < 12)
      return std::string(kInvalid) + " (truncated?)";
    r = preadAll(fd, pre + 10, 2, 10);
    if (r != 0)
      return r < 0 ? "cannot be read: " + errnoText(errno)
                   : std::string(kInvalid) + " (truncated?)";
    headerLen = uint64_t(pre[8]) | uint64_t(pre[9]) << 8 |
                uint64_t(pre[10]) << 16 | uint64_t(pre[11]) << 24;
    lenFieldEnd = 12;
  } else {
    return "has .npy format version " + std::to_string(hdr.major) + "." +
           std::to_string(hdr.minor) +
           ", which is not supported (1.0, 2.0 and 3.0 are)";
  }
  if (headerLen > kMaxHeaderLen)
    return std::string(kInvalid) + " (header length " +
           std::to_string(headerLen) + " is implausibly large)";
  if (size < lenFieldEnd + headerLen)
    return std::string(kInvalid) + " (truncated?)";
  std::string text(static_cast<size_t>(headerLen), '\0');
  r = preadAll(fd, &text[0], headerLen, lenFieldEnd);
  if (r != 0)
    return r < 0 ? "cannot be read: " + errnoText(errno)
                 : std::string(kInvalid) + " (truncated?)";
  // 1.0 and 2.0 headers are latin-1, 3.0 UTF-8; the keys and values that
  // matter are ASCII either way.
  std::string err = HeaderParser(text).parse(hdr);
  if (!err.empty())
    return std::string(kInvalid) + " (malformed header: " + err + ")";
  hdr.dataOffset = lenFieldEnd + headerLen;
  hdr.dataBytes = size - hdr.dataOffset;
  return "";
}

std::string Reader::readData(void *dst, uint64_t bytes) {
  if (fd < 0)
    return "is not open";
  if (bytes > hdr.dataBytes)
    return std::string(kInvalid) + " (truncated?)";
  int r = preadAll(fd, dst, bytes, hdr.dataOffset);
  if (r < 0)
    return "cannot be read: " + errnoText(errno);
  if (r > 0)
    return std::string(kInvalid) + " (truncated?)";
  return "";
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

std::string shapeToString(const int64_t *shape, int rank) {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) {
    if (i)
      out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string makeHeader(const std::string &descr, const int64_t *shape,
                       int rank) {
  std::string dict = "{'descr': '" + descr +
                     "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < rank; ++i) {
    if (i)
      dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (rank == 1)
    dict += ",";
  dict += "), }";
  // Pad with spaces so that magic + version + length + dict + '\n' is a
  // multiple of 64 bytes.
  size_t prefix = 10;
  size_t total = prefix + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  bool v2 = padded - prefix > 0xffff;
  if (v2) {
    prefix = 12;
    total = prefix + dict.size() + 1;
    padded = (total + 63) / 64 * 64;
  }
  dict.append(padded - total, ' ');
  dict += '\n';
  uint64_t len = dict.size();
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (v2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  return out + dict;
}

std::string writeFile(const std::string &path, const std::string &descr,
                      const int64_t *shape, int rank, const void *data,
                      uint64_t bytes) {
  std::string header = makeHeader(descr, shape, rank);

  io::AtomicFile out;
  auto fail = [&](const char *what) {
    int err = errno;
    out.discard();
    return "cannot write " + path + (what[0] ? std::string(" (") + what + ")"
                                             : std::string()) +
           ": " + errnoText(err);
  };
  if (!out.createBeside(path))
    return fail("");
  const int fd = out.fd();
  if (!io::writeAll(fd, header.data(), header.size()) ||
      !io::writeAll(fd, data, bytes))
    return fail("");
  if (const char *what = out.commit(path, io::dirOf(path)))
    return fail(what);
  return "";
}

} // namespace tcc::npy
