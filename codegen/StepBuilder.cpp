//===- StepBuilder.cpp - compile an emitted step into step.so -------------===//

#include "codegen/StepBuilder.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Chrono.h"

#include <csignal>
#include <cstring>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

using namespace mlir;

namespace {
struct EmbeddedFile {
  const char *name;
  const char *text;
};
const EmbeddedFile kRuntimeFiles[] = {
#include "codegen/EmbeddedRuntime.inc"
};
} // namespace

static LogicalResult writeFile(StringRef path, StringRef data, Location loc) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return emitError(loc) << "cannot write " << path << ": " << ec.message();
  os << data;
  os.close();
  if (os.has_error()) {
    os.clear_error();
    return emitError(loc) << "writing " << path << " failed";
  }
  return success();
}

static bool isCuda(const tcc::EmittedStep &step) { return step.target == "cuda"; }

/// The flags that compile one unit of `step` (before -c SOURCE -o OBJECT).
static std::vector<std::string> compileFlags(const tcc::EmittedStep &step,
                                             const tcc::StepBuildOptions &options) {
  if (isCuda(step) && options.cudaEmulation)
    return {"-std=c++17", "-O2", "-fno-strict-aliasing", "-DTCC_CUDA_EMU", "-x", "c++",
            "-I", "emu", "-I", ".", "-fPIC", "-fvisibility=hidden"};
  if (isCuda(step))
    return {"-std=c++17", "-O3", "-arch=sm_" + options.cudaArch, "-diag-suppress=177,550",
            "-Xcompiler", "-fPIC,-fvisibility=hidden", "-I", "."};
  // -O3, not -O2: the reference GEMM's inner loops are vectorized and
  // unrolled, 30% faster on the fusion benchmark's larger GPT, and no longer
  // 25% slower or faster depending on where the rest of the step's code puts
  // them (measured: 2.45 s against 3.57 s or 4.45 s). Without -ffast-math
  // the arithmetic, and so the results, are the same.
  return {"-std=c++17", "-O3", "-fPIC", "-fvisibility=hidden", "-I", "."};
}

std::string mlir::tcc::prebuiltRuntimeVariant(const EmittedStep &step,
                                              const StepBuildOptions &options) {
  if (!isCuda(step))
    return "";
  return options.cudaEmulation ? "cuda-emu" : "cuda-sm_" + options.cudaArch;
}

/// The units of a CUDA step's fixed half (runtime/cuda), each one object.
static const char *const kFixedUnits[] = {"step_host", "gemm"};

std::vector<tcc::BuildCommand>
mlir::tcc::stepBuildCommands(const EmittedStep &step, const StepBuildOptions &options,
                             ArrayRef<std::string> prebuiltFixed) {
  std::vector<std::string> flags = compileFlags(step, options);
  if (!isCuda(step)) {
    // One unit: the generated code and the header-only kernel library.
    BuildCommand c;
    c.args = flags;
    for (const char *a : {"-shared", "-o", "step.so", "step.cpp"})
      c.args.push_back(a);
    c.log = "compile.log";
    return {c};
  }
  // The generated half (step.cu) and the fixed half's units, compiled in
  // parallel unless tcc has them compiled already, then linked.
  std::vector<BuildCommand> commands;
  auto compile = [&](StringRef unit) {
    BuildCommand c;
    c.args = flags;
    for (std::string a : {std::string("-c"), unit.str() + ".cu", std::string("-o"), unit.str() + ".o"})
      c.args.push_back(a);
    c.log = "compile-" + unit.str() + ".log";
    c.object = unit.str() + ".o";
    commands.push_back(std::move(c));
  };
  compile("step");
  BuildCommand link;
  link.link = true;
  link.args = {"-shared", "-o", "step.so", "step.o"};
  if (!prebuiltFixed.empty()) {
    link.args.insert(link.args.end(), prebuiltFixed.begin(), prebuiltFixed.end());
  } else {
    for (const char *unit : kFixedUnits) {
      compile(unit);
      link.args.push_back(std::string(unit) + ".o");
    }
  }
  if (options.cudaEmulation)
    link.args.push_back("-fPIC");
  else
    for (std::string a : {"-arch=sm_" + options.cudaArch, std::string("-lcublasLt"),
                          std::string("-lcudart")})
      link.args.push_back(a);
  link.log = "link.log";
  commands.push_back(std::move(link));
  return commands;
}

