//===- onnx_save.cpp - writing trained parameters back into an ONNX model -===//
//
// A minimal protobuf wire-format reader/writer (onnx/onnx.proto for the field
// numbers). A message is a sequence of fields, each a varint tag
// (field_number << 3 | wire_type) followed by a varint (wire type 0), 8 bytes
// (1), a varint length and that many bytes (2), or 4 bytes (5); wire types 3
// and 4 open and close a (deprecated) group.
//
// The rewrite descends only into the messages that can hold a TensorProto:
//   ModelProto.graph (7), .training_info (20), .functions (25);
//   GraphProto.node (1), .initializer (5), .sparse_initializer (15);
//   NodeProto.attribute (5); FunctionProto.node (7);
//   AttributeProto.t (5), .g (6), .tensors (10), .graphs (11),
//     .sparse_tensor (22), .sparse_tensors (23);
//   SparseTensorProto.values (1), .indices (2);
//   TrainingInfoProto.initialization (1), .algorithm (2).
// Every other field, and every message in which nothing changed, is copied
// byte for byte (unknown fields too, in their original order and encoding).
//
// The output is assembled as a list of pieces (slices of the input file and
// of buffers the rewrite owns), so that memory use stays near the input's
// size plus the converted parameters.
//
//===----------------------------------------------------------------------===//

#include "runtime/onnx_save.h"
#include "runtime/posix_io.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the tcc runtime supports little-endian hosts only"
#endif

