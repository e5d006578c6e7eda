//===- StepBuilder.cpp - compile an emitted step into step.so -------------===//

#include "codegen/StepBuilder.h"
#include "runtime/tcc_step.h"

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

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

/// Whether `unit` is the step's own code (step.cu, step_kernels.cu,
/// step.cpp) rather than a unit of its fixed half.
static bool isGenerated(StringRef unit) { return unit == "step" || unit == "step_kernels"; }

/// The flags that compile unit `unit` of `step` (before -c SOURCE -o
/// OBJECT); the fixed half's, which also key tcc's cache, by default.
static std::vector<std::string> compileFlags(const tcc::EmittedStep &step,
                                             const tcc::StepBuildOptions &options,
                                             StringRef unit = "") {
  if (isCuda(step) && options.cudaEmulation)
    return {"-std=c++17", "-O2", "-fno-strict-aliasing", "-DTCC_CUDA_EMU", "-x", "c++",
            "-I", "emu", "-I", ".", "-fPIC", "-fvisibility=hidden"};
  // -fno-math-errno: std::sqrt's errno path keeps the host compiler from
  // vectorising the host update's loops (runtime/host_optimizer.h; the
  // results are the same, nothing reads errno): bench/host_optimizer.py.
  // nvcc's -O is the host compiler's level only (cicc and ptxas optimise the
  // device code the same at any: the cubins are byte for byte equal). The
  // generated units' host code is the micro-step's sequence of launches
  // (which a CUDA graph captures once) and the kernels' launch stubs: at -O0
  // GPT-2 small's step.cu compiles in 3.2 s instead of 4.5 at -O1 and about
  // 6 at -O3 (bench/compile_time.py). The fixed half keeps -O3 for the host
  // optimizer's loops (runtime/host_optimizer.h).
  if (isCuda(step))
    return {"-std=c++17", isGenerated(unit) ? "-O0" : "-O3", "-arch=sm_" + options.cudaArch,
            "-diag-suppress=177,550",
            "-Xcompiler", "-fPIC,-fvisibility=hidden,-fno-math-errno", "-I", "."};
  // -O3, not -O2: the reference GEMM's inner loops are vectorized and
  // unrolled, 30% faster on the fusion benchmark's larger GPT, and no longer
  // 25% slower or faster depending on where the rest of the step's code puts
  // them (measured: 2.45 s against 3.57 s or 4.45 s). Without -ffast-math
  // the arithmetic, and so the results, are the same.
  // -fno-trapping-math and -fno-math-errno: nothing in a step reads
  // floating-point exceptions or errno, and without them GCC keeps a float
  // comparison's select a branch and std::sqrt a call, either of which
  // stops the vectoriser (exp_f32's clamps in runtime/cpu/kernels.h, AdamW's
  // square root); the arithmetic, and so the results, are the same.
  // TCC_CPU_PREBUILT_KERNELS: the kernels of the fixed half (kernels.cpp)
  // are declared, not compiled, in the step's unit (runtime/cpu/prebuilt.h).
  std::vector<std::string> flags = {"-std=c++17",        "-O3",  "-fno-trapping-math",
                                     "-fno-math-errno",   "-fPIC", "-fvisibility=hidden",
                                     "-DTCC_CPU_PREBUILT_KERNELS", "-I", "."};
  if (!options.cpuBlas.empty())
    flags.push_back("-DTCC_CPU_BLAS");
  return flags;
}

std::string mlir::tcc::configuredCpuBlas() {
#ifdef TCC_CPU_BLAS_LIBRARY
  if (llvm::sys::fs::exists(TCC_CPU_BLAS_LIBRARY))
    return TCC_CPU_BLAS_LIBRARY;
#endif
  return "";
}

/// The header a generated step includes first (runtime/*/step_prelude.*).
static StringRef preludeHeader(const tcc::EmittedStep &step) {
  return isCuda(step) ? "step_prelude.cuh" : "step_prelude.h";
}

/// Whether the step's compiler is GCC, which finds a precompiled
/// `<header>.gch` beside a header it includes (and, when the .gch does not
/// match its flags, silently reads the header instead). nvcc and clang get
/// none: clang looks for a PCH only where -include-pch names it.
static bool usesGccPch(const tcc::EmittedStep &step, const tcc::StepBuildOptions &options,
                       StringRef compiler) {
  if (isCuda(step) && !options.cudaEmulation)
    return false;
  SmallString<256> real;
  if (llvm::sys::fs::real_path(compiler, real))
    return false;
  StringRef name = llvm::sys::path::filename(real);
  return name.starts_with("g++") || name.contains("-g++");
}

