// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cpu" --tcc-plan-memory --tcc-lower-to-kernels | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cpu" --tcc-fuse --tcc-plan-memory --tcc-lower-to-kernels --mlir-print-local-scope | FileCheck %s --check-prefix=FUSED
// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cuda" --tcc-plan-memory --tcc-lower-to-kernels | FileCheck %s --check-prefix=CUDA
// RUN: tcc-opt %s --split-input-file --tcc-set-target="target=cuda" --tcc-fuse --tcc-plan-memory --tcc-lower-to-kernels --mlir-print-local-scope | FileCheck %s --check-prefix=CUDA-FUSED
// tcc-lower-to-kernels, per pattern family: each value's kernel writes a
// view at its planned offset; library ops get their options resolved
// (softmax's axis -1 is 1, a reduce's axes a mask, a slice's negative start
// counted from the end); a reshape is an alias; each gradient is added
// into its slot right after the kernel that makes it; the loss is stored
// into its slot at the end; every op that runs code has a mark.
//
// On CUDA each buffer's element type is its storage type: fp16 working
// copies of the arguments that have one, fp16 activations, fp32 for what
// keepsF32 names (reductions, the loss, scalars and what derives from the
// fp32 seed); a weight's gradient is a GEMM that adds into its fp32
// accumulator, a bias's a reduce that does, each followed by the
// all-reduce's hand-off (tcck.grad_ready), with no tcck.accumulate. An
// argument read as its fp16 working copy says that its slot holds the fp32
// master (tcck.slot).
// CUDA-LABEL: func.func @micro_step
// CUDA-SAME: (%[[W:.*]]: memref<4x8xf16> {tcc.param = "w", tcck.slot = f32}, %[[B:.*]]: memref<8xf16> {tcc.param = "b", tcck.slot = f32}, %[[X:.*]]: memref<2x4xf16> {tcc.input = "x", tcck.slot = f32}, %[[SEED:.*]]: memref<f32> {tcc.loss_seed})
// CUDA-SAME: -> (memref<f32> {tcc.output = "loss"}, memref<4x8xf32> {tcc.grad = "w"}, memref<8xf32> {tcc.grad = "b"})
// CUDA: tcck.seed %[[SEED]] : memref<f32>
// CUDA: tcck.matmul outs(%{{.*}} : memref<2x8xf16>) ins(%[[X]], %[[W]] : memref<2x4xf16>, memref<4x8xf16>)
// CUDA: tcck.call reduce outs(%{{.*}} : memref<f32>) ins(%{{.*}} : memref<16xf16>) {mask = 1 : i64, mean = false}
// CUDA: %[[SEEDS:.*]] = tcck.view {{.*}} : memref<2x8xf32>
// CUDA-NEXT: tcck.call broadcast_to outs(%[[SEEDS]] : memref<2x8xf32>) ins(%[[SEED]] : memref<f32>)
// CUDA: %[[GW:.*]] = tcck.view 192 : memref<4x8xf32>
// CUDA-NEXT: tcck.matmul outs(%[[GW]] : memref<4x8xf32>) ins(%{{.*}}, %[[SEEDS]] : memref<4x2xf16>, memref<2x8xf32>) {accumulate, trans_lhs = false, trans_rhs = false}
// CUDA-NEXT: tcck.grad_ready slot 192 elements 32
// CUDA-NEXT: tcck.mark "tcc.matmul"
// CUDA: %[[GB:.*]] = tcck.view 576 : memref<8xf32>
// CUDA-NEXT: tcck.call reduce outs(%[[GB]] : memref<8xf32>) ins(%[[SEEDS]] : memref<2x8xf32>) {accumulate, mask = 1 : i64, mean = false}
// CUDA-NEXT: tcck.grad_ready slot 576 elements 8
// CUDA-NOT: tcck.accumulate
// CUDA: tcck.store %{{.*}} to slot {{[0-9]+}} : memref<f32>
// CUDA-NEXT: return %{{.*}}, %[[GW]], %[[GB]] : memref<f32>, memref<4x8xf32>, memref<8xf32>
// A row statistic is fp32, and the fp16 loop reads it.
// CUDA-LABEL: func.func @loop
// CUDA: tcck.call reduce outs(%[[MEAN:.*]] : memref<4x1xf32>) ins(%{{.*}} : memref<4x8xf16>) {mask = 2 : i64, mean = true}
// CUDA: tcck.ew "Sub" %{{.*}}, %{{.*}}, %[[MEAN]] : memref<4x8xf16>, memref<4x8xf16>, memref<4x1xf32>

// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[W:.*]]: memref<4x8xf32> {tcc.param = "w"}, %[[B:.*]]: memref<8xf32> {tcc.param = "b"}, %[[X:.*]]: memref<2x4xf32> {tcc.input = "x"}, %[[SEED:.*]]: memref<f32> {tcc.loss_seed})
// CHECK-NEXT: tcck.seed %[[SEED]] : memref<f32>
// CHECK-NEXT: %[[MM:.*]] = tcck.view 960 : memref<2x8xf32>
// CHECK-NEXT: tcck.matmul outs(%[[MM]] : memref<2x8xf32>) ins(%[[X]], %[[W]] : memref<2x4xf32>, memref<4x8xf32>) {trans_lhs = false, trans_rhs = false}
// Each mark names the buffers its op read and wrote (the step's value table,
// tcc-run --check-numerics).
// CHECK-NEXT: tcck.mark "tcc.matmul" live 1024 ins(%[[X]], %[[W]] : memref<2x4xf32>, memref<4x8xf32>) outs(%[[MM]] : memref<2x8xf32>)
// CHECK-NEXT: %[[ADD:.*]] = tcck.view 1024 : memref<2x8xf32>
// CHECK-NEXT: tcck.ew "Add" %[[ADD]], %[[MM]], %[[B]] : memref<2x8xf32>, memref<2x8xf32>, memref<8xf32>
// CHECK-NEXT: tcck.mark "tcc.add" live 1088 ins(%[[MM]], %[[B]] : memref<2x8xf32>, memref<8xf32>) outs(%[[ADD]] : memref<2x8xf32>)
// CHECK-NEXT: %[[SM:.*]] = tcck.view 960 : memref<2x8xf32>
// CHECK-NEXT: tcck.call softmax outs(%[[SM]] : memref<2x8xf32>) ins(%[[ADD]] : memref<2x8xf32>) {axis = 1 : i64, log = false}
// CHECK-NEXT: tcck.mark "tcc.softmax"
// CHECK-NEXT: %[[FLAT:.*]] = tcck.alias %[[SM]] : memref<2x8xf32> to memref<16xf32>
// CHECK-NEXT: %[[SUM:.*]] = tcck.view {{[0-9]+}} : memref<f32>
// CHECK-NEXT: tcck.call reduce outs(%[[SUM]] : memref<f32>) ins(%[[FLAT]] : memref<16xf32>) {mask = 1 : i64, mean = false}
// CHECK-NEXT: tcck.mark "tcc.reduce_sum" live {{[0-9]+}} ins(%[[FLAT]] : memref<16xf32>) outs(%[[SUM]] : memref<f32>)
// CHECK-NEXT: %[[SL:.*]] = tcck.view {{[0-9]+}} : memref<2x4xf32>
// CHECK-NEXT: tcck.call slice outs(%[[SL]] : memref<2x4xf32>) ins(%[[ADD]] : memref<2x8xf32>) {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>}
// CHECK: tcck.call reduce {{.*}} {mask = 3 : i64, mean = false}
// CHECK: %[[LOSS:.*]] = tcck.view {{[0-9]+}} : memref<f32>
// CHECK-NEXT: tcck.ew "Add" %[[LOSS]]
// CHECK: tcck.call broadcast_to outs(%[[G:.*]] : memref<2x8xf32>) ins(%[[SEED]] : memref<f32>) {}
// CHECK: tcck.call transpose outs(%[[XT:.*]] : memref<4x2xf32>) ins(%[[X]] : memref<2x4xf32>) {perm = array<i64: 1, 0>}
// CHECK: tcck.matmul outs(%[[GW:.*]] : memref<4x8xf32>) ins(%[[XT]], %[[G]] :
// CHECK-NEXT: tcck.accumulate %[[GW]] into slot 192 : memref<4x8xf32>
// CHECK-NEXT: tcck.mark "tcc.matmul"
// CHECK: tcck.call reduce outs(%[[GB:.*]] : memref<8xf32>) ins(%[[G]] : memref<2x8xf32>) {mask = 1 : i64, mean = false}
// CHECK-NEXT: tcck.accumulate %[[GB]] into slot 576 : memref<8xf32>
// CHECK-NEXT: tcck.mark "tcc.reduce_sum"
// CHECK-NEXT: tcck.store %[[LOSS]] to slot 896 : memref<f32>
// CHECK-NEXT: return %[[LOSS]], %[[GW]], %[[GB]] : memref<f32>, memref<4x8xf32>, memref<8xf32>

