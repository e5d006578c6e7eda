//===- kernels_reduce.cuh - reduction kernels ------------------------*- CUDA -*-===//
//
// Part of tcc's CUDA kernel library: reduction kernels. kernels.cuh
// includes every part and states the conventions they share (storage
// types, asynchronous launchers on stream(), index errors as a device flag).
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CUDA_KERNELS_REDUCE_CUH
#define TCC_RUNTIME_CUDA_KERNELS_REDUCE_CUH

#include "common.cuh"

namespace tcc::cuda {

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace detail {

template <class TI> using reduce_acc_t = std::conditional_t<is_floating_v<TI>, float, double>;

template <class TO, class Acc> __device__ __forceinline__ TO reduce_finish(Acc s, int64_t count, bool mean) {
  if (!mean)
    return conv<TO>(s);
  return conv<TO>(s / static_cast<Acc>(count));
}

/// Stores a reduction's result, or with `acc` (fp32 outputs: a gradient
/// accumulator) adds it to what is there; each output has one writer.
template <class TO> __device__ __forceinline__ void store_reduced(TO *p, TO v, bool acc) {
  if constexpr (std::is_same_v<TO, float>) {
    *p = acc ? *p + v : v;
  } else {
    *p = v;
  }
}

// Reduced elements of output o are in[o * R + r], r < R: one block per output.
template <class TO, class TI>
__global__ void reduce_rows_block_kernel(TO *out, const TI *in, int64_t on, int64_t R, bool mean, bool acc) {
  using Acc = reduce_acc_t<TI>;
  __shared__ Acc sh[32];
  for (int64_t o = blockIdx.x; o < on; o += gridDim.x) {
    const TI *x = in + o * R;
    Acc s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      s += static_cast<Acc>(ld(x[r]));
    s = block_allreduce(s, SumOp(), sh);
    if (threadIdx.x == 0)
      store_reduced(out + o, reduce_finish<TO>(s, R, mean), acc);
  }
}

// Same layout, one warp per output.
template <class TO, class TI>
__global__ void reduce_rows_warp_kernel(TO *out, const TI *in, int64_t on, int64_t R, bool mean, bool acc) {
  using Acc = reduce_acc_t<TI>;
  const int lane = threadIdx.x & 31;
  const int64_t nwarps = gstride() >> 5;
  for (int64_t o = gtid() >> 5; o < on; o += nwarps) {
    const TI *x = in + o * R;
    Acc s = 0;
    for (int64_t r = lane; r < R; r += 32)
      s += static_cast<Acc>(ld(x[r]));
    s = warp_allreduce(s, SumOp());
    if (lane == 0)
      store_reduced(out + o, reduce_finish<TO>(s, R, mean), acc);
  }
}

// General: block (bx, by), bx * by == 256; threadIdx.x picks an output of the
// block's tile of bx outputs (consecutive outputs: coalesced when the kept
// dims are innermost), threadIdx.y a slice of the reduced elements.
template <class TO, class TI>
__global__ void reduce_general_kernel(TO *out, const TI *in, int64_t on, NdIndex<1> kept, int64_t count,
                                      NdIndex<1> red, bool mean, bool acc) {
  using Acc = reduce_acc_t<TI>;
  __shared__ Acc sh[kThreads];
  const int bx = blockDim.x, by = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * bx; base < on; base += static_cast<int64_t>(gridDim.x) * bx) {
    const int64_t o = base + tx;
    Acc s = 0;
    if (o < on) {
      int64_t ko[1];
      nd_offsets(kept, o, ko);
      const TI *x = in + ko[0];
      if (red.rank <= 1) {
        const int64_t st = red.rank == 1 ? red.st[0][0] : 0;
        for (int64_t r = ty; r < count; r += by)
          s += static_cast<Acc>(ld(x[r * st]));
      } else {
        for (int64_t r = ty; r < count; r += by) {
          int64_t ro[1];
          nd_offsets(red, r, ro);
          s += static_cast<Acc>(ld(x[ro[0]]));
        }
      }
    }
    if (by > 1) {
      sh[ty * bx + tx] = s;
      __syncthreads();
      if (ty == 0) {
        for (int j = 1; j < by; ++j)
          s += sh[j * bx + tx];
      }
      __syncthreads();
    }
    if (ty == 0 && o < on)
      store_reduced(out + o, reduce_finish<TO>(s, count, mean), acc);
  }
}

// Split reduction for few outputs and many reduced elements (floating inputs
// only): grid (tiles, splits); block (bx, by), bx * by == 256, by a power of
// two. Block (t, j) sums outputs [t*bx, t*bx + bx) over the reduced slice
// [j*chunk, (j+1)*chunk) into g_tcc_reduce_partials[j * on + o]; the last
// block of tile t to finish (counter) adds the partials in a fixed order, so
// results are deterministic. The scratch is static device memory, so calls
// must not run concurrently (they are all on stream()).
constexpr int64_t kReduceScratch = int64_t(1) << 21; // floats
constexpr int64_t kReduceCounters = int64_t(1) << 16;
static __device__ float g_tcc_reduce_partials[kReduceScratch];
static __device__ unsigned int g_tcc_reduce_counters[kReduceCounters]; // 0 between calls

__device__ __forceinline__ float tree_sum_y(float s, float *sh) { // over threadIdx.y; all threads get the sum
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  __syncthreads();
  sh[ty * bx + tx] = s;
  __syncthreads();
  for (int h = by >> 1; h > 0; h >>= 1) {
    if (ty < h)
      sh[ty * bx + tx] += sh[(ty + h) * bx + tx];
    __syncthreads();
  }
  return sh[tx];
}

template <class TO, class TI>
__global__ void reduce_split_kernel(TO *out, const TI *in, int64_t on, NdIndex<1> kept, int64_t count,
                                    NdIndex<1> red, bool mean, int64_t chunk, bool acc) {
  __shared__ float sh[kThreads];
  __shared__ int is_last;
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * bx + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < count ? r0 + chunk : count;
  float s = 0.0f;
  if (o < on) {
    int64_t ko[1];
    nd_offsets(kept, o, ko);
    const TI *x = in + ko[0];
    if (red.rank <= 1) {
      const int64_t st = red.rank == 1 ? red.st[0][0] : 0;
      for (int64_t r = r0 + ty; r < r1; r += by)
        s += static_cast<float>(ld(x[r * st]));
    } else {
      for (int64_t r = r0 + ty; r < r1; r += by) {
        int64_t ro[1];
        nd_offsets(red, r, ro);
        s += static_cast<float>(ld(x[ro[0]]));
      }
    }
  }
  s = tree_sum_y(s, sh);
  if (ty == 0 && o < on)
    g_tcc_reduce_partials[static_cast<int64_t>(blockIdx.y) * on + o] = s;
  __threadfence();
  __syncthreads();
  if (tx == 0 && ty == 0) {
    const unsigned prev = atomicAdd(&g_tcc_reduce_counters[blockIdx.x], 1u);
    is_last = prev == gridDim.y - 1;
  }
  __syncthreads();
  if (!is_last)
    return;
  __threadfence();
  float t = 0.0f;
  if (o < on)
    for (int64_t j = ty; j < gridDim.y; j += by)
      t += __ldcg(&g_tcc_reduce_partials[j * on + o]);
  t = tree_sum_y(t, sh);
  if (ty == 0 && o < on)
    store_reduced(out + o, reduce_finish<TO>(t, count, mean), acc);
  if (tx == 0 && ty == 0)
    g_tcc_reduce_counters[blockIdx.x] = 0;
}

} // namespace detail

