// RUN: tcc-opt %s --split-input-file --verify-diagnostics
// Malformed kernels are rejected with a message that says what is wrong.

func.func @alias(%x: memref<4x8xf32>) {
  // expected-error @+1 {{names 16 elements of a buffer of 32}}
  %a = tcck.alias %x : memref<4x8xf32> to memref<16xf32>
  return
}

// -----

func.func @arity(%x: memref<4xf32>) {
  // expected-error @+1 {{'Add' takes 2 inputs, not 1}}
  tcck.ew "Add" %x, %x : memref<4xf32>, memref<4xf32>
  return
}

// -----

func.func @kind(%x: memref<4xf32>) {
  // expected-error @+1 {{names no elementwise computation: 'Frobnicate'}}
  tcck.ew "Frobnicate" %x, %x : memref<4xf32>, memref<4xf32>
  return
}

// -----

func.func @option(%x: memref<4x8xf32>) {
  // expected-error @+1 {{'softmax' needs the option 'log'}}
  tcck.call softmax outs(%x : memref<4x8xf32>) ins(%x : memref<4x8xf32>) {axis = 1 : i64}
  return
}

// -----

func.func @outputs(%x: memref<4x8xf32>) {
  // expected-error @+1 {{'layer_norm' writes 3 outputs, not 1}}
  tcck.call layer_norm outs(%x : memref<4x8xf32>) ins(%x, %x : memref<4x8xf32>, memref<4x8xf32>) {axis = 1 : i64, epsilon = 1.0e-5 : f64}
  return
}

// -----

func.func @copy(%x: memref<4xf32>, %y: memref<8xf32>) {
  // expected-error @+1 {{copies 8 elements into a buffer of 4}}
  tcck.copy %x, %y : memref<4xf32>, memref<8xf32>
  return
}

// -----

