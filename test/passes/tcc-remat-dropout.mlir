// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=12000" --cse | FileCheck %s
// A dropout mask is a candidate for recomputation like any cheap forward
// value: its only operand is the step's random state, which is always live,
// so the recomputed mask is the one the forward pass drew. Here the budget
// drops the dropped values (where, and the scaled w before it) and the mask
// after the forward pass; the backward pass recomputes all three.

// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: %[[RNG:[a-z0-9]+]]: tensor<2xi64> {tcc.rng}
// CHECK-SAME: op = "tcc.random_keep"
// CHECK: %[[K:.+]] = tcc.random_keep %[[RNG]] {ratio = 5.000000e-01 : f32, shape = array<i64: 256>, stream = 0 : i64, tcc.offsets
// CHECK: tcc.reduce_sum
// CHECK-NOT: %[[K]]{{[ ,)]}}
// CHECK: %[[R:.+]] = tcc.random_keep %[[RNG]] {ratio = 5.000000e-01 : f32, shape = array<i64: 256>, stream = 0 : i64, tcc.offsets = array<i64: {{[0-9]+}}>, tcc.remat}
// CHECK: tcc.where %[[R]], %{{.+}}, %{{.+}} {tcc.offsets = array<i64: {{[0-9]+}}>, tcc.remat}
// CHECK: tcc.where %[[R]]
// CHECK: return
func.func @main(%w: tensor<256xf32> {tcc.param = "w"}, %v: tensor<256xf32> {tcc.param = "v"}, %rng: tensor<2xi64> {tcc.rng}) -> (tensor<f32> {tcc.output = "loss"}) {
  %k = tcc.random_keep %rng {ratio = 0.5 : f32, shape = array<i64: 256>, stream = 0 : i64} : (tensor<2xi64>) -> tensor<256xi1>
  %two = tcc.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %m = tcc.mul %w, %two : (tensor<256xf32>, tensor<f32>) -> tensor<256xf32>
  %d = tcc.where %k, %m, %zero : (tensor<256xi1>, tensor<256xf32>, tensor<f32>) -> tensor<256xf32>
  %e = tcc.mul %d, %v : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  %s = tcc.reduce_sum %e {keepdims = 0 : i64} : (tensor<256xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
