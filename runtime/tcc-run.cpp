//===- tcc-run.cpp - the thin runtime CLI for a compiled step -------------===//
//
//   tcc-run STEP.so --feed DIR --grads-only [--dump OUT]
//
// Loads a training step compiled by tcc (see runtime/tcc_step.h), feeds its
// inputs from DIR/<name>.npy, runs one micro-step and prints (and with --dump
// writes) the loss, the outputs and the gradients. Optimizer steps come later;
// for now --grads-only is required.
//
// Deliberately thin: the C++ standard library, POSIX and libdl only, built
// with -fno-exceptions. Every error is a message on stderr that starts with
// "tcc-run: error: " and exit code 1; no partial file is ever left behind.
//
//===----------------------------------------------------------------------===//

#include "runtime/npy.h"
#include "runtime/tcc_step.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#define TCC_RUN_VERSION "0.1.0"
#define TCC_STR2(x) #x
#define TCC_STR(x) TCC_STR2(x)

namespace {

using tcc::npy::shapeToString;

int error(const std::string &msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "tcc-run: error: %s\n", msg.c_str());
  return 1;
}

const char *const kUsage =
    "usage: tcc-run STEP.so --feed DIR --grads-only [--dump OUT]\n"
    "\n"
    "Runs a training step compiled by tcc (`tcc model.onnx -o step.so`).\n"
    "\n"
    "options:\n"
    "  --feed DIR     read each step input from DIR/<name>.npy ('/' in a name\n"
    "                 becomes '_'); dtype and shape must match the step's\n"
    "  --grads-only   run one micro-step (forward, and backward with grad\n"
    "                 scale 1) without an optimizer step; required for now\n"
    "  --dump OUT     write OUT/loss.npy, OUT/outputs/<name>.npy and\n"
    "                 OUT/grads/<param>.npy (each file written atomically)\n"
    "  --help         show this help and exit\n"
    "  --version      show the version and exit\n"
    "\n"
    "Prints `loss <value>` (with a backward pass) and one\n"
    "`output <name> <dtype> [dims]` line per output.\n";

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

struct DTypeInfo {
  int32_t code;
  const char *name;  // numpy's name
  const char *descr; // the .npy descr numpy writes on a little-endian host
  uint64_t size;
};

const DTypeInfo kDTypes[] = {
    {TCC_DTYPE_F32, "float32", "<f4", 4}, {TCC_DTYPE_F64, "float64", "<f8", 8},
    {TCC_DTYPE_F16, "float16", "<f2", 2}, {TCC_DTYPE_I64, "int64", "<i8", 8},
    {TCC_DTYPE_I32, "int32", "<i4", 4},   {TCC_DTYPE_U8, "uint8", "|u1", 1},
    {TCC_DTYPE_I8, "int8", "|i1", 1},     {TCC_DTYPE_BOOL, "bool", "|b1", 1},
};

const DTypeInfo *lookupDType(int32_t code) {
  for (const DTypeInfo &d : kDTypes)
    if (d.code == code)
      return &d;
  return nullptr;
}

/// Whether an .npy descr denotes `d` ('=' is native order, i.e. little-endian
/// here; one-byte types have no byte order, so '<' and '=' are fine too).
bool descrMatches(const std::string &descr, const DTypeInfo &d) {
  if (descr == d.descr)
    return true;
  if (descr.size() != 3)
    return false;
  std::string body = descr.substr(1);
  if (body != std::string(d.descr + 1))
    return false;
  char order = descr[0];
  return order == '=' || (d.size == 1 && (order == '<' || order == '|'));
}

double halfToDouble(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(mant | 0x400, exp - 25);
  return sign ? -v : v;
}

/// The first element at `p`, as a double.
double elementAsDouble(const void *p, int32_t dtype) {
  switch (dtype) {
  case TCC_DTYPE_F32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case TCC_DTYPE_F64: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case TCC_DTYPE_F16: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return halfToDouble(v);
  }
  case TCC_DTYPE_I64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return static_cast<double>(v);
  }
  case TCC_DTYPE_I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case TCC_DTYPE_U8:
  case TCC_DTYPE_BOOL:
    return *static_cast<const uint8_t *>(p);
  case TCC_DTYPE_I8:
    return *static_cast<const int8_t *>(p);
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// The step library and its tables
//===----------------------------------------------------------------------===//

