// RUN: tcc-opt %s --split-input-file --tcc-split-gradient-sums | FileCheck %s

// A gradient that is a chain of adds (a tied weight's uses, a chunked
// loss's terms) is returned as its terms, each with the parameter's name;
// the adds are gone. Other results stay as they are.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: -> (tensor<f32> {tcc.output = "loss"}, tensor<4xf32> {tcc.grad = "w"}, tensor<4xf32> {tcc.grad = "w"}, tensor<4xf32> {tcc.grad = "w"}, tensor<4xf32> {tcc.grad = "b"})
// CHECK: %[[A:.+]] = tcc.exp
// CHECK: %[[B:.+]] = tcc.tanh
// CHECK: %[[C:.+]] = tcc.neg
// CHECK-NOT: tcc.add
// CHECK: return %{{.+}}, %[[A]], %[[B]], %[[C]], %{{.+}} :
func.func @micro_step(%w: tensor<4xf32> {tcc.param = "w"}, %b: tensor<4xf32> {tcc.param = "b"}, %loss: tensor<f32> {tcc.input = "l"})
    -> (tensor<f32> {tcc.output = "loss"}, tensor<4xf32> {tcc.grad = "w"}, tensor<4xf32> {tcc.grad = "b"}) {
  %a = tcc.exp %w : (tensor<4xf32>) -> tensor<4xf32>
  %t = tcc.tanh %w : (tensor<4xf32>) -> tensor<4xf32>
  %n = tcc.neg %w : (tensor<4xf32>) -> tensor<4xf32>
  %s1 = tcc.add %a, %t : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s2 = tcc.add %s1, %n : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %gb = tcc.exp %b : (tensor<4xf32>) -> tensor<4xf32>
  return %loss, %s2, %gb : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Left alone: a sum another op reads, a broadcasting add, and an output
// that is a sum.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: tcc.add
// CHECK: return
func.func @kept(%w: tensor<4xf32> {tcc.param = "w"}, %v: tensor<4xf32> {tcc.param = "v"}, %s: tensor<f32> {tcc.param = "s"})
    -> (tensor<4xf32> {tcc.output = "o"}, tensor<4xf32> {tcc.grad = "w"}, tensor<4xf32> {tcc.grad = "v"}, tensor<4xf32> {tcc.grad = "s"}) {
  %a = tcc.add %w, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %e = tcc.exp %a : (tensor<4xf32>) -> tensor<4xf32>
  %b = tcc.add %w, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %o = tcc.add %v, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %o, %a, %e, %b : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
