/* sgemm throughput of one CBLAS library at a transformer step's shapes;
 * bench/cpu_blas.sh builds it against each library it finds and prints the
 * table. Row-major, C = A B (or A B^T: the weight gradients' and attention's
 * layouts), single precision, median of the runs. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int main(void) {
  /* M, N, K, transB: the GPT 6 x 256 step's projections, MLP, LM head and
   * weight gradients (1024 tokens), an attention head's scores and output
   * (256 x 256 x 32), GPT-2's vocabulary head (256 tokens). */
  const int shapes[][4] = {{1024, 768, 256, 0}, {1024, 1024, 256, 0}, {1024, 256, 1024, 0},
                           {256, 1024, 1024, 1}, {1024, 65, 256, 0},  {256, 256, 32, 1},
                           {256, 32, 256, 0},    {256, 50257, 768, 1}};
  printf("M N K transB ms GFLOP/s\n");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], tb = shapes[s][3];
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N),
          *c = malloc(sizeof(float) * (size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; ++i)
      a[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < (size_t)K * N; ++i)
      b[i] = (float)rand() / RAND_MAX - 0.5f;
    double t[9];
    for (int r = 0; r < 10; ++r) {
      double t0 = now();
      cblas_sgemm(101, 111, tb ? 112 : 111, M, N, K, 1.0f, a, K, b, tb ? K : N, 0.0f, c, N);
      if (r)
        t[r - 1] = now() - t0;
    }
    qsort(t, 9, sizeof t[0], cmp);
    printf("%d %d %d %d %.3f %.1f\n", M, N, K, tb, t[4] * 1e3, 2.0 * M * N * K / t[4] / 1e9);
    free(a), free(b), free(c);
  }
  return 0;
}
