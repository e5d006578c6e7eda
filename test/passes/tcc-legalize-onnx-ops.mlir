// RUN: tcc-opt %s --split-input-file --tcc-legalize --verify-diagnostics | FileCheck %s
// The ImportOnly ONNX ops left on run-time values become core ops
// (passes/legalize/LowerOnnxOps.cpp).

// CHECK-LABEL: func.func @compare_select
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<3xf32>)
// CHECK-DAG: %[[LT:.+]] = tcc.less %[[A]], %[[B]]
// CHECK-DAG: %[[EQ:.+]] = tcc.equal %[[A]], %[[B]]
// CHECK: %[[LE:.+]] = tcc.or %[[LT]], %[[EQ]]
// CHECK: %[[GT:.+]] = tcc.greater %[[A]], %[[B]]
// CHECK: %[[MAX:.+]] = tcc.where %[[GT]], %[[A]], %[[B]]
// CHECK: %[[LT2:.+]] = tcc.less %[[A]], %[[B]]
// CHECK: %[[MIN:.+]] = tcc.where %[[LT2]], %[[A]], %[[B]]
// CHECK: return %[[LE]], %[[MAX]], %[[MIN]]
func.func @compare_select(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %le = tcc.less_or_equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %max = tcc.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %min = tcc.min %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %le, %max, %min : tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// The exporters' guard after an attention softmax goes when the mask leaves
// a finite score in every row (here a causal one); the softmax feeds the
// matmul directly.
// CHECK-LABEL: func.func @nan_guard_causal
// CHECK-NOT: tcc.is_nan
// CHECK-NOT: tcc.not
// CHECK: %[[P:.+]] = tcc.softmax
// CHECK: tcc.matmul %[[P]]
func.func @nan_guard_causal(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x3xf32>, %v: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %mask = tcc.constant {value = dense<[[0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : () -> tensor<3x3xf32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %x = tcc.add %s, %mask : (tensor<2x3x3xf32>, tensor<3x3xf32>) -> tensor<2x3x3xf32>
  %p = tcc.softmax %x : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %nan = tcc.is_nan %p : (tensor<2x3x3xf32>) -> tensor<2x3x3xi1>
  %g = tcc.where %nan, %zero, %p : (tensor<2x3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o = tcc.matmul %g, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %o : tensor<2x3x4xf32>
}

// -----

// A padding mask from an input, as Hugging Face writes it for a padded
// batch: where(keep, 0, float32's lowest). Every element is finite whatever
// `keep` holds, so no row can be NaN and the guard goes.
// CHECK-LABEL: func.func @nan_guard_input_mask
// CHECK-NOT: tcc.not
// CHECK: %[[P:.+]] = tcc.softmax
// CHECK: tcc.matmul %[[P]]
func.func @nan_guard_input_mask(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x3xf32>, %v: tensor<2x3x4xf32>, %keep: tensor<2x1x3xi1> {tcc.input = "keep"}) -> tensor<2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %lowest = tcc.constant {value = dense<0xFF7FFFFF> : tensor<f32>} : () -> tensor<f32>
  %mask = tcc.where %keep, %zero, %lowest : (tensor<2x1x3xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x3xf32>
  %x = tcc.add %s, %mask : (tensor<2x3x3xf32>, tensor<2x1x3xf32>) -> tensor<2x3x3xf32>
  %p = tcc.softmax %x : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %nan = tcc.is_nan %p : (tensor<2x3x3xf32>) -> tensor<2x3x3xi1>
  %g = tcc.where %nan, %zero, %p : (tensor<2x3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o = tcc.matmul %g, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %o : tensor<2x3x4xf32>
}

// -----

// In fp16 a finite mask does not keep the sum finite (-65504 plus a score
// below -16 is -inf): the guard stays.
// CHECK-LABEL: func.func @nan_guard_input_mask_f16
// CHECK: tcc.not
func.func @nan_guard_input_mask_f16(%q: tensor<2x3x4xf16>, %kt: tensor<2x4x3xf16>, %v: tensor<2x3x4xf16>, %keep: tensor<2x1x3xi1> {tcc.input = "keep"}) -> tensor<2x3x4xf16> {
  %s = tcc.matmul %q, %kt : (tensor<2x3x4xf16>, tensor<2x4x3xf16>) -> tensor<2x3x3xf16>
  %zero = tcc.constant {value = dense<0.0> : tensor<f16>} : () -> tensor<f16>
  %lowest = tcc.constant {value = dense<-65504.0> : tensor<f16>} : () -> tensor<f16>
  %mask = tcc.where %keep, %zero, %lowest : (tensor<2x1x3xi1>, tensor<f16>, tensor<f16>) -> tensor<2x1x3xf16>
  %x = tcc.add %s, %mask : (tensor<2x3x3xf16>, tensor<2x1x3xf16>) -> tensor<2x3x3xf16>
  %p = tcc.softmax %x : (tensor<2x3x3xf16>) -> tensor<2x3x3xf16>
  %nan = tcc.is_nan %p : (tensor<2x3x3xf16>) -> tensor<2x3x3xi1>
  %g = tcc.where %nan, %zero, %p : (tensor<2x3x3xi1>, tensor<f16>, tensor<2x3x3xf16>) -> tensor<2x3x3xf16>
  %o = tcc.matmul %g, %v : (tensor<2x3x3xf16>, tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  return %o : tensor<2x3x4xf16>
}

// -----

// The same mask with -inf where it hides: a query whose keys are all
// hidden is NaN, so the guard stays.
// CHECK-LABEL: func.func @nan_guard_input_mask_inf
// CHECK: tcc.not
func.func @nan_guard_input_mask_inf(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x3xf32>, %v: tensor<2x3x4xf32>, %keep: tensor<2x1x3xi1> {tcc.input = "keep"}) -> tensor<2x3x4xf32> {
  %s = tcc.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %ninf = tcc.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %mask = tcc.where %keep, %zero, %ninf : (tensor<2x1x3xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x3xf32>
  %x = tcc.add %s, %mask : (tensor<2x3x3xf32>, tensor<2x1x3xf32>) -> tensor<2x3x3xf32>
  %p = tcc.softmax %x : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %nan = tcc.is_nan %p : (tensor<2x3x3xf32>) -> tensor<2x3x3xi1>
  %g = tcc.where %nan, %zero, %p : (tensor<2x3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o = tcc.matmul %g, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %o : tensor<2x3x4xf32>
}

// -----

// A mask with a wholly -inf row makes that row NaN, and so may a mask
// computed at run time (here the scores are an argument: anything): the
// guard stays, as not(equal(p, p)).
// CHECK-LABEL: func.func @nan_guard_kept
// CHECK: %[[P:.+]] = tcc.softmax
// CHECK: %[[EQ:.+]] = tcc.equal %[[P]], %[[P]]
// CHECK: %[[NAN:.+]] = tcc.not %[[EQ]]
// CHECK: tcc.where %[[NAN]], %{{.+}}, %[[P]]
func.func @nan_guard_kept(%s: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %mask = tcc.constant {value = dense<[[0.0, 0.0], [0xFF800000, 0xFF800000]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %zero = tcc.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %x = tcc.add %s, %mask : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %p = tcc.softmax %x : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %nan = tcc.is_nan %p : (tensor<2x2xf32>) -> tensor<2x2xi1>
  %g = tcc.where %nan, %zero, %p : (tensor<2x2xi1>, tensor<f32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %g : tensor<2x2xf32>
}

// -----

// Pad: a negative amount slices, a positive one concatenates a constant
// block of the fill value (HF's labels shift: one -100 column at the end).
// CHECK-LABEL: func.func @pad
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x16xi64>,
// CHECK-DAG: %[[FILL:.+]] = tcc.constant {value = dense<-100> : tensor<2x1xi64>}
// CHECK: %[[R:.+]] = tcc.concat %[[X]], %[[FILL]] {axis = 1 : i64} : (tensor<2x16xi64>, tensor<2x1xi64>) -> tensor<2x17xi64>
// CHECK: %[[S:.+]] = tcc.slice %{{.+}} {axes = array<i64: 0>, ends = array<i64: 3>, starts = array<i64: 1>}
// CHECK: tcc.concat %{{.+}}, %[[S]], %{{.+}} {axis = 1 : i64}
func.func @pad(%x: tensor<2x16xi64>, %y: tensor<4x3xf32>) -> (tensor<2x17xi64>, tensor<2x6xf32>) {
  %r = tcc.pad %x {pads = array<i64: 0, 0, 0, 1>, value = dense<-100> : tensor<i64>} : (tensor<2x16xi64>) -> tensor<2x17xi64>
  %s = tcc.pad %y {pads = array<i64: -1, 2, -1, 1>} : (tensor<4x3xf32>) -> tensor<2x6xf32>
  return %r, %s : tensor<2x17xi64>, tensor<2x6xf32>
}

// -----

// CHECK-LABEL: func.func @trilu
// CHECK: %[[M:.+]] = tcc.constant {value = dense<{{\[\[}}true, false, false], [true, true, false]]> : tensor<2x3xi1>}
// CHECK: tcc.where %[[M]], %{{.+}}, %{{.+}} : (tensor<2x3xi1>, tensor<4x2x3xf32>, tensor<f32>) -> tensor<4x2x3xf32>
func.func @trilu(%x: tensor<4x2x3xf32>) -> tensor<4x2x3xf32> {
  %r = tcc.trilu %x {upper = 0 : i64} : (tensor<4x2x3xf32>) -> tensor<4x2x3xf32>
  return %r : tensor<4x2x3xf32>
}

// -----

// GatherElements on run-time values: a select against an iota over a new
// axis, summed (negative indices wrapped first).
// CHECK-LABEL: func.func @gather_elements
// CHECK: %[[NEG:.+]] = tcc.less %[[I:[a-z0-9]+]], %{{.+}}
// CHECK: %[[IDX:.+]] = tcc.where %[[NEG]]
// CHECK: %[[IU:.+]] = tcc.unsqueeze %[[IDX]] {axes = array<i64: 2>} : (tensor<2x2xi64>) -> tensor<2x2x1xi64>
// CHECK: %[[HIT:.+]] = tcc.equal %[[IU]], %{{.+}} : (tensor<2x2x1xi64>, tensor<1x1x3xi64>) -> tensor<2x2x3xi1>
// CHECK: %[[DU:.+]] = tcc.unsqueeze %{{.+}} {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x1x3xf32>
// CHECK: %[[SEL:.+]] = tcc.where %[[HIT]], %[[DU]], %{{.+}} : (tensor<2x2x3xi1>, tensor<2x1x3xf32>, tensor<f32>) -> tensor<2x2x3xf32>
// CHECK: tcc.reduce_sum %[[SEL]] {axes = array<i64: 2>, keepdims = 0 : i64} : (tensor<2x2x3xf32>) -> tensor<2x2xf32>
func.func @gather_elements(%d: tensor<2x3xf32>, %i: tensor<2x2xi64>) -> tensor<2x2xf32> {
  %r = tcc.gather_elements %d, %i {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x2xi64>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}

// -----

// An ImportOnly op no pattern lowers is one error, by name: here indices
// that are larger than the data on an axis they do not index.
func.func @gather_elements_bad(%d: tensor<2x3xf32>, %i: tensor<4x3xi64>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'tcc.gather_elements' on a value computed at run time is not supported yet}}
  %r = tcc.gather_elements %d, %i {axis = 1 : i64} : (tensor<2x3xf32>, tensor<4x3xi64>) -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}
