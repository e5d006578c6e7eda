#!/usr/bin/env python3
"""Tables for bench/gpu/run.sh (runs on the GPU machine; numpy only).

    compare.py parity REF_DIR GOT_DIR MODEL...     fp16 CUDA vs the CPU target
    compare.py curves CPU.jsonl CUDA.jsonl         training loss curves
    compare.py seeds REF_DIR OUT_DIR               fp16 curves against the fp32
                                                   spread across seeds (exit 1: outside)
    compare.py gpt2 OUT_DIR                        the speed and memory table
"""
import glob
import json
import os
import re
import statistics
import sys

import numpy as np

GRAD_TOL = 1e-2   # the bound on the relative error of fp16 gradients


# A parameter's error is relative to its largest reference gradient. A
# gradient that is exactly zero in exact arithmetic (an attention key bias,
# which softmax cancels) holds only rounding noise (1e-10 of the model's
# largest gradient in fp32, 1e-5 in fp16) and has no scale of its own: where
# the reference is below ZERO x the model's largest gradient, the error is
# relative to NOISE x the model's largest instead (so the bound asks the
# fp16 gradient to stay below 1e-4 of it).
ZERO = 1e-6
NOISE = 1e-2


def rel_error(ref, got, model_max=0.0):
    """max |got - ref| relative to max |ref| (or, for a gradient that is
    zero up to rounding, to NOISE * model_max); inf where got is not finite
    but ref is (a NaN must fail the bound, not slip past a comparison)."""
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        return float("inf")
    if np.any(~np.isfinite(got) & np.isfinite(ref)):
        return float("inf")
    scale = float(np.max(np.abs(ref), initial=0.0))
    if scale <= ZERO * model_max:
        scale = NOISE * model_max
    return float(np.max(np.abs(ref - got), initial=0.0)) / max(scale, 1e-30)


def parity(ref, got, models, label="cuda"):
    """Prints the parity table; returns the number of models that fail."""
    print("%-18s %12s %12s %10s %14s  %s" % ("model", "loss (cpu)", "loss (%s)" % label,
                                            "loss rel", "max grad rel", "worst parameter"))
    bad = 0
    for m in models:
        r, g = os.path.join(ref, m), os.path.join(got, m)
        if not os.path.exists(os.path.join(g, "loss.npy")):
            print("%-18s  no result (the CUDA run failed)" % m)
            bad += 1
            continue
        lr = float(np.load(os.path.join(r, "loss.npy")))
        lg = float(np.load(os.path.join(g, "loss.npy")))
        worst, wname = 0.0, ""
        grads = sorted(glob.glob(os.path.join(r, "grads", "*.npy")))
        if not grads:
            worst, wname = float("inf"), "(no reference gradients)"
        model_max = max([float(np.max(np.abs(np.load(f)), initial=0.0)) for f in grads] or [0.0])
        for f in grads:
            other = os.path.join(g, "grads", os.path.basename(f))
            # |cuda - cpu| relative to the parameter's largest gradient
            rel = rel_error(np.load(f), np.load(other), model_max) if os.path.exists(other) else float("inf")
            if not rel <= worst:
                worst, wname = rel, os.path.basename(f)[:-4]
        loss_rel = abs(lg - lr) / abs(lr) if np.isfinite(lg) else float("inf")
        ok = worst < GRAD_TOL and loss_rel < GRAD_TOL
        bad += not ok
        print("%-18s %12.6f %12.6f %10.2e %14.2e  %s %s" % (m, lr, lg, loss_rel, worst, wname,
                                                          "ok" if ok else "FAIL"))
    print("parity: %d passed, %d failed (bound %.0e on max |cuda - cpu| / max |cpu| per parameter; for a "
          "gradient below %.0e of the model's largest, / %.0e of that)" % (len(models) - bad, bad, GRAD_TOL,
                                                                           ZERO, NOISE))
    return bad


