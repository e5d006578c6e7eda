"""The CPU step's prebuilt kernels (runtime/cpu/prebuilt.h) change build time only.

Usage: /usr/bin/python3 check_prebuilt_kernels.py --tcc TCC --tcc-run TCC_RUN --workdir DIR

tcc compiles the kernel library's kernels once into its cache (the CPU
step's fixed half, kernels.cpp) and a step's own unit declares them extern.
For the demo model at --cpu-precision f32 and f64 this checks that
  * the step tcc builds calls the prebuilt kernels: its object (from
    --keep-temps) has them undefined, and the fixed half defines them;
  * it trains exactly as the same source compiled the old way, as one unit
    with the whole header-only library (without TCC_CPU_PREBUILT_KERNELS;
    with the BLAS build.sh links, and on one thread where tcc-run gives the
    prebuilt step every core: runtime/cpu/threads.h's results do not depend
    on the thread count):
    the same losses and gradient norms, to the bit, and a byte-identical saved model after 3 steps of 2
    micro-steps;
  * the step trains to the same bits with --threads 1 and 3, and with 3
    twice.
Ends with `N passed, M failed`.
"""
import argparse
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
DATA = os.path.join(ROOT, "examples", "data", "train.bin")
# Kernels every step of the demo calls (prebuilt.h lists them).
EXPECTED = ["layer_norm", "matmul_rows", "attention_forward", "sum_squares", "adamw_update"]


def run(cmd, cwd=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def train(tcc_run, step, save, extra=()):
    """The loss and gradient norm of each step, as tcc-run's metrics file
    writes them (17 digits)."""
    metrics = save + ".jsonl"
    run([tcc_run, step, "--data", DATA, "--accum", "2", "--steps", "3", "--quiet", "--metrics",
         metrics, "--save", save] + list(extra))
    with open(metrics) as f:
        return [(r["loss"], r["grad_norm"]) for r in map(json.loads, f)]


def check(args, precision):
    work = os.path.join(args.workdir, precision)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
    # The step as tcc builds it, with its build folder kept.
    built = os.path.join(work, "prebuilt.so")
    log = run([args.tcc, MODEL, "--target=cpu", "--cpu-precision=" + precision, "--keep-temps",
               "-o", built])
    m = re.search(r"kept the build folder (\S+)", log)
    if not m:
        raise RuntimeError("tcc --keep-temps named no build folder:\n" + log)
    folder = m.group(1)
    try:
        undefined = run(["nm", "-C", "--undefined-only", os.path.join(folder, "step.o")])
        ctype = "float" if precision == "f32" else "double"
        missing = [k for k in EXPECTED if not re.search(r"tcc::cpu::%s<%s[,>]" % (k, ctype), undefined)]
        if missing:
            raise RuntimeError("the step's own unit compiles %s (not prebuilt)" % ", ".join(missing))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # The same source, one unit, the header-only library.
    src = os.path.join(work, "src")
    run([args.tcc, MODEL, "--target=cpu", "--cpu-precision=" + precision, "--emit=source", "-o", src])
    whole = os.path.join(work, "whole.so")
    # With the BLAS the step links (build.sh says which): its fp32 GEMMs.
    script = open(os.path.join(src, "build.sh")).read()
    blas = []
    if "-DTCC_CPU_BLAS" in script:
        link = [l for l in script.splitlines() if " -shared " in l][0].split()
        blas = ["-DTCC_CPU_BLAS"] + [a for a in link if a.endswith(".so") and a != "step.so"]
    run([cxx, "-std=c++17", "-O3", "-fPIC", "-fvisibility=hidden", "-I", ".", "-shared", "-o", whole,
         "step.cpp"] + blas, cwd=src)
    a = train(args.tcc_run, built, os.path.join(work, "prebuilt.onnx"))
    b = train(args.tcc_run, whole, os.path.join(work, "whole.onnx"))
    if not a or a != b:
        raise RuntimeError("losses differ: prebuilt %s, one unit %s" % (a, b))
    if not filecmp.cmp(os.path.join(work, "prebuilt.onnx"), os.path.join(work, "whole.onnx"),
                       shallow=False):
        raise RuntimeError("the saved models differ")
    # The thread count changes nothing (runtime/cpu/threads.h): 1 and 3
    # threads, and 3 threads twice.
    runs = [train(args.tcc_run, built, os.path.join(work, "threads%d-%d.onnx" % (n, k)),
                  ["--threads", str(n)]) for n, k in ((1, 0), (3, 0), (3, 1))]
    if any(r != a for r in runs):
        raise RuntimeError("losses differ with --threads 1, 3, 3: %s" % runs)
    for n, k in ((1, 0), (3, 0), (3, 1)):
        if not filecmp.cmp(os.path.join(work, "prebuilt.onnx"),
                           os.path.join(work, "threads%d-%d.onnx" % (n, k)), shallow=False):
            raise RuntimeError("the saved model of --threads %d differs" % n)
    return ("%d steps' losses and gradient norms equal, saved model identical, the same with "
            "--threads 1 and 3 (twice)" % len(a))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    passed = failed = 0
    for precision in ("f32", "f64"):
        try:
            print("PASS %s: %s" % (precision, check(args, precision)))
            passed += 1
        except Exception as e:  # noqa: BLE001 - reported, then counted
            print("FAIL %s: %s" % (precision, e))
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
