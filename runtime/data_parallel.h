//===- data_parallel.h - tcc-run across processes: the world and the data -*- C++ -*-===//
//
// Data parallelism for tcc-run (`mpirun -np N tcc-run step.so ...`): every
// rank holds the whole step, trains on its own share of each optimizer
// step's micro-batches, and the gradient accumulators are summed across the
// ranks before the optimizer update, which every rank then makes alike.
//
// The rule that makes N ranks with `--accum K` train exactly what one
// process with `--accum N*K` trains: optimizer step s of the single process
// takes micro-batches s*N*K .. s*N*K + N*K - 1 (in the order of its data
// stream: random windows drawn from one seeded generator, or sequential
// windows, or the --feed batches); rank r takes the K of them from
// s*N*K + r*K on. A rank draws (without reading) the windows of the batches
// that are not its own, so that the random stream stays the single
// process's. Each micro-step backpropagates loss * scale / (N*K), so the
// summed accumulators hold the single process's mean gradient.
//
// The world comes from the launcher's environment: Open MPI's mpirun
// (OMPI_COMM_WORLD_SIZE), PMIx or PMI (srun: PMIX_RANK, PMI_SIZE). Under one,
// tcc-run loads the collectives plugin (libtcc-comm-mpi.so, runtime/comm)
// with dlopen. Without one, torchrun's variables (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT) make a world of CUDA steps: the
// ranks meet at rank 0's MASTER_ADDR:MASTER_PORT (runtime/comm/tcp_star.h),
// which carries only the bootstrap (agreement, the NCCL id, the bucket
// size); once the step's NCCL communicator is open, every collective goes
// over it (attach, tcc_step_comm_api). Without either, it is world size 1,
// exactly as before.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_DATA_PARALLEL_H
#define TCC_RUNTIME_DATA_PARALLEL_H

#include "runtime/comm/tcc_comm.h"
#include "runtime/comm/tcp_star.h"
#include "runtime/train_data.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tcc::dp {

/// The processes training together.
class World {
public:
  World() = default;
  ~World();
  World(const World &) = delete;
  World &operator=(const World &) = delete;

  /// Finds the launcher in the environment and, under one, loads the
  /// plugin (`TCC_COMM_LIB`, else libtcc-comm-mpi.so in the lib folder
  /// beside tcc-run's bin folder) and joins the world. Returns "" or why
  /// not. `timeoutSeconds` bounds every collective (0: no bound).
  std::string join(double timeoutSeconds);

  /// Launched with torchrun's variables, without MPI: the world's
  /// collectives need the step's NCCL communicator (attach).
  bool withoutMpi() const { return star_ != nullptr; }
  /// From now on, the collectives go over `api` (the step's NCCL
  /// communicator, tcc_step_comm_api); the rendezvous is closed.
  void attach(const tcc_comm_api *api);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int localRank() const { return localRank_; }
  bool parallel() const { return size_ > 1; }
  /// "Open MPI v4.1.4, ..." (the plugin's MPI), or "".
  std::string library() const;

  // Collectives; each returns "" or an error. With one rank they do nothing.
  std::string sum(float *buf, uint64_t n, const char *what);
  std::string sum(double *buf, uint64_t n, const char *what);
  std::string max(int64_t &value, const char *what);
  std::string gather(const float *send, uint64_t n, float *recv, int root, const char *what);
  std::string broadcast(void *buf, uint64_t bytes, int root, const char *what);
  /// ZeRO-1 (tcc_comm_api's reduce_scatter_sum and allgather_inplace):
  /// `elemBytes` 4 or 8, `chunk` elements per rank.
  std::string reduceScatter(const void *send, void *recv, uint64_t chunk, int elemBytes,
                            const char *what);
  std::string allgather(void *buf, uint64_t chunk, int elemBytes, const char *what);
  std::string barrier(const char *what);

  /// Runs `call` (0: done; else its message in err) with the watchdog
  /// armed, as the collectives above are: for work that waits on the other
  /// ranks elsewhere (a CUDA step's NCCL calls). Returns "" or the error.
  std::string watched(const char *what, const std::function<int(char *err, uint64_t len)> &call);

  /// Ends every rank with exit code `code` (a failed rank takes the world
  /// down rather than leaving the others waiting). No-op with one rank.
  void abortWorld(int code);
  /// Leaves the world (MPI_Finalize).
  void finish();

private:
  /// Runs `call` with the watchdog armed: a collective that has not
  /// returned after the timeout ends the world with an error naming the
  /// rank and the collective.
  template <typename F> std::string guarded(const char *what, F &&call);
  void watch();

  /// join() without MPI: torchrun's variables, the rendezvous at rank 0.
  std::string joinWithoutMpi(const char *worldSize, double timeoutSeconds);

  const tcc_comm_api *api_ = nullptr;
  void *lib_ = nullptr;
  std::unique_ptr<tcc::net::Star> star_; // the rendezvous, without MPI
  int rank_ = 0, size_ = 1, localRank_ = 0;
  bool finished_ = false;
  double timeout_ = 0;
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  const char *inFlight_ = nullptr; // the collective running, or null
  uint64_t generation_ = 0;         // counts collectives
  bool stop_ = false;
};

/// Rank `rank` of `world` ranks' share of a single process's data stream,
/// `accum` micro-batches per optimizer step (see the file comment). Local
/// micro-batch i (counting from 0 at the start of training) is global
/// micro-batch (i / accum) * world * accum + rank * accum + i % accum.
/// `start` is the local index the run starts at (resume: steps * accum):
/// the generator state handed with it is the single process's after global
/// batch (start / accum) * world * accum - 1.
class ShardedBatchMaker : public data::BatchMaker {
public:
  ShardedBatchMaker(data::BatchMaker &inner, int rank, int world, int64_t accum, uint64_t start)
      : inner(inner), rank(rank), world(world), accum(static_cast<uint64_t>(accum)),
        start(start) {}
  uint64_t batchBytes() const override { return inner.batchBytes(); }
  std::string make(uint64_t index, uint64_t &rng, char *buf) override;
  uint64_t global(uint64_t local) const {
    return (local / accum) * static_cast<uint64_t>(world) * accum +
           static_cast<uint64_t>(rank) * accum + local % accum;
  }

private:
  data::BatchMaker &inner;
  int rank, world;
  uint64_t accum, start;
};

} // namespace tcc::dp

#endif // TCC_RUNTIME_DATA_PARALLEL_H
