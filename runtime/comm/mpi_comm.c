/*===- mpi_comm.c - tcc-run's collectives over MPI -------------------------===*
 *
 * libtcc-comm-mpi.so: the tcc_comm_api table (tcc_comm.h) over the MPI the
 * plugin was built against (Debian's Open MPI in CI). tcc-run loads it with
 * dlopen when a launcher started it, so tcc-run itself never links MPI.
 *
 * Errors return the MPI error string: MPI_COMM_WORLD's error handler is set
 * to MPI_ERRORS_RETURN, so a failed collective reaches tcc-run, which names
 * the rank and ends the world.
 *
 *===----------------------------------------------------------------------===*/
#include "runtime/comm/tcc_comm.h"

#include <mpi.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

static char g_version[MPI_MAX_LIBRARY_VERSION_STRING];

static int fail(int rc, const char *what, char *err, uint64_t err_len) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error %d", rc);
  if (err && err_len)
    snprintf(err, (size_t)err_len, "%s: %s", what, text);
  return 1;
}

/* MPI counts are int: the largest piece one call moves. */
#define TCC_COMM_CHUNK ((uint64_t)1 << 30)

static int comm_init(int *rank, int *size, int *local_rank, char *err, uint64_t err_len) {
  int inited = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  if (!inited && (rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
    return fail(rc, "MPI_Init_thread", err, err_len);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS ||
      (rc = MPI_Comm_size(MPI_COMM_WORLD, size)) != MPI_SUCCESS)
    return fail(rc, "MPI_Comm_rank", err, err_len);
  MPI_Comm node;
  if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL,
                                &node)) != MPI_SUCCESS)
    return fail(rc, "MPI_Comm_split_type", err, err_len);
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_free(&node);
  int len = 0;
  MPI_Get_library_version(g_version, &len);
  /* Open MPI's version string has several lines; keep the first. */
  char *nl = strchr(g_version, '\n');
  if (nl)
    *nl = '\0';
  return 0;
}

static int allreduce(void *buf, uint64_t n, size_t elem, MPI_Datatype type, MPI_Op op,
                     char *err, uint64_t err_len) {
  for (uint64_t at = 0; at < n; at += TCC_COMM_CHUNK) {
    uint64_t count = n - at < TCC_COMM_CHUNK ? n - at : TCC_COMM_CHUNK;
    int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + at * elem, (int)count, type, op,
                           MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      return fail(rc, "MPI_Allreduce", err, err_len);
  }
  return 0;
}

static int allreduce_sum_f32(float *buf, uint64_t n, char *err, uint64_t err_len) {
  return allreduce(buf, n, sizeof(float), MPI_FLOAT, MPI_SUM, err, err_len);
}

static int allreduce_sum_f64(double *buf, uint64_t n, char *err, uint64_t err_len) {
  return allreduce(buf, n, sizeof(double), MPI_DOUBLE, MPI_SUM, err, err_len);
}

static int allreduce_max_i64(int64_t *value, char *err, uint64_t err_len) {
  return allreduce(value, 1, sizeof(int64_t), MPI_INT64_T, MPI_MAX, err, err_len);
}

static int gather_f32(const float *send, uint64_t n, float *recv, int root, char *err,
                      uint64_t err_len) {
  if (n > (uint64_t)INT_MAX) {
    if (err && err_len)
      snprintf(err, (size_t)err_len, "MPI_Gather: %llu elements is more than one call moves",
               (unsigned long long)n);
    return 1;
  }
  int rc = MPI_Gather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, root, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail(rc, "MPI_Gather", err, err_len);
}

static int bcast(void *buf, uint64_t bytes, int root, char *err, uint64_t err_len) {
  for (uint64_t at = 0; at < bytes; at += TCC_COMM_CHUNK) {
    uint64_t count = bytes - at < TCC_COMM_CHUNK ? bytes - at : TCC_COMM_CHUNK;
    int rc = MPI_Bcast((char *)buf + at, (int)count, MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      return fail(rc, "MPI_Bcast", err, err_len);
  }
  return 0;
}

static int barrier(char *err, uint64_t err_len) {
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail(rc, "MPI_Barrier", err, err_len);
}

static void abort_world(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static int finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized || MPI_Finalize() == MPI_SUCCESS ? 0 : 1;
}

/* The element type of a sharded flat space, and whether one call moves
 * `chunk` of them. */
static int chunk_type(uint64_t chunk, int elem_bytes, MPI_Datatype *type, const char *what,
                      char *err, uint64_t err_len) {
  if (elem_bytes != 4 && elem_bytes != 8) {
    if (err && err_len)
      snprintf(err, (size_t)err_len, "%s: elements of %d bytes (4 or 8 expected)", what,
               elem_bytes);
    return 1;
  }
  if (chunk > (uint64_t)INT_MAX) {
    if (err && err_len)
      snprintf(err, (size_t)err_len,
               "%s: a chunk of %llu elements per rank is more than one call moves (%d)", what,
               (unsigned long long)chunk, INT_MAX);
    return 1;
  }
  *type = elem_bytes == 8 ? MPI_DOUBLE : MPI_FLOAT;
  return 0;
}

static int reduce_scatter_sum(const void *send, void *recv, uint64_t chunk, int elem_bytes,
                              char *err, uint64_t err_len) {
  MPI_Datatype type;
  if (chunk_type(chunk, elem_bytes, &type, "MPI_Reduce_scatter_block", err, err_len))
    return 1;
  int rc = MPI_Reduce_scatter_block(send, recv, (int)chunk, type, MPI_SUM, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail(rc, "MPI_Reduce_scatter_block", err, err_len);
}

static int allgather_inplace(void *buf, uint64_t chunk, int elem_bytes, char *err,
                             uint64_t err_len) {
  MPI_Datatype type;
  if (chunk_type(chunk, elem_bytes, &type, "MPI_Allgather", err, err_len))
    return 1;
  int rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)chunk, type,
                         MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail(rc, "MPI_Allgather", err, err_len);
}

static tcc_comm_api g_api = {TCC_COMM_ABI_VERSION, g_version, comm_init, allreduce_sum_f32,
                             allreduce_sum_f64, gather_f32, bcast, allreduce_max_i64,
                             barrier, abort_world, finalize, reduce_scatter_sum,
                             allgather_inplace};

__attribute__((visibility("default"))) const tcc_comm_api *tcc_comm_get_api(void) {
  return &g_api;
}
