//===- step_table.cpp - checking a step library's tables -------------------===//
#include "runtime/step_table.h"

#include "runtime/npy.h"

namespace tcc::step {

using tcc::npy::shapeToString;

static const DTypeInfo kDTypes[] = {
    {TCC_DTYPE_F32, "float32", "<f4", 4}, {TCC_DTYPE_F64, "float64", "<f8", 8},
    {TCC_DTYPE_F16, "float16", "<f2", 2}, {TCC_DTYPE_I64, "int64", "<i8", 8},
    {TCC_DTYPE_I32, "int32", "<i4", 4},   {TCC_DTYPE_U8, "uint8", "|u1", 1},
    {TCC_DTYPE_I8, "int8", "|i1", 1},     {TCC_DTYPE_BOOL, "bool", "|b1", 1},
    {TCC_DTYPE_U16, "uint16", "<u2", 2},  {TCC_DTYPE_I16, "int16", "<i2", 2},
    {TCC_DTYPE_U32, "uint32", "<u4", 4},  {TCC_DTYPE_U64, "uint64", "<u8", 8},
};

const DTypeInfo *lookupDType(int32_t code) {
  for (const DTypeInfo &d : kDTypes)
    if (d.code == code)
      return &d;
  return nullptr;
}

std::string quoted(const char *name) { return std::string("\"") + name + "\""; }

std::string describe(const tcc_tensor_desc &d) {
  const DTypeInfo *dt = lookupDType(d.dtype);
  return std::string(dt ? dt->name : "?") + " " +
         shapeToString(d.dims, d.rank);
}

/// Checks one descriptor against the arena; `kind` is "input", "output", ...
/// A frozen parameter's gradient (bytes == 0) is checked only for its name.
std::string checkDesc(const tcc_step_info &info, const tcc_tensor_desc &d,
                      const char *kind, int index, bool mayBeEmpty) {
  std::string where = "the step's " + std::string(kind) + " #" +
                      std::to_string(index);
  if (!d.name)
    return where + " has no name";
  where = "the step's " + std::string(kind) + " " + quoted(d.name);
  if (mayBeEmpty && d.bytes == 0)
    return "";
  const DTypeInfo *dt = lookupDType(d.dtype);
  if (!dt)
    return where + " has unsupported dtype code " + std::to_string(d.dtype);
  if (d.rank < 0 || (d.rank > 0 && !d.dims))
    return where + " has an invalid rank " + std::to_string(d.rank);
  uint64_t n = 1;
  for (int i = 0; i < d.rank; ++i) {
    if (d.dims[i] < 0)
      return where + " has a negative dimension in shape " +
             shapeToString(d.dims, d.rank);
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d.dims[i]), &n))
      return where + " has an overflowing shape";
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(n, dt->size, &bytes) || bytes != d.bytes)
    return where + " (" + describe(d) + ") says it has " +
           std::to_string(d.bytes) + " bytes; its shape needs " +
           std::to_string(n * dt->size);
  // Where it lives: the arena, or (tcc --offload) the host buffer of a
  // device step.
  uint64_t limit = info.arena_bytes;
  std::string space = "arena";
  if (d.location == TCC_LOCATION_HOST) {
    if (info.device_arena != 1)
      return where + " is in host memory, but the step has no device arena";
    limit = info.host_bytes;
    space = "host buffer";
  } else if (d.location != TCC_LOCATION_ARENA && d.location != TCC_LOCATION_SHARD) {
    return where + " has an unknown location " + std::to_string(d.location);
  }
  uint64_t end;
  if (__builtin_add_overflow(d.offset, d.bytes, &end) || end > limit)
    return where + " lies outside the " + space + " (offset " +
           std::to_string(d.offset) + ", " + std::to_string(d.bytes) +
           " bytes, " + space + " " + std::to_string(limit) + " bytes)";
  return "";
}

