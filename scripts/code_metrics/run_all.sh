#!/bin/sh
# Reruns every measurement (read-only on the checkout; tracked files only via git ls-files/grep).
set -e; D="$(cd "$(dirname "$0")" && pwd)"; cd "$D/../.."
echo "== HEAD"; git rev-parse --short HEAD
echo "== 1 largest"; sh $D/m1_largest.sh 10
echo "== 2 longest functions"; python3 $D/m2_funcs.py 10
for p in codegen/ runtime/lib/trainer.cpp runtime/tcc-run.cpp; do python3 $D/m2_funcs.py 1 $p; done
wc -l codegen/StepEmitter.cpp codegen/cpu/CpuKernels.cpp codegen/cuda/CudaKernels.cpp runtime/tcc-run.cpp runtime/lib/trainer.cpp
python3 $D/m2b_stepemitter.py
echo "== 3 op sites"; python3 $D/m3_opsites.py
echo "== 4 elementwise lists"; python3 $D/m4_ewlists.py
echo "== 5 includes"; sh $D/m5_includes.sh | cut -f1 | sort | uniq -c; sh $D/m5_includes.sh | grep -v '^forward'
echo "== 6 docs"; sh $D/m6_docs.sh
echo "== 7 pipeline"; git grep -nE 'PassPipelineRegistration<|registerTccPipelines\(\)|build(Training|Plan|Kernel)Pipeline\(' -- compiler passes codegen
