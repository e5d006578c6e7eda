// RUN: tcc-opt %s --split-input-file --tcc-fuse | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-fuse="cublaslt-epilogues=true row-reductions-only=true data-movement=false" | FileCheck %s --check-prefix=CUBLAS

// GEMM epilogue: the chain of same-shape elementwise ops that only read the
// previous result (bias add, then a residual add) joins the GEMM (and its
// transposed-weight prologue); the chain's last value is the fusion's
// result, placed where the chain ended.
// CHECK-LABEL: func.func @bias_residual
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<16x8xf32>, %[[B:[a-z0-9]+]]: tensor<16xf32>, %[[R:[a-z0-9]+]]: tensor<2x4x16xf32>)
// CHECK-SAME: reason = "GEMM epilogue: computed on each product element as the GEMM stores it, saving writing and reading 1024 bytes"
// CHECK: %[[F:.+]] = tcc.fusion {{[a-z]+}}(%[[X]], %[[W]], %[[B]], %[[R]]) : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
// CHECK: tcc.transpose
// CHECK: %[[M:.+]] = tcc.matmul
// CHECK: %[[A1:.+]] = tcc.add %[[M]], %{{.+}}
// CHECK: %[[A2:.+]] = tcc.add %{{.+}}, %[[A1]]
// CHECK: tcc.yield %[[A2]]
// The two readers of the chain's value are siblings: one loop computes both.
// CHECK: tcc.fusion {{[a-z]+}}(%[[F]])
// CHECK: tcc.tanh
// CHECK: tcc.exp
// cuBLASLt runs this one too: bias, then the residual as C.
// CUBLAS-LABEL: func.func @bias_residual
// CUBLAS-SAME: reason = "cuBLASLt epilogue: bias, added as the GEMM stores its product"
// CUBLAS-SAME: reason = "cuBLASLt epilogue: the residual added as C (beta = 1)"
// CUBLAS-SAME: reason = "cuBLASLt epilogue: at most a bias and a GELU or residual"
// CUBLAS: tcc.fusion {{[a-z]+}}(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
// CUBLAS: tcc.matmul
// CUBLAS: tcc.add
// CUBLAS: tcc.add
// CUBLAS: tcc.yield
func.func @bias_residual(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %r: tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %0 = tcc.matmul %x, %wt : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %1 = tcc.add %0, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %2 = tcc.add %r, %1 : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %3 = tcc.tanh %2 : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %4 = tcc.exp %2 : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %3, %4 : tensor<2x4x16xf32>, tensor<2x4x16xf32>
}

// -----

