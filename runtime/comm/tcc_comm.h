/*===- tcc_comm.h - the collectives tcc-run uses for data parallelism -*- C -*-===*
 *
 * tcc-run stays free of MPI: under a launcher (mpirun, srun) it loads a
 * collectives plugin, libtcc-comm-mpi.so (runtime/comm/mpi_comm.c, built
 * against the system's MPI), with dlopen and calls it through this table.
 * All functions return 0 on success; on failure they write a message into
 * `err` (NUL-terminated, at most `err_len` bytes) where they take one.
 * Buffers are host memory; counts are elements and may exceed INT_MAX (the
 * plugin splits them).
 *
 *===----------------------------------------------------------------------===*/
#ifndef TCC_RUNTIME_COMM_TCC_COMM_H
#define TCC_RUNTIME_COMM_TCC_COMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TCC_COMM_ABI_VERSION 2

typedef struct tcc_comm_api {
  uint32_t abi_version; /* TCC_COMM_ABI_VERSION */
  const char *library;  /* the MPI library's version string */
  /* Joins the world (MPI_Init_thread): this process's rank, the world's
   * size and its rank among the processes of its node. */
  int (*init)(int *rank, int *size, int *local_rank, char *err, uint64_t err_len);
  /* In-place sums across all ranks; every rank ends with the same bytes. */
  int (*allreduce_sum_f32)(float *buf, uint64_t n, char *err, uint64_t err_len);
  int (*allreduce_sum_f64)(double *buf, uint64_t n, char *err, uint64_t err_len);
  /* `n` floats from every rank into `recv` of `root` (size * n, in rank
   * order); `recv` is ignored on the other ranks. */
  int (*gather_f32)(const float *send, uint64_t n, float *recv, int root, char *err,
                    uint64_t err_len);
  /* `bytes` bytes from `root` to every rank. */
  int (*bcast)(void *buf, uint64_t bytes, int root, char *err, uint64_t err_len);
  /* The largest of `value` over all ranks (agreement on errors and stops). */
  int (*allreduce_max_i64)(int64_t *value, char *err, uint64_t err_len);
  int (*barrier)(char *err, uint64_t err_len);
  /* Ends every rank of the world with exit code `code` (MPI_Abort). */
  void (*abort_world)(int code);
  int (*finalize)(void);
  /* Sharded optimizer state (ZeRO-1), elements of `elem_bytes` (4: float,
   * 8: double), `chunk` of them per rank (at most INT_MAX):
   * reduce_scatter_sum sums `send` (size * chunk) across the ranks and
   * leaves chunk r of the sum in rank r's `recv` (chunk; apart from send);
   * allgather_inplace fills `buf` (size * chunk) with every rank's chunk r,
   * rank r's own being at r * chunk already. [ABI 2] */
  int (*reduce_scatter_sum)(const void *send, void *recv, uint64_t chunk, int elem_bytes,
                            char *err, uint64_t err_len);
  int (*allgather_inplace)(void *buf, uint64_t chunk, int elem_bytes, char *err,
                           uint64_t err_len);
} tcc_comm_api;

/* The plugin's one export. */
const tcc_comm_api *tcc_comm_get_api(void);

#ifdef __cplusplus
}
#endif

#endif /* TCC_RUNTIME_COMM_TCC_COMM_H */
