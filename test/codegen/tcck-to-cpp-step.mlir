// RUN: tcc-opt %s --tcc-set-target="target=cpu" --tcc-plan-memory --tcc-lower-to-kernels | tcc-translate --tcck-to-cpp > %t.unfused.cpp
// RUN: FileCheck %s < %t.unfused.cpp
// RUN: c++ -std=c++17 -fsyntax-only -I %tcc_src/runtime -I %tcc_src/runtime/cpu %t.unfused.cpp
// RUN: tcc-opt %s --tcc-set-target="target=cpu" --tcc-fuse --tcc-plan-memory --tcc-lower-to-kernels | tcc-translate --tcck-to-cpp > %t.fused.cpp
// RUN: FileCheck %s --check-prefix=FUSED < %t.fused.cpp
// RUN: c++ -std=c++17 -fsyntax-only -I %tcc_src/runtime -I %tcc_src/runtime/cpu %t.fused.cpp
// A planned step lowered to kernels (tcc-opt) and translated: the C++ the
// CPU step's micro-step body is, which compiles against the kernel library.
// The arena offsets are the plan's (tcc-lower-to-kernels.mlir); the
// parameters, input and seed are the function's arguments.

// CHECK: int micro_step(char *arena, double grad_scale, F *arg0, F *arg1, F *arg2, F *arg3) {
// CHECK-NEXT: (void)arena;
// CHECK-NEXT: (void)grad_scale;
// CHECK-NEXT: TCC_MARK(0);
// CHECK-NEXT: arg3[0] = (F)grad_scale;
// CHECK-NEXT: F *[[MM:v[0-9]+]] = (F *)(arena + 960ULL);
// CHECK-NEXT: matmul([[MM]], arg2, Shape{2, {2, 4}}, arg0, Shape{2, {4, 8}});
// CHECK-NEXT: TCC_MARK(1);
// CHECK-NEXT: F *[[ADD:v[0-9]+]] = (F *)(arena + 1024ULL);
// CHECK-NEXT: binary(BinaryOp::Add, [[ADD]], Shape{2, {2, 8}}, [[MM]], Shape{2, {2, 8}}, arg1, Shape{1, {8}});
// CHECK: softmax({{v[0-9]+}}, [[ADD]], Shape{2, {2, 8}}, 1, false);
// CHECK: { F *acc = (F *)(arena + 192ULL);
// CHECK: { F *acc = (F *)(arena + 576ULL);
// CHECK: std::memcpy((arena + 896ULL), {{v[0-9]+}}, 4ULL);
// CHECK-NEXT: return 0;

// FUSED: int micro_step(
// The bias add runs as each product row is stored; x^T is the GEMM's trans_lhs.
// FUSED: auto [[EPI:epi[0-9]+]] = [&](int64_t base, const double *row, int64_t count) {
// FUSED: binary_scalar<BinaryOp::Add, F>(c,
// FUSED: matmul_rows(arg2, Shape{2, {2, 4}}, arg0, Shape{2, {4, 8}}, false, false, RowStore::of([[EPI]])); }
// FUSED: matmul({{v[0-9]+}}, arg2, Shape{2, {2, 4}}, {{v[0-9]+}}, Shape{2, {2, 8}}, true, false);
// FUSED: return 0;
func.func @micro_step(%w: tensor<4x8xf32> {tcc.param = "w"}, %b: tensor<8xf32> {tcc.param = "b"},
                      %x: tensor<2x4xf32> {tcc.input = "x"}, %seed: tensor<f32> {tcc.loss_seed})
    -> (tensor<f32> {tcc.output = "loss"}, tensor<4x8xf32> {tcc.grad = "w"}, tensor<8xf32> {tcc.grad = "b"}) {
  %0 = tcc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %1 = tcc.add %0, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %2 = tcc.softmax %1 {axis = -1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = tcc.reshape %2 {shape = array<i64: 16>} : (tensor<2x8xf32>) -> tensor<16xf32>
  %4 = tcc.reduce_sum %3 {keepdims = 0 : i64} : (tensor<16xf32>) -> tensor<f32>
  %5 = tcc.slice %1 {starts = array<i64: 0, -4>, ends = array<i64: 2, 8>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %6 = tcc.reduce_sum %5 {keepdims = 0 : i64} : (tensor<2x4xf32>) -> tensor<f32>
  %7 = tcc.add %4, %6 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %g = tcc.expand %seed {shape = array<i64: 2, 8>} : (tensor<f32>) -> tensor<2x8xf32>
  %xt = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %gw = tcc.matmul %xt, %g : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %gb = tcc.reduce_sum %g {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<8xf32>
  return %7, %gw, %gb : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>
}