LogicalResult mlir::tcc::writeStepSources(const EmittedStep &step, StringRef dir,
                                             Location loc,
                                             const StepBuildOptions &options) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return emitError(loc) << "cannot create " << dir << ": " << ec.message();
  SmallString<256> path(dir);
  llvm::sys::path::append(path, isCuda(step) ? "step.cu" : "step.cpp");
  if (failed(writeFile(path, step.source, loc)))
    return failure();
  std::string script = "#!/bin/sh\n# Builds step.so from this folder (written by tcc).\n"
                       "set -e\ncd \"$(dirname \"$0\")\"\n";
  const bool nvcc = isCuda(step) && !options.cudaEmulation;
  for (const BuildCommand &c : stepBuildCommands(step, options, {})) {
    script += nvcc ? "${NVCC:-nvcc}" : "${CXX:-c++}";
    for (const std::string &a : c.args)
      script += " " + a;
    script += "\n";
  }
  SmallString<256> sh(dir);
  llvm::sys::path::append(sh, "build.sh");
  if (failed(writeFile(sh, script, loc)))
    return failure();
  llvm::sys::fs::setPermissions(sh, llvm::sys::fs::all_read | llvm::sys::fs::all_exe |
                                        llvm::sys::fs::owner_write);
  for (const EmbeddedFile &f : kRuntimeFiles) {
    StringRef name(f.name);
    // The emulation's cuda_runtime.h etc. live in emu/, used only when asked;
    // the CUDA step's fixed half only with the CUDA target.
    if (name.starts_with("emu/")) {
      if (!isCuda(step) || !options.cudaEmulation)
        continue;
      SmallString<256> sub(dir);
      llvm::sys::path::append(sub, "emu");
      if (std::error_code ec = llvm::sys::fs::create_directories(sub))
        return emitError(loc) << "cannot create " << sub << ": " << ec.message();
    }
    if ((name.ends_with(".cu") || name == "step_host.h") && !isCuda(step))
      continue;
    SmallString<256> p(dir);
    llvm::sys::path::append(p, f.name);
    if (failed(writeFile(p, f.text, loc)))
      return failure();
  }
  return success();
}

static std::string findCompiler(const tcc::StepBuildOptions &options) {
  if (!options.compiler.empty())
    return options.compiler;
  if (const char *cxx = std::getenv("CXX"))
    if (*cxx)
      if (auto p = llvm::sys::findProgramByName(cxx))
        return *p;
  for (const char *name : {"c++", "g++", "clang++"})
    if (auto p = llvm::sys::findProgramByName(name))
      return *p;
  return "";
}

static std::string findNvcc(const tcc::StepBuildOptions &options) {
  if (!options.nvcc.empty())
    return options.nvcc;
  if (const char *env = std::getenv("CUDACXX"))
    if (*env)
      if (auto p = llvm::sys::findProgramByName(env))
        return *p;
  if (llvm::sys::fs::can_execute("/usr/local/cuda/bin/nvcc"))
    return "/usr/local/cuda/bin/nvcc";
  if (auto p = llvm::sys::findProgramByName("nvcc"))
    return *p;
  return "";
}

/// The cache folder of the fixed half of a CUDA step for this runtime,
/// compiler and flags: $TCC_CACHE_DIR (empty or "off": no cache), else
/// $XDG_CACHE_HOME/tcc, else ~/.cache/tcc; "" when there is none.
static SmallString<256> runtimeCacheDir(const tcc::EmittedStep &step,
                                        const tcc::StepBuildOptions &options,
                                        StringRef compiler) {
  SmallString<256> root;
  if (const char *env = std::getenv("TCC_CACHE_DIR")) {
    if (!*env || StringRef(env) == "off")
      return {};
    root = env;
  } else if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    root = xdg;
    llvm::sys::path::append(root, "tcc");
  } else if (!llvm::sys::path::home_directory(root)) {
    return {};
  } else {
    llvm::sys::path::append(root, ".cache", "tcc");
  }
  // The key: every runtime file's text, the compiler (its real path, size
  // and time, so an upgrade in place is a new key) and the flags.
  std::string key;
  for (const EmbeddedFile &f : kRuntimeFiles)
    key += std::string(f.name) + '\0' + f.text + '\0';
  SmallString<256> real;
  llvm::sys::fs::file_status st;
  if (llvm::sys::fs::real_path(compiler, real) || llvm::sys::fs::status(real, st))
    return {};
  key += real.str().str() + '\0' + std::to_string(st.getSize()) + '\0' +
         std::to_string(llvm::sys::toTimeT(st.getLastModificationTime())) + '\0';
  for (const std::string &a : compileFlags(step, options))
    key += a + '\0';
  llvm::sys::path::append(root, "runtime-" + prebuiltRuntimeVariant(step, options) + "-" +
                                    llvm::utohexstr(llvm::xxh3_64bits(key)));
  return root;
}

