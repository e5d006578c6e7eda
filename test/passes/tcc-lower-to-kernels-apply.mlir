// RUN: tcc-opt %s --tcc-set-target="target=cpu" --tcc-plan-memory --tcc-lower-to-kernels | FileCheck %s
// RUN: tcc-opt %s --tcc-set-target="target=cpu" --tcc-plan-memory="state-per-param=1" --tcc-lower-to-kernels | FileCheck %s --check-prefix=SGD
// RUN: tcc-opt %s --tcc-set-target="target=cuda" --tcc-plan-memory --tcc-lower-to-kernels | FileCheck %s --check-prefix=CUDA
// RUN: tcc-opt %s --tcc-set-target="target=cuda" --tcc-remat="offload=all" --tcc-plan-memory --tcc-lower-to-kernels | FileCheck %s --check-prefix=HOST
// RUN: tcc-opt %s --tcc-set-target="target=cuda" --tcc-plan-memory="data-parallel=2" --tcc-lower-to-kernels | FileCheck %s --check-prefix=ZERO1
// The optimizer as kernel IR: @apply, beside the step, holds one update per
// trainable parameter (the frozen f has none) over the memory plan's slots,
// which the emitters turn into the tables their update walks. The plan is
// tcc-plan-memory-shards.mlir's: w1 (20 floats) at 64, w2 (4) at 192,
// accumulators from 256, AdamW state from 384.
// CHECK-LABEL: func.func @apply() attributes {tcck.apply}
// CHECK-NEXT: %[[P:.*]] = tcck.view 64 : memref<20xf32>
// CHECK-NEXT: %[[G:.*]] = tcck.view 256 : memref<20xf32>
// CHECK-NEXT: %[[M:.*]] = tcck.view 384 : memref<20xf32>
// CHECK-NEXT: %[[V:.*]] = tcck.view 512 : memref<20xf32>
// CHECK-NEXT: tcck.update "w1" param 1 master %[[P]] : memref<20xf32> grad %[[G]] : memref<20xf32> state(%[[M]], %[[V]] : memref<20xf32>, memref<20xf32>)
// CHECK: tcck.update "w2" param 2 master
// CHECK-NOT: tcck.update
// CHECK: return
//
// With SGD, one state buffer (the momentum).
// SGD-LABEL: func.func @apply()
// SGD: tcck.update "w1" param 1 master %{{.*}} : memref<20xf32> grad %{{.*}} : memref<20xf32> state(%{{.*}} : memref<20xf32>)
//
// On CUDA, fp32 masters, accumulators and state; the update also writes the
// fp16 working copy the body reads.
// CUDA-NOT: tcck.await
// CUDA-LABEL: func.func @apply()
// CUDA-NEXT: %[[H:.*]] = tcck.view 896 : memref<20xf16>
// CUDA: tcck.update "w1" param 1 master %{{.*}} : memref<20xf32> grad %{{.*}} state(%{{.*}}, %{{.*}} : memref<20xf32>, memref<20xf32>) half %[[H]] : memref<20xf16>
//
// --offload=all: master, state and accumulator in the host buffer; the
// working copy stays in the arena.
// With the masters in host memory the host update may still run when the
// micro-step starts: each such parameter's first reader waits for its fp16
// copy, and the first op that touches an accumulator for the whole update.
// The frozen parameter "f" is not updated: nothing waits for it. A step
// without host tiers (the CUDA prefix) has no waits.
// HOST-LABEL: func.func @micro_step(
// HOST: tcck.await_weights "w1" param 1
// HOST-NEXT: tcck.ew "Exp" %{{.*}}, %arg1
// HOST-NEXT: tcck.await_update
// HOST-NEXT: tcck.host_accumulate
// HOST-NOT: tcck.await_update
// HOST: tcck.await_weights "w2" param 2
// HOST-NEXT: tcck.ew "Mul" %{{.*}}, %arg2, %arg0
// HOST-NOT: "f" param
// HOST-LABEL: func.func @apply()
// HOST-NEXT: %[[H:.*]] = tcck.view {{[0-9]+}} : memref<20xf16>
// HOST-NEXT: %[[P:.*]] = tcck.host_view 0 : memref<20xf32>
// HOST-NEXT: %[[G:.*]] = tcck.host_view {{[0-9]+}} : memref<20xf32>
// HOST-NEXT: %[[M:.*]] = tcck.host_view {{[0-9]+}} : memref<20xf32>
// HOST-NEXT: %[[V:.*]] = tcck.host_view {{[0-9]+}} : memref<20xf32>
// HOST-NEXT: tcck.update "w1" param 1 master %[[P]] : memref<20xf32> grad %[[G]] : memref<20xf32> state(%[[M]], %[[V]] : memref<20xf32>, memref<20xf32>) half %[[H]] : memref<20xf16>
//
// ZeRO-1: each parameter's place in the flat space (w2 after w1's 20
// elements and the padding to 128 bytes: element 32).
// ZERO1-LABEL: func.func @apply()
// ZERO1: tcck.shard_update "w1" param 1 master %{{.*}} : memref<20xf32> flat 0 half %{{.*}} : memref<20xf16>
// ZERO1: tcck.shard_update "w2" param 2 master %{{.*}} : memref<4xf32> flat 32 half %{{.*}} : memref<4xf16>
// ZERO1-NOT: tcck.update
func.func @micro_step(%f: tensor<4xf32> {tcc.param = "f", tcc.frozen}, %w1: tensor<20xf32> {tcc.param = "w1"}, %w2: tensor<4xf32> {tcc.param = "w2"}) -> (tensor<f32> {tcc.output = "loss"}, tensor<20xf32> {tcc.grad = "w1"}, tensor<4xf32> {tcc.grad = "w2"}) {
  %0 = tcc.exp %w1 : (tensor<20xf32>) -> tensor<20xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<20xf32>) -> tensor<f32>
  %2 = tcc.mul %w2, %f : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1, %0, %2 : tensor<f32>, tensor<20xf32>, tensor<4xf32>
}
