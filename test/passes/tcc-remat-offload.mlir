// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="offload=optimizer host-budget=1000000" --tcc-plan-memory | FileCheck %s --check-prefix=OPT
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="offload=all host-budget=1000000" --tcc-plan-memory | FileCheck %s --check-prefix=ALL
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100788736 offload=auto host-budget=1000000" --tcc-plan-memory | FileCheck %s --check-prefix=MET
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100740000 offload=auto host-budget=1000000" --tcc-plan-memory | FileCheck %s --check-prefix=LARGEST
// RUN: tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100720000 offload=auto host-budget=1000000" --tcc-plan-memory | FileCheck %s --check-prefix=GRADS
// RUN: not tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="budget=100720000 offload=auto host-budget=50000" --tcc-plan-memory 2>&1 | FileCheck %s --check-prefix=HOSTFULL
// RUN: not tcc-opt %s --tcc-build-backward --canonicalize --cse --tcc-remat="offload=sometimes" 2>&1 | FileCheck %s --check-prefix=BADMODE
//
// Host memory tiers on the CUDA target. loss = sum(tanh(w)) + sum(tanh(v)),
// w of 4096 and v of 1024 elements: unconstrained, the device plan is
// 100788736 bytes (the GEMM workspace and the runtime reserve are most of
// it) and recomputation cannot make it smaller.

// optimizer: every candidate's fp32 master weights and AdamW moments live
// in the host buffer; the device keeps their fp16 working copies (shadows)
// and the gradient accumulators.
// OPT-LABEL: func.func @micro_step
// OPT-SAME: params = [-1, -1], grads = [{{[0-9]+}}, {{[0-9]+}}], state = [-1, -1, -1, -1],
// OPT-SAME: param_bytes = 0, grad_bytes = 20480, state_bytes = 0,
// OPT-SAME: shadows = [{{[0-9]+}}, {{[0-9]+}}, -1], shadow_bytes = 10240,
// OPT-SAME: host_bytes = 61440, host_params = [0, 16384], host_grads = [-1, -1], host_state = [20480, 36864, 53248, 57344], host_param_bytes = 20480, host_state_bytes = 40960>
// OPT-SAME: tcc.tiers = #tcc.tiers<host_state = [0, 1], host_grads = [], pcie_mbps = 31500, host_mbps = 30000, device_gflops = 989000, device_mbps = 4800000, host_budget = 1000000>

// all: the accumulators too. Each gradient is then a temporary of the
// device plan that lives two ops past the op that makes it (the copy to
// the host), instead of an accumulator slot.
// ALL-LABEL: func.func @micro_step
// ALL-SAME: grads = [-1, -1], state = [-1, -1, -1, -1], inputs = [], results = [{{[0-9]+}}, -1, -1], param_bytes = 0, grad_bytes = 0, state_bytes = 0,
// ALL-SAME: host_bytes = 81920, host_params = [0, 16384], host_grads = [53248, 77824], host_state = [20480, 36864, 69632, 73728], host_param_bytes = 20480, host_grad_bytes = 20480, host_state_bytes = 40960>
// ALL-SAME: tcc.tiers = #tcc.tiers<host_state = [0, 1], host_grads = [0, 1],

// auto, a budget the device plan meets: nothing moves.
// MET-LABEL: func.func @micro_step
// MET-SAME: planned_bytes = 100788736,
// MET-NOT: host_bytes
// MET-SAME: tcc.tiers = #tcc.tiers<host_state = [], host_grads = [],

// auto, 48736 bytes over: the largest parameter's state (w: 4096 x 4 bytes
// of master weights and 2 x 16384 of moments) is enough, and v stays.
// LARGEST-LABEL: func.func @micro_step
// LARGEST-SAME: planned_bytes = 100739584,
// LARGEST-SAME: host_bytes = 49152,
// LARGEST-SAME: tcc.tiers = #tcc.tiers<host_state = [0], host_grads = [],

// auto, below what both parameters' state frees: w's accumulator moves too.
// GRADS-LABEL: func.func @micro_step
// GRADS-SAME: planned_bytes = 100710912,
// GRADS-SAME: tcc.tiers = #tcc.tiers<host_state = [0, 1], host_grads = [0],

// HOSTFULL: error: the plan needs 77824 bytes of host memory but the host budget is 50000 bytes
// BADMODE: error: unknown offload "sometimes" (none, auto, optimizer or all)
module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {
  func.func @main(%w: tensor<4096xf32> {tcc.param = "w"}, %v: tensor<1024xf32> {tcc.param = "v"}) -> (tensor<f32> {tcc.output = "loss"}) {
    %0 = tcc.tanh %w : (tensor<4096xf32>) -> tensor<4096xf32>
    %1 = tcc.reduce_sum %0 {keepdims = 0 : i64} : (tensor<4096xf32>) -> tensor<f32>
    %2 = tcc.tanh %v : (tensor<1024xf32>) -> tensor<1024xf32>
    %3 = tcc.reduce_sum %2 {keepdims = 0 : i64} : (tensor<1024xf32>) -> tensor<f32>
    %4 = tcc.add %1, %3 : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %4 : tensor<f32>
  }
}
