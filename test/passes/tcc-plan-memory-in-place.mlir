// RUN: tcc-opt %s --split-input-file --tcc-fuse="gemm-epilogues=false row-reductions-only=true" --tcc-plan-memory="float-bytes=2" | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-fuse="gemm-epilogues=false row-reductions-only=true" --tcc-plan-memory | FileCheck %s --check-prefix=CPU
// Results written over operands that die (tcc::inPlaceOperand), and
// gradients accumulated where they are made (tcc::gradientAccumulatedAfter).

// On the CUDA target (float-bytes=2) an elementwise fusion's result takes the
// buffer of an operand of its type that dies there. The CPU target does not
// (its plans stay as they were).
// CHECK-LABEL: func.func @elementwise
// CHECK: %[[P:.+]] = tcc.matmul {{.*}}tcc.offsets = array<i64: [[AT:[0-9]+]]>
// CHECK: tcc.fusion {{[a-z]+}}(%[[P]]) {tcc.offsets = array<i64: [[AT]]>}
// CPU-LABEL: func.func @elementwise
// CPU: tcc.matmul {{.*}}tcc.offsets = array<i64: 8192>
// CPU: tcc.fusion {{[a-z]+}}({{.*}}tcc.offsets = array<i64: 12288>
func.func @elementwise(%x: tensor<32x32xf32> {tcc.input = "x"}) -> (tensor<32x32xf32> {tcc.output = "y"}) {
  %0 = tcc.matmul %x, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %1 = tcc.tanh %0 : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %2 = tcc.exp %1 : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %3 = tcc.matmul %2, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  return %3 : tensor<32x32xf32>
}

// -----

// A row fusion: the result written in its last pass (after the row sum)
// takes the operand's buffer; the one written in the first pass, before the
// sum has read the whole row, does not.
// CHECK-LABEL: func.func @rows
// CHECK: %[[P:.+]] = tcc.matmul {{.*}}tcc.offsets = array<i64: [[AT:[0-9]+]]>
// CHECK: tcc.fusion {{[a-z]+}}(%[[P]]) {tcc.offsets = array<i64: [[FIRST:[0-9]+]], [[AT]]>}
// CHECK-NOT: array<i64: [[AT]], [[AT]]>
func.func @rows(%x: tensor<32x32xf32> {tcc.input = "x"}) -> (tensor<32x32xf32> {tcc.output = "y"}, tensor<32x32xf32> {tcc.output = "z"}) {
  %0 = tcc.matmul %x, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %1 = tcc.tanh %0 : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %s = tcc.reduce_sum %1 {axes = array<i64: 1>} : (tensor<32x32xf32>) -> tensor<32x1xf32>
  %2 = tcc.sub %1, %s : (tensor<32x32xf32>, tensor<32x1xf32>) -> tensor<32x32xf32>
  %3 = tcc.matmul %2, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %4 = tcc.matmul %1, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  return %3, %4 : tensor<32x32xf32>, tensor<32x32xf32>
}

// -----

