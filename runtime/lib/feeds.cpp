//===- feeds.cpp - tensors in .npy files: --feed and --dump ---------------===//

#include "runtime/lib/feeds.h"

#include "runtime/npy.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"
#include "runtime/lib/step_library.h"
#include "runtime/lib/tensor_values.h"
#include "runtime/posix_io.h"

#include <set>

namespace tcc::run {

using tcc::io::joinPath;
using tcc::npy::shapeToString;
using tcc::step::DTypeInfo;
using tcc::step::describe;
using tcc::step::lookupDType;
using tcc::step::quoted;

/// Opens the feed file `path` for input `d` and checks its header.
std::string openFeed(const std::string &path, const tcc_tensor_desc &d,
                     tcc::npy::Reader &reader) {
  std::string input = "the step's input " + quoted(d.name);
  const DTypeInfo &dt = *lookupDType(d.dtype);
  std::string err = reader.open(path);
  if (!err.empty()) {
    if (err == "is missing")
      return path + " is missing (" + input + ", " + describe(d) + ")";
    return path + " " + err;
  }
  const tcc::npy::Header &h = reader.header();
  if (h.structured)
    return path + " has a structured dtype " + h.descr + ", which " + input +
           " (" + dt.name + ") cannot take";
  if (!descrMatches(h.descr, dt))
    return path + ": dtype " + h.descr + " does not match " + dt.name +
           ", the dtype of " + input + " (expected " + dt.descr + ")";
  if (h.fortranOrder)
    return path + " is in Fortran order; save it in C order (e.g. "
                  "np.save(path, np.ascontiguousarray(a)))";
  bool sameShape = static_cast<int64_t>(h.shape.size()) == d.rank;
  for (int i = 0; sameShape && i < d.rank; ++i)
    sameShape = h.shape[static_cast<size_t>(i)] == d.dims[i];
  if (!sameShape)
    return path + ": shape " + shapeToString(h.shape) +
           " does not match " + input + " of shape " +
           shapeToString(d.dims, d.rank);
  if (h.dataBytes < d.bytes)
    return path + " is not a valid .npy file (truncated? it has " +
           std::to_string(h.dataBytes) + " bytes of data, shape " +
           shapeToString(h.shape) + " needs " + std::to_string(d.bytes) + ")";
  if (h.dataBytes > d.bytes)
    return path + " has " + std::to_string(h.dataBytes - d.bytes) +
           " bytes after the data for shape " + shapeToString(h.shape) +
           " (corrupt file?)";
  return "";
}

/// Reads input `d` from DIR/<name>.npy into `dst` (d.bytes bytes).
std::string feedInputTo(const std::string &dir, const tcc_tensor_desc &d,
                        char *dst) {
  std::string path = joinPath(dir, fileNameFor(d.name));
  tcc::npy::Reader reader;
  std::string err = openFeed(path, d, reader);
  if (!err.empty())
    return err;
  err = reader.readData(dst, d.bytes);
  if (!err.empty())
    return path + " " + err;
  return "";
}

std::string feedInput(const std::string &dir, const tcc_tensor_desc &d,
                      char *arena) {
  return feedInputTo(dir, d, arena + d.offset);
}

std::string dumpTensor(const std::string &path, const tcc_tensor_desc &d,
                       const char *arena) {
  return tcc::npy::writeFile(path, lookupDType(d.dtype)->descr, d.dims,
                             d.rank, arena + d.offset, d.bytes);
}

/// Rejects two tensors whose names map to the same file.
std::string checkUniqueFiles(const tcc_tensor_desc *t, int32_t n,
                             const char *kind, const tcc_tensor_desc *grads) {
  std::set<std::string> seen;
  for (int32_t i = 0; i < n; ++i) {
    if (grads && grads[i].bytes == 0)
      continue;
    std::string f = fileNameFor(t[i].name);
    if (!seen.insert(f).second)
      return "two of the step's " + std::string(kind) +
             "s map to the same file " + f + " (\"" + t[i].name +
             "\" and another name that differs only in '/' vs '_')";
  }
  return "";
}

} // namespace tcc::run