/// Compiles the prelude as a precompiled header into `output`, with the
/// step's own flags (a .gch is used only by a compile with the same ones).
static tcc::BuildCommand preludeCommand(const tcc::EmittedStep &step,
                                        const tcc::StepBuildOptions &options,
                                        StringRef output) {
  tcc::BuildCommand c;
  for (const std::string &a : compileFlags(step, options))
    if (a != "-x" && a != "c++")
      c.args.push_back(a);
  for (std::string a : {std::string("-x"), std::string("c++-header"), preludeHeader(step).str(),
                        std::string("-o"), output.str()})
    c.args.push_back(a);
  c.log = "compile-prelude.log";
  c.optional = true;
  return c;
}

std::string mlir::tcc::prebuiltRuntimeVariant(const EmittedStep &step,
                                              const StepBuildOptions &options) {
  if (!isCuda(step))
    return "cpu";
  return options.cudaEmulation ? "cuda-emu" : "cuda-sm_" + options.cudaArch;
}

/// The units of a step's fixed half, each one object compiled once into
/// tcc's cache. CUDA (runtime/cuda): the host code (the arena and the
/// micro-step; the communicator and ZeRO-1), the GEMMs and the kernel
/// library's most used launchers (prebuilt.cuh); CPU (runtime/cpu): the
/// kernel library's kernels (prebuilt.h).
static ArrayRef<const char *> fixedUnits(const tcc::EmittedStep &step) {
  static const char *const kCuda[] = {"step_host", "step_comm", "gemm", "kernels"};
  static const char *const kCpu[] = {"kernels"};
  if (isCuda(step))
    return kCuda;
  return kCpu;
}

/// The source file of a unit.
static std::string unitSource(const tcc::EmittedStep &step, StringRef unit) {
  return unit.str() + (isCuda(step) ? ".cu" : ".cpp");
}

std::vector<tcc::BuildCommand>
mlir::tcc::stepBuildCommands(const EmittedStep &step, const StepBuildOptions &options,
                             ArrayRef<std::string> prebuiltFixed) {
  // The generated half (step.cu or step.cpp) and the fixed half's units,
  // compiled in parallel unless tcc has them compiled already, then linked.
  std::vector<BuildCommand> commands;
  auto compile = [&](StringRef unit) {
    BuildCommand c;
    c.args = compileFlags(step, options, unit);
    for (std::string a : {std::string("-c"), unitSource(step, unit), std::string("-o"),
                          unit.str() + ".o"})
      c.args.push_back(a);
    c.log = "compile-" + unit.str() + ".log";
    c.object = unit.str() + ".o";
    commands.push_back(std::move(c));
  };
  compile("step");
  BuildCommand link;
  link.link = true;
  link.args = {"-shared", "-o", "step.so", "step.o"};
  if (!step.kernelSource.empty()) {
    compile("step_kernels");
    link.args.push_back("step_kernels.o");
  }
  if (!prebuiltFixed.empty()) {
    link.args.insert(link.args.end(), prebuiltFixed.begin(), prebuiltFixed.end());
  } else {
    for (const char *unit : fixedUnits(step)) {
      compile(unit);
      link.args.push_back(std::string(unit) + ".o");
    }
  }
  link.log = "link.log";
  if (!isCuda(step)) {
    if (!options.cpuBlas.empty())
      link.args.push_back(options.cpuBlas);
    commands.push_back(std::move(link));
    return commands;
  }
  // -ldl: the fixed half loads NCCL with dlopen (comm.cuh).
  if (options.cudaEmulation)
    for (const char *a : {"-fPIC", "-ldl"})
      link.args.push_back(a);
  else
    for (std::string a : {"-arch=sm_" + options.cudaArch, std::string("-lcublasLt"),
                          std::string("-lcudart"), std::string("-ldl")})
      link.args.push_back(a);
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
  if (!step.kernelSource.empty()) {
    SmallString<256> k(dir);
    llvm::sys::path::append(k, "step_kernels.cu");
    if (failed(writeFile(k, step.kernelSource, loc)))
      return failure();
  }
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
    if ((name.ends_with(".cpp") || name == "prebuilt.h") && isCuda(step))
      continue; // the CPU step's fixed half
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

/// The cache folder of the fixed half of a CUDA step (and of the precompiled
/// prelude of a step the host compiler builds) for this runtime, compiler
/// and flags: $TCC_CACHE_DIR (empty or "off": no cache), else
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
  // NCCL's header decides whether an nvcc-built fixed half can join a world
  // of GPUs (runtime/cuda/comm.cuh: __has_include(<nccl.h>)), so where nvcc
  // finds one is part of the key: installing NCCL builds it anew.
  if (isCuda(step) && !options.cudaEmulation) {
    SmallString<256> toolkit = llvm::sys::path::parent_path(llvm::sys::path::parent_path(real));
    llvm::sys::path::append(toolkit, "include");
    for (StringRef dir : {StringRef(toolkit), StringRef("/usr/local/include"), StringRef("/usr/include")}) {
      SmallString<256> header(dir);
      llvm::sys::path::append(header, "nccl.h");
      llvm::sys::fs::file_status h;
      key += llvm::sys::fs::status(header, h) ? std::string("no nccl.h") + '\0'
                                               : header.str().str() + '\0' + std::to_string(h.getSize()) + '\0';
    }
  }
  llvm::sys::path::append(root, "runtime-" + mlir::tcc::prebuiltRuntimeVariant(step, options) + "-" +
                                    llvm::utohexstr(llvm::xxh3_64bits(key)));
  return root;
}

