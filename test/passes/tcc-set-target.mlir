// RUN: tcc-opt %s --tcc-set-target | FileCheck %s --check-prefix=CUDA
// RUN: tcc-opt %s --tcc-set-target="target=cuda arch=80" | FileCheck %s --check-prefix=A100
// RUN: tcc-opt %s --tcc-set-target="target=cpu" | FileCheck %s --check-prefix=CPU
// RUN: tcc-opt %s --tcc-set-target="target=cpu precision=f64" | FileCheck %s --check-prefix=F64
// RUN: not tcc-opt %s --tcc-set-target="target=gpu" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not tcc-opt %s --tcc-set-target="target=cpu precision=f16" 2>&1 | FileCheck %s --check-prefix=PREC
// RUN: not tcc-opt %s --tcc-set-target="target=cuda precision=f64" 2>&1 | FileCheck %s --check-prefix=CUDAPREC
// RUN: not tcc-opt %s --tcc-set-target="target=cuda arch=0" 2>&1 | FileCheck %s --check-prefix=ARCH
// The module's target, which the plan passes and the emitter read.

// CUDA: module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>}
// A100: module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 80>}
// CPU: module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>}
// F64: module attributes {tcc.target = #tcc.target<kind = cpu, storage = f64, arch = 0>}
// KIND: error: tcc-set-target: unknown target 'gpu' (expected cuda or cpu)
// PREC: error: tcc-set-target: unknown CPU precision 'f16' (expected f32 or f64)
// CUDAPREC: error: tcc-set-target: the cuda target stores floats in f16 and keeps f32 masters; precision=f64 applies to the cpu target only
// ARCH: error: tcc-set-target: the cuda target stores floats in f16 and needs its architecture (e.g. arch = 90)
func.func @f(%x: tensor<4xf32> {tcc.input = "x"}) -> (tensor<4xf32> {tcc.output = "y"}) {
  return %x : tensor<4xf32>
}
