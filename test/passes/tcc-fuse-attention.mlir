// RUN: tcc-opt %s --split-input-file --tcc-fuse-attention | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-fuse-attention="max-head-size=4" | FileCheck %s --check-prefix=SMALL

// A GPT's causal attention as torch.onnx.export writes it: the scores
// scaled by a constant, masked_fill(~tril(ones), -inf), softmax, times v.
// The key's transpose is undone (it folds into the transpose that made k^T).
// CHECK-LABEL: func.func @causal
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x3x4x8xf32> {{.*}}, %[[KT:[a-z0-9]+]]: tensor<2x3x8x4xf32> {{.*}}, %[[V:[a-z0-9]+]]: tensor<2x3x4x6xf32> {{.*}})
// CHECK-NOT: tcc.constant
// CHECK: %[[K:.+]] = tcc.transpose %[[KT]] {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x8x4xf32>) -> tensor<2x3x4x8xf32>
// CHECK: %[[O:.+]], %{{.+}} = tcc.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 0.35355338454246521 : f64} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x6xf32>) -> (tensor<2x3x4x6xf32>, tensor<2x3x4xf32>)
// CHECK-NOT: tcc.softmax
// CHECK-NOT: tcc.matmul
// CHECK: return %[[O]]
// SMALL-LABEL: func.func @causal
// SMALL-NOT: tcc.attention
// SMALL: tcc.softmax
func.func @causal(%q: tensor<2x3x4x8xf32> {tcc.param = "q"}, %kt: tensor<2x3x8x4xf32> {tcc.param = "kt"},
                  %v: tensor<2x3x4x6xf32> {tcc.param = "v"}) -> (tensor<2x3x4x6xf32> {tcc.output = "o"}) {
  %s = tcc.matmul %q, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %c = tcc.constant {value = dense<0.353553385> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %c : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %mask = tcc.constant {value = dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>} : () -> tensor<4x4xi1>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %ninf, %t : (tensor<4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %p = tcc.softmax %u : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = tcc.matmul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x6xf32>) -> tensor<2x3x4x6xf32>
  return %o : tensor<2x3x4x6xf32>
}

// -----

// Scores divided by a constant (BERT's / sqrt(d)), no mask, Sq != Sk.
// CHECK-LABEL: func.func @divided
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}} {scale = 2.500000e-01 : f64} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3xf32>)
func.func @divided(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x5xf32>, %v: tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x5xf32>) -> tensor<1x2x3x5xf32>
  %c = tcc.constant {value = dense<4.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.div %s, %c : (tensor<1x2x3x5xf32>, tensor<f32>) -> tensor<1x2x3x5xf32>
  %p = tcc.softmax %t : (tensor<1x2x3x5xf32>) -> tensor<1x2x3x5xf32>
  %o = tcc.matmul %p, %v : (tensor<1x2x3x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Left alone: the probabilities are also returned.
// CHECK-LABEL: func.func @probs_returned
// CHECK-NOT: tcc.attention
// CHECK: tcc.softmax
func.func @probs_returned(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>) -> (tensor<1x1x3x4xf32>, tensor<1x1x3x3xf32>) {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %s : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o, %p : tensor<1x1x3x4xf32>, tensor<1x1x3x3xf32>
}

// -----

// Left alone: a mask that also hides the diagonal is not the causal one.
// CHECK-LABEL: func.func @not_causal_mask
// CHECK-NOT: tcc.attention
// CHECK: tcc.where
func.func @not_causal_mask(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %mask = tcc.constant {value = dense<[[true, true, true], [false, true, true], [false, false, true]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %ninf, %s : (tensor<3x3xi1>, tensor<f32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// Left alone: an additive term broadcast over the keys ([.., Sq, 1]) is not
// a bias the kernels read (one value per key).
// CHECK-LABEL: func.func @additive_mask
// CHECK-NOT: tcc.attention
// CHECK: tcc.add
func.func @additive_mask(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>, %m: tensor<1x1x3x1xf32>) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %u = tcc.add %s, %m : (tensor<1x1x3x3xf32>, tensor<1x1x3x1xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// Multi-query attention (Falcon): the key is broadcast over the heads
// ([B, 1, D, Sk]) by the product; the op reads it expanded.
// CHECK-LABEL: func.func @broadcast_key
// CHECK: %[[K:.+]] = tcc.transpose %arg1 {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x3xf32>) -> tensor<1x1x3x4xf32>
// CHECK: %[[KE:.+]] = tcc.expand %[[K]] {shape = array<i64: 1, 2, 3, 4>}
// CHECK: tcc.attention %arg0, %[[KE]], %arg2 {scale = 1.000000e+00 : f64}
func.func @broadcast_key(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x2x3x3xf32>
  %p = tcc.softmax %s : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// nn.MultiheadAttention's form: [B*H, S, D] tensors, the queries divided by
// sqrt(d) before the product, a scale of 1, and the causal mask as an
// additive constant (0 on and below the diagonal, -inf above). The op works
// on [1, B*H, S, D] views.
// CHECK-LABEL: func.func @mha
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<6x3x4xf32>, %[[KT:[a-z0-9]+]]: tensor<6x4x3xf32>, %[[V:[a-z0-9]+]]: tensor<6x3x4xf32>)
// CHECK-NOT: tcc.constant
// CHECK: %[[K:.+]] = tcc.transpose %[[KT]] {perm = array<i64: 0, 2, 1>} : (tensor<6x4x3xf32>) -> tensor<6x3x4xf32>
// CHECK: %[[Q4:.+]] = tcc.reshape %[[Q]] {shape = array<i64: 1, 6, 3, 4>}
// CHECK: %[[K4:.+]] = tcc.reshape %[[K]] {shape = array<i64: 1, 6, 3, 4>}
// CHECK: %[[V4:.+]] = tcc.reshape %[[V]] {shape = array<i64: 1, 6, 3, 4>}
// CHECK: %[[O:.+]], %{{.+}} = tcc.attention %[[Q4]], %[[K4]], %[[V4]] {causal = true, scale = 5.000000e-01 : f64}
// CHECK: %[[O3:.+]] = tcc.reshape %[[O]] {shape = array<i64: 6, 3, 4>} : (tensor<1x6x3x4xf32>) -> tensor<6x3x4xf32>
// CHECK: return %[[O3]]
func.func @mha(%q: tensor<6x3x4xf32>, %kt: tensor<6x4x3xf32>, %v: tensor<6x3x4xf32>) -> tensor<6x3x4xf32> {
  %c = tcc.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %qs = tcc.div %q, %c : (tensor<6x3x4xf32>, tensor<f32>) -> tensor<6x3x4xf32>
  %s = tcc.matmul %qs, %kt : (tensor<6x3x4xf32>, tensor<6x4x3xf32>) -> tensor<6x3x3xf32>
  %one = tcc.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %one : (tensor<6x3x3xf32>, tensor<f32>) -> tensor<6x3x3xf32>
  %m = tcc.constant {value = dense<[[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]]> : tensor<1x3x3xf32>} : () -> tensor<1x3x3xf32>
  %u = tcc.add %t, %m : (tensor<6x3x3xf32>, tensor<1x3x3xf32>) -> tensor<6x3x3xf32>
  %p = tcc.softmax %u : (tensor<6x3x3xf32>) -> tensor<6x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<6x3x3xf32>, tensor<6x3x4xf32>) -> tensor<6x3x4xf32>
  return %o : tensor<6x3x4xf32>
}

// -----

// Hugging Face's GPT-2 form: where(tril, scores, the most negative float),
// the scores divided by sqrt(d) first.
// CHECK-LABEL: func.func @where_keep
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}} {causal = true, scale = 2.500000e-01 : f64}
func.func @where_keep(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %c = tcc.constant {value = dense<4.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.div %s, %c : (tensor<1x1x3x3xf32>, tensor<f32>) -> tensor<1x1x3x3xf32>
  %keep = tcc.constant {value = dense<[[[[true, false, false], [true, true, false], [true, true, true]]]]> : tensor<1x1x3x3xi1>} : () -> tensor<1x1x3x3xi1>
  %min = tcc.constant {value = dense<-3.40282347E+38> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %keep, %t, %min : (tensor<1x1x3x3xi1>, tensor<1x1x3x3xf32>, tensor<f32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// Left alone: a fill of -100 does not make the masked probabilities zero.
// CHECK-LABEL: func.func @weak_fill
// CHECK-NOT: tcc.attention
// CHECK: tcc.where
func.func @weak_fill(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %mask = tcc.constant {value = dense<[[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %fill = tcc.constant {value = dense<-100.0> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %fill, %s : (tensor<3x3xi1>, tensor<f32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// An additive constant that is not 0 below the diagonal (a fixed position
// bias) is not a causal mask: it is the op's bias, and causal stays false.
// CHECK-LABEL: func.func @additive_bias
// CHECK: %[[C:.+]] = tcc.constant {value = dense<{{.*}}5.000000e-01
// CHECK: %[[B:.+]] = tcc.reshape %[[C]] {shape = array<i64: 1, 1, 3, 3>}
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}}, %[[B]] {scale = 1.000000e+00 : f64}
func.func @additive_bias(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %m = tcc.constant {value = dense<[[0.0, 0xFF800000, 0xFF800000], [0.5, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %u = tcc.add %m, %s : (tensor<3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// BERT's form: the scores divided by sqrt(d), then a padding mask
// ([B, 1, 1, Sk], computed from an input) added: the mask is the op's bias.
// CHECK-LABEL: func.func @padding_mask
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<2x1x1x5xf32> {tcc.input = "mask"}
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}}, %[[M]] {scale = 1.250000e-01 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x3x5x8xf32>, tensor<2x1x1x5xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5xf32>)
// CHECK-NOT: tcc.add
func.func @padding_mask(%q: tensor<2x3x5x8xf32> {tcc.param = "q"}, %kt: tensor<2x3x8x5xf32> {tcc.param = "kt"}, %v: tensor<2x3x5x8xf32> {tcc.param = "v"}, %m: tensor<2x1x1x5xf32> {tcc.input = "mask"}) -> (tensor<2x3x5x8xf32> {tcc.output = "o"}) {
  %s = tcc.matmul %q, %kt : (tensor<2x3x5x8xf32>, tensor<2x3x8x5xf32>) -> tensor<2x3x5x5xf32>
  %c = tcc.constant {value = dense<8.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.div %s, %c : (tensor<2x3x5x5xf32>, tensor<f32>) -> tensor<2x3x5x5xf32>
  %u = tcc.add %t, %m : (tensor<2x3x5x5xf32>, tensor<2x1x1x5xf32>) -> tensor<2x3x5x5xf32>
  %p = tcc.softmax %u : (tensor<2x3x5x5xf32>) -> tensor<2x3x5x5xf32>
  %o = tcc.matmul %p, %v : (tensor<2x3x5x5xf32>, tensor<2x3x5x8xf32>) -> tensor<2x3x5x8xf32>
  return %o : tensor<2x3x5x8xf32>
}

// -----

// A [Sq, Sk] bias with the causal mask after it: both fused, the bias read
// as [1, 1, Sq, Sk].
// CHECK-LABEL: func.func @bias_and_causal
// CHECK: %[[B4:.+]] = tcc.reshape %{{.+}} {shape = array<i64: 1, 1, 3, 3>} : (tensor<3x3xf32>) -> tensor<1x1x3x3xf32>
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}}, %[[B4]] {causal = true, scale = 1.000000e+00 : f64}
func.func @bias_and_causal(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>, %b: tensor<3x3xf32> {tcc.input = "b"}) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %t = tcc.add %s, %b : (tensor<1x1x3x3xf32>, tensor<3x3xf32>) -> tensor<1x1x3x3xf32>
  %mask = tcc.constant {value = dense<[[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %ninf, %t : (tensor<3x3xi1>, tensor<f32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// Left alone: a bias a trainable parameter reaches (a learned position bias
// would need a gradient, which tcc.attention does not give its bias).
// CHECK-LABEL: func.func @trainable_bias
// CHECK-NOT: tcc.attention
// CHECK: tcc.softmax
func.func @trainable_bias(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>, %w: tensor<3x3xf32> {tcc.param = "w"}) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %b = tcc.tanh %w : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %t = tcc.add %s, %b : (tensor<1x1x3x3xf32>, tensor<3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %t : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// A bias added before a scale is scaled with the scores: the op's bias is
// the bias times the scales after it.
// CHECK-LABEL: func.func @bias_then_scale
// CHECK: %[[C:.+]] = tcc.constant {value = dense<5.000000e-01> : tensor<f32>}
// CHECK: %[[B:.+]] = tcc.mul %arg3, %[[C]]
// CHECK: tcc.attention %arg0, %{{.+}}, %arg2, %[[B]] {scale = 5.000000e-01 : f64}
// CHECK-NOT: tcc.softmax
func.func @bias_then_scale(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>, %b: tensor<1x1x1x3xf32> {tcc.input = "b"}) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %t = tcc.add %s, %b : (tensor<1x1x3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x1x3x3xf32>
  %c = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.mul %t, %c : (tensor<1x1x3x3xf32>, tensor<f32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// GPT-2's layout: q, k and v are the thirds of one [B, S, 3*H*D] projection
// (split, reshaped to [B, S, H, D], transposed to head-major; k^T straight
// to [B, H, D, S]), and the output goes back to [B, S, H*D]. The op reads
// the projection whole (packed: each operand's first column) and returns
// the [B, S, H*D] output; the split, reshapes and transposes are gone.
// CHECK-LABEL: func.func @packed
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x24xf32>
// CHECK-NEXT: %[[O:.+]], %{{.+}} = tcc.attention %[[X]], %[[X]], %[[X]] {causal = true, columns = array<i64: 0, 8, 16>, heads = 2 : i64, scale = 5.000000e-01 : f64} : (tensor<2x5x24xf32>, tensor<2x5x24xf32>, tensor<2x5x24xf32>) -> (tensor<2x5x8xf32>, tensor<2x2x5xf32>)
// CHECK-NEXT: return %[[O]] : tensor<2x5x8xf32>
func.func @packed(%x: tensor<2x5x24xf32> {tcc.input = "x"}) -> (tensor<2x5x8xf32> {tcc.output = "o"}) {
  %q3, %k3, %v3 = tcc.split %x {axis = 2 : i64, split = array<i64: 8, 8, 8>} : (tensor<2x5x24xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>)
  %q4 = tcc.reshape %q3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %q = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %k4 = tcc.reshape %k3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x4x5xf32>
  %v4 = tcc.reshape %v3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %v = tcc.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %s = tcc.matmul %q, %kt : (tensor<2x2x5x4xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x5x5xf32>
  %c = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %c : (tensor<2x2x5x5xf32>, tensor<f32>) -> tensor<2x2x5x5xf32>
  %mask = tcc.constant {value = dense<[[true, false, false, false, false], [true, true, false, false, false], [true, true, true, false, false], [true, true, true, true, false], [true, true, true, true, true]]> : tensor<5x5xi1>} : () -> tensor<5x5xi1>
  %min = tcc.constant {value = dense<-3.4e38> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %t, %min : (tensor<5x5xi1>, tensor<2x2x5x5xf32>, tensor<f32>) -> tensor<2x2x5x5xf32>
  %p = tcc.softmax %u : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %o = tcc.matmul %p, %v : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
  %ot = tcc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x5x4xf32>) -> tensor<2x5x2x4xf32>
  %o3 = tcc.reshape %ot {shape = array<i64: 2, 5, 8>} : (tensor<2x5x2x4xf32>) -> tensor<2x5x8xf32>
  return %o3 : tensor<2x5x8xf32>
}

// -----

// The split's thirds in another order (v, q, k): the columns follow them.
// Another reader of the split keeps it (the op still reads the projection).
// CHECK-LABEL: func.func @packed_order
// CHECK: tcc.split
// CHECK: tcc.attention %[[X:[a-z0-9]+]], %[[X]], %[[X]] {columns = array<i64: 8, 16, 0>, heads = 2 : i64, scale = 1.000000e+00 : f64}
func.func @packed_order(%x: tensor<2x5x24xf32> {tcc.input = "x"}) -> (tensor<2x5x8xf32> {tcc.output = "o"}, tensor<2x5x8xf32> {tcc.output = "v"}) {
  %v3, %q3, %k3 = tcc.split %x {axis = -1 : i64, split = array<i64: 8, 8, 8>} : (tensor<2x5x24xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>)
  %q4 = tcc.reshape %q3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %q = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %k4 = tcc.reshape %k3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x4x5xf32>
  %v4 = tcc.reshape %v3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %v = tcc.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %s = tcc.matmul %q, %kt : (tensor<2x2x5x4xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x5x5xf32>
  %p = tcc.softmax %s : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %o = tcc.matmul %p, %v : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
  %ot = tcc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x5x4xf32>) -> tensor<2x5x2x4xf32>
  %o3 = tcc.reshape %ot {shape = array<i64: 2, 5, 8>} : (tensor<2x5x2x4xf32>) -> tensor<2x5x8xf32>
  return %o3, %v3 : tensor<2x5x8xf32>, tensor<2x5x8xf32>
}

// -----

// BERT's layout: q, k and v come from three projections ([B, S, H*D]
// each): token-major, one operand each. A reader that wants the
// head-major output gets a view of the token-major one.
// CHECK-LABEL: func.func @token_major
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x5x8xf32> {{.*}}, %[[K:[a-z0-9]+]]: tensor<2x7x8xf32> {{.*}}, %[[V:[a-z0-9]+]]: tensor<2x7x6xf32> {{.*}})
// CHECK-NEXT: %[[O:.+]], %{{.+}} = tcc.attention %[[Q]], %[[K]], %[[V]] {heads = 2 : i64, scale = 5.000000e-01 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x6xf32>) -> (tensor<2x5x6xf32>, tensor<2x2x5xf32>)
// CHECK-NEXT: %[[O4:.+]] = tcc.reshape %[[O]] {shape = array<i64: 2, 5, 2, 3>} : (tensor<2x5x6xf32>) -> tensor<2x5x2x3xf32>
// CHECK-NEXT: %[[OH:.+]] = tcc.transpose %[[O4]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x3xf32>) -> tensor<2x2x5x3xf32>
// CHECK-NEXT: return %[[O]], %[[OH]]
func.func @token_major(%q3: tensor<2x5x8xf32> {tcc.input = "q"}, %k3: tensor<2x7x8xf32> {tcc.input = "k"}, %v3: tensor<2x7x6xf32> {tcc.input = "v"})
    -> (tensor<2x5x6xf32> {tcc.output = "o"}, tensor<2x2x5x3xf32> {tcc.output = "heads"}) {
  %q4 = tcc.reshape %q3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %q = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %k4 = tcc.reshape %k3 {shape = array<i64: 2, 7, 2, 4>} : (tensor<2x7x8xf32>) -> tensor<2x7x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x7x2x4xf32>) -> tensor<2x2x4x7xf32>
  %v4 = tcc.reshape %v3 {shape = array<i64: 2, 7, 2, 3>} : (tensor<2x7x6xf32>) -> tensor<2x7x2x3xf32>
  %v = tcc.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x7x2x3xf32>) -> tensor<2x2x7x3xf32>
  %s = tcc.matmul %q, %kt : (tensor<2x2x5x4xf32>, tensor<2x2x4x7xf32>) -> tensor<2x2x5x7xf32>
  %c = tcc.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.div %s, %c : (tensor<2x2x5x7xf32>, tensor<f32>) -> tensor<2x2x5x7xf32>
  %p = tcc.softmax %t : (tensor<2x2x5x7xf32>) -> tensor<2x2x5x7xf32>
  %o = tcc.matmul %p, %v : (tensor<2x2x5x7xf32>, tensor<2x2x7x3xf32>) -> tensor<2x2x5x3xf32>
  %ot = tcc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x5x3xf32>) -> tensor<2x5x2x3xf32>
  %o3 = tcc.reshape %ot {shape = array<i64: 2, 5, 6>} : (tensor<2x5x2x3xf32>) -> tensor<2x5x6xf32>
  return %o3, %o : tensor<2x5x6xf32>, tensor<2x2x5x3xf32>
}

// -----

// Only q and k are views of [B, S, H*D] tensors: the op stays head-major.
// CHECK-LABEL: func.func @mixed_layouts
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}} {scale = 1.000000e+00 : f64} : (tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>)
func.func @mixed_layouts(%q3: tensor<2x5x8xf32> {tcc.input = "q"}, %k3: tensor<2x5x8xf32> {tcc.input = "k"}, %v: tensor<2x2x5x4xf32> {tcc.input = "v"})
    -> (tensor<2x2x5x4xf32> {tcc.output = "o"}) {
  %q4 = tcc.reshape %q3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %q = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %k4 = tcc.reshape %k3 {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x4x5xf32>
  %s = tcc.matmul %q, %kt : (tensor<2x2x5x4xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x5x5xf32>
  %p = tcc.softmax %s : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %o = tcc.matmul %p, %v : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
  return %o : tensor<2x2x5x4xf32>
}

// -----

// Self-attention of one [B, S, H*D] value, with no projections: the same
// head-major view is the query and the value. Token-major, three operands
// that are one value (not packed: the columns are all 0).
// CHECK-LABEL: func.func @one_value
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xf32>
// CHECK-NEXT: %[[O:.+]], %{{.+}} = tcc.attention %[[X]], %[[X]], %[[X]] {heads = 2 : i64, scale = 1.000000e+00 : f64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x2x5xf32>)
// CHECK-NEXT: return %[[O]]
func.func @one_value(%x: tensor<2x5x8xf32> {tcc.input = "x"}) -> (tensor<2x5x8xf32> {tcc.output = "o"}) {
  %x4 = tcc.reshape %x {shape = array<i64: 2, 5, 2, 4>} : (tensor<2x5x8xf32>) -> tensor<2x5x2x4xf32>
  %q = tcc.transpose %x4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x5x4xf32>
  %kt = tcc.transpose %x4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x2x4xf32>) -> tensor<2x2x4x5xf32>
  %s = tcc.matmul %q, %kt : (tensor<2x2x5x4xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x5x5xf32>
  %p = tcc.softmax %s : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %o = tcc.matmul %p, %q : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
  %ot = tcc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x5x4xf32>) -> tensor<2x5x2x4xf32>
  %o3 = tcc.reshape %ot {shape = array<i64: 2, 5, 8>} : (tensor<2x5x2x4xf32>) -> tensor<2x5x8xf32>
  return %o3 : tensor<2x5x8xf32>
}

// -----

// Dropout on the probabilities in tcc-legalize's form: the op takes the
// ratio, the mask's stream and the random state, and the mask (read by
// nothing else) goes.
// CHECK-LABEL: func.func @dropout
// CHECK-SAME: %[[RNG:[a-z0-9]+]]: tensor<2xi64> {tcc.rng}
// CHECK-NOT: tcc.random_keep
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}} rng %[[RNG]] {dropout = 2.500000e-01 : f32, dropout_stream = 3 : i64, scale = 2.500000e-01 : f64}
// CHECK-NOT: tcc.random_keep
// CHECK-NOT: tcc.where
func.func @dropout(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x5xf32>, %v: tensor<1x2x5x4xf32>, %rng: tensor<2xi64> {tcc.rng}) -> tensor<1x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x5xf32>) -> tensor<1x2x3x5xf32>
  %c = tcc.constant {value = dense<4.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.div %s, %c : (tensor<1x2x3x5xf32>, tensor<f32>) -> tensor<1x2x3x5xf32>
  %p = tcc.softmax %t : (tensor<1x2x3x5xf32>) -> tensor<1x2x3x5xf32>
  %keep = tcc.random_keep %rng {ratio = 0.25 : f32, shape = array<i64: 1, 2, 3, 5>, stream = 3 : i64} : (tensor<2xi64>) -> tensor<1x2x3x5xi1>
  %inv = tcc.constant {value = dense<1.33333337> : tensor<f32>} : () -> tensor<f32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %m = tcc.mul %p, %inv : (tensor<1x2x3x5xf32>, tensor<f32>) -> tensor<1x2x3x5xf32>
  %d = tcc.where %keep, %m, %zero : (tensor<1x2x3x5xi1>, tensor<1x2x3x5xf32>, tensor<f32>) -> tensor<1x2x3x5xf32>
  %o = tcc.matmul %d, %v : (tensor<1x2x3x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Left alone: the dropped probabilities are scaled by 2, not by the
// 1 / (1 - 0.25) that dropout's scale is.
// CHECK-LABEL: func.func @dropout_other_scale
// CHECK-NOT: tcc.attention
// CHECK: tcc.softmax
// CHECK: tcc.random_keep
func.func @dropout_other_scale(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x5xf32>, %v: tensor<1x2x5x4xf32>, %rng: tensor<2xi64> {tcc.rng}) -> tensor<1x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x5xf32>) -> tensor<1x2x3x5xf32>
  %p = tcc.softmax %s : (tensor<1x2x3x5xf32>) -> tensor<1x2x3x5xf32>
  %keep = tcc.random_keep %rng {ratio = 0.25 : f32, shape = array<i64: 1, 2, 3, 5>, stream = 0 : i64} : (tensor<2xi64>) -> tensor<1x2x3x5xi1>
  %two = tcc.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %m = tcc.mul %p, %two : (tensor<1x2x3x5xf32>, tensor<f32>) -> tensor<1x2x3x5xf32>
  %d = tcc.where %keep, %m, %zero : (tensor<1x2x3x5xi1>, tensor<1x2x3x5xf32>, tensor<f32>) -> tensor<1x2x3x5xf32>
  %o = tcc.matmul %d, %v : (tensor<1x2x3x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// nn.MultiheadAttention's [B*H, S, D] form with dropout: the op reads it as
// [1, B*H, S, D], so its (b, h) = (0, i) and its mask index is the flat
// index of the [B*H, Sq, Sk] probabilities that random_keep drew. The mask
// is also returned: it stays for that reader, and the op draws the same one.
// CHECK-LABEL: func.func @dropout_bh_mask_returned
// CHECK: %[[K:.+]] = tcc.random_keep %[[RNG:[a-z0-9]+]] {ratio = 1.000000e-01 : f32, shape = array<i64: 6, 3, 5>, stream = 0 : i64}
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}} rng %[[RNG]] {dropout = 1.000000e-01 : f32, dropout_stream = 0 : i64, scale = 5.000000e-01 : f64} : (tensor<1x6x3x4xf32>, tensor<1x6x5x4xf32>, tensor<1x6x5x4xf32>, tensor<2xi64>)
// CHECK-NOT: tcc.softmax
// CHECK: return %{{.+}}, %[[K]]
func.func @dropout_bh_mask_returned(%q: tensor<6x3x4xf32>, %kt: tensor<6x4x5xf32>, %v: tensor<6x5x4xf32>, %rng: tensor<2xi64> {tcc.rng}) -> (tensor<6x3x4xf32>, tensor<6x3x5xi1>) {
  %s = tcc.matmul %q, %kt : (tensor<6x3x4xf32>, tensor<6x4x5xf32>) -> tensor<6x3x5xf32>
  %c = tcc.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %c : (tensor<6x3x5xf32>, tensor<f32>) -> tensor<6x3x5xf32>
  %p = tcc.softmax %t : (tensor<6x3x5xf32>) -> tensor<6x3x5xf32>
  %keep = tcc.random_keep %rng {ratio = 0.1 : f32, shape = array<i64: 6, 3, 5>, stream = 0 : i64} : (tensor<2xi64>) -> tensor<6x3x5xi1>
  %inv = tcc.constant {value = dense<1.11111116> : tensor<f32>} : () -> tensor<f32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %m = tcc.mul %p, %inv : (tensor<6x3x5xf32>, tensor<f32>) -> tensor<6x3x5xf32>
  %d = tcc.where %keep, %m, %zero : (tensor<6x3x5xi1>, tensor<6x3x5xf32>, tensor<f32>) -> tensor<6x3x5xf32>
  %o = tcc.matmul %d, %v : (tensor<6x3x5xf32>, tensor<6x5x4xf32>) -> tensor<6x3x4xf32>
  return %o, %keep : tensor<6x3x4xf32>, tensor<6x3x5xi1>
}

// -----

// BLOOM's form: [B*H, S, S] scores scaled, an ALiBi bias [B*H, 1, Sk] added
// (computed from an input), viewed as [B, H, S, S], and a causal mask that
// is one [S, S] matrix repeated over the batch ([B, 1, S, S], -FLT_MAX
// above the diagonal); the probabilities viewed back for the product. The
// bias is read as [B, H, 1, Sk], q, k and v as [B, H, S, D] views, and the
// result viewed back.
// CHECK-LABEL: func.func @alibi_views
// CHECK-DAG: %[[A:.+]] = tcc.reshape %arg3 {shape = array<i64: 2, 2, 1, 3>} : (tensor<4x1x3xf32>) -> tensor<2x2x1x3xf32>
// CHECK-DAG: %[[Q:.+]] = tcc.reshape %arg0 {shape = array<i64: 2, 2, 3, 4>}
// CHECK: %[[O:.+]], %{{.+}} = tcc.attention %[[Q]], %{{.+}}, %{{.+}}, %[[A]] {causal = true, scale = 2.500000e-01 : f64}
// CHECK: tcc.reshape %[[O]] {shape = array<i64: 4, 3, 4>}
// CHECK-NOT: tcc.softmax
func.func @alibi_views(%q: tensor<4x3x4xf32>, %kt: tensor<4x4x3xf32>, %v: tensor<4x3x4xf32>, %alibi: tensor<4x1x3xf32> {tcc.input = "alibi"}) -> tensor<4x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<4x3x4xf32>, tensor<4x4x3xf32>) -> tensor<4x3x3xf32>
  %c = tcc.constant {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %c : (tensor<4x3x3xf32>, tensor<f32>) -> tensor<4x3x3xf32>
  %u = tcc.add %t, %alibi : (tensor<4x3x3xf32>, tensor<4x1x3xf32>) -> tensor<4x3x3xf32>
  %w = tcc.reshape %u {shape = array<i64: 2, 2, 3, -1>} : (tensor<4x3x3xf32>) -> tensor<2x2x3x3xf32>
  %m = tcc.constant {value = dense<[[[[0.0, 0xFF7FFFFF, 0xFF7FFFFF], [0.0, 0.0, 0xFF7FFFFF], [0.0, 0.0, 0.0]]], [[[0.0, 0xFF7FFFFF, 0xFF7FFFFF], [0.0, 0.0, 0xFF7FFFFF], [0.0, 0.0, 0.0]]]]> : tensor<2x1x3x3xf32>} : () -> tensor<2x1x3x3xf32>
  %x = tcc.add %w, %m : (tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = tcc.softmax %x : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p3 = tcc.reshape %p {shape = array<i64: 4, 3, -1>} : (tensor<2x2x3x3xf32>) -> tensor<4x3x3xf32>
  %o = tcc.matmul %p3, %v : (tensor<4x3x3xf32>, tensor<4x3x4xf32>) -> tensor<4x3x4xf32>
  return %o : tensor<4x3x4xf32>
}

// -----

// Left alone: the repeated mask's batches differ, so it is not one causal
// matrix (and a parameterless constant bias would be read whole: here it is
// a bias of the op instead).
// CHECK-LABEL: func.func @mask_batches_differ
// CHECK: tcc.attention
// CHECK-NOT: causal = true
func.func @mask_batches_differ(%q: tensor<2x1x2x4xf32>, %kt: tensor<2x1x4x2xf32>, %v: tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<2x1x2x4xf32>, tensor<2x1x4x2xf32>) -> tensor<2x1x2x2xf32>
  %m = tcc.constant {value = dense<[[[[0.0, 0xFF7FFFFF], [0.0, 0.0]]], [[[0.0, 0.0], [0.0, 0.0]]]]> : tensor<2x1x2x2xf32>} : () -> tensor<2x1x2x2xf32>
  %x = tcc.add %s, %m : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %p = tcc.softmax %x : (tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %o = tcc.matmul %p, %v : (tensor<2x1x2x2xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  return %o : tensor<2x1x2x4xf32>
}

// -----

// GPT-Neo's local layers: a fixed boolean window (each query sees itself
// and the key before it) with the most negative float as the fill, then
// the causal mask again as an additive [B, 1, S, S] constant. The window
// becomes the op's bias (0 kept, -3e4 hidden); the causal mask its flag.
// CHECK-LABEL: func.func @local_window
// CHECK: %[[W:.+]] = tcc.constant {value = dense<{{\[}}[0.000000e+00, -3.000000e+04, -3.000000e+04], [0.000000e+00, 0.000000e+00, -3.000000e+04], [-3.000000e+04, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32>}
// CHECK: %[[W4:.+]] = tcc.reshape %[[W]] {shape = array<i64: 1, 1, 3, 3>}
// CHECK: tcc.attention %arg0, %{{.+}}, %arg2, %[[W4]] {causal = true, scale = 1.000000e+00 : f64}
// CHECK-NOT: tcc.where
func.func @local_window(%q: tensor<2x2x3x4xf32>, %kt: tensor<2x2x4x3xf32>, %v: tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<2x2x3x4xf32>, tensor<2x2x4x3xf32>) -> tensor<2x2x3x3xf32>
  %w = tcc.constant {value = dense<[[[[true, false, false], [true, true, false], [false, true, true]]]]> : tensor<1x1x3x3xi1>} : () -> tensor<1x1x3x3xi1>
  %min = tcc.constant {value = dense<0xFF7FFFFF> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.where %w, %s, %min : (tensor<1x1x3x3xi1>, tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  %m = tcc.constant {value = dense<[[[[0.0, 0xFF7FFFFF, 0xFF7FFFFF], [0.0, 0.0, 0xFF7FFFFF], [0.0, 0.0, 0.0]]], [[[0.0, 0xFF7FFFFF, 0xFF7FFFFF], [0.0, 0.0, 0xFF7FFFFF], [0.0, 0.0, 0.0]]]]> : tensor<2x1x3x3xf32>} : () -> tensor<2x1x3x3xf32>
  %u = tcc.add %t, %m : (tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = tcc.softmax %u : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32>
  return %o : tensor<2x2x3x4xf32>
}

// -----

// Keras MultiHeadAttention as tf2onnx writes it: einsum's batched products
// on [B*H, S, D] views, the scores viewed through a reshape to
// [B, H, Sq, Sk, 1] and a squeeze, the probabilities through an unsqueeze
// and a reshape. The views fuse with the rest.
// CHECK-LABEL: func.func @keras_views
// CHECK: tcc.attention %{{.+}}, %{{.+}}, %{{.+}} {scale = 2.500000e-01 : f64} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>)
// CHECK-NOT: tcc.softmax
func.func @keras_views(%q: tensor<4x8x4xf32>, %kt: tensor<4x4x8xf32>, %v: tensor<4x8x4xf32>) -> tensor<2x2x8x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<4x8x4xf32>, tensor<4x4x8xf32>) -> tensor<4x8x8xf32>
  %s5 = tcc.reshape %s {shape = array<i64: 2, 2, 8, 8, 1>} : (tensor<4x8x8xf32>) -> tensor<2x2x8x8x1xf32>
  %s4 = tcc.squeeze %s5 {axes = array<i64: 4>} : (tensor<2x2x8x8x1xf32>) -> tensor<2x2x8x8xf32>
  %c = tcc.constant {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s4, %c : (tensor<2x2x8x8xf32>, tensor<f32>) -> tensor<2x2x8x8xf32>
  %p = tcc.softmax %t : (tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
  %p5 = tcc.unsqueeze %p {axes = array<i64: 3>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x8x1x8xf32>
  %p3 = tcc.reshape %p5 {shape = array<i64: 4, -1, 8>} : (tensor<2x2x8x1x8xf32>) -> tensor<4x8x8xf32>
  %o = tcc.matmul %p3, %v : (tensor<4x8x8xf32>, tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %o5 = tcc.reshape %o {shape = array<i64: 2, 2, 8, 4, 1>} : (tensor<4x8x4xf32>) -> tensor<2x2x8x4x1xf32>
  %o4 = tcc.squeeze %o5 {axes = array<i64: 4>} : (tensor<2x2x8x4x1xf32>) -> tensor<2x2x8x4xf32>
  return %o4 : tensor<2x2x8x4xf32>
}

// -----

// Falcon's scales: the queries and the transposed keys each multiplied by
// d^-1/4 before the product.
// CHECK-LABEL: func.func @scaled_keys
// CHECK: tcc.attention %arg0, %{{.+}}, %arg2 {causal = true, scale = 2.500000e-01 : f64}
// CHECK-NOT: tcc.mul
func.func @scaled_keys(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x3xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %c = tcc.constant {value = dense<0.5> : tensor<1xf32>} : () -> tensor<1xf32>
  %qs = tcc.mul %q, %c : (tensor<1x2x3x4xf32>, tensor<1xf32>) -> tensor<1x2x3x4xf32>
  %ks = tcc.mul %kt, %c : (tensor<1x2x4x3xf32>, tensor<1xf32>) -> tensor<1x2x4x3xf32>
  %s = tcc.matmul %qs, %ks : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %mask = tcc.constant {value = dense<[[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>} : () -> tensor<3x3xi1>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %u = tcc.where %mask, %ninf, %s : (tensor<3x3xi1>, tensor<f32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Keras' masked softmax with a fixed causal mask (use_causal_mask, folded
// by tf2onnx): scores * k + m, k 1 on and below the diagonal and 0 above,
// m 0 where k is 1 and -1e9 where it is 0. That is the causal flag.
// CHECK-LABEL: func.func @keras_causal
// CHECK: tcc.attention %arg0, %{{.+}}, %arg2 {causal = true, scale = 1.000000e+00 : f64}
// CHECK-NOT: tcc.mul
// CHECK-NOT: tcc.add
func.func @keras_causal(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x3xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %k = tcc.constant {value = dense<[[[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]]]> : tensor<1x2x3x3xf32>} : () -> tensor<1x2x3x3xf32>
  %m = tcc.constant {value = dense<[[[[-0.0, -1.0e9, -1.0e9], [-0.0, -0.0, -1.0e9], [-0.0, -0.0, -0.0]], [[-0.0, -1.0e9, -1.0e9], [-0.0, -0.0, -1.0e9], [-0.0, -0.0, -0.0]]]]> : tensor<1x2x3x3xf32>} : () -> tensor<1x2x3x3xf32>
  %t = tcc.mul %k, %s : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %u = tcc.add %t, %m : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Left alone: Keras' masked softmax with a mask computed from an input
// (padded queries hide every key: a bias cannot say that).
// CHECK-LABEL: func.func @keras_input_mask
// CHECK-NOT: tcc.attention
// CHECK: tcc.softmax
func.func @keras_input_mask(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>, %keep: tensor<1x1x3x3xi1> {tcc.input = "keep"}) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %k = tcc.cast %keep {to = f32} : (tensor<1x1x3x3xi1>) -> tensor<1x1x3x3xf32>
  %h = tcc.not %keep : (tensor<1x1x3x3xi1>) -> tensor<1x1x3x3xi1>
  %hf = tcc.cast %h {to = f32} : (tensor<1x1x3x3xi1>) -> tensor<1x1x3x3xf32>
  %c = tcc.constant {value = dense<-1.0e9> : tensor<f32>} : () -> tensor<f32>
  %m = tcc.mul %c, %hf : (tensor<f32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %t = tcc.mul %k, %s : (tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %u = tcc.add %t, %m : (tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %u : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// Keras' mixed_float16 policy: float16 products, the softmax in float32
// between two casts. The op runs in float16 (its kernels compute the
// scores and probabilities in float32).
// CHECK-LABEL: func.func @softmax_in_f32
// CHECK: tcc.attention %arg0, %{{.+}}, %arg2 {scale = 1.250000e-01 : f64} : (tensor<1x2x3x4xf16>, tensor<1x2x3x4xf16>, tensor<1x2x3x4xf16>) -> (tensor<1x2x3x4xf16>, tensor<1x2x3xf16>)
// CHECK-NOT: tcc.cast
func.func @softmax_in_f32(%q: tensor<1x2x3x4xf16>, %kt: tensor<1x2x4x3xf16>, %v: tensor<1x2x3x4xf16>) -> tensor<1x2x3x4xf16> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf16>, tensor<1x2x4x3xf16>) -> tensor<1x2x3x3xf16>
  %s32 = tcc.cast %s {to = f32} : (tensor<1x2x3x3xf16>) -> tensor<1x2x3x3xf32>
  %c = tcc.constant {value = dense<0.125> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s32, %c : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %p = tcc.softmax %t : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %p16 = tcc.cast %p {to = f16} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf16>
  %o = tcc.matmul %p16, %v : (tensor<1x2x3x3xf16>, tensor<1x2x3x4xf16>) -> tensor<1x2x3x4xf16>
  return %o : tensor<1x2x3x4xf16>
}

// -----

// Gemma-2's soft cap: the scaled scores divided by the cap, tanh, times the
// cap, then the causal mask. The op's softcap is the scales after the tanh,
// its scale all of them (0.25 / 50 * 50).
// CHECK-LABEL: func.func @softcap
// CHECK: tcc.attention %arg0, %{{.+}}, %arg2 {causal = true, scale = 2.500000e-01 : f64, softcap = 5.000000e+01 : f64}
// CHECK-NOT: tcc.tanh
func.func @softcap(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x3xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %c = tcc.constant {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %cap = tcc.constant {value = dense<50.0> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.mul %s, %c : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %u = tcc.div %t, %cap : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %w = tcc.tanh %u : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %x = tcc.mul %w, %cap : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %m = tcc.constant {value = dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %y = tcc.add %x, %m : (tensor<1x2x3x3xf32>, tensor<3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = tcc.softmax %y : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Left alone: a mask inside the tanh (capped with the scores) is not the
// op's bias, and a second tanh is not a soft cap.
// CHECK-LABEL: func.func @mask_inside_cap
// CHECK-NOT: tcc.attention
// CHECK: tcc.tanh
func.func @mask_inside_cap(%q: tensor<1x1x3x4xf32>, %kt: tensor<1x1x4x3xf32>, %v: tensor<1x1x3x4xf32>, %b: tensor<1x1x1x3xf32> {tcc.input = "b"}) -> tensor<1x1x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf32>, tensor<1x1x4x3xf32>) -> tensor<1x1x3x3xf32>
  %t = tcc.add %s, %b : (tensor<1x1x3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x1x3x3xf32>
  %w = tcc.tanh %t : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %w : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x4xf32>) -> tensor<1x1x3x4xf32>
  return %o : tensor<1x1x3x4xf32>
}

// -----

// Left alone: each mask keeps a key of every query, but together they hide
// both of query 0's (the window keeps key 1, the causal mask hides it). The
// masks replace the scores, so that row is uniform over the fills, which
// the op's bias and causal flag cannot give.
// CHECK-LABEL: func.func @masks_hide_a_row_together
// CHECK-NOT: tcc.attention
// CHECK: tcc.softmax
func.func @masks_hide_a_row_together(%q: tensor<1x1x2x4xf32>, %kt: tensor<1x1x4x2xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %w = tcc.constant {value = dense<[[false, true], [false, true]]> : tensor<2x2xi1>} : () -> tensor<2x2xi1>
  %tril = tcc.constant {value = dense<[[true, false], [true, true]]> : tensor<2x2xi1>} : () -> tensor<2x2xi1>
  %fill = tcc.constant {value = dense<-1.0e9> : tensor<f32>} : () -> tensor<f32>
  %t = tcc.where %w, %s, %fill : (tensor<2x2xi1>, tensor<1x1x2x2xf32>, tensor<f32>) -> tensor<1x1x2x2xf32>
  %u = tcc.where %tril, %t, %fill : (tensor<2x2xi1>, tensor<1x1x2x2xf32>, tensor<f32>) -> tensor<1x1x2x2xf32>
  %p = tcc.softmax %u : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o = tcc.matmul %p, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}

// -----

// Left alone: a float32 mask added to fp16 scores cast up for the softmax
// would be read in fp16, where -1e9 is -inf.
// CHECK-LABEL: func.func @f32_bias_on_f16_scores
// CHECK-NOT: tcc.attention
func.func @f32_bias_on_f16_scores(%q: tensor<1x1x3x4xf16>, %kt: tensor<1x1x4x3xf16>, %v: tensor<1x1x3x4xf16>, %m: tensor<1x1x1x3xf32> {tcc.input = "m"}) -> tensor<1x1x3x4xf16> {
  %s = tcc.matmul %q, %kt : (tensor<1x1x3x4xf16>, tensor<1x1x4x3xf16>) -> tensor<1x1x3x3xf16>
  %s32 = tcc.cast %s {to = f32} : (tensor<1x1x3x3xf16>) -> tensor<1x1x3x3xf32>
  %t = tcc.add %s32, %m : (tensor<1x1x3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x1x3x3xf32>
  %p = tcc.softmax %t : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %p16 = tcc.cast %p {to = f16} : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf16>
  %o = tcc.matmul %p16, %v : (tensor<1x1x3x3xf16>, tensor<1x1x3x4xf16>) -> tensor<1x1x3x4xf16>
  return %o : tensor<1x1x3x4xf16>
}