namespace {
/// While a step builds: SIGINT, SIGTERM and SIGHUP stop the compilers tcc
/// started (the handler only records the signal; the build's wait stops
/// them); the build then fails, its folder and any partial output are
/// removed as on any failure, and the signal is raised again with its
/// default action, so tcc ends as the signal asks.
volatile sig_atomic_t gBuildSignal = 0;

void onBuildSignal(int sig) { gBuildSignal = sig; }

/// SIGTERM to `root` and every process below it, found through /proc while
/// `root` still lives: gcc's driver does not pass SIGTERM on to cc1plus,
/// which would go on compiling, orphaned. (The compilers stay in tcc's
/// process group, so a signal to the group, or a SIGKILL of it, reaches
/// them as before.)
void killTree(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parents; // (pid, ppid)
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it("/proc", ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef name = llvm::sys::path::filename(it->path());
    int pid = 0;
    if (name.getAsInteger(10, pid))
      continue;
    auto stat = llvm::MemoryBuffer::getFileAsStream(it->path() + "/stat");
    if (!stat)
      continue;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    StringRef text = (*stat)->getBuffer();
    size_t close = text.rfind(')');
    if (close == StringRef::npos)
      continue;
    SmallVector<StringRef> fields;
    text.drop_front(close + 1).split(fields, ' ', -1, false);
    int ppid = 0;
    if (fields.size() > 1 && !fields[1].getAsInteger(10, ppid))
      parents.push_back({pid, ppid});
  }
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i)
    for (auto [pid, ppid] : parents)
      if (ppid == tree[i])
        tree.push_back(pid);
  for (pid_t pid : tree)
    ::kill(pid, SIGTERM);
}

/// A compiler tcc started.
struct Child {
  pid_t pid = -1;
  std::string error; // why it could not start
};

Child spawnCompiler(const std::string &compiler, llvm::ArrayRef<std::string> args,
                    llvm::StringRef log) {
  std::vector<char *> argv;
  argv.push_back(const_cast<char *>(compiler.c_str()));
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  std::string logPath = log.str();
  posix_spawn_file_actions_t files;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_init(&attr);
  Child child;
  int err = ::posix_spawn(&child.pid, compiler.c_str(), &files, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (err != 0) {
    child.pid = -1;
    child.error = std::string("cannot run it: ") + std::strerror(err);
  }
  return child;
}

/// Its exit code, or -1 with `why` set when a signal ended it. When tcc is
/// interrupted (before or during the wait), the compiler and what it runs
/// are stopped first.
int waitCompiler(pid_t pid, std::string &why) {
  int status = 0;
  bool stopped = false;
  for (;;) {
    if (gBuildSignal && !stopped) {
      killTree(pid);
      stopped = true;
    }
    if (::waitpid(pid, &status, 0) >= 0)
      break;
    if (errno != EINTR) {
      why = std::string("waiting for it failed: ") + std::strerror(errno);
      return -1;
    }
  }
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    why = std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
  return -1;
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
    if (int sig = gBuildSignal) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    }
  }
  static bool interrupted() { return gBuildSignal != 0; }