// Fused: the bias add is the GEMM's epilogue (its scalar region takes the
// product's element and the bias's, read along the row through its map),
// and the transpose is the GEMM's trans_lhs. On CUDA, the lowering records
// what cuBLASLt computes: the bias add, nothing after it.
// FUSED-LABEL: func.func @micro_step
// FUSED: tcck.matmul outs(%{{.*}} : memref<2x8xf32>) ins(%[[X:.*]], %[[W:.*]] : memref<2x4xf32>, memref<4x8xf32>) epilogue(%[[B:.*]] : memref<8xf32>) maps [affine_map<(d0, d1) -> (d1)>] {
// FUSED-NEXT: ^bb0(%[[P:.*]]: f32, %[[BA:.*]]: f32):
// FUSED-NEXT: %[[S:.*]] = tcck.scalar "Add" %[[P]], %[[BA]] : (f32, f32) -> f32
// FUSED-NEXT: tcck.yield %[[S]] : f32
// FUSED-NEXT: } {trans_lhs = false, trans_rhs = false}
// CUDA-FUSED-LABEL: func.func @micro_step
// CUDA-FUSED: tcck.matmul outs(%{{.*}} : memref<2x8xf16>) ins(%{{.*}}, %{{.*}} : memref<2x4xf16>, memref<4x8xf16>) epilogue(%{{.*}} : memref<8xf16>)
// CUDA-FUSED: } {cublaslt = #tcck.cublaslt<bias = 0, residual = -1, gelu = false, result = 0, aux = -1>, trans_lhs = false, trans_rhs = false}
// FUSED-NEXT: tcck.mark "tcc.fusion (tcc.matmul tcc.add)"
// FUSED: tcck.matmul outs(%{{.*}} : memref<4x8xf32>) ins(%[[X]], %{{.*}} : memref<2x4xf32>, memref<2x8xf32>) {trans_lhs = true, trans_rhs = false}
func.func @micro_step(%w: tensor<4x8xf32> {tcc.param = "w"}, %b: tensor<8xf32> {tcc.param = "b"},
                      %x: tensor<2x4xf32> {tcc.input = "x"}, %seed: tensor<f32> {tcc.loss_seed})
    -> (tensor<f32> {tcc.output = "loss"}, tensor<4x8xf32> {tcc.grad = "w"}, tensor<8xf32> {tcc.grad = "b"}) {
  %0 = tcc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %1 = tcc.add %0, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %2 = tcc.softmax %1 {axis = -1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = tcc.reshape %2 {shape = array<i64: 16>} : (tensor<2x8xf32>) -> tensor<16xf32>
  %4 = tcc.reduce_sum %3 {keepdims = 0 : i64} : (tensor<16xf32>) -> tensor<f32>
  %5 = tcc.slice %1 {starts = array<i64: 0, -4>, ends = array<i64: 2, 8>} : (tensor<2x8xf32>) -> tensor<2x4xf32>
  %6 = tcc.reduce_sum %5 {keepdims = 0 : i64} : (tensor<2x4xf32>) -> tensor<f32>
  %7 = tcc.add %4, %6 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %g = tcc.expand %seed {shape = array<i64: 2, 8>} : (tensor<f32>) -> tensor<2x8xf32>
  %xt = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %gw = tcc.matmul %xt, %g : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %gb = tcc.reduce_sum %g {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<8xf32>
  return %7, %gw, %gb : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// A row reduction fused with its consumers: one loop over rows, two passes
// (the mean, then the elements that read it), recorded on the body's
// scalar ops.
// FUSED-LABEL: func.func @loop
// FUSED: %[[Y:.*]] = tcck.view {{[0-9]+}} : memref<4x8xf32>
// FUSED-NEXT: tcck.loop ins(%arg0 : memref<4x8xf32>) outs(%[[Y]] : memref<4x8xf32>) space [4, 8] rows true passes 1
// FUSED-SAME: maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>] {
// FUSED-NEXT: ^bb0(%[[A:.*]]: f32):
// FUSED-NEXT: %[[M:.*]] = tcck.reduce %[[A]] dims [1] mean {tcck.role = "row_reduction", tcck.stage = 0 : i64} : f32
// FUSED-NEXT: %[[D:.*]] = tcck.scalar "Sub" %[[A]], %[[M]] {tcck.role = "element", tcck.stage = 1 : i64} : (f32, f32) -> f32
// FUSED-NEXT: %[[E:.*]] = tcck.scalar "Exp" %[[D]] {tcck.role = "element", tcck.stage = 1 : i64} : (f32) -> f32
// FUSED-NEXT: tcck.yield %[[E]] : f32
// FUSED-NEXT: }
// FUSED-NEXT: tcck.mark "tcc.fusion (tcc.reduce_mean tcc.sub tcc.exp)"
// FUSED-NEXT: tcck.store %[[Y]] to slot 128 : memref<4x8xf32>
func.func @loop(%x: tensor<4x8xf32> {tcc.input = "x"}) -> (tensor<4x8xf32> {tcc.output = "y"}) {
  %m = tcc.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d = tcc.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = tcc.exp %d : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %e : tensor<4x8xf32>
}

// -----

// Each buffer's indexing map: the bias is read along the row (d1), the
// per-row scale once per row (d0, 0); the column sums' output drops the
// reduced dimension. Gelu's approximation is an attribute of its scalar op.
// FUSED-LABEL: func.func @maps
// FUSED: tcck.loop ins(%arg0, %arg1, %arg2 : memref<4x8xf32>, memref<8xf32>, memref<4x1xf32>)
// FUSED-SAME: space [4, 8] rows false passes 0
// FUSED-SAME: maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>] {
// FUSED-NEXT: ^bb0(%[[X:.*]]: f32, %[[B:.*]]: f32, %[[S:.*]]: f32):
// FUSED-NEXT: %[[A:.*]] = tcck.scalar "Add" %[[X]], %[[B]] {tcck.role = "element", tcck.stage = 0 : i64}
// FUSED-NEXT: %[[M:.*]] = tcck.scalar "Mul" %[[A]], %[[S]]
// FUSED-NEXT: %[[G:.*]] = tcck.gelu %[[M]] tanh {tcck.role = "element", tcck.stage = 0 : i64} : f32
// FUSED-NEXT: %[[Z:.*]] = tcck.reduce %[[G]] dims [0] {tcck.role = "reduction", tcck.stage = 0 : i64} : f32
// FUSED-NEXT: tcck.yield %[[G]], %[[Z]] : f32, f32
func.func @maps(%x: tensor<4x8xf32> {tcc.input = "x"}, %b: tensor<8xf32> {tcc.input = "b"}, %s: tensor<4x1xf32> {tcc.input = "s"})
    -> (tensor<4x8xf32> {tcc.output = "y"}, tensor<8xf32> {tcc.output = "z"}) {
  %a = tcc.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %m = tcc.mul %a, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %g = tcc.gelu %m {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = tcc.reduce_sum %g {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<4x8xf32>) -> tensor<8xf32>
  return %g, %z : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// A bias and a tanh GELU: cuBLASLt's GELU epilogue, recorded once.
// CUDA-FUSED-LABEL: func.func @gelu_epilogue
// CUDA-FUSED: tcck.matmul outs(%{{.*}} : memref<8x32xf16>) ins(%arg0, %arg1 : memref<8x16xf16>, memref<16x32xf16>) epilogue(%arg2 : memref<32xf16>) maps [affine_map<(d0, d1) -> (d1)>] {
// CUDA-FUSED-NEXT: ^bb0(%[[P:.*]]: f32, %[[B:.*]]: f32):
// CUDA-FUSED-NEXT: %[[S:.*]] = tcck.scalar "Add" %[[P]], %[[B]] : (f32, f32) -> f32
// CUDA-FUSED-NEXT: %[[G:.*]] = tcck.gelu %[[S]] tanh : f32
// CUDA-FUSED-NEXT: tcck.yield %[[G]] : f32
// CUDA-FUSED-NEXT: } {cublaslt = #tcck.cublaslt<bias = 0, residual = -1, gelu = true, result = 0, aux = -1>, trans_lhs = false, trans_rhs = false}
func.func @gelu_epilogue(%x: tensor<8x16xf32> {tcc.input = "x"}, %w: tensor<16x32xf32> {tcc.param = "w"}, %b: tensor<32xf32> {tcc.param = "b"})
    -> (tensor<8x32xf32> {tcc.output = "y"}) {
  %0 = tcc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = tcc.add %0, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %2 = tcc.gelu %1 {approximate = "tanh"} : (tensor<8x32xf32>) -> tensor<8x32xf32>
  return %2 : tensor<8x32xf32>
}

// -----

// A reduce over [0, 2] of 1x3x6 is a row reduction (dimension 0 is 1): its
// tcck.reduce reduces the last dimension only, as the loop's verifier asks.
// FUSED-LABEL: func.func @row_reduction_unit_dims
// FUSED: tcck.reduce %{{.*}} dims [2] {tcck.role = "row_reduction"
func.func @row_reduction_unit_dims(%x: tensor<1x3x6xf32> {tcc.input = "x"}, %y: tensor<1x3x6xf32> {tcc.input = "y"})
    -> (tensor<f32> {tcc.output = "s"}, tensor<1x3x1xf32> {tcc.output = "r"}) {
  %m = tcc.mul %x, %y : (tensor<1x3x6xf32>, tensor<1x3x6xf32>) -> tensor<1x3x6xf32>
  %s = tcc.reduce_sum %m {keepdims = 0 : i64} : (tensor<1x3x6xf32>) -> tensor<f32>
  %r = tcc.reduce_sum %m {axes = array<i64: 0, 2>} : (tensor<1x3x6xf32>) -> tensor<1x3x1xf32>
  return %s, %r : tensor<f32>, tensor<1x3x1xf32>
}
