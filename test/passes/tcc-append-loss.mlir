// RUN: tcc-opt %s --split-input-file --tcc-append-loss="kind=cross-entropy output=logits target=labels" --verify-diagnostics | FileCheck %s --check-prefix=CE
// RUN: tcc-opt %s --split-input-file --tcc-append-loss="kind=mse output=logits target=y" --verify-diagnostics | FileCheck %s --check-prefix=MSE

// The cross-entropy reads its labels aligned with the logits: the module
// records it, with the one other integer input of the labels' shape as the ids.
// CE: module attributes {tcc.objective = {ids = "idx", labels = "labels", "labels-shift" = "aligned", task = "causal-lm"}}
// MSE-NOT: tcc.objective
// CE-LABEL: func.func @main
// CE-SAME: %[[LABELS:[a-z0-9]+]]: tensor<2x3xi64> {tcc.input = "labels"})
// CE-SAME: -> (tensor<f32> {tcc.output = "loss"}, tensor<2x3x5xf32> {tcc.output = "logits"})
// CE: %[[L2:.+]] = tcc.reshape %{{.+}} {shape = array<i64: 6, 5>}
// CE: %[[T2:.+]] = tcc.reshape %[[LABELS]] {shape = array<i64: 6>}
// CE: %[[LOSS:.+]], %{{.+}} = tcc.softmax_cross_entropy_loss %[[L2]], %[[T2]] {ignore_index = -100 : i64}
// CE: return %[[LOSS]], %{{.+}}

// MSE-LABEL: func.func @main
// MSE-SAME: %[[Y:[a-z0-9]+]]: tensor<2x3x5xf32> {tcc.input = "y"})
// MSE: %[[D:.+]] = tcc.sub %{{.+}}, %[[Y]]
// MSE: %[[SQ:.+]] = tcc.mul %[[D]], %[[D]]
// MSE: %[[LOSS:.+]] = tcc.reduce_mean %[[SQ]] {keepdims = 0 : i64} : (tensor<2x3x5xf32>) -> tensor<f32>
// MSE: return %[[LOSS]], %{{.+}}
func.func @main(%w: tensor<2x3x5xf32> {tcc.param = "w"}, %idx: tensor<2x3xi64> {tcc.input = "idx"}) -> (tensor<2x3x5xf32> {tcc.output = "logits"}) {
  %0 = tcc.exp %w : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// -----

// expected-error @+1 {{the model has no output named "logits" (its outputs: probs)}}
func.func @main(%w: tensor<2x5xf32> {tcc.param = "w"}) -> (tensor<2x5xf32> {tcc.output = "probs"}) {
  return %w : tensor<2x5xf32>
}
