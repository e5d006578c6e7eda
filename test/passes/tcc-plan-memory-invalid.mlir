// RUN: tcc-opt %s --tcc-plan-memory="budget=1000" --verify-diagnostics
// Infeasible: the error says how much the plan needs, what occupies it, and
// where the temporaries peak with the largest values live there (by size,
// then by definition order), each named by its op and ONNX node.

// expected-error @+1 {{the step needs 2240 bytes but the budget is 1000 (parameters 0, gradients 0, optimizer state 0, inputs 400, outputs 400, activations and temporaries 1344, of which 0 are forward values kept for the backward pass); the smallest budget this plan meets is 2240 bytes; activations and temporaries peak at tcc.add c with 1200 bytes live, the largest 400 from tcc.exp a, 400 from tcc.tanh b, 400 from tcc.add c}}
func.func @too_big(%x: tensor<100xf32> {tcc.input = "x"}) -> (tensor<100xf32> {tcc.output = "y"}) {
  %0 = tcc.exp %x : (tensor<100xf32>) -> tensor<100xf32> loc("a")
  %1 = tcc.tanh %0 : (tensor<100xf32>) -> tensor<100xf32> loc("b")
  %2 = tcc.add %0, %1 : (tensor<100xf32>, tensor<100xf32>) -> tensor<100xf32> loc("c")
  return %2 : tensor<100xf32>
}
