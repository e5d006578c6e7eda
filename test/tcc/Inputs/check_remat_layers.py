"""Checks tcc's remat under budgets the greedy search cannot meet alone.

Usage: check_remat_layers.py TCC WORKDIR

Exports the 8-layer GPT of bench/remat_sweep.py (width 64, context 128, batch
8), plans it without a budget and with every layer checkpointed, then with a
budget 0.5% of the way from the latter to the former, below what the
greedy search reaches alone: the plan must fit, checkpoint some but not all
layers (the fewest that, with the greedy search on the rest, fit), and
recompute fewer FLOPs than checkpointing every layer. Prints one line per
plan and exits non-zero on a failed check.
"""
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
from export_models import TinyGPT  # noqa: E402


def plan(tcc, onnx, report, *flags):
    r = subprocess.run([tcc, "--target=cpu", onnx, "--emit=planned", "-o", os.devnull,
                        "--memory-report", report] + list(flags),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("tcc failed: " + r.stdout)
    return json.load(open(report))


def main():
    tcc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    model = TinyGPT(vocab=65, block_size=128, n_embd=64, n_layer=8, n_head=4, gelu_approx="tanh")
    model.train()
    idx = torch.randint(0, 65, (8, 128), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 65, (8, 128), generator=torch.Generator().manual_seed(2))
    onnx = os.path.join(work, "gpt8.onnx")
    torch.onnx.export(model, (idx, tgt), onnx, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17,
                      input_names=["idx", "targets"], output_names=["loss"])
    full = plan(tcc, onnx, os.path.join(work, "full.json"))
    peak = full["planned_peak_bytes"]
    every = plan(tcc, onnx, os.path.join(work, "every.json"),
                 "--remat-policy=checkpoint-every-layer")
    budget = int(every["planned_peak_bytes"] + 0.005 * (peak - every["planned_peak_bytes"]))
    got = plan(tcc, onnx, os.path.join(work, "b.json"), "--mem-budget=%d" % budget)
    pct = lambda r: 100.0 * r["recomputed_flops"] / r["step_flops"]  # noqa: E731
    layers = sum(1 for d in got["remat_decisions"]
                 if d.get("reason") == "checkpoint-every-layer block")
    greedy = len(got["remat_decisions"]) - layers
    print("unconstrained %d; every layer %d (%.1f%%); budget %d: planned %d, "
          "%d of 8 layers checkpointed, %d greedy decisions, %.1f%% recomputed"
          % (peak, every["planned_peak_bytes"], pct(every), budget,
             got["planned_peak_bytes"], layers, greedy, pct(got)))
    ok = (got["planned_peak_bytes"] <= budget and 0 < layers < 8 and greedy > 0 and
          pct(got) < pct(every))
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
