// RUN: tcc-opt %s --split-input-file --tcc-check-import-contract --verify-diagnostics | FileCheck %s
// The importer's contract: one model function whose arguments are named
// parameters or inputs and whose results are named outputs, tcc ops only.

// Holds: the module is left as it was.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tcc.param = "w"
// CHECK-SAME: tcc.input = "x"
// CHECK: tcc.matmul
module {
  func.func @main(%w: tensor<4x3xf32> {tcc.param = "w"}, %x: tensor<2x4xf32> {tcc.input = "x"}) -> (tensor<2x3xf32> {tcc.output = "y"}) {
    %0 = tcc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}

// -----

module {
  // expected-error @+1 {{argument 0 of @main has neither tcc.param nor tcc.input}}
  func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32> {tcc.output = "y"}) {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{argument 0 of @main has both tcc.param and tcc.input}}
  func.func @main(%x: tensor<4xf32> {tcc.param = "a", tcc.input = "a"}) -> (tensor<4xf32> {tcc.output = "y"}) {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{argument name "a" is used twice}}
  func.func @main(%x: tensor<4xf32> {tcc.param = "a"}, %y: tensor<4xf32> {tcc.input = "a"}) -> (tensor<4xf32> {tcc.output = "y"}) {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{parameter "n" is not a floating-point tensor}}
  func.func @main(%x: tensor<4xi64> {tcc.param = "n"}) -> (tensor<4xi64> {tcc.output = "y"}) {
    return %x : tensor<4xi64>
  }
}

// -----

module {
  // expected-error @+1 {{result 0 of @main has no tcc.output name}}
  func.func @main(%x: tensor<4xf32> {tcc.input = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{expected exactly one func.func with a body (the model), found 2}}
module {
  func.func @a(%x: tensor<4xf32> {tcc.input = "x"}) -> (tensor<4xf32> {tcc.output = "y"}) {
    return %x : tensor<4xf32>
  }
  func.func @b(%x: tensor<4xf32> {tcc.input = "x"}) -> (tensor<4xf32> {tcc.output = "y"}) {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  func.func @main(%x: tensor<4xf32> {tcc.input = "x"}) -> (tensor<4xf32> {tcc.output = "y"}) {
    // expected-error @+1 {{op outside the tcc dialect in an imported model}}
    %0 = func.call @main(%x) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