// Left alone: a GEMM result with two readers (the product is needed as it
// is), and a reader of another shape.
// CHECK-LABEL: func.func @no_epilogue
// CHECK-SAME: reason = "result shape differs from the GEMM's"
// CHECK: %[[M:.+]] = tcc.matmul
// CHECK: %[[N:.+]] = tcc.matmul
// CHECK: tcc.add %[[N]], %{{.+}} : (tensor<4x4xf32>, tensor<2x4x4xf32>)
func.func @no_epilogue(%a: tensor<4x8xf32>, %w: tensor<8x4xf32>, %z: tensor<2x4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x4x4xf32>) {
  %0 = tcc.matmul %a, %w : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %1 = tcc.exp %0 : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = tcc.matmul %a, %w : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %3 = tcc.add %2, %z : (tensor<4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %0, %1, %3 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x4x4xf32>
}

// -----

// An activation epilogue whose input has another reader (the backward pass
// reads the pre-activation): the chain goes through the GELU, whose value
// only GEMMs read, and the pre-activation is a second result of the fusion.
// CHECK-LABEL: func.func @forked_activation
// CHECK-SAME: (the value it reads is also a result, for its 1 other reader(s))
// CHECK: %[[F:.+]]:2 = tcc.fusion {{[a-z]+}}(%{{.+}}, %{{.+}}, %{{.+}}) : (tensor<8x4xf32>, tensor<4x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
// CHECK: %[[M:.+]] = tcc.matmul
// CHECK: %[[H:.+]] = tcc.add %[[M]], %{{.+}}
// CHECK: %[[G:.+]] = tcc.gelu %[[H]]
// CHECK: tcc.yield %[[H]], %[[G]]
// CHECK: tcc.matmul %[[F]]#1
// CHECK: tcc.gelu_grad %{{.+}}, %[[F]]#0
// cuBLASLt: bias and GELU, the pre-activation as the auxiliary output.
// CUBLAS-LABEL: func.func @forked_activation
// CUBLAS-SAME: reason = "cuBLASLt epilogue: bias and GELU, the GELU's input kept as the auxiliary output
// CUBLAS: tcc.fusion {{[a-z]+}}(%{{.+}}, %{{.+}}, %{{.+}}) : (tensor<8x4xf32>, tensor<4x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
// CUBLAS: tcc.gelu
// CUBLAS: tcc.yield
func.func @forked_activation(%x: tensor<8x4xf32>, %w: tensor<4x16xf32>, %b: tensor<16xf32>, %w2: tensor<16x4xf32>, %d: tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>) {
  %0 = tcc.matmul %x, %w : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %1 = tcc.add %0, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %2 = tcc.gelu %1 {approximate = "tanh"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = tcc.matmul %2, %w2 : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %4 = tcc.gelu_grad %d, %1 {approximate = "tanh"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %3, %4 : tensor<8x4xf32>, tensor<8x16xf32>
}

// -----

// Left alone past a fork: the product's first reader is elementwise but its
// value is read by more than GEMMs (it may fuse into a loop that never
// writes it), so the product is the GEMM's only value and both readers form
// a loop fusion of their own.
// CHECK-LABEL: func.func @forked_left_alone
// CHECK-SAME: reason = "the value it reads has other readers, and its own value is read by more than GEMMs
// CHECK: %[[M:.+]] = tcc.matmul
// CHECK: tcc.fusion {{[a-z]+}}(%[[M]], %{{.+}})
// CHECK: tcc.mul
// CHECK: tcc.exp
func.func @forked_left_alone(%x: tensor<8x4xf32>, %w: tensor<4x16xf32>, %s: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %0 = tcc.matmul %x, %w : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %1 = tcc.mul %0, %s : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = tcc.exp %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1, %2 : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// What cuBLASLt has no epilogue for stays apart under cublaslt-epilogues: an
// erf GELU after the bias, a batched second operand (attention's products),
// rows that are not a multiple of 8 elements, and an add that is not a bias.
// CUBLAS-LABEL: func.func @cublaslt_left_alone
// CUBLAS-SAME: reason = "cuBLASLt epilogue: its GELU is the tanh approximation"
// CUBLAS-SAME: reason = "cuBLASLt epilogue: only over a GEMM with an unbatched second operand and an untransposed first one"
// CUBLAS-SAME: reason = "cuBLASLt epilogue: the product's rows are not a multiple of 8 elements"
// CUBLAS-SAME: reason = "cuBLASLt epilogue: the add's other operand is not an fp16 bias along the rows"
// CUBLAS: %[[F:.+]] = tcc.fusion
// CUBLAS: tcc.matmul
// CUBLAS: tcc.add
// CUBLAS: tcc.yield
// CUBLAS: tcc.gelu %[[F]] :
// CUBLAS: %[[Q:.+]] = tcc.matmul %{{.+}}, %{{.+}} : (tensor<2x8x16xf32>, tensor<2x16x8xf32>)
// CUBLAS: tcc.add %[[Q]]
// CUBLAS: %[[R:.+]] = tcc.matmul %{{.+}}, %{{.+}} : (tensor<8x16xf32>, tensor<16x12xf32>)
// CUBLAS: tcc.add %[[R]]
// CUBLAS: %[[S:.+]] = tcc.matmul %{{.+}}, %{{.+}} : (tensor<8x16xf32>, tensor<16x8xf32>)
// CUBLAS: tcc.add %[[S]]
func.func @cublaslt_left_alone(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>, %q: tensor<2x8x16xf32>, %k: tensor<2x16x8xf32>, %w12: tensor<16x12xf32>, %b12: tensor<12xf32>, %m: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<2x8x8xf32>, tensor<8x12xf32>, tensor<8x8xf32>) {
  %0 = tcc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %1 = tcc.add %0, %b : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  %2 = tcc.gelu %1 {approximate = "none"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %3 = tcc.matmul %q, %k : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
  %4 = tcc.add %3, %b : (tensor<2x8x8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
  %5 = tcc.matmul %x, %w12 : (tensor<8x16xf32>, tensor<16x12xf32>) -> tensor<8x12xf32>
  %6 = tcc.add %5, %b12 : (tensor<8x12xf32>, tensor<12xf32>) -> tensor<8x12xf32>
  %7 = tcc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %8 = tcc.add %7, %m : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %2, %4, %6, %8 : tensor<8x8xf32>, tensor<2x8x8xf32>, tensor<8x12xf32>, tensor<8x8xf32>
}