private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old[3];
};
} // namespace

/// The compiler that builds `step`: nvcc for a CUDA step, the host C++
/// compiler for a CPU step or an emulated one; "" after a diagnostic when
/// there is none.
static std::string stepCompiler(const tcc::EmittedStep &step, const tcc::StepBuildOptions &options,
                                StringRef outPath, Location loc) {
  const bool nvcc = isCuda(step) && !options.cudaEmulation;
  std::string cxx = nvcc ? findNvcc(options) : findCompiler(options);
  if (cxx.empty() && nvcc)
    emitError(loc) << "nvcc not found (looked for $CUDACXX, "
                      "/usr/local/cuda/bin/nvcc and PATH); the CUDA "
                      "target needs it to build "
                   << outPath
                   << " (use --emit=source -o DIR and build it on a "
                      "machine with the CUDA toolkit, or --target=cpu "
                      "for the CPU step)";
  else if (cxx.empty())
    emitError(loc) << "no C++ compiler found (looked for $CXX, c++, "
                      "g++, clang++); the CPU target and the CUDA "
                      "emulation need one to build "
                   << outPath;
  return cxx;
}

/// Copies `from` to `to` through a temporary name beside `to`, so that a
/// reader sees the whole file or none; a failure leaves `to` as it was.
static std::error_code copyWhole(StringRef from, StringRef to) {
  SmallString<256> tmp(to);
  tmp += ".tmp-" + std::to_string(::getpid());
  std::error_code ec = llvm::sys::fs::copy_file(from, tmp);
  if (!ec)
    ec = llvm::sys::fs::rename(tmp, to);
  llvm::sys::fs::remove(tmp);
  return ec;
}

namespace {
/// tcc's cache of what is the same for every step of one runtime, compiler
/// and flags (runtimeCacheDir): the fixed half's objects and, for GCC, the
/// precompiled prelude. A build looks up what the cache has, compiles what
/// it lacks (one tcc at a time: the others wait on the folder's lock, then
/// find it there), and stores it afterwards. A cache that cannot be read or
/// written only makes builds slower.
class RuntimeCache {
public:
  RuntimeCache(const tcc::EmittedStep &step, const tcc::StepBuildOptions &options,
               StringRef compiler)
      : step(step), dir(runtimeCacheDir(step, options, compiler)),
        gccPch(!dir.empty() && usesGccPch(step, options, compiler)) {
    pch = failedPch = dir;
    llvm::sys::path::append(pch, preludeHeader(step).str() + ".gch");
    llvm::sys::path::append(failedPch, preludeHeader(step).str() + ".gch.failed");
    lookUp();
  }
  ~RuntimeCache() {
    if (lock >= 0)
      ::close(lock); // releases the lock
  }

  /// The cached objects of the fixed half; empty when it must be compiled.
  ArrayRef<std::string> fixedObjects() const { return fixed; }
  /// Whether this build compiles the precompiled prelude, for the next ones.
  bool buildsPch() const { return buildPch; }
  /// The prelude's compile failed: the compiler is not asked again.
  void pchFailed() {
    buildPch = false;
    if (BuildSignals::interrupted())
      return;
    std::error_code ec;
    llvm::raw_fd_ostream marker(failedPch, ec);
  }

  /// When the cache lacks something, takes the folder's lock (waiting for
  /// another tcc that holds it) and looks again. Fails only when
  /// interrupted while waiting.
  LogicalResult lockIfMissing(Location loc) {
    if (dir.empty() || (!buildPch && !fixed.empty()) || llvm::sys::fs::create_directories(dir))
      return success();
    SmallString<256> lockPath(dir);
    llvm::sys::path::append(lockPath, ".lock");
    lock = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock >= 0 && ::flock(lock, LOCK_EX | LOCK_NB) != 0) {
      // Progress for a terminal only: logs and tests see the same lines
      // whichever build came first.
      if (llvm::errs().is_displayed())
        llvm::errs() << "tcc: waiting for another tcc to compile the runtime into " << dir << "\n";
      while (::flock(lock, LOCK_EX) != 0) {
        if (errno != EINTR || BuildSignals::interrupted())
          return emitError(loc) << (BuildSignals::interrupted() ? "interrupted" : "cannot lock")
                                << " while waiting for " << dir;
      }
    }
    lookUp(); // what the other tcc compiled meanwhile
    if (fixed.empty() && llvm::errs().is_displayed())
      llvm::errs() << "tcc: compiling the " << (isCuda(step) ? "CUDA" : "CPU")
                   << " step's fixed half into " << dir
                   << " (once for this compiler and its flags)\n";
    return success();
  }

