// RUN: tcc-opt %s --split-input-file --tcc-chunk-loss="chunk-rows=8" | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-chunk-loss="max-chunk-elements=40" | FileCheck %s --check-prefix=AUTO
// RUN: tcc-opt %s --split-input-file --tcc-chunk-loss | FileCheck %s --check-prefix=SMALL

// An output projection, a mean loss and both backward GEMMs (the weight's
// gradient transposed, as tcc-build-backward makes it), 16 rows in chunks of
// 8: the labels that count are counted once, each chunk's loss is a sum
// seeded with seed / count, the input gradient is the chunks' rows
// concatenated, the weight gradient the sum of the chunks' [V, E] terms.
// CHECK-LABEL: func.func @lm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x8x4xf32>, %[[W:[a-z0-9]+]]: tensor<6x4xf32>, %[[L:[a-z0-9]+]]: tensor<16xi64>, %[[SEED:[a-z0-9]+]]: tensor<f32>)
// CHECK: %[[WT:.+]] = tcc.transpose %[[W]]
// CHECK: %[[X2:.+]] = tcc.reshape %[[X]] {shape = array<i64: 16, 4>}
// CHECK: %[[IGN:.+]] = tcc.constant {value = dense<-100> : tensor<i64>}
// CHECK: %[[EQ:.+]] = tcc.equal %[[L]], %[[IGN]]
// CHECK: %[[NE:.+]] = tcc.not %[[EQ]]
// CHECK: %[[NEF:.+]] = tcc.cast %[[NE]] {to = f32}
// CHECK: %[[COUNT:.+]] = tcc.reduce_sum %[[NEF]] {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<16xf32>) -> tensor<f32>
// CHECK: %[[CSEED:.+]] = tcc.div %[[SEED]], %[[COUNT]]
// CHECK: %[[X0:.+]] = tcc.slice %[[X2]] {axes = array<i64: 0>, ends = array<i64: 8>, starts = array<i64: 0>} : (tensor<16x4xf32>) -> tensor<8x4xf32>
// CHECK: %[[S0:.+]] = tcc.matmul %[[X0]], %[[WT]] : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
// CHECK: %[[L0:.+]] = tcc.slice %[[L]] {axes = array<i64: 0>, ends = array<i64: 8>, starts = array<i64: 0>}
// CHECK: %[[LOSS0:.+]], %[[D0:.+]] = tcc.softmax_cross_entropy_loss_with_grad %[[S0]], %[[L0]], %[[CSEED]] {ignore_index = -100 : i64, reduction = "sum"}
// CHECK: %[[Y0:.+]] = tcc.slice %[[X2]] {axes = array<i64: 0>, ends = array<i64: 8>, starts = array<i64: 0>}
// CHECK: %[[D0T:.+]] = tcc.transpose %[[D0]] {perm = array<i64: 1, 0>} : (tensor<8x6xf32>) -> tensor<6x8xf32>
// CHECK: %[[T0:.+]] = tcc.matmul %[[D0T]], %[[Y0]] : (tensor<6x8xf32>, tensor<8x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[R0:.+]] = tcc.matmul %[[D0]], %[[W]] : (tensor<8x6xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
// CHECK: tcc.slice %[[X2]] {axes = array<i64: 0>, ends = array<i64: 16>, starts = array<i64: 8>}
// CHECK: %[[LOSS1:.+]], %[[D1:.+]] = tcc.softmax_cross_entropy_loss_with_grad
// CHECK: %[[T1:.+]] = tcc.matmul
// CHECK: %[[DW:.+]] = tcc.add %[[T0]], %[[T1]] : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[R1:.+]] = tcc.matmul %[[D1]], %[[W]]
// CHECK: %[[SUM:.+]] = tcc.add %[[LOSS0]], %[[LOSS1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[CAT:.+]] = tcc.concat %[[R0]], %[[R1]] {axis = 0 : i64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
// CHECK: %[[DX:.+]] = tcc.reshape %[[CAT]] {shape = array<i64: 2, 8, 4>}
// CHECK: %[[LOSS:.+]] = tcc.div %[[SUM]], %[[COUNT]]
// CHECK-NOT: tcc.softmax_cross_entropy_loss_with_grad
// CHECK-NOT: tcc.reshape
// CHECK: return %[[LOSS]], %[[DX]], %[[DW]]
// Without chunk-rows: 96 logits at most 40 per chunk is 3 chunks of 6 rows,
// rounded up to 8.
// AUTO-LABEL: func.func @lm
// AUTO-COUNT-2: tcc.softmax_cross_entropy_loss_with_grad
// AUTO-NOT: tcc.softmax_cross_entropy_loss_with_grad
// The default (64M logits a chunk) leaves small logits whole.
// SMALL-LABEL: func.func @lm
// SMALL-COUNT-1: tcc.softmax_cross_entropy_loss_with_grad
// SMALL-NOT: tcc.slice
func.func @lm(%x: tensor<2x8x4xf32>, %w: tensor<6x4xf32>, %l: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<2x8x4xf32>, tensor<6x4xf32>) {
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %s3 = tcc.matmul %x, %wt : (tensor<2x8x4xf32>, tensor<4x6xf32>) -> tensor<2x8x6xf32>
  %s = tcc.reshape %s3 {shape = array<i64: -1, 6>} : (tensor<2x8x6xf32>) -> tensor<16x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed {ignore_index = -100 : i64} : (tensor<16x6xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>)
  %d3 = tcc.reshape %d {shape = array<i64: 2, 8, 6>} : (tensor<16x6xf32>) -> tensor<2x8x6xf32>
  %dx = tcc.matmul %d3, %w : (tensor<2x8x6xf32>, tensor<6x4xf32>) -> tensor<2x8x4xf32>
  %x2 = tcc.reshape %x {shape = array<i64: 16, 4>} : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
  %xt = tcc.transpose %x2 {perm = array<i64: 1, 0>} : (tensor<16x4xf32>) -> tensor<4x16xf32>
  %dwt = tcc.matmul %xt, %d : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
  %dw = tcc.transpose %dwt {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  return %loss, %dx, %dw : tensor<f32>, tensor<2x8x4xf32>, tensor<6x4xf32>
}

// -----

// Reduction "sum" without an ignore index: the seed is used as it is and
// nothing is counted; 20 rows in chunks of 8, 8 and 4; the weight gradient
// [E, V] = x^T d is summed as it is (no transpose to fold).
// CHECK-LABEL: func.func @sum
// AUTO-LABEL: func.func @sum
// CHECK-SAME: %[[SEED:[a-z0-9]+]]: tensor<f32>)
// CHECK-NOT: tcc.div
// CHECK: tcc.softmax_cross_entropy_loss_with_grad %{{.+}}, %{{.+}}, %[[SEED]] {reduction = "sum"} : (tensor<8x6xf32>
// CHECK: tcc.matmul %{{.+}}, %{{.+}} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
// CHECK: tcc.softmax_cross_entropy_loss_with_grad %{{.+}}, %{{.+}}, %[[SEED]] {reduction = "sum"} : (tensor<8x6xf32>
// CHECK: tcc.slice %{{.+}} {axes = array<i64: 0>, ends = array<i64: 20>, starts = array<i64: 16>}
// CHECK: tcc.softmax_cross_entropy_loss_with_grad %{{.+}}, %{{.+}}, %[[SEED]] {reduction = "sum"} : (tensor<4x6xf32>
// CHECK: tcc.matmul %{{.+}}, %{{.+}} : (tensor<4x4xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK: %[[LOSS:.+]] = tcc.add %{{.+}}, %{{.+}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NOT: tcc.div
// CHECK: return %[[LOSS]]
func.func @sum(%x: tensor<20x4xf32>, %w: tensor<4x6xf32>, %l: tensor<20xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<4x6xf32>) {
  %s = tcc.matmul %x, %w : (tensor<20x4xf32>, tensor<4x6xf32>) -> tensor<20x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed {reduction = "sum"} : (tensor<20x6xf32>, tensor<20xi64>, tensor<f32>) -> (tensor<f32>, tensor<20x6xf32>)
  %xt = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<20x4xf32>) -> tensor<4x20xf32>
  %dw = tcc.matmul %xt, %d : (tensor<4x20xf32>, tensor<20x6xf32>) -> tensor<4x6xf32>
  return %loss, %dw : tensor<f32>, tensor<4x6xf32>
}

