// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=8500" --cse | FileCheck %s
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=20000" | FileCheck %s --check-prefix=MET
// loss = sum(tanh(tanh(exp(w)))): the backward pass needs exp(w), tanh(..)
// and tanh(tanh(..)). Unconstrained the plan takes 9408 bytes; to fit 8500,
// exp(w) (recomputable from the parameter, which lives anyway) is dropped
// after the forward pass and recomputed just before its backward use. The
// clone carries tcc.remat, so CSE leaves it alone.

// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%[[W:[a-z0-9]+]]: tensor<256xf32> {tcc.param = "w"}, %{{[a-z0-9]+}}: tensor<f32> {tcc.loss_seed})
// CHECK-SAME: arena_bytes = 8384,
// CHECK-SAME: tcc.remat_decisions = [{bytes = 1024 : i64, flops = 1024 : i64, live_temporaries_after = 4160 : i64, location = "", op = "tcc.exp", ops = 1 : i64
// CHECK: %[[E:.+]] = tcc.exp %[[W]] {tcc.offsets
// CHECK: %[[LOSS:.+]] = tcc.reduce_sum
// CHECK-NOT: %[[E]]{{[ ,)]}}
// CHECK: %[[R:.+]] = tcc.exp %[[W]] {tcc.offsets = array<i64: {{[0-9]+}}>, tcc.remat}
// CHECK-NEXT: %[[G:.+]] = tcc.mul %{{.+}}, %[[R]]
// CHECK: return %[[LOSS]], %[[G]]

// Leaves alone: a budget the plan already meets.
// MET-LABEL: func.func @micro_step
// MET-NOT: tcc.remat
// MET: return
func.func @main(%w: tensor<256xf32> {tcc.param = "w"}) -> (tensor<f32> {tcc.output = "loss"}) {
  %0 = tcc.exp %w : (tensor<256xf32>) -> tensor<256xf32>
  %1 = tcc.tanh %0 : (tensor<256xf32>) -> tensor<256xf32>
  %2 = tcc.tanh %1 : (tensor<256xf32>) -> tensor<256xf32>
  %3 = tcc.reduce_sum %2 {keepdims = 0 : i64} : (tensor<256xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}