func.func @role(%x: memref<4xf32>) {
  tcck.loop ins(%x : memref<4xf32>) outs(%x : memref<4xf32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>] {
  ^bb0(%a: f32):
    // expected-error @+1 {{in a tcck.loop has no 'tcck.role'}}
    %e = tcck.scalar "Exp" %a : (f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @yield(%x: memref<4xf32>) {
  // expected-error @+1 {{has a body that does not yield one value per output}}
  tcck.loop ins(%x : memref<4xf32>) outs(%x, %x : memref<4xf32>, memref<4xf32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>] {
  ^bb0(%a: f32):
    %e = tcck.scalar "Exp" %a {tcck.role = "element", tcck.stage = 0 : i64} : (f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @map_count(%x: memref<4xf32>) {
  // expected-error @+1 {{has 1 indexing maps for 2 inputs and outputs}}
  tcck.loop ins(%x : memref<4xf32>) outs(%x : memref<4xf32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>] {
  ^bb0(%a: f32):
    %e = tcck.scalar "Exp" %a {tcck.role = "element", tcck.stage = 0 : i64} : (f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @map_rank(%x: memref<4x8xf32>, %b: memref<8xf32>) {
  // expected-error @+1 {{has an indexing map for input 1 with 2 results; its buffer has rank 1}}
  tcck.loop ins(%x, %b : memref<4x8xf32>, memref<8xf32>) outs(%x : memref<4x8xf32>) space [4, 8] rows false passes 0
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>] {
  ^bb0(%a: f32, %c: f32):
    %e = tcck.scalar "Add" %a, %c {tcck.role = "element", tcck.stage = 0 : i64} : (f32, f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @map_size(%x: memref<4x8xf32>, %b: memref<4xf32>) {
  // expected-error @+1 {{maps dimension 0 of input 1 (size 4) to dimension 1 of the space (size 8)}}
  tcck.loop ins(%x, %b : memref<4x8xf32>, memref<4xf32>) outs(%x : memref<4x8xf32>) space [4, 8] rows false passes 0
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>] {
  ^bb0(%a: f32, %c: f32):
    %e = tcck.scalar "Add" %a, %c {tcck.role = "element", tcck.stage = 0 : i64} : (f32, f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @map_constant(%x: memref<4x8xf32>, %b: memref<8xf32>) {
  // expected-error @+1 {{maps dimension 0 of input 1 to something other than a dimension of the space or 0 for a size-1 dimension}}
  tcck.loop ins(%x, %b : memref<4x8xf32>, memref<8xf32>) outs(%x : memref<4x8xf32>) space [4, 8] rows false passes 0
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1 + 1)>, affine_map<(d0, d1) -> (d0, d1)>] {
  ^bb0(%a: f32, %c: f32):
    %e = tcck.scalar "Add" %a, %c {tcck.role = "element", tcck.stage = 0 : i64} : (f32, f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @tensor_body(%x: memref<4xf32>) {
  // expected-error @+1 {{has a body argument of type 'tensor<4xf32>'; a scalar expected}}
  tcck.loop ins(%x : memref<4xf32>) outs(%x : memref<4xf32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>] {
  ^bb0(%a: tensor<4xf32>):
    %e = tcc.exp %a {tcck.role = "element", tcck.stage = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    tcck.yield %e : tensor<4xf32>
  }
  return
}

// -----

func.func @arity(%x: memref<4xf32>) {
  tcck.loop ins(%x : memref<4xf32>) outs(%x : memref<4xf32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>] {
  ^bb0(%a: f32):
    // expected-error @+1 {{'Add' takes 2 operands, not 1}}
    %e = tcck.scalar "Add" %a {tcck.role = "element", tcck.stage = 0 : i64} : (f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @reduce_role(%x: memref<4xf32>, %s: memref<f32>) {
  tcck.loop ins(%x : memref<4xf32>) outs(%s : memref<f32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>] {
  ^bb0(%a: f32):
    // expected-error @+1 {{has the role 'element'; a tcck.reduce's role is a reduction}}
    %e = tcck.reduce %a dims [0] {tcck.role = "element", tcck.stage = 0 : i64} : f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @row_reduction(%x: memref<4x8xf32>, %s: memref<4x1xf32>) {
  tcck.loop ins(%x : memref<4x8xf32>) outs(%s : memref<4x1xf32>) space [4, 8] rows true passes 0
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>] {
  ^bb0(%a: f32):
    // expected-error @+1 {{is a row reduction of a loop that is not over rows, or not over the last dimension}}
    %e = tcck.reduce %a dims [0] {tcck.role = "row_reduction", tcck.stage = 0 : i64} : f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @reduced_output(%x: memref<4x8xf32>, %s: memref<4xf32>) {
  // expected-error @+1 {{writes output 0 (a reduction value) through a map that does not lay it out over the dimensions its reduction keeps}}
  tcck.loop ins(%x : memref<4x8xf32>) outs(%s : memref<4xf32>) space [4, 8] rows false passes 0
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>] {
  ^bb0(%a: f32):
    %e = tcck.reduce %a dims [0] {tcck.role = "reduction", tcck.stage = 0 : i64} : f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @element_output(%x: memref<8x8xf32>) {
  // expected-error @+1 {{writes output 0 (an element value) through a map that does not lay it out as the space}}
  tcck.loop ins(%x : memref<8x8xf32>) outs(%x : memref<8x8xf32>) space [8, 8] rows false passes 0
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1, d0)>] {
  ^bb0(%a: f32):
    %e = tcck.scalar "Exp" %a {tcck.role = "element", tcck.stage = 0 : i64} : (f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

func.func @scalar_outside(%a: f32) {
  // expected-error @+1 {{expects parent op to be one of 'tcck.loop, tcck.matmul'}}
  %e = tcck.scalar "Exp" %a : (f32) -> f32
  return
}

// -----

func.func @epilogue(%x: memref<4x8xf32>, %w: memref<8x8xf32>, %b: memref<8xf32>) {
  // expected-error @+1 {{has an epilogue of 1 arguments; it takes the product and 1 epilogue inputs}}
  tcck.matmul outs(%x : memref<4x8xf32>) ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>)
      epilogue(%b : memref<8xf32>) maps [affine_map<(d0, d1) -> (d1)>] {
  ^bb0(%p: f32):
    tcck.yield %p : f32
  } {trans_lhs = false, trans_rhs = false}
  return
}

// -----

func.func @epilogue_map(%x: memref<4x8xf32>, %w: memref<8x8xf32>, %b: memref<4xf32>) {
  // expected-error @+1 {{maps dimension 0 of epilogue input 0 (size 4) to dimension 1 of the space (size 8)}}
  tcck.matmul outs(%x : memref<4x8xf32>) ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>)
      epilogue(%b : memref<4xf32>) maps [affine_map<(d0, d1) -> (d1)>] {
  ^bb0(%p: f32, %c: f32):
    %s = tcck.scalar "Add" %p, %c : (f32, f32) -> f32
    tcck.yield %s : f32
  } {trans_lhs = false, trans_rhs = false}
  return
}

// -----

func.func @epilogue_tensor(%x: memref<4x8xf32>, %w: memref<8x8xf32>, %b: memref<8xf32>) {
  // expected-error @+1 {{has a body argument of type 'tensor<4x8xf32>'; a scalar expected}}
  tcck.matmul outs(%x : memref<4x8xf32>) ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>)
      epilogue(%b : memref<8xf32>) maps [affine_map<(d0, d1) -> (d1)>] {
  ^bb0(%p: tensor<4x8xf32>, %c: tensor<8xf32>):
    %s = tcc.add %p, %c : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    tcck.yield %s : tensor<4x8xf32>
  } {trans_lhs = false, trans_rhs = false}
  return
}

// -----

func.func @cublaslt_aux(%x: memref<4x8xf16>, %w: memref<8x8xf16>, %b: memref<8xf16>) {
  // expected-error @+1 {{has a cuBLASLt epilogue whose operands or outputs are not its own}}
  tcck.matmul outs(%x : memref<4x8xf16>) ins(%x, %w : memref<4x8xf16>, memref<8x8xf16>)
      epilogue(%b : memref<8xf16>) maps [affine_map<(d0, d1) -> (d1)>] {
  ^bb0(%p: f32, %c: f32):
    %s = tcck.scalar "Add" %p, %c : (f32, f32) -> f32
    tcck.yield %s : f32
  } {cublaslt = #tcck.cublaslt<bias = 0, residual = -1, gelu = false, result = 0, aux = 1>,
     trans_lhs = false, trans_rhs = false}
  return
}

// -----

func.func @role_name(%x: memref<4xf32>) {
  tcck.loop ins(%x : memref<4xf32>) outs(%x : memref<4xf32>) space [4] rows false passes 0
      maps [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>] {
  ^bb0(%a: f32):
    // expected-error @+1 {{'tcck.role' must name a loop role}}
    %e = tcck.scalar "Exp" %a {tcck.role = "diagonal", tcck.stage = 0 : i64} : (f32) -> f32
    tcck.yield %e : f32
  }
  return
}

// -----

// The optimizer's updates (@apply): AdamW has two state buffers, SGD one.
func.func @update_state() attributes {tcck.apply} {
  %p = tcck.view 0 : memref<4xf32>
  %g = tcck.view 16 : memref<4xf32>
  // expected-error @+1 {{has 3 state buffers; 2 (AdamW) or 1 (SGD) expected}}
  tcck.update "w" param 0 master %p : memref<4xf32> grad %g : memref<4xf32> state(%g, %g, %g : memref<4xf32>, memref<4xf32>, memref<4xf32>)
  return
}

// -----

func.func @update_shape() attributes {tcck.apply} {
  %p = tcck.view 0 : memref<4xf32>
  %g = tcck.view 16 : memref<8xf32>
  // expected-error @+1 {{'s gradient and state must be 4 elements of 'f32', as the master}}
  tcck.update "w" param 0 master %p : memref<4xf32> grad %g : memref<8xf32> state(%p : memref<4xf32>)
  return
}

// -----

func.func @update_half() attributes {tcck.apply} {
  %p = tcck.view 0 : memref<4xf32>
  %h = tcck.view 64 : memref<4xf32>
  // expected-error @+1 {{'s working copy must be f16 with the master's 4 elements}}
  tcck.update "w" param 0 master %p : memref<4xf32> grad %p : memref<4xf32> state(%p : memref<4xf32>) half %h : memref<4xf32>
  return
}

// -----

func.func @update_tiers() attributes {tcck.apply} {
  %p = tcck.host_view 0 : memref<4xf32>
  %s = tcck.view 16 : memref<4xf32>
  %h = tcck.view 64 : memref<4xf16>
  // expected-error @+1 {{keeps its state in another memory than its master weights}}
  tcck.update "w" param 0 master %p : memref<4xf32> grad %s : memref<4xf32> state(%s : memref<4xf32>) half %h : memref<4xf16>
  return
}

// -----

func.func @update_host_grad() attributes {tcck.apply} {
  %p = tcck.view 0 : memref<4xf32>
  %g = tcck.host_view 0 : memref<4xf32>
  // expected-error @+1 {{has its gradient in host memory but its master on the device}}
  tcck.update "w" param 0 master %p : memref<4xf32> grad %g : memref<4xf32> state(%p : memref<4xf32>)
  return
}

// -----

func.func @update_host_no_half() attributes {tcck.apply} {
  %p = tcck.host_view 0 : memref<4xf32>
  // expected-error @+1 {{keeps its master in host memory but has no fp16 working copy}}
  tcck.update "w" param 0 master %p : memref<4xf32> grad %p : memref<4xf32> state(%p : memref<4xf32>)
  return
}

// -----

func.func @shard_host() attributes {tcck.apply} {
  %p = tcck.host_view 0 : memref<4xf32>
  // expected-error @+1 {{'s master weights must be in the arena: ZeRO-1 does not combine with host memory tiers}}
  tcck.shard_update "w" param 0 master %p : memref<4xf32> flat 0
  return
}

// -----

// expected-error @+1 {{'tcck.apply' is a unit attribute of a function}}
func.func @apply_attr() attributes {tcck.apply = 1 : i64} {
  return
}

// -----

func.func @await_negative_param() {
  // expected-error @+1 {{attribute 'param' failed to satisfy constraint}}
  tcck.await_weights "w" param -1
  return
}

// -----

func.func @copy_index(%x: memref<2x6xf32>, %a: memref<2x6xf32>) {
  // expected-error @+1 {{copy 0 names input 1 and output 0 of 1 and 1}}
  tcck.copy_loop ins(%x : memref<2x6xf32>) outs(%a : memref<2x6xf32>) [#tcck.copy<in = 1, out = 0, shape = [2, 6], from = (d0, d1) -> (d0 * 6 + d1), to = (d0, d1) -> (d0 * 6 + d1)>]
  return
}

// -----

func.func @copy_map_rank(%x: memref<2x6xf32>, %a: memref<2x6xf32>) {
  // expected-error @+1 {{copy 0's 'from' map affine_map<(d0) -> (d0)> is not one flat index of 2 dimensions}}
  tcck.copy_loop ins(%x : memref<2x6xf32>) outs(%a : memref<2x6xf32>) [#tcck.copy<in = 0, out = 0, shape = [2, 6], from = (d0) -> (d0), to = (d0, d1) -> (d0 * 6 + d1)>]
  return
}

// -----

func.func @copy_out_of_bounds(%x: memref<2x6xf32>, %a: memref<2x3xf32>, %b: memref<2x3xf32>) {
  // expected-error @+1 {{copy 1's 'from' map affine_map<(d0, d1) -> (d0 * 6 + d1 + 4)> reaches [4, 12] of a buffer of 12 elements}}
  tcck.copy_loop ins(%x : memref<2x6xf32>) outs(%a, %b : memref<2x3xf32>, memref<2x3xf32>) [#tcck.copy<in = 0, out = 0, shape = [2, 3], from = (d0, d1) -> (d0 * 6 + d1), to = (d0, d1) -> (d0 * 3 + d1)>, #tcck.copy<in = 0, out = 1, shape = [2, 3], from = (d0, d1) -> (d0 * 6 + d1 + 4), to = (d0, d1) -> (d0 * 3 + d1)>]
  return
}

// -----

func.func @copy_partial(%x: memref<2x6xf32>, %a: memref<2x3xf32>, %b: memref<2x3xf32>) {
  // expected-error @+1 {{copies 0 elements into output 1 of 6}}
  tcck.copy_loop ins(%x : memref<2x6xf32>) outs(%a, %b : memref<2x3xf32>, memref<2x3xf32>) [#tcck.copy<in = 0, out = 0, shape = [2, 3], from = (d0, d1) -> (d0 * 6 + d1), to = (d0, d1) -> (d0 * 3 + d1)>]
  return
}

// -----

func.func @copy_delinearized_bounds(%x: memref<2x6xf32>, %a: memref<12xf32>) {
  // A linearise-delinearise map is bounded by its mod: this one reaches
  // past the source (the mod 7 is one too many).
  // expected-error @+1 {{copy 0's 'from' map affine_map<(d0) -> ((d0 floordiv 6) * 6 + d0 mod 7)> reaches [0, 12] of a buffer of 12 elements}}
  tcck.copy_loop ins(%x : memref<2x6xf32>) outs(%a : memref<12xf32>) [#tcck.copy<in = 0, out = 0, shape = [12], from = (d0) -> ((d0 floordiv 6) * 6 + d0 mod 7), to = (d0) -> (d0)>]
  return
}

// -----

// expected-error @+1 {{'tcck.slot' is on a float buffer argument, not on argument 0 of type 'memref<4xi64>'}}
func.func @slot_on_ints(%x: memref<4xi64> {tcck.slot = f32}) {
  return
}

// -----

// expected-error @+1 {{'tcck.slot' is a float type on a function argument}}
func.func @slot_not_a_type(%x: memref<4xf16> {tcck.slot = 4 : i64}) {
  return
}