def load(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def curves(cpu_path, cuda_path):
    if not os.path.exists(cuda_path):
        print("training: no CUDA result")
        return
    cpu, cuda = load(cpu_path), load(cuda_path)
    n = min(len(cpu), len(cuda))
    a = np.array([r["loss"] for r in cpu[:n]])
    b = np.array([r["loss"] for r in cuda[:n]])
    tail = min(20, n)
    print("training: %d steps compared; loss at step 1 cpu %.4f cuda %.4f; step %d cpu %.4f cuda %.4f"
          % (n, a[0], b[0], n, a[-1], b[-1]))
    print("  mean |cuda - cpu| over all steps %.4f, max %.4f; mean of the last %d steps cpu %.4f cuda %.4f (rel %.2e)"
          % (np.mean(np.abs(a - b)), np.max(np.abs(a - b)), tail, a[-tail:].mean(), b[-tail:].mean(),
             abs(b[-tail:].mean() - a[-tail:].mean()) / a[-tail:].mean()))
    skipped = cuda[n - 1].get("skipped_total", 0)
    print("  cuda loss scale at the end %s, %s steps skipped" % (cuda[n - 1].get("loss_scale"), skipped))
    for s in (0, 49, 99, 149, n - 1):
        if s < n:
            print("  step %4d  cpu %.4f  cuda %.4f" % (s + 1, a[s], b[s]))


EVAL_INITIAL_TOL = 5e-3  # fp16 evaluation of the same (initial) weights
EVAL_TRAINED_TOL = 3e-2  # after 20 and 40 steps, the fp16 and fp32 runs apart


def eval_loss(text_path):
    """The loss `tcc-run --eval-only` printed, or None."""
    if not os.path.exists(text_path):
        return None
    for line in open(text_path):
        if line.startswith("validation loss "):
            return float(line.split()[2].rstrip(","))
    return None


def evaluation(ref, out):
    """The evaluation step on the GPU: --eval-only on the initial weights
    against the CPU's (relative EVAL_INITIAL_TOL), and the validation losses
    of a 40-step run at steps 20 and 40 against the CPU run's
    (EVAL_TRAINED_TOL). Returns the number of failures."""
    bad = 0
    cpu0, cuda0 = eval_loss(os.path.join(ref, "eval_initial_cpu.txt")), \
        eval_loss(os.path.join(out, "eval_initial_cuda.txt"))
    ok = cpu0 is not None and cuda0 is not None and abs(cuda0 - cpu0) <= EVAL_INITIAL_TOL * cpu0
    bad += not ok
    print("eval: initial weights, validation loss cpu %s cuda %s  %s" % (cpu0, cuda0, "ok" if ok else "FAILED"))
    path = os.path.join(out, "eval_train_cuda.jsonl")
    cpu = {r["step"]: r["val_loss"] for r in load(os.path.join(ref, "eval_train_cpu.jsonl")) if "val_loss" in r}
    cuda = {r["step"]: r["val_loss"] for r in load(path) if "val_loss" in r} if os.path.exists(path) else {}
    if not cpu:
        print("eval: the CPU reference has no validation losses (prepare.sh makes them)")
        bad += 1
    for step in sorted(cpu):
        got = cuda.get(step)
        ok = got is not None and abs(got - cpu[step]) <= EVAL_TRAINED_TOL * cpu[step]
        bad += not ok
        print("eval: step %d, validation loss cpu %.4f cuda %s  %s" % (
            step, cpu[step], "%.4f" % got if got is not None else "none", "ok" if ok else "FAILED"))
    return bad


TAIL = 20           # the steps a run's final loss is averaged over
SPREAD_MARGIN = 0.05  # relative widening of the fp32 runs' range


def final_loss(rows):
    tail = [r["loss"] for r in rows[-TAIL:]]
    return sum(tail) / len(tail) if tail else float("nan")


def seeds(ref, out):
    """Each fp16 run's final loss (the mean of its last TAIL steps) must lie
    within the range of the fp32 runs' final losses over the same seeds,
    widened by SPREAD_MARGIN: one fp16 run and one fp32 run with the same
    seed part ways once the learning rate peaks, so the check is against
    what fp32 itself does across seeds. Returns the number outside."""
    cpu, cuda = {}, {}
    for s in range(0, 10):
        rc = os.path.join(ref, "train_cpu.jsonl" if s == 0 else "train_cpu_seed%d.jsonl" % s)
        gc = os.path.join(out, "train_cuda.jsonl" if s == 0 else "train_cuda_seed%d.jsonl" % s)
        if os.path.exists(rc):
            cpu[s] = final_loss(load(rc))
            if os.path.exists(gc) and load(gc):
                cuda[s] = final_loss(load(gc))
    if len(cpu) < 2:
        print("seeds: fewer than two CPU reference runs (prepare.sh makes them)")
        return 1
    lo, hi = min(cpu.values()), max(cpu.values())
    lo_ok, hi_ok = lo * (1 - SPREAD_MARGIN), hi * (1 + SPREAD_MARGIN)
    print("seed  final loss fp32 (cpu)  final loss fp16 (cuda)   (mean of the last %d steps)" % TAIL)
    bad = 0
    for s in sorted(cpu):
        got = cuda.get(s)
        ok = got is not None and np.isfinite(got) and lo_ok <= got <= hi_ok
        bad += not ok
        print("%4d  %21.4f  %22s  %s" % (s, cpu[s], "%.4f" % got if got is not None else "no run",
                                          "ok" if ok else "OUTSIDE"))
    mc = statistics.mean(cpu.values())
    mg = statistics.mean(cuda.values()) if cuda else float("nan")
    print("seeds: fp32 range %.4f..%.4f (mean %.4f), fp16 mean %.4f (%+.2f%%); %d of %d fp16 runs within "
          "the fp32 range widened by %.0f%%" % (lo, hi, mc, mg, 100 * (mg - mc) / mc, len(cpu) - bad, len(cpu),
                                                100 * SPREAD_MARGIN))
    return bad


def budget_label(b):
    """8G, 1.5G (1536M): the budget as tcc's flag gives it, in GiB."""
    return "%gG" % round(b / 2.0 ** 30, 2)


def gpt2(out):
    rows = []
    gib = 2.0 ** 30
    for key in ("none", "none_nographs", "none_unfusedattn", "none_nopad", "8G", "5G", "4G", "3G",
                "offload_2G", "offload_1536M"):
        offload = key.startswith("offload_")
        b = key.split("_")[1] if offload else key.split("_")[0]
        nographs, unfused = key.endswith("_nographs"), key.endswith("_unfusedattn")
        nopad = key.endswith("_nopad")
        m = os.path.join(out, "gpt2_%s.jsonl" % key)
        err = os.path.join(out, "payload_err_%s.txt" % (key if offload else b))
        budget = None if b == "none" else float(b[:-1]) * (gib if b.endswith("G") else 2.0 ** 20)
        if os.path.exists(err):
            text = open(err).read()
            smallest = re.search(r"smallest budget this plan meets is (\d+) bytes", text)
            note = ("no plan fits: tcc's smallest is %.2f GiB" % (int(smallest.group(1)) / gib)
                    if smallest else text.strip()[:160])
            rows.append(("tcc --mem-budget=" + b + (" --offload=auto" if offload else ""), None, None, None,
                         budget, note))
            continue
        name = "tcc" + ("" if b == "none" else " --mem-budget=" + b) + (" (no CUDA graphs)" if nographs else "") + (
            " --no-attention-fusion" if unfused else "") + (" --gemm-padding=off" if nopad else "") + (
            " --offload=auto" if offload else "")
        if (offload or nopad) and not os.path.exists(m):
            continue  # a payload from before that stage
        if not os.path.exists(m) or not load(m):
            rows.append((name, None, None, None, budget, "no result (see the log)"))
            continue
        r = load(m)
        el = [x["elapsed_s"] for x in r]
        dt = [el[i] - el[i - 1] for i in range(1, len(el))][5:]
        ms = statistics.median(dt) * 1e3 if dt else float("nan")
        toks = (r[-1]["tokens"] / len(r)) / (ms / 1e3)
        peak = r[-1].get("device_peak_bytes")
        rows.append((name, ms, toks, peak, budget,
                     "loss %.3f, scale %s, skipped %s" % (r[-1]["loss"], r[-1].get("loss_scale"),
                                                          r[-1].get("skipped_total"))))
    ref = None
    for mode in ("eager", "compile"):
        f = os.path.join(out, "torch_%s.json" % mode)
        if os.path.exists(f) and open(f).read().strip():
            j = json.loads(open(f).read().strip().splitlines()[-1])
            rows.append(("pytorch " + mode + " (fp16 autocast, fused AdamW)", j["step_ms"], j["tokens_per_s"],
                         j["peak_bytes"], None, "torch " + j["torch"]))
            if mode == "compile":
                ref = j["step_ms"]
        else:
            rows.append(("pytorch " + mode, None, None, None, None, "no result (see the log)"))
    print("GPT-2 small, micro-batch 8 x 1024, one optimizer step per micro-step")
    print("%-48s %9s %11s %10s %8s %9s  %s" % ("system", "step ms", "tokens/s", "peak GiB", "budget",
                                              "vs compile", "notes"))
    for name, ms, toks, peak, budget, note in rows:
        f = lambda v, fmt: (fmt % v) if v is not None else "-"  # noqa: E731
        within = ""
        if peak is not None and budget is not None:
            within = " (peak <= budget)" if peak <= budget else " (PEAK OVER BUDGET)"
        print("%-48s %9s %11s %10s %8s %9s  %s%s" % (
            name, f(ms, "%.1f"), f(toks, "%.0f"), f(peak / gib if peak else None, "%.2f"),
            budget_label(budget) if budget else "-",
            f(ms / ref if (ms and ref) else None, "%.2fx"), note, within))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "parity":
        sys.exit(1 if parity(sys.argv[2], sys.argv[3], sys.argv[4:]) else 0)
    elif cmd == "curves":
        curves(sys.argv[2], sys.argv[3])
    elif cmd == "seeds":
        sys.exit(1 if seeds(sys.argv[2], sys.argv[3]) else 0)
    elif cmd == "eval":
        sys.exit(1 if evaluation(sys.argv[2], sys.argv[3]) else 0)
    else:
        gpt2(sys.argv[2])