namespace {
/// While a step builds: SIGINT, SIGTERM and SIGHUP stop the compilers tcc
/// started (the handler only records the signal and kills them); the build
/// then fails, its folder and any partial output are removed as on any
/// failure, and the signal is raised again with its default action, so tcc
/// ends as the signal asks.
volatile sig_atomic_t gBuildSignal = 0;
constexpr int kMaxChildren = 16;
volatile pid_t gChildren[kMaxChildren];
volatile sig_atomic_t gNumChildren = 0;

void onBuildSignal(int sig) {
  gBuildSignal = sig;
  for (int i = 0; i < gNumChildren; ++i)
    if (gChildren[i] > 0)
      ::kill(gChildren[i], SIGTERM);
}

class BuildSignals {
public:
  BuildSignals() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = onBuildSignal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i)
      ::sigaction(kSignals[i], &sa, &old[i]);
  }
  ~BuildSignals() {
    for (int i = 0; i < 3; ++i)
      ::sigaction(kSignals[i], &old[i], nullptr);
    gNumChildren = 0;
    if (int sig = gBuildSignal) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    }
  }
  static bool interrupted() { return gBuildSignal != 0; }
  static void started(pid_t pid) {
    if (gNumChildren < kMaxChildren) {
      gChildren[gNumChildren] = pid;
      gNumChildren = gNumChildren + 1;
    }
    if (gBuildSignal) // it came before the child was recorded
      ::kill(pid, SIGTERM);
  }
  static void finished() { gNumChildren = 0; }

private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old[3];
};
} // namespace

