// RUN: tcc-opt %s --split-input-file --tcc-legalize | FileCheck %s
// Gemm becomes matmul + elementwise; the decomposed LayerNorm and GELU
// chains become one op each, and only when nothing else uses their insides.

// CHECK-LABEL: func.func @gemm
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<16x8xf32>, %[[B:[a-z0-9]+]]: tensor<32x16xf32>, %[[C:[a-z0-9]+]]: tensor<32xf32>)
// CHECK-NOT: tcc.gemm
// CHECK-DAG: %[[AT:.+]] = tcc.transpose %[[A]] {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
// CHECK-DAG: %[[BT:.+]] = tcc.transpose %[[B]] {perm = array<i64: 1, 0>} : (tensor<32x16xf32>) -> tensor<16x32xf32>
// CHECK: %[[M:.+]] = tcc.matmul %[[AT]], %[[BT]]
// CHECK: %[[SM:.+]] = tcc.mul %[[M]], %{{.+}}
// CHECK: %[[SC:.+]] = tcc.mul %[[C]], %{{.+}}
// CHECK: %[[Y:.+]] = tcc.add %[[SM]], %[[SC]]
// CHECK: return %[[Y]]
func.func @gemm(%a: tensor<16x8xf32>, %b: tensor<32x16xf32>, %c: tensor<32xf32>) -> tensor<8x32xf32> {
  %0 = tcc.gemm %a, %b, %c {transA = 1 : i64, transB = 1 : i64, alpha = 0.5 : f32, beta = 2.0 : f32} : (tensor<16x8xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// The opset-14 LayerNorm, as torch exports it; its epsilon is kept.
// CHECK-LABEL: func.func @layernorm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x16x32xf32>, %[[G:[a-z0-9]+]]: tensor<32xf32>, %[[B:[a-z0-9]+]]: tensor<32xf32>)
// CHECK-NOT: tcc.reduce_mean
// CHECK: %[[Y:.+]], %{{.+}}, %{{.+}} = tcc.layer_normalization %[[X]], %[[G]], %[[B]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
// CHECK-NOT: tcc.sqrt
// CHECK: return %[[Y]]
func.func @layernorm(%x: tensor<4x16x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<4x16x32xf32> {
  %mean = tcc.reduce_mean %x {axes = array<i64: -1>} : (tensor<4x16x32xf32>) -> tensor<4x16x1xf32>
  %d = tcc.sub %x, %mean : (tensor<4x16x32xf32>, tensor<4x16x1xf32>) -> tensor<4x16x32xf32>
  %two = tcc.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %sq = tcc.pow %d, %two : (tensor<4x16x32xf32>, tensor<f32>) -> tensor<4x16x32xf32>
  %var = tcc.reduce_mean %sq {axes = array<i64: -1>} : (tensor<4x16x32xf32>) -> tensor<4x16x1xf32>
  %eps = tcc.constant {value = dense<1.0e-6> : tensor<f32>} : () -> tensor<f32>
  %ve = tcc.add %var, %eps : (tensor<4x16x1xf32>, tensor<f32>) -> tensor<4x16x1xf32>
  %s = tcc.sqrt %ve : (tensor<4x16x1xf32>) -> tensor<4x16x1xf32>
  %n = tcc.div %d, %s : (tensor<4x16x32xf32>, tensor<4x16x1xf32>) -> tensor<4x16x32xf32>
  %m = tcc.mul %n, %g : (tensor<4x16x32xf32>, tensor<32xf32>) -> tensor<4x16x32xf32>
  %y = tcc.add %m, %b : (tensor<4x16x32xf32>, tensor<32xf32>) -> tensor<4x16x32xf32>
  return %y : tensor<4x16x32xf32>
}

// -----

// Leaves alone: the mean is also returned, so folding it away would compute
// it twice.
// CHECK-LABEL: func.func @layernorm_mean_used
// CHECK-NOT: tcc.layer_normalization
// CHECK: tcc.sqrt
func.func @layernorm_mean_used(%x: tensor<4x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> (tensor<4x32xf32>, tensor<4x1xf32>) {
  %mean = tcc.reduce_mean %x {axes = array<i64: -1>} : (tensor<4x32xf32>) -> tensor<4x1xf32>
  %d = tcc.sub %x, %mean : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  %two = tcc.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %sq = tcc.pow %d, %two : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %var = tcc.reduce_mean %sq {axes = array<i64: -1>} : (tensor<4x32xf32>) -> tensor<4x1xf32>
  %eps = tcc.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %ve = tcc.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = tcc.sqrt %ve : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = tcc.div %d, %s : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  %m = tcc.mul %n, %g : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  %y = tcc.add %m, %b : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %y, %mean : tensor<4x32xf32>, tensor<4x1xf32>
}

// -----

// Leaves alone: normalizing over a leading axis is not LayerNorm's form.
// CHECK-LABEL: func.func @not_trailing
// CHECK-NOT: tcc.layer_normalization
func.func @not_trailing(%x: tensor<4x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<4x32xf32> {
  %mean = tcc.reduce_mean %x {axes = array<i64: 0>} : (tensor<4x32xf32>) -> tensor<1x32xf32>
  %d = tcc.sub %x, %mean : (tensor<4x32xf32>, tensor<1x32xf32>) -> tensor<4x32xf32>
  %sq = tcc.mul %d, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %var = tcc.reduce_mean %sq {axes = array<i64: 0>} : (tensor<4x32xf32>) -> tensor<1x32xf32>
  %eps = tcc.constant {value = dense<1.0e-5> : tensor<f32>} : () -> tensor<f32>
  %ve = tcc.add %var, %eps : (tensor<1x32xf32>, tensor<f32>) -> tensor<1x32xf32>
  %s = tcc.sqrt %ve : (tensor<1x32xf32>) -> tensor<1x32xf32>
  %n = tcc.div %d, %s : (tensor<4x32xf32>, tensor<1x32xf32>) -> tensor<4x32xf32>
  %m = tcc.mul %n, %g : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  %y = tcc.add %m, %b : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// erf GELU (F.gelu) and tanh GELU (approximate='tanh'), as torch exports them.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x128xf32>)
// CHECK-NOT: tcc.erf
// CHECK-NOT: tcc.tanh
// CHECK-DAG: %[[E:.+]] = tcc.gelu %[[X]] : (tensor<4x128xf32>) -> tensor<4x128xf32>
// CHECK-DAG: %[[T:.+]] = tcc.gelu %[[X]] {approximate = "tanh"} : (tensor<4x128xf32>) -> tensor<4x128xf32>
// CHECK: return %[[E]], %[[T]]
func.func @gelu(%x: tensor<4x128xf32>) -> (tensor<4x128xf32>, tensor<4x128xf32>) {
  %sqrt2 = tcc.constant {value = dense<1.41421354> : tensor<f32>} : () -> tensor<f32>
  %a = tcc.div %x, %sqrt2 : (tensor<4x128xf32>, tensor<f32>) -> tensor<4x128xf32>
  %e = tcc.erf %a : (tensor<4x128xf32>) -> tensor<4x128xf32>
  %one = tcc.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %b = tcc.add %e, %one : (tensor<4x128xf32>, tensor<f32>) -> tensor<4x128xf32>
  %c = tcc.mul %x, %b : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %half = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %y = tcc.mul %c, %half : (tensor<4x128xf32>, tensor<f32>) -> tensor<4x128xf32>

  %x2 = tcc.mul %x, %x : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %x3 = tcc.mul %x, %x2 : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %k1 = tcc.constant {value = dense<4.471500e-02> : tensor<f32>} : () -> tensor<f32>
  %w = tcc.mul %k1, %x3 : (tensor<f32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %v = tcc.add %x, %w : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %k2 = tcc.constant {value = dense<0.797884583> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.mul %k2, %v : (tensor<f32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %t = tcc.tanh %u : (tensor<4x128xf32>) -> tensor<4x128xf32>
  %one2 = tcc.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %p = tcc.add %one2, %t : (tensor<f32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %q = tcc.mul %x, %p : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  %half2 = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %z = tcc.mul %half2, %q : (tensor<f32>, tensor<4x128xf32>) -> tensor<4x128xf32>
  return %y, %z : tensor<4x128xf32>, tensor<4x128xf32>
}

// -----

// Leaves alone: 0.6 instead of 0.5 is not GELU.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: tcc.gelu
// CHECK: tcc.erf
func.func @not_gelu(%x: tensor<8xf32>) -> tensor<8xf32> {
  %sqrt2 = tcc.constant {value = dense<1.41421354> : tensor<f32>} : () -> tensor<f32>
  %a = tcc.div %x, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %e = tcc.erf %a : (tensor<8xf32>) -> tensor<8xf32>
  %one = tcc.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %b = tcc.add %e, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %c = tcc.mul %x, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %k = tcc.constant {value = dense<0.6> : tensor<f32>} : () -> tensor<f32>
  %y = tcc.mul %c, %k : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}
