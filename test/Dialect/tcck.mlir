// RUN: tcc-opt %s --split-input-file | tcc-opt --split-input-file | FileCheck %s
// The kernel-level dialect round-trips; its verifiers reject malformed
// kernels (tcck-invalid.mlir).

// CHECK-LABEL: func.func @kernels
// CHECK: %[[V:.*]] = tcck.view 64 : memref<4x8xf32>
// CHECK: %[[G:.*]] = tcck.global dense<1.000000e+00> : tensor<8xf32> : memref<8xf32>
// CHECK: %[[A:.*]] = tcck.alias %[[V]] : memref<4x8xf32> to memref<32xf32>
// CHECK: tcck.ew "Add" %[[V]], %arg0, %[[G]] : memref<4x8xf32>, memref<4x8xf32>, memref<8xf32>
// CHECK: tcck.call softmax outs(%[[V]] : memref<4x8xf32>) ins(%arg0 : memref<4x8xf32>) {axis = 1 : i64, log = false}
// CHECK: tcck.matmul outs(%[[V]] : memref<4x8xf32>) ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x8xf32>) {trans_lhs = false, trans_rhs = true}
// CHECK: tcck.fill %[[V]], 0.000000e+00 : f32 : memref<4x8xf32>
// CHECK: tcck.accumulate %[[V]] into slot 128 : memref<4x8xf32>
// CHECK: tcck.store %[[A]] to slot 256 : memref<32xf32>
// CHECK: tcck.mark "tcc.add /h.0/Add" live 4096
// CHECK: tcck.mark "tcc.add /h.0/Add" live 4096 ins(%arg0, %[[G]] : memref<4x8xf32>, memref<8xf32>) outs(%[[V]] : memref<4x8xf32>)
// CHECK: tcck.mark "tcc.softmax" live 64 outs(%[[V]] : memref<4x8xf32>)
func.func @kernels(%x: memref<4x8xf32>, %w: memref<8x8xf32>) {
  %v = tcck.view 64 : memref<4x8xf32>
  %g = tcck.global dense<1.0> : tensor<8xf32> : memref<8xf32>
  %a = tcck.alias %v : memref<4x8xf32> to memref<32xf32>
  tcck.ew "Add" %v, %x, %g : memref<4x8xf32>, memref<4x8xf32>, memref<8xf32>
  tcck.call softmax outs(%v : memref<4x8xf32>) ins(%x : memref<4x8xf32>) {axis = 1 : i64, log = false}
  tcck.matmul outs(%v : memref<4x8xf32>) ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>) {trans_lhs = false, trans_rhs = true}
  tcck.fill %v, 0.0 : f32 : memref<4x8xf32>
  tcck.accumulate %v into slot 128 : memref<4x8xf32>
  tcck.store %a to slot 256 : memref<32xf32>
  tcck.mark "tcc.add /h.0/Add" live 4096
  tcck.mark "tcc.add /h.0/Add" live 4096 ins(%x, %g : memref<4x8xf32>, memref<8xf32>) outs(%v : memref<4x8xf32>)
  tcck.mark "tcc.softmax" live 64 outs(%v : memref<4x8xf32>)
  return
}

// -----

