// RUN: tcc-opt %s --split-input-file --tcc-legalize | FileCheck %s
// Training-mode dropout becomes a random_keep mask and a where of the input
// scaled by 1/(1 - ratio); the dropouts are numbered in order as random
// streams, all reading one random-state argument that the pass adds.

// CHECK-LABEL: func.func @two
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x8xf32> {tcc.input = "x"}, %[[RNG:[a-z0-9]+]]: tensor<2xi64> {tcc.rng})
// CHECK-DAG: %[[ZERO:.+]] = tcc.constant {value = dense<0.000000e+00> : tensor<f32>}
// CHECK-DAG: %[[S1:.+]] = tcc.constant {value = dense<1.11111116> : tensor<f32>}
// CHECK-DAG: %[[S2:.+]] = tcc.constant {value = dense<2.000000e+00> : tensor<f32>}
// CHECK: %[[K0:.+]] = tcc.random_keep %[[RNG]] {ratio = 1.000000e-01 : f32, shape = array<i64: 4, 8>, stream = 0 : i64} : (tensor<2xi64>) -> tensor<4x8xi1>
// CHECK: %[[M0:.+]] = tcc.mul %[[X]], %[[S1]]
// CHECK: %[[Y0:.+]] = tcc.where %[[K0]], %[[M0]], %[[ZERO]]
// CHECK: %[[R:.+]] = tcc.relu %[[Y0]]
// CHECK: %[[K1:.+]] = tcc.random_keep %[[RNG]] {ratio = 5.000000e-01 : f32, shape = array<i64: 4, 8>, stream = 1 : i64}
// CHECK: %[[M1:.+]] = tcc.mul %[[R]], %[[S2]]
// CHECK: %[[Y1:.+]] = tcc.where %[[K1]], %[[M1]], %[[ZERO]]
// CHECK: return %[[Y1]], %[[K1]]
func.func @two(%x: tensor<4x8xf32> {tcc.input = "x"}) -> (tensor<4x8xf32>, tensor<4x8xi1>) {
  %y0, %m0 = tcc.dropout %x {ratio = 0.1 : f32, training = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %r = tcc.relu %y0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y1, %m1 = tcc.dropout %r {ratio = 0.5 : f32, training = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  return %y1, %m1 : tensor<4x8xf32>, tensor<4x8xi1>
}

// -----

// Outside training, or with ratio 0, dropout is the identity: no random
// state, no mask.
// CHECK-LABEL: func.func @identity
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<3xf32>) -> tensor<3xf32>
// CHECK-NOT: random_keep
// CHECK: return %[[X]]
func.func @identity(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y0, %m0 = tcc.dropout %x {ratio = 0.1 : f32, training = false} : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi1>)
  %y1, %m1 = tcc.dropout %y0 {ratio = 0.0 : f32, training = true} : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi1>)
  return %y1 : tensor<3xf32>
}

// -----

// A function that already draws from the random state (stream 0 here, as
// after an earlier run of the pass) keeps its argument, and a new dropout
// takes the next stream rather than sharing stream 0's mask.
// CHECK-LABEL: func.func @existing
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<8xf32>, %[[RNG:[a-z0-9]+]]: tensor<2xi64> {tcc.rng}) -> (tensor<8xi1>, tensor<8xf32>)
// CHECK: tcc.random_keep %[[RNG]] {ratio = 5.000000e-01 : f32, shape = array<i64: 8>, stream = 0 : i64}
// CHECK: tcc.random_keep %[[RNG]] {ratio = 2.000000e-01 : f32, shape = array<i64: 8>, stream = 1 : i64}
func.func @existing(%x: tensor<8xf32>, %rng: tensor<2xi64> {tcc.rng}) -> (tensor<8xi1>, tensor<8xf32>) {
  %k = tcc.random_keep %rng {ratio = 0.5 : f32, shape = array<i64: 8>, stream = 0 : i64} : (tensor<2xi64>) -> tensor<8xi1>
  %y, %m = tcc.dropout %x {ratio = 0.2 : f32, training = true} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xi1>)
  return %k, %y : tensor<8xi1>, tensor<8xf32>
}