LogicalResult mlir::tcc::buildStepLibrary(const EmittedStep &step,
                                             StringRef weights,
                                             StringRef outPath, Location loc,
                                             const StepBuildOptions &options) {
  const bool nvcc = isCuda(step) && !options.cudaEmulation;
  std::string cxx = nvcc ? findNvcc(options) : findCompiler(options);
  if (cxx.empty() && nvcc)
    return emitError(loc) << "nvcc not found (looked for $CUDACXX, "
                             "/usr/local/cuda/bin/nvcc and PATH); the CUDA "
                             "target needs it to build "
                          << outPath
                          << " (use --emit=source -o DIR and build it on a "
                             "machine with the CUDA toolkit, or --target=cpu "
                             "for the CPU step)";
  if (cxx.empty())
    return emitError(loc) << "no C++ compiler found (looked for $CXX, c++, "
                             "g++, clang++); the CPU target and the CUDA "
                             "emulation need one to build "
                          << outPath;
  // Declared before the folder's cleanup, so that a signal is raised again
  // only after the folder is gone.
  BuildSignals signals;
  SmallString<256> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("tcc-step", dir))
    return emitError(loc) << "cannot create a build folder: " << ec.message();
  auto cleanup = llvm::make_scope_exit([&] {
    if (!options.keepTemps)
      llvm::sys::fs::remove_directories(dir);
  });
  if (failed(writeStepSources(step, dir, loc, options)))
    return failure();
  SmallString<256> weightsPath(dir), source(dir), library(dir), log(dir);
  llvm::sys::path::append(weightsPath, "weights.bin");
  llvm::sys::path::append(source, isCuda(step) ? "step.cu" : "step.cpp");
  llvm::sys::path::append(library, "step.so");
  llvm::sys::path::append(log, "compile.log");
  if (failed(writeFile(weightsPath, weights, loc)))
    return failure();

  // The fixed half of a CUDA step is the same for every model: compiled once
  // per runtime, compiler and flags into tcc's cache, and reused.
  std::vector<std::string> cachedFixed;
  SmallString<256> cacheDir;
  if (isCuda(step)) {
    cacheDir = runtimeCacheDir(step, options, cxx);
    for (const char *unit : kFixedUnits) {
      SmallString<256> obj(cacheDir);
      llvm::sys::path::append(obj, std::string(unit) + ".o");
      if (cacheDir.empty() || !llvm::sys::fs::exists(obj)) {
        cachedFixed.clear();
        break;
      }
      cachedFixed.push_back(obj.str().str());
    }
  }
  std::vector<BuildCommand> commands = stepBuildCommands(step, options, cachedFixed);

  // The assembler's .incbin finds weights.bin relative to the working
  // folder of the compiler, so the compilers run inside the build folder;
  // the units at once, then the link.
  auto run = [&](ArrayRef<const BuildCommand *> batch) -> LogicalResult {
    std::vector<std::pair<llvm::sys::ProcessInfo, const BuildCommand *>> running;
    std::string message;
    SmallString<256> cwd;
    llvm::sys::fs::current_path(cwd);
    llvm::sys::fs::set_current_path(dir);
    for (const BuildCommand *c : batch) {
      std::vector<StringRef> argv = {cxx};
      argv.insert(argv.end(), c->args.begin(), c->args.end());
      SmallString<256> log(dir);
      llvm::sys::path::append(log, c->log);
      std::optional<StringRef> redirects[] = {std::nullopt, StringRef(log), StringRef(log)};
      llvm::sys::ProcessInfo pi =
          llvm::sys::ExecuteNoWait(cxx, argv, std::nullopt, redirects, 0, &message);
      if (pi.Pid > 0)
        BuildSignals::started(pi.Pid);
      running.push_back({pi, c});
    }
    llvm::sys::fs::set_current_path(cwd);
    LogicalResult result = success();
    for (auto &[pi, c] : running) {
      std::string waitMessage;
      int rc = pi.Pid ? llvm::sys::Wait(pi, std::nullopt, &waitMessage).ReturnCode : -1;
      if (BuildSignals::interrupted()) {
        if (succeeded(result))
          emitError(loc) << "interrupted: the build of " << outPath << " was stopped";
        result = failure();
        continue;
      }
      if (rc == 0 || failed(result))
        continue;
      SmallString<256> log(dir);
      llvm::sys::path::append(log, c->log);
      auto text = llvm::MemoryBuffer::getFile(log);
      std::string why = !waitMessage.empty() ? waitMessage : message;
      InFlightDiagnostic diag = emitError(loc)
                                << (c->link ? "linking" : "compiling") << " the "
                                << (nvcc ? "CUDA" : isCuda(step) ? "emulated CUDA" : "CPU")
                                << " step with " << cxx << " failed (exit code " << rc << ")"
                                << (why.empty() ? "" : ": " + why);
      if (text)
        diag.attachNote() << (*text)->getBuffer().take_back(4000);
      result = failure();
    }
    BuildSignals::finished();
    return result;
  };
  SmallVector<const BuildCommand *> units, links;
  for (const BuildCommand &c : commands)
    (c.link ? links : units).push_back(&c);
  if (failed(run(units)) || failed(run(links)))
    return failure();
  if (isCuda(step) && cachedFixed.empty() && !cacheDir.empty() &&
      !llvm::sys::fs::create_directories(cacheDir)) {
    // Into the cache through temporary names, so that a concurrent build
    // sees a whole object or none; a cache that cannot be written is only
    // slower.
    for (const char *unit : kFixedUnits) {
      SmallString<256> built(dir), tmp(cacheDir), obj(cacheDir);
      llvm::sys::path::append(built, std::string(unit) + ".o");
      llvm::sys::path::append(obj, std::string(unit) + ".o");
      llvm::sys::path::append(tmp, std::string(unit) + ".o.tmp-" + std::to_string(::getpid()));
      if (!llvm::sys::fs::copy_file(built, tmp))
        (void)llvm::sys::fs::rename(tmp, obj);
      llvm::sys::fs::remove(tmp);
    }
  }

  // Copy beside the destination (a name of this process's own), then rename
  // over it: never a partial file.
  SmallString<256> partial(outPath);
  partial += ".partial-" + std::to_string(::getpid());
  if (std::error_code ec = llvm::sys::fs::copy_file(library, partial)) {
    llvm::sys::fs::remove(partial); // a full disk leaves a piece of it
    return emitError(loc) << "cannot write " << partial << ": " << ec.message();
  }
  if (BuildSignals::interrupted()) {
    llvm::sys::fs::remove(partial);
    return emitError(loc) << "interrupted: " << outPath << " was not written";
  }
  if (std::error_code ec = llvm::sys::fs::rename(partial, outPath)) {
    llvm::sys::fs::remove(partial);
    return emitError(loc) << "cannot write " << outPath << ": " << ec.message();
  }
  if (options.keepTemps)
    llvm::errs() << "tcc: kept the build folder " << dir << "\n";
  return success();
}
