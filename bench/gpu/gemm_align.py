#!/usr/bin/env python3
"""GPT-2 small's output-projection GEMMs in fp16 on the GPU (PyTorch, so
cuBLAS/cuBLASLt), with the vocabulary as GPT-2 has it (50257, rows of the
logits not 16-byte aligned) and padded to a multiple of 64 (50304): the three
GEMMs of one 1024-row loss chunk (logits = x W^T, dx = dlogits W,
dW = dlogits^T x), each the median of 50 after 10 warm-up runs.

Usage (GPU machine): python3 bench/gpu/gemm_align.py
"""
import torch


def timed(fn, reps=50):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    dev = torch.device("cuda")
    rows, width = 1024, 768
    print("%-34s %10s %10s %10s" % ("GEMM (1024-row chunk)", "V", "ms", "TFLOP/s"))
    for v in (50257, 50304):
        x = torch.randn(rows, width, device=dev, dtype=torch.float16)
        w = torch.randn(v, width, device=dev, dtype=torch.float16)
        dl = torch.randn(rows, v, device=dev, dtype=torch.float16)
        flops = 2.0 * rows * width * v
        cases = [("logits = x W^T", lambda: x @ w.t()),
                 ("dx = dlogits W", lambda: dl @ w),
                 ("dW = dlogits^T x", lambda: dl.t() @ x)]
        for name, fn in cases:
            ms = timed(fn)
            print("%-34s %10d %10.3f %10.1f" % (name, v, ms, flops / ms / 1e9))
    # V = 50257 columns in rows of 50304 (a padded row stride; the operand's
    # leading dimension is then a multiple of 8 halves).
    v, vp = 50257, 50304
    x = torch.randn(rows, width, device=dev, dtype=torch.float16)
    w = torch.randn(v, width, device=dev, dtype=torch.float16)
    dl = torch.randn(rows, vp, device=dev, dtype=torch.float16)[:, :v]
    flops = 2.0 * rows * width * v
    for name, fn in [("dx = dlogits W, ld 50304", lambda: dl @ w),
                     ("dW = dlogits^T x, ld 50304", lambda: dl.t() @ x)]:
        ms = timed(fn)
        print("%-34s %10d %10.3f %10.1f" % (name, v, ms, flops / ms / 1e9))


if __name__ == "__main__":
    main()
