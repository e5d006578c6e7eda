#!/usr/bin/env python3
"""PyTorch reference for the GPU benchmark (runs on the GPU machine).

Times GPT-2 small (the class bench/gpu/export_gpt2.py exports for tcc) in
PyTorch with fp16 autocast, GradScaler and fused AdamW, eager and
torch.compile, and writes one JSON line per mode: median step time, tokens/s
and torch.cuda.max_memory_allocated. Also writes the raw initial weights of
the same model in a given parameter order (tcc-run --init-weights).

Usage:
    python3 torch_bench.py bench --mode eager|compile [--steps 30] [--batch 8] [--seq 1024]
    python3 torch_bench.py weights MANIFEST.txt OUT.bin [--seq 1024]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "test", "models"))
from export_gpt2 import gpt2_small  # noqa: E402


def bench(a):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = gpt2_small(a.seq).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    step_fn = model
    if a.mode == "compile":
        step_fn = torch.compile(model)
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randint(0, 50257, (a.batch, a.seq), generator=g).to(dev)
    y = torch.randint(0, 50257, (a.batch, a.seq), generator=g).to(dev)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = step_fn(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times[a.warmup:]) * 1e3
    print(json.dumps({"system": "pytorch-" + a.mode, "step_ms": ms,
                      "tokens_per_s": a.batch * a.seq / (ms / 1e3),
                      "peak_bytes": torch.cuda.max_memory_allocated(),
                      "loss": float(loss), "torch": torch.__version__}))


def weights(a):
    torch.manual_seed(0)
    model = gpt2_small(a.seq)
    sd = dict(model.named_parameters())
    chunks = []
    for line in open(a.manifest):
        name = line.split()[0]
        if name not in sd:
            sys.exit("parameter %s of the step is not in the PyTorch model" % name)
        chunks.append(sd[name].detach().float().numpy().astype(np.float32).tobytes())
    with open(a.out, "wb") as f:
        for c in chunks:
            f.write(c)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--mode", choices=["eager", "compile"], required=True)
    b.add_argument("--steps", type=int, default=30)
    b.add_argument("--warmup", type=int, default=10)
    b.add_argument("--batch", type=int, default=8)
    b.add_argument("--seq", type=int, default=1024)
    w = sub.add_parser("weights")
    w.add_argument("manifest")
    w.add_argument("out")
    w.add_argument("--seq", type=int, default=1024)
    a = ap.parse_args()
    bench(a) if a.cmd == "bench" else weights(a)


if __name__ == "__main__":
    main()
