// Standalone driver for runtime/onnx_save.h, run by check_onnx_save.py.
//
//   onnx_save_test MODEL OUT [--arena auto|f32|f64] [--skip NAME]...
//                  [--missing NAME] [--bad-dims NAME] [--params-from MODEL2]
//                  [--inline-limit BYTES]
//       Makes a parameter descriptor for every FLOAT, DOUBLE, FLOAT16 and
//       BFLOAT16 initializer of MODEL (but the skipped ones), with an arena of
//       float32 (float64 for DOUBLE initializers; `--arena` forces one) that
//       holds 2 * original + 1 (computed in the arena's type), and calls
//       tcc_save_onnx(MODEL, OUT). `--missing` adds a parameter the model does
//       not have; `--bad-dims` changes one parameter's first dim;
//       `--params-from` takes the initializers (and values) from MODEL2
//       instead, e.g. when MODEL is a corrupted copy of it.
//       `--inline-limit` calls tcc::onnx::saveOnnx with that limit instead
//       (past it, the tensors' data goes to OUT.data). Exit 0 on
//       success; 1 with the message on stderr otherwise.
//
//   onnx_save_test --convert F32.bin F64.bin OUTDIR
//       Converts the float32 and float64 arrays to float16 and bfloat16 bit
//       patterns: OUTDIR/{f32,f64}_{f16,bf16}.bin.
//
//   onnx_save_test --fuzz MODEL WORKDIR N [SEED]
//       N runs of tcc_save_onnx on corrupted copies of MODEL (bytes flipped,
//       truncated, overwritten with 0xFF runs, spliced): each must return 0
//       and write the output, or return non-zero with a message and leave no
//       output and no temporary. Exit 1 on any violation.
//
//   g++ -std=c++17 -O2 -fno-exceptions -Wall -Wextra -I/work/main
//       runtime/onnx_save.cpp test/runtime/onnx_save_test.cpp -o /tmp/onnx_save_test
#include "runtime/onnx_save.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using tcc::onnx::Initializer;

namespace {

/// Whether a temporary of the writer's (".NAME.tmp.XXXXXX" beside `p`) is
/// left in p's folder.
bool temporaryLeft(const std::string &p) {
  size_t slash = p.rfind('/');
  std::string dir = slash == std::string::npos ? "." : p.substr(0, slash);
  std::string prefix = "." + p.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp.";
  DIR *d = opendir(dir.c_str());
  bool found = false;
  while (d && !found)
    if (struct dirent *e = readdir(d))
      found = std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    else
      break;
  if (d)
    closedir(d);
  return found;
}

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

bool readAll(const std::string &path, std::string &out) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return false;
  out.clear();
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}

bool writeAllTo(const std::string &path, const std::string &data) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  return std::fclose(f) == 0 && ok;
}

double element(const Initializer &in, size_t i) {
  const char *p = in.data.data();
  switch (in.dataType) {
  case 1: {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  case 11: {
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    return d;
  }
  case 10: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return tcc::onnx::fromFloat16(h);
  }
  default: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return tcc::onnx::fromBFloat16(h);
  }
  }
}

uint64_t elemBytes(int32_t t) {
  return t == 1 ? 4 : t == 11 ? 8 : 2;
}

/// A fake step: descriptors and an arena.
struct FakeStep {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> dims;
  std::vector<tcc_tensor_desc> descs;
  std::vector<double> arenaStore; // 8-byte aligned
  tcc_step_info info{};

  const void *arena() const { return arenaStore.data(); }
};

struct Options {
  std::string arena = "auto";
  std::vector<std::string> skip;
  std::string missing, badDims, paramsFrom;
};