  /// Links the cached precompiled prelude into `buildDir`, beside the
  /// header (GCC checks that it matches the compile's flags, and else reads
  /// the header).
  void linkPchInto(StringRef buildDir) const {
    if (!gccPch || buildPch || !llvm::sys::fs::exists(pch))
      return;
    SmallString<256> linked(buildDir);
    llvm::sys::path::append(linked, preludeHeader(step).str() + ".gch");
    (void)llvm::sys::fs::create_link(pch, linked);
  }

  /// After a successful build in `buildDir`: stores what the cache lacked
  /// (the prelude compiled as `builtPch`, the fixed half's objects).
  void store(StringRef buildDir, StringRef builtPch) const {
    if (dir.empty() || llvm::sys::fs::create_directories(dir))
      return;
    if (buildPch) {
      SmallString<256> built(buildDir);
      llvm::sys::path::append(built, builtPch);
      (void)copyWhole(built, pch);
    }
    if (!fixed.empty())
      return;
    for (const char *unit : fixedUnits(step)) {
      SmallString<256> built(buildDir), obj(dir);
      llvm::sys::path::append(built, std::string(unit) + ".o");
      llvm::sys::path::append(obj, std::string(unit) + ".o");
      (void)copyWhole(built, obj);
    }
  }

private:
  void lookUp() {
    buildPch = gccPch && !llvm::sys::fs::exists(pch) && !llvm::sys::fs::exists(failedPch);
    fixed.clear();
    if (dir.empty())
      return;
    for (const char *unit : fixedUnits(step)) {
      SmallString<256> obj(dir);
      llvm::sys::path::append(obj, std::string(unit) + ".o");
      if (!llvm::sys::fs::exists(obj)) {
        fixed.clear();
        return;
      }
      fixed.push_back(obj.str().str());
    }
  }

  const tcc::EmittedStep &step;
  SmallString<256> dir;
  const bool gccPch; // the compiler is GCC and there is a cache
  SmallString<256> pch, failedPch;
  bool buildPch = false;
  std::vector<std::string> fixed;
  int lock = -1;
};

/// One batch of a step's build: its commands run at once with `compiler`
/// inside `dir` (the assembler's .incbin finds weights.bin relative to the
/// compiler's working folder); the first failure is reported with the end
/// of its log.
struct BuildBatch {
  const tcc::EmittedStep &step;
  const tcc::StepBuildOptions &options;
  StringRef compiler, dir, outPath;
  Location loc;
  RuntimeCache &cache;

  LogicalResult run(ArrayRef<const tcc::BuildCommand *> batch) const {
    std::vector<std::pair<Child, const tcc::BuildCommand *>> running;
    SmallString<256> cwd;
    llvm::sys::fs::current_path(cwd);
    llvm::sys::fs::set_current_path(dir);
    for (const tcc::BuildCommand *c : batch) {
      if (BuildSignals::interrupted())
        break; // the wait below reports it
      running.push_back({spawnCompiler(compiler.str(), c->args, logOf(*c)), c});
    }
    llvm::sys::fs::set_current_path(cwd);
    LogicalResult result = success();
    for (auto &[child, c] : running) {
      std::string why = child.error;
      int rc = child.pid > 0 ? waitCompiler(child.pid, why) : -1;
      if (BuildSignals::interrupted()) {
        if (succeeded(result))
          emitError(loc) << "interrupted: the build of " << outPath << " was stopped";
        result = failure();
        continue;
      }
      if (rc == 0 || failed(result))
        continue;
      if (c->optional) {
        cache.pchFailed();
        continue;
      }
      reportFailure(*c, rc, why);
      result = failure();
    }
    if (BuildSignals::interrupted() && succeeded(result)) {
      emitError(loc) << "interrupted: the build of " << outPath << " was stopped";
      result = failure();
    }
    return result;
  }

private:
  SmallString<256> logOf(const tcc::BuildCommand &c) const {
    SmallString<256> log(dir);
    llvm::sys::path::append(log, c.log);
    return log;
  }

