//===- evaluator.cpp - the evaluation step a step library carries ---------===//

#include "runtime/lib/evaluator.h"

#include "runtime/lib/tensor_values.h"
#include "runtime/onnx_save.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"

#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::run {

using tcc::step::describe;

namespace {
bool sameShape(const tcc_tensor_desc &a, const tcc_tensor_desc &b) {
  return a.rank == b.rank && std::equal(a.dims, a.dims + a.rank, b.dims);
}

/// Whether the evaluation step's parameter `d` can be filled from the
/// training step's `s` (same shape): the same type, or float16 from float32
/// or float64.
bool fillable(const tcc_tensor_desc &d, const tcc_tensor_desc &s) {
  if (s.dtype == d.dtype)
    return s.bytes == d.bytes;
  return d.dtype == TCC_DTYPE_F16 && (s.dtype == TCC_DTYPE_F32 || s.dtype == TCC_DTYPE_F64) &&
         s.bytes == d.bytes / 2 * (s.dtype == TCC_DTYPE_F32 ? 4 : 8);
}
} // namespace

std::string findEvaluationStep(const std::string &path, uint64_t &offset, uint64_t &size) {
  offset = size = 0;
  int fd = tcc::io::openRetry(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "cannot open " + path + ": " + errnoText(errno);
  tcc::io::FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return "cannot read " + path + ": " + errnoText(errno);
  const uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  unsigned char tail[16];
  if (fileSize < sizeof tail)
    return "";
  if (::pread(fd, tail, sizeof tail, static_cast<off_t>(fileSize - sizeof tail)) !=
      static_cast<ssize_t>(sizeof tail))
    return "cannot read " + path + ": " + errnoText(errno);
  if (std::memcmp(tail + 8, TCC_STEP_EVAL_MAGIC, 8) != 0)
    return "";
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(tail[i]) << (8 * i);
  if (n == 0 || n > fileSize - sizeof tail)
    return path + " is damaged: its evaluation step's size (" + std::to_string(n) +
           " bytes) does not fit in the file";
  offset = fileSize - sizeof tail - n;
  size = n;
  return "";
}

Evaluator::~Evaluator() {
  // The memory file's descriptor; the library dlopen mapped from it stays
  // for the process, and the arena goes with `mem`.
  if (fd >= 0)
    ::close(fd);
}

std::string Evaluator::open(const Step &train, tcc::dp::World &world, int64_t threads,
                            bool &found) {
  found = false;
  uint64_t offset = 0, size = 0;
  std::string err = findEvaluationStep(train.path, offset, size);
  if (!err.empty() || size == 0)
    return err;
  found = true;
  const std::string what = train.name + "'s evaluation step";
  fd = ::memfd_create("tcc-eval-step", MFD_CLOEXEC);
  if (fd < 0)
    return "cannot make a memory file for " + what + ": " + errnoText(errno);
  int in = tcc::io::openRetry(train.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return "cannot open " + train.path + ": " + errnoText(errno);
  tcc::io::FdCloser closer(in);
  std::vector<char> buf(1 << 20);
  for (uint64_t done = 0; done < size;) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done));
    ssize_t got = ::pread(in, buf.data(), want, static_cast<off_t>(offset + done));
    if (got <= 0)
      return "cannot read " + what + " from " + train.path + ": " +
             (got < 0 ? errnoText(errno) : std::string("the file is shorter than it says"));
    if (!tcc::io::writeAll(fd, buf.data(), static_cast<size_t>(got)))
      return "cannot write " + what + " to a memory file: " + errnoText(errno);
    done += static_cast<uint64_t>(got);
  }
  if (!(err = loadStep("/proc/self/fd/" + std::to_string(fd), step)).empty())
    return what + ": " + err;
  step.name = what;
  const tcc_step_info &e = *step.info, &t = *train.info;
  if (e.has_backward)
    return what + " has a backward pass (it was not built by tcc --with-eval)";
  if (e.num_inputs != t.num_inputs)
    return what + " reads " + std::to_string(e.num_inputs) + " inputs, the training step " +
           std::to_string(t.num_inputs);
  for (int32_t i = 0; i < e.num_inputs; ++i)
    if (std::strcmp(e.inputs[i].name, t.inputs[i].name) != 0 ||
        e.inputs[i].dtype != t.inputs[i].dtype || !sameShape(e.inputs[i], t.inputs[i]))
      return what + "'s input " + describe(e.inputs[i]) +
             " differs from the training step's " + describe(t.inputs[i]);
  if (e.num_outputs < 1 || e.outputs[0].rank != 0 ||
      (e.outputs[0].dtype != TCC_DTYPE_F32 && e.outputs[0].dtype != TCC_DTYPE_F64 &&
       e.outputs[0].dtype != TCC_DTYPE_F16))
    return what + "'s first output is not a scalar loss";
  std::unordered_map<std::string, int32_t> trained;
  for (int32_t i = 0; i < t.num_params; ++i)
    trained.emplace(t.params[i].name, i);
  source.clear();
  for (int32_t i = 0; i < e.num_params; ++i) {
    auto it = trained.find(e.params[i].name);
    if (it == trained.end())
      return what + " holds parameter " + quoted(e.params[i].name) +
             ", which the training step does not";
    const tcc_tensor_desc &s = t.params[it->second];
    if (!sameShape(e.params[i], s) || !fillable(e.params[i], s))
      return what + "'s parameter " + describe(e.params[i]) +
             " cannot be filled from the training step's " + describe(s);
    source.push_back(it->second);
  }
  if (!(err = prepareArena(step, mem, world, /*nccl=*/false)).empty())
    return err;
  // A CPU step's GEMMs on as many threads as the training step's.
  if (step.setThreads && threads > 0 &&
      step.setThreads(static_cast<int32_t>(std::min<int64_t>(threads, 1024))) != 0)
    return what + ": cannot set its threads";
  return "";
}

