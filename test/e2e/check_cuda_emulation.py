"""The CUDA target's code, run on the CPU through tcc's CUDA emulation.

Usage: /usr/bin/python3 check_cuda_emulation.py --tcc TCC --tcc-run TCC_RUN --workdir DIR
                                                [--train-steps N] [MODEL ...]

`tcc --target=cuda --cuda-emulation` builds the same CUDA source as
`--target=cuda` (fp16 storage, fp32 master weights, the generated fusion
kernels, runtime/cuda/kernels.cuh, cuBLASLt GEMMs, dynamic loss scaling, the
memory plan's arena offsets) with the host compiler against
runtime/cuda/emu, which runs kernels on the CPU with GPU thread semantics.
Checked here, without a GPU:
  1. parity: for every test model, the loss and every gradient of the CUDA
     step against the CPU target's (fp32), relative error < 1e-2 (the bound
     bench/gpu/run.sh applies on a GPU; bench/gpu/compare.py);
  2. the same under a --mem-budget that makes the CUDA plan recompute (25% of
     the activations cut; a GELU among them, from its stored fp16 input),
     with the plan's peak and the measured device peak (the step's own
     allocations, as the emulation counts them) within the budget;
  3. training: the demo GPT for N optimizer steps (accumulation 2, AdamW,
     warmup + cosine) on the CPU target and on the emulated CUDA step: the
     loss curves must track (mean |cuda - cpu| < 0.03 over all steps, the
     means of the last 10 steps within 2%; fp16 and fp32 runs drift apart
     step by step, so single steps are not compared);
     the micro-step is captured as a CUDA graph (the default); in runs of
     BIT_STEPS (8) steps, the run without graphs (--no-cuda-graphs) must give
     the graph run's losses bit for bit, and so must the run with
     TCC_CUDA_EMU_STREAMS=deferred
     and TCC_CUDA_EMU_BLOCKS=reverse (blocks last to first), where
     each stream's work runs as late as its events allow (so the upload of
     the next micro-batch, which overlaps the current one, would show stale
     inputs if the step did not wait for it), and with
     TCC_CUDA_EMU_STREAMS=deferred-first, where only the step's stream waits
     and the copy stream runs at once (so the upload would overwrite inputs
     the current micro-step has yet to read if it did not wait for them);
  4. --grads-only runs the backward pass with a loss scale, as training does
     (fp16 gradients of a mean over many tokens underflow unscaled), halved
     while the gradients overflow: a model whose gradients overflow at 65536;
  5. TCC_CUDA_PROFILE=1 reports the most expensive ops and changes no loss;
  6. no device: with TCC_CUDA_EMU_NO_DEVICE=1 (what a machine without a
     driver reports), tcc-run exits 1 naming cudaErrorInsufficientDriver;
  7. a token id outside the vocabulary stops the run with the index error
     (the gather is a prebuilt launcher, with its own unit's error flag).
Prints tables and ends with `N passed, M failed`.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench/gpu/compare.py: the GPU check's parity table)
from case_harness import case, require, summary  # noqa: E402
from check_cuda_build import prepare_model  # noqa: E402
from check_gradients import DEFAULT_MODELS  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

# The bit-identity runs' length (training_stage).
BIT_STEPS = 8
DEMO_FLAGS = ["--accum", "2", "--lr", "3e-3", "--warmup", "10", "--lr-schedule", "cosine",
              "--min-lr", "3e-4", "--seed", "0", "--print-every", "10"]


def run(cmd, check=True, env=None):
    if env is not None:
        env = dict(os.environ, **env)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r


def prepare(name, args):
    """Exports the model; returns (folder, ONNX path, feed dir, tcc flags)."""
    return prepare_model(name, args.workdir, args.tcc)


def grads(args, so, feed_dir, dump):
    shutil.rmtree(dump, ignore_errors=True)
    return run([args.tcc_run, so, "--feed", feed_dir, "--grads-only", "--dump", dump]).stdout


def parity_stage(args, models):
    ref, got = os.path.join(args.workdir, "ref"), os.path.join(args.workdir, "emu")
    failed = []
    for name in models:
        # No result from an earlier run may stand in for this one's.
        shutil.rmtree(os.path.join(ref, name), ignore_errors=True)
        shutil.rmtree(os.path.join(got, name), ignore_errors=True)
        try:
            work, onnx_path, feed_dir, extra = prepare(name, args)
            cpu = os.path.join(work, "step-cpu.so")
            emu = os.path.join(work, "step-emu.so")
            run([args.tcc, "--target=cpu", onnx_path, "-o", cpu] + extra)
            run([args.tcc, onnx_path, "--target=cuda", "--cuda-emulation", "-o", emu] + extra)
            grads(args, cpu, feed_dir, os.path.join(ref, name))
            out = grads(args, emu, feed_dir, os.path.join(got, name))
            if "built with --cuda-emulation" not in out:
                failed.append(name + ": the step does not say it is emulated")
        except Exception as e:  # noqa: BLE001 - reported in the table
            print("%s: %s" % (name, e))
            failed.append("%s: %s" % (name, str(e).splitlines()[0]))
    bad = compare.parity(ref, got, models, label="cuda emu")
    return bad, failed


def budget_stage(args, name):
    """CUDA plan under a budget that forces recomputation: parity again."""
    work, onnx_path, feed_dir, extra = prepare(name, args)
    cpu = os.path.join(work, "step-cpu.so")
    run([args.tcc, "--target=cpu", onnx_path, "-o", cpu] + extra)
    grads(args, cpu, feed_dir, os.path.join(args.workdir, "ref", name))
    report = os.path.join(work, "mem-none.json")
    run([args.tcc, onnx_path, "--target=cuda", "--emit=planned", "--memory-report", report,
         "-o", os.devnull] + extra)
    m = json.load(open(report))
    act = m["categories"]["activations_and_temporaries"]
    budget = m["planned_peak_bytes"] - int(0.25 * act)
    so = os.path.join(work, "step-emu-budget.so")
    report_b = os.path.join(work, "mem-budget.json")
    run([args.tcc, onnx_path, "--target=cuda", "--cuda-emulation", "--mem-budget=%d" % budget,
         "--memory-report", report_b, "-o", so] + extra)
    mb = json.load(open(report_b))
    problems = []
    if mb["planned_peak_bytes"] > budget:
        problems.append("plan %d bytes over the budget %d" % (mb["planned_peak_bytes"], budget))
    if not mb["remat_decisions"]:
        problems.append("the budget made no recomputation (test too weak)")
    # Under mixed precision too, the GELU of a cuBLASLt epilogue is recomputed
    # from its stored fp16 input (it may differ in the last bit).
    if not any("elementwise tail" in d["reason"] for d in mb["remat_decisions"]):
        problems.append("no GELU recomputed from its stored input (the test no longer covers it)")
    got = os.path.join(args.workdir, "emu-budget")
    out = grads(args, so, feed_dir, os.path.join(got, name))  # grads() clears the folder first
    # The measured device peak (here: what the step cudaMallocs: arena,
    # constants, input staging, optimizer tables) within the budget.
    if "device peak" not in out or "EXCEEDS THE MEMORY BUDGET" in out:
        problems.append("device peak over the budget, or not reported: %r" % out[-500:])
    print("budget %d bytes (unconstrained %d, activations %d): planned %d, recompute %.2f%% of the step's FLOPs"
          % (budget, m["planned_peak_bytes"], act, mb["planned_peak_bytes"],
             100.0 * mb["recomputed_flops"] / max(mb["step_flops"], 1)))
    bad = compare.parity(os.path.join(args.workdir, "ref"), got, [name], label="emu budget")
    return bad, problems


def padding_stage(args, names):
    """tcc --gemm-padding=all pads every GEMM whose rows are not a multiple
    of 8 halves (tcc-pad-gemms; on a GPU, GPT-2's output projection): the
    padded step's gradients against the CPU target's, and the padding is
    really there (a matmul of the kernel IR reads padded rows)."""
    problems, ref, got = [], os.path.join(args.workdir, "ref"), os.path.join(args.workdir, "emu-padded")
    for name in names:
        work, onnx_path, feed_dir, extra = prepare(name, args)
        cpu = os.path.join(work, "step-cpu.so")
        run([args.tcc, "--target=cpu", onnx_path, "-o", cpu] + extra)
        grads(args, cpu, feed_dir, os.path.join(ref, name))
        counts = {}
        for mode in ("off", "all"):
            kern = run([args.tcc, onnx_path, "--target=cuda", "--emit=kernels", "--gemm-padding=" + mode,
                        "-o", "-"] + extra).stdout
            counts[mode] = kern.count('tcck.mark "tcc.slice_grad')
        if counts["all"] <= counts["off"]:
            problems.append("%s: --gemm-padding=all padded nothing (%d pads, %d without): test too weak"
                            % (name, counts["all"], counts["off"]))
        so = os.path.join(work, "step-emu-padded.so")
        run([args.tcc, onnx_path, "--target=cuda", "--cuda-emulation", "--gemm-padding=all", "-o", so] + extra)
        grads(args, so, feed_dir, os.path.join(got, name))
        print("%s: %d zero-padding copies with --gemm-padding=all, %d without" % (name, counts["all"], counts["off"]))
    bad = compare.parity(ref, got, names, label="emu padded")
    return bad, problems


def overflow_stage(args):
    """--grads-only backs the loss scale off while fp16 gradients overflow:
    mlp_gemm with targets 30x larger has output gradients of about 2, which
    overflow fp16 at the default scale 65536 (its loss, about 900, stays in
    fp16's range, and its squared errors are fp32 anyway)."""
    work, onnx_path, feed_dir, extra = prepare("mlp_gemm", args)
    big = os.path.join(work, "feed-big")
    shutil.rmtree(big, ignore_errors=True)
    shutil.copytree(feed_dir, big)
    t = np.load(os.path.join(big, "target.npy"))
    np.save(os.path.join(big, "target.npy"), (t * 30.0).astype(t.dtype))
    cpu = os.path.join(work, "step-cpu.so")
    emu = os.path.join(work, "step-emu.so")
    run([args.tcc, "--target=cpu", onnx_path, "-o", cpu] + extra)
    run([args.tcc, onnx_path, "--target=cuda", "--cuda-emulation", "-o", emu] + extra)
    ref, got = os.path.join(args.workdir, "ref-big"), os.path.join(args.workdir, "emu-big")
    grads(args, cpu, big, os.path.join(ref, "mlp_gemm"))
    out = grads(args, emu, big, os.path.join(got, "mlp_gemm"))
    problems = []
    scale = [l for l in out.splitlines() if l.startswith("loss scale ")]
    if not scale or float(scale[0].split()[2]) >= 65536:
        problems.append("the loss scale did not back off: %r" % out[-300:])
    else:
        print("mlp_gemm with 30x targets: " + scale[0])
    if compare.parity(ref, got, ["mlp_gemm"], label="emu overflow"):
        problems.append("over the bound")
    return problems


def fp16_range_stage(args):
    """A float input beyond fp16's range (the CUDA step reads it as fp16):
    tcc-run refuses it, naming the input, in --grads-only and in training."""
    work, onnx_path, feed_dir, extra = prepare("mlp_gemm", args)
    emu = os.path.join(work, "step-emu.so")  # built by overflow_stage
    if not os.path.exists(emu):
        run([args.tcc, onnx_path, "--target=cuda", "--cuda-emulation", "-o", emu] + extra)
    huge = os.path.join(work, "feed-huge")
    shutil.rmtree(huge, ignore_errors=True)
    shutil.copytree(feed_dir, huge)
    x = np.load(os.path.join(huge, "x.npy"))
    x.flat[3] = 1.0e5
    np.save(os.path.join(huge, "x.npy"), x)
    problems = []
    for mode in (["--grads-only"], ["--steps", "1"]):
        r = run([args.tcc_run, emu, "--feed", huge] + mode, check=False)
        if r.returncode != 1 or 'the input "x"' not in r.stdout or \
                "beyond fp16's largest finite value (65504)" not in r.stdout:
            problems.append("%s: exit %d, %r" % (" ".join(mode), r.returncode, r.stdout[-400:]))
    return problems


def load_losses(path):
    return [json.loads(line)["loss"] for line in open(path) if line.strip()]


def training_stage(args):
    demo = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
    data = os.path.join(ROOT, "examples", "data", "train.bin")
    work = os.path.join(args.workdir, "demo")
    os.makedirs(work, exist_ok=True)
    cpu, emu = os.path.join(work, "demo-cpu.so"), os.path.join(work, "demo-emu.so")
    run([args.tcc, "--target=cpu", demo, "-o", cpu])
    run([args.tcc, demo, "--target=cuda", "--cuda-emulation", "-o", emu])
    flags = ["--data", data, "--steps", str(args.train_steps)] + DEMO_FLAGS
    # The loss curves: the CPU target against the emulated CUDA step with its
    # CUDA graphs (the default), over train_steps. The bit-identity checks
    # (without graphs, deferred streams and reversed blocks, only the step's
    # stream deferred) compare shorter runs of BIT_STEPS steps among
    # themselves: every micro-step stages the next one's inputs and replays
    # the graph, so a race shows in any of them.
    short = ["--data", data, "--steps", str(min(args.bit_steps, args.train_steps))] + DEMO_FLAGS
    curves = {}
    logs = {}
    # Deferred streams, and each grid's blocks last to first.
    deferred = {"TCC_CUDA_EMU_STREAMS": "deferred", "TCC_CUDA_EMU_BLOCKS": "reverse"}
    for key, so, run_flags, env in (
            ("cpu", cpu, flags, None), ("emu-graphs", emu, flags, None),
            ("short-graphs", emu, short, None),
            ("short", emu, short + ["--no-cuda-graphs"], None),
            ("short-graphs-deferred", emu, short, deferred),
            ("short-graphs-deferred-first", emu, short, {"TCC_CUDA_EMU_STREAMS": "deferred-first"})):
        metrics = os.path.join(work, key + ".jsonl")
        logs[key] = run([args.tcc_run, so] + run_flags + ["--metrics", metrics], env=env).stdout
        curves[key] = load_losses(metrics)
    problems = []
    a, g = np.array(curves["cpu"]), np.array(curves["emu-graphs"])
    sg, b, d, f = (np.array(curves[k]) for k in ("short-graphs", "short", "short-graphs-deferred",
                                                  "short-graphs-deferred-first"))
    n_short = min(args.bit_steps, args.train_steps)
    if len(a) != args.train_steps or len(g) != args.train_steps or \
            any(len(c) != n_short for c in (sg, b, d, f)):
        problems.append("step counts %d/%d/%d/%d/%d/%d" % (len(a), len(g), len(sg), len(b), len(d), len(f)))
    else:
        diff = np.abs(a - g)
        print("training the demo GPT, %d steps: loss cpu %.4f -> %.4f, cuda (emulated, graphs) %.4f -> "
              "%.4f; max |cuda - cpu| %.4f, mean %.4f" % (len(a), a[0], a[-1], g[0], g[-1], diff.max(),
                                                          diff.mean()))
        for s in range(0, len(a), max(1, len(a) // 6)):
            print("  step %4d  cpu %.4f  cuda+graphs %.4f" % (s + 1, a[s], g[s]))
        tail_cpu, tail_cuda = a[-10:].mean(), g[-10:].mean()
        print("  mean of the last 10 steps: cpu %.4f, cuda %.4f (rel %.2e)"
              % (tail_cpu, tail_cuda, abs(tail_cuda - tail_cpu) / tail_cpu))
        print("  %d-step runs bit-identical: graphs vs none %s, deferred streams and reversed blocks %s, "
              "only the step's stream deferred %s" % (n_short, np.array_equal(b, sg), np.array_equal(b, d),
                                                      np.array_equal(b, f)))
        if not diff.mean() < 0.03:
            problems.append("the curves part: mean |cuda - cpu| %.4f" % diff.mean())
        if not abs(tail_cuda - tail_cpu) / tail_cpu < 0.02:
            problems.append("last 10 steps: cuda %.4f vs cpu %.4f" % (tail_cuda, tail_cpu))
        if not np.array_equal(b, sg):
            problems.append("CUDA graphs changed the losses (first at step %d)"
                            % (int(np.argmax(b != sg)) + 1))
        if not np.array_equal(b, d):
            problems.append("deferred streams and reversed blocks changed the losses (first at step %d)"
                            % (int(np.argmax(b != d)) + 1))
        if not np.array_equal(b, f):
            problems.append("deferring only the step's stream changed the losses (first at step %d)"
                            % (int(np.argmax(b != f)) + 1))
    for key in ("emu-graphs", "short-graphs", "short-graphs-deferred", "short-graphs-deferred-first"):
        if "running it without graphs" in logs[key]:
            problems.append("%s: the CUDA graph capture failed: %s" % (key, logs[key][-400:]))
    return problems


def profile_stage(args):
    """TCC_CUDA_PROFILE=1: the step reports its most expensive ops at close,
    and profiling changes no result; with CUDA graphs it says it cannot."""
    so = os.path.join(args.workdir, "demo", "demo-emu.so")
    data = os.path.join(ROOT, "examples", "data", "train.bin")
    flags = ["--data", data, "--steps", "2", "--accum", "2", "--seed", "0"]
    plain_m, prof_m = (os.path.join(args.workdir, "demo", n) for n in ("plain.jsonl", "prof.jsonl"))
    run([args.tcc_run, so] + flags + ["--metrics", plain_m])
    p = run([args.tcc_run, so] + flags + ["--metrics", prof_m], env=dict(os.environ, TCC_CUDA_PROFILE="1"))
    problems = []
    rows = [l for l in p.stdout.splitlines() if l.strip().startswith(("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"))
            and " ms " in l]
    if "tcc step profile: 3 micro-steps after a warm-up one" not in p.stdout or len(rows) < 20:
        problems.append("no profile report: %r" % p.stdout[-400:])
    elif not any("cuBLASLt matmul_epilogue" in r for r in rows) or not any("fusion" in r for r in rows):
        problems.append("the profile names no GEMM epilogue or fusion kernel: %r" % rows[:5])
    else:
        print("profile: " + rows[0].strip())
    if load_losses(plain_m) != load_losses(prof_m):
        problems.append("profiling changed the losses")
    g = run([args.tcc_run, so] + flags + ["--cuda-graphs"], env=dict(os.environ, TCC_CUDA_PROFILE="1"))
    if "not profiling" not in g.stdout:
        problems.append("profiling with CUDA graphs did not say it cannot: %r" % g.stdout[-300:])
    return problems


def no_device_stage(args):
    so = os.path.join(args.workdir, "demo", "demo-emu.so")
    env = dict(os.environ, TCC_CUDA_EMU_NO_DEVICE="1")
    r = run([args.tcc_run, so, "--data", os.path.join(ROOT, "examples", "data", "train.bin"),
             "--steps", "1"], check=False, env=env)
    if r.returncode != 1 or "cudaErrorInsufficientDriver" not in r.stdout:
        return ["without a device: exit %d, %r" % (r.returncode, r.stdout[-300:])]
    return []


def index_error_stage(args):
    """A token id outside the vocabulary: the embedding's gather (a launcher
    the fixed half prebuilds, runtime/cuda/kernels.cu, whose unit has its own
    device error flag) sets the flag, and tcc-run stops with the error."""
    so = os.path.join(args.workdir, "demo", "demo-emu.so")
    data = np.fromfile(os.path.join(ROOT, "examples", "data", "train.bin"), dtype=np.uint16)[:4000].copy()
    data[::30] = 500  # every 33-token window holds one (the vocabulary is 80)
    oov = os.path.join(args.workdir, "demo", "oov.bin")
    data.tofile(oov)
    r = run([args.tcc_run, so, "--data", oov, "--steps", "1"], check=False)
    if r.returncode != 1 or "an index was out of range" not in r.stdout:
        return ["a token id outside the vocabulary: exit %d, %r" % (r.returncode, r.stdout[-300:])]
    return []


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--train-steps", type=int, default=30)
    p.add_argument("--bit-steps", type=int, default=BIT_STEPS,
                   help="steps of the runs compared bit for bit (default %d)" % BIT_STEPS)
    p.add_argument("--stages", help="comma-separated stages to run (default: all): parity, budget, "
                                    "padding, overflow, fp16-range, training, profile, no-device, index")
    # wide_rows: rows over 1024 elements (one block per row on CUDA).
    p.add_argument("models", nargs="*", default=DEFAULT_MODELS + ["wide_rows"])
    args = p.parse_args()
    torch.set_num_threads(1)

    def parity_and(stage, *a):
        """A stage that returns (models over the bound, other problems)."""
        bad, problems = stage(args, *a)
        return problems + (["%d model(s) over the bound" % bad] if bad else [])

    stages = [
        ("parity", "parity (%d models)" % len(args.models),
         lambda: parity_and(parity_stage, args.models)),
        ("budget", "parity under --mem-budget", lambda: parity_and(budget_stage, "tiny_gpt_opset17")),
        ("padding", "parity with GEMMs padded (--gemm-padding=all)",
         lambda: parity_and(padding_stage, ["tiny_gpt_opset17", "bert_mlm"])),
        ("overflow", "--grads-only backs the loss scale off", lambda: overflow_stage(args)),
        ("fp16-range", "a float input beyond fp16's range is refused", lambda: fp16_range_stage(args)),
        ("training", "training %d steps, CUDA graphs" % args.train_steps, lambda: training_stage(args)),
        ("profile", "TCC_CUDA_PROFILE", lambda: profile_stage(args)),
        ("no-device", "no device", lambda: no_device_stage(args)),
        ("index", "an index out of range stops the run", lambda: index_error_stage(args)),
    ]
    if args.stages:
        wanted = args.stages.split(",")
        unknown = [w for w in wanted if w not in [k for k, _, _ in stages]]
        if unknown:
            p.error("--stages: no stage %s (there are %s)"
                    % (", ".join(unknown), ", ".join(k for k, _, _ in stages)))
        stages = [st for st in stages if st[0] in wanted]
    for _, name, stage in stages:
        def run_stage(stage=stage):
            problems = stage()
            require(not problems, "\n      ".join(str(pr) for pr in problems))
        case(name)(run_stage)()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
