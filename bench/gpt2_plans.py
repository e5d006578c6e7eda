#!/usr/bin/python3
"""GPT-2 small's memory plans on the CUDA target, budget by budget (no GPU
needed: these are tcc's plans; bench/gpu/run.sh measures them on a GPU).

Usage: /usr/bin/python3 bench/gpt2_plans.py --tcc build/bin/tcc [--workdir DIR]
           [--budgets none,8G,6G,5G,4G,3G] [--flags "--loss-chunk-rows=off"]
           [--dropout 0.1]

Exports GPT-2 small (bench/gpu/export_gpt2.py, micro-batch 8 x 1024) once
into the work folder, runs `tcc gpt2.onnx --target=cuda --no-weights
--emit=planned --mem-budget=B --memory-report` for each budget and prints a
table: the planned device memory (arena, constants, input staging and the
CUDA runtime reserve), the arena, the activations at their peak and where,
and the FLOPs recomputed to fit; or the error's smallest budget when there is
no plan. PyTorch's reference figures (DESIGN.md, measured on an H200):
eager 15.6 GiB, torch.compile 9.6 GiB.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = float(1 << 30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--workdir", default="/tmp/tcc-gpt2-plans")
    ap.add_argument("--budgets", default="none,8G,6G,5G,4.5G,4G,3.5G,3G,2.9G")
    ap.add_argument("--flags", default="", help="more tcc flags, e.g. --loss-chunk-rows=off")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="GPT-2's dropouts at this ratio (Hugging Face's default: 0.1)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    onnx_path = os.path.join(args.workdir, "gpt2%s.onnx" % (
        "_dropout%g" % args.dropout if args.dropout else ""))
    if not os.path.exists(onnx_path):
        subprocess.run([sys.executable, os.path.join(HERE, "gpu", "export_gpt2.py"), onnx_path,
                        "--dropout", str(args.dropout)], check=True)
    print("| `--mem-budget` | planned device memory | arena | activations at peak | peak at "
          "| recomputed FLOPs | values recomputed | plan time |")
    print("|---|---|---|---|---|---|---|---|")
    for b in args.budgets.split(","):
        report = os.path.join(args.workdir, "plan_%s_%s.json" % (
            os.path.splitext(os.path.basename(onnx_path))[0], b))
        if os.path.exists(report):
            os.remove(report)
        cmd = [args.tcc, onnx_path, "--target=cuda", "--no-weights", "--emit=planned",
               "-o", os.devnull, "--memory-report", report] + args.flags.split()
        if b != "none":
            # Recomputation alone: without --offload=none an unmet budget
            # would be planned again with host memory (the budget decides).
            cmd += ["--mem-budget=" + b, "--offload=none"]
        start = time.time()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        secs = time.time() - start
        if r.returncode != 0:
            m = re.search(r"the smallest budget this plan meets is (\d+) bytes", r.stdout)
            why = ("no plan; the smallest is %.2f GiB" % (int(m.group(1)) / GIB) if m
                   else "error: " + r.stdout.strip().splitlines()[-1][:200])
            print("| %s | %s | | | | | | %.1f s |" % (b, why, secs))
            continue
        d = json.load(open(report))
        peak = d["peak"]
        print("| %s | %.2f GiB | %.2f GiB | %.2f GiB | %s | %.2f%% | %d | %.1f s |" % (
            b, d["planned_peak_bytes"] / GIB, d["arena_bytes"] / GIB,
            peak["live_bytes"] / GIB, peak["op"].split(" ")[-1],
            100.0 * d["recomputed_flops"] / d["step_flops"], len(d["remat_decisions"]), secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
