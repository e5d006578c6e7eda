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
#include <vector>

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
    const char *ws = env("WORLD_SIZE");
    if (ws && std::strcmp(ws, "1") != 0)
      return joinWithoutMpi(ws, timeoutSeconds);
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

namespace {
// The rendezvous's collectives (runtime/comm/tcp_star.h), for what tcc-run
// agrees on before the step's NCCL communicator is open: every rank's
// bytes to every rank, then reduced in rank order.
tcc::net::Star *gStar = nullptr;

int starSaid(const std::string &err, char *e, uint64_t l) {
  if (err.empty())
    return 0;
  std::snprintf(e, l, "the rendezvous: %s", err.c_str());
  return 1;
}
template <typename T, typename Op> int starReduce(T *buf, uint64_t n, Op op, char *e, uint64_t l) {
  std::vector<T> all(static_cast<size_t>(n) * static_cast<size_t>(gStar->size()));
  if (int rc = starSaid(gStar->allgather(buf, n * sizeof(T), all.data()), e, l))
    return rc;
  for (uint64_t i = 0; i < n; ++i) {
    T v = all[i];
    for (int r = 1; r < gStar->size(); ++r)
      v = op(v, all[static_cast<size_t>(r) * n + i]);
    buf[i] = v;
  }
  return 0;
}
int starInit(int *rank, int *size, int *local, char *, uint64_t) {
  *rank = gStar->rank();
  *size = gStar->size();
  *local = -1;
  return 0;
}
int starSumF32(float *b, uint64_t n, char *e, uint64_t l) {
  return starReduce(b, n, [](float a, float x) { return a + x; }, e, l);
}
int starSumF64(double *b, uint64_t n, char *e, uint64_t l) {
  return starReduce(b, n, [](double a, double x) { return a + x; }, e, l);
}
int starMax(int64_t *v, char *e, uint64_t l) {
  return starReduce(v, 1, [](int64_t a, int64_t x) { return x > a ? x : a; }, e, l);
}
int starGather(const float *send, uint64_t n, float *recv, int root, char *e, uint64_t l) {
  std::vector<float> all(static_cast<size_t>(n) * static_cast<size_t>(gStar->size()));
  if (int rc = starSaid(gStar->allgather(send, n * sizeof(float), all.data()), e, l))
    return rc;
  if (gStar->rank() == root)
    std::memcpy(recv, all.data(), all.size() * sizeof(float));
  return 0;
}
int starBcast(void *buf, uint64_t bytes, int root, char *e, uint64_t l) {
  std::vector<char> all(static_cast<size_t>(bytes) * static_cast<size_t>(gStar->size()));
  if (int rc = starSaid(gStar->allgather(buf, bytes, all.data()), e, l))
    return rc;
  std::memcpy(buf, all.data() + static_cast<size_t>(root) * bytes, bytes);
  return 0;
}
int starBarrier(char *e, uint64_t l) {
  int64_t v = 0;
  return starMax(&v, e, l);
}
void starAbort(int code) {
  gStar->close(); // the peers' rendezvous calls fail at once
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}
int starFinalize() {
  gStar->close();
  return 0;
}
int starNoShards(const void *, void *, uint64_t, int, char *e, uint64_t l) {
  return starSaid("no reduce-scatter (a CPU step's ZeRO-1 runs over MPI)", e, l);
}
int starNoGather(void *, uint64_t, int, char *e, uint64_t l) {
  return starSaid("no all-gather (a CPU step's ZeRO-1 runs over MPI)", e, l);
}
const tcc_comm_api kRendezvous = {TCC_COMM_ABI_VERSION, "a TCP rendezvous (torchrun's variables)", starInit,
                                  starSumF32, starSumF64, starGather, starBcast, starMax, starBarrier, starAbort,
                                  starFinalize, starNoShards, starNoGather};

/// `name` as a number in [lo, hi], or why not.
std::string number(const char *name, int lo, int hi, int &out) {
  const char *v = env(name);
  if (!v)
    return std::string(name) + " is not set";
  char *end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end || n < lo || n > hi)
    return std::string(name) + "=" + v + " is not a number from " + std::to_string(lo) + " to " +
           std::to_string(hi);
  out = static_cast<int>(n);
  return "";
}
} // namespace

std::string World::joinWithoutMpi(const char *worldSize, double timeoutSeconds) {
  const std::string launch = std::string("WORLD_SIZE=") + worldSize +
                             " without an MPI launcher (torchrun's variables: RANK, WORLD_SIZE, "
                             "LOCAL_RANK, MASTER_ADDR, MASTER_PORT)";
  int size = 0, rank = 0, local = 0, port = 0;
  std::string err = number("WORLD_SIZE", 1, 65536, size);
  if (err.empty())
    err = number("RANK", 0, size - 1, rank);
  if (err.empty())
    err = env("LOCAL_RANK") ? number("LOCAL_RANK", 0, 65535, local) : (local = rank, "");
  // The port where the ranks meet: TCC_MASTER_PORT, else MASTER_PORT, but
  // under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) its agent's own
  // store holds MASTER_PORT, so the one after it.
  std::string portFrom = "MASTER_PORT";
  if (err.empty() && env("TCC_MASTER_PORT")) {
    portFrom = "TCC_MASTER_PORT";
    err = number("TCC_MASTER_PORT", 1, 65535, port);
  } else if (err.empty()) {
    err = number("MASTER_PORT", 1, 65535, port);
    const char *agentStore = env("TORCHELASTIC_USE_AGENT_STORE");
    if (err.empty() && agentStore && (std::strcmp(agentStore, "True") == 0 || std::strcmp(agentStore, "1") == 0)) {
      if (port == 65535)
        err = "MASTER_PORT=65535 leaves no port after torchrun's store's (set TCC_MASTER_PORT)";
      ++port;
      portFrom = "MASTER_PORT+1, as torchrun's store holds MASTER_PORT";
    }
  }
  if (!err.empty())
    return launch + ": " + err;
  const char *host = env("MASTER_ADDR") ? env("MASTER_ADDR") : "127.0.0.1";
  star_ = std::make_unique<tcc::net::Star>();
  if (!(err = star_->open(host, port, rank, size, timeoutSeconds > 0 ? timeoutSeconds : 600)).empty())
    return "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": meeting at " + host + ":" +
           std::to_string(port) + " (" + portFrom + "; " + launch + "): " + err +
           (err.find("in use") != std::string::npos ? " (set TCC_MASTER_PORT to a free port)" : "");
  gStar = star_.get();
  api_ = &kRendezvous;
  rank_ = rank;
  size_ = size;
  localRank_ = local;
  timeout_ = timeoutSeconds;
  if (size_ > 1 && timeout_ > 0)
    watchdog_ = std::thread([this] { watch(); });
  return "";
}

void World::attach(const tcc_comm_api *api) {
  std::lock_guard<std::mutex> lock(mu_);
  api_ = api;
  if (star_)
    star_->closePeers(); // rank 0 still answers a late comer on its port
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
