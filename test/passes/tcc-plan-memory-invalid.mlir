// RUN: tcc-opt %s --tcc-plan-memory="budget=1000" --verify-diagnostics
// Infeasible: the error says how much the plan needs, what occupies it, and
// where the temporaries peak with the largest values live there (by size,
// then by definition order), each named by its op and ONNX node.

// expected-error @+5 {{the step needs 2240 bytes (2.2 KiB) but the budget is 1000 bytes}}
// expected-note @+4 {{it holds: parameters 0 bytes, gradients 0 bytes, optimizer state 0 bytes, inputs 400 bytes, outputs 400 bytes, activations and temporaries 1.3 KiB (0 bytes of them forward values kept for the backward pass)}}
// expected-note @+3 {{the smallest budget this plan meets is 2240 bytes (2.2 KiB)}}
// expected-note @+2 {{activations and temporaries peak at tcc.add c with 1200 bytes live, the largest 400 from tcc.exp a, 400 from tcc.tanh b, 400 from tcc.add c}}
// (the CPU target: no --offload hint)
func.func @too_big(%x: tensor<100xf32> {tcc.input = "x"}) -> (tensor<100xf32> {tcc.output = "y"}) {
  %0 = tcc.exp %x : (tensor<100xf32>) -> tensor<100xf32> loc("a")
  %1 = tcc.tanh %0 : (tensor<100xf32>) -> tensor<100xf32> loc("b")
  %2 = tcc.add %0, %1 : (tensor<100xf32>, tensor<100xf32>) -> tensor<100xf32> loc("c")
  return %2 : tensor<100xf32>
}
