//===- feeds.h - tensors in .npy files: --feed and --dump ---------*- C++ -*-===//
//
// A step's inputs read from a folder of .npy files (one per input, named
// after it, '/' as '_'), checked against the step's descriptor; tensors
// written as .npy; the check that no two tensors share a file.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_LIB_FEEDS_H
#define TCC_RUNTIME_LIB_FEEDS_H

#include "runtime/npy.h"
#include "runtime/tcc_step.h"

#include <cstdint>
#include <string>

namespace tcc::run {

/// Opens the feed file `path` for input `d` and checks its header.
std::string openFeed(const std::string &path, const tcc_tensor_desc &d, tcc::npy::Reader &reader);
/// Reads input `d` from DIR/<name>.npy into `dst` (d.bytes bytes).
std::string feedInputTo(const std::string &dir, const tcc_tensor_desc &d, char *dst);
/// Reads input `d` from DIR/<name>.npy into its slot of `arena`.
std::string feedInput(const std::string &dir, const tcc_tensor_desc &d, char *arena);
/// Writes `d`'s bytes in `arena` to `path` as .npy (atomically).
std::string dumpTensor(const std::string &path, const tcc_tensor_desc &d, const char *arena);
/// Rejects two tensors whose names map to the same file (`grads`, if given:
/// skip the tensors whose gradient has no bytes).
std::string checkUniqueFiles(const tcc_tensor_desc *t, int32_t n, const char *kind,
                             const tcc_tensor_desc *grads);

} // namespace tcc::run

#endif // TCC_RUNTIME_LIB_FEEDS_H
