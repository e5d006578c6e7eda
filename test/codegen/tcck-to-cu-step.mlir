// RUN: tcc-opt %s --tcc-plan-pipeline="target=cuda" --tcc-kernel-pipeline | tcc-translate --tcck-to-cu > %t.cu
// RUN: FileCheck %s < %t.cu
// RUN: c++ -std=c++17 -fsyntax-only -DTCC_CUDA_EMU -x c++ -I %tcc_src/runtime/cuda/emu -I %tcc_src/runtime/cuda -I %tcc_src/runtime %t.cu
// A training step planned for the CUDA target, lowered to kernels (tcc-opt)
// and translated: the CUDA unit the step's generated half is made of, the
// micro-step body as a function over fp16 working copies (the parameters)
// and the arena, which compiles against the fixed half's declarations (here
// through tcc's CUDA emulation, as the emulated steps are built).

// The tanh and the product are one generated kernel.
// CHECK: namespace tcc_step_kernels {
// CHECK: __global__ void __launch_bounds__(256) fusion0(
// CHECK: } // namespace tcc_step_kernels
// CHECK: int micro_step(char *arena, double grad_scale, __half *arg0, __half *arg1, __half *arg2, float *arg3) {
// The backward seed first (the frame sets it outside the graph), then mark 0.
// CHECK: fill(arg3, 1LL, grad_scale);
// CHECK-NEXT: if (g_prof) { if (int rc_ = prof_mark(0)) return rc_; }
// The forward GEMM runs in cuBLASLt with the bias as its epilogue.
// CHECK: matmul_epilogue(
// CHECK: TCC_LAUNCH({{.*}}fusion0)
// The weight gradient is added into its fp32 accumulator by the GEMM itself,
// then handed to the all-reduce.
// CHECK: matmul_acc({{[0-9]+}}, (float *)(arena + [[WG:[0-9]+]]ULL), arg2, Shape{2, {2, 4}}, true,
// CHECK-NEXT: grad_ready((float *)(arena + [[WG]]ULL), 32LL);
// CHECK: return 0;
// CHECK-NEXT: }
func.func @micro_step(%w: tensor<4x8xf32> {tcc.param = "w"}, %b: tensor<8xf32> {tcc.param = "b"},
                      %x: tensor<2x4xf32> {tcc.input = "x"}, %seed: tensor<f32> {tcc.loss_seed})
    -> (tensor<f32> {tcc.output = "loss"}, tensor<4x8xf32> {tcc.grad = "w"}, tensor<8xf32> {tcc.grad = "b"}) {
  %0 = tcc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %1 = tcc.add %0, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %s = tcc.softmax %1 {axis = -1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = tcc.tanh %s : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %2 = tcc.mul %t, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = tcc.reshape %2 {shape = array<i64: 16>} : (tensor<2x8xf32>) -> tensor<16xf32>
  %4 = tcc.reduce_sum %3 {keepdims = 0 : i64} : (tensor<16xf32>) -> tensor<f32>
  %g = tcc.expand %seed {shape = array<i64: 2, 8>} : (tensor<f32>) -> tensor<2x8xf32>
  %xt = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %gw = tcc.matmul %xt, %g : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %gb = tcc.reduce_sum %g {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<8xf32>
  return %4, %gw, %gb : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>
}
