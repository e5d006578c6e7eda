// RUN: tcc-opt %s --split-input-file --tcc-fuse="gemm-epilogues=false" | FileCheck %s
// RUN: tcc-opt %s --split-input-file --tcc-fuse="max-ops=2 gemm-epilogues=false" | FileCheck %s --check-prefix=LIMIT
// RUN: tcc-opt %s --split-input-file --tcc-fuse="reductions=false gemm-epilogues=false" | FileCheck %s --check-prefix=NORED
// RUN: tcc-opt %s --split-input-file --tcc-fuse="data-movement=false gemm-epilogues=false" | FileCheck %s --check-prefix=MOVES
// RUN: tcc-opt %s --split-input-file --tcc-fuse="row-reductions-only=true gemm-epilogues=false data-movement=false" | FileCheck %s --check-prefix=ROWS

// A chain of elementwise ops of one shape becomes one fusion; a broadcast
// operand is just an input; only the value used outside is a result.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<4x8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-SAME: tcc.fusion_stats = {fusions = 1 : i64, gemm_fusions = 0 : i64, kernel_count = 1 : i64, op_count = 3 : i64}
// CHECK: %[[F:.+]] = tcc.fusion loop(%[[A]], %[[B]]) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK: ^bb0(%[[X:.+]]: tensor<4x8xf32>, %[[Y:.+]]: tensor<8xf32>):
// CHECK: %[[M:.+]] = tcc.mul %[[X]], %[[Y]]
// CHECK: %[[T:.+]] = tcc.tanh %[[M]]
// CHECK: %[[E:.+]] = tcc.exp %[[T]]
// CHECK: tcc.yield %[[E]] : tensor<4x8xf32>
// CHECK: return %[[F]]
// LIMIT-LABEL: func.func @chain
// LIMIT-SAME: the group has reached the kernel size limit of 2 ops
// LIMIT: tcc.fusion
// LIMIT: tcc.yield
// LIMIT: tcc.exp
func.func @chain(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = tcc.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tcc.tanh %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tcc.exp %1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// A matmul is never fused or duplicated; the elementwise op after it and the
// reduction of its value become one input fusion (the loop over the
// reduction's input computes exp and sums); the reduction is over the first
// axis, so its result is complete only after the loop, and the relu of it
// stays alone. With reductions=false the reduction is a kernel of its own.
// CHECK-LABEL: func.func @not_elementwise
// CHECK-SAME: reason = "reduction of the group's value (input fusion): the reduction's loop computes its input, saving writing and reading 256 bytes"
// CHECK-SAME: reason = "reads a reduction's result (or a view of one), which is complete only after the group's loop"
// CHECK: %[[M:.+]] = tcc.matmul
// CHECK: %[[F:.+]] = tcc.fusion reduction(%[[M]]) : (tensor<4x8xf32>) -> tensor<1x8xf32> {
// CHECK: tcc.exp
// CHECK: %[[R:.+]] = tcc.reduce_sum
// CHECK: tcc.yield %[[R]] : tensor<1x8xf32>
// CHECK: tcc.relu %[[F]]
// NORED-LABEL: func.func @not_elementwise
// NORED-SAME: not elementwise: tcc.reduce_sum is a kernel of its own
// NORED-NOT: tcc.fusion {{[a-z]+}}(
// NORED: tcc.matmul
// NORED: tcc.exp
// NORED: tcc.reduce_sum
// NORED: tcc.relu
// With row-reductions-only (the CUDA target), a reduction over another axis
// than the last is a kernel of its own too.
// ROWS-LABEL: func.func @not_elementwise
// ROWS-SAME: reason = "only reductions over the last axis are fused for this target"
// ROWS-NOT: tcc.fusion {{[a-z]+}}(
// ROWS: tcc.reduce_sum
func.func @not_elementwise(%a: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<1x8xf32> {
  %0 = tcc.matmul %a, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.exp %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tcc.reduce_sum %1 {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %3 = tcc.relu %2 : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %3 : tensor<1x8xf32>
}

// -----

// Row reductions (softmax's pattern): a reduction over the last axis keeps
// the group open, later ops read its per-row result (broadcast), and an op
// on the row statistics (the reciprocal) is computed once per row; exp,
// the sum, the reciprocal and the division are one fusion that yields only
// the division. With reductions=false, only the elementwise ops fuse.
// CHECK-LABEL: func.func @row_softmax
// CHECK-SAME: reason = "row reduction (last axis) of the group's loop
// CHECK-SAME: reason = "elementwise op on the group's row statistics: computed once per row
// CHECK-SAME: kernel_count = 1 : i64
// CHECK: %[[F:.+]] = tcc.fusion {{[a-z]+}}(%{{.+}}) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: %[[E:.+]] = tcc.exp
// CHECK: %[[S:.+]] = tcc.reduce_sum %[[E]] {axes = array<i64: 1>}
// CHECK: %[[R:.+]] = tcc.reciprocal %[[S]]
// CHECK: %[[D:.+]] = tcc.mul %[[E]], %[[R]]
// CHECK: tcc.yield %[[D]] : tensor<4x8xf32>
// CHECK: return %[[F]]
// NORED-LABEL: func.func @row_softmax
// NORED: tcc.exp
// NORED: tcc.reduce_sum
// NORED: tcc.reciprocal
// NORED: tcc.mul
// ROWS-LABEL: func.func @row_softmax
// ROWS: tcc.fusion
// ROWS: tcc.reduce_sum
// ROWS: tcc.yield
func.func @row_softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = tcc.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.reduce_sum %0 {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = tcc.reciprocal %1 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %3 = tcc.mul %0, %2 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// Merging and siblings (LayerNorm's backward pattern): two chains over the
// same loop merge when an op reads both; a reduction that reads none of the
// group's values but shares its full-size input joins as a sibling (one loop
// reads %g once), and the reshape of a reduced result moves after the
// fusion instead of ending the group.
// CHECK-LABEL: func.func @merge_and_siblings
// CHECK-SAME: reason = "reads the values of 2 groups over the same loop: they merge into one kernel
// CHECK-SAME: reason = "sibling of the group: reads the group's input of 32 elements in the same loop
// CHECK-SAME: kernel_count = 1 : i64
// CHECK: %[[F:.+]]:3 = tcc.fusion {{[a-z]+}}(%{{.+}}, %{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>) {
// CHECK: tcc.mul
// CHECK: tcc.exp
// CHECK: tcc.sub
// CHECK: tcc.reduce_sum
// CHECK: tcc.reduce_sum
// CHECK: tcc.yield
// CHECK: tcc.reshape %[[F]]#1
func.func @merge_and_siblings(%g: tensor<4x8xf32>, %x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<1x8xf32>) {
  %0 = tcc.mul %g, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.exp %y : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tcc.sub %0, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = tcc.reduce_sum %2 {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %4 = tcc.reshape %3 {shape = array<i64: 8>} : (tensor<1x8xf32>) -> tensor<8xf32>
  %5 = tcc.reduce_sum %g {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  return %2, %4, %5 : tensor<4x8xf32>, tensor<8xf32>, tensor<1x8xf32>
}

// -----

// Leaves alone: groups over different loops do not merge, and an op that
// reads a reduction's result that is complete only after the loop (a sum
// over the first axis) cannot join the loop that computes it.
// CHECK-LABEL: func.func @no_merge
// CHECK-SAME: reason = "reads the values of 2 groups whose loops have different shapes"
// CHECK-SAME: reason = "reads a reduction's result (or a view of one), which is complete only after the group's loop"
// CHECK: tcc.fusion
// CHECK: tcc.reduce_sum
// CHECK: tcc.yield
// CHECK: tcc.mul %{{.+}}, %{{.+}} : (tensor<4x8xf32>, tensor<1x8xf32>)
func.func @no_merge(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = tcc.exp %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.neg %b : (tensor<8xf32>) -> tensor<8xf32>
  %2 = tcc.add %0, %1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = tcc.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = tcc.reduce_sum %3 {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %5 = tcc.mul %3, %4 : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return %2, %5 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Cycle avoidance: the matmul between reads the group's first value and
// feeds the next elementwise op, so the group stops before the matmul
// (fusing across it would make the fusion both feed and read the matmul).
// CHECK-LABEL: func.func @cycle
// CHECK-SAME: not elementwise: tcc.matmul is a kernel of its own
// CHECK: %[[E:.+]] = tcc.exp
// CHECK: %[[M:.+]] = tcc.matmul %[[E]]
// CHECK: tcc.fusion {{[a-z]+}}(%[[M]], %[[E]])
func.func @cycle(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = tcc.exp %a : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = tcc.matmul %0, %0 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = tcc.add %1, %0 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %3 = tcc.tanh %2 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}

// -----

// A value used both inside and outside the group is one of its results
// (without reduction fusion the reduction reads exp's value from outside;
// with it, the loop yields neg's value and the sum).
// NORED-LABEL: func.func @escaping
// NORED: %[[F:.+]]:2 = tcc.fusion
// NORED: tcc.yield %{{.+}}, %{{.+}} : tensor<16xf32>, tensor<16xf32>
// NORED: tcc.reduce_sum %[[F]]#0
// NORED: return %[[F]]#1
// CHECK-LABEL: func.func @escaping
// CHECK: %[[F:.+]]:2 = tcc.fusion
// CHECK: tcc.yield %{{.+}}, %{{.+}} : tensor<16xf32>, tensor<f32>
// CHECK: return %[[F]]#0, %[[F]]#1
func.func @escaping(%a: tensor<16xf32>) -> (tensor<16xf32>, tensor<f32>) {
  %0 = tcc.exp %a : (tensor<16xf32>) -> tensor<16xf32>
  %1 = tcc.neg %0 : (tensor<16xf32>) -> tensor<16xf32>
  %2 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<16xf32>) -> tensor<f32>
  return %1, %2 : tensor<16xf32>, tensor<f32>
}

// -----

// Leaves alone: a consumer whose result is broadcast to a larger shape.
// CHECK-LABEL: func.func @other_shape
// CHECK-SAME: result shape differs from the group's
// CHECK-NOT: tcc.fusion {{[a-z]+}}(
func.func @other_shape(%a: tensor<4x8xf32>, %b: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = tcc.exp %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tcc.add %0, %b : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %1 : tensor<2x4x8xf32>
}

// -----

// GEMM prologue: a transpose of the last two dimensions read by a matmul
// goes into a fusion with it (the GEMM reads its operand transposed); a
// transpose with another reader is cloned and stays for that reader; a
// transpose of other dimensions is left alone. The GEMM is not duplicated.
// CHECK-LABEL: func.func @gemm_prologue
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<16x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x8x4xf32>)
// CHECK-SAME: reason = "transpose of the last two dimensions read by a GEMM: the GEMM reads its operand transposed, saving writing and reading 1024 bytes"
// CHECK-SAME: reason = "transpose moves more than the last two dimensions: a GEMM cannot read it through a transpose flag"
// CHECK-SAME: reason = "transpose of the last two dimensions read by a GEMM: the GEMM reads its operand transposed (the transpose stays for its other readers)"
// CHECK-SAME: gemm_fusions = 2 : i64
// CHECK: %[[G:.+]] = tcc.fusion gemm(%[[X]], %[[W]]) : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32> {
// CHECK: ^bb0(%[[A:.+]]: tensor<2x4x8xf32>, %[[B:.+]]: tensor<16x8xf32>):
// CHECK: %[[T:.+]] = tcc.transpose %[[B]] {perm = array<i64: 1, 0>}
// CHECK: %[[M:.+]] = tcc.matmul %[[A]], %[[T]]
// CHECK: tcc.yield %[[M]]
// CHECK: %[[P:.+]] = tcc.transpose %[[V]] {perm = array<i64: 2, 1, 0>}
// CHECK: tcc.matmul %[[P]], %{{.+}} : (tensor<4x8x2xf32>
// CHECK: %[[KEEP:.+]] = tcc.transpose %[[V]] {perm = array<i64: 0, 2, 1>}
// CHECK: %[[PLAIN:.+]] = tcc.matmul %[[X]], %[[V]]
// CHECK: tcc.fusion {{[a-z]+}}(%[[V]]) : (tensor<2x8x4xf32>) -> tensor<2x4x4xf32> {
// CHECK: ^bb0(%[[VV:.+]]: tensor<2x8x4xf32>):
// CHECK: %[[VT:.+]] = tcc.transpose %[[VV]] {perm = array<i64: 0, 2, 1>}
// CHECK: tcc.matmul %[[VT]], %[[VV]]
// CHECK: tcc.exp %[[KEEP]]
func.func @gemm_prologue(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %v: tensor<2x8x4xf32>) -> (tensor<2x4x16xf32>, tensor<4x8x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>) {
  %wt = tcc.transpose %w {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %0 = tcc.matmul %x, %wt : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %p = tcc.transpose %v {perm = array<i64: 2, 1, 0>} : (tensor<2x8x4xf32>) -> tensor<4x8x2xf32>
  %c = tcc.constant {value = dense<1.0> : tensor<2x4xf32>} : () -> tensor<2x4xf32>
  %1 = tcc.matmul %p, %c : (tensor<4x8x2xf32>, tensor<2x4xf32>) -> tensor<4x8x4xf32>
  %vt = tcc.transpose %v {perm = array<i64: 0, 2, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
  %2 = tcc.matmul %x, %v : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %3 = tcc.matmul %vt, %v : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %4 = tcc.exp %vt : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %5 = tcc.add %2, %3 : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %0, %1, %5, %4 : tensor<2x4x16xf32>, tensor<4x8x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>
}

// -----

// Input fusion with a value also used outside (multi-output: the loop writes
// it and sums it), and what stays alone: an integer reduction, and a
// reduction of a value that is not the group's (its input comes from
// elsewhere).
// CHECK-LABEL: func.func @reduce_input_fusion
// CHECK-SAME: reason = "an integer reduction stays a kernel of its own"
// CHECK: %[[F:.+]]:2 = tcc.fusion {{[a-z]+}}(%{{.+}}, %{{.+}}) : (tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<1x1x4xf32>) {
// CHECK: %[[A:.+]] = tcc.add
// CHECK: %[[T:.+]] = tcc.tanh %[[A]]
// CHECK: %[[S:.+]] = tcc.reduce_mean %[[T]] {axes = array<i64: 0, 1>}
// CHECK: tcc.yield %[[T]], %[[S]]
// CHECK: tcc.reduce_sum %{{.+}} {axes = array<i64: 1>} : (tensor<2x3x4xi64>)
func.func @reduce_input_fusion(%x: tensor<2x3x4xf32>, %b: tensor<4xf32>, %i: tensor<2x3x4xi64>) -> (tensor<2x3x4xf32>, tensor<1x1x4xf32>, tensor<2x1x4xi64>) {
  %0 = tcc.add %x, %b : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %1 = tcc.tanh %0 : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %2 = tcc.reduce_mean %1 {axes = array<i64: 0, 1>} : (tensor<2x3x4xf32>) -> tensor<1x1x4xf32>
  %3 = tcc.neg %i : (tensor<2x3x4xi64>) -> tensor<2x3x4xi64>
  %4 = tcc.abs %3 : (tensor<2x3x4xi64>) -> tensor<2x3x4xi64>
  %5 = tcc.reduce_sum %4 {axes = array<i64: 1>} : (tensor<2x3x4xi64>) -> tensor<2x1x4xi64>
  return %1, %2, %5 : tensor<2x3x4xf32>, tensor<1x1x4xf32>, tensor<2x1x4xi64>
}

// -----

// A transpose of a GEMM's result (a weight gradient) becomes the GEMM of the
// transposed operands in the other order, (A B)^T = B^T A^T; the prologue
// then reads both operands transposed, and A's own transpose cancels.
// CHECK-LABEL: func.func @gemm_result_transpose
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<6x4xf32>, %[[G:[a-z0-9]+]]: tensor<6x10xf32>)
// CHECK-SAME: reason = "transpose of a GEMM's result: the GEMM computes B^T A^T instead, saving writing and reading 320 bytes"
// CHECK: %[[F:.+]] = tcc.fusion {{[a-z]+}}(%[[G]], %[[X]]) : (tensor<6x10xf32>, tensor<6x4xf32>) -> tensor<10x4xf32> {
// CHECK: ^bb0(%[[A:.+]]: tensor<6x10xf32>, %[[B:.+]]: tensor<6x4xf32>):
// CHECK: %[[T:.+]] = tcc.transpose %[[A]] {perm = array<i64: 1, 0>}
// CHECK: %[[M:.+]] = tcc.matmul %[[T]], %[[B]] : (tensor<10x6xf32>, tensor<6x4xf32>) -> tensor<10x4xf32>
// CHECK: return %[[F]]
func.func @gemm_result_transpose(%x: tensor<6x4xf32>, %g: tensor<6x10xf32>) -> tensor<10x4xf32> {
  %xt = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %0 = tcc.matmul %xt, %g : (tensor<4x6xf32>, tensor<6x10xf32>) -> tensor<4x10xf32>
  %1 = tcc.transpose %0 {perm = array<i64: 1, 0>} : (tensor<4x10xf32>) -> tensor<10x4xf32>
  return %1 : tensor<10x4xf32>
}

// -----

// Leaves alone: a reduction over the first and last axes with a kept axis
// between them. The reduce kernel sums each innermost run separately and
// then adds the runs, so a fused loop that adds element by element would
// round differently; the exp stays a loop of its own.
// CHECK-LABEL: func.func @split_runs
// CHECK-SAME: reason = "the reduce kernel sums this reduction's runs separately
// CHECK-NOT: tcc.fusion {{[a-z]+}}(
// CHECK: tcc.exp
// CHECK: tcc.reduce_sum %{{.+}} {axes = array<i64: 0, 2>}
func.func @split_runs(%a: tensor<4x16x32xf32>) -> tensor<1x16x1xf32> {
  %0 = tcc.exp %a : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  %1 = tcc.reduce_sum %0 {axes = array<i64: 0, 2>} : (tensor<4x16x32xf32>) -> tensor<1x16x1xf32>
  return %1 : tensor<1x16x1xf32>
}

// -----

// Data movement: attention's head split (a split whose parts go through a
// reshape and a transpose) is one copy loop with the three transposed parts
// as results, and the merge of the heads' gradients (transposes and reshapes
// into a concat) is another. With data-movement=false, they stay apart.
// CHECK-LABEL: func.func @heads
// CHECK-SAME: reason = "data movement: the tcc.split and the transposes of its parts are one copy loop (7 ops), each element moved once"
// CHECK-SAME: reason = "data movement: the tcc.concat and the transposes of its parts are one copy loop (5 ops), each element moved once"
// CHECK: %[[S:.+]]:3 = tcc.fusion move(%{{.+}}) : (tensor<2x4x24xf32>) -> (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) {
// CHECK: tcc.split
// CHECK-COUNT-3: tcc.transpose
// CHECK: %[[C:.+]] = tcc.fusion move(%{{.+}}, %{{.+}}) : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x4x16xf32> {
// CHECK-COUNT-2: tcc.transpose
// CHECK: tcc.concat
// MOVES-LABEL: func.func @heads
// MOVES-NOT: tcc.fusion {{[a-z]+}}(
func.func @heads(%qkv: tensor<2x4x24xf32>, %dq: tensor<2x2x4x4xf32>, %dv: tensor<2x2x4x4xf32>) -> (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x4x16xf32>) {
  %q, %k, %v = tcc.split %qkv {axis = 2 : i64, split = array<i64: 8, 8, 8>} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  %q4 = tcc.reshape %q {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %qt = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
  %k4 = tcc.reshape %k {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
  %v4 = tcc.reshape %v {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %vt = tcc.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
  %a = tcc.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32>
  %a3 = tcc.reshape %a {shape = array<i64: 2, 4, 8>} : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32>
  %b = tcc.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32>
  %b3 = tcc.reshape %b {shape = array<i64: 2, 4, 8>} : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32>
  %cat = tcc.concat %a3, %b3 {axis = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
  return %qt, %kt, %vt, %cat : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x4x16xf32>
}

// -----

// Leaves alone: a part's transpose is read (by the exp) before the last
// part's chain ends, so a copy loop placed at the end would be read before
// it is written.
// CHECK-LABEL: func.func @heads_read_early
// CHECK-SAME: reason = "a value of the tcc.split's chains is read before the chains end"
// CHECK: tcc.split
// CHECK: tcc.transpose
// CHECK: tcc.exp
func.func @heads_read_early(%qk: tensor<2x4x16xf32>) -> (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) {
  %q, %k = tcc.split %qk {axis = 2 : i64, split = array<i64: 8, 8>} : (tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  %q4 = tcc.reshape %q {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %qt = tcc.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
  %e = tcc.exp %qt : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %k4 = tcc.reshape %k {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
  %kt = tcc.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
  return %e, %kt : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>
}

// -----

// A group runs where its last op is: an add that would join it after an
// unrelated kernel (a GEMM) moves it there. That keeps the sum's dying inputs
// (two buffers) alive across the GEMM to save storing one: refused (a
// chunked loss's gradient terms would otherwise all wait for the last
// chunk). With nothing in between, or inputs that live on anyway, it joins.
// CHECK-LABEL: func.func @no_move_past_kernel
// MOVES-LABEL: func.func @no_move_past_kernel
// CHECK-SAME: joining would run the group here, after ops that do not belong to it, keeping 128 bytes of its inputs alive until then for 64 bytes of results stored later
// CHECK-NOT: tcc.fusion {{[a-z]+}}(
// CHECK: return
func.func @no_move_past_kernel(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %t0 = tcc.exp %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %m0 = tcc.matmul %t0, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %m1 = tcc.matmul %b, %t0 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s1 = tcc.add %m0, %m1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %m2 = tcc.matmul %b, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s2 = tcc.add %s1, %m2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %s2 : tensor<4x4xf32>
}

// -----

// CHECK-LABEL: func.func @move_when_inputs_live_on
// CHECK: tcc.fusion {{[a-z]+}}(
// CHECK: tcc.add
// CHECK: tcc.add
// CHECK: tcc.yield
func.func @move_when_inputs_live_on(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %s1 = tcc.add %a, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %m2 = tcc.matmul %b, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s2 = tcc.add %s1, %m2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %s2, %m2 : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// A sum across rows (not fused with row-reductions-only) reads the row
// loop's value; the elementwise op after it that reads the loop too (a
// LayerNorm backward's residual gradient sum after the dgamma/dbeta sums)
// moves above it and joins the loop, which then yields both values. Where
// every reduction is fused, nothing moves: the sum joins the loop too.
// ROWS-LABEL: func.func @hoist_over_column_sum
// ROWS: %[[F:.+]]:2 = tcc.fusion {{[a-z]+}}(%arg0, %arg1)
// ROWS: %[[M:.+]] = tcc.reduce_mean
// ROWS-NEXT: %[[D:.+]] = tcc.sub %{{.+}}, %[[M]]
// ROWS-NEXT: %[[Y:.+]] = tcc.add %{{.+}}, %[[D]]
// ROWS-NEXT: tcc.yield %[[D]], %[[Y]]
// ROWS: %[[S:.+]] = tcc.reduce_sum %[[F]]#0 {axes = array<i64: 0>
// ROWS-NEXT: return %[[F]]#1, %[[S]]
// CHECK-LABEL: func.func @hoist_over_column_sum
// CHECK: tcc.reduce_mean
// CHECK-NEXT: tcc.sub
// CHECK-NEXT: tcc.reduce_sum
// CHECK-NEXT: tcc.add
func.func @hoist_over_column_sum(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %m = tcc.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %d = tcc.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %s = tcc.reduce_sum %d {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<4x8xf32>) -> tensor<8xf32>
  %y = tcc.add %r, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %s : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// Nothing moves above the loss (the step's first result), where the memory
// plan splits the forward pass from the backward pass: the backward pass's
// first op stays after a mean over all axes (not fused with
// row-reductions-only) that it does not read.
// ROWS-LABEL: func.func @loss_stays_first
// ROWS: %[[L:.+]] = tcc.reduce_mean %arg0
// ROWS: %[[G:.+]] = tcc.mul %arg1
// ROWS: return %[[L]], %[[G]]
func.func @loss_stays_first(%x: tensor<4x8xf32>, %seed: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %l = tcc.reduce_mean %x {keepdims = 0 : i64} : (tensor<4x8xf32>) -> tensor<f32>
  %c = tcc.constant {value = dense<0.03125> : tensor<f32>} : () -> tensor<f32>
  %g = tcc.mul %seed, %c : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l, %g : tensor<f32>, tensor<f32>
}