std::string checkInfo(const tcc_step_info &info) {
  auto table = [&](const tcc_tensor_desc *t, int32_t n, const char *kind,
                   bool mayBeEmpty) -> std::string {
    if (n < 0)
      return "the step has a negative number of " + std::string(kind) + "s";
    if (n > 0 && !t)
      return "the step has " + std::to_string(n) + " " + kind +
             "s but no table for them";
    for (int32_t i = 0; i < n; ++i) {
      std::string err = checkDesc(info, t[i], kind, i, mayBeEmpty);
      if (!err.empty())
        return err;
    }
    return "";
  };
  std::string err;
  if (!(err = table(info.params, info.num_params, "parameter", false)).empty())
    return err;
  if (info.has_backward &&
      !(err = table(info.grads, info.num_params, "gradient", true)).empty())
    return err;
  if (!(err = table(info.inputs, info.num_inputs, "input", false)).empty())
    return err;
  if (!(err = table(info.outputs, info.num_outputs, "output", false)).empty())
    return err;
  if (!(err = table(info.state, info.num_state, "optimizer state", false))
           .empty())
    return err;
  if (info.has_backward) {
    if (info.num_outputs < 1)
      return "the step has a backward pass but no loss output";
    const tcc_tensor_desc &loss = info.outputs[0];
    const DTypeInfo *dt = lookupDType(loss.dtype);
    if (loss.bytes != dt->size)
      return "the step's loss output " + quoted(loss.name) + " (" +
             describe(loss) + ") is not a single value";
  }
  // The op table (tcc-run --trace).
  if (info.num_ops < 0 || (info.num_ops > 0 && (!info.ops || !info.op_live_bytes)))
    return "the step's op table is invalid (" + std::to_string(info.num_ops) + " ops)";
  for (int32_t k = 0; k < info.num_ops; ++k)
    if (!info.ops[k])
      return "the step's op #" + std::to_string(k) + " has no name";
  return "";
}

MirrorTables::MirrorTables(const tcc_step_info &step) : info(step) {
  auto place = [&](const tcc_tensor_desc *t, int32_t n, std::vector<tcc_tensor_desc> &out) {
    if (!t || n <= 0)
      return t;
    out.assign(t, t + n);
    for (tcc_tensor_desc &d : out)
      if (d.location == TCC_LOCATION_HOST)
        d.offset += step.arena_bytes;
    return static_cast<const tcc_tensor_desc *>(out.data());
  };
  info.params = place(step.params, step.num_params, params);
  info.grads = place(step.grads, step.num_params, grads);
  info.inputs = place(step.inputs, step.num_inputs, inputs);
  info.outputs = place(step.outputs, step.num_outputs, outputs);
  info.state = place(step.state, step.num_state, state);
}

std::string checkShards(const tcc_step_info &info, const tcc_shard_info &sh) {
  if (info.device_arena != 0 && sh.dtype != TCC_DTYPE_F32)
    return "the step's sharded flat space on the device is not f32";
  if (sh.ranks < 2)
    return "the step's optimizer state is sharded across " + std::to_string(sh.ranks) +
           " ranks (2 or more expected)";
  if (sh.dtype != TCC_DTYPE_F32 && sh.dtype != TCC_DTYPE_F64)
    return "the step's sharded flat space has element type " + std::to_string(sh.dtype) +
           " (f32 or f64 expected)";
  const uint64_t es = sh.dtype == TCC_DTYPE_F64 ? 8 : 4;
  uint64_t flat = 0, bytes = 0, chunkBytes = 0;
  if (__builtin_mul_overflow(sh.chunk_elems, static_cast<uint64_t>(sh.ranks), &flat) ||
      flat != sh.flat_elems || sh.chunk_elems == 0 ||
      __builtin_mul_overflow(sh.flat_elems, es, &bytes) ||
      __builtin_mul_overflow(sh.chunk_elems, es, &chunkBytes))
    return "the step's shards do not divide its flat space (" + std::to_string(sh.flat_elems) +
           " elements, " + std::to_string(sh.ranks) + " chunks of " +
           std::to_string(sh.chunk_elems) + ")";
  auto inside = [&](uint64_t offset, uint64_t n) {
    uint64_t end;
    return !__builtin_add_overflow(offset, n, &end) && end <= info.arena_bytes;
  };
  if (!inside(sh.params_offset, bytes) || !inside(sh.grads_offset, bytes) ||
      !inside(sh.shard_grads_offset, chunkBytes))
    return "the step's sharded flat spaces lie outside its arena";
  for (int32_t i = 0; i < info.num_params; ++i) {
    const tcc_tensor_desc &p = info.params[i], &g = info.grads[i];
    if (!g.bytes)
      continue;
    if (p.offset < sh.params_offset || g.offset < sh.grads_offset ||
        p.offset - sh.params_offset != g.offset - sh.grads_offset ||
        p.offset - sh.params_offset + p.bytes > bytes || g.bytes != p.bytes)
      return "parameter " + quoted(p.name) +
             " and its accumulator are not at the same place in the sharded flat spaces";
  }
  for (int32_t i = 0; i < info.num_state; ++i)
    if (info.state[i].location == TCC_LOCATION_SHARD && info.state[i].bytes != chunkBytes)
      return "sharded state tensor " + quoted(info.state[i].name) + " has " +
             std::to_string(info.state[i].bytes) + " bytes, not one chunk's " +
             std::to_string(chunkBytes);
  return "";
}

} // namespace tcc::step
