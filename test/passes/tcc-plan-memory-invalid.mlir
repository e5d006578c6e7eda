// RUN: tcc-opt %s --tcc-plan-memory="budget=1000" --verify-diagnostics
// Infeasible: the error says how much the plan needs and what occupies it.

// expected-error @+1 {{the step needs 1792 bytes but the budget is 1000 (parameters 0, gradients 0, optimizer state 0, inputs 400, outputs 400, activations and temporaries 896, of which 0 are forward values kept for the backward pass); the smallest budget this plan meets is 1792 bytes}}
func.func @too_big(%x: tensor<100xf32> {tcc.input = "x"}) -> (tensor<100xf32> {tcc.output = "y"}) {
  %0 = tcc.exp %x : (tensor<100xf32>) -> tensor<100xf32>
  %1 = tcc.exp %0 : (tensor<100xf32>) -> tensor<100xf32>
  return %1 : tensor<100xf32>
}