// CHECK-LABEL: func.func @fused
// CHECK: tcck.loop ins(%arg0, %arg4 : memref<4x8xf32>, memref<8xf16>) outs(%arg1, %arg5 : memref<4x8xf32>, memref<4x1xf32>) space [4, 8] rows true passes 1 maps [#map, #map1, #map, #map2] {
// CHECK: ^bb0(%[[A:.*]]: f32, %[[C:.*]]: f32):
// CHECK: %[[M:.*]] = tcck.reduce %[[A]] dims [1] mean {tcck.role = "row_reduction", tcck.stage = 0 : i64} : f32
// CHECK: %[[D:.*]] = tcck.scalar "Sub" %[[A]], %[[M]] {tcck.role = "element", tcck.stage = 1 : i64} : (f32, f32) -> f32
// CHECK: %[[P:.*]] = tcck.scalar "Greater" %[[D]], %[[C]] {{.*}} : (f32, f32) -> i1
// CHECK: %[[S:.*]] = tcck.select %[[P]], %[[D]], %[[C]] {{.*}} : f32
// CHECK: %[[G:.*]] = tcck.gelu %[[S]] tanh {{.*}} : f32
// CHECK: %[[H:.*]] = tcck.gelu_grad %[[G]], %[[S]] {{.*}} : f32
// CHECK: %[[F:.*]] = tcck.convert %[[P]] {{.*}} : i1 to f32
// CHECK: %[[R:.*]] = tcck.scalar "Mul" %[[H]], %[[F]] {tcck.role = "element", tcck.stage = 1 : i64}
// CHECK: tcck.yield %[[R]], %[[M]] : f32, f32
// CHECK: tcck.matmul outs(%arg1 : memref<4x8xf32>) ins(%arg0, %arg2 : memref<4x8xf32>, memref<8x8xf32>) epilogue(%arg3 : memref<8xf32>) maps [#map1] {
// CHECK: tcck.scalar "Add"
// CHECK: tcck.yield
// CHECK: } {cublaslt = #tcck.cublaslt<bias = 0, residual = -1, gelu = false, result = 0, aux = -1>, trans_lhs = false, trans_rhs = false}
func.func @fused(%x: memref<4x8xf32>, %y: memref<4x8xf32>, %w: memref<8x8xf32>, %b: memref<8xf32>,
                 %c: memref<8xf16>, %mean: memref<4x1xf32>) {
  // A scalar body: one f32 per input (the fp16 bias is loaded as f32), the
  // row mean, then the elements that read it; the mean is also an output,
  // written once per row.
  tcck.loop ins(%x, %c : memref<4x8xf32>, memref<8xf16>) outs(%y, %mean : memref<4x8xf32>, memref<4x1xf32>)
      space [4, 8] rows true passes 1
      maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>,
            affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>] {
  ^bb0(%a: f32, %cc: f32):
    %m = tcck.reduce %a dims [1] mean {tcck.role = "row_reduction", tcck.stage = 0 : i64} : f32
    %d = tcck.scalar "Sub" %a, %m {tcck.role = "element", tcck.stage = 1 : i64} : (f32, f32) -> f32
    %p = tcck.scalar "Greater" %d, %cc {tcck.role = "element", tcck.stage = 1 : i64} : (f32, f32) -> i1
    %s = tcck.select %p, %d, %cc {tcck.role = "element", tcck.stage = 1 : i64} : f32
    %g = tcck.gelu %s tanh {tcck.role = "element", tcck.stage = 1 : i64} : f32
    %h = tcck.gelu_grad %g, %s {tcck.role = "element", tcck.stage = 1 : i64} : f32
    %f = tcck.convert %p {tcck.role = "element", tcck.stage = 1 : i64} : i1 to f32
    %r = tcck.scalar "Mul" %h, %f {tcck.role = "element", tcck.stage = 1 : i64} : (f32, f32) -> f32
    tcck.yield %r, %m : f32, f32
  }
  // A GEMM with its bias add, and what cuBLASLt computes of it.
  tcck.matmul outs(%y : memref<4x8xf32>) ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>)
      epilogue(%b : memref<8xf32>) maps [affine_map<(d0, d1) -> (d1)>] {
  ^bb0(%p: f32, %bias: f32):
    %s = tcck.scalar "Add" %p, %bias : (f32, f32) -> f32
    tcck.yield %s : f32
  } {cublaslt = #tcck.cublaslt<bias = 0, residual = -1, gelu = false, result = 0, aux = -1>,
     trans_lhs = false, trans_rhs = false}
  return
}

// -----

// The optimizer's function: a device update with its fp16 working copy, an
// update on the host (tcc --offload), and a ZeRO-1 shard's place.
// CHECK-LABEL: func.func @apply() attributes {tcck.apply}
// CHECK: tcck.update "w" param 0 master %{{.*}} : memref<4xf32> grad %{{.*}} : memref<4xf32> state(%{{.*}}, %{{.*}} : memref<4xf32>, memref<4xf32>) half %{{.*}} : memref<4xf16>
// CHECK: %[[H:.*]] = tcck.host_view 4096 : memref<4xf32>
// CHECK: tcck.update "b" param 1 master %[[H]] : memref<4xf32> grad %[[H]] : memref<4xf32> state(%[[H]] : memref<4xf32>) half %{{.*}} : memref<4xf16>
// CHECK: tcck.shard_update "c" param 2 master %{{.*}} : memref<4xf32> flat 64
func.func @apply() attributes {tcck.apply} {
  %p = tcck.view 0 : memref<4xf32>
  %h = tcck.view 64 : memref<4xf16>
  tcck.update "w" param 0 master %p : memref<4xf32> grad %p : memref<4xf32> state(%p, %p : memref<4xf32>, memref<4xf32>) half %h : memref<4xf16>
  %q = tcck.host_view 4096 : memref<4xf32>
  tcck.update "b" param 1 master %q : memref<4xf32> grad %q : memref<4xf32> state(%q : memref<4xf32>) half %h : memref<4xf16>
  tcck.shard_update "c" param 2 master %p : memref<4xf32> flat 64
  return
}

// -----

// The waits for a host update still in flight (CUDA, offload).
// CHECK-LABEL: func.func @awaits
// CHECK: tcck.await_weights "wte" param 0
// CHECK-NEXT: tcck.await_update
func.func @awaits() {
  tcck.await_weights "wte" param 0
  tcck.await_update
  return
}

// -----

// Activation swapping (CUDA): the copies and their waits.
// CHECK-LABEL: func.func @swaps
// CHECK: tcck.swap_out %{{.+}} to host_slot 64 swap 0 : memref<4x8xf16>
// CHECK-NEXT: tcck.wait_swap_out 0
// CHECK-NEXT: tcck.swap_in %{{.+}} from host_slot 64 swap 0 : memref<4x8xf16>
// CHECK-NEXT: tcck.wait_swap_in 0
func.func @swaps() {
  %a = tcck.view 0 : memref<4x8xf16>
  %b = tcck.view 128 : memref<4x8xf16>
  tcck.swap_out %a to host_slot 64 swap 0 : memref<4x8xf16>
  tcck.wait_swap_out 0
  tcck.swap_in %b from host_slot 64 swap 0 : memref<4x8xf16>
  tcck.wait_swap_in 0
  return
}
