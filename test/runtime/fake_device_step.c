/*===- fake_device_step.c - a CPU step dressed up as a device step --------===*
 *
 * Tests tcc-run's device-arena path (tcc_step_info.device_arena = 1) without
 * a GPU: this library exports the step ABI, loads the real CPU step named by
 * $TCC_FAKE_DEVICE_STEP and forwards to it, but reports `device_arena` 1 and
 * target "cuda", and keeps the arena where tcc-run cannot touch it: the
 * pointer tcc_step_device_open hands out is a PROT_NONE reservation of the
 * arena's size (any direct read or write by tcc-run faults), translated here
 * to the real buffer. So every byte tcc-run gets in or out must go through
 * tcc_step_copy_in/copy_out.
 *
 * The environment steers it:
 *   TCC_FAKE_DEVICE_STEP=PATH   the CPU step to forward to (required)
 *   TCC_FAKE_DEVICE_FAIL=driver tcc_step_device_open fails with
 *                               cudaErrorInsufficientDriver (as on a machine
 *                               without a driver); =memory with
 *                               cudaErrorMemoryAllocation; =copy makes every
 *                               copy fail with cudaErrorIllegalAddress
 *   TCC_FAKE_DEVICE_INF=N,M,... before the N-th, M-th, ... call of
 *                               tcc_step_apply (1-based, in this process),
 *                               put +inf into the first gradient, so that the
 *                               step is skipped (apply returns 2)
 *   TCC_FAKE_DEVICE_APPLY_FAIL=N the N-th call of tcc_step_apply fails
 *                               (code 9), as a step whose device died would
 *   TCC_FAKE_DEVICE_LOG=FILE    append one line per micro_step/apply/close:
 *                               `micro <grad_scale>`, `apply <step> <lr>
 *                               <loss_scale> <rc>`, `close`
 *   TCC_FAKE_DEVICE_PEAK=BYTES  what tcc_step_device_memory reports as the
 *                               peak (default: the arena plus 1 MiB)
 *
 * Built with -DFAKE_NO_DEVICE_FUNCTIONS it lacks the tcc_step_device_*
 * and copy functions (a broken device step, which tcc-run must refuse).
 *
 * tcc_step_apply with loss_scale > 0 (and != 1) divides the accumulated
 * gradients by it here, then calls the CPU step's apply with loss_scale 1:
 * the CPU step need not implement loss scaling for this test, and a
 * power-of-two scale leaves float gradients exact.
 *
 *===----------------------------------------------------------------------===*/
#define _GNU_SOURCE
#include "runtime/tcc_step.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((visibility("default")))

static void *g_lib;
static const tcc_step_info *g_real;
static tcc_step_info g_info;
static int (*r_init)(void *);
static int (*r_zero)(void *);
static int (*r_micro)(void *, double);
static int (*r_apply)(void *, tcc_optim_args *);
static int (*r_trace)(tcc_step_trace_hook, void *);

static char *g_handle;  /* the PROT_NONE reservation handed to tcc-run */
static char *g_real_arena;
static size_t g_bytes __attribute__((unused));
static long g_apply_calls;

static void fail_hard(const char *what) {
  fprintf(stderr, "fake_device_step: %s\n", what);
  abort();
}

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  const char *path = getenv("TCC_FAKE_DEVICE_LOG");
  if (!path || !*path)
    return;
  FILE *f = fopen(path, "a");
  if (!f)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static int load(void) {
  if (g_real)
    return 1;
  const char *path = getenv("TCC_FAKE_DEVICE_STEP");
  if (!path || !*path) {
    fprintf(stderr, "fake_device_step: set TCC_FAKE_DEVICE_STEP\n");
    return 0;
  }
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    fprintf(stderr, "fake_device_step: %s\n", dlerror());
    return 0;
  }
  const tcc_step_info *(*get)(void) =
      (const tcc_step_info *(*)(void))dlsym(g_lib, "tcc_step_get_info");
  r_init = (int (*)(void *))dlsym(g_lib, "tcc_step_init");
  r_zero = (int (*)(void *))dlsym(g_lib, "tcc_step_zero_grads");
  r_micro = (int (*)(void *, double))dlsym(g_lib, "tcc_step_micro_step");
  r_apply = (int (*)(void *, tcc_optim_args *))dlsym(g_lib, "tcc_step_apply");
  r_trace = (int (*)(tcc_step_trace_hook, void *))dlsym(g_lib, "tcc_step_set_trace_hook");
  if (!get || !r_init || !r_zero || !r_micro || !r_trace)
    return 0;
  g_real = get();
  if (!g_real)
    return 0;
  g_info = *g_real;
  g_info.target = "cuda";
  g_info.device_arena = 1;
  return 1;
}

