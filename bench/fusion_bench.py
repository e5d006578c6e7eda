"""Fusion benchmark: op and kernel counts, planned bytes, CPU step time,
tcc with and without fusion against PyTorch eager, side by side.

Usage: /usr/bin/python3 bench/fusion_bench.py --tcc build/bin/tcc --tcc-run build/bin/tcc-run

For a tiny GPT (2 layers, width 32, context 16, batch 4) and a larger one
(6 layers, width 256, context 256, batch 4), in this one run: compiles the
step with and without fusion (CPU target), times one micro-step (forward +
backward + gradient accumulation) through the step ABI, median of N runs,
and times PyTorch eager's forward + backward on the same model and batch with
the same number of threads (1, as tcc's CPU target). Prints the table and
the ratios. Bytes moved: the planned arena traffic is not measured yet;
`temporary_bytes_unshared` (the bytes of every intermediate buffer, written
once and read at least once) stands in for it.
"""
import argparse
import json
import os
import statistics
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

CONFIGS = {
    "tiny GPT (2x32, T=16)": dict(vocab=65, block=16, embd=32, layers=2, heads=4, batch=4, runs=50),
    "GPT 6x256, T=256": dict(vocab=65, block=256, embd=256, layers=6, heads=8, batch=4, runs=3),
}


def compile_step(tcc, onnx_path, so, fusion):
    cmd = [tcc, "--target=cpu", onnx_path, "-o", so, "--memory-report", so + ".mem.json",
           "--fusion-report", so + ".fusion.json"]
    if not fusion:
        cmd.append("--no-fusion")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.load(open(so + ".fusion.json")), json.load(open(so + ".mem.json"))


def time_step(so, idx, tgt, runs):
    step = step_abi.Step(so)
    step.init()
    step.set_input("idx", idx)
    step.set_input("targets", tgt)
    step.micro_step(1.0)  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        step.micro_step(1.0)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_torch(model, idx, tgt, runs):
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        loss.backward()
        dt = time.perf_counter() - t0
        if i:
            times.append(dt)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", default="/tmp/tcc-fusion-bench")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(1)
    rows = []
    for name, c in CONFIGS.items():
        torch.manual_seed(0)
        model = TinyGPT(vocab=c["vocab"], block_size=c["block"], n_embd=c["embd"],
                        n_layer=c["layers"], n_head=c["heads"], gelu_approx="tanh")
        model.train()
        gen = torch.Generator().manual_seed(1)
        idx = torch.randint(0, c["vocab"], (c["batch"], c["block"]), generator=gen)
        tgt = torch.randint(0, c["vocab"], (c["batch"], c["block"]), generator=gen)
        path = os.path.join(args.workdir, "m%d.onnx" % len(rows))
        torch.onnx.export(model, (idx, tgt), path, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17,
                          input_names=["idx", "targets"], output_names=["loss"])
        res = {}
        for fusion in (True, False):
            so = os.path.join(args.workdir, "m%d_%s.so" % (len(rows), "f" if fusion else "nf"))
            fr, mr = compile_step(args.tcc, path, so, fusion)
            res[fusion] = (fr, mr, time_step(so, idx.numpy(), tgt.numpy(), c["runs"]))
        torch_t = time_torch(model, idx, tgt, c["runs"])
        rows.append((name, res, torch_t))

    print("%-22s %9s %9s %9s %14s %14s %12s %12s %12s %9s %9s" % (
        "model", "ops", "kernels", "ops/kern", "interm. bytes", "interm. bytes",
        "tcc fused", "tcc unfused", "torch eager", "fused/", "fused/"))
    print("%-22s %9s %9s %9s %14s %14s %12s %12s %12s %9s %9s" % (
        "", "", "(fused)", "", "(fused)", "(unfused)", "ms/step", "ms/step", "ms/step",
        "unfused", "torch"))
    for name, res, torch_t in rows:
        fr, mr, tf = res[True]
        _, mr0, tu = res[False]
        print("%-22s %9d %9d %9.2f %14d %14d %12.2f %12.2f %12.2f %9.2f %9.2f" % (
            name, fr["op_count"], fr["kernel_count"], fr["op_count"] / fr["kernel_count"],
            mr["temporary_bytes_without_reuse"], mr0["temporary_bytes_without_reuse"],
            tf * 1e3, tu * 1e3, torch_t * 1e3, tf / tu, tf / torch_t))
    print("one micro-step (forward + backward + accumulation), median; 1 thread for both; "
          "ratios < 1 mean tcc fused is faster")


if __name__ == "__main__":
    main()