// -----

// An untied output projection: the backward pass makes W^T after the loss;
// the chunks make it once, before them.
// CHECK-LABEL: func.func @untied
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x6xf32>
// CHECK: %[[WT:.+]] = tcc.transpose %[[W]] {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
// CHECK: tcc.softmax_cross_entropy_loss_with_grad
// CHECK: tcc.matmul %{{.+}}, %[[WT]] : (tensor<8x6xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
// CHECK: tcc.softmax_cross_entropy_loss_with_grad
// CHECK: tcc.matmul %{{.+}}, %[[WT]] : (tensor<8x6xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
// CHECK: tcc.concat
// CHECK-NOT: tcc.transpose
// CHECK: return
func.func @untied(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %l: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<16x4xf32>) {
  %s = tcc.matmul %x, %w : (tensor<16x4xf32>, tensor<4x6xf32>) -> tensor<16x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed : (tensor<16x6xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>)
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %dx = tcc.matmul %d, %wt : (tensor<16x6xf32>, tensor<6x4xf32>) -> tensor<16x4xf32>
  return %loss, %dx : tensor<f32>, tensor<16x4xf32>
}

// -----

// Left alone: the gradient has a reader that is not a GEMM; class weights;
// the scores are read elsewhere.
// CHECK-LABEL: func.func @other_reader
// CHECK-NOT: tcc.slice
// CHECK: tcc.softmax_cross_entropy_loss_with_grad %{{.+}} : (tensor<16x6xf32>
func.func @other_reader(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %l: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>) {
  %s = tcc.matmul %x, %w : (tensor<16x4xf32>, tensor<4x6xf32>) -> tensor<16x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed : (tensor<16x6xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>)
  %e = tcc.exp %d : (tensor<16x6xf32>) -> tensor<16x6xf32>
  return %loss, %e : tensor<f32>, tensor<16x6xf32>
}

