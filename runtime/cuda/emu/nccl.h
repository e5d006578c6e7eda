//===- nccl.h - NCCL for tcc's CUDA emulation ----------------------*- C++ -*-===//
//
// Stands in for NCCL's nccl.h when tcc's CUDA code is built for the host
// (see tcc_cuda_emu.h), so that a CUDA step's data-parallel path (its
// communicator, its gradient buckets on their own stream, the events that
// order them) runs on a machine without a GPU, in one of two worlds:
//
//  * under `mpirun -np N tcc-run`: the collectives go over the MPI plugin
//    tcc-run has already loaded for the world (runtime/comm/tcc_comm.h;
//    tcc-run loads it with RTLD_GLOBAL, so its tcc_comm_get_api is found
//    here with dlsym);
//  * launched without MPI (torchrun's variables): over a star of TCP
//    connections to rank 0 (runtime/comm/tcp_star.h), whose port the unique
//    id names, as NCCL's names its bootstrap address. Only processes of one
//    machine (127.0.0.1).
//
// Each collective is queued on its stream like a kernel, and runs (on the
// host thread that runs that stream's work) in stream order; group calls
// are ordered as issued. So a rank's collectives run in the order its
// streams reach them, as NCCL's do. In a process without the plugin that
// asks for one rank (tcc-run with TCC_NCCL=1), a collective is a copy.
// Only what runtime/cuda/comm.cuh uses is here: unique ids, one
// communicator per process, sums (fp32, fp64, int32) and the int64 maximum,
// reduce to a root, all-gather and broadcast, groups, the communicator's
// asynchronous error, abort and destroy. Over MPI, only fp32 and fp64 sums
// and one int64 maximum are reduced.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CUDA_EMU_NCCL_H
#define TCC_CUDA_EMU_NCCL_H

#include "tcc_comm.h"
#include "tcc_cuda_emu.h"
#include "tcp_star.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <dlfcn.h>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#define NCCL_MAJOR 2
#define NCCL_MINOR 0
#define NCCL_PATCH 0
#define NCCL_UNIQUE_ID_BYTES 128

typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclInt64 = 4,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8
} ncclDataType_t;

namespace tcc_emu {
struct NcclComm {
  const tcc_comm_api *api = nullptr; // over MPI
  int rank = 0, size = 0;
  ncclResult_t async = ncclSuccess; // the first failed collective's result
  std::string error;                // and its message
  std::unique_ptr<tcc::net::Star> star; // over TCP (no MPI plugin)
};

inline size_t type_bytes(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
    return 1;
  case ncclInt32:
    return 4;
  case ncclInt64:
  case ncclFloat64:
    return 8;
  case ncclFloat32:
    return 4;
  }
  return 0;
}

/// The MPI plugin tcc-run loaded, or null.
inline const tcc_comm_api *mpi_plugin() {
  using GetApi = const tcc_comm_api *(*)();
  auto get = reinterpret_cast<GetApi>(::dlsym(RTLD_DEFAULT, "tcc_comm_get_api"));
  return get ? get() : nullptr;
}

/// Rank 0's listening star, made with the unique id (ncclGetUniqueId) and
/// taken by its ncclCommInitRank.
inline std::unique_ptr<tcc::net::Star> &pending_star() {
  static std::unique_ptr<tcc::net::Star> star;
  return star;
}

inline double comm_timeout() {
  const char *t = std::getenv("TCC_COMM_TIMEOUT");
  double v = t && *t ? std::atof(t) : 600.0;
  return v > 0 ? v : 600.0;
}

/// recv[i] = op over the ranks of their i-th elements, summed in rank order
/// (so every rank gets the same bytes), from `all` (size * count elements).
template <typename T> void reduce_into(void *recv, const std::vector<char> &all, size_t count, int size, bool max) {
  T *out = static_cast<T *>(recv);
  const T *in = reinterpret_cast<const T *>(all.data());
  for (size_t i = 0; i < count; ++i) {
    T v = in[i];
    for (int r = 1; r < size; ++r) {
      const T x = in[static_cast<size_t>(r) * count + i];
      v = max ? (x > v ? x : v) : v + x;
    }
    out[i] = v;
  }
}

