//===- fuzz_onnx_save.cpp - libFuzzer harness: the ONNX writer's round trip -===//
//
// Any bytes as a model: listInitializers reads it or says why not. For a
// model it reads, tcc_save_onnx writes it with every float32 initializer
// replaced (as a step's parameters, from an arena of zeros), and the written
// model reads back with the same initializers, in order, with zeros where
// the parameters went.
//
//===----------------------------------------------------------------------===//
#include "fuzz_util.h"
#include "runtime/onnx_save.h"
#include "runtime/tcc_step.h"

#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string model = tcc::fuzz::writeInput("model.onnx", data, size);
  std::vector<tcc::onnx::Initializer> inits;
  if (!tcc::onnx::listInitializers(model, inits).empty())
    return 0;
  std::vector<tcc_tensor_desc> params;
  uint64_t offset = 0;
  for (const tcc::onnx::Initializer &i : inits) {
    if (i.dataType != 1 || i.dims.size() > 8)
      continue;
    uint64_t n = 1;
    bool ok = true;
    for (int64_t d : i.dims)
      ok = ok && d >= 0 && !__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
    if (!ok || n > (1u << 16) || offset + 4 * n > (1u << 22))
      return 0;
    params.push_back({i.name.c_str(), 1, static_cast<int32_t>(i.dims.size()), i.dims.data(),
                      offset, 4 * n});
    offset += 4 * n;
  }
  tcc_step_info info;
  std::memset(&info, 0, sizeof info);
  info.abi_version = TCC_STEP_ABI_VERSION;
  info.target = "cpu";
  info.arena_bytes = offset;
  info.num_params = static_cast<int32_t>(params.size());
  info.params = params.data();
  std::vector<char> arena(static_cast<size_t>(offset) + 1, 0);
  std::string out = tcc::fuzz::scratchDir() + "/saved.onnx";
  char err[512] = {0};
  if (tcc_save_onnx(model.c_str(), out.c_str(), &info, arena.data(), err, sizeof err) != 0)
    return 0; // refused with a message (a duplicate name, over 2 GiB, ...)
  std::vector<tcc::onnx::Initializer> back;
  if (!tcc::onnx::listInitializers(out, back).empty() || back.size() != inits.size())
    __builtin_trap(); // what tcc wrote does not read back
  for (size_t k = 0; k < back.size(); ++k)
    if (back[k].name != inits[k].name || back[k].dims != inits[k].dims)
      __builtin_trap();
  return 0;
}
