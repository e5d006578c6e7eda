// RUN: tcc-opt %s --split-input-file --tcc-fuse-loss | FileCheck %s

// The loss and its gradient become one op that takes the seed; the
// log-probabilities are gone.
// CHECK-LABEL: func.func @fused
// CHECK-SAME: (%[[S:[a-z0-9]+]]: tensor<4x5xf32>, %[[L:[a-z0-9]+]]: tensor<4xi64>, %[[SEED:[a-z0-9]+]]: tensor<f32>)
// CHECK: %[[LOSS:.+]], %[[D:.+]] = tcc.softmax_cross_entropy_loss_with_grad %[[S]], %[[L]], %[[SEED]] {ignore_index = -100 : i64} : (tensor<4x5xf32>, tensor<4xi64>, tensor<f32>) -> (tensor<f32>, tensor<4x5xf32>)
// CHECK-NOT: tcc.softmax_cross_entropy_loss_grad
// CHECK: return %[[LOSS]], %[[D]]
func.func @fused(%s: tensor<4x5xf32>, %l: tensor<4xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<4x5xf32>) {
  %loss, %logp = tcc.softmax_cross_entropy_loss %s, %l {ignore_index = -100 : i64} : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  %d = tcc.softmax_cross_entropy_loss_grad %seed, %logp, %l {ignore_index = -100 : i64} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  return %loss, %d : tensor<f32>, tensor<4x5xf32>
}

// -----

// Left alone: the log-probabilities have another reader.
// CHECK-LABEL: func.func @logp_used
// CHECK: tcc.softmax_cross_entropy_loss %
// CHECK: tcc.softmax_cross_entropy_loss_grad
func.func @logp_used(%s: tensor<4x5xf32>, %l: tensor<4xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<4x5xf32>, tensor<4x5xf32>) {
  %loss, %logp = tcc.softmax_cross_entropy_loss %s, %l : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  %d = tcc.softmax_cross_entropy_loss_grad %seed, %logp, %l : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  return %loss, %d, %logp : tensor<f32>, tensor<4x5xf32>, tensor<4x5xf32>
}

// -----

// Left alone: per-element losses (reduction "none"), and scores with more
// than two dimensions.
// CHECK-LABEL: func.func @not_mean
// CHECK-NOT: with_grad
// CHECK: tcc.softmax_cross_entropy_loss_grad
// CHECK: tcc.softmax_cross_entropy_loss_grad
func.func @not_mean(%s: tensor<4x5xf32>, %l: tensor<4xi64>, %g: tensor<4xf32>, %s3: tensor<2x5x3xf32>, %l3: tensor<2x3xi64>, %seed: tensor<f32>) -> (tensor<4x5xf32>, tensor<2x5x3xf32>) {
  %loss, %logp = tcc.softmax_cross_entropy_loss %s, %l {reduction = "none"} : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4x5xf32>)
  %d = tcc.softmax_cross_entropy_loss_grad %g, %logp, %l {reduction = "none"} : (tensor<4xf32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  %loss3, %logp3 = tcc.softmax_cross_entropy_loss %s3, %l3 : (tensor<2x5x3xf32>, tensor<2x3xi64>) -> (tensor<f32>, tensor<2x5x3xf32>)
  %d3 = tcc.softmax_cross_entropy_loss_grad %seed, %logp3, %l3 : (tensor<f32>, tensor<2x5x3xf32>, tensor<2x3xi64>) -> tensor<2x5x3xf32>
  return %d, %d3 : tensor<4x5xf32>, tensor<2x5x3xf32>
}