/// Over the TCP star: every rank's `count` elements reduced into `recv`.
inline int star_allreduce(NcclComm *c, const void *send, void *recv, size_t count, ncclDataType_t type,
                          ncclRedOp_t op, char *err, uint64_t len) {
  const size_t bytes = count * type_bytes(type);
  std::vector<char> all(bytes * static_cast<size_t>(c->size));
  if (std::string e = c->star->allgather(send, bytes, all.data()); !e.empty()) {
    std::snprintf(err, len, "%s", e.c_str());
    return 1;
  }
  const bool max = op == ncclMax;
  switch (type) {
  case ncclFloat32:
    reduce_into<float>(recv, all, count, c->size, max);
    break;
  case ncclFloat64:
    reduce_into<double>(recv, all, count, c->size, max);
    break;
  case ncclInt32:
    reduce_into<int32_t>(recv, all, count, c->size, max);
    break;
  case ncclInt64:
    reduce_into<int64_t>(recv, all, count, c->size, max);
    break;
  default:
    std::snprintf(err, len, "no reduction of type %d", (int)type);
    return 1;
  }
  return 0;
}
} // namespace tcc_emu
typedef tcc_emu::NcclComm *ncclComm_t;

inline const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  }
  return "unknown result code";
}

inline ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

/// An id that names this process and moment; the communicator checks that
/// every rank was given the same one (the broadcast happened). Without an
/// MPI plugin, rank 0 starts listening on a free port, which the id names.
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id->internal, 0, sizeof id->internal);
  if (tcc_emu::mpi_plugin()) {
    std::snprintf(id->internal, sizeof id->internal, "tcc-emu %ld %.6f", (long)::getpid(), tcc_emu::now_ms());
    return ncclSuccess;
  }
  auto star = std::make_unique<tcc::net::Star>();
  if (std::string err = star->listen(0, "127.0.0.1"); !err.empty()) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: %s\n", err.c_str());
    return ncclSystemError;
  }
  std::snprintf(id->internal, sizeof id->internal, "tcc-emu-tcp %d %ld %.6f", star->port(), (long)::getpid(),
                tcc_emu::now_ms());
  tcc_emu::pending_star() = std::move(star);
  return ncclSuccess;
}

