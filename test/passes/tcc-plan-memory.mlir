// RUN: tcc-opt %s --split-input-file --tcc-plan-memory | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-plan-memory="budget=100000" | FileCheck %s --check-prefix=BUDGET
// The memory plan: persistent slots first, then temporaries that share
// memory when their lifetimes are disjoint; 64-byte alignment.

// A chain: each value dies when the next one is made, so two slots are
// enough for four values. The input has slot 0, the output slot 64, the
// temporaries start at 128.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: tcc.layout = #tcc.layout<arena_bytes = 256,
// CHECK-SAME: inputs = [0]
// CHECK-SAME: results = [64]
// CHECK-SAME: temporary_bytes = 128, temporary_bytes_unshared = 256,
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: 128>}
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: 192>}
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: 128>}
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: 192>}
// Leaves alone: with a budget the plan meets, nothing changes.
// BUDGET-LABEL: func.func @chain
// BUDGET-SAME: arena_bytes = 256,
func.func @chain(%x: tensor<16xf32> {tcc.input = "x"}) -> (tensor<16xf32> {tcc.output = "y"}) {
  %0 = tcc.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %1 = tcc.exp %0 : (tensor<16xf32>) -> tensor<16xf32>
  %2 = tcc.exp %1 : (tensor<16xf32>) -> tensor<16xf32>
  %3 = tcc.exp %2 : (tensor<16xf32>) -> tensor<16xf32>
  return %3 : tensor<16xf32>
}

// -----

// A value used late stays live: %0 is read by the last op, so nothing can
// take its slot; sizes that are not multiples of 64 are rounded up (10 f32 =
// 40 bytes take 64). A small constant stays in the library (-1).
// CHECK-LABEL: func.func @long_lived
// CHECK: %[[C:.+]] = tcc.constant {tcc.offsets = array<i64: -1>
// CHECK: %[[A:.+]] = tcc.exp %{{.+}} {tcc.offsets = array<i64: [[OA:[0-9]+]]>}
// CHECK: %[[B:.+]] = tcc.exp %[[A]] {tcc.offsets = array<i64: [[OB:[0-9]+]]>}
// CHECK: %[[D:.+]] = tcc.exp %[[B]] {tcc.offsets = array<i64: [[OB2:[0-9]+]]>}
// CHECK-NOT: array<i64: [[OA]]>
// CHECK: tcc.add %[[A]], %[[D]]
func.func @long_lived(%x: tensor<10xf32> {tcc.input = "x"}) -> (tensor<10xf32> {tcc.output = "y"}) {
  %c = tcc.constant {value = dense<1.0> : tensor<10xf32>} : () -> tensor<10xf32>
  %0 = tcc.exp %x : (tensor<10xf32>) -> tensor<10xf32>
  %1 = tcc.exp %0 : (tensor<10xf32>) -> tensor<10xf32>
  %2 = tcc.exp %1 : (tensor<10xf32>) -> tensor<10xf32>
  %3 = tcc.add %0, %2 : (tensor<10xf32>, tensor<10xf32>) -> tensor<10xf32>
  %4 = tcc.add %3, %c : (tensor<10xf32>, tensor<10xf32>) -> tensor<10xf32>
  return %4 : tensor<10xf32>
}

// -----

// A training step: parameters, gradient accumulators and optimizer state
// (two tensors per trainable parameter by default) are persistent; a frozen
// parameter has no accumulator or state (-1). The forward value %0 and the
// loss are kept past the forward pass (saved_activation_bytes: 16 + 4).
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: params = [0, 64]
// CHECK-SAME: grads = [128, -1]
// CHECK-SAME: state = [192, 256, -1, -1]
// CHECK-SAME: saved_activation_bytes = 20,
func.func @micro_step(%w: tensor<4xf32> {tcc.param = "w"}, %f: tensor<4xf32> {tcc.param = "f", tcc.frozen}) -> (tensor<f32> {tcc.output = "loss"}, tensor<4xf32> {tcc.grad = "w"}) {
  %0 = tcc.exp %w : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<4xf32>) -> tensor<f32>
  %2 = tcc.mul %0, %f : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1, %2 : tensor<f32>, tensor<4xf32>
}


// -----

// Views share their operand's bytes: the reshape gets %0's slot and keeps it
// alive until its own last use, so %2 cannot reuse it; a view of the input
// gets the input's slot.
// CHECK-LABEL: func.func @views
// CHECK: %[[A:.+]] = tcc.exp %{{.+}} {tcc.offsets = array<i64: [[SA:[0-9]+]]>}
// CHECK: tcc.reshape %[[A]] {shape = array<i64: 4, 4>, tcc.offsets = array<i64: [[SA]]>}
// CHECK: tcc.reshape %{{.+}} {shape = array<i64: 4, 4>, tcc.offsets = array<i64: 0>}
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: [[SB:[0-9]+]]>}
// CHECK-NOT: array<i64: [[SA]]>
// CHECK: return
func.func @views(%x: tensor<16xf32> {tcc.input = "x"}) -> (tensor<4x4xf32> {tcc.output = "y"}) {
  %0 = tcc.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %1 = tcc.reshape %0 {shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %r = tcc.reshape %x {shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %2 = tcc.exp %r : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = tcc.add %1, %2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %3 : tensor<4x4xf32>
}

// -----

// In place: the fused loss writes its gradient over the logits when they die
// there (each row is read before it is written), so the logits and the
// gradient share one slot; the logits of @kept are read again afterwards,
// so their gradient gets a slot of its own.
// CHECK-LABEL: func.func @loss_in_place
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: 1216>}
// CHECK: tcc.softmax_cross_entropy_loss_with_grad {{.*}}tcc.offsets = array<i64: {{[0-9]+}}, 1216>
// CHECK-LABEL: func.func @kept
// CHECK: tcc.exp %{{.+}} {tcc.offsets = array<i64: 1216>}
// CHECK: tcc.softmax_cross_entropy_loss_with_grad {{.*}}tcc.offsets = array<i64: 2752, 1728>
func.func @loss_in_place(%x: tensor<8x16xf32> {tcc.input = "x"}, %l: tensor<8xi64> {tcc.input = "l"}, %seed: tensor<f32> {tcc.input = "seed"}) -> (tensor<f32> {tcc.output = "loss"}, tensor<8x16xf32> {tcc.output = "g"}) {
  %0 = tcc.exp %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %0, %l, %seed {ignore_index = -100 : i64} : (tensor<8x16xf32>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x16xf32>)
  %1 = tcc.exp %d : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %loss, %1 : tensor<f32>, tensor<8x16xf32>
}

func.func @kept(%x: tensor<8x16xf32> {tcc.input = "x"}, %l: tensor<8xi64> {tcc.input = "l"}, %seed: tensor<f32> {tcc.input = "seed"}) -> (tensor<f32> {tcc.output = "loss"}, tensor<8x16xf32> {tcc.output = "g"}) {
  %0 = tcc.exp %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %0, %l, %seed {ignore_index = -100 : i64} : (tensor<8x16xf32>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x16xf32>)
  %1 = tcc.add %d, %0 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %loss, %1 : tensor<f32>, tensor<8x16xf32>
}