/// Sum (or mean) over the dims whose bit is set in axes_mask (bit d = dim d),
/// keepdims layout: the output holds the kept dims in order (row-major), as
/// the CPU header. Accumulates in float (double for integer inputs). Mean
/// over an empty set is NaN; a sum is 0. mask 0 = converting copy.
/// Few outputs over many elements use a deterministic split reduction with a
/// static device scratch (reduce calls must not run concurrently).
/// `add_into` (for sums into fp32 `out` only: tcc asks for it there, for a
/// gradient accumulator): adds the sums into `out` instead of writing them.
template <class TO, class TI>
void reduce(TO *out, const TI *in, Shape is, uint32_t axes_mask, bool mean, bool add_into = false) {
  using namespace detail;
  uint32_t mask = 0;
  for (int32_t d = 0; d < is.rank; ++d)
    mask |= axes_mask & (1u << d);
  if (mask == 0) {
    if constexpr (std::is_same_v<TO, float>)
      if (add_into) {
        accumulate(out, in, is.numel());
        return;
      }
    copy(out, in, is.numel());
    return;
  }
  int64_t ist[8];
  contig_strides(is, ist);
  int64_t on = 1, count = 1;
  Shape ks{0, {}}, rs{0, {}};
  int64_t kst[1][8], rst[1][8];
  bool seen_reduced = false, trailing = true; // all non-1 reduced dims after all non-1 kept dims
  for (int32_t d = 0; d < is.rank; ++d) {
    const int64_t n = is.dims[d];
    if (mask & (1u << d)) {
      count *= n;
      if (n != 1) {
        seen_reduced = true;
        rs.dims[rs.rank] = n;
        rst[0][rs.rank++] = ist[d];
      }
    } else {
      on *= n;
      if (n != 1) {
        if (seen_reduced)
          trailing = false;
        ks.dims[ks.rank] = n;
        kst[0][ks.rank++] = ist[d];
      }
    }
  }
  if (on <= 0)
    return;
  if (count == 0) {
    if (!add_into) // an empty sum adds nothing
      fill(out, on, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  cudaStream_t st = stream();
  const NdIndex<1> kept = make_nd<1>(ks.rank, ks.dims, kst);
  const NdIndex<1> red = make_nd<1>(rs.rank, rs.dims, rst);
  constexpr int64_t kTargetBlocks = 1056; // ~8 blocks of 256 threads per SM on an H100 / H200
  if (trailing && count >= 32 && (on >= 1024 || count < 4096)) {
    if (count >= 4096) {
      const int64_t blocks = std::min<int64_t>(on, kMaxBlocks);
      TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, reduce_rows_block_kernel<TO, TI>)(out, in, on, count, mean, add_into);
    } else {
      const int64_t blocks = std::min<int64_t>((on + 7) / 8, kMaxBlocks);
      TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, reduce_rows_warp_kernel<TO, TI>)(out, in, on, count, mean, add_into);
    }
    return;
  }
  if constexpr (is_floating_v<TI>) {
    // Few outputs, many reduced elements: split the reduced range over blocks.
    // Trailing layout: one output per block, threads along the reduced range
    // (coalesced); else a tile of outputs along x (coalesced when the kept
    // dims are innermost).
    const int bx = trailing ? 1 : on >= 64 ? 64 : on >= 16 ? 16 : 1;
    const int by = kThreads / bx;
    const int64_t tiles = (on + bx - 1) / bx;
    if (count >= 1024 && tiles < kTargetBlocks / 2 && tiles <= kReduceCounters) {
      int64_t splits = (kTargetBlocks + tiles - 1) / tiles;
      splits = std::min<int64_t>(splits, count / (4 * by)); // >= 4 elements per thread
      splits = std::min<int64_t>(splits, kReduceScratch / on);
      splits = std::min<int64_t>(splits, 65535);
      if (splits >= 2) {
        const int64_t chunk = (count + splits - 1) / splits;
        splits = (count + chunk - 1) / chunk;
        TCC_LAUNCH(dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), dim3(bx, by), 0, st, reduce_split_kernel<TO, TI>)(out, in, on, kept, count, red, mean, chunk, add_into);
        return;
      }
    }
  }
  if (trailing && count >= 32) {
    const int64_t blocks = std::min<int64_t>(on, kMaxBlocks);
    TCC_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, st, reduce_rows_block_kernel<TO, TI>)(out, in, on, count, mean, add_into);
    return;
  }
  const int by = count >= 256 ? 16 : count >= 16 ? 4 : 1;
  const int bx = kThreads / by;
  const int64_t blocks = std::min<int64_t>((on + bx - 1) / bx, kMaxBlocks);
  TCC_LAUNCH(static_cast<unsigned>(blocks), dim3(bx, by), 0, st, reduce_general_kernel<TO, TI>)(out, in, on, kept, count, red, mean, add_into);
}

} // namespace tcc::cuda

#endif // TCC_RUNTIME_CUDA_KERNELS_REDUCE_CUH
