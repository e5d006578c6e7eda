"""tcc-lower-to-kernels against the step emitter, on every test model.

Usage: /usr/bin/python3 check_kernel_lowering.py --tcc TCC --workdir DIR [MODEL ...]

The kernel IR (`tcc --emit=kernels`, the tcck dialect) records what the
step emitter used to work out for itself. For each test model (the models
check_gradients.py checks, and wide_rows), at --cpu-precision f32 and f64,
and once more under a --mem-budget that makes tcc-remat recompute, this
compares the kernel IR with the C++ step the emitter writes from the
planned IR (`--emit=source`):
  * the op table: every `tcck.mark`'s label and live bytes against the
    step's kOps and kOpLive, entry by entry;
  * the gradient accumulation: the arena slots of the `tcck.accumulate`
    ops against the accumulator slots the step adds into, in order;
  * the stores of the outputs into their result slots;
  * the number of kernels of each kind: unfused elementwise ops
    (`binary`/`unary` calls), GEMMs, library calls, fused loops.
Prints one line per model and ends with `N passed, M failed`.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_cuda_build import prepare_model  # noqa: E402
from check_gradients import DEFAULT_MODELS  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    return r.stdout


def unescape(s):
    return re.sub(r"\\(.)", r"\1", s)


def from_source(step_cpp):
    """What the emitted C++ step says: op table, accumulator slots, stores,
    kernel counts."""
    src = open(step_cpp).read()
    ops = re.search(r"kOps\[\] = \{\n(.*?)\};", src, re.S).group(1)
    labels = [unescape(m) for m in re.findall(r'^    "((?:[^"\\]|\\.)*)",$', ops, re.M)]
    live = [int(x) for x in re.findall(r"(\d+)ULL", re.search(r"kOpLive\[\] = \{(.*?)\};", src).group(1))]
    body = src[src.index("tcc_step_micro_step"):]
    acc = [int(x) for x in re.findall(r"F \*acc = \(F \*\)\(arena \+ (\d+)ULL\)", body)]
    stores = [int(x) for x in re.findall(r"std::memcpy\(\(arena \+ (\d+)ULL\)", body)]
    kinds = {
        "elementwise": len(re.findall(r"^  (?:binary|unary)\(", body, re.M)),
        "gemm": len(re.findall(r"^  (?:matmul|matmul_rows)\(|matmul_rows\(", body, re.M)),
        # A loop nest runs serially or split across the step's threads
        # (runtime/cpu/threads.h: for i or row from lo).
        "loop": (body.count("for (int64_t i = 0;") + body.count("for (int64_t row = 0;")
                 + body.count("for (int64_t i = lo;") + body.count("for (int64_t row = lo;")),
    }
    return labels, live, acc, stores, kinds


def from_kernels(mlir):
    text = open(mlir).read()
    marks = re.findall(r'tcck\.mark "((?:[^"\\]|\\.)*)" live (\d+)', text)
    labels = [unescape(m[0]) for m in marks]
    live = [int(m[1]) for m in marks]
    acc = [int(x) for x in re.findall(r"tcck\.accumulate %\S+ into slot (\d+)", text)]
    stores = [int(x) for x in re.findall(r"tcck\.store %\S+ to slot (\d+)", text)]
    kinds = {
        "elementwise": len(re.findall(r"tcck\.ew ", text)),
        "gemm": len(re.findall(r"tcck\.matmul ", text)),
        "loop": len(re.findall(r"tcck\.loop ", text)),
    }
    return labels, live, acc, stores, kinds


def compare(name, tag, work, onnx_path, extra, tcc):
    src_dir = os.path.join(work, "source-" + tag)
    kernels = os.path.join(work, "kernels-" + tag + ".mlir")
    flags = ["--target=cpu", "--no-weights"] + extra
    run([tcc, onnx_path, "--emit=source", "-o", src_dir] + flags)
    run([tcc, onnx_path, "--emit=kernels", "-o", kernels] + flags)
    old = from_source(os.path.join(src_dir, "step.cpp"))
    new = from_kernels(kernels)
    problems = []
    for what, a, b in zip(("op labels", "live bytes", "accumulator slots", "stores"), old[:4], new[:4]):
        if a != b:
            first = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            problems.append("%s differ at entry %d of %d/%d: emitter %r, kernels %r"
                            % (what, first, len(a), len(b), a[first:first + 1], b[first:first + 1]))
    # Fused loops: the emitter writes at least one loop nest per tcck.loop
    # (a row loop has its column loops inside).
    if old[4]["elementwise"] != new[4]["elementwise"]:
        problems.append("elementwise kernels: emitter %d, kernels %d"
                        % (old[4]["elementwise"], new[4]["elementwise"]))
    if new[4]["loop"] > old[4]["loop"]:
        problems.append("fused loops: emitter %d loop nests, kernels %d tcck.loop"
                        % (old[4]["loop"], new[4]["loop"]))
    if not new[0]:
        problems.append("no op table")
    return problems, "%d ops, %d accumulations, %d ew, %d gemm, %d loops" % (
        len(new[0]), len(new[2]), new[4]["elementwise"], new[4]["gemm"], new[4]["loop"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("models", nargs="*")
    args = p.parse_args()
    models = args.models or DEFAULT_MODELS + ["wide_rows"]
    passed = failed = 0
    for name in models:
        work, onnx_path, _, extra = prepare_model(name, args.workdir, args.tcc)
        configs = [("f32", []), ("f64", ["--cpu-precision=f64"])]
        if name == "tiny_gpt_opset17":
            configs.append(("remat", ["--mem-budget=1200K"]))
        for tag, flags in configs:
            try:
                problems, summary = compare(name, tag, work, onnx_path, extra + flags, args.tcc)
            except RuntimeError as e:
                problems, summary = [str(e)], ""
            status = "ok" if not problems else "FAIL"
            print("%-28s %-6s %-4s %s" % (name, tag, status, summary))
            for pr in problems:
                print("    " + pr)
            passed += not problems
            failed += bool(problems)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
