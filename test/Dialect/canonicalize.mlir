// RUN: tcc-opt %s --split-input-file --canonicalize | FileCheck %s
// The folders: shape arithmetic on constants disappears, ops on run-time
// values stay.

// The subgraph torch exports for x.view(x.size(0), -1).
// CHECK-LABEL: func.func @view_shape
// CHECK-NOT: tcc.shape
// CHECK-NOT: tcc.gather
// CHECK-NOT: tcc.concat
// CHECK: %[[SHAPE:.+]] = tcc.constant {value = dense<[2, -1]> : tensor<2xi64>}
// CHECK: return %[[SHAPE]]
func.func @view_shape(%x: tensor<2x3x4xf32>) -> tensor<2xi64> {
  %s = tcc.shape %x : (tensor<2x3x4xf32>) -> tensor<3xi64>
  %zero = tcc.constant {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %d0 = tcc.gather %s, %zero : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %d0u = tcc.unsqueeze %d0 {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %m1 = tcc.constant {value = dense<-1> : tensor<1xi64>} : () -> tensor<1xi64>
  %shape = tcc.concat %d0u, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  return %shape : tensor<2xi64>
}

// -----

// Head size computed from the shape, as nn.MultiheadAttention exports it:
// Shape -> Gather -> Div -> Mul, integer arithmetic.
// CHECK-LABEL: func.func @integer_arithmetic
// CHECK: %[[C:.+]] = tcc.constant {value = dense<[8, 24]> : tensor<2xi64>}
// CHECK-NOT: tcc.div
// CHECK: return %[[C]]
func.func @integer_arithmetic(%x: tensor<2x10x32xf32>) -> tensor<2xi64> {
  %s = tcc.shape %x {start = 2 : i64} : (tensor<2x10x32xf32>) -> tensor<1xi64>
  %four = tcc.constant {value = dense<[4, 4]> : tensor<2xi64>} : () -> tensor<2xi64>
  %q = tcc.div %s, %four : (tensor<1xi64>, tensor<2xi64>) -> tensor<2xi64>
  %k = tcc.constant {value = dense<[1, 3]> : tensor<2xi64>} : () -> tensor<2xi64>
  %r = tcc.mul %q, %k : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %r : tensor<2xi64>
}

// -----

// A causal mask: ConstantOfShape, Cast, Not and Equal of constants fold;
// Where with a constant condition but a run-time operand stays.
// CHECK-LABEL: func.func @mask
// CHECK-DAG: %[[MASK:.+]] = tcc.constant {value = dense<{{\[}}[false, true], [false, false]]> : tensor<2x2xi1>}
// CHECK-DAG: %[[NEG:.+]] = tcc.constant {value = dense<-1.000000e+04> : tensor<f32>}
// CHECK: %[[R:.+]] = tcc.where %[[MASK]], %[[NEG]], %{{.+}}
// CHECK: return %[[R]]
func.func @mask(%scores: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %tri = tcc.constant {value = dense<[[1, 0], [1, 1]]> : tensor<2x2xi64>} : () -> tensor<2x2xi64>
  %zeros = tcc.constant_of_shape {shape = array<i64: 2, 2>, value = dense<0> : tensor<1xi64>} : () -> tensor<2x2xi64>
  %eq = tcc.equal %tri, %zeros : (tensor<2x2xi64>, tensor<2x2xi64>) -> tensor<2x2xi1>
  %keep = tcc.not %eq : (tensor<2x2xi1>) -> tensor<2x2xi1>
  %masked = tcc.not %keep : (tensor<2x2xi1>) -> tensor<2x2xi1>
  %b = tcc.cast %masked {to = i1} : (tensor<2x2xi1>) -> tensor<2x2xi1>
  %neg = tcc.constant {value = dense<-1.0e4> : tensor<f32>} : () -> tensor<f32>
  %r = tcc.where %b, %neg, %scores : (tensor<2x2xi1>, tensor<f32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}

// -----

// Casts, slices, transposes and reshapes of constants fold; of run-time
// values they stay unless they are the identity. Rows reversed, every other
// column from the back: [[6, 4], [3, 1]], then its first column.
// CHECK-LABEL: func.func @constants_fold
// CHECK-DAG: tcc.constant {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>}
// CHECK-DAG: tcc.constant {value = dense<{{\[}}[1, 4], [2, 5], [3, 6]]> : tensor<3x2xi64>}
// CHECK-DAG: tcc.constant {value = dense<[6, 3]> : tensor<2xi64>}
// CHECK-NOT: tcc.cast
// CHECK-NOT: tcc.transpose
// CHECK-NOT: tcc.slice
func.func @constants_fold() -> (tensor<3xf32>, tensor<3x2xi64>, tensor<2xi64>) {
  %c = tcc.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %row = tcc.slice %c {starts = array<i64: 0>, ends = array<i64: 1>} : (tensor<2x3xi64>) -> tensor<1x3xi64>
  %flat = tcc.reshape %row {shape = array<i64: 3>} : (tensor<1x3xi64>) -> tensor<3xi64>
  %f = tcc.cast %flat {to = f32} : (tensor<3xi64>) -> tensor<3xf32>
  %t = tcc.transpose %c : (tensor<2x3xi64>) -> tensor<3x2xi64>
  %rev = tcc.slice %c {starts = array<i64: -1, -1>, ends = array<i64: -9223372036854775808, -9223372036854775808>, steps = array<i64: -1, -2>} : (tensor<2x3xi64>) -> tensor<2x2xi64>
  %col = tcc.slice %rev {starts = array<i64: 0>, ends = array<i64: 1>, axes = array<i64: 1>} : (tensor<2x2xi64>) -> tensor<2x1xi64>
  %v = tcc.squeeze %col : (tensor<2x1xi64>) -> tensor<2xi64>
  return %f, %t, %v : tensor<3xf32>, tensor<3x2xi64>, tensor<2xi64>
}

// -----

// Leaves alone: ops on run-time values that are not the identity.
// CHECK-LABEL: func.func @runtime_values_stay
// CHECK: tcc.cast
// CHECK: tcc.transpose
// CHECK: tcc.add
func.func @runtime_values_stay(%x: tensor<2x3xf32>) -> (tensor<2x3xf16>, tensor<3x2xf32>, tensor<2x3xf32>) {
  %c = tcc.cast %x {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %t = tcc.transpose %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %one = tcc.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %a = tcc.add %x, %one : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %c, %t, %a : tensor<2x3xf16>, tensor<3x2xf32>, tensor<2x3xf32>
}

// -----

// Identities fold to their operand: same-type casts, full slices, identity
// permutations, single-input concats, Dropout outside training.
// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>)
// CHECK-NOT: tcc.
// CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]], %[[X]]
func.func @identities(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = tcc.cast %x {to = f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = tcc.slice %0 {starts = array<i64: 0>, ends = array<i64: 100>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = tcc.transpose %1 {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = tcc.concat %2 {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4, %m = tcc.dropout %3 {ratio = 0.1 : f32, training = false} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  %5 = tcc.identity %4 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// Dropout in training with a non-zero ratio is not the identity.
// CHECK-LABEL: func.func @dropout_training_stays
// CHECK: tcc.dropout
func.func @dropout_training_stays(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y, %m = tcc.dropout %x {ratio = 0.1 : f32, training = true} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  return %y : tensor<2x3xf32>
}

// -----

// Integer division by zero is undefined: not folded.
// CHECK-LABEL: func.func @no_fold_div_by_zero
// CHECK: tcc.div
func.func @no_fold_div_by_zero() -> tensor<1xi64> {
  %a = tcc.constant {value = dense<4> : tensor<1xi64>} : () -> tensor<1xi64>
  %z = tcc.constant {value = dense<0> : tensor<1xi64>} : () -> tensor<1xi64>
  %d = tcc.div %a, %z : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  return %d : tensor<1xi64>
}

// -----

// The ONNX-level ops of today's exporters fold on constants: the mask and
// position-table subgraphs (Trilu, LessOrEqual, Max, Sin/Cos, Pad,
// GatherElements, IsNaN).
// CHECK-LABEL: func.func @import_only_folds
// CHECK-DAG: tcc.constant {value = dense<{{\[\[}}1, 0, 0], [4, 5, 0]]> : tensor<2x3xi64>}
// CHECK-DAG: tcc.constant {value = dense<[true, true, false]> : tensor<3xi1>}
// CHECK-DAG: tcc.constant {value = dense<[2, 2, 3]> : tensor<3xi64>}
// CHECK-DAG: tcc.constant {value = dense<[0.000000e+00, 0.841470957]> : tensor<2xf32>}
// CHECK-DAG: tcc.constant {value = dense<[1.000000e+00, 0.540302277]> : tensor<2xf32>}
// CHECK-DAG: tcc.constant {value = dense<[-100, 1, 2, -100]> : tensor<4xi64>}
// CHECK-DAG: tcc.constant {value = dense<[3, 1]> : tensor<2xi64>}
// CHECK-DAG: tcc.constant {value = dense<[false, true]> : tensor<2xi1>}
// CHECK-NOT: tcc.trilu
// CHECK-NOT: tcc.less_or_equal
// CHECK-NOT: tcc.pad
// CHECK-NOT: tcc.gather_elements
// CHECK-NOT: tcc.is_nan
func.func @import_only_folds() -> (tensor<2x3xi64>, tensor<3xi1>, tensor<3xi64>, tensor<2xf32>, tensor<2xf32>, tensor<4xi64>, tensor<2xi64>, tensor<2xi1>) {
  %m = tcc.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %t = tcc.trilu %m {upper = 0 : i64} : (tensor<2x3xi64>) -> tensor<2x3xi64>
  %a = tcc.constant {value = dense<[1, 2, 3]> : tensor<3xi64>} : () -> tensor<3xi64>
  %two = tcc.constant {value = dense<2> : tensor<i64>} : () -> tensor<i64>
  %le = tcc.less_or_equal %a, %two : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %mx = tcc.max %a, %two : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %f = tcc.constant {value = dense<[0.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %s = tcc.sin %f : (tensor<2xf32>) -> tensor<2xf32>
  %c = tcc.cos %f : (tensor<2xf32>) -> tensor<2xf32>
  %l = tcc.constant {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %p = tcc.pad %l {pads = array<i64: 1, 1>, value = dense<-100> : tensor<i64>} : (tensor<2xi64>) -> tensor<4xi64>
  %idx = tcc.constant {value = dense<[2, -3]> : tensor<2xi64>} : () -> tensor<2xi64>
  %g = tcc.gather_elements %a, %idx {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %nanin = tcc.constant {value = dense<[1.0, 0x7FC00000]> : tensor<2xf32>} : () -> tensor<2xf32>
  %n = tcc.is_nan %nanin : (tensor<2xf32>) -> tensor<2xi1>
  return %t, %le, %mx, %s, %c, %p, %g, %n : tensor<2x3xi64>, tensor<3xi1>, tensor<3xi64>, tensor<2xf32>, tensor<2xf32>, tensor<4xi64>, tensor<2xi64>, tensor<2xi1>
}
