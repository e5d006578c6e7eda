//===- evaluator.cpp - the evaluation step a step library carries ---------===//

#include "runtime/lib/evaluator.h"

#include "runtime/lib/tensor_values.h"
#include "runtime/onnx_save.h"
#include "runtime/posix_io.h"

#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::run {

namespace {
constexpr char kEvalMagic[8] = {'T', 'C', 'C', '-', 'E', 'V', 'A', 'L'};

std::string describeTensor(const tcc_tensor_desc &d) {
  std::string s = quoted(d.name) + " [";
  for (int32_t i = 0; i < d.rank; ++i)
    s += (i ? "x" : "") + std::to_string(d.dims[i]);
  return s + "] dtype " + std::to_string(d.dtype);
}

bool sameShape(const tcc_tensor_desc &a, const tcc_tensor_desc &b) {
  return a.rank == b.rank && std::equal(a.dims, a.dims + a.rank, b.dims);
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
  if (std::memcmp(tail + 8, kEvalMagic, 8) != 0)
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
  // The arena (closed by ~Arena through the step's functions) before the
  // memory file; the library itself stays mapped for the process.
  if (fd >= 0)
    ::close(fd);
}

std::string Evaluator::open(const Step &train, tcc::dp::World &world, bool &found) {
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
  if (!(err = checkInfo(step)).empty())
    return err;
  const tcc_step_info &e = *step.info, &t = *train.info;
  if (e.has_backward)
    return what + " has a backward pass (it was not built by tcc --with-eval)";
  if (e.num_inputs != t.num_inputs)
    return what + " reads " + std::to_string(e.num_inputs) + " inputs, the training step " +
           std::to_string(t.num_inputs);
  for (int32_t i = 0; i < e.num_inputs; ++i)
    if (std::strcmp(e.inputs[i].name, t.inputs[i].name) != 0 ||
        e.inputs[i].dtype != t.inputs[i].dtype || !sameShape(e.inputs[i], t.inputs[i]))
      return what + "'s input " + describeTensor(e.inputs[i]) +
             " differs from the training step's " + describeTensor(t.inputs[i]);
  if (e.num_outputs < 1 || e.outputs[0].rank != 0 ||
      (e.outputs[0].dtype != TCC_DTYPE_F32 && e.outputs[0].dtype != TCC_DTYPE_F64 &&
       e.outputs[0].dtype != TCC_DTYPE_F16))
    return what + "'s first output is not a scalar loss";
  std::unordered_map<std::string, int32_t> trained;
  for (int32_t i = 0; i < t.num_params; ++i)
    trained.emplace(t.params[i].name, i);
  for (int32_t i = 0; i < e.num_params; ++i) {
    auto it = trained.find(e.params[i].name);
    if (it == trained.end())
      return what + " holds parameter " + quoted(e.params[i].name) +
             ", which the training step does not";
    if (!sameShape(e.params[i], t.params[it->second]))
      return what + "'s parameter " + describeTensor(e.params[i]) +
             " differs from the training step's " + describeTensor(t.params[it->second]);
  }
  return prepareArena(step, mem, world, /*nccl=*/false);
}

std::string Evaluator::loadParameters(const Step &train, const char *trainMirror) {
  const tcc_step_info &e = *step.info, &t = *train.info;
  std::unordered_map<std::string, int32_t> trained;
  for (int32_t i = 0; i < t.num_params; ++i)
    trained.emplace(t.params[i].name, i);
  for (int32_t i = 0; i < e.num_params; ++i) {
    const tcc_tensor_desc &d = e.params[i];
    const tcc_tensor_desc &s = t.params[trained.at(d.name)];
    const char *src = trainMirror + s.offset;
    char *dst = mem.host + d.offset;
    if (s.dtype == d.dtype && s.bytes == d.bytes) {
      std::memcpy(dst, src, static_cast<size_t>(d.bytes));
    } else if (d.dtype == TCC_DTYPE_F16 &&
               (s.dtype == TCC_DTYPE_F32 || s.dtype == TCC_DTYPE_F64)) {
      const uint64_t n = d.bytes / 2, es = s.dtype == TCC_DTYPE_F32 ? 4 : 8;
      if (s.bytes != n * es)
        return "parameter " + quoted(d.name) + ": sizes disagree";
      for (uint64_t k = 0; k < n; ++k) {
        uint16_t h = tcc::onnx::toFloat16(elementAsDouble(src + k * es, s.dtype));
        std::memcpy(dst + 2 * k, &h, 2);
      }
    } else {
      return "parameter " + quoted(d.name) + " is dtype " + std::to_string(s.dtype) +
             " in the training step but " + std::to_string(d.dtype) +
             " in its evaluation step";
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
