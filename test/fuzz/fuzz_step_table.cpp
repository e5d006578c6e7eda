//===- fuzz_step_table.cpp - libFuzzer harness: a step library's tables --===//
//
// Any bytes as the tables a step library hands tcc-run (tcc_step_info: the
// descriptors of parameters, gradients, inputs, outputs and state, with their
// element types, ranks, dimensions, offsets and sizes, the arena's size and
// the op table), as a fake step would export them: tcc::step::checkInfo
// accepts them or says what is wrong, and what it accepts is safe to use:
// every descriptor that passes lies inside the arena and its shape's bytes
// are its size (the harness then touches each one's first and last byte in
// an arena of that size, which ASan checks).
//
//===----------------------------------------------------------------------===//
#include "runtime/step_table.h"

#include <cstring>
#include <string>
#include <vector>

namespace {

/// Reads the fuzzer's bytes as fields, zeros past the end.
struct Reader {
  const uint8_t *data;
  size_t size, at = 0;
  template <typename T> T get() {
    T v{};
    size_t n = sizeof(T) < size - at ? sizeof(T) : size - at;
    if (at < size)
      std::memcpy(&v, data + at, n);
    at += n;
    return v;
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader in{data, size};
  // Small counts keep each input quick; dims and sizes are taken whole, so
  // overflowing shapes and offsets come up.
  auto count = [&](int limit) { return static_cast<int32_t>(in.get<uint8_t>() % limit) - 1; };
  tcc_step_info info;
  std::memset(&info, 0, sizeof info);
  info.abi_version = TCC_STEP_ABI_VERSION;
  info.model = "fuzz.onnx";
  info.target = "cpu";
  info.arena_bytes = in.get<uint16_t>(); // an arena we can allocate
  info.has_backward = in.get<uint8_t>() & 1;
  info.num_params = count(6);
  info.num_inputs = count(4);
  info.num_outputs = count(4);
  info.num_state = count(6);
  info.num_ops = count(5);

  std::vector<std::vector<int64_t>> dims;
  std::vector<std::string> names;
  dims.reserve(64);
  names.reserve(64);
  auto table = [&](int32_t n) {
    std::vector<tcc_tensor_desc> t;
    for (int32_t i = 0; i < n; ++i) {
      tcc_tensor_desc d;
      uint8_t flags = in.get<uint8_t>();
      names.push_back("t" + std::to_string(names.size()));
      d.name = flags & 1 ? nullptr : names.back().c_str();
      d.dtype = in.get<int8_t>();
      d.rank = static_cast<int32_t>(in.get<int8_t>() % 6);
      dims.emplace_back();
      for (int32_t r = 0; r < (d.rank > 0 ? d.rank : 0); ++r)
        dims.back().push_back(flags & 2 ? in.get<int64_t>() : in.get<int8_t>());
      d.dims = flags & 4 ? nullptr : dims.back().data();
      d.offset = flags & 8 ? in.get<uint64_t>() : in.get<uint16_t>();
      d.bytes = flags & 16 ? in.get<uint64_t>() : in.get<uint16_t>();
      t.push_back(d);
    }
    return t;
  };
  std::vector<tcc_tensor_desc> params = table(info.num_params > 0 ? info.num_params : 0),
                               grads = table(info.num_params > 0 ? info.num_params : 0),
                               inputs = table(info.num_inputs > 0 ? info.num_inputs : 0),
                               outputs = table(info.num_outputs > 0 ? info.num_outputs : 0),
                               state = table(info.num_state > 0 ? info.num_state : 0);
  uint8_t nulls = in.get<uint8_t>();
  info.params = nulls & 1 ? nullptr : params.data();
  info.grads = nulls & 2 ? nullptr : grads.data();
  info.inputs = nulls & 4 ? nullptr : inputs.data();
  info.outputs = nulls & 8 ? nullptr : outputs.data();
  info.state = nulls & 16 ? nullptr : state.data();
  std::vector<const char *> ops;
  std::vector<uint64_t> live;
  for (int32_t k = 0; k < info.num_ops; ++k) {
    ops.push_back(in.get<uint8_t>() & 1 ? nullptr : "op");
    live.push_back(in.get<uint32_t>());
  }
  info.ops = nulls & 32 ? nullptr : ops.data();
  info.op_live_bytes = nulls & 64 ? nullptr : live.data();

  if (!tcc::step::checkInfo(info).empty())
    return 0;
  // Accepted: every descriptor is inside the arena.
  std::vector<unsigned char> arena(info.arena_bytes);
  auto touch = [&](const tcc_tensor_desc *t, int32_t n) {
    for (int32_t i = 0; i < n; ++i)
      if (t[i].bytes) {
        arena[t[i].offset] ^= 1;
        arena[t[i].offset + t[i].bytes - 1] ^= 1;
        (void)tcc::step::describe(t[i]);
      }
  };
  touch(info.params, info.num_params);
  if (info.has_backward)
    touch(info.grads, info.num_params);
  touch(info.inputs, info.num_inputs);
  touch(info.outputs, info.num_outputs);
  touch(info.state, info.num_state);
  for (int32_t k = 0; k < info.num_ops; ++k)
    (void)std::strlen(info.ops[k]);
  return 0;
}
