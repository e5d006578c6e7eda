#!/usr/bin/python3
"""Memory plans with host memory (`tcc --offload=auto`) for models bigger
than a consumer GPU, budget by budget (no GPU needed: these are tcc's
plans and its cost model's estimates, not measurements).

Usage: /usr/bin/python3 bench/offload_plans.py --tcc build/bin/tcc
           [--workdir DIR] [--models gpt2-xl,tinyllama] [--budgets 24G,16G,12G,8G]
           [--arch 86] [--flags="..."]

Exports each model once (bench/export_large.py: GPT-2 XL's and TinyLlama
1.1B's shapes, micro-batch 1 x 2048, weights as unwritten external data),
then for each budget plans `tcc MODEL --target=cuda --cuda-arch=ARCH
--no-weights --mem-budget=B --offload=auto --memory-report` and, as the
reference measured in the same run, the same with `--offload=none`. The
reference row plans without a budget. Columns: whether a plan fits, device
and host bytes, the parameters whose state and accumulators moved,
recomputed FLOPs, bytes over PCIe per optimizer step (one micro-step per
step, the costliest case), and the cost model's estimated step time against
the unconstrained plan's (roofline per op at the GPU's published rates,
PCIe and host memory at --pcie-gbps and --host-gbps, no overlap counted).
A second table weighs swapping the recomputed activations to host memory
against recomputing them (the memory report's activation_swap estimate).
With --flags "--swap-activations=auto" (or =all) tcc swaps them where that
estimate says so and the plan still fits: the first table's plans are then
those, their est. step time adds the copies' exposed time, and the second
table says what was swapped.

The default --arch 86 is an RTX 3090 (24 GB, 71 TFLOP/s fp16, 936 GB/s),
the consumer card the issue names.
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


def plan(tcc, onnx, report, budget, offload, arch, flags):
    if os.path.exists(report):
        os.remove(report)
    cmd = [tcc, onnx, "--target=cuda", "--cuda-arch=%s" % arch, "--no-weights",
           "--offload=" + offload, "--memory-report", report] + flags
    if budget != "none":
        cmd.append("--mem-budget=" + budget)
    start = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    secs = time.time() - start
    if r.returncode != 0:
        m = re.search(r"the smallest budget this plan meets is (\d+) bytes", r.stdout)
        why = ("no; smallest %.2f GiB" % (int(m.group(1)) / GIB) if m
               else "error: " + (r.stdout.strip().splitlines() or [""])[-1][:160])
        return None, why, secs
    return json.load(open(report)), "", secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--workdir", default="/tmp/tcc-offload-plans")
    ap.add_argument("--models", default="gpt2-xl,tinyllama")
    ap.add_argument("--budgets", default="24G,16G,12G,8G")
    ap.add_argument("--arch", default="86")
    ap.add_argument("--flags", default="", help="more tcc flags, e.g. --pcie-gbps=16")
    ap.add_argument("--host-budget", default="64G",
                    help="tcc --host-budget: the host memory of the machine planned for "
                         "(default 64G, a workstation beside a 24 GB card)")
    ap.add_argument("--accum", type=int, default=8,
                    help="the accumulation of the second time column (default 8)")
    venv = os.path.expanduser("~/.cache/tcc/venv/bin/python")
    ap.add_argument("--python", default=venv if os.path.exists(venv) else sys.executable,
                    help="the interpreter that exports (default: scripts/setup.sh's venv)")
    args = ap.parse_args()
    flags = args.flags.split() + ["--host-budget=" + args.host_budget]
    print("GPU model: --cuda-arch=%s; one micro-step per optimizer step; estimates, not "
          "measurements\n" % args.arch)
    K = args.accum
    print("| model | `--mem-budget` | fits | device GiB | host GiB | state on host "
          "| accumulators on host | recomputed FLOPs | PCIe GB per step | est. step s "
          "| vs unconstrained | per micro-step with --accum %d, vs unconstrained "
          "| without offload | plan time |" % K)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def per_micro(e, k):
        # An optimizer step of k micro-steps, per micro-step (no overlap).
        return (k * (e["micro_step_compute_seconds"] + e["transfer_seconds_per_micro_step"] +
                     e["host_seconds_per_micro_step"]) +
                e["transfer_seconds_per_optimizer_step"] +
                e["host_update_seconds_per_optimizer_step"]) / k
    swaps = []  # (model, budget, the plan's activation_swap estimate)
    for name in args.models.split(","):
        d = os.path.join(args.workdir, name)
        onnx = os.path.join(d, name + ".onnx")
        if not os.path.exists(onnx):
            subprocess.run([args.python, os.path.join(HERE, "export_large.py"), name, d],
                           check=True)
        ref, why, secs = plan(args.tcc, onnx, os.path.join(d, "ref.json"), "none", "auto",
                              args.arch, flags)
        if ref is None:
            print("| %s | none | %s | | | | | | | | | | %.1f s |" % (name, why, secs))
            continue
        base = ref["estimate"]["step_seconds_accum_1"]
        base_k = per_micro(ref["estimate"], K)
        print("| %s | none | yes | %.2f | 0 | | | 0%% | 0 | %.3f | 1.00x | 1.00x | | %.1f s |" % (
            name, ref["planned_peak_bytes"] / GIB, base, secs))
        for b in args.budgets.split(","):
            r, why, secs = plan(args.tcc, onnx, os.path.join(d, "auto_%s.json" % b), b, "auto",
                                args.arch, flags)
            _, why_none, _ = plan(args.tcc, onnx, os.path.join(d, "none_%s.json" % b), b,
                                  "none", args.arch, flags)
            without = why_none or "fits"
            if r is None:
                print("| %s | %s | %s | | | | | | | | | | %s | %.1f s |" % (
                    name, b, why, without, secs))
                continue
            h, e = r["host"], r["estimate"]
            if "activation_swap" in r:
                swaps.append((name, b, r["activation_swap"]))
            step = e["step_seconds_accum_1"]
            pcie = e["pcie_bytes_per_optimizer_step"] + e["pcie_bytes_per_micro_step"]
            if r.get("activation_swap", {}).get("swapped", False):
                # The copies' time not hidden under the passes; their bytes,
                # out and back.
                step += r["activation_swap"]["exposed_copy_seconds"]
                pcie += 2 * r["activation_swap"]["host_bytes"]
            print("| %s | %s | yes | %.2f | %.2f | %d | %d | %.2f%% | %.2f | %.3f | %.2fx "
                  "| %.2fx | %s | %.1f s |" % (
                      name, b, r["planned_peak_bytes"] / GIB, h["bytes"] / GIB,
                      len(h["state_on_host"]), len(h["gradients_on_host"]),
                      100.0 * r["recomputed_flops"] / r["step_flops"],
                      pcie / 1e9,
                      step, step / base, per_micro(e, K) / base_k, without, secs))
    if swaps:
        # Swapping instead of recomputing: does it pay, and was it done?
        print("\nSwapping the recomputed activations to host memory instead of recomputing "
              "them, per micro-step (the memory report's activation_swap: copies out in the "
              "forward pass and back in the backward pass at --pcie-gbps, hidden under their "
              "pass as far as it is long, which favours the swap):\n")
        print("| model | `--mem-budget` | GB each way | copy s each way | exposed copy s "
              "| recompute s | swap pays | swapped (--swap-activations) |")
        print("|---|---|---|---|---|---|---|---|")
        for name, b, w in swaps:
            done = ("%s: %d of %d values" % ("yes" if w["swapped"] else "no", w["values"], w["candidates"])
                    if "swapped" in w else "not asked")
            print("| %s | %s | %.2f | %.3f | %.3f | %.3f | %s | %s |" % (
                name, b, w["bytes"] / 1e9, w["copy_seconds_each_way"], w["exposed_copy_seconds"],
                w["recompute_seconds"], "yes" if w["swap_pays"] else "no", done))
    print("\nDeepSpeed ZeRO-Offload, as published (Ren et al., USENIX ATC 2021, "
          "arXiv:2101.06840): over 13B parameters trained on one GPU; 40 TFLOP/s on one "
          "V100 for a 10B-parameter GPT-2 against 30 TFLOP/s for PyTorch's largest "
          "1.4B model; the optimizer runs on the CPU (DeepSpeedCPUAdam, 5-7x PyTorch's "
          "CPU Adam, deepspeed.ai/tutorials/zero-offload). The placement there is the "
          "user's configuration; tcc chooses it against recomputation per budget.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
