// Compile-only test of runtime/cuda/kernels.cuh and runtime/cuda/gemm.cuh:
// instantiates every launcher and device helper with the storage-type
// combinations the generated code uses. Needs no GPU (main() launches
// nothing).
//
//   /usr/local/cuda/bin/nvcc -std=c++17 -arch=sm_90 -O2 -I/work/main/runtime -c test/runtime/cuda_kernels_compile.cu
//
// To link and run it instead of -c: -o cuda_kernels_compile -lcublasLt -lcudart
#include "cuda/gemm.cuh"
#include "cuda/gemm.cu" // one unit: the definitions too
#include "cuda/kernels.cuh"

#include <cstdint>
#include <cstdio>

using namespace tcc::cuda;
using half = __half;

namespace {

template <class T> T *P() { return nullptr; }

// ---- device scalar helpers ---------------------------------------------------

template <class TO, class TI> __device__ void conv_one(void *o, const void *i) {
  *static_cast<TO *>(o) = conv<TO>(*static_cast<const TI *>(i));
}

template <class TO, class... TIs> __device__ void conv_row(void *o, const void *i) { (conv_one<TO, TIs>(o, i), ...); }

template <BinaryOp Op, class TO, class C> __device__ void bin_one(void *o, const void *a, const void *b) {
  *static_cast<TO *>(o) = binary_scalar<Op, TO>(*static_cast<const C *>(a), *static_cast<const C *>(b));
}
template <class TO, class C> __device__ void bin_all(void *o, const void *a, const void *b) {
  bin_one<BinaryOp::Add, TO, C>(o, a, b);
  bin_one<BinaryOp::Sub, TO, C>(o, a, b);
  bin_one<BinaryOp::Mul, TO, C>(o, a, b);
  bin_one<BinaryOp::Div, TO, C>(o, a, b);
  bin_one<BinaryOp::Pow, TO, C>(o, a, b);
  bin_one<BinaryOp::Equal, TO, C>(o, a, b);
  bin_one<BinaryOp::Less, TO, C>(o, a, b);
  bin_one<BinaryOp::Greater, TO, C>(o, a, b);
  bin_one<BinaryOp::And, TO, C>(o, a, b);
  bin_one<BinaryOp::Or, TO, C>(o, a, b);
}
template <UnaryOp Op, class T> __device__ void un_one(void *o) { *static_cast<T *>(o) = unary_scalar<Op>(*static_cast<T *>(o)); }
template <class T> __device__ void un_all(void *o) {
  un_one<UnaryOp::Sqrt, T>(o);
  un_one<UnaryOp::Neg, T>(o);
  un_one<UnaryOp::Exp, T>(o);
  un_one<UnaryOp::Log, T>(o);
  un_one<UnaryOp::Erf, T>(o);
  un_one<UnaryOp::Tanh, T>(o);
  un_one<UnaryOp::Sigmoid, T>(o);
  un_one<UnaryOp::Relu, T>(o);
  un_one<UnaryOp::Reciprocal, T>(o);
  un_one<UnaryOp::Abs, T>(o);
  un_one<UnaryOp::Not, T>(o);
}

#define TCC_ALL_TYPES half, float, int64_t, int32_t, uint8_t, int8_t, uint16_t, int16_t, uint32_t, uint64_t

__global__ void scalar_helpers_kernel(void *o, const void *a, const void *b, half *h, float *f) {
  // ld
  f[0] = ld(h[0]) + ld(f[1]) + static_cast<float>(ld(static_cast<const int64_t *>(a)[0])) +
         static_cast<float>(ld(static_cast<const uint8_t *>(a)[0]));
  // conv: every storage type to every storage type
  conv_row<half, TCC_ALL_TYPES, double>(o, a);
  conv_row<float, TCC_ALL_TYPES, double>(o, a);
  conv_row<int64_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<int32_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<uint8_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<int8_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<uint16_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<int16_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<uint32_t, TCC_ALL_TYPES, double>(o, a);
  conv_row<uint64_t, TCC_ALL_TYPES, double>(o, a);
  // binary_scalar on compute types
  bin_all<half, float>(o, a, b);
  bin_all<float, float>(o, a, b);
  bin_all<uint8_t, float>(o, a, b);
  bin_all<int64_t, int64_t>(o, a, b);
  bin_all<int32_t, int32_t>(o, a, b);
  bin_all<uint8_t, int64_t>(o, a, b);
  bin_all<uint8_t, uint8_t>(o, a, b);
  bin_all<uint64_t, uint64_t>(o, a, b);
  bin_all<int8_t, int8_t>(o, a, b);
  *static_cast<float *>(o) = binary_scalar<BinaryOp::Mul, float>(1.0f, int64_t(2)); // mixed
  *static_cast<half *>(o) = binary_scalar<BinaryOp::Add, half>(h[0], 1.0f);         // __half accepted
  // unary_scalar
  un_all<float>(o);
  un_all<int64_t>(o);
  un_all<int32_t>(o);
  un_all<uint8_t>(o);
  un_all<uint64_t>(o);
  un_all<int8_t>(o);
  un_all<half>(o);
  // gelu
  f[2] = gelu_scalar(f[3], true) + gelu_scalar(f[3], false) + gelu_grad_scalar(f[4], f[5], true) +
         gelu_grad_scalar(f[4], f[5], false);
  // load8 / store8
  float v[8];
  load8(h, v);
  store8(h + 8, v);
  half8 x = *reinterpret_cast<const half8 *>(h);
  h[16] = x.h[3];
}

// ---- launchers -----------------------------------------------------------------

template <class TO, class TA, class TB> void inst_binary(Shape s) {
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Equal,
                      BinaryOp::Less, BinaryOp::Greater, BinaryOp::And, BinaryOp::Or})
    binary(op, P<TO>(), s, P<const TA>(), s, P<const TB>(), s);
}