/// Joins the world as `rank` of `nranks`: that of tcc-run's MPI plugin
/// (which must have the same rank and size), or, without one, rank 0's TCP
/// star at the port the id names.
inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  *comm = nullptr;
  const tcc_comm_api *api = tcc_emu::mpi_plugin();
  if (!api && nranks == 1 && rank == 0) {
    *comm = new tcc_emu::NcclComm{nullptr, 0, 1}; // a world of one: sums are copies
    return ncclSuccess;
  }
  if (!api) {
    int port = 0;
    if (std::sscanf(id.internal, "tcc-emu-tcp %d", &port) != 1 || rank < 0 || rank >= nranks) {
      std::fprintf(stderr, "tcc CUDA emulation: NCCL: without an MPI plugin, the unique id must come "
                           "from rank 0's ncclGetUniqueId (it names rank 0's port)\n");
      return ncclInvalidUsage;
    }
    std::unique_ptr<tcc::net::Star> star =
        rank == 0 ? std::move(tcc_emu::pending_star()) : std::make_unique<tcc::net::Star>();
    if (!star) {
      std::fprintf(stderr, "tcc CUDA emulation: NCCL: rank 0 must make the unique id\n");
      return ncclInvalidUsage;
    }
    if (std::string err = star->open("127.0.0.1", port, rank, nranks, tcc_emu::comm_timeout()); !err.empty()) {
      std::fprintf(stderr, "tcc CUDA emulation: NCCL: rank %d of %d: %s\n", rank, nranks, err.c_str());
      return ncclRemoteError;
    }
    // Every rank must hold the same id.
    std::vector<char> ids(sizeof id.internal * static_cast<size_t>(nranks));
    if (std::string err = star->allgather(id.internal, sizeof id.internal, ids.data()); !err.empty()) {
      std::fprintf(stderr, "tcc CUDA emulation: NCCL: rank %d of %d: %s\n", rank, nranks, err.c_str());
      return ncclRemoteError;
    }
    for (int r = 0; r < nranks; ++r)
      if (std::memcmp(ids.data() + sizeof id.internal * r, id.internal, sizeof id.internal) != 0) {
        std::fprintf(stderr, "tcc CUDA emulation: NCCL: the ranks were given different unique ids\n");
        return ncclInvalidUsage;
      }
    *comm = new tcc_emu::NcclComm{nullptr, rank, nranks};
    (*comm)->star = std::move(star);
    return ncclSuccess;
  }
  if (api->abi_version != TCC_COMM_ABI_VERSION) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: the MPI plugin is not of ABI %d\n", TCC_COMM_ABI_VERSION);
    return ncclSystemError;
  }
  int r = 0, n = 0, local = 0;
  char err[512] = {0};
  if (api->init(&r, &n, &local, err, sizeof err) != 0) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: %s\n", err);
    return ncclSystemError;
  }
  if (r != rank || n != nranks) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: rank %d of %d asked for, but MPI says %d of %d\n",
                 rank, nranks, r, n);
    return ncclInvalidArgument;
  }
  // Every rank must hold the same id: compare its hash, and its negation,
  // with the world's largest.
  uint64_t h = 1469598103934665603ULL;
  for (char c : id.internal)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  int64_t mine = static_cast<int64_t>(h >> 1), most = mine, least = -mine;
  if (api->allreduce_max_i64(&most, err, sizeof err) != 0 ||
      api->allreduce_max_i64(&least, err, sizeof err) != 0) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: %s\n", err);
    return ncclSystemError;
  }
  if (most != mine || least != -mine) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: the ranks were given different unique ids\n");
    return ncclInvalidUsage;
  }
  *comm = new tcc_emu::NcclComm{api, rank, nranks};
  return ncclSuccess;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
  *async = comm ? comm->async : ncclInvalidArgument;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }

namespace tcc_emu {
/// Queues `run` (a collective over the plugin, which returns 0 or fills its
/// message) on `stream`; a failure marks the communicator, as NCCL's
/// asynchronous errors do.
template <typename Run>
ncclResult_t enqueue_collective(ncclComm_t comm, cudaStream_t stream, const char *name, Run run) {
  if (tcc_emu::state().capturing)
    return ncclInvalidUsage; // the emulation does not capture collectives
  cudaError_t e = tcc_emu::enqueue(stream, [=]() {
    if (comm->async != ncclSuccess)
      return; // a communicator that failed does nothing more
    char err[512] = {0};
    if (run(err, sizeof err) != 0) {
      comm->async = ncclRemoteError;
      comm->error = err;
      std::fprintf(stderr, "tcc CUDA emulation: NCCL: %s: %s\n", name, err);
    }
  });
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}
} // namespace tcc_emu

namespace tcc_emu {
/// `count` elements of `send` reduced over the ranks into `out` (count
/// elements; it may be `send`).
inline int allreduce(NcclComm *c, const void *send, void *out, size_t count, ncclDataType_t type, ncclRedOp_t op,
                     char *err, uint64_t len) {
  if (c->star)
    return star_allreduce(c, send, out, count, type, op, err, len);
  if (send != out)
    std::memmove(out, send, count * type_bytes(type));
  if (!c->api)
    return 0; // a world of one
  if (op == ncclSum && type == ncclFloat32)
    return c->api->allreduce_sum_f32(static_cast<float *>(out), count, err, len);
  if (op == ncclSum && type == ncclFloat64)
    return c->api->allreduce_sum_f64(static_cast<double *>(out), count, err, len);
  if (op == ncclMax && type == ncclInt64 && count == 1)
    return c->api->allreduce_max_i64(static_cast<int64_t *>(out), err, len);
  std::snprintf(err, len, "the emulation over MPI reduces fp32 and fp64 sums and one int64 maximum only");
  return 1;
}

/// Whether the emulation has this reduction.
inline bool reducible(ncclDataType_t type, ncclRedOp_t op) {
  return (op == ncclSum || op == ncclMax) &&
         (type == ncclFloat32 || type == ncclFloat64 || type == ncclInt32 || type == ncclInt64);
}
} // namespace tcc_emu

