//===- mma.h - nvcuda::wmma for tcc's CUDA emulation -------------*- C++ -*-===//
//
// Stands in for the toolkit's mma.h when tcc's CUDA code is built for the
// host (see tcc_cuda_emu.h): the warp matrix functions (WMMA) for the
// 16x16x16 shape with __half multiplicands and float (or __half)
// accumulators, the only ones tcc's kernels use.
//
// A fragment here holds the whole 16x16 tile in every thread of the warp
// (num_elements == 256, x[r * 16 + c] is element (r, c) of the tile, rows
// and columns as the matrix is used: m x k for matrix_a, k x n for matrix_b,
// m x n for accumulator), where a GPU spreads it over the warp's lanes in an
// unspecified layout. So code that reads or writes frag.x[i] of a fragment
// other than by a uniform elementwise loop (the same operation on every
// element) is not portable and is not checked here.
//
// Every function is warp-collective, as on a GPU: it is a warp
// synchronisation point (as __syncwarp), so calling it from divergent code
// (not all live lanes of the warp) deadlocks and fails the launch.
// load_matrix_sync reads the tile first and synchronises after; the other
// functions synchronise first. store_matrix_sync writes, in each lane, only
// that lane's share of the tile (element e by lane e % 32). So a warp that
// writes shared memory lane by lane and loads it into a fragment without a
// __syncwarp() in between, or that stores a fragment and reads the tile lane
// by lane without a __syncwarp() in between, reads stale data here, as it
// may on a GPU. mma_sync multiplies the __half elements exactly in float and
// accumulates them in float in order of k (a GPU's tensor cores may add in
// another order); a lane whose operands are the bytes the previous lane
// multiplied takes that product (the same bits) instead of computing it. Pointers must be 32-byte aligned and ldm a multiple of
// 16 bytes, as CUDA requires: otherwise the launch fails with
// cudaErrorMisalignedAddress and nothing is accessed.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_CUDA_EMU_MMA_H
#define TCC_CUDA_EMU_MMA_H

#include "cuda_fp16.h"
#include "tcc_cuda_emu.h"

#include <cstring>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "tcc's WMMA emulation has the 16x16x16 shape only");
  static_assert(std::is_same<Use, accumulator>::value ? std::is_void<Layout>::value
                                                      : std::is_same<Layout, row_major>::value ||
                                                            std::is_same<Layout, col_major>::value,
                "matrix_a / matrix_b fragments need row_major or col_major, accumulators no layout");
  static_assert(std::is_same<Use, accumulator>::value ? (std::is_same<T, float>::value || std::is_same<T, __half>::value)
                                                      : std::is_same<T, __half>::value,
                "tcc's WMMA emulation has __half multiplicands and float or __half accumulators");

public:
  typedef T element_type;
  typedef T storage_element_type;
  enum { num_elements = 256 };
  T x[num_elements];
};

namespace detail {
/// The warp-collective checks of a load or store: the CUDA alignment rules.
template <class T> inline bool aligned(const T *p, unsigned ldm, const char *what) {
  if (!tcc_emu::check_aligned(p, 32, what))
    return false;
  if ((static_cast<size_t>(ldm) * sizeof(T)) % 16 != 0) {
    std::fprintf(stderr, "tcc CUDA emulation: %s with ldm %u, not a multiple of 16 bytes\n", what, ldm);
    tcc_emu::record(cudaErrorMisalignedAddress);
    return false;
  }
  return true;
}
inline unsigned lane() { return static_cast<unsigned>(tcc_emu::block().current) % 32; }
template <class T> inline float to_float(T v) { return static_cast<float>(v); }
} // namespace detail

template <class Use, int M, int N, int K, class T, class Layout, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, const V &v) {
  tcc_emu::barrier(true);
  const T t = static_cast<T>(v);
  for (int i = 0; i < 256; ++i)
    f.x[i] = t;
}

/// matrix_a / matrix_b: the layout is the fragment's.
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load needs a layout_t");
  if (detail::aligned(p, ldm, "wmma::load_matrix_sync")) {
    const bool row = std::is_same<Layout, row_major>::value;
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        f.x[r * 16 + c] = row ? p[static_cast<size_t>(r) * ldm + c] : p[static_cast<size_t>(c) * ldm + r];
  }
  tcc_emu::barrier(true);
}

/// Accumulators.
template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t layout) {
  if (detail::aligned(p, ldm, "wmma::load_matrix_sync")) {
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        f.x[r * 16 + c] =
            layout == mem_row_major ? p[static_cast<size_t>(r) * ldm + c] : p[static_cast<size_t>(c) * ldm + r];
  }
  tcc_emu::barrier(true);
}

template <class T>
inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t layout) {
  tcc_emu::barrier(true);
  if (!detail::aligned(p, ldm, "wmma::store_matrix_sync"))
    return;
  for (unsigned e = detail::lane(); e < 256; e += 32) {
    const unsigned r = e / 16, c = e % 16;
    p[layout == mem_row_major ? static_cast<size_t>(r) * ldm + c : static_cast<size_t>(c) * ldm + r] = f.x[e];
  }
}

/// The last product a thread computed, by its operands' bytes: the lanes of
/// a warp multiply the same tiles (each holds the whole tile here), so the
/// second to 32nd lane copies the first one's result instead of doing the
/// 4096 multiply-adds again. A lane whose operands differ computes its own.
template <class TC> struct MmaMemo {
  bool valid = false;
  __half a[256], b[256];
  TC c[256];
  float out[256];
};

/// d = a b + c (d may be c), products and sums in float.
template <class LA, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, 16, 16, 16, TD> &d, const fragment<matrix_a, 16, 16, 16, __half, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __half, LB> &b,
                     const fragment<accumulator, 16, 16, 16, TC> &c, bool /*satf*/ = false) {
  tcc_emu::barrier(true);
  static MmaMemo<TC> memo; // kernels run on the calling thread (tcc_cuda_emu.h)
  if (memo.valid && std::memcmp(memo.a, a.x, sizeof memo.a) == 0 && std::memcmp(memo.b, b.x, sizeof memo.b) == 0 &&
      std::memcmp(memo.c, c.x, sizeof memo.c) == 0) {
    for (int i = 0; i < 256; ++i)
      d.x[i] = static_cast<TD>(memo.out[i]);
    return;
  }
  std::memcpy(memo.a, a.x, sizeof memo.a);
  std::memcpy(memo.b, b.x, sizeof memo.b);
  std::memcpy(memo.c, c.x, sizeof memo.c);
  float fa[256], fb[256];
  float *out = memo.out;
  for (int i = 0; i < 256; ++i) {
    fa[i] = detail::to_float(a.x[i]);
    fb[i] = detail::to_float(b.x[i]);
  }
  for (int i = 0; i < 256; ++i)
    out[i] = detail::to_float(c.x[i]);
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 16; ++k) {
      const float am = fa[m * 16 + k];
      for (int n = 0; n < 16; ++n)
        out[m * 16 + n] += am * fb[k * 16 + n];
    }
  memo.valid = true;
  for (int i = 0; i < 256; ++i)
    d.x[i] = static_cast<TD>(out[i]);
}

} // namespace wmma
} // namespace nvcuda

#endif // TCC_CUDA_EMU_MMA_H
