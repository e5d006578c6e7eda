"""tcc beside ONNX Runtime Training, the one other system that trains an ONNX graph.

Usage:
  bash bench/ort_training.sh            # makes the environment, then runs this
  ORT_PYTHON bench/ort_training.py --tcc TCC --tcc-run TCC_RUN --workdir DIR [--steps N]

ONNX Runtime Training (onnxruntime-training 1.19.2, the last release on PyPI)
needs torch in its process and conflicts with the onnxruntime package, so it
runs in a second virtual environment on Debian's python3 (its torch 1.13),
which bench/ort_training.sh makes. The models are the Hugging Face exports of
test/e2e/check_hf_models.py (run first, under tcc's main virtual
environment, into DIR, which also leaves tcc's float64 gradients there).

For each exported model, in one run:
  1. ORT: `artifacts.generate_artifacts` with the model's own loss output, the
     tcc.trainable parameters as requires_grad and AdamW; whether it builds;
  2. ORT's loss and gradients for the model's feed, against tcc's float64
     step's (max |ort - tcc| / max |tcc| per parameter, worst parameter);
  3. CPU step time (one forward, backward and AdamW step on the same batch):
     ORT's Module/Optimizer against tcc-run on a float32 --target=cpu step
     (the difference of a run of N+5 and a run of 5 steps, over N). Both use
     this machine's cores as they are: ORT's thread pool, tcc's one thread.
Prints a table.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    return r.stdout


def first_line(e):
    text = str(e).strip().splitlines()
    line = [l for l in text if "Error" in l or "error" in l] or text or ["?"]
    return line[-1][:110]


def ort_model(model_dir, steps):
    import onnx
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    m = onnx.load(os.path.join(model_dir, "model.onnx"))
    meta = {p.key: p.value for p in m.metadata_props}
    train = [n for n in meta.get("tcc.trainable", "").split(",") if n]
    frozen = [i.name for i in m.graph.initializer if i.name not in train]
    art = os.path.join(model_dir, "ort-artifacts")
    os.makedirs(art, exist_ok=True)
    artifacts.generate_artifacts(m, requires_grad=train, frozen_params=frozen, loss=None,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=art)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state,
                    os.path.join(art, "eval_model.onnx"), device="cpu")
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    feed = os.path.join(model_dir, "feed")
    inputs = [np.load(os.path.join(feed, n + ".npy")) for n in ("input_ids", "labels")]
    module.train()
    loss = float(module(*inputs))
    grads = {n: np.array(state.parameters[n].grad) for n in train}
    module.lazy_reset_grad()
    t0 = time.perf_counter()
    for _ in range(steps):
        module(*inputs)
        opt.step()
        module.lazy_reset_grad()
    ms = 1e3 * (time.perf_counter() - t0) / steps
    return loss, grads, ms


def tcc_step_ms(args, model_dir, steps):
    so = os.path.join(model_dir, "step32.so")
    if not os.path.exists(so):
        run([args.tcc, os.path.join(model_dir, "model.onnx"), "--target=cpu", "-o", so])
    root = os.path.join(model_dir, "bench_feed")
    os.makedirs(os.path.join(root, "0"), exist_ok=True)
    for f in os.listdir(os.path.join(model_dir, "feed")):
        dst = os.path.join(root, "0", f)
        if not os.path.exists(dst):
            os.symlink(os.path.join(model_dir, "feed", f), dst)

    def wall(n):
        t0 = time.perf_counter()
        run([args.tcc_run, so, "--feed", root, "--steps", str(n), "--quiet"])
        return time.perf_counter() - t0

    return 1e3 * (wall(steps + 5) - wall(5)) / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True, help="check_hf_models.py's --workdir")
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    import onnxruntime
    print("onnxruntime-training %s; models from %s" % (onnxruntime.__version__, args.workdir))
    print("%-20s %-9s %12s %12s %9s %10s %10s  %s" % (
        "model", "ORT build", "loss (tcc)", "loss (ORT)", "grad rel", "ORT ms", "tcc ms", "note"))
    for name in sorted(os.listdir(args.workdir)):
        d = os.path.join(args.workdir, name)
        if not os.path.exists(os.path.join(d, "grads", "loss.npy")):
            continue
        tcc_loss = float(np.load(os.path.join(d, "grads", "loss.npy")))
        tcc_ms = tcc_step_ms(args, d, args.steps)
        try:
            loss, grads, ort_ms = ort_model(d, args.steps)
        except Exception as e:  # noqa: BLE001 - ORT's failure is a result here
            print("%-20s %-9s %12.6f %12s %9s %10s %10.2f  %s" % (
                name, "fails", tcc_loss, "-", "-", "-", tcc_ms, first_line(e)))
            continue
        worst, worst_name = 0.0, ""
        for n, g in grads.items():
            path = os.path.join(d, "grads", "grads", n.replace("/", "_") + ".npy")
            if not os.path.exists(path):
                continue
            ref = np.load(path)
            rel = float(np.max(np.abs(g - ref))) / max(float(np.max(np.abs(ref))), 1e-6)
            if rel > worst:
                worst, worst_name = rel, n
        print("%-20s %-9s %12.6f %12.6f %9.1e %10.2f %10.2f  worst %s" % (
            name, "ok", tcc_loss, loss, worst, ort_ms, tcc_ms, worst_name))
    print("grad rel: ORT's float32 gradients against tcc's float64 step's, relative to each "
          "parameter's largest; ms: one forward+backward+AdamW step on the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