/// Builds the fake step for the float initializers of `model`. Returns "" on
/// success.
std::string buildStep(const std::string &model, const Options &opt,
                      FakeStep &s) {
  std::vector<Initializer> inits;
  std::string why = tcc::onnx::listInitializers(model, inits);
  if (!why.empty())
    return why;
  std::vector<const Initializer *> chosen;
  for (const Initializer &in : inits) {
    bool isFloat = in.dataType == 1 || in.dataType == 10 ||
                   in.dataType == 11 || in.dataType == 16;
    bool skipped = false;
    for (const std::string &k : opt.skip)
      skipped |= k == in.name;
    if (isFloat && !skipped)
      chosen.push_back(&in);
  }
  std::vector<int32_t> dtypes;
  std::vector<uint64_t> counts, offsets;
  uint64_t off = 0;
  for (const Initializer *in : chosen) {
    uint64_t n = 1;
    for (int64_t d : in->dims)
      n *= static_cast<uint64_t>(d);
    if (!in->haveData || in->data.size() != n * elemBytes(in->dataType))
      return "initializer '" + in->name + "': no data or the wrong amount";
    int32_t dt = opt.arena == "f32"   ? 1
                 : opt.arena == "f64" ? 11
                 : in->dataType == 11 ? 11
                                      : 1;
    s.names.push_back(in->name);
    s.dims.push_back(in->dims);
    if (in->name == opt.badDims) {
      if (s.dims.back().empty())
        return "--bad-dims: '" + in->name + "' is a scalar";
      s.dims.back()[0] += 1;
      n = n / static_cast<uint64_t>(in->dims[0] ? in->dims[0] : 1) *
          static_cast<uint64_t>(s.dims.back()[0]);
    }
    dtypes.push_back(dt);
    counts.push_back(n);
    offsets.push_back(off);
    off += (n * elemBytes(dt) + 63) / 64 * 64;
  }
  if (!opt.missing.empty()) {
    s.names.push_back(opt.missing);
    s.dims.push_back({1});
    dtypes.push_back(1);
    counts.push_back(1);
    offsets.push_back(off);
    off += 64;
  }
  s.arenaStore.assign(off / 8 + 1, 0.0);
  char *arena = reinterpret_cast<char *>(s.arenaStore.data());
  for (size_t k = 0; k < chosen.size(); ++k) {
    const Initializer &in = *chosen[k];
    size_t n = in.data.size() / elemBytes(in.dataType);
    if (counts[k] < n)
      n = static_cast<size_t>(counts[k]);
    for (size_t i = 0; i < n; ++i) {
      double v = element(in, i);
      if (dtypes[k] == 1) {
        float x = static_cast<float>(v) * 2.0f + 1.0f;
        std::memcpy(arena + offsets[k] + 4 * i, &x, 4);
      } else {
        double x = v * 2.0 + 1.0;
        std::memcpy(arena + offsets[k] + 8 * i, &x, 8);
      }
    }
  }
  s.descs.resize(s.names.size());
  for (size_t k = 0; k < s.names.size(); ++k) {
    tcc_tensor_desc &d = s.descs[k];
    d.name = s.names[k].c_str();
    d.dtype = dtypes[k];
    d.rank = static_cast<int32_t>(s.dims[k].size());
    d.dims = s.dims[k].data();
    d.offset = offsets[k];
    d.bytes = counts[k] * elemBytes(dtypes[k]);
  }
  s.info.abi_version = TCC_STEP_ABI_VERSION;
  s.info.model = model.c_str();
  s.info.model_path = model.c_str();
  s.info.target = "cpu";
  s.info.arena_bytes = s.arenaStore.size() * sizeof(double);
  s.info.num_params = static_cast<int32_t>(s.descs.size());
  s.info.params = s.descs.data();
  s.info.optimizer = "";
  return "";
}

int usage() {
  std::fprintf(stderr,
               "usage: onnx_save_test MODEL OUT [--arena auto|f32|f64] "
               "[--skip NAME]... [--missing NAME] [--bad-dims NAME] "
               "[--params-from MODEL2]\n"
               "       onnx_save_test --convert F32.bin F64.bin OUTDIR\n"
               "       onnx_save_test --fuzz MODEL WORKDIR N [SEED]\n");
  return 2;
}

int convertMode(const std::string &f32Path, const std::string &f64Path,
                const std::string &dir) {
  std::string a, b;
  if (!readAll(f32Path, a) || !readAll(f64Path, b) || a.size() % 4 ||
      b.size() % 8) {
    std::fprintf(stderr, "cannot read the inputs\n");
    return 1;
  }
  std::string o[4];
  for (size_t i = 0; i < a.size() / 4; ++i) {
    float f;
    std::memcpy(&f, &a[4 * i], 4);
    uint16_t h = tcc::onnx::toFloat16(f), g = tcc::onnx::toBFloat16(f);
    o[0].append(reinterpret_cast<const char *>(&h), 2);
    o[1].append(reinterpret_cast<const char *>(&g), 2);
  }
  for (size_t i = 0; i < b.size() / 8; ++i) {
    double d;
    std::memcpy(&d, &b[8 * i], 8);
    uint16_t h = tcc::onnx::toFloat16(d), g = tcc::onnx::toBFloat16(d);
    o[2].append(reinterpret_cast<const char *>(&h), 2);
    o[3].append(reinterpret_cast<const char *>(&g), 2);
  }
  const char *names[4] = {"f32_f16.bin", "f32_bf16.bin", "f64_f16.bin",
                          "f64_bf16.bin"};
  for (int k = 0; k < 4; ++k)
    if (!writeAllTo(dir + "/" + names[k], o[k])) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), names[k]);
      return 1;
    }
  return 0;
}

uint64_t rngState = 88172645463325252ull;
uint64_t rnd() {
  rngState ^= rngState << 13;
  rngState ^= rngState >> 7;
  rngState ^= rngState << 17;
  return rngState;
}