// -----

// CHECK-LABEL: func.func @weighted
// CHECK-NOT: tcc.slice
func.func @weighted(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %l: tensor<16xi64>, %seed: tensor<f32>, %cw: tensor<6xf32>) -> (tensor<f32>, tensor<16x4xf32>) {
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %s = tcc.matmul %x, %w : (tensor<16x4xf32>, tensor<4x6xf32>) -> tensor<16x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed, %cw : (tensor<16x6xf32>, tensor<16xi64>, tensor<f32>, tensor<6xf32>) -> (tensor<f32>, tensor<16x6xf32>)
  %dx = tcc.matmul %d, %wt : (tensor<16x6xf32>, tensor<6x4xf32>) -> tensor<16x4xf32>
  return %loss, %dx : tensor<f32>, tensor<16x4xf32>
}

// -----

// CHECK-LABEL: func.func @scores_read
// CHECK-NOT: tcc.slice
func.func @scores_read(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %l: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>, tensor<16x4xf32>) {
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %s = tcc.matmul %x, %w : (tensor<16x4xf32>, tensor<4x6xf32>) -> tensor<16x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed : (tensor<16x6xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>)
  %dx = tcc.matmul %d, %wt : (tensor<16x6xf32>, tensor<6x4xf32>) -> tensor<16x4xf32>
  return %loss, %s, %dx : tensor<f32>, tensor<16x6xf32>, tensor<16x4xf32>
}

// -----

