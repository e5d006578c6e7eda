// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=all" --tcc-plan-memory | FileCheck %s
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=auto budget=100671000" --tcc-plan-memory | FileCheck %s --check-prefix=AUTO-NO
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=auto budget=100671000 pcie-gbps=1e9" --tcc-plan-memory | FileCheck %s --check-prefix=AUTO-YES
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100670500" --cse --tcc-swap-activations="mode=auto budget=100670500 pcie-gbps=1e9" --tcc-plan-memory | FileCheck %s --check-prefix=AUTO-OVER
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=all" --tcc-plan-memory --tcc-lower-to-kernels | FileCheck %s --check-prefix=KERNEL
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=all" --tcc-plan-memory --tcc-lower-to-kernels | tcc-translate --tcck-to-cu | FileCheck %s --check-prefix=CU
// RUN: not tcc-opt %s --tcc-swap-activations="mode=sometimes" 2>&1 | FileCheck %s --check-prefix=BADMODE
// RUN: not tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=all host-budget=500" 2>&1 | FileCheck %s --check-prefix=HOSTFULL
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100671000" --cse --tcc-swap-activations="mode=auto pcie-gbps=1e9 host-budget=500" --tcc-plan-memory | FileCheck %s --check-prefix=AUTO-HOSTFULL
//
// loss = sum(tanh(tanh(exp(w)))) on the CUDA target, w of 256 elements.
// Under a budget 488 bytes below the unconstrained plan (100671488 bytes), tcc-remat drops
// exp(w) after the forward pass and recomputes it for its backward reader
// (tcc-remat.mlir); tcc-swap-activations copies it to host memory instead.

// The copy out follows the op that makes the value; the value's buffer
// lives until the wait two ops later; the copy back is queued two ops
// before the backward reader, which waits for it and reads the copy. The
// clone is gone, and tcc-plan-memory gives the value 512 bytes (fp16) of
// the host buffer and the plan still fits.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: planned_bytes = 100670976,
// CHECK-SAME: host_bytes = 512, host_params = [-1], host_grads = [-1], host_state = [-1, -1]>
// CHECK-SAME: tcc.swaps = {bytes = 512 : i64, candidates = 1 : i64, {{.*}} mode = "all", {{.*}} swapped = true, values = 1 : i64}
// CHECK-NOT: tcc.remat}
// CHECK: %[[E:.+]] = tcc.exp %{{.+}} {tcc.offsets
// CHECK-NEXT: %[[H:.+]] = tcc.swap_out %[[E]] swap 0 {tcc.host_offset = 0 : i64, tcc.offsets = array<i64: -1>} : tensor<256xf32>
// CHECK-NEXT: tcc.tanh %[[E]]
// CHECK-NEXT: tcc.tanh
// CHECK-NEXT: tcc.swap_wait %[[E]] swap 0
// CHECK-NEXT: %[[LOSS:.+]] = tcc.reduce_sum
// CHECK-NOT: %[[E]]{{[ ,)]}}
// CHECK: %[[IN:.+]] = tcc.swap_in %[[H]] swap 0 {tcc.host_offset = 0 : i64, tcc.offsets = array<i64: {{[0-9]+}}>} : tensor<256xf32>
// CHECK-NEXT: tcc.sub
// CHECK-NEXT: tcc.mul
// CHECK-NEXT: tcc.swap_wait %[[IN]] swap 0
// CHECK-NEXT: %[[G:.+]] = tcc.mul %{{.+}}, %[[IN]]
// CHECK: return %[[LOSS]], %[[G]]

// auto at the default 31.5 GB/s: 512 bytes take 16 ns each way, the
// forward pass hides 3 of them and the recomputation takes 0.2 ns, so the
// recomputation stays and tcc.swaps says why.
// AUTO-NO-LABEL: func.func @micro_step
// AUTO-NO-NOT: host_bytes
// AUTO-NO-SAME: tcc.swaps = {{{.*}}exposed_copy_seconds = {{.*}}, mode = "auto", pcie_gbps = {{.*}}, recompute_seconds = {{.*}}, swapped = false, values = 0 : i64}
// AUTO-NO-NOT: tcc.swap_out
// AUTO-NO: tcc.exp {{.+}}tcc.remat

// auto with a link fast enough to hide the copies: swapped.
// AUTO-YES-LABEL: func.func @micro_step
// AUTO-YES-SAME: swapped = true
// AUTO-YES: tcc.swap_out
// AUTO-YES-NOT: tcc.remat}

// auto under a budget 8 bytes smaller, where tcc-remat recomputes exp(w)
// and tanh(exp(w)) (100670464 bytes planned): swapping both keeps them two
// ops longer (100670976 bytes), over the budget, so the recomputation stays.
// AUTO-OVER-LABEL: func.func @micro_step
// AUTO-OVER-SAME: planned_bytes = 100670464,
// AUTO-OVER-SAME: candidates = 2 : i64,
// AUTO-OVER-SAME: swapped = false
// AUTO-OVER-NOT: tcc.swap_out
// AUTO-OVER: tcc.remat

// The kernel IR: the copies and their waits, by swap number.
// KERNEL-LABEL: func.func @micro_step
// KERNEL: tcck.swap_out %{{.+}} to host_slot 0 swap 0 : memref<256xf16>
// KERNEL: tcck.wait_swap_out 0
// KERNEL: tcck.swap_in %[[IN:[0-9]+]] from host_slot 0 swap 0 : memref<256xf16>
// KERNEL: tcck.wait_swap_in 0
// KERNEL-NEXT: tcck.view
// KERNEL-NEXT: tcck.ew "Mul" {{.+}}, %[[IN]] :

// CUDA: the fixed half's calls, on the step's copy streams.
// CU: swap_out(0, v[[V:[0-9]+]]);
// CU: swap_out_wait(0);
// CU: swap_in(0, v[[W:[0-9]+]]);
// CU: swap_in_wait(0);

// The host buffer must fit the host budget: all fails, auto recomputes.
// HOSTFULL: error: swapping activations needs 512 bytes of host memory but the host budget is 500 bytes
// AUTO-HOSTFULL-LABEL: func.func @micro_step
// AUTO-HOSTFULL-SAME: swapped = false
// AUTO-HOSTFULL: tcc.remat

// BADMODE: error: tcc-swap-activations: unknown mode "sometimes" (none, auto or all)
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
  func.func @main(%w: tensor<256xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
    %0 = tcc.exp %w : (tensor<256xf32>) -> tensor<256xf32>
    %1 = tcc.tanh %0 : (tensor<256xf32>) -> tensor<256xf32>
    %2 = tcc.tanh %1 : (tensor<256xf32>) -> tensor<256xf32>
    %3 = tcc.reduce_sum %2 {keepdims = 0 : i64} : (tensor<256xf32>) -> tensor<f32>
    return %3 : tensor<f32>
  }
}