// A row value (the log-sum-exp, [32, 1]) is stored when its row is done,
// before the pass that reads the row's operands again: it never takes an
// operand's buffer, even one of its type that dies there (the row maximum
// here); the full-size probabilities still take the scores'.
// CHECK-LABEL: func.func @row_result
// CHECK: %[[P:.+]] = tcc.matmul %{{.+}}, %{{.+}} {tcc.offsets = array<i64: [[PAT:[0-9]+]]>} : (tensor<32x32xf32>, tensor<32x32xf32>)
// CHECK: %[[M:.+]] = tcc.matmul %{{.+}}, %{{.+}} {tcc.offsets = array<i64: [[MAT:[0-9]+]]>}
// CHECK: tcc.fusion {{[a-z]+}}(%[[P]], %[[M]]) {tcc.offsets = array<i64:
// CHECK-NOT: [[MAT]]
// CHECK-SAME: , [[PAT]]>}
func.func @row_result(%x: tensor<32x32xf32> {tcc.input = "x"}, %v: tensor<32x1xf32> {tcc.input = "v"}) -> (tensor<32x32xf32> {tcc.output = "y"}, tensor<1x1xf32> {tcc.output = "z"}) {
  %p0 = tcc.matmul %x, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %m = tcc.matmul %x, %v : (tensor<32x32xf32>, tensor<32x1xf32>) -> tensor<32x1xf32>
  %d = tcc.sub %p0, %m : (tensor<32x32xf32>, tensor<32x1xf32>) -> tensor<32x32xf32>
  %e = tcc.exp %d : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %s = tcc.reduce_sum %e {axes = array<i64: 1>} : (tensor<32x32xf32>) -> tensor<32x1xf32>
  %ls = tcc.log %s : (tensor<32x1xf32>) -> tensor<32x1xf32>
  %l = tcc.add %ls, %m : (tensor<32x1xf32>, tensor<32x1xf32>) -> tensor<32x1xf32>
  %p = tcc.div %e, %s : (tensor<32x32xf32>, tensor<32x1xf32>) -> tensor<32x32xf32>
  %y = tcc.matmul %p, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %vt = tcc.transpose %v {perm = array<i64: 1, 0>} : (tensor<32x1xf32>) -> tensor<1x32xf32>
  %z = tcc.matmul %vt, %l : (tensor<1x32xf32>, tensor<32x1xf32>) -> tensor<1x1xf32>
  return %y, %z : tensor<32x32xf32>, tensor<1x1xf32>
}

// -----

// A gradient is added into its accumulator right after the op that makes
// it, so its buffer is free for what comes after: the output's fusion reuses
// it although the gradient is returned with it.
// CPU-LABEL: func.func @micro_step
// CPU: tcc.exp %{{.+}} {tcc.offsets = array<i64: [[AT:[0-9]+]]>}
// CPU: tcc.fusion {{[a-z]+}}(%{{.+}}) {tcc.offsets = array<i64: [[AT]]>}
// CPU: return
func.func @micro_step(%w: tensor<64xf32> {tcc.param = "w"}, %x: tensor<64xf32> {tcc.input = "x"})
    -> (tensor<64xf32> {tcc.output = "o"}, tensor<64xf32> {tcc.grad = "w"}) {
  %g = tcc.exp %w : (tensor<64xf32>) -> tensor<64xf32>
  %o = tcc.exp %x : (tensor<64xf32>) -> tensor<64xf32>
  %t = tcc.tanh %x : (tensor<64xf32>) -> tensor<64xf32>
  %u = tcc.sigmoid %t : (tensor<64xf32>) -> tensor<64xf32>
  %v = tcc.add %u, %o : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %v, %g : tensor<64xf32>, tensor<64xf32>
}

// -----

// A result that took its operand's buffer (%t over %p) holds that buffer
// now: a later fusion may write over %t only where %t itself dies, not
// merely the buffer's root %p. %t is read again after the second fusion, so
// the second fusion takes the buffer of %q (which dies there) instead.
// CHECK-LABEL: func.func @chain
// CHECK: %[[P:.+]] = tcc.matmul {{.*}}tcc.offsets = array<i64: [[AT:[0-9]+]]>
// CHECK: %[[T:.+]] = tcc.fusion {{[a-z]+}}(%[[P]]) {tcc.offsets = array<i64: [[AT]]>}
// CHECK: %[[Q:.+]] = tcc.matmul %[[T]], %{{.+}} {tcc.offsets = array<i64: [[QAT:[0-9]+]]>}
// CHECK: tcc.fusion {{[a-z]+}}(%[[T]], %[[Q]]) {tcc.offsets = array<i64: [[QAT]]>}
// CHECK: tcc.matmul %[[T]], %{{.+}} {tcc.offsets
func.func @chain(%x: tensor<32x32xf32> {tcc.input = "x"}) -> (tensor<32x32xf32> {tcc.output = "y"}, tensor<32x32xf32> {tcc.output = "z"}) {
  %p = tcc.matmul %x, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %h = tcc.tanh %p : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %t = tcc.sigmoid %h : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %q = tcc.matmul %t, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %a = tcc.add %t, %q : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %e = tcc.exp %a : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %y = tcc.matmul %e, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %z = tcc.matmul %t, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  return %y, %z : tensor<32x32xf32>, tensor<32x32xf32>
}
