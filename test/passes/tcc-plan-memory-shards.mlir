// RUN: tcc-opt %s --split-input-file --tcc-plan-memory="data-parallel=2" | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-plan-memory="data-parallel=2 state-per-param=1" | FileCheck %s --check-prefix=SGD
// RUN: tcc-opt %s --split-input-file --tcc-plan-memory="data-parallel=2 float-bytes=2" | FileCheck %s --check-prefix=CUDA
// RUN: not tcc-opt %s --split-input-file --tcc-plan-memory="data-parallel=0" 2>&1 | FileCheck %s --check-prefix=BAD
// ZeRO-1 (tcc --data-parallel=N): the trainable parameters lie back to back
// before the frozen one, their accumulators in the same order with the same
// padding, and the flat space (48 elements used) is padded to 2 chunks of
// 32 elements (64-byte aligned). The optimizer state is one chunk per kind
// (AdamW 2, SGD 1), with no per-parameter slots; the shard buffer the
// gradients are reduce-scattered into is one chunk more.
//
// w1: 20 floats at 0 (slot of 128 bytes), w2: 4 floats at 128 (64 bytes),
// padding to 256; frozen f at 256. Accumulators from 320: w1 at 320, w2 at
// 448, padded to 576. State chunks at 576 and 704, shard buffer at 832.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: params = [256, 0, 128]
// CHECK-SAME: grads = [-1, 320, 448]
// CHECK-SAME: state = [-1, -1, -1, -1, -1, -1]
// CHECK-SAME: grad_bytes = 224, state_bytes = 256,
// CHECK-SAME: shards = <ranks = 2, elem_bytes = 4, flat_elems = 64, chunk_elems = 32, params = 0, grads = 320, shard_grads = 832, state = [576, 704]>
// SGD-LABEL: func.func @micro_step
// SGD-SAME: state_bytes = 128,
// SGD-SAME: shards = <ranks = 2, elem_bytes = 4, flat_elems = 64, chunk_elems = 32, params = 0, grads = 320, shard_grads = 704, state = [576]>
// The CUDA target's plan (mixed precision): the same fp32 flat spaces of
// master weights and accumulators, and the fp16 working copies after them,
// outside the flat space (every rank refreshes them after the all-gather).
// CUDA-LABEL: func.func @micro_step
// CUDA-SAME: params = [256, 0, 128]
// CUDA-SAME: grads = [-1, 320, 448]
// CUDA-SAME: shadows = [960, 1024, 1088]
// CUDA-SAME: shards = <ranks = 2, elem_bytes = 4, flat_elems = 64, chunk_elems = 32, params = 0, grads = 320, shard_grads = 832, state = [576, 704]>
// BAD: data-parallel=0 is not a number of ranks
func.func @micro_step(%f: tensor<4xf32> {tcc.param = "f", tcc.frozen}, %w1: tensor<20xf32> {tcc.param = "w1"}, %w2: tensor<4xf32> {tcc.param = "w2"}) -> (tensor<f32> {tcc.output = "loss"}, tensor<20xf32> {tcc.grad = "w1"}, tensor<4xf32> {tcc.grad = "w2"}) {
  %0 = tcc.exp %w1 : (tensor<20xf32>) -> tensor<20xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<20xf32>) -> tensor<f32>
  %2 = tcc.mul %w2, %f : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1, %0, %2 : tensor<f32>, tensor<20xf32>, tensor<4xf32>
}
