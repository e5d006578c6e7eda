// RUN: tcc-opt %s --split-input-file --tcc-build-backward --verify-diagnostics
// What the backward pass refuses, with a message that says why.

// expected-error @+1 {{the model has no scalar loss output (its outputs: logits tensor<2x5xf32>); append one with --loss=cross-entropy:OUTPUT:LABELS or --loss=mse:OUTPUT:TARGET}}
func.func @no_loss(%w: tensor<2x5xf32> {tcc.param = "w"}) -> (tensor<2x5xf32> {tcc.output = "logits"}) {
  return %w : tensor<2x5xf32>
}

// -----

// expected-error @+1 {{the model has 2 scalar outputs}}
func.func @two_losses(%w: tensor<f32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "a"}, tensor<f32> {tcc.output = "b"}) {
  return %w, %w : tensor<f32>, tensor<f32>
}

// -----

// An op without a gradient rule on the path from a parameter to the loss.
func.func @no_rule(%w: tensor<2x6xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
  // expected-error @+1 {{'tcc.slice_grad' op has no gradient rule, but it is on a path from a trainable parameter to the loss}}
  %0 = tcc.slice_grad %w {shape = array<i64: 4, 6>, starts = array<i64: 1>, ends = array<i64: 3>} : (tensor<2x6xf32>) -> tensor<4x6xf32>
  %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<4x6xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// A rule that does not apply: training-mode dropout before tcc-legalize.
func.func @dropout(%w: tensor<4xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
  // expected-error @+1 {{'tcc.dropout' op dropout with a non-zero ratio in training mode is differentiated after tcc-legalize lowers it to random_keep and where}}
  %y, %m = tcc.dropout %w {ratio = 0.1 : f32, training = true} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>)
  %1 = tcc.reduce_sum %y {keepdims = 0 : i64} : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
