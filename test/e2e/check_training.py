"""Training parity: tcc's compiled optimizer and tcc-run's loop against PyTorch.

Usage: /usr/bin/python3 check_training.py --tcc TCC --tcc-run TCC_RUN --workdir DIR [MODEL ...]

For each test model and each configuration below, in this one run: export the
model, compile it with `tcc --optimizer=...`, train it with `tcc-run` on two
micro-batches (a --feed folder with two subfolders) for 3 optimizer steps with
accumulation 2, and run the same loop in PyTorch:

    for step: set lr; for k in 0..1: loss = model(batch k); (loss / 2).backward()
              [clip_grad_norm_]; opt.step(); opt.zero_grad()

Every micro-step loss and every final parameter must match within rtol 1e-5 /
atol 1e-6 (|tcc - torch| <= atol + rtol * |torch|), or, for f32, be no
further from PyTorch float64 than atol + twice PyTorch float32's own distance
from it on that element (the same loop run in float32: its GEMMs, like the f32
step's BLAS GEMMs, accumulate in float).

Two precisions are checked against PyTorch float64:
  - f64 (`tcc --cpu-precision=f64`): every parameter element, no exceptions;
    this pins the optimizer's semantics exactly.
  - f32 (the CPU target's default): every element except those whose exact
    gradient is zero at every step but whose float64 gradient is rounding
    noise (0 < |float64 grad| < 1e-10), such as the key biases of attention
    (softmax is shift-invariant). AdamW divides the
    gradient by its own running RMS, so on those elements float32 rounding
    noise (~1e-10) becomes an update of ~lr * 0.01 whose sign is noise; they
    are counted in the table, not hidden.
Prints a table and ends with `N passed, M failed`.
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export_models  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
STEPS, ACCUM = 3, 2
DEGENERATE_GRAD = 1e-10

CONFIGS = {
    "adamw": dict(optimizer="adamw", lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                  weight_decay=0.01, schedule="constant", warmup=0, min_lr=0.0,
                  clip=0.0, momentum=0.0, nesterov=False, no_decay=None),
    "sgd-momentum-clip-cosine": dict(
        optimizer="sgd", lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
        schedule="cosine", warmup=1, min_lr=0.005, clip=0.5, momentum=0.9,
        nesterov=True, no_decay="*.bias"),
}
DEFAULT_MODELS = ["tiny_gpt_opset14", "tiny_gpt_opset17", "bert_mlm", "mlp_gemm",
                  "mha_decoder", "llama2c_buffers"]


def lr_at(cfg, it):
    lr, warmup, min_lr = cfg["lr"], cfg["warmup"], cfg["min_lr"]
    if it < warmup:
        return lr * (it + 1) / warmup
    if cfg["schedule"] == "constant":
        return lr
    if it > STEPS:
        return min_lr
    ratio = (it - warmup) / (STEPS - warmup) if STEPS != warmup else 0.0
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def build(name, feed_seed=None):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234 if feed_seed is None else feed_seed)
    return export_models.MODELS[name](gen)


def write_feeds(name, root, dtype):
    """Two micro-batches: the model's sample feed and one drawn with another seed."""
    batches = []
    for k, seed in enumerate([None, 4321]):
        _, _, feed, _ = build(name, seed)
        d = os.path.join(root, "mb%d" % k)
        os.makedirs(d, exist_ok=True)
        for key, v in feed.items():
            a = v.numpy()
            if a.dtype.kind == "f":
                a = a.astype(dtype)
            np.save(os.path.join(d, key + ".npy"), a)
        batches.append(feed)
    return batches


def torch_run(name, cfg, batches, dtype=torch.float64):
    model, _, _, _ = build(name)
    model = model.to(dtype)
    model.train()
    named = dict(model.named_parameters())
    if cfg["no_decay"]:
        import fnmatch
        nd = [p for n, p in named.items() if fnmatch.fnmatch(n, cfg["no_decay"])]
        d = [p for n, p in named.items() if not fnmatch.fnmatch(n, cfg["no_decay"])]
        groups = [{"params": d, "weight_decay": cfg["weight_decay"]},
                  {"params": nd, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(named.values()), "weight_decay": cfg["weight_decay"]}]
    if cfg["optimizer"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                                eps=cfg["eps"])
    else:
        opt = torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"],
                              nesterov=cfg["nesterov"])
    losses = []
    max_grad = {n: np.zeros(p.shape) for n, p in named.items()}
    for it in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, it)
        for k in range(ACCUM):
            feed = batches[(it * ACCUM + k) % len(batches)]
            args = [v.to(dtype) if v.is_floating_point() else v for v in feed.values()]
            loss = model(*args)
            losses.append(float(loss))
            (loss / ACCUM).backward()
        for n, p in named.items():
            if p.grad is not None:
                max_grad[n] = np.maximum(max_grad[n], np.abs(p.grad.detach().numpy()))
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        opt.zero_grad()
    params = {n: p.detach().double().numpy().copy() for n, p in named.items()}
    return np.array(losses), params, max_grad


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout))
    return r.stdout