/* The real arena behind the handle tcc-run passes. */
static char *real(const void *arena) {
  if (!g_handle || arena != g_handle)
    fail_hard("called with a pointer that is not the device arena");
  return g_real_arena;
}

__attribute__((unused)) static int set_err(char *err, uint64_t len,
                                           const char *msg) {
  if (err && len) {
    strncpy(err, msg, len - 1);
    err[len - 1] = '\0';
  }
  return 1;
}

EXPORT const tcc_step_info *tcc_step_get_info(void) {
  return load() ? &g_info : NULL;
}

#ifndef FAKE_NO_DEVICE_FUNCTIONS
EXPORT int tcc_step_device_open(void **arena, char *err, uint64_t err_len) {
  const char *f = getenv("TCC_FAKE_DEVICE_FAIL");
  if (f && strcmp(f, "driver") == 0)
    return set_err(err, err_len,
                   "cudaErrorInsufficientDriver: CUDA driver version is "
                   "insufficient for CUDA runtime version");
  if (f && strcmp(f, "memory") == 0)
    return set_err(err, err_len, "cudaErrorMemoryAllocation: out of memory");
  if (!load() || g_handle)
    return set_err(err, err_len, "cudaErrorInitializationError: fake");
  g_bytes = (size_t)((g_info.arena_bytes + 63) / 64 * 64);
  if (g_bytes == 0)
    g_bytes = 64;
  void *h = mmap(NULL, g_bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (h == MAP_FAILED)
    return set_err(err, err_len, "cudaErrorMemoryAllocation: mmap");
  if (posix_memalign((void **)&g_real_arena, 64, g_bytes) != 0) {
    munmap(h, g_bytes);
    return set_err(err, err_len, "cudaErrorMemoryAllocation: malloc");
  }
  /* cudaMalloc + cudaMemset(0), as the real device steps do. */
  memset(g_real_arena, 0, g_bytes);
  g_handle = (char *)h;
  *arena = h;
  return 0;
}

EXPORT int tcc_step_device_close(void *arena) {
  real(arena);
  munmap(g_handle, g_bytes);
  free(g_real_arena);
  g_handle = NULL;
  g_real_arena = NULL;
  log_line("close");
  return 0;
}

static int copy_fails(char *err, uint64_t len) {
  const char *f = getenv("TCC_FAKE_DEVICE_FAIL");
  if (f && strcmp(f, "copy") == 0)
    return set_err(err, len,
                   "cudaErrorIllegalAddress: an illegal memory access was "
                   "encountered");
  return 0;
}

EXPORT int tcc_step_copy_in(void *arena, uint64_t offset, const void *src,
                            uint64_t bytes, char *err, uint64_t err_len) {
  char *a = real(arena);
  if (copy_fails(err, err_len))
    return 1;
  if (offset > g_bytes || bytes > g_bytes - offset)
    fail_hard("copy_in outside the arena");
  memcpy(a + offset, src, bytes);
  return 0;
}

EXPORT int tcc_step_copy_out(const void *arena, uint64_t offset, void *dst,
                             uint64_t bytes, char *err, uint64_t err_len) {
  char *a = real(arena);
  if (copy_fails(err, err_len))
    return 1;
  if (offset > g_bytes || bytes > g_bytes - offset)
    fail_hard("copy_out outside the arena");
  memcpy(dst, a + offset, bytes);
  return 0;
}

EXPORT int tcc_step_device_memory(uint64_t *peak, uint64_t *total) {
  const char *p = getenv("TCC_FAKE_DEVICE_PEAK");
  *peak = p && *p ? strtoull(p, NULL, 10) : g_info.arena_bytes + (1u << 20);
  *total = 80ull << 30;
  return 0;
}

/* Input staging: the bytes are kept here until the next micro-step begins,
 * which scatters them into the inputs' arena slots. Staging twice without a
 * micro-step in between, or the wrong number of bytes, is a tcc-run bug. */
static char *g_staging;
static int g_staged;
static int g_micro_rc;

EXPORT int tcc_step_stage_inputs(void *arena, const void *src, uint64_t bytes,
                                 char *err, uint64_t err_len) {
  real(arena);
  if (copy_fails(err, err_len))
    return 1;
  uint64_t need = 0;
  for (int32_t i = 0; i < g_info.num_inputs; ++i)
    need += g_info.inputs[i].bytes;
  if (bytes != need)
    fail_hard("tcc_step_stage_inputs: not the inputs' total bytes");
  if (g_staged)
    fail_hard("tcc_step_stage_inputs: inputs staged twice before a "
              "micro-step took them");
  free(g_staging);
  g_staging = (char *)malloc(bytes ? bytes : 1);
  if (!g_staging)
    fail_hard("malloc");
  memcpy(g_staging, src, bytes);
  g_staged = 1;
  return 0;
}

EXPORT int tcc_step_micro_step_begin(void *arena, double grad_scale) {
  char *a = real(arena);
  if (g_staged) {
    const char *p = g_staging;
    for (int32_t i = 0; i < g_info.num_inputs; ++i) {
      memcpy(a + g_info.inputs[i].offset, p, g_info.inputs[i].bytes);
      p += g_info.inputs[i].bytes;
    }
    g_staged = 0;
  }
  log_line("micro %.17g", grad_scale);
  g_micro_rc = r_micro(a, grad_scale);
  return 0;
}

EXPORT int tcc_step_micro_step_end(void *arena) {
  real(arena);
  return g_micro_rc;
}

#endif /* FAKE_NO_DEVICE_FUNCTIONS */

EXPORT int tcc_step_init(void *arena) { return r_init(real(arena)); }

/* The CPU step's hook, called as its marks happen (seconds -1). */
EXPORT int tcc_step_set_trace_hook(tcc_step_trace_hook hook, void *ctx) {
  return load() ? r_trace(hook, ctx) : 1;
}

EXPORT int tcc_step_zero_grads(void *arena) { return r_zero(real(arena)); }

EXPORT int tcc_step_micro_step(void *arena, double grad_scale) {
  log_line("micro %.17g", grad_scale);
  return r_micro(real(arena), grad_scale);
}

static int listed(const char *list, long n) {
  if (!list)
    return 0;
  const char *p = list;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p)
      return 0;
    if (v == n)
      return 1;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

EXPORT int tcc_step_apply(void *arena, tcc_optim_args *args) {
  char *a = real(arena);
  if (!r_apply)
    return 3;
  ++g_apply_calls;
  if (listed(getenv("TCC_FAKE_DEVICE_APPLY_FAIL"), g_apply_calls))
    return 9;
  const tcc_tensor_desc *first = NULL;
  for (int i = 0; i < g_info.num_params; ++i) {
    const tcc_tensor_desc *g = &g_info.grads[i];
    if (g->bytes == 0)
      continue;
    if (!first)
      first = g;
    if (args->loss_scale > 0 && args->loss_scale != 1) {
      if (g->dtype == TCC_DTYPE_F32) {
        float *p = (float *)(a + g->offset);
        for (uint64_t j = 0; j < g->bytes / 4; ++j)
          p[j] = (float)(p[j] / args->loss_scale);
      } else if (g->dtype == TCC_DTYPE_F64) {
        double *p = (double *)(a + g->offset);
        for (uint64_t j = 0; j < g->bytes / 8; ++j)
          p[j] = p[j] / args->loss_scale;
      } else {
        fail_hard("loss scaling of a gradient that is not f32/f64");
      }
    }
  }
  if (first && listed(getenv("TCC_FAKE_DEVICE_INF"), g_apply_calls)) {
    if (first->dtype == TCC_DTYPE_F32) {
      float inf = INFINITY;
      memcpy(a + first->offset, &inf, 4);
    } else {
      double inf = INFINITY;
      memcpy(a + first->offset, &inf, 8);
    }
  }
  tcc_optim_args copy = *args;
  copy.loss_scale = 1.0;
  int rc = r_apply(a, &copy);
  args->grad_norm = copy.grad_norm;
  log_line("apply %lld %.17g %.17g %d", (long long)args->step, args->lr,
           args->loss_scale, rc);
  return rc;
}
