// RUN: tcc-opt %s --split-input-file --tcc-pad-gemms="min-gflops=0" | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-pad-gemms | FileCheck %s --check-prefix=DEFAULT

// An output projection onto a vocabulary of 65 (GPT-2's 50257 in small):
// the weight is padded to 72 rows before its transpose, which tcc-fuse still
// folds into the GEMM, and the logits are sliced back to 65 columns.
// CHECK-LABEL: func.func @logits
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<16x32xf32>, %[[W:[a-z0-9]+]]: tensor<65x32xf32>)
// CHECK-NOT: tcc.transpose %[[W]]
// CHECK: %[[WP:.+]] = tcc.slice_grad %[[W]] {axes = array<i64: 0>, ends = array<i64: 65>, shape = array<i64: 72, 32>, starts = array<i64: 0>} : (tensor<65x32xf32>) -> tensor<72x32xf32>
// CHECK: %[[WT:.+]] = tcc.transpose %[[WP]] {perm = array<i64: 1, 0>} : (tensor<72x32xf32>) -> tensor<32x72xf32>
// CHECK: %[[Y:.+]] = tcc.matmul %[[X]], %[[WT]] : (tensor<16x32xf32>, tensor<32x72xf32>) -> tensor<16x72xf32>
// CHECK: %[[S:.+]] = tcc.slice %[[Y]] {axes = array<i64: 0, 1>, ends = array<i64: 16, 65>, starts = array<i64: 0, 0>} : (tensor<16x72xf32>) -> tensor<16x65xf32>
// CHECK: return %[[S]]
// Under 1 GFLOP (the default threshold) nothing changes.
// DEFAULT-LABEL: func.func @logits
// DEFAULT-NOT: tcc.slice
// DEFAULT: tcc.matmul %{{.+}}, %{{.+}} : (tensor<16x32xf32>, tensor<32x65xf32>) -> tensor<16x65xf32>
func.func @logits(%x: tensor<16x32xf32>, %w: tensor<65x32xf32>) -> tensor<16x65xf32> {
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<65x32xf32>) -> tensor<32x65xf32>
  %y = tcc.matmul %x, %wt : (tensor<16x32xf32>, tensor<32x65xf32>) -> tensor<16x65xf32>
  return %y : tensor<16x65xf32>
}

// -----

