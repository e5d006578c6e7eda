// RUN: tcc-opt %s --split-input-file --tcc-fuse | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-fuse="max-ops=2" | FileCheck %s --check-prefix=LIMIT

// A chain of elementwise ops of one shape becomes one fusion; a broadcast
// operand is just an input; only the value used outside is a result.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<4x8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-SAME: tcc.fusion_stats = {fusions = 1 : i64, kernel_count = 1 : i64, op_count = 3 : i64}
// CHECK: %[[F:.+]] = tcc.fusion(%[[A]], %[[B]]) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK: ^bb0(%[[X:.+]]: tensor<4x8xf32>, %[[Y:.+]]: tensor<8xf32>):
// CHECK: %[[M:.+]] = tcc.mul %[[X]], %[[Y]]
// CHECK: %[[T:.+]] = tcc.tanh %[[M]]
// CHECK: %[[E:.+]] = tcc.exp %[[T]]
// CHECK: tcc.yield %[[E]] : tensor<4x8xf32>
// CHECK: return %[[F]]
// LIMIT-LABEL: func.func @chain
// LIMIT-SAME: the group has reached the kernel size limit of 2 ops
// LIMIT: tcc.fusion
// LIMIT: tcc.yield
// LIMIT: tcc.exp
func.func @chain(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = tcc.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tcc.tanh %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tcc.exp %1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Leaves alone: a matmul is never fused or duplicated, and a reduction's
// result has another shape.
// CHECK-LABEL: func.func @not_elementwise
// CHECK-SAME: not elementwise: tcc.reduce_sum is a kernel of its own
// CHECK-NOT: tcc.fusion(
// CHECK: tcc.matmul
// CHECK: tcc.exp
// CHECK: tcc.reduce_sum
// CHECK: tcc.relu
func.func @not_elementwise(%a: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x1xf32> {
  %0 = tcc.matmul %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.exp %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tcc.reduce_sum %1 {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %3 = tcc.relu %2 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  return %3 : tensor<4x1xf32>
}

// -----

// Cycle avoidance: the matmul between reads the group's first value and
// feeds the next elementwise op, so the group stops before the matmul
// (fusing across it would make the fusion both feed and read the matmul).
// CHECK-LABEL: func.func @cycle
// CHECK-SAME: not elementwise: tcc.matmul is a kernel of its own
// CHECK: %[[E:.+]] = tcc.exp
// CHECK: %[[M:.+]] = tcc.matmul %[[E]]
// CHECK: tcc.fusion(%[[M]], %[[E]])
func.func @cycle(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = tcc.exp %a : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = tcc.matmul %0, %0 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = tcc.add %1, %0 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %3 = tcc.tanh %2 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}

// -----

// A value used both inside and outside the group is one of its results.
// CHECK-LABEL: func.func @escaping
// CHECK: %[[F:.+]]:2 = tcc.fusion
// CHECK: tcc.yield %{{.+}}, %{{.+}} : tensor<16xf32>, tensor<16xf32>
// CHECK: tcc.reduce_sum %[[F]]#0
// CHECK: return %[[F]]#1
func.func @escaping(%a: tensor<16xf32>) -> (tensor<16xf32>, tensor<f32>) {
  %0 = tcc.exp %a : (tensor<16xf32>) -> tensor<16xf32>
  %1 = tcc.neg %0 : (tensor<16xf32>) -> tensor<16xf32>
  %2 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<16xf32>) -> tensor<f32>
  return %1, %2 : tensor<16xf32>, tensor<f32>
}

// -----

// Leaves alone: a consumer whose result is broadcast to a larger shape.
// CHECK-LABEL: func.func @other_shape
// CHECK-SAME: result shape differs from the group's
// CHECK-NOT: tcc.fusion(
func.func @other_shape(%a: tensor<4x8xf32>, %b: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = tcc.exp %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.add %0, %b : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %1 : tensor<2x4x8xf32>
}
