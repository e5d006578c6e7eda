//===- nccl.h - NCCL for tcc's CUDA emulation, over MPI ------------*- C++ -*-===//
//
// Stands in for NCCL's nccl.h when tcc's CUDA code is built for the host
// (see tcc_cuda_emu.h), so that a CUDA step's data-parallel path (its
// communicator, its gradient buckets on their own stream, the events that
// order them) runs under `mpirun -np N tcc-run` on a machine without a GPU.
//
// The collectives go over the MPI plugin tcc-run has already loaded for the
// world (runtime/comm/tcc_comm.h; tcc-run loads it with RTLD_GLOBAL, so its
// tcc_comm_get_api is found here with dlsym). Each ncclAllReduce is queued
// on its stream like a kernel, and runs (on the host thread that runs that
// stream's work) in stream order; group calls are ordered as issued. So a
// rank's collectives run in the order its streams reach them, as NCCL's do.
// In a process without the plugin, a world of one rank (tcc-run with
// TCC_NCCL=1) sums nothing. Only what runtime/cuda/comm.cuh uses is here:
// unique ids, one communicator per process, in-place or out-of-place sums of fp32 and fp64,
// the reduce (to a root) and all-gather of fp32 (ZeRO-1), groups, the
// communicator's asynchronous error, abort and destroy.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CUDA_EMU_NCCL_H
#define TCC_CUDA_EMU_NCCL_H

#include "tcc_comm.h"
#include "tcc_cuda_emu.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
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

typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8 } ncclDataType_t;

namespace tcc_emu {
struct NcclComm {
  const tcc_comm_api *api = nullptr;
  int rank = 0, size = 0;
  ncclResult_t async = ncclSuccess; // the first failed collective's result
  std::string error;                // and its message
};
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
/// every rank was given the same one (the broadcast happened).
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "tcc-emu %ld %.6f", (long)::getpid(),
                tcc_emu::now_ms());
  return ncclSuccess;
}

/// Joins the world of tcc-run's MPI plugin as `rank` of `nranks`, which
/// must be the plugin's own rank and size.
inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  *comm = nullptr;
  using GetApi = const tcc_comm_api *(*)();
  auto get = reinterpret_cast<GetApi>(::dlsym(RTLD_DEFAULT, "tcc_comm_get_api"));
  const tcc_comm_api *api = get ? get() : nullptr;
  if (!api && nranks == 1 && rank == 0) {
    *comm = new tcc_emu::NcclComm{nullptr, 0, 1}; // a world of one: sums are copies
    return ncclSuccess;
  }
  if (!api || api->abi_version != TCC_COMM_ABI_VERSION) {
    std::fprintf(stderr, "tcc CUDA emulation: NCCL: no MPI plugin in this process (the emulated "
                         "collectives run over tcc-run's)\n");
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

/// Sums `count` elements over the ranks, when `stream` reaches the call.
inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || op != ncclSum || (type != ncclFloat32 && type != ncclFloat64))
    return ncclInvalidArgument;
  if (tcc_emu::state().capturing)
    return ncclInvalidUsage; // the emulation does not capture collectives
  const size_t elem = type == ncclFloat32 ? 4 : 8;
  cudaError_t e = tcc_emu::enqueue(stream, [=]() {
    if (comm->async != ncclSuccess)
      return; // a communicator that failed does nothing more
    if (send != recv)
      std::memcpy(recv, send, count * elem);
    if (!comm->api)
      return;
    char err[512] = {0};
    int rc = type == ncclFloat32
                 ? comm->api->allreduce_sum_f32(static_cast<float *>(recv), count, err, sizeof err)
                 : comm->api->allreduce_sum_f64(static_cast<double *>(recv), count, err, sizeof err);
    if (rc != 0) {
      comm->async = ncclRemoteError;
      comm->error = err;
      std::fprintf(stderr, "tcc CUDA emulation: NCCL: ncclAllReduce: %s\n", err);
    }
  });
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

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

/// Sums `send` (count elements) over the ranks into root's `recv` (the
/// other ranks' `recv` is not written).
inline ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || op != ncclSum || type != ncclFloat32 || root < 0 || (comm->api && root >= comm->size))
    return ncclInvalidArgument;
  return tcc_emu::enqueue_collective(comm, stream, "ncclReduce", [=](char *err, uint64_t len) {
    std::vector<float> sum(static_cast<const float *>(send), static_cast<const float *>(send) + count);
    if (comm->api && comm->api->allreduce_sum_f32(sum.data(), count, err, len) != 0)
      return 1;
    if (comm->rank == root)
      std::memcpy(recv, sum.data(), count * 4);
    return 0;
  });
}

/// Gathers every rank's `send` (sendcount elements) into `recv` (nranks *
/// sendcount), rank r's at block r; in place when send is recv's block r.
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                                  ncclComm_t comm, cudaStream_t stream) {
  if (!comm || type != ncclFloat32)
    return ncclInvalidArgument;
  return tcc_emu::enqueue_collective(comm, stream, "ncclAllGather", [=](char *err, uint64_t len) {
    char *mine = static_cast<char *>(recv) + static_cast<size_t>(comm->rank) * sendcount * 4;
    if (send != mine)
      std::memmove(mine, send, sendcount * 4);
    if (!comm->api)
      return 0;
    return comm->api->allgather_inplace(recv, sendcount, 4, err, len);
  });
}

#endif // TCC_CUDA_EMU_NCCL_H