// The input gradient reduces over the vocabulary (K = 65): both operands are
// padded with zeros along K and the result needs no slice.
// CHECK-LABEL: func.func @input_grad
// CHECK: %[[G:.+]] = tcc.slice_grad %arg0 {axes = array<i64: 2>, ends = array<i64: 65>, shape = array<i64: 2, 8, 72>, starts = array<i64: 0>} : (tensor<2x8x65xf32>) -> tensor<2x8x72xf32>
// CHECK: %[[W:.+]] = tcc.slice_grad %arg1 {axes = array<i64: 0>, ends = array<i64: 65>, shape = array<i64: 72, 32>, starts = array<i64: 0>} : (tensor<65x32xf32>) -> tensor<72x32xf32>
// CHECK: %[[Y:.+]] = tcc.matmul %[[G]], %[[W]] : (tensor<2x8x72xf32>, tensor<72x32xf32>) -> tensor<2x8x32xf32>
// CHECK-NOT: tcc.slice
// CHECK: return %[[Y]]
func.func @input_grad(%g: tensor<2x8x65xf32>, %w: tensor<65x32xf32>) -> tensor<2x8x32xf32> {
  %y = tcc.matmul %g, %w : (tensor<2x8x65xf32>, tensor<65x32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

// The weight gradient reads the logits' gradient transposed: its stored rows
// are M = 65 long, so M is padded (before the transpose) and the result's
// rows sliced back.
// CHECK-LABEL: func.func @weight_grad
// CHECK-NOT: tcc.transpose %arg0
// CHECK: %[[GP:.+]] = tcc.slice_grad %arg0 {axes = array<i64: 1>, ends = array<i64: 65>, shape = array<i64: 16, 72>, starts = array<i64: 0>} : (tensor<16x65xf32>) -> tensor<16x72xf32>
// CHECK: %[[GT:.+]] = tcc.transpose %[[GP]] {perm = array<i64: 1, 0>} : (tensor<16x72xf32>) -> tensor<72x16xf32>
// CHECK: %[[Y:.+]] = tcc.matmul %[[GT]], %arg1 : (tensor<72x16xf32>, tensor<16x32xf32>) -> tensor<72x32xf32>
// CHECK: tcc.slice %[[Y]] {axes = array<i64: 0, 1>, ends = array<i64: 65, 32>, starts = array<i64: 0, 0>} : (tensor<72x32xf32>) -> tensor<65x32xf32>
func.func @weight_grad(%g: tensor<16x65xf32>, %x: tensor<16x32xf32>) -> tensor<65x32xf32> {
  %gt = tcc.transpose %g {perm = array<i64: 1, 0>} : (tensor<16x65xf32>) -> tensor<65x16xf32>
  %y = tcc.matmul %gt, %x : (tensor<65x16xf32>, tensor<16x32xf32>) -> tensor<65x32xf32>
  return %y : tensor<65x32xf32>
}

// -----

// Aligned GEMMs, a GEMV and an M that only a plain (row-major) A has are
// left alone.
// CHECK-LABEL: func.func @aligned
// CHECK-NOT: tcc.slice
// CHECK: tcc.matmul %arg0, %arg1 : (tensor<13x32xf32>, tensor<32x64xf32>) -> tensor<13x64xf32>
// CHECK: tcc.matmul %arg2, %arg1 : (tensor<32xf32>, tensor<32x64xf32>) -> tensor<64xf32>
func.func @aligned(%a: tensor<13x32xf32>, %b: tensor<32x64xf32>, %v: tensor<32xf32>) -> (tensor<13x64xf32>, tensor<64xf32>) {
  %y = tcc.matmul %a, %b : (tensor<13x32xf32>, tensor<32x64xf32>) -> tensor<13x64xf32>
  %z = tcc.matmul %v, %b : (tensor<32xf32>, tensor<32x64xf32>) -> tensor<64xf32>
  return %y, %z : tensor<13x64xf32>, tensor<64xf32>
}

// -----

// A weight's gradient, which an unpadded GEMM would add into its fp32
// accumulator in place: M (65, read transposed) and K (13) are padded in one
// copy before the transpose, and the product is sliced back (rounded to fp16
// before the accumulation, as under PyTorch's autocast).
// CHECK-LABEL: func.func @in_place_weight_grad
// CHECK: %[[XP:.+]] = tcc.slice_grad %arg0 {axes = array<i64: 0, 1>, ends = array<i64: 13, 65>, shape = array<i64: 16, 72>, starts = array<i64: 0, 0>} : (tensor<13x65xf32>) -> tensor<16x72xf32>
// CHECK: %[[XT:.+]] = tcc.transpose %[[XP]] {perm = array<i64: 1, 0>} : (tensor<16x72xf32>) -> tensor<72x16xf32>
// CHECK: %[[GP:.+]] = tcc.slice_grad %arg1 {{.*}} : (tensor<13x8xf32>) -> tensor<16x8xf32>
// CHECK: %[[W:.+]] = tcc.matmul %[[XT]], %[[GP]] : (tensor<72x16xf32>, tensor<16x8xf32>) -> tensor<72x8xf32>
// CHECK: %[[S:.+]] = tcc.slice %[[W]] {{.*}} : (tensor<72x8xf32>) -> tensor<65x8xf32>
// CHECK-NEXT: return %[[S]]
func.func @in_place_weight_grad(%x: tensor<13x65xf32> {tcc.input = "x"}, %g: tensor<13x8xf32> {tcc.input = "g"})
    -> (tensor<65x8xf32> {tcc.grad = "w"}) {
  %xt = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<13x65xf32>) -> tensor<65x13xf32>
  %w = tcc.matmul %xt, %g : (tensor<65x13xf32>, tensor<13x8xf32>) -> tensor<65x8xf32>
  return %w : tensor<65x8xf32>
}

// -----

// K and M of one transposed operand are padded by one copy (two axes), and
// a transpose that is both operands is replaced once.
// CHECK-LABEL: func.func @both_dims
// CHECK: %[[P:.+]] = tcc.slice_grad %arg0 {axes = array<i64: 0, 1>, ends = array<i64: 13, 13>, shape = array<i64: 16, 16>, starts = array<i64: 0, 0>} : (tensor<13x13xf32>) -> tensor<16x16xf32>
// CHECK-NOT: tcc.slice_grad
// CHECK: %[[T:.+]] = tcc.transpose %[[P]]
// CHECK: tcc.matmul
// CHECK: tcc.slice
func.func @both_dims(%x: tensor<13x13xf32>) -> tensor<13x13xf32> {
  %t = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<13x13xf32>) -> tensor<13x13xf32>
  %y = tcc.matmul %t, %t : (tensor<13x13xf32>, tensor<13x13xf32>) -> tensor<13x13xf32>
  return %y : tensor<13x13xf32>
}