def check(name, cfg_name, precision, args, ref):
    cfg = CONFIGS[cfg_name]
    work = os.path.join(args.workdir, name, cfg_name + "-" + precision)
    os.makedirs(work, exist_ok=True)
    export_models.export_one(name, work)
    dtype = np.float64 if precision == "f64" else np.float32
    write_feeds(name, os.path.join(work, "feed"), dtype)
    so = os.path.join(work, "step.so")
    run([args.tcc, "--target=cpu", os.path.join(work, name + ".onnx"), "-o", so,
         "--optimizer=" + cfg["optimizer"], "--cpu-precision=" + precision])
    cmd = [args.tcc_run, so, "--feed", os.path.join(work, "feed"), "--steps", str(STEPS),
           "--accum", str(ACCUM), "--lr", repr(cfg["lr"]), "--weight-decay",
           repr(cfg["weight_decay"]), "--lr-schedule", cfg["schedule"],
           "--warmup", str(cfg["warmup"]), "--min-lr", repr(cfg["min_lr"]),
           "--dump", os.path.join(work, "dump"), "--quiet"]
    if cfg["optimizer"] == "adamw":
        cmd += ["--beta1", repr(cfg["beta1"]), "--beta2", repr(cfg["beta2"]),
                "--eps", repr(cfg["eps"])]
    else:
        cmd += ["--momentum", repr(cfg["momentum"])] + (["--nesterov"] if cfg["nesterov"] else [])
    if cfg["clip"] > 0:
        cmd += ["--clip-norm", repr(cfg["clip"])]
    if cfg["no_decay"]:
        cmd += ["--no-decay", cfg["no_decay"]]
    run(cmd)

    ref_losses, ref_params, max_grad, ref32_params = ref
    problems = []
    losses = np.load(os.path.join(work, "dump", "losses.npy")).astype(np.float64)
    if losses.shape != ref_losses.shape:
        problems.append("losses: %s vs torch %s" % (losses.shape, ref_losses.shape))
        loss_rel = float("inf")
    else:
        loss_rel = float(np.max(np.abs(losses - ref_losses) / np.abs(ref_losses)))
        bad = np.abs(losses - ref_losses) > ATOL + RTOL * np.abs(ref_losses)
        if bad.any():
            problems.append("micro-step losses %s vs torch %s" % (losses, ref_losses))
    max_rel, excluded = 0.0, 0
    for pname, want in ref_params.items():
        path = os.path.join(work, "dump", "params", pname.replace("/", "_") + ".npy")
        if not os.path.exists(path):
            problems.append("no final value for %s" % pname)
            continue
        got = np.load(path).astype(np.float64)
        err = np.abs(got - want)
        mask = np.ones(want.shape, bool)
        if precision == "f32" and cfg["optimizer"] == "adamw":
            g = max_grad[pname]
            mask = ~((g > 0) & (g < DEGENERATE_GRAD))
            excluded += int((~mask).sum())
        rel = err / np.maximum(np.abs(want), ATOL / RTOL)
        if mask.any():
            max_rel = max(max_rel, float(np.max(rel[mask])))
        bound = ATOL + RTOL * np.abs(want)
        if precision == "f32":
            # Never worse than twice PyTorch's own float32 error on the element.
            bound = np.maximum(bound, ATOL + 2 * np.abs(ref32_params[pname] - want))
        bad = (err > bound) & mask
        if bad.any():
            i = np.unravel_index(np.argmax(np.where(mask, err, 0)), want.shape)
            problems.append("%s: %d elements out of tolerance, e.g. %s: %.9g vs torch %.9g"
                            % (pname, int(bad.sum()), i, got[i], want[i]))
    return loss_rel, max_rel, excluded, problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    args = p.parse_args()
    torch.set_num_threads(1)
    passed = failed = 0
    print("%-18s %-26s %-4s %12s %14s %9s" % ("model", "optimizer", "prec", "loss rel",
                                             "param rel", "excluded"))
    for name in args.models:
        for cfg_name in CONFIGS:
            batches = [build(name, s)[2] for s in [None, 4321]]
            ref = torch_run(name, CONFIGS[cfg_name], batches) + (
                torch_run(name, CONFIGS[cfg_name], batches, torch.float32)[1],)
            for precision in ["f64", "f32"]:
                try:
                    loss_rel, max_rel, excluded, problems = check(
                        name, cfg_name, precision, args, ref)
                except Exception as e:
                    print("%-18s %-26s %-4s FAILED: %s" % (name, cfg_name, precision, e))
                    failed += 1
                    continue
                print("%-18s %-26s %-4s %12.2e %14.2e %9d" % (
                    name, cfg_name, precision, loss_rel, max_rel, excluded))
                for prob in problems:
                    print("    " + prob)
                if problems:
                    failed += 1
                else:
                    passed += 1
    print("param rel = max |tcc - torch| / max(|torch|, 0.1) over compared elements; "
          "excluded = AdamW f32 elements whose exact gradient is zero (see the docstring)")
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
