#!/usr/bin/env python3
"""Data parallelism: measured on this machine's CPU, modelled for GPUs.

    python3 bench/data_parallel.py [--build build] [--steps 30] [--accum 4]

1. Measured: the CPU demo (examples/tiny_gpt_demo.onnx, --target=cpu) under
   `mpirun -np N` for N = 1, 2, 3 with the global batch fixed (N ranks x
   --accum accum/N, where N divides it; else the nearest), tokens per second
   from the metrics' elapsed time (rank 0), the reference being one process
   without mpirun. On a 2-core machine N = 3 oversubscribes.
2. Modelled: the bytes the gradient all-reduce moves per optimizer step for
   GPT-2 small (124,439,808 parameters, fp32 accumulators), and a ring
   all-reduce's time, 2 (N-1)/N x bytes / bus bandwidth, on N H200s over
   NVLink (900 GB/s per GPU, NVIDIA's H200 datasheet; NCCL's ring reaches
   about 80% of a direction's 450 GB/s, so 360 GB/s is used) and over 100 Gb/s
   Ethernet (12.5 GB/s line rate, 11 GB/s used). The step's compute time is
   tcc's own GPT-2 small step measured on one H200 (35.5 ms for 8 x 1024
   tokens, bench/gpu/RESULTS.md; torch.compile's was 27.3 ms) per
   micro-batch; the efficiency is compute / (compute + exposed
   communication), without overlap (all of it exposed) and with DDP-style
   overlap (only what exceeds the backward pass, two thirds of compute, is
   exposed). These are a model's figures, not measurements: tcc's CUDA data
   parallelism (NCCL, buckets overlapped with the backward pass) has run in
   the CUDA emulation and, in a world of one, through NCCL on one H200
   (byte for byte the plain run), never across GPUs.
3. Planned: ZeRO-1 (`tcc --data-parallel=N`, the optimizer state sharded
   across the ranks), GPT-2 small's memory plan per rank for N = 1, 2, 4, 8
   on both targets (`tcc --target=cuda|cpu --no-weights --emit=planned
   --memory-report`, micro-batch --gpt2-batch x 1024), exported by
   bench/gpu/export_gpt2.py unless --gpt2 names an export. tcc's plans, not
   measurements; the measured table above also has a ZeRO-1 row (the demo
   built with --data-parallel=2).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]
GPT2_PARAMS = 124439808
NVLINK_BUS = 360e9   # bytes/s used for the ring (see the docstring)
ETHERNET_BUS = 11e9  # bytes/s (100 Gb/s)
COMPUTE_S = 0.0355   # one micro-batch of 8 x 1024 tokens, tcc's step on an H200 (bench/gpu/RESULTS.md)


def tokens_per_s(cmd, metrics):
    subprocess.run(cmd + ["--metrics", metrics], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    first, last = rows[0], rows[-1]
    return (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--accum", type=int, default=6, help="the global micro-batches per step")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpt2", help="GPT-2 small's ONNX export (default: exported into a temporary "
                    "folder)")
    ap.add_argument("--gpt2-batch", type=int, default=8)
    ap.add_argument("--skip-measured", action="store_true", help="only the model and the plans")
    args = ap.parse_args()
    tcc = os.path.join(args.build, "bin", "tcc")
    tcc_run = os.path.join(args.build, "bin", "tcc-run")
    if not args.skip_measured:
        measured(args, tcc, tcc_run)
    modelled()
    zero1_plans(args, tcc)


def measured(args, tcc, tcc_run):
    with tempfile.TemporaryDirectory() as work:
        so = os.path.join(work, "demo.so")
        zero = os.path.join(work, "demo-zero2.so")
        subprocess.run([tcc, os.path.join(REPO, "examples", "tiny_gpt_demo.onnx"), "--target=cpu",
                        "--data-parallel=2", "-o", zero], check=True, stderr=subprocess.DEVNULL)
        subprocess.run([tcc, os.path.join(REPO, "examples", "tiny_gpt_demo.onnx"), "--target=cpu",
                        "-o", so], check=True, stderr=subprocess.DEVNULL)
        base = [tcc_run, so, "--data", os.path.join(REPO, "examples", "data", "train.bin"),
                "--steps", str(args.steps), "--quiet"]
        configs = [("1 process (reference)", [], args.accum)]
        for n in (1, 2, 3):
            configs.append(("mpirun -np %d" % n, MPIRUN + ["-np", str(n)], max(args.accum // n, 1)))
        configs.append(("mpirun -np 2, ZeRO-1", MPIRUN + ["-np", "2"], max(args.accum // 2, 1)))
        results = {c[0]: [] for c in configs}
        for _ in range(args.rounds):
            for name, pre, k in configs:
                cmd = pre + base + ["--accum", str(k)]
                if "ZeRO" in name:
                    cmd[cmd.index(so)] = zero
                results[name].append(tokens_per_s(cmd,
                                                  os.path.join(work, "m.jsonl")))
    ref = statistics.median(results[configs[0][0]])
    print("Measured: the CPU demo, %d steps, %d micro-batches of 8 x 32 tokens per step, %d cores, "
          "median of %d rounds" % (args.steps, args.accum, os.cpu_count(), args.rounds))
    print()
    print("| run | ranks x --accum | tokens/s | vs reference |")
    print("|---|---|---:|---:|")
    for name, pre, k in configs:
        n = 1 if not pre else int(pre[pre.index("-np") + 1])
        med = statistics.median(results[name])
        print("| %s | %d x %d | %.0f | %.2fx |" % (name, n, k, med, med / ref))
    print()


def modelled():
    grad_bytes = GPT2_PARAMS * 4
    print("Modelled: GPT-2 small's gradient all-reduce, %.1f MB of fp32 accumulators per optimizer "
          "step, ring all-reduce; compute %.1f ms per micro-batch (8 x 1024 tokens), one "
          "micro-batch per rank per step" % (grad_bytes / 1e6, COMPUTE_S * 1e3))
    print()
    print("| N | link | all-reduce ms | efficiency, no overlap | efficiency, overlapped |")
    print("|---:|---|---:|---:|---:|")
    for link, bus in (("NVLink (H200)", NVLINK_BUS), ("100 Gb/s Ethernet", ETHERNET_BUS)):
        for n in (2, 4, 8):
            t = 2 * (n - 1) / n * grad_bytes / bus
            exposed = max(t - COMPUTE_S * 2 / 3, 0.0)
            print("| %d | %s | %.2f | %.0f%% | %.0f%% |" % (
                n, link, t * 1e3, 100 * COMPUTE_S / (COMPUTE_S + t),
                100 * COMPUTE_S / (COMPUTE_S + exposed)))


def zero1_plans(args, tcc):
    mib = float(1 << 20)
    with tempfile.TemporaryDirectory() as work:
        onnx = args.gpt2
        if not onnx:
            onnx = os.path.join(work, "gpt2.onnx")
            subprocess.run(["/usr/bin/python3", os.path.join(REPO, "bench", "gpu", "export_gpt2.py"),
                            onnx, "--batch", str(args.gpt2_batch)], check=True)
        rows = {}
        for target in ("cuda", "cpu"):
            for n in (1, 2, 4, 8):
                report = os.path.join(work, "plan-%s-%d.json" % (target, n))
                subprocess.run([tcc, onnx, "--target=" + target, "--no-weights", "--emit=planned",
                                "--data-parallel=%d" % n, "--memory-report", report, "-o",
                                os.path.join(work, "planned.mlir")], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with open(report) as f:
                    rows.setdefault(target, []).append((n, json.load(f)))
    for target, what in (("cuda", "fp32 masters, AdamW state and accumulators, fp16 working copies"),
                         ("cpu", "fp32")):
        print()
        print("Planned: GPT-2 small with ZeRO-1 (tcc --target=%s --data-parallel=N, %s, micro-batch "
              "%d x 1024), bytes per rank (MiB)" % (target, what, args.gpt2_batch))
        print()
        cuda = target == "cuda"
        print("| N | parameters (fp32) | %sgradients (+ reduce-scatter buffer) | optimizer state | "
              "activations and temporaries | arena per rank | vs N = 1 |%s"
              % ("fp16 copies | " if cuda else "", " device peak per rank |" if cuda else ""))
        print("|---:|---:|---:|---:|---:|---:|---:|%s" % ("---:|---:|" if cuda else ""))
        ref = rows[target][0][1]["arena_bytes"]
        for n, r in rows[target]:
            c = r["categories"]
            print("| %d | %.1f | %s%.1f | %.1f | %.1f | %.1f | %.2fx |%s" % (
                n, c["parameters"] / mib,
                "%.1f | " % (c.get("fp16_working_copies", 0) / mib) if cuda else "",
                c["gradients"] / mib, c["optimizer_state"] / mib,
                c["activations_and_temporaries"] / mib, r["arena_bytes"] / mib,
                r["arena_bytes"] / ref, " %.1f |" % (r["planned_peak_bytes"] / mib) if cuda else ""))
    print()
    print("The device peak adds to the arena the constants, input staging and the CUDA runtime's "
          "reserve (64 MiB); --mem-budget applies to it, per rank.")


if __name__ == "__main__":
    sys.exit(main())