using GetInfoFn = const tcc_step_info *(*)();
using InitFn = int (*)(void *);
using ZeroGradsFn = int (*)(void *);
using MicroStepFn = int (*)(void *, double);

struct Step {
  std::string path;
  const tcc_step_info *info = nullptr;
  InitFn init = nullptr;
  ZeroGradsFn zeroGrads = nullptr;
  MicroStepFn microStep = nullptr;
};

/// '/' in a tensor name becomes '_' in its file name.
std::string fileNameFor(const char *name) {
  std::string s = name;
  for (char &c : s)
    if (c == '/')
      c = '_';
  return s + ".npy";
}

std::string quoted(const char *name) { return std::string("\"") + name + "\""; }

std::string describe(const tcc_tensor_desc &d) {
  const DTypeInfo *dt = lookupDType(d.dtype);
  return std::string(dt ? dt->name : "?") + " " +
         shapeToString(d.dims, d.rank);
}

/// Checks one descriptor against the arena; `kind` is "input", "output", ...
/// A frozen parameter's gradient (bytes == 0) is checked only for its name.
std::string checkDesc(const Step &step, const tcc_tensor_desc &d,
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
  uint64_t end;
  if (__builtin_add_overflow(d.offset, d.bytes, &end) ||
      end > step.info->arena_bytes)
    return where + " lies outside the arena (offset " +
           std::to_string(d.offset) + ", " + std::to_string(d.bytes) +
           " bytes, arena " + std::to_string(step.info->arena_bytes) +
           " bytes)";
  return "";
}

