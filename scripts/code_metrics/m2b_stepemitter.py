#!/usr/bin/env python3
# 2b. Per-file: functions, functions mentioning the target flag (\bcuda\b or isCuda/TargetKind::Cuda
# in the stripped body), share of the file held by the 7 longest functions.
import os, sys, re
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); from m2_funcs import funcs, strip, ROOT
for f in sys.argv[1:] or ['codegen/StepEmitter.cpp', 'codegen/EmitterImpl.h', 'codegen/cpu/CpuKernels.cpp', 'codegen/cuda/CudaKernels.cpp']:
    src = strip(open(f'{ROOT}/{f}').read()).split('\n'); fs = sorted(funcs(f), reverse=True)
    br = [nm for n, p, st, nm in fs if re.search(r'\bcuda\b|TargetKind::Cuda|isCuda', '\n'.join(src[st-1:st-1+n]))]
    top7 = sum(n for n, *_ in fs[:7])
    print(f'{f}: {len(src)-1} lines, {len(fs)} functions, {len(br)} mention cuda {br}, top-7 = {top7} lines ({100*top7/(len(src)-1):.0f}%)')
