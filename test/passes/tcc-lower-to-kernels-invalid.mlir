// RUN: not tcc-opt %s --split-input-file --tcc-set-target="target=cpu" --tcc-plan-memory --tcc-lower-to-kernels 2>&1 | FileCheck %s
// What the CPU target has no kernel for is reported on the op, before
// anything is converted; a step without its memory plan is refused.
// CHECK: error: 'tcc.dropout' op dropout with a non-zero ratio in training mode is not supported by the CPU target yet
func.func @dropout(%x: tensor<8xf32> {tcc.input = "x"}) -> (tensor<8xf32> {tcc.output = "y"}) {
  %y, %mask = tcc.dropout %x {ratio = 5.000000e-01 : f32, training = true} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xi1>)
  return %y : tensor<8xf32>
}

// -----

// RUN: not tcc-opt %s --split-input-file --tcc-set-target="target=cpu" --tcc-lower-to-kernels 2>&1 | FileCheck %s --check-prefix=NOPLAN
// NOPLAN: error: tcc-lower-to-kernels needs the memory plan (tcc-plan-memory)
func.func @unplanned(%x: tensor<8xf32> {tcc.input = "x"}) -> (tensor<8xf32> {tcc.output = "y"}) {
  %y = tcc.exp %x : (tensor<8xf32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}
