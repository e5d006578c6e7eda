"""The memory/recompute sweep: tcc's plan under shrinking --mem-budget.

Usage: /usr/bin/python3 bench/remat_sweep.py --tcc build/bin/tcc --tcc-run build/bin/tcc-run
                                             [--layers 8] [--width 64] [--context 128] [--batch 8] [--workdir DIR]

Exports a GPT (LAYERS layers, WIDTH 64, 4 heads, CONTEXT 128, BATCH 8, tanh
GELU, tied embeddings) from PyTorch, compiles it for the CPU target without a
budget, then with budgets from the unconstrained peak down in ten steps to
the smallest budget tcc's rematerialisation reaches. For each budget it prints
the planned arena, the recomputed FLOPs as a share of the step's FLOPs (tcc's
estimate: 2MNK per matmul, one per element otherwise), whether the runtime's
arena equals the plan, and whether one micro-step's gradients are
bit-identical to the unconstrained step's. As references in the same run, tcc
also compiles the two classic schedules (--remat-policy): checkpointing every
layer and Chen et al.'s sqrt(n) segments, which keep the segments' inputs and
recompute each segment's forward pass once; for each budget the table shows
the cheapest of them that fits.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
from export_models import TinyGPT  # noqa: E402
import step_abi  # noqa: E402


def compile_step(tcc, onnx_path, so, budget=None, policy=None):
    cmd = [tcc, "--target=cpu", onnx_path, "-o", so, "--memory-report", so + ".json"]
    if budget:
        cmd.append("--mem-budget=%d" % budget)
    if policy:
        cmd.append("--remat-policy=" + policy)
    t0 = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    dt = time.time() - t0
    if r.returncode != 0:
        m = re.search(r"smallest budget this plan meets is (\d+)", r.stdout)
        return None, dt, int(m.group(1)) if m else None, r.stdout
    return json.load(open(so + ".json")), dt, None, r.stdout


def grads_of(tcc_run, so, feed, out):
    subprocess.run([tcc_run, so, "--feed", feed, "--grads-only", "--dump", out],
                   check=True, stdout=subprocess.DEVNULL)
    gdir = os.path.join(out, "grads")
    return {f: np.load(os.path.join(gdir, f)) for f in sorted(os.listdir(gdir))}




def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workdir", default="/tmp/tcc-remat-sweep")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    L, C, T, B, V = args.layers, args.width, args.context, args.batch, 65

    torch.manual_seed(0)
    model = TinyGPT(vocab=V, block_size=T, n_embd=C, n_layer=L, n_head=4, gelu_approx="tanh")
    model.train()
    onnx_path = os.path.join(args.workdir, "gpt%d_%d_%d_%d.onnx" % (L, C, T, B))
    idx = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    torch.onnx.export(model, (idx, tgt), onnx_path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["idx", "targets"], output_names=["loss"])
    feed = os.path.join(args.workdir, "feed")
    os.makedirs(feed, exist_ok=True)
    np.save(os.path.join(feed, "idx.npy"), idx.numpy())
    np.save(os.path.join(feed, "targets.npy"), tgt.numpy())

    base_so = os.path.join(args.workdir, "base.so")
    base, base_time, _, out = compile_step(args.tcc, onnx_path, base_so)
    if base is None:
        sys.exit("the unconstrained compile failed:\n" + out)
    peak0 = base["planned_peak_bytes"]
    base_grads = grads_of(args.tcc_run, base_so, feed, os.path.join(args.workdir, "base_dump"))

    # The smallest budget rematerialisation reaches: ask for 1 byte.
    _, _, minimum, out = compile_step(args.tcc, onnx_path, os.path.join(args.workdir, "min.so"), 1)
    if minimum is None:
        sys.exit("could not find the minimum budget:\n" + out)

    step = base["step_flops"]

    def share(rep):
        return 100.0 * rep["recomputed_flops"] / (rep["step_flops"] - rep["recomputed_flops"])

    # The reference schedules, compiled by tcc itself (same IR, same plan).
    refs = {}
    for policy in ["checkpoint-every-layer", "checkpoint-sqrt"]:
        rep, _, _, out = compile_step(args.tcc, onnx_path,
                                      os.path.join(args.workdir, policy + ".so"), policy=policy)
        if rep is None:
            sys.exit("the %s schedule failed:\n%s" % (policy, out))
        refs[policy] = rep

    print("GPT: %d layers, width %d, context %d, batch %d; unconstrained peak %d bytes; "
          "step %.3g FLOPs (tcc's estimate)" % (L, C, T, B, peak0, step))
    print("%-22s %12s %8s %11s" % ("reference schedule", "planned", "of peak", "recompute%"))
    for policy, rep in refs.items():
        print("%-22s %12d %7.1f%% %10.2f%%" % (policy, rep["planned_peak_bytes"],
                                              100.0 * rep["planned_peak_bytes"] / peak0, share(rep)))
    print()
    print("%12s %12s %8s %7s %11s %14s %12s %11s %9s" % (
        "budget", "planned", "of peak", "remats", "recompute%", "best ref at <=", "arena=plan",
        "grads same", "compile s"))
    lowest = min(minimum, min(r["planned_peak_bytes"] for r in refs.values()))
    budgets = [int(peak0 - i * (peak0 - lowest) / 9) for i in range(10)]
    for policy, rep in refs.items():
        budgets.append(rep["planned_peak_bytes"])
    budgets.append(peak0 // 2)  # the goal: half the unconstrained peak
    budgets = sorted(set(budgets), reverse=True)
    failures = 0
    for i, budget in enumerate(budgets):
        so = os.path.join(args.workdir, "b%d.so" % i)
        rep, dt, _, out = compile_step(args.tcc, onnx_path, so, budget)
        if rep is None:
            print("%12d  infeasible: %s" % (budget, out.strip().splitlines()[-1][:100]))
            failures += 1
            continue
        step_info = step_abi.Step(so).info
        arena_ok = step_info.arena_bytes == rep["planned_peak_bytes"]
        grads = grads_of(args.tcc_run, so, feed, os.path.join(args.workdir, "d%d" % i))
        same = grads.keys() == base_grads.keys() and all(
            np.array_equal(grads[k], base_grads[k]) for k in grads)
        # The cheapest reference schedule that fits the same budget.
        fitting = [share(r) for r in refs.values() if r["planned_peak_bytes"] <= budget]
        best_ref = ("%13.1f%%" % min(fitting)) if fitting else "%14s" % "does not fit"
        ok = rep["planned_peak_bytes"] <= budget and arena_ok and same
        failures += 0 if ok else 1
        print("%12d %12d %7.1f%% %7d %10.2f%% %s %12s %11s %9.2f" % (
            budget, rep["planned_peak_bytes"], 100.0 * rep["planned_peak_bytes"] / peak0,
            len(rep["remat_decisions"]), share(rep), best_ref, arena_ok, same, dt))
    print("smallest budget tcc reaches: %d bytes (%.1f%% of the unconstrained peak); "
          "recompute%% is recomputed FLOPs over the step's own FLOPs" % (
              min(minimum, lowest), 100.0 * min(minimum, lowest) / peak0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