std::string Evaluator::loadParameters(const Step &train, const char *trainMirror) {
  const tcc_step_info &e = *step.info, &t = *train.info;
  for (int32_t i = 0; i < e.num_params; ++i) {
    // open() checked that each can be filled from its source.
    const tcc_tensor_desc &d = e.params[i], &s = t.params[source[i]];
    const char *src = trainMirror + s.offset;
    char *dst = mem.host + d.offset;
    if (s.dtype == d.dtype) {
      std::memcpy(dst, src, static_cast<size_t>(d.bytes));
    } else {
      const uint64_t n = d.bytes / 2, es = s.bytes / n;
      for (uint64_t k = 0; k < n; ++k) {
        uint16_t h = tcc::onnx::toFloat16(elementAsDouble(src + k * es, s.dtype));
        std::memcpy(dst + 2 * k, &h, 2);
      }
    }
    if (std::string err = mem.copyIn(d); !err.empty())
      return err;
  }
  return "";
}

std::string Evaluator::evaluate(tcc::data::BatchMaker &maker, int64_t batches, double &loss) {
  const tcc_step_info &e = *step.info;
  std::vector<char> buf(static_cast<size_t>(maker.batchBytes()));
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    uint64_t rng = 0; // sequential windows draw nothing
    std::string err = maker.make(static_cast<uint64_t>(b), rng, buf.data());
    if (!err.empty())
      return "validation batch " + std::to_string(b) + ": " + err;
    const char *p = buf.data();
    for (int32_t i = 0; i < e.num_inputs; ++i) {
      const tcc_tensor_desc &d = e.inputs[i];
      std::memcpy(mem.host + d.offset, p, static_cast<size_t>(d.bytes));
      p += d.bytes;
      if (!(err = mem.copyIn(d)).empty())
        return err;
    }
    if (int rc = step.microStep(mem.stepArena(), 1.0); rc != 0) {
      const char *meaning = stepErrorMeaning(rc);
      return step.name + ": the forward pass failed (code " + std::to_string(rc) + ")" +
             (meaning ? std::string(": ") + meaning : std::string());
    }
    if (!(err = mem.copyOut(e.outputs[0])).empty())
      return err;
    sum += elementAsDouble(mem.host + e.outputs[0].offset, e.outputs[0].dtype);
  }
  loss = batches > 0 ? sum / static_cast<double>(batches) : NAN;
  return "";
}

} // namespace tcc::run
