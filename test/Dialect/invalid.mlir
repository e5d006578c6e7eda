// RUN: tcc-opt %s --split-input-file --verify-diagnostics
// Malformed ops are rejected by the verifier with a message that says what
// is wrong. Shape errors come from result-type inference, which the verifier
// runs, so they are followed by "failed to infer returned types".

func.func @broadcast_mismatch(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{'tcc.add' op operand shapes [2, 3] and [4] do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @element_type_mismatch(%a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+2 {{'tcc.mul' op operands have different element types (f32 and f16)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.mul %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

func.func @wrong_result_type(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{'tcc.relu' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.relu %a : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @dynamic_shape(%a: tensor<?x3xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = tcc.relu %a : (tensor<?x3xf32>) -> tensor<?x3xf32>
  return
}

// -----

func.func @float_only(%a: tensor<3xi64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = tcc.exp %a : (tensor<3xi64>) -> tensor<3xi64>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+2 {{'tcc.matmul' op contraction dimensions differ: [2, 3] x [4, 5]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x2x3xf32>, %b: tensor<3x3x4xf32>) {
  // expected-error @+2 {{'tcc.matmul' op batch dimensions do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.matmul %a, %b : (tensor<2x2x3xf32>, tensor<3x3x4xf32>) -> tensor<2x2x4xf32>
  return
}

// -----

func.func @gemm_inner(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>) {
  // expected-error @+2 {{'tcc.gemm' op inner dimensions differ: op(A) is [8, 16], op(B) is [32, 16]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.gemm %a, %b : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @gemm_bias(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>, %c: tensor<16xf32>) {
  // expected-error @+2 {{'tcc.gemm' op C of shape [16] does not broadcast to [8, 32]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.gemm %a, %b, %c {transB = 1 : i64} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @gemm_trans(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+2 {{'tcc.gemm' op transA and transB must be 0 or 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.gemm %a, %b {transA = 2 : i64} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @softmax_axis(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{'tcc.softmax' op axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.softmax %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @layernorm_scale(%x: tensor<4x16x32xf32>, %g: tensor<16xf32>) {
  // expected-error @+2 {{'tcc.layer_normalization' op scale/bias of shape [16] does not broadcast to the normalized shape [32]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y, %m, %r = tcc.layer_normalization %x, %g : (tensor<4x16x32xf32>, tensor<16xf32>) -> (tensor<4x16x32xf32>, tensor<4x16x1xf32>, tensor<4x16x1xf32>)
  return
}

// -----

func.func @layernorm_stash(%x: tensor<4x32xf32>, %g: tensor<32xf32>) {
  // expected-error @+2 {{'tcc.layer_normalization' op stash_type 7 is not a floating-point type}}
  // expected-error @+1 {{failed to infer returned types}}
  %y, %m, %r = tcc.layer_normalization %x, %g {stash_type = 7 : i64} : (tensor<4x32xf32>, tensor<32xf32>) -> (tensor<4x32xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return
}

// -----

func.func @reduce_repeated_axis(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{reduction: axis -1 appears more than once}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.reduce_sum %x {axes = array<i64: 1, -1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  return
}

// -----

func.func @gather_axis(%x: tensor<4x16xf32>, %i: tensor<3xi64>) {
  // expected-error @+2 {{'tcc.gather' op axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.gather %x, %i {axis = 2 : i64} : (tensor<4x16xf32>, tensor<3xi64>) -> tensor<4x3xf32>
  return
}

// -----

func.func @gather_float_indices(%x: tensor<4x16xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = tcc.gather %x, %i : (tensor<4x16xf32>, tensor<3xf32>) -> tensor<3x16xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.reshape' op cannot reshape [4, 16] (64 elements) to [5, 16] (80 elements)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.reshape %x {shape = array<i64: 5, 16>} : (tensor<4x16xf32>) -> tensor<5x16xf32>
  return
}

// -----

func.func @reshape_two_minus_one(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.reshape' op shape [-1, -1] has more than one -1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.reshape %x {shape = array<i64: -1, -1>} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.transpose' op perm [0, 0] is not a permutation of rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.transpose %x {perm = array<i64: 0, 0>} : (tensor<4x16xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @unsqueeze_axes(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.unsqueeze' op axes [0, 4] are invalid for result rank 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.unsqueeze %x {axes = array<i64: 0, 4>} : (tensor<4x16xf32>) -> tensor<1x4x16x1xf32>
  return
}

// -----

func.func @squeeze_not_one(%x: tensor<4x1xf32>) {
  // expected-error @+2 {{'tcc.squeeze' op cannot squeeze axis 0 of size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.squeeze %x {axes = array<i64: 0>} : (tensor<4x1xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @slice_step_zero(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.slice' op steps must not be 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.slice %x {starts = array<i64: 0>, ends = array<i64: 2>, steps = array<i64: 0>} : (tensor<4x16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @slice_lengths(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.slice' op starts, ends, axes and steps must have the same length}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2>} : (tensor<4x16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @split_sizes(%x: tensor<4x16xf32>) {
  // expected-error @+2 {{'tcc.split' op split sizes [8, 4] add up to 12, not to the axis size 16}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = tcc.split %x {axis = 1 : i64, split = array<i64: 8, 4>} : (tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<4x4xf32>)
  return
}

// -----

func.func @concat_shapes(%a: tensor<4x16xf32>, %b: tensor<3x8xf32>) {
  // expected-error @+2 {{'tcc.concat' op input shapes [4, 16] and [3, 8] differ outside the concatenation axis}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.concat %a, %b {axis = 1 : i64} : (tensor<4x16xf32>, tensor<3x8xf32>) -> tensor<4x24xf32>
  return
}

// -----

func.func @expand_shape(%x: tensor<3x2xf32>) {
  // expected-error @+2 {{'tcc.expand' op cannot expand [3, 2] to [4, 3]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.expand %x {shape = array<i64: 4, 3>} : (tensor<3x2xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @constant_of_shape_value() {
  // expected-error @+2 {{'tcc.constant_of_shape' op value must have one element}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.constant_of_shape {shape = array<i64: 2>, value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  return
}

// -----

func.func @where_types(%c: tensor<3xi1>, %x: tensor<3xf32>, %y: tensor<3xf16>) {
  // expected-error @+2 {{'tcc.where' op x and y have different element types}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.where %c, %x, %y : (tensor<3xi1>, tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

func.func @dropout_ratio(%x: tensor<3xf32>) {
  // expected-error @+1 {{'tcc.dropout' op ratio must be in [0, 1), got 1.5}}
  %y, %m = tcc.dropout %x {ratio = 1.5 : f32} : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi1>)
  return
}

// -----

func.func @random_keep_state(%s: tensor<3xi64>) {
  // expected-error @+1 {{'tcc.random_keep' op the random state must be a tensor<2xi64> ([seed, counter]), got tensor<3xi64>}}
  %k = tcc.random_keep %s {ratio = 0.1 : f32, stream = 0 : i64, shape = array<i64: 4>} : (tensor<3xi64>) -> tensor<4xi1>
  return
}

// -----

func.func @random_keep_ratio(%s: tensor<2xi64>) {
  // expected-error @+1 {{'tcc.random_keep' op the dropout ratio must be in (0, 1), got 0}}
  %k = tcc.random_keep %s {ratio = 0.0 : f32, stream = 0 : i64, shape = array<i64: 4>} : (tensor<2xi64>) -> tensor<4xi1>
  return
}

// -----

func.func @random_keep_stream(%s: tensor<2xi64>) {
  // expected-error @+1 {{'tcc.random_keep' op the dropout stream must be non-negative, got -1}}
  %k = tcc.random_keep %s {ratio = 0.5 : f32, stream = -1 : i64, shape = array<i64: 4>} : (tensor<2xi64>) -> tensor<4xi1>
  return
}

// -----

func.func @random_keep_shape(%s: tensor<2xi64>) {
  // expected-error @+2 {{'tcc.random_keep' op inferred type(s) 'tensor<2x4xi1>' are incompatible with return type(s) of operation 'tensor<4x2xi1>'}}
  // expected-error @+1 {{'tcc.random_keep' op failed to infer returned types}}
  %k = tcc.random_keep %s {ratio = 0.5 : f32, stream = 0 : i64, shape = array<i64: 2, 4>} : (tensor<2xi64>) -> tensor<4x2xi1>
  return
}

// -----

func.func @sce_reduction(%s: tensor<8x5xf32>, %l: tensor<8xi64>) {
  // expected-error @+1 {{'tcc.softmax_cross_entropy_loss' op reduction must be "none", "sum" or "mean", got "average"}}
  %o, %lp = tcc.softmax_cross_entropy_loss %s, %l {reduction = "average"} : (tensor<8x5xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x5xf32>)
  return
}

// -----

func.func @sce_labels(%s: tensor<8x5x3xf32>, %l: tensor<8xi64>) {
  // expected-error @+2 {{'tcc.softmax_cross_entropy_loss' op labels of shape [8] do not match scores [8, 5, 3] (expected [8, 3])}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %lp = tcc.softmax_cross_entropy_loss %s, %l : (tensor<8x5x3xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x5x3xf32>)
  return
}

// -----

func.func @sce_weights(%s: tensor<8x5xf32>, %l: tensor<8xi64>, %w: tensor<4xf32>) {
  // expected-error @+2 {{'tcc.softmax_cross_entropy_loss' op weights must be a [C] = [5] tensor of the scores' element type}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %lp = tcc.softmax_cross_entropy_loss %s, %l, %w : (tensor<8x5xf32>, tensor<8xi64>, tensor<4xf32>) -> (tensor<f32>, tensor<8x5xf32>)
  return
}

// -----

func.func @logical_needs_bool(%a: tensor<3xi64>) {
  // expected-error @+2 {{'tcc.and' op operands must be i1 tensors}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = tcc.and %a, %a : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  return
}

// -----

func.func @attention_head_sizes(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x6xf32>, %v: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{'tcc.attention' op query and key head sizes differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x6xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_heads(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{'tcc.attention' op query, key and value must have the same [B, H]}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_grad_lse(%q: tensor<1x2x4x8xf32>, %l: tensor<1x2x8xf32>) {
  // expected-error @+2 {{'tcc.attention_grad' op lse must be [B, H, Sq] of the query's type}}
  // expected-error @+1 {{failed to infer returned types}}
  %a, %b, %c = tcc.attention_grad %q, %q, %q, %q, %l, %q {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return
}

// -----

func.func @attention_bias_keys(%q: tensor<1x2x4x8xf32>, %m: tensor<1x1x1x3xf32>) {
  // expected-error @+2 {{'tcc.attention' op bias must be [B or 1, H or 1, Sq or 1, Sk] of the query's type}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x1x3xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_heads_width(%q: tensor<1x4x9xf32>) {
  // expected-error @+2 {{'tcc.attention' op the query's and value's widths must be multiples of heads}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %q, %q, %q {heads = 2 : i64, scale = 1.0 : f64} : (tensor<1x4x9xf32>, tensor<1x4x9xf32>, tensor<1x4x9xf32>) -> (tensor<1x4x9xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_token_major_rank(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{'tcc.attention' op with heads, query, key and value must be [B, S, H*D] tensors}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %q, %q, %q {heads = 2 : i64, scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_packed_two_values(%a: tensor<1x4x24xf32>, %b: tensor<1x4x24xf32>) {
  // expected-error @+2 {{'tcc.attention' op with columns, query, key and value must be one value}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %a, %b, %a {heads = 2 : i64, columns = array<i64: 0, 8, 16>, scale = 1.0 : f64} : (tensor<1x4x24xf32>, tensor<1x4x24xf32>, tensor<1x4x24xf32>) -> (tensor<1x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_packed_overlap(%a: tensor<1x4x24xf32>) {
  // expected-error @+2 {{'tcc.attention' op columns must be 0, C/3 and 2C/3 in some order, with C a multiple of 3 * heads}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %a, %a, %a {heads = 2 : i64, columns = array<i64: 0, 8, 8>, scale = 1.0 : f64} : (tensor<1x4x24xf32>, tensor<1x4x24xf32>, tensor<1x4x24xf32>) -> (tensor<1x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_columns_without_heads(%a: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{'tcc.attention' op columns (the packed layout) needs heads}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %a, %a, %a {columns = array<i64: 0, 8, 16>, scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @attention_grad_packed_results(%a: tensor<1x4x24xf32>, %o: tensor<1x4x8xf32>, %l: tensor<1x2x4xf32>) {
  // expected-error @+2 {{'tcc.attention_grad' op inferred type(s) 'tensor<1x4x24xf32>' are incompatible with return type(s) of operation}}
  // expected-error @+1 {{failed to infer returned types}}
  %a1, %a2, %a3 = tcc.attention_grad %a, %a, %a, %o, %l, %o {heads = 2 : i64, columns = array<i64: 0, 8, 16>, scale = 1.0 : f64} : (tensor<1x4x24xf32>, tensor<1x4x24xf32>, tensor<1x4x24xf32>, tensor<1x4x8xf32>, tensor<1x2x4xf32>, tensor<1x4x8xf32>) -> (tensor<1x4x24xf32>, tensor<1x4x24xf32>, tensor<1x4x24xf32>)
  return
}

// -----

func.func @attention_scalar(%x: tensor<f32>) {
  // expected-error @+2 {{'tcc.attention' op query, key and value must be [B, H, S, D] tensors}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = tcc.attention %x, %x, %x {scale = 1.0 : f64} : (tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

func.func @attention_softcap_not_positive(%q: tensor<1x2x3x4xf32>) {
  // expected-error @+2 {{'tcc.attention' op softcap must be positive}}
  // expected-error @+1 {{'tcc.attention' op failed to infer returned types}}
  %o, %l = tcc.attention %q, %q, %q {scale = 0.5 : f64, softcap = 0.0 : f64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3xf32>)
  return
}

// -----

func.func @attention_dropout_without_rng(%q: tensor<1x2x3x4xf32>) {
  // expected-error @+2 {{'tcc.attention' op dropout needs all of `dropout`, `dropout_stream` and the rng operand}}
  // expected-error @+1 {{'tcc.attention' op failed to infer returned types}}
  %o, %l = tcc.attention %q, %q, %q {scale = 0.5 : f64, dropout = 0.1 : f32, dropout_stream = 0 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3xf32>)
  return
}

// -----

func.func @attention_dropout_ratio(%q: tensor<1x2x3x4xf32>, %rng: tensor<2xi64>) {
  // expected-error @+2 {{'tcc.attention' op the dropout ratio must be in (0, 1), got 1}}
  // expected-error @+1 {{'tcc.attention' op failed to infer returned types}}
  %o, %l = tcc.attention %q, %q, %q rng %rng {scale = 0.5 : f64, dropout = 1.0 : f32, dropout_stream = 0 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<2xi64>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3xf32>)
  return
}

// -----

// A fusion's kind is checked against its body.
func.func @fusion_loop_with_reduction(%a: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'tcc.fusion' op is a 'loop' fusion but its body has a reduction (a 'reduction' fusion)}}
  %r = tcc.fusion loop(%a) : (tensor<4x8xf32>) -> tensor<4x1xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = tcc.reduce_sum %x {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    tcc.yield %s : tensor<4x1xf32>
  }
  return %r : tensor<4x1xf32>
}

// -----

func.func @fusion_gemm_without_matmul(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tcc.fusion' op is a 'gemm' fusion but its body has 0 tcc.matmul ops (a GEMM fusion has one)}}
  %r = tcc.fusion gemm(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %e = tcc.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
    tcc.yield %e : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @fusion_loop_with_matmul(%a: tensor<4x8xf32>, %b: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'tcc.fusion' op is a 'loop' fusion but its body has a tcc.matmul (only a 'gemm' fusion has one)}}
  %r = tcc.fusion loop(%a, %b) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<8x8xf32>):
    %m = tcc.matmul %x, %y : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    tcc.yield %m : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @fusion_move_without_split(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'tcc.fusion' op is a 'move' fusion but its body has no tcc.split or tcc.concat}}
  %r = tcc.fusion move(%a) : (tensor<4x8xf32>) -> tensor<8x4xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %t = tcc.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    tcc.yield %t : tensor<8x4xf32>
  }
  return %r : tensor<8x4xf32>
}

// -----

func.func @fusion_unknown_kind(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{custom op 'tcc.fusion' expected string or keyword containing one of the following enum values for attribute 'kind' [loop, reduction, gemm, move]}}
  %r = tcc.fusion conv(%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    tcc.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// A layout without every required field is refused by its parser (the
// host fields are optional: omitted without host tiers).
// expected-error @+1 {{struct is missing required parameter: workspace_bytes}}
func.func @layout_missing_field() attributes {tcc.layout = #tcc.layout<arena_bytes = 256, planned_bytes = 256, device_reserve_bytes = 0, params = [], grads = [], state = [], inputs = [], results = [], param_bytes = 0, grad_bytes = 0, state_bytes = 0, input_bytes = 0, output_bytes = 0, temporary_bytes = 0, temporary_bytes_unshared = 0, saved_activation_bytes = 0, seed = -1, rng = -1, peak_live_bytes = 0, peak_op = "", peak_values = [], shadows = [], shadow_bytes = 0, workspace = -1>} {
  return
}

// -----

// expected-error @+1 {{the cuda target stores floats in f16 and needs its architecture (e.g. arch = 90)}}
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f32, arch = 90>} {
}

// -----

// expected-error @+1 {{the cpu target stores floats in f32 or f64 and has arch = 0}}
module attributes {tcc.target = #tcc.target<kind = cpu, storage = f16, arch = 0>} {
}

// -----

// expected-error @+1 {{'tcc.target' must be a #tcc.target, got "cuda"}}
module attributes {tcc.target = "cuda"} {
}

// -----

// expected-error @+1 {{'tcc.layout' must be a #tcc.layout, got {arena_bytes = 256 : i64}}}
func.func @stale_layout() attributes {tcc.layout = {arena_bytes = 256 : i64}} {
  return
}

// -----

// Host tiers: an accumulator on the host needs its parameter's state there.
// expected-error @+1 {{argument 1 has its gradient accumulator on the host but not its optimizer state: host_grads must be a subset of host_state}}
func.func @tiers_grads_without_state() attributes {tcc.tiers = #tcc.tiers<host_state = [0], host_grads = [1], pcie_mbps = 31500, host_mbps = 30000, device_gflops = 71000, device_mbps = 936000, host_budget = 0>} {
  return
}

// -----

// expected-error @+1 {{the rates of #tcc.tiers must be positive}}
func.func @tiers_no_bandwidth() attributes {tcc.tiers = #tcc.tiers<host_state = [], host_grads = [], pcie_mbps = 0, host_mbps = 30000, device_gflops = 71000, device_mbps = 936000, host_budget = 0>} {
  return
}

// -----

// expected-error @+1 {{'tcc.tiers' must be a #tcc.tiers, got}}
func.func @tiers_untyped() attributes {tcc.tiers = {host_state = [0]}} {
  return
}

// -----

func.func @swap_read_by_other(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tcc.swap_out' op swap 0 is read by tcc.exp; only tcc.swap_in ops of the same swap may read it}}
  %h = tcc.swap_out %x swap 0 : tensor<4xf32>
  %y = tcc.exp %h : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @swap_in_other_swap(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tcc.swap_out' op swap 0 is read by tcc.swap_in}}
  %h = tcc.swap_out %x swap 0 : tensor<4xf32>
  %y = tcc.swap_in %h swap 1 : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @swap_in_unswapped(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tcc.swap_in' op swap 1 reads a value that no tcc.swap_out of the same swap made}}
  %y = tcc.swap_in %x swap 1 : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @swap_wait_unswapped(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tcc.swap_wait' op swap 2: the value is neither copied out by a tcc.swap_out nor copied back by a tcc.swap_in of that swap}}
  tcc.swap_wait %x swap 2 : tensor<4xf32>
  return
}

// -----

func.func @swap_in_before_out_wait(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = tcc.swap_out %x swap 0 : tensor<4xf32>
  // expected-error @+1 {{'tcc.swap_in' op swap 0 is copied back before a tcc.swap_wait of its copy out}}
  %y = tcc.swap_in %h swap 0 : tensor<4xf32>
  tcc.swap_wait %x swap 0 : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @swap_wait_wrong_swap(%x: tensor<4xf32>) -> tensor<4xf32> {
  %h = tcc.swap_out %x swap 0 : tensor<4xf32>
  tcc.swap_wait %x swap 0 : tensor<4xf32>
  %y = tcc.swap_in %h swap 0 : tensor<4xf32>
  // expected-error @+1 {{'tcc.swap_wait' op waits for swap 1 on the result of swap 0}}
  tcc.swap_wait %y swap 1 : tensor<4xf32>
  return %y : tensor<4xf32>
}