/// Reduces `count` elements over the ranks, when `stream` reaches the call.
inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || !tcc_emu::reducible(type, op))
    return ncclInvalidArgument;
  return tcc_emu::enqueue_collective(comm, stream, "ncclAllReduce", [=](char *err, uint64_t len) {
    return tcc_emu::allreduce(comm, send, recv, count, type, op, err, len);
  });
}

/// Reduces `send` (count elements) over the ranks into root's `recv` (the
/// other ranks' `recv` is not written).
inline ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || !tcc_emu::reducible(type, op) || root < 0 || root >= comm->size)
    return ncclInvalidArgument;
  return tcc_emu::enqueue_collective(comm, stream, "ncclReduce", [=](char *err, uint64_t len) {
    std::vector<char> sum(count * tcc_emu::type_bytes(type));
    if (tcc_emu::allreduce(comm, send, sum.data(), count, type, op, err, len) != 0)
      return 1;
    if (comm->rank == root)
      std::memcpy(recv, sum.data(), sum.size());
    return 0;
  });
}

/// `count` elements from root's `send` into every rank's `recv`.
inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * tcc_emu::type_bytes(type);
  if (!comm || !bytes || root < 0 || root >= comm->size)
    return ncclInvalidArgument;
  return tcc_emu::enqueue_collective(comm, stream, "ncclBroadcast", [=](char *err, uint64_t len) {
    if (comm->rank == root && send != recv)
      std::memmove(recv, send, bytes);
    if (comm->star) {
      std::vector<char> all(bytes * static_cast<size_t>(comm->size));
      if (std::string e = comm->star->allgather(recv, bytes, all.data()); !e.empty()) {
        std::snprintf(err, len, "%s", e.c_str());
        return 1;
      }
      std::memcpy(recv, all.data() + bytes * static_cast<size_t>(root), bytes);
      return 0;
    }
    return comm->api ? comm->api->bcast(recv, bytes, root, err, len) : 0;
  });
}

/// Gathers every rank's `send` (sendcount elements) into `recv` (nranks *
/// sendcount), rank r's at block r; in place when send is recv's block r.
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                                  ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = sendcount * tcc_emu::type_bytes(type);
  if (!comm || !bytes)
    return ncclInvalidArgument;
  return tcc_emu::enqueue_collective(comm, stream, "ncclAllGather", [=](char *err, uint64_t len) {
    char *mine = static_cast<char *>(recv) + static_cast<size_t>(comm->rank) * bytes;
    if (send != mine)
      std::memmove(mine, send, bytes);
    if (comm->star) {
      std::vector<char> all(bytes * static_cast<size_t>(comm->size));
      if (std::string e = comm->star->allgather(mine, bytes, all.data()); !e.empty()) {
        std::snprintf(err, len, "%s", e.c_str());
        return 1;
      }
      std::memcpy(recv, all.data(), all.size());
      return 0;
    }
    if (!comm->api)
      return 0;
    if (bytes % 4 != 0) {
      std::snprintf(err, len, "the emulation over MPI gathers whole 4-byte elements only");
      return 1;
    }
    return comm->api->allgather_inplace(recv, bytes / 4, 4, err, len);
  });
}

#endif // TCC_CUDA_EMU_NCCL_H