template <class TO, class TI> void inst_unary() { unary(UnaryOp::Exp, P<TO>(), P<const TI>(), 0); }

template <class TO, class TI> void inst_cast_one() { cast(P<TO>(), P<const TI>(), 0); }
template <class TO> void inst_cast_from_all() {
  inst_cast_one<TO, half>();
  inst_cast_one<TO, float>();
  inst_cast_one<TO, int64_t>();
  inst_cast_one<TO, int32_t>();
  inst_cast_one<TO, uint8_t>();
  inst_cast_one<TO, int8_t>();
  inst_cast_one<TO, uint16_t>();
  inst_cast_one<TO, int16_t>();
  inst_cast_one<TO, uint32_t>();
  inst_cast_one<TO, uint64_t>();
}

template <class T> void inst_same_type(Shape s) {
  const int64_t perm[8] = {1, 0};
  const int64_t starts[8] = {0, 0}, steps[8] = {1, -1};
  const T *ins[2] = {nullptr, nullptr};
  const int64_t sizes[2] = {1, 1};
  cast_to_bool(P<uint8_t>(), P<const T>(), 0);
  where(P<T>(), s, P<const uint8_t>(), s, P<const T>(), s, P<const T>(), s);
  broadcast_to(P<T>(), s, P<const T>(), s);
  copy(P<T>(), P<const T>(), 0);
  fill(P<T>(), 0, 1.5);
  transpose(P<T>(), P<const T>(), s, perm);
  slice(P<T>(), s, P<const T>(), s, starts, steps);
  slice_grad(P<T>(), s, P<const T>(), s, starts, steps);
  concat(P<T>(), s, 1, 2, ins, sizes);
}

template <class TO, class TI> void inst_move_mixed(Shape s) {
  const int64_t perm[8] = {1, 0};
  const int64_t starts[8] = {0, 0}, steps[8] = {1, -1};
  const TI *ins[2] = {nullptr, nullptr};
  const int64_t sizes[2] = {1, 1};
  where(P<TO>(), s, P<const uint8_t>(), s, P<const TI>(), s, P<const TO>(), s);
  broadcast_to(P<TO>(), s, P<const TI>(), s);
  copy(P<TO>(), P<const TI>(), 0);
  transpose(P<TO>(), P<const TI>(), s, perm);
  slice(P<TO>(), s, P<const TI>(), s, starts, steps);
  slice_grad(P<TO>(), s, P<const TI>(), s, starts, steps);
  concat(P<TO>(), s, 1, 2, ins, sizes);
}

template <class TO, class TD, class I> void inst_gather(Shape s) { gather(P<TO>(), P<const TD>(), s, P<const I>(), 0, 0); }

template <class TS, class I, class TW> void inst_sce(Shape s) {
  sce_loss(P<float>(), P<float>(), P<const TS>(), s, P<const I>(), P<const TW>(), 2, true, -100);
  sce_loss_grad(P<TS>(), P<const float>(), P<const float>(), s, P<const I>(), P<const TW>(), 2, true, -100);
  sce_loss_grad(P<float>(), P<const float>(), P<const float>(), s, P<const I>(), P<const TW>(), 0, false, 0);
  sce_loss_grad(P<__half>(), P<const __half>(), P<const float>(), s, P<const I>(), P<const TW>(), 0, false, 0);
  sce_loss_with_grad(P<float>(), P<__half>(), P<const __half>(), 4, 5, P<const I>(), P<const TW>(), P<const float>(),
                     2, true, -100, P<double>());
}

} // namespace

