//===- data_parallel.cpp - tcc-run across processes -----------------------===//
#include "runtime/data_parallel.h"

#include "runtime/posix_io.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

namespace tcc::dp {

namespace {

const char *env(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

/// The launcher that started this process, or null.
const char *launcher() {
  if (env("OMPI_COMM_WORLD_SIZE"))
    return "Open MPI's mpirun";
  if (env("PMIX_RANK"))
    return "a PMIx launcher";
  if (env("PMI_SIZE") || env("PMI_RANK"))
    return "a PMI launcher (srun)";
  return nullptr;
}

/// The plugin's path: $TCC_COMM_LIB, else ../lib/libtcc-comm-mpi.so from
/// the folder of this executable.
std::string pluginPath() {
  if (const char *p = env("TCC_COMM_LIB"))
    return p;
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return "libtcc-comm-mpi.so";
  self[n] = '\0';
  std::string dir(self);
  dir = dir.substr(0, dir.find_last_of('/'));
  return dir.substr(0, dir.find_last_of('/')) + "/lib/libtcc-comm-mpi.so";
}

} // namespace

World::~World() {
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }
}

std::string World::join(double timeoutSeconds) {
  const char *how = launcher();
  if (!how) {
    // torchrun's variables without MPI would need a store of our own to
    // meet; refuse rather than train N copies alone.
    const char *ws = env("WORLD_SIZE");
    if (ws && std::strcmp(ws, "1") != 0)
      return std::string("WORLD_SIZE=") + ws +
             " is set but no MPI launcher started this process; tcc-run's data parallelism "
             "runs under mpirun (or srun with PMI): mpirun -np " + ws + " tcc-run ...";
    return "";
  }
  std::string path = pluginPath();
  // RTLD_GLOBAL: Open MPI's own components, which it loads with dlopen,
  // need its symbols.
  lib_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib_) {
    const char *why = ::dlerror();
    return std::string("started by ") + how + ", but the collectives plugin " + path +
           " cannot be loaded: " + (why ? why : "unknown dlopen error") +
           " (build tcc with MPI's development files, libopenmpi-dev, or set TCC_COMM_LIB)";
  }
  using GetApi = const tcc_comm_api *(*)();
  auto get = reinterpret_cast<GetApi>(::dlsym(lib_, "tcc_comm_get_api"));
  api_ = get ? get() : nullptr;
  if (!api_ || api_->abi_version != TCC_COMM_ABI_VERSION)
    return path + " is not a tcc collectives plugin of ABI " +
           std::to_string(TCC_COMM_ABI_VERSION);
  char err[1024] = {0};
  if (api_->init(&rank_, &size_, &localRank_, err, sizeof err) != 0)
    return std::string("joining the world (") + how + "): " + err;
  timeout_ = timeoutSeconds;
  if (size_ > 1 && timeout_ > 0)
    watchdog_ = std::thread([this] { watch(); });
  return "";
}

std::string World::library() const { return api_ && api_->library ? api_->library : ""; }

void World::watch() {
  // The main thread takes the terminating signals (a stop between steps).
  tcc::io::SignalHold hold;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!inFlight_) {
      cv_.wait(lock, [&] { return stop_ || inFlight_; });
      continue;
    }
    const uint64_t gen = generation_;
    const char *what = inFlight_;
    if (cv_.wait_for(lock, std::chrono::duration<double>(timeout_),
                     [&] { return stop_ || generation_ != gen; }))
      continue;
    // The same collective is still running: a peer never arrived.
    std::fprintf(stderr,
                 "tcc-run: error: rank %d of %d: %s did not complete within %g s (a rank is "
                 "stuck or gone; TCC_COMM_TIMEOUT sets the limit); ending every rank\n",
                 rank_, size_, what, timeout_);
    std::fflush(stderr);
    api_->abort_world(1);
    std::_Exit(1);
  }
}

template <typename F> std::string World::guarded(const char *what, F &&call) {
  if (!api_ || size_ == 1)
    return "";
  {
    std::lock_guard<std::mutex> lock(mu_);
    inFlight_ = what;
    ++generation_;
  }
  cv_.notify_all();
  char err[1024] = {0};
  int rc = call(err, static_cast<uint64_t>(sizeof err));
  {
    std::lock_guard<std::mutex> lock(mu_);
    inFlight_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  if (rc != 0)
    return std::string(what) + " failed: " + err;
  return "";
}

std::string World::sum(float *buf, uint64_t n, const char *what) {
  return guarded(what, [&](char *e, uint64_t l) { return api_->allreduce_sum_f32(buf, n, e, l); });
}

std::string World::sum(double *buf, uint64_t n, const char *what) {
  return guarded(what, [&](char *e, uint64_t l) { return api_->allreduce_sum_f64(buf, n, e, l); });
}

std::string World::max(int64_t &value, const char *what) {
  return guarded(what, [&](char *e, uint64_t l) { return api_->allreduce_max_i64(&value, e, l); });
}

std::string World::gather(const float *send, uint64_t n, float *recv, int root,
                          const char *what) {
  return guarded(what,
                 [&](char *e, uint64_t l) { return api_->gather_f32(send, n, recv, root, e, l); });
}

std::string World::broadcast(void *buf, uint64_t bytes, int root, const char *what) {
  return guarded(what, [&](char *e, uint64_t l) { return api_->bcast(buf, bytes, root, e, l); });
}

std::string World::reduceScatter(const void *send, void *recv, uint64_t chunk, int elemBytes,
                                 const char *what) {
  if (!api_ || size_ == 1) {
    std::memcpy(recv, send, chunk * static_cast<uint64_t>(elemBytes));
    return "";
  }
  return guarded(what, [&](char *e, uint64_t l) {
    return api_->reduce_scatter_sum(send, recv, chunk, elemBytes, e, l);
  });
}

std::string World::allgather(void *buf, uint64_t chunk, int elemBytes, const char *what) {
  return guarded(what, [&](char *e, uint64_t l) {
    return api_->allgather_inplace(buf, chunk, elemBytes, e, l);
  });
}

std::string World::barrier(const char *what) {
  return guarded(what, [&](char *e, uint64_t l) { return api_->barrier(e, l); });
}

std::string World::watched(const char *what,
                           const std::function<int(char *err, uint64_t len)> &call) {
  if (!api_ || size_ == 1) {
    char err[1024] = {0};
    return call(err, sizeof err) == 0 ? "" : std::string(what) + " failed: " + err;
  }
  return guarded(what, call);
}

void World::abortWorld(int code) {
  if (api_ && size_ > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    api_->abort_world(code);
  }
}

void World::finish() {
  if (api_ && !finished_) {
    finished_ = true;
    api_->finalize();
  }
}

std::string ShardedBatchMaker::make(uint64_t index, uint64_t &rng, char *buf) {
  // The global batches between the last one this rank made (or the start of
  // the run's first step) and this one belong to other ranks: draw their
  // windows so that the generator is where the single process's would be.
  const uint64_t g = global(index);
  uint64_t from = index == start ? (start / accum) * static_cast<uint64_t>(world) * accum
                                 : global(index - 1) + 1;
  for (uint64_t k = from; k < g; ++k)
    if (std::string err = inner.skip(k, rng); !err.empty())
      return err;
  return inner.make(g, rng, buf);
}

} // namespace tcc::dp
