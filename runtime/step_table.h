//===- step_table.h - checking a step library's tables ----------*- C++ -*-===//
//
// What tcc-run checks in a step library's tcc_step_info (runtime/tcc_step.h)
// before it trusts it: every descriptor's name, element type, rank, shape,
// byte size (checked arithmetic) and place inside the arena; the loss; the op
// table. Also the element types the runtime knows. Plain C++ and no I/O, so
// that the fuzzer (test/fuzz/fuzz_step_table.cpp) drives it on its own.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_STEP_TABLE_H
#define TCC_RUNTIME_STEP_TABLE_H

#include "runtime/tcc_step.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tcc::step {

/// An element type (enum tcc_dtype) as numpy names it.
struct DTypeInfo {
  int32_t code;
  const char *name;  // numpy's name
  const char *descr; // the .npy descr numpy writes on a little-endian host
  uint64_t size;
};

/// The element type with `code`, or null for one the runtime does not know.
const DTypeInfo *lookupDType(int32_t code);

/// `name` in double quotes.
std::string quoted(const char *name);

/// "float32 [2, 3]".
std::string describe(const tcc_tensor_desc &d);

/// Checks one descriptor of `info`; `kind` is "input", "output", ..., and
/// `index` its place in its table. With `mayBeEmpty`, a descriptor of 0
/// bytes (a frozen parameter's gradient) is checked only for its name.
/// Returns "" or what is wrong.
std::string checkDesc(const tcc_step_info &info, const tcc_tensor_desc &d, const char *kind,
                      int index, bool mayBeEmpty);

/// Checks every table of `info` (see the file comment). Returns "" or the
/// first thing that is wrong.
std::string checkInfo(const tcc_step_info &info);

/// Checks a sharded step's layout (tcc --data-parallel, runtime/tcc_step.h's
/// tcc_shard_info) against its tables: the flat spaces inside the arena,
/// every trainable parameter and its accumulator at the same flat index,
/// the TCC_LOCATION_SHARD state one chunk each. "" or what is wrong.
std::string checkShards(const tcc_step_info &info, const tcc_shard_info &shards);

/// A step's tables as the runtime's host mirror lays them out when the step
/// has a host buffer (tcc --offload): the mirror holds the arena and, after
/// it, the host buffer, so a TCC_LOCATION_HOST tensor's offset becomes
/// arena_bytes + its offset there (its location stays, for the copies).
/// `info` points into the vectors; the object is not copied or moved.
struct MirrorTables {
  tcc_step_info info;
  std::vector<tcc_tensor_desc> params, grads, inputs, outputs, state;
  explicit MirrorTables(const tcc_step_info &step);
  MirrorTables(const MirrorTables &) = delete;
  MirrorTables &operator=(const MirrorTables &) = delete;
};

} // namespace tcc::step

#endif // TCC_RUNTIME_STEP_TABLE_H