// Instantiates everything; never called by main (no GPU needed).
void tcc_cuda_kernels_instantiate_all() {
  const Shape s{2, {3, 4}};

  TCC_LAUNCH(1, 1, 0, stream(), scalar_helpers_kernel)(nullptr, nullptr, nullptr, nullptr, nullptr);

  // binary
  inst_binary<half, half, half>(s);
  inst_binary<float, float, float>(s);
  inst_binary<half, half, float>(s);
  inst_binary<half, float, half>(s);
  inst_binary<float, half, float>(s);
  inst_binary<float, float, half>(s);
  inst_binary<float, half, half>(s);
  inst_binary<half, float, float>(s);
  inst_binary<uint8_t, half, half>(s);
  inst_binary<uint8_t, float, float>(s);
  inst_binary<uint8_t, half, float>(s);
  inst_binary<int64_t, int64_t, int64_t>(s);
  inst_binary<int32_t, int32_t, int32_t>(s);
  inst_binary<uint8_t, int64_t, int64_t>(s);
  inst_binary<uint8_t, int32_t, int32_t>(s);
  inst_binary<uint8_t, uint8_t, uint8_t>(s);
  inst_binary<float, float, int64_t>(s);
  inst_binary<half, half, int64_t>(s);

  // unary
  inst_unary<half, half>();
  inst_unary<float, float>();
  inst_unary<half, float>();
  inst_unary<float, half>();
  inst_unary<int64_t, int64_t>();
  inst_unary<int32_t, int32_t>();
  inst_unary<uint8_t, uint8_t>();
  unary(UnaryOp::Not, P<uint8_t>(), P<const uint8_t>(), 0);

  // cast (every storage type to every storage type), cast_to_bool
  inst_cast_from_all<half>();
  inst_cast_from_all<float>();
  inst_cast_from_all<int64_t>();
  inst_cast_from_all<int32_t>();
  inst_cast_from_all<uint8_t>();
  inst_cast_from_all<int8_t>();
  inst_cast_from_all<uint16_t>();
  inst_cast_from_all<int16_t>();
  inst_cast_from_all<uint32_t>();
  inst_cast_from_all<uint64_t>();

  // where, broadcast_to, copy, fill, transpose, slice, slice_grad, concat
  inst_same_type<half>(s);
  inst_same_type<float>(s);
  inst_same_type<int64_t>(s);
  inst_same_type<int32_t>(s);
  inst_same_type<uint8_t>(s);
  inst_same_type<int8_t>(s);
  inst_same_type<uint16_t>(s);
  inst_same_type<int16_t>(s);
  inst_same_type<uint32_t>(s);
  inst_same_type<uint64_t>(s);
  inst_move_mixed<half, float>(s);
  inst_move_mixed<float, half>(s);
  where(P<half>(), s, P<const uint8_t>(), s, P<const half>(), s, P<const float>(), s);
  refresh_half(P<half>(), P<const float>(), 0);

  // softmax
  softmax(P<half>(), P<const half>(), s, 1, false);
  softmax(P<float>(), P<const float>(), s, 1, true);
  softmax(P<float>(), P<const half>(), s, 1, true);
  softmax(P<half>(), P<const float>(), s, 0, false);

  // layer_norm
  layer_norm(P<half>(), P<float>(), P<float>(), P<const half>(), s, 1, P<const half>(), s, P<const half>(), s, 1e-5);
  layer_norm(P<float>(), P<float>(), P<float>(), P<const float>(), s, 1, P<const float>(), s, P<const float>(), s,
             1e-5);
  layer_norm(P<half>(), P<float>(), P<float>(), P<const half>(), s, 1, P<const float>(), s, P<const float>(), s,
             1e-5);
  layer_norm(P<float>(), P<float>(), P<float>(), P<const half>(), s, 1, P<const float>(), s, P<const half>(), s,
             1e-5);
  layer_norm(P<half>(), P<float>(), P<float>(), P<const float>(), s, 1, P<const half>(), s, P<const float>(), s,
             1e-5);

  // reduce
  reduce(P<half>(), P<const half>(), s, 1u, false);
  reduce(P<float>(), P<const float>(), s, 2u, true);
  reduce(P<float>(), P<const half>(), s, 3u, false);
  reduce(P<half>(), P<const float>(), s, 1u, true);
  reduce(P<int64_t>(), P<const int64_t>(), s, 1u, false);
  reduce(P<int32_t>(), P<const int32_t>(), s, 2u, false);
  reduce(P<float>(), P<const int64_t>(), s, 2u, true);

  // gather, gather_grad
  inst_gather<half, half, int64_t>(s);
  inst_gather<half, half, int32_t>(s);
  inst_gather<float, float, int64_t>(s);
  inst_gather<float, float, int32_t>(s);
  inst_gather<int64_t, int64_t, int64_t>(s);
  inst_gather<int64_t, int64_t, int32_t>(s);
  inst_gather<int32_t, int32_t, int64_t>(s);
  inst_gather<uint8_t, uint8_t, int64_t>(s);
  inst_gather<float, half, int64_t>(s);
  inst_gather<half, float, int64_t>(s);
  gather_grad(P<float>(), s, P<const half>(), P<const int64_t>(), 0, 0);
  gather_grad(P<float>(), s, P<const half>(), P<const int32_t>(), 0, 0);
  gather_grad(P<float>(), s, P<const float>(), P<const int64_t>(), 0, 0);
  gather_grad(P<float>(), s, P<const float>(), P<const int32_t>(), 0, 0);

  // losses
  inst_sce<half, int64_t, float>(s);
  inst_sce<half, int32_t, float>(s);
  inst_sce<float, int64_t, float>(s);
  inst_sce<float, int32_t, float>(s);
  inst_sce<half, int64_t, half>(s);
  inst_sce<float, int64_t, half>(s);

  // gelu, gelu_grad, accumulate
  gelu(P<half>(), P<const half>(), 0, true);
  gelu(P<float>(), P<const float>(), 0, false);
  gelu(P<half>(), P<const float>(), 0, false);
  gelu(P<float>(), P<const half>(), 0, true);
  gelu_grad(P<half>(), P<const half>(), P<const half>(), 0, true);
  gelu_grad(P<float>(), P<const float>(), P<const float>(), 0, false);
  gelu_grad(P<half>(), P<const float>(), P<const half>(), 0, false);
  gelu_grad(P<float>(), P<const half>(), P<const half>(), 0, true);
  gelu_grad(P<half>(), P<const half>(), P<const float>(), 0, true);
  gelu_grad(P<float>(), P<const half>(), P<const float>(), 0, false);
  accumulate(P<float>(), P<const half>(), 0);
  accumulate(P<float>(), P<const float>(), 0);

  // optimizers
  const ApplyTensor rows[1] = {{nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0.01f}};
  MultiTensor mt;
  mt.upload(rows, 1);
  ApplyTensor *table = upload_table(rows, 1);
  int64_t nchunks = 0;
  int64_t *cs = upload_chunk_starts(rows, 1, &nchunks);
  double *acc = nullptr;
  sum_squares_multi(table, cs, 1, nchunks, acc);
  const double ss = sum_squares_all(mt.table(), mt.chunk_start(), mt.ntensors(), mt.nchunks(), acc);
  adamw_multi(table, cs, 1, nchunks, 1e-3f, 0.9f, 0.999f, 1e-8f, int64_t(1), ss > 1.0 ? 1.0 / ss : 1.0);
  sgd_multi(table, cs, 1, nchunks, 0.1, 0.9, true, 1, 1.0);

  // attention (every head-size instantiation is behind the launchers' switch)
  const AttentionStrides ast{0, 0, 0};
  const AttentionDims adims{1, 1, 1, 1, 64, 64};
  attention_forward(P<half>(), ast, P<float>(), P<const half>(), ast, P<const half>(), ast, P<const half>(), ast,
                    P<const half>(), ast, adims, 0.125f, true);
  attention_backward(P<half>(), ast, P<half>(), ast, P<half>(), ast, P<const half>(), ast, P<const half>(), ast,
                     P<const half>(), ast, P<const half>(), ast, P<const half>(), ast, P<const float>(),
                     P<const half>(), ast, adims, 0.125f, false);

  // errors
  int *flag = error_flag_device();
  (void)flag;
  (void)read_and_clear_error_flag();

  // gemm
  set_workspace(nullptr, 0);
  const Shape a3{3, {2, 4, 8}}, b2{2, {8, 16}};
  (void)matmul(0, P<half>(), P<const half>(), a3, false, P<const half>(), b2, true);
  std::printf("%s\n", last_error());
}

int main() {
  std::printf("cuda_kernels_compile: compiled\n");
  return 0;
}