int fuzzMode(const std::string &model, const std::string &dir, long runs,
             uint64_t seed) {
  rngState ^= seed * 0x9E3779B97F4A7C15ull;
  FakeStep s;
  std::string why = buildStep(model, Options(), s);
  std::string orig;
  if (!why.empty() || !readAll(model, orig) || orig.empty()) {
    std::fprintf(stderr, "fuzz: cannot use %s: %s\n", model.c_str(),
                 why.c_str());
    return 1;
  }
  // The corrupted model sits next to the original, so that relative
  // external-data locations still resolve.
  std::string mdir = model.substr(0, model.rfind('/') + 1);
  std::string in = mdir + "fuzz_in.onnx";
  std::string out = dir + "/fuzz_out.onnx";
  long ok = 0, errors = 0, bad = 0;
  for (long it = 0; it < runs; ++it) {
    std::string m = orig;
    int muts = 1 + static_cast<int>(rnd() % 3);
    for (int k = 0; k < muts && !m.empty(); ++k) {
      size_t pos = rnd() % m.size();
      switch (rnd() % 5) {
      case 0: // truncate
        m.resize(pos);
        break;
      case 1: // flip a byte
        m[pos] = static_cast<char>(m[pos] ^ (1 + rnd() % 255));
        break;
      case 2: { // a run of 0xFF (huge varints and lengths)
        size_t n = 1 + rnd() % 12;
        for (size_t i = 0; i < n && pos + i < m.size(); ++i)
          m[pos + i] = static_cast<char>(0xFF);
        break;
      }
      case 3: { // splice in a random chunk of the model
        size_t from = rnd() % m.size(), n = 1 + rnd() % 64;
        std::string chunk = orig.substr(from % orig.size(), n);
        m.insert(pos, chunk);
        break;
      }
      default: // a random byte
        m[pos] = static_cast<char>(rnd());
        break;
      }
    }
    if (!writeAllTo(in, m)) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", in.c_str());
      return 1;
    }
    ::unlink(out.c_str());
    char err[512] = "";
    int rc = tcc_save_onnx(in.c_str(), out.c_str(), &s.info, s.arena(), err,
                           sizeof err);
    bool outExists = exists(out), tmpExists = temporaryLeft(out);
    if (rc == 0 && outExists && !tmpExists) {
      ++ok;
    } else if (rc != 0 && !outExists && !tmpExists && err[0]) {
      ++errors;
    } else {
      ++bad;
      std::fprintf(stderr, "fuzz run %ld: rc %d, output %d, tmp %d, '%s'\n",
                   it, rc, outExists, tmpExists, err);
    }
  }
  ::unlink(in.c_str());
  ::unlink(out.c_str());
  std::printf("fuzz: %ld runs, %ld written, %ld refused, %ld violations\n",
              runs, ok, errors, bad);
  return bad ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--convert") == 0) {
    if (argc != 5)
      return usage();
    return convertMode(argv[2], argv[3], argv[4]);
  }
  if (argc >= 2 && std::strcmp(argv[1], "--fuzz") == 0) {
    if (argc != 5 && argc != 6)
      return usage();
    return fuzzMode(argv[2], argv[3], std::atol(argv[4]),
                    argc == 6 ? std::strtoull(argv[5], nullptr, 10) : 0);
  }
  if (argc < 3)
    return usage();
  std::string model = argv[1], out = argv[2];
  Options opt;
  uint64_t inlineLimit = 0; // 0: tcc_save_onnx's (2 GiB)
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc)
      return usage();
    std::string v = argv[++i];
    if (a == "--arena" && (v == "auto" || v == "f32" || v == "f64"))
      opt.arena = v;
    else if (a == "--skip")
      opt.skip.push_back(v);
    else if (a == "--missing")
      opt.missing = v;
    else if (a == "--bad-dims")
      opt.badDims = v;
    else if (a == "--params-from")
      opt.paramsFrom = v;
    else if (a == "--inline-limit")
      inlineLimit = std::strtoull(v.c_str(), nullptr, 10);
    else
      return usage();
  }
  FakeStep s;
  std::string why =
      buildStep(opt.paramsFrom.empty() ? model : opt.paramsFrom, opt, s);
  if (!why.empty()) {
    std::fprintf(stderr, "onnx_save_test: %s\n", why.c_str());
    return 1;
  }
  char err[1024] = "";
  int rc = inlineLimit ? tcc::onnx::saveOnnx(model.c_str(), out.c_str(), &s.info, s.arena(),
                                             err, sizeof err, inlineLimit)
                       : tcc_save_onnx(model.c_str(), out.c_str(), &s.info, s.arena(), err,
                                       sizeof err);
  if (rc != 0) {
    std::fprintf(stderr, "onnx_save_test: %s\n", err);
    return 1;
  }
  std::printf("saved %d parameters to %s\n", s.info.num_params, out.c_str());
  return 0;
}