namespace tcc::onnx {

using io::dirOf;
using io::errnoText;

namespace {

// TensorProto.DataType values this file cares about.
enum : int32_t {
  kFloat = 1,
  kString = 8,
  kFloat16 = 10,
  kDouble = 11,
  kBFloat16 = 16,
};

// TensorProto field numbers.
enum : uint32_t {
  kTDims = 1,
  kTDataType = 2,
  kTSegment = 3,
  kTFloatData = 4,
  kTInt32Data = 5,
  kTStringData = 6,
  kTInt64Data = 7,
  kTName = 8,
  kTRawData = 9,
  kTDoubleData = 10,
  kTUint64Data = 11,
  kTExternalData = 13,
  kTDataLocation = 14,
};

constexpr int64_t kLocationExternal = 1;
/// Protobuf refuses messages of 2 GiB or more.
constexpr uint64_t kMaxProtoBytes = static_cast<uint64_t>(INT_MAX);
// External data output: tensors of at least this many bytes go to the data
// file (onnx's own size_threshold), each at a multiple of kExternalAlign.
constexpr uint64_t kExternalMinBytes = 1024;
constexpr uint64_t kExternalAlign = 4096;
/// Nesting of messages (graphs in attributes in nodes in graphs ...) and of
/// groups beyond this is taken for garbage rather than risk the stack.
constexpr int kMaxDepth = 100;

/// Bytes per element of a fixed-width data type; 0 for STRING, UNDEFINED and
/// unknown types.
uint64_t elemSize(int32_t t) {
  switch (t) {
  case 2: case 3: case 9:           // UINT8, INT8, BOOL
    return 1;
  case 4: case 5: case 10: case 16: // UINT16, INT16, FLOAT16, BFLOAT16
    return 2;
  case 1: case 6: case 12:          // FLOAT, INT32, UINT32
    return 4;
  case 7: case 11: case 13: case 14: // INT64, DOUBLE, UINT64, COMPLEX64
    return 8;
  case 15:                          // COMPLEX128
    return 16;
  default:
    return 0;
  }
}

const char *typeName(int32_t t) {
  static const char *const names[] = {
      "UNDEFINED", "FLOAT",  "UINT8",  "INT8",      "UINT16",     "INT16",
      "INT32",     "INT64",  "STRING", "BOOL",      "FLOAT16",    "DOUBLE",
      "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (t >= 0 && t < static_cast<int32_t>(sizeof(names) / sizeof(names[0])))
    return names[t];
  return "an unknown data type";
}

bool isFloatType(int32_t t) {
  return t == kFloat || t == kDouble || t == kFloat16 || t == kBFloat16;
}

std::string dimsToString(const int64_t *d, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i)
      s += ", ";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

//===----------------------------------------------------------------------===//
// Wire format
//===----------------------------------------------------------------------===//

/// Reads a varint at `p` (at most 10 bytes, not past `end`), advancing `p`.
bool readVarint(const uint8_t *&p, const uint8_t *end, uint64_t &v) {
  v = 0;
  for (int i = 0; i < 10; ++i) {
    if (p == end)
      return false;
    uint8_t b = *p++;
    if (i == 9 && b > 1) // more than 64 bits
      return false;
    v |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
    if (!(b & 0x80))
      return true;
  }
  return false;
}

void appendVarint(std::string &s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

struct Field {
  uint32_t num = 0;
  int wire = 0;
  const uint8_t *begin = nullptr; // the tag
  const uint8_t *tagEnd = nullptr;
  const uint8_t *end = nullptr;   // one past the whole field
  uint64_t value = 0;             // wire types 0, 1, 5
  const uint8_t *data = nullptr;  // wire type 2: the payload
  size_t len = 0;
};

/// Iterates over the fields of one message.
class FieldReader {
public:
  FieldReader(const uint8_t *data, size_t len) : p(data), end(data + len) {}

  /// 1: `f` holds the next field; 0: the end of the message; -1: malformed.
  int next(Field &f) {
    if (p == end)
      return 0;
    f = Field();
    f.begin = p;
    if (!readTag(f.num, f.wire))
      return -1;
    f.tagEnd = p;
    switch (f.wire) {
    case 0:
      if (!readVarint(p, end, f.value))
        return -1;
      break;
    case 1:
    case 5: {
      size_t n = f.wire == 1 ? 8 : 4;
      if (static_cast<size_t>(end - p) < n)
        return -1;
      uint64_t v = 0;
      std::memcpy(&v, p, n);
      f.value = v;
      p += n;
      break;
    }
    case 2: {
      uint64_t n;
      if (!readVarint(p, end, n) || n > static_cast<uint64_t>(end - p))
        return -1;
      f.data = p;
      f.len = static_cast<size_t>(n);
      p += n;
      break;
    }
    case 3:
      if (!skipGroup(f.num))
        return -1;
      break;
    default: // an end-group without its start, or wire types 6 and 7
      return -1;
    }
    f.end = p;
    return 1;
  }

private:
  bool readTag(uint32_t &num, int &wire) {
    uint64_t tag;
    if (!readVarint(p, end, tag) || tag > 0xFFFFFFFFu)
      return false;
    num = static_cast<uint32_t>(tag >> 3);
    wire = static_cast<int>(tag & 7);
    return num != 0;
  }

  /// Skips the fields of a group opened by field `num`, through its end-group
  /// tag; nested groups included.
  bool skipGroup(uint32_t num) {
    uint32_t open[kMaxDepth];
    int depth = 0;
    open[depth++] = num;
    while (depth > 0) {
      uint32_t n;
      int w;
      if (!readTag(n, w))
        return false;
      uint64_t v;
      switch (w) {
      case 0:
        if (!readVarint(p, end, v))
          return false;
        break;
      case 1:
      case 5: {
        size_t k = w == 1 ? 8 : 4;
        if (static_cast<size_t>(end - p) < k)
          return false;
        p += k;
        break;
      }
      case 2:
        if (!readVarint(p, end, v) || v > static_cast<uint64_t>(end - p))
          return false;
        p += v;
        break;
      case 3:
        if (depth == kMaxDepth)
          return false;
        open[depth++] = n;
        break;
      case 4:
        if (open[depth - 1] != n)
          return false;
        --depth;
        break;
      default:
        return false;
      }
    }
    return true;
  }

  const uint8_t *p, *end;
};

//===----------------------------------------------------------------------===//
// 16-bit floats
//===----------------------------------------------------------------------===//

/// Rounds `v` to nearest even in a binary format with `expBits` exponent and
/// `manBits` stored mantissa bits (1 + expBits + manBits == 16).
uint16_t toHalfLike(double v, int expBits, int manBits) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  const uint32_t sign = (b >> 63) ? 0x8000u : 0u;
  const int e = static_cast<int>((b >> 52) & 0x7FF);
  const uint64_t m = b & ((uint64_t(1) << 52) - 1);
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t infBits = ((1u << expBits) - 1) << manBits;
  if (e == 0x7FF) {
    if (m == 0)
      return static_cast<uint16_t>(sign | infBits);
    // NaN: keep the top of the payload, set the quiet bit.
    return static_cast<uint16_t>(sign | infBits | (1u << (manBits - 1)) |
                                 static_cast<uint32_t>(m >> (52 - manBits)));
  }
  if (e == 0 && m == 0)
    return static_cast<uint16_t>(sign);
  // |v| = sig * 2^(E - 52), sig < 2^53.
  int E = e == 0 ? -1022 : e - 1023;
  uint64_t sig = e == 0 ? m : (m | (uint64_t(1) << 52));
  if (E > bias) // at least 2^(bias+1): beyond the largest finite value
    return static_cast<uint16_t>(sign | infBits);
  const int emin = 1 - bias;
  int shift = 52 - manBits;
  if (E < emin)
    shift += emin - E; // a subnormal result
  if (shift >= 64)     // below half the smallest subnormal
    return static_cast<uint16_t>(sign);
  uint64_t q = sig >> shift;
  const uint64_t rem = sig & ((uint64_t(1) << shift) - 1);
  const uint64_t half = uint64_t(1) << (shift - 1);
  if (rem > half || (rem == half && (q & 1)))
    ++q;
  uint32_t bits;
  if (E < emin)
    bits = static_cast<uint32_t>(q); // may round up to the smallest normal
  else // q includes the implicit bit; a carry out of the mantissa bumps E
    bits = (static_cast<uint32_t>(E + bias) << manBits) +
           static_cast<uint32_t>(q - (uint64_t(1) << manBits));
  if (bits >= infBits)
    bits = infBits;
  return static_cast<uint16_t>(sign | bits);
}

//===----------------------------------------------------------------------===//
// Reading a model
//===----------------------------------------------------------------------===//

/// Reads a whole file. Returns "" on success, otherwise why not.
std::string readFile(const std::string &path, std::string &out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errnoText(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoText(err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file";
  }
  out.clear();
  if (st.st_size > 0)
    out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int err = errno;
      ::close(fd);
      return errnoText(err);
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return "";
}

/// The fields of a TensorProto this file looks at.
struct TensorFields {
  std::string name;
  bool haveName = false;
  std::vector<int64_t> dims;
  int32_t dataType = 0;
  int64_t dataLocation = 0;
  const uint8_t *raw = nullptr;
  size_t rawLen = 0;
  bool haveRaw = false;
  std::vector<std::pair<std::string, std::string>> external;
};

bool parseStringEntry(const uint8_t *data, size_t len, std::string &key,
                      std::string &value) {
  FieldReader r(data, len);
  Field f;
  int rc;
  while ((rc = r.next(f)) > 0) {
    if (f.wire != 2)
      continue;
    if (f.num == 1)
      key.assign(reinterpret_cast<const char *>(f.data), f.len);
    else if (f.num == 2)
      value.assign(reinterpret_cast<const char *>(f.data), f.len);
  }
  return rc == 0;
}

/// Parses a TensorProto (later occurrences of a singular field win, as in
/// protobuf; a field of an unexpected wire type counts as unknown). Returns
/// false when malformed.
bool parseTensor(const uint8_t *data, size_t len, TensorFields &t) {
  FieldReader r(data, len);
  Field f;
  int rc;
  while ((rc = r.next(f)) > 0) {
    switch (f.num) {
    case kTDims:
      if (f.wire == 0) {
        t.dims.push_back(static_cast<int64_t>(f.value));
      } else if (f.wire == 2) { // packed
        const uint8_t *p = f.data, *e = f.data + f.len;
        while (p != e) {
          uint64_t v;
          if (!readVarint(p, e, v))
            return false;
          t.dims.push_back(static_cast<int64_t>(v));
        }
      }
      break;
    case kTDataType:
      if (f.wire == 0)
        t.dataType = static_cast<int32_t>(static_cast<uint32_t>(f.value));
      break;
    case kTName:
      if (f.wire == 2) {
        t.name.assign(reinterpret_cast<const char *>(f.data), f.len);
        t.haveName = true;
      }
      break;
    case kTRawData:
      if (f.wire == 2) {
        t.raw = f.data;
        t.rawLen = f.len;
        t.haveRaw = true;
      }
      break;
    case kTExternalData:
      if (f.wire == 2) {
        std::string k, v;
        if (!parseStringEntry(f.data, f.len, k, v))
          return false;
        t.external.emplace_back(std::move(k), std::move(v));
      }
      break;
    case kTDataLocation:
      if (f.wire == 0)
        t.dataLocation = static_cast<int64_t>(f.value);
      break;
    default:
      break;
    }
  }
  return rc == 0;
}

/// The number of elements of `dims`; false if a dim is negative or the
/// product is absurd.
bool numElements(const std::vector<int64_t> &dims, uint64_t &n) {
  n = 1;
  for (int64_t d : dims) {
    if (d < 0)
      return false;
    if (d != 0 && n > (uint64_t(1) << 62) / static_cast<uint64_t>(d))
      return false;
    n *= static_cast<uint64_t>(d);
  }
  return true;
}

bool parseDecimal(const std::string &s, uint64_t &v) {
  if (s.empty() || s.size() > 18)
    return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

/// Reads the external data of `t` (location relative to `modelDir`). Returns
/// "" on success, otherwise why not (without the tensor's name).
std::string readExternal(const TensorFields &t, const std::string &modelDir,
                         std::string &out) {
  std::string location;
  uint64_t offset = 0, length = 0;
  bool haveLocation = false, haveLength = false;
  for (const auto &kv : t.external) {
    if (kv.first == "location") {
      location = kv.second;
      haveLocation = true;
    } else if (kv.first == "offset") {
      if (!parseDecimal(kv.second, offset))
        return "its external data has a bad offset '" + kv.second + "'";
    } else if (kv.first == "length") {
      if (!parseDecimal(kv.second, length))
        return "its external data has a bad length '" + kv.second + "'";
      haveLength = true;
    }
  }
  if (!haveLocation || location.empty())
    return "its external data has no location";
  if (location[0] == '/' || location.find('\0') != std::string::npos)
    return "its external data location '" + location +
           "' is not a relative path";
  for (size_t i = 0; i <= location.size();) {
    size_t j = location.find('/', i);
    if (j == std::string::npos)
      j = location.size();
    if (location.compare(i, j - i, "..") == 0 && j - i == 2)
      return "its external data location '" + location +
             "' leaves the model's directory";
    i = j + 1;
  }
  std::string path = modelDir + "/" + location;
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return "cannot read its external data " + path + ": " + errnoText(errno);
  auto fail = [&](const std::string &why) {
    ::close(fd);
    return "cannot read its external data " + path + ": " + why;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fail(errnoText(errno));
  if (!S_ISREG(st.st_mode))
    return fail("not a regular file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset > size)
    return fail("the offset is past the end of the file");
  if (!haveLength)
    length = size - offset;
  if (length > size - offset)
    return fail("offset + length is past the end of the file");
  if (length > kMaxProtoBytes)
    return fail("the tensor does not fit in a protobuf (2 GiB)");
  out.resize(static_cast<size_t>(length));
  int r = io::preadAll(fd, &out[0], length, offset);
  if (r < 0)
    return fail(errnoText(errno));
  if (r > 0)
    return fail("the file is shorter than it was");
  ::close(fd);
  return "";
}

//===----------------------------------------------------------------------===//
// Output
//===----------------------------------------------------------------------===//

struct Piece {
  const char *p;
  size_t n;
};

/// A byte sequence as a list of slices of memory that outlives it.
struct Rope {
  std::vector<Piece> pieces;
  uint64_t size = 0;

  void add(const void *data, size_t n) {
    if (n == 0)
      return;
    const char *p = static_cast<const char *>(data);
    if (!pieces.empty() && pieces.back().p + pieces.back().n == p)
      pieces.back().n += n;
    else
      pieces.push_back({p, n});
    size += n;
  }
  void add(const uint8_t *b, const uint8_t *e) {
    add(b, static_cast<size_t>(e - b));
  }
  void append(const Rope &o) {
    for (const Piece &pc : o.pieces)
      add(pc.p, pc.n);
  }
};

/// Writes `rope` into a unique temporary beside `path` (`file`) and fsyncs
/// it, without renaming it into place: "" or why not (the temporary then
/// discarded).
std::string stageRope(const std::string &path, const Rope &rope, io::AtomicFile &file);

/// Writes `rope` to `path` atomically (via a unique temporary beside it).
/// Returns "" on success.
std::string writeRope(const std::string &path, const Rope &rope) {
  io::AtomicFile file;
  std::string why = stageRope(path, rope, file);
  if (!why.empty())
    return why;
  if (const char *what = file.commit(path, dirOf(path))) {
    int err = errno;
    file.discard();
    return "cannot write " + path + " (" + what + "): " + errnoText(err);
  }
  return "";
}

std::string stageRope(const std::string &path, const Rope &rope, io::AtomicFile &file) {
  if (!file.createBeside(path))
    return "cannot write " + path + " (creating its temporary): " + errnoText(errno);
  int fd = file.fd();
  auto fail = [&](const char *what) {
    int err = errno;
    file.discard();
    return "cannot write " + path + " (" + what + "): " + errnoText(err);
  };
  // Coalesce the many small pieces (tags, lengths) into larger writes.
  std::string buf;
  const size_t kBuf = size_t(1) << 20;
  buf.reserve(kBuf);
  for (const Piece &pc : rope.pieces) {
    if (buf.size() + pc.n > kBuf) {
      if (!io::writeAll(fd, buf.data(), buf.size()))
        return fail("write");
      buf.clear();
    }
    if (pc.n >= kBuf) {
      if (!io::writeAll(fd, pc.p, pc.n))
        return fail("write");
    } else {
      buf.append(pc.p, pc.n);
    }
  }
  if (!io::writeAll(fd, buf.data(), buf.size()))
    return fail("write");
  if (::fsync(fd) != 0)
    return fail("fsync");
  return "";
}

//===----------------------------------------------------------------------===//
// Conversion of a parameter
//===----------------------------------------------------------------------===//

double loadElem(const uint8_t *p, int32_t t) {
  switch (t) {
  case kFloat: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case kDouble: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case kFloat16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fromFloat16(h);
  }
  default: { // kBFloat16
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fromBFloat16(h);
  }
  }
}

void storeElem(char *p, int32_t t, double v) {
  switch (t) {
  case kFloat: {
    // Round to nearest even (the IEEE conversion); out-of-range values are
    // rounded here, since converting them is undefined behaviour in C++.
    float f;
    if (std::fabs(v) >= 0x1.ffffffp127) // halfway from FLT_MAX to 2^128
      f = std::copysign(std::numeric_limits<float>::infinity(),
                        static_cast<float>(std::signbit(v) ? -1 : 1));
    else if (std::fabs(v) > std::numeric_limits<float>::max())
      f = std::copysign(std::numeric_limits<float>::max(),
                        static_cast<float>(std::signbit(v) ? -1 : 1));
    else
      f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
    break;
  }
  case kDouble:
    std::memcpy(p, &v, 8);
    break;
  case kFloat16: {
    uint16_t h = toFloat16(v);
    std::memcpy(p, &h, 2);
    break;
  }
  default: { // kBFloat16
    uint16_t h = toBFloat16(v);
    std::memcpy(p, &h, 2);
    break;
  }
  }
}

//===----------------------------------------------------------------------===//
// The rewrite
//===----------------------------------------------------------------------===//

enum class Kind { Model, Graph, Node, Attribute, Tensor, SparseTensor,
                  TrainingInfo, Function };

class Saver {
public:
  Saver(const std::string &path, const tcc_step_info *stepInfo,
        const uint8_t *arenaBase)
      : modelPath(path), modelDir(dirOf(path)), info(stepInfo),
        arena(arenaBase) {}

  std::string run(const std::string &bytes, Rope &out);

  /// The output's path: its tensors' data goes to `basename(out) + ".data"`
  /// beside it when the model would not fit in a protobuf with them inline
  /// (more than `inlineLimit` bytes).
  void setOutput(const std::string &outPath, uint64_t limit) {
    size_t slash = outPath.find_last_of('/');
    dataName = (slash == std::string::npos ? outPath : outPath.substr(slash + 1)) + ".data";
    inlineLimit = limit;
  }
  /// Whether run() put the tensors' data in `data` (written to
  /// outPath + ".data").
  bool external() const { return externalData; }
  const Rope &dataRope() const { return dataOut; }

private:
  bool rewrite(Kind kind, const uint8_t *data, size_t len, bool mainGraph,
               int depth, Rope &out, bool &changed);
  bool rewriteTensor(const uint8_t *data, size_t len, bool isInitializer,
                     Rope &out, bool &changed);
  bool paramData(int idx, const TensorFields &t, std::string &out);

  const char *keep(std::string s) {
    store.push_back(std::move(s));
    return store.back().data();
  }
  bool malformed(const char *where) {
    err = modelPath + " is not a valid ONNX model (malformed protobuf in " +
          where + "; truncated or corrupt?)";
    return false;
  }

  std::string modelPath, modelDir;
  const tcc_step_info *info;
  const uint8_t *arena;
  std::unordered_map<std::string, int> paramIndex;
  std::vector<int> found;
  // External data (a model over inlineLimit bytes).
  std::string dataName = "model.onnx.data";
  uint64_t inlineLimit = kMaxProtoBytes;
  bool externalData = false;
  Rope dataOut;
  std::deque<std::string> store; // element addresses are stable
  std::string err;
};

const char *kindName(Kind k) {
  switch (k) {
  case Kind::Model: return "ModelProto";
  case Kind::Graph: return "GraphProto";
  case Kind::Node: return "NodeProto";
  case Kind::Attribute: return "AttributeProto";
  case Kind::Tensor: return "TensorProto";
  case Kind::SparseTensor: return "SparseTensorProto";
  case Kind::TrainingInfo: return "TrainingInfoProto";
  case Kind::Function: return "FunctionProto";
  }
  return "?";
}

/// The kind of message field `num` of a `kind` holds, if the rewrite
/// descends into it.
bool childKind(Kind kind, uint32_t num, Kind &child) {
  switch (kind) {
  case Kind::Model:
    if (num == 7) { child = Kind::Graph; return true; }
    if (num == 20) { child = Kind::TrainingInfo; return true; }
    if (num == 25) { child = Kind::Function; return true; }
    return false;
  case Kind::Graph:
    if (num == 1) { child = Kind::Node; return true; }
    if (num == 5) { child = Kind::Tensor; return true; }
    if (num == 15) { child = Kind::SparseTensor; return true; }
    return false;
  case Kind::Node:
    if (num == 5) { child = Kind::Attribute; return true; }
    return false;
  case Kind::Function:
    if (num == 7) { child = Kind::Node; return true; }
    return false;
  case Kind::Attribute:
    if (num == 5 || num == 10) { child = Kind::Tensor; return true; }
    if (num == 6 || num == 11) { child = Kind::Graph; return true; }
    if (num == 22 || num == 23) { child = Kind::SparseTensor; return true; }
    return false;
  case Kind::SparseTensor:
    if (num == 1 || num == 2) { child = Kind::Tensor; return true; }
    return false;
  case Kind::TrainingInfo:
    if (num == 1 || num == 2) { child = Kind::Graph; return true; }
    return false;
  case Kind::Tensor:
    return false;
  }
  return false;
}

bool Saver::rewrite(Kind kind, const uint8_t *data, size_t len,
                    bool mainGraph, int depth, Rope &out, bool &changed) {
  if (depth > kMaxDepth)
    return malformed("a message nested too deeply");
  changed = false;
  FieldReader r(data, len);
  Field f;
  int rc;
  while ((rc = r.next(f)) > 0) {
    Kind child;
    if (f.wire != 2 || !childKind(kind, f.num, child)) {
      out.add(f.begin, f.end);
      continue;
    }
    Rope sub;
    bool subChanged = false;
    bool ok;
    if (child == Kind::Tensor)
      ok = rewriteTensor(f.data, f.len,
                         kind == Kind::Graph && mainGraph && f.num == 5, sub,
                         subChanged);
    else
      ok = rewrite(child, f.data, f.len,
                   kind == Kind::Model && f.num == 7, depth + 1, sub,
                   subChanged);
    if (!ok)
      return false;
    if (!subChanged) {
      out.add(f.begin, f.end);
      continue;
    }
    changed = true;
    std::string hdr(reinterpret_cast<const char *>(f.begin),
                    static_cast<size_t>(f.tagEnd - f.begin));
    appendVarint(hdr, sub.size);
    const char *h = keep(std::move(hdr));
    out.add(h, store.back().size());
    out.append(sub);
  }
  if (rc < 0)
    return malformed(kindName(kind));
  return true;
}

bool Saver::rewriteTensor(const uint8_t *data, size_t len, bool isInitializer,
                          Rope &out, bool &changed) {
  changed = false;
  TensorFields t;
  if (!parseTensor(data, len, t))
    return malformed("TensorProto");
  int idx = -1;
  if (isInitializer && t.haveName) {
    auto it = paramIndex.find(t.name);
    if (it != paramIndex.end())
      idx = it->second;
  }
  std::string values;
  if (idx >= 0) {
    if (++found[idx] > 1) {
      err = "parameter '" + t.name +
            "' is the name of more than one initializer in " + modelPath;
      return false;
    }
    if (!paramData(idx, t, values))
      return false;
  } else if (t.dataLocation == kLocationExternal) {
    // Not a parameter, but its data lives in a file next to the model: the
    // output holds everything inline, so that it stands alone.
    std::string why = readExternal(t, modelDir, values);
    if (!why.empty()) {
      err = "tensor '" + t.name + "' of " + modelPath + ": " + why;
      return false;
    }
  } else {
    return true; // unchanged
  }

  // Keep every field but the ones that held the data (or said where it was),
  // then add raw_data.
  FieldReader r(data, len);
  Field f;
  while (r.next(f) > 0) {
    switch (f.num) {
    case kTRawData:
    case kTExternalData:
    case kTDataLocation:
      continue;
    case kTSegment:
    case kTFloatData:
    case kTInt32Data:
    case kTStringData:
    case kTInt64Data:
    case kTDoubleData:
    case kTUint64Data:
      if (idx >= 0)
        continue;
      break;
    default:
      break;
    }
    out.add(f.begin, f.end);
  }
  if (externalData && values.size() >= kExternalMinBytes) {
    // The data at a page-aligned offset of the data file (so that a reader
    // may map it), and the TensorProto says where: location, offset, length
    // and data_location EXTERNAL, as onnx's external data format has them.
    static const std::string kZeros(kExternalAlign, '\0');
    if (uint64_t pad = (kExternalAlign - dataOut.size % kExternalAlign) % kExternalAlign)
      dataOut.add(kZeros.data(), static_cast<size_t>(pad));
    const uint64_t offset = dataOut.size, length = values.size();
    const char *v = keep(std::move(values));
    dataOut.add(v, static_cast<size_t>(length));
    const std::pair<const char *, std::string> where[] = {
        {"location", dataName}, {"offset", std::to_string(offset)},
        {"length", std::to_string(length)}};
    std::string fields;
    for (const auto &[key, value] : where) {
      const size_t keyLen = std::strlen(key);
      std::string entry;
      appendVarint(entry, (1 << 3) | 2);
      appendVarint(entry, keyLen);
      entry.append(key, keyLen);
      appendVarint(entry, (2 << 3) | 2);
      appendVarint(entry, value.size());
      entry += value;
      appendVarint(fields, (kTExternalData << 3) | 2);
      appendVarint(fields, entry.size());
      fields += entry;
    }
    appendVarint(fields, (kTDataLocation << 3) | 0);
    appendVarint(fields, kLocationExternal);
    const char *h = keep(std::move(fields));
    out.add(h, store.back().size());
    changed = true;
    return true;
  }
  std::string hdr;
  appendVarint(hdr, (kTRawData << 3) | 2);
  appendVarint(hdr, values.size());
  const char *h = keep(std::move(hdr));
  out.add(h, store.back().size());
  const char *v = keep(std::move(values));
  out.add(v, store.back().size());
  changed = true;
  return true;
}

/// The values of parameter `idx` in the data type of its initializer `t`.
bool Saver::paramData(int idx, const TensorFields &t, std::string &out) {
  const tcc_tensor_desc &d = info->params[idx];
  const std::string name = t.name;
  if (d.rank < 0 || (d.rank > 0 && !d.dims) ||
      static_cast<size_t>(d.rank) != t.dims.size() ||
      (d.rank > 0 &&
       std::memcmp(d.dims, t.dims.data(), t.dims.size() * sizeof(int64_t)))) {
    err = "parameter '" + name + "' has dims " +
          (d.rank >= 0 && (d.rank == 0 || d.dims)
               ? dimsToString(d.dims, static_cast<size_t>(d.rank))
               : std::string("(invalid)")) +
          " in the step but " + dimsToString(t.dims.data(), t.dims.size()) +
          " in " + modelPath;
    return false;
  }
  uint64_t n;
  if (!numElements(t.dims, n)) {
    err = "parameter '" + name + "' has invalid dims " +
          dimsToString(t.dims.data(), t.dims.size()) + " in " + modelPath;
    return false;
  }
  const int32_t src = d.dtype, dst = t.dataType;
  const uint64_t srcSize = elemSize(src), dstSize = elemSize(dst);
  if (srcSize == 0 || d.bytes != n * srcSize) {
    err = "parameter '" + name + "': its descriptor (" + typeName(src) + ", " +
          std::to_string(d.bytes) + " bytes) does not describe " +
          std::to_string(n) + " elements";
    return false;
  }
  // The runtime's view puts host-buffer tensors after the arena.
  const uint64_t span = info->arena_bytes + (d.location == TCC_LOCATION_HOST ? info->host_bytes : 0);
  if (d.offset > span || d.bytes > span - d.offset) {
    err = "parameter '" + name + "' lies outside the arena";
    return false;
  }
  if (dstSize == 0 ||
      (src != dst && !(isFloatType(src) && isFloatType(dst)))) {
    err = "parameter '" + name + "' is " + typeName(dst) + " in " + modelPath +
          " and cannot be written from " + typeName(src) + " values";
    return false;
  }
  const uint8_t *p = arena + d.offset;
  if (src == dst) {
    out.assign(reinterpret_cast<const char *>(p), static_cast<size_t>(d.bytes));
    return true;
  }
  out.resize(static_cast<size_t>(n * dstSize));
  for (uint64_t i = 0; i < n; ++i)
    storeElem(&out[i * dstSize], dst, loadElem(p + i * srcSize, src));
  return true;
}

/// Calls `fn` on each initializer of the model's main graph
/// (ModelProto.graph.initializer): its parsed fields and its encoded bytes.
/// Returns "", fn's first non-empty message, or `malformed` when the
/// protobuf is.
std::string forEachInitializer(
    const std::string &bytes, const std::string &malformed,
    const std::function<std::string(const TensorFields &, const uint8_t *, size_t)> &fn) {
  FieldReader model(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  Field mf;
  int rc;
  while ((rc = model.next(mf)) > 0) {
    if (mf.num != 7 || mf.wire != 2)
      continue;
    FieldReader graph(mf.data, mf.len);
    Field gf;
    int grc;
    while ((grc = graph.next(gf)) > 0) {
      if (gf.num != 5 || gf.wire != 2)
        continue;
      TensorFields t;
      if (!parseTensor(gf.data, gf.len, t))
        return malformed;
      if (std::string why = fn(t, gf.data, gf.len); !why.empty())
        return why;
    }
    if (grc < 0)
      return malformed;
  }
  return rc < 0 ? malformed : "";
}

/// The parameters a model declares trainable (its tcc.trainable metadata,
/// as python/tcc_export.py records it) and the names of its main graph's
/// initializers. False when malformed.
bool declaredParameters(const std::string &bytes, std::vector<std::string> &trainable,
                        std::unordered_set<std::string> &initializers) {
  FieldReader model(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  Field mf;
  int rc;
  while ((rc = model.next(mf)) > 0) {
    if (mf.num != 14 || mf.wire != 2) // metadata_props
      continue;
    std::string key, value;
    if (!parseStringEntry(mf.data, mf.len, key, value))
      return false;
    if (key != "tcc.trainable")
      continue;
    for (size_t at = 0; at <= value.size();) {
      size_t comma = std::min(value.find(',', at), value.size());
      if (comma > at)
        trainable.push_back(value.substr(at, comma - at));
      at = comma + 1;
    }
  }
  if (rc < 0)
    return false;
  return forEachInitializer(bytes, "malformed",
                            [&](const TensorFields &t, const uint8_t *, size_t) {
                              initializers.insert(t.name);
                              return std::string();
                            })
      .empty();
}

bool samePath(const std::string &a, const std::string &b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  if (::realpath(a.c_str(), ra) && ::realpath(b.c_str(), rb))
    return std::strcmp(ra, rb) == 0;
  return a == b;
}

/// Saving into a model other than the step's own (an inference export, by
/// `tcc-run --model`): every parameter that model declares must be one the
/// step trained, or one the step's own model held fixed too; otherwise
/// --save would write it at its initial value, with exit 0.
std::string checkDeclaredParameters(
    const std::string &bytes, const std::string &modelPath,
    const tcc_step_info *info,
    const std::unordered_map<std::string, int> &paramIndex) {
  if (!info->model_path || !*info->model_path ||
      samePath(modelPath, info->model_path))
    return "";
  std::vector<std::string> declared;
  std::unordered_set<std::string> initializers;
  if (!declaredParameters(bytes, declared, initializers))
    return modelPath + " is not a valid ONNX model (malformed protobuf)";
  std::vector<std::string> untrained;
  for (const std::string &name : declared)
    if (!paramIndex.count(name) && initializers.count(name))
      untrained.push_back(name);
  if (untrained.empty())
    return "";
  // A parameter the step's own model holds but the step does not train
  // (one that does not reach the loss) stays as exported there too.
  std::string own;
  std::vector<std::string> ownDeclared;
  std::unordered_set<std::string> ownInitializers;
  std::string ownWhy = readFile(info->model_path, own);
  if (ownWhy.empty() && !declaredParameters(own, ownDeclared, ownInitializers))
    ownWhy = "not a valid ONNX model";
  if (!ownWhy.empty())
    return "cannot check " + modelPath + " against the model the step was compiled from, " +
           info->model_path + ": " + ownWhy;
  std::vector<std::string> left;
  for (std::string &name : untrained)
    if (!ownInitializers.count(name))
      left.push_back(std::move(name));
  untrained.swap(left);
  if (untrained.empty())
    return "";
  return "'" + untrained.front() + "' is a trainable parameter of " +
         modelPath + " (its tcc.trainable)" +
         (untrained.size() > 1
              ? " and so are " + std::to_string(untrained.size() - 1) +
                    " more tensors"
              : std::string()) +
         " that the step, compiled from " + info->model_path +
         ", does not hold: --save would write them untrained. Export the "
         "model for --model from the same module, under the same names "
         "(python/tcc_export.py export_inference(..., training_model=" +
         info->model_path + "))";
}

std::string Saver::run(const std::string &bytes, Rope &out) {
  if (!info)
    return "no step info";
  if (info->num_params < 0 || (info->num_params > 0 && !info->params))
    return "the step info has no parameter table";
  if (info->num_params > 0 && !arena)
    return "no arena";
  found.assign(static_cast<size_t>(info->num_params), 0);
  for (int i = 0; i < info->num_params; ++i) {
    const char *nm = info->params[i].name;
    if (!nm)
      return "parameter " + std::to_string(i) + " has no name";
    if (!paramIndex.emplace(nm, i).second)
      return std::string("parameter '") + nm + "' is listed twice in the step";
  }
  std::string why = checkDeclaredParameters(bytes, modelPath, info, paramIndex);
  if (!why.empty())
    return why;
  bool changed;
  if (!rewrite(Kind::Model, reinterpret_cast<const uint8_t *>(bytes.data()),
               bytes.size(), false, 0, out, changed))
    return err;
  if (out.size > inlineLimit) {
    // Too large for one protobuf with the data inline: again, with every
    // tensor the rewrite writes (the parameters, and what the model held
    // externally) in the data file beside the output.
    out = Rope();
    store.clear();
    externalData = true;
    dataOut = Rope();
    found.assign(static_cast<size_t>(info->num_params), 0);
    if (!rewrite(Kind::Model, reinterpret_cast<const uint8_t *>(bytes.data()),
                 bytes.size(), false, 0, out, changed))
      return err;
  }
  int missing = 0;
  std::string first;
  for (int i = 0; i < info->num_params; ++i)
    if (found[i] == 0 && missing++ == 0)
      first = info->params[i].name;
  if (missing)
    return "parameter '" + first + "' is not an initializer of " + modelPath +
           (missing > 1 ? " (nor are " + std::to_string(missing - 1) +
                              " more parameters)"
                        : std::string());
  if (out.size > kMaxProtoBytes)
    return "the model would be " + std::to_string(out.size) +
           " bytes even with its parameters' data in " + dataName +
           ", beyond protobuf's 2 GiB limit";
  return "";
}

/// Decodes the data of an inline tensor into raw_data's layout.
bool decodeTensorData(const uint8_t *data, size_t len, int32_t dataType,
                      std::string &out) {
  const uint64_t esz = elemSize(dataType);
  FieldReader r(data, len);
  Field f;
  int rc;
  auto putInt = [&](uint64_t v, uint64_t width) {
    char b[8];
    std::memcpy(b, &v, 8);
    out.append(b, static_cast<size_t>(width));
  };
  while ((rc = r.next(f)) > 0) {
    uint64_t width = 0;
    bool fixed = false;
    switch (f.num) {
    case kTFloatData: width = 4; fixed = true; break;
    case kTDoubleData: width = 8; fixed = true; break;
    case kTInt32Data: width = esz && esz <= 4 ? esz : 4; break;
    case kTInt64Data: width = 8; break;
    case kTUint64Data: width = esz == 4 ? 4 : 8; break;
    default: continue;
    }
    if (fixed) {
      if (f.wire == 2) {
        if (f.len % width)
          return false;
        out.append(reinterpret_cast<const char *>(f.data), f.len);
      } else if ((f.wire == 5 && width == 4) || (f.wire == 1 && width == 8)) {
        putInt(f.value, width);
      }
    } else if (f.wire == 0) {
      putInt(f.value, width);
    } else if (f.wire == 2) {
      const uint8_t *p = f.data, *e = f.data + f.len;
      while (p != e) {
        uint64_t v;
        if (!readVarint(p, e, v))
          return false;
        putInt(v, width);
      }
    }
  }
  return rc == 0;
}

} // namespace

uint16_t toFloat16(double v) { return toHalfLike(v, 5, 10); }
uint16_t toBFloat16(double v) { return toHalfLike(v, 8, 7); }

double fromFloat16(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v;
  if (e == 0)
    v = std::ldexp(static_cast<double>(m), -24);
  else if (e == 31)
    v = m ? std::numeric_limits<double>::quiet_NaN()
          : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(static_cast<double>(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

double fromBFloat16(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::string listInitializers(const std::string &modelPath,
                             std::vector<Initializer> &out) {
  out.clear();
  std::string bytes;
  std::string why = readFile(modelPath, bytes);
  if (!why.empty())
    return "cannot read " + modelPath + ": " + why;
  const std::string bad =
      modelPath + " is not a valid ONNX model (malformed protobuf)";
  const std::string dir = dirOf(modelPath);
  return forEachInitializer(
      bytes, bad, [&](const TensorFields &t, const uint8_t *data, size_t len) {
        Initializer init;
        init.name = t.name;
        init.dataType = t.dataType;
        init.dims = t.dims;
        init.external = t.dataLocation == kLocationExternal;
        if (init.external) {
          std::string why = readExternal(t, dir, init.data);
          if (!why.empty())
            return "tensor '" + t.name + "' of " + modelPath + ": " + why;
          init.haveData = true;
        } else if (t.haveRaw) {
          init.data.assign(reinterpret_cast<const char *>(t.raw), t.rawLen);
          init.haveData = true;
        } else if (t.dataType != kString) {
          if (!decodeTensorData(data, len, t.dataType, init.data))
            return bad;
          init.haveData = true;
        }
        out.push_back(std::move(init));
        return std::string();
      });
}

std::string checkSaveModel(const std::string &modelPath,
                           const tcc_step_info *info) {
  if (!info->model_path || !*info->model_path || samePath(modelPath, info->model_path))
    return "";
  std::string bytes;
  std::string why = readFile(modelPath, bytes);
  if (!why.empty())
    return "cannot read " + modelPath + ": " + why;
  std::unordered_map<std::string, int> params;
  for (int i = 0; i < info->num_params; ++i)
    if (info->params && info->params[i].name)
      params.emplace(info->params[i].name, i);
  return checkDeclaredParameters(bytes, modelPath, info, params);
}

} // namespace tcc::onnx

int tcc_save_onnx(const char *model_path, const char *out_path,
                  const tcc_step_info *info, const void *arena, char *err,
                  size_t err_len) {
  return tcc::onnx::saveOnnx(model_path, out_path, info, arena, err, err_len,
                             tcc::onnx::kMaxProtoBytes);
}

int tcc::onnx::saveOnnx(const char *model_path, const char *out_path,
                        const tcc_step_info *info, const void *arena, char *err,
                        size_t err_len, uint64_t inline_limit) {
  auto finish = [&](const std::string &msg) {
    if (err && err_len > 0)
      std::snprintf(err, err_len, "%s", msg.c_str());
    return msg.empty() ? 0 : 1;
  };
  if (!model_path || !*model_path)
    return finish("no model path");
  if (!out_path || !*out_path)
    return finish("no output path");
  std::string bytes;
  std::string why = tcc::onnx::readFile(model_path, bytes);
  if (!why.empty())
    return finish(std::string("cannot read ") + model_path + ": " + why);
  tcc::onnx::Saver saver(model_path, info,
                         static_cast<const uint8_t *>(arena));
  saver.setOutput(out_path, inline_limit);
  tcc::onnx::Rope out;
  why = saver.run(bytes, out);
  if (!why.empty())
    return finish(why);
  if (!saver.external())
    return finish(tcc::onnx::writeRope(out_path, out));
  // Both files whole on disk before either is renamed into place, the data
  // first: a failure before the renames leaves the old pair as it was (and
  // no temporary); only a crash between the two renames can pair the old
  // model with the new data.
  const std::string dataPath = std::string(out_path) + ".data";
  tcc::io::AtomicFile dataFile, modelFile;
  if (!(why = tcc::onnx::stageRope(dataPath, saver.dataRope(), dataFile)).empty())
    return finish(why);
  if (!(why = tcc::onnx::stageRope(out_path, out, modelFile)).empty()) {
    dataFile.discard();
    return finish(why);
  }
  const std::string dir = tcc::io::dirOf(out_path);
  for (auto [file, path] : {std::pair<tcc::io::AtomicFile *, std::string>{&dataFile, dataPath},
                            {&modelFile, std::string(out_path)}})
    if (const char *what = file->commit(path, dir)) {
      int err = errno;
      dataFile.discard();
      modelFile.discard();
      return finish("cannot write " + path + " (" + what + "): " + tcc::io::errnoText(err));
    }
  return finish("");
}