std::string checkInfo(const Step &step) {
  const tcc_step_info &info = *step.info;
  auto table = [&](const tcc_tensor_desc *t, int32_t n, const char *kind,
                   bool mayBeEmpty) -> std::string {
    if (n < 0)
      return "the step has a negative number of " + std::string(kind) + "s";
    if (n > 0 && !t)
      return "the step has " + std::to_string(n) + " " + kind +
             "s but no table for them";
    for (int32_t i = 0; i < n; ++i) {
      std::string err = checkDesc(step, t[i], kind, i, mayBeEmpty);
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
  if (info.has_backward) {
    if (info.num_outputs < 1)
      return "the step has a backward pass but no loss output";
    const tcc_tensor_desc &loss = info.outputs[0];
    const DTypeInfo *dt = lookupDType(loss.dtype);
    if (loss.bytes != dt->size)
      return "the step's loss output " + quoted(loss.name) + " (" +
             describe(loss) + ") is not a single value";
  }
  return "";
}

std::string loadStep(const std::string &arg, Step &step) {
  // dlopen searches the library path for a name without '/'; a path on the
  // command line means a file, so make it relative to the current directory.
  step.path = arg.find('/') == std::string::npos ? "./" + arg : arg;
  struct stat st;
  if (::stat(step.path.c_str(), &st) != 0)
    return arg + " does not exist";
  void *lib = ::dlopen(step.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = ::dlerror();
    return "cannot load " + arg + ": " + (why ? why : "unknown dlopen error");
  }
  auto sym = [&](const char *name, void *&out) -> std::string {
    ::dlerror();
    out = ::dlsym(lib, name);
    if (!out)
      return arg + " does not export " + name +
             " (is it a step library built by tcc?)";
    return "";
  };
  void *getInfo, *init, *zeroGrads, *microStep;
  std::string err;
  if (!(err = sym("tcc_step_get_info", getInfo)).empty() ||
      !(err = sym("tcc_step_init", init)).empty() ||
      !(err = sym("tcc_step_zero_grads", zeroGrads)).empty() ||
      !(err = sym("tcc_step_micro_step", microStep)).empty())
    return err;
  step.init = reinterpret_cast<InitFn>(init);
  step.zeroGrads = reinterpret_cast<ZeroGradsFn>(zeroGrads);
  step.microStep = reinterpret_cast<MicroStepFn>(microStep);
  step.info = reinterpret_cast<GetInfoFn>(getInfo)();
  if (!step.info)
    return arg + ": tcc_step_get_info returned no table";
  if (step.info->abi_version != TCC_STEP_ABI_VERSION)
    return arg + " uses step ABI " + std::to_string(step.info->abi_version) +
           ", but this tcc-run supports ABI " +
           std::to_string(TCC_STEP_ABI_VERSION) +
           "; rebuild the step with a matching tcc";
  return checkInfo(step);
}

//===----------------------------------------------------------------------===//
// Feeding and dumping
//===----------------------------------------------------------------------===//

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string feedInput(const std::string &dir, const tcc_tensor_desc &d,
                      char *arena) {
  std::string path = joinPath(dir, fileNameFor(d.name));
  std::string input = "the step's input " + quoted(d.name);
  const DTypeInfo &dt = *lookupDType(d.dtype);
  tcc::npy::Reader reader;
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
  err = reader.readData(arena + d.offset, d.bytes);
  if (!err.empty())
    return path + " " + err;
  return "";
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

struct Options {
  std::string step, feed, dump;
  bool gradsOnly = false, haveFeed = false, haveDump = false;
};

/// Returns -1 to go on, otherwise the exit code.
int parseArgs(int argc, char **argv, Options &opts) {
  bool haveStep = false, endOfFlags = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (endOfFlags || a.empty() || a[0] != '-') {
      if (haveStep)
        return error("unexpected argument '" + a +
                     "' (only one STEP.so is taken)");
      opts.step = a;
      haveStep = true;
      continue;
    }
    if (a == "--") {
      endOfFlags = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      std::puts("tcc-run " TCC_RUN_VERSION
                " (step ABI " TCC_STR(TCC_STEP_ABI_VERSION) ")");
      return 0;
    }
    if (a == "--grads-only") {
      opts.gradsOnly = true;
      continue;
    }
    std::string flag = a, value;
    bool haveValue = false;
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      haveValue = true;
    }
    if (flag == "--feed" || flag == "--dump") {
      if (!haveValue) {
        if (i + 1 >= argc)
          return error(flag + " needs a directory (" + flag + " DIR)");
        value = argv[++i];
      }
      if (value.empty())
        return error(flag + " needs a non-empty directory");
      bool &have = flag == "--feed" ? opts.haveFeed : opts.haveDump;
      if (have)
        return error(flag + " is given twice");
      have = true;
      (flag == "--feed" ? opts.feed : opts.dump) = value;
      continue;
    }
    return error("unknown option '" + a + "' (see tcc-run --help)");
  }
  if (!haveStep)
    return error("no step library given (usage: tcc-run STEP.so --feed DIR "
                 "--grads-only [--dump OUT])");
  if (!opts.haveFeed)
    return error("--feed DIR is required: the directory with one "
                 "<input>.npy per step input");
  if (!opts.gradsOnly)
    return error("training (optimizer steps) is not implemented yet; pass "
                 "--grads-only to run one micro-step and dump gradients");
  return -1;
}

const char *stepErrorMeaning(int code) {
  switch (code) {
  case 1:
    return "an index was out of range (a token id outside the vocabulary, or "
           "a label outside the classes)";
  }
  return nullptr;
}

int run(int argc, char **argv) {
  Options opts;
  int rc = parseArgs(argc, argv, opts);
  if (rc >= 0)
    return rc;

  Step step;
  std::string err = loadStep(opts.step, step);
  if (!err.empty())
    return error(err);
  const tcc_step_info &info = *step.info;

  struct stat st;
  if (::stat(opts.feed.c_str(), &st) != 0)
    return error("the feed directory " + opts.feed + " does not exist");
  if (!S_ISDIR(st.st_mode))
    return error("the feed directory " + opts.feed + " is not a directory");

  // Prepare the dump directories before running, so that an unwritable OUT
  // is reported before the work rather than after it.
  std::string outputsDir = joinPath(opts.dump, "outputs");
  std::string gradsDir = joinPath(opts.dump, "grads");
  bool anyGrads = false;
  if (info.has_backward)
    for (int32_t i = 0; i < info.num_params; ++i)
      anyGrads |= info.grads[i].bytes > 0;
  if (opts.haveDump) {
    if (!(err = checkUniqueFiles(info.outputs, info.num_outputs, "output",
                                 nullptr))
             .empty() ||
        (anyGrads && !(err = checkUniqueFiles(info.params, info.num_params,
                                              "parameter", info.grads))
                          .empty()))
      return error(err);
    std::vector<std::string> dirs = {opts.dump};
    if (info.num_outputs > 0)
      dirs.push_back(outputsDir);
    if (anyGrads)
      dirs.push_back(gradsDir);
    for (const std::string &dir : dirs) {
      if (!(err = tcc::npy::makeDirs(dir)).empty())
        return error(err);
      if (::access(dir.c_str(), W_OK | X_OK) != 0)
        return error("the dump directory " + dir + " is not writable");
    }
  }

  // The arena: 64-byte aligned and zeroed.
  uint64_t arenaBytes = (info.arena_bytes + 63) / 64 * 64;
  if (arenaBytes == 0)
    arenaBytes = 64;
  void *mem = nullptr;
  if (arenaBytes < info.arena_bytes ||
      static_cast<uint64_t>(static_cast<size_t>(arenaBytes)) != arenaBytes ||
      ::posix_memalign(&mem, 64, static_cast<size_t>(arenaBytes)) != 0)
    return error("cannot allocate the step's arena of " +
                 std::to_string(info.arena_bytes) + " bytes");
  struct FreeOnExit {
    void *p;
    ~FreeOnExit() { std::free(p); }
  } freeArena{mem};
  char *arena = static_cast<char *>(mem);
  std::memset(arena, 0, static_cast<size_t>(arenaBytes));

  if ((rc = step.init(arena)) != 0)
    return error("the step's initialization failed (code " +
                 std::to_string(rc) + ")");

  for (int32_t i = 0; i < info.num_inputs; ++i)
    if (!(err = feedInput(opts.feed, info.inputs[i], arena)).empty())
      return error(err);

  if ((rc = step.microStep(arena, 1.0)) != 0) {
    std::string msg = "the step failed (code " + std::to_string(rc) + ")";
    if (const char *meaning = stepErrorMeaning(rc))
      msg += ": " + std::string(meaning);
    return error(msg);
  }

  if (info.has_backward) {
    const tcc_tensor_desc &loss = info.outputs[0];
    std::printf("loss %.9g\n", elementAsDouble(arena + loss.offset, loss.dtype));
  }
  for (int32_t i = 0; i < info.num_outputs; ++i) {
    const tcc_tensor_desc &d = info.outputs[i];
    std::printf("output %s %s\n", d.name, describe(d).c_str());
  }
  std::fflush(stdout);

  if (opts.haveDump) {
    if (info.has_backward &&
        !(err = dumpTensor(joinPath(opts.dump, "loss.npy"), info.outputs[0],
                           arena))
             .empty())
      return error(err);
    for (int32_t i = 0; i < info.num_outputs; ++i) {
      const tcc_tensor_desc &d = info.outputs[i];
      if (!(err = dumpTensor(joinPath(outputsDir, fileNameFor(d.name)), d,
                             arena))
               .empty())
        return error(err);
    }
    if (info.has_backward)
      for (int32_t i = 0; i < info.num_params; ++i) {
        const tcc_tensor_desc &g = info.grads[i];
        if (g.bytes == 0)
          continue;
        if (!(err = dumpTensor(
                  joinPath(gradsDir, fileNameFor(info.params[i].name)), g,
                  arena))
                 .empty())
          return error(err);
      }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  int rc = run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return rc ? rc : error("cannot write to standard output");
  return rc;
}