  void reportFailure(const tcc::BuildCommand &c, int rc, StringRef why) const {
    const bool nvcc = isCuda(step) && !options.cudaEmulation;
    InFlightDiagnostic diag = emitError(loc)
                              << (c.link ? "linking" : "compiling") << " the "
                              << (nvcc ? "CUDA" : isCuda(step) ? "emulated CUDA" : "CPU")
                              << " step with " << compiler << " failed (exit code " << rc << ")"
                              << (why.empty() ? "" : ": " + why.str());
    if (auto text = llvm::MemoryBuffer::getFile(logOf(c)))
      diag.attachNote() << (*text)->getBuffer().take_back(4000);
  }
};
} // namespace

/// Copies the built `library` beside `outPath` (under a name of this
/// process's own), then renames it over `outPath`: never a partial file.
static LogicalResult installLibrary(StringRef library, StringRef outPath, Location loc) {
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
  return success();
}

LogicalResult mlir::tcc::buildStepLibrary(const EmittedStep &step,
                                             StringRef weights,
                                             StringRef outPath, Location loc,
                                             const StepBuildOptions &options) {
  std::string cxx = stepCompiler(step, options, outPath, loc);
  if (cxx.empty())
    return failure();
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
  SmallString<256> weightsPath(dir), library(dir);
  llvm::sys::path::append(weightsPath, "weights.bin");
  llvm::sys::path::append(library, "step.so");
  if (failed(writeFile(weightsPath, weights, loc)))
    return failure();

  // The fixed half of a step is the same for every model: compiled once per
  // runtime, compiler and flags into tcc's cache, and reused.
  RuntimeCache cache(step, options, cxx);
  if (failed(cache.lockIfMissing(loc)))
    return failure();
  cache.linkPchInto(dir);
  std::vector<BuildCommand> commands = stepBuildCommands(step, options, cache.fixedObjects());
  // Not under the name GCC looks for: the step's own compile, at the same
  // time, must not read a half-written one.
  const char *const kBuiltPch = "prelude.pch.tmp";
  if (cache.buildsPch())
    commands.insert(commands.begin(), preludeCommand(step, options, kBuiltPch));

  // The units at once, then the link.
  SmallVector<const BuildCommand *> units, links;
  for (const BuildCommand &c : commands)
    (c.link ? links : units).push_back(&c);
  BuildBatch batch{step, options, cxx, dir, outPath, loc, cache};
  if (failed(batch.run(units)) || failed(batch.run(links)))
    return failure();
  cache.store(dir, kBuiltPch);
  if (failed(installLibrary(library, outPath, loc)))
    return failure();
  if (options.keepTemps)
    llvm::errs() << "tcc: kept the build folder " << dir << "\n";
  return success();
}

LogicalResult mlir::tcc::packEvaluationStep(StringRef trainLib, StringRef evalLib,
                                            StringRef outPath, Location loc) {
  static constexpr StringLiteral kMagic = TCC_STEP_EVAL_MAGIC;
  static_assert(kMagic.size() == 8, "the trailer's magic is 8 bytes");
  auto eval = llvm::MemoryBuffer::getFile(evalLib, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!eval)
    return emitError(loc) << "cannot read the evaluation step " << evalLib << ": "
                          << eval.getError().message();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(trainLib, ec, llvm::sys::fs::OF_Append);
    if (ec)
      return emitError(loc) << "cannot append to " << trainLib << ": " << ec.message();
    uint64_t n = (*eval)->getBufferSize();
    char size[8];
    for (int i = 0; i < 8; ++i)
      size[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    os << (*eval)->getBuffer() << StringRef(size, 8) << kMagic;
    os.close();
    if (os.has_error()) {
      os.clear_error();
      return emitError(loc) << "writing " << trainLib << " failed (a full disk?)";
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(trainLib, outPath))
    return emitError(loc) << "cannot move the step library to " << outPath << ": "
                          << ec.message();
  return success();
}