// An output projection with a bias (nn.Linear's, as BERT's MLM head has),
// [2, 8, 6] before the view to [16, 6]: each chunk adds the bias to its
// product, and the bias gradient (the gradient summed over its rows, [1, 1,
// 6] viewed as [6]) is the sum of the chunks' row sums.
// CHECK-LABEL: func.func @bias
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<6xf32>
// CHECK: %[[P0:.+]] = tcc.matmul %{{.+}}, %{{.+}} : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
// CHECK: %[[S0:.+]] = tcc.add %[[B]], %[[P0]] : (tensor<6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
// CHECK: %{{.+}}, %[[D0:.+]] = tcc.softmax_cross_entropy_loss_with_grad %[[S0]]
// CHECK: %[[G0:.+]] = tcc.reduce_sum %[[D0]] {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<8x6xf32>) -> tensor<6xf32>
// CHECK: %[[P1:.+]] = tcc.matmul
// CHECK: %[[S1:.+]] = tcc.add %[[B]], %[[P1]]
// CHECK: %{{.+}}, %[[D1:.+]] = tcc.softmax_cross_entropy_loss_with_grad %[[S1]]
// CHECK: %[[G1:.+]] = tcc.reduce_sum %[[D1]] {axes = array<i64: 0>, keepdims = 0 : i64}
// CHECK: %[[DB:.+]] = tcc.add %[[G0]], %[[G1]] : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
// CHECK-NOT: tcc.softmax_cross_entropy_loss_with_grad
// CHECK: return %{{.+}}, %{{.+}}, %[[DB]]
func.func @bias(%x: tensor<2x8x4xf32>, %w: tensor<4x6xf32>, %b: tensor<6xf32>, %l: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<4x6xf32>, tensor<6xf32>) {
  %p = tcc.matmul %x, %w : (tensor<2x8x4xf32>, tensor<4x6xf32>) -> tensor<2x8x6xf32>
  %s3 = tcc.add %b, %p : (tensor<6xf32>, tensor<2x8x6xf32>) -> tensor<2x8x6xf32>
  %s = tcc.reshape %s3 {shape = array<i64: 16, 6>} : (tensor<2x8x6xf32>) -> tensor<16x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed {reduction = "sum"} : (tensor<16x6xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x6xf32>)
  %d3 = tcc.reshape %d {shape = array<i64: 2, 8, 6>} : (tensor<16x6xf32>) -> tensor<2x8x6xf32>
  %db3 = tcc.reduce_sum %d3 {axes = array<i64: 0, 1>} : (tensor<2x8x6xf32>) -> tensor<1x1x6xf32>
  %db = tcc.reshape %db3 {shape = array<i64: 6>} : (tensor<1x1x6xf32>) -> tensor<6xf32>
  %x2 = tcc.reshape %x {shape = array<i64: 16, 4>} : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
  %xt = tcc.transpose %x2 {perm = array<i64: 1, 0>} : (tensor<16x4xf32>) -> tensor<4x16xf32>
  %dw = tcc.matmul %xt, %d : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
  return %loss, %dw, %db : tensor<f32>, tensor<4x6xf32>, tensor<6xf32>
}

// -----

// A sum of the gradient over its classes is not the bias's gradient: the
// loss stays whole.
// CHECK-LABEL: func.func @bias_other_sum
// CHECK-COUNT-1: tcc.softmax_cross_entropy_loss_with_grad
// CHECK-NOT: tcc.slice
func.func @bias_other_sum(%x: tensor<6x4xf32>, %w: tensor<4x6xf32>, %b: tensor<6xf32>, %l: tensor<6xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<6xf32>) {
  %p = tcc.matmul %x, %w : (tensor<6x4xf32>, tensor<4x6xf32>) -> tensor<6x6xf32>
  %s = tcc.add %p, %b : (tensor<6x6xf32>, tensor<6xf32>) -> tensor<6x6xf32>
  %loss, %d = tcc.softmax_cross_entropy_loss_with_grad %s, %l, %seed {reduction = "sum"} : (tensor<6x6xf32>, tensor<6xi64>, tensor<f32>) -> (tensor<f32>, tensor<6x6xf32>)
  %r = tcc.reduce_sum %d {axes = array<i64: 1>, keepdims = 0 : i64} : (tensor<6x6xf32>) -> tensor<6xf32>
  return %loss, %r : tensor<f32>, tensor<6xf32>
}
