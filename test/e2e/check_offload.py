"""Master weights and optimizer state in host memory (tcc --offload), run
through tcc's CUDA emulation.

Usage: /usr/bin/python3 check_offload.py --tcc TCC --tcc-run TCC_RUN --workdir DIR

A plan with #tcc.tiers keeps some parameters' fp32 master weights and AdamW
moments (SGD: momentum) in the step's pinned host buffer; the device holds
their fp16 working copies and gradient accumulators, and tcc_step_apply
updates them on the host (runtime/cuda/host_tier.cuh, host_optimizer.h) while
the device updates the rest. The host update has the device kernels'
arithmetic, so in the emulation (which, like x86-64 without FMA, contracts
nothing) a step with host tiers must end bit for bit where the same step
without them ends. Checked, each as a case:

  tables        the step's tables: every parameter and state tensor of the
                forced plan (--offload=optimizer) in the host buffer, the
                gradients in the arena, the arena smaller by their bytes;
  adamw         the demo GPT, 3 AdamW steps (accumulation 2, clipping,
                weight decay, --data): final parameters, AdamW state (a
                checkpoint) and losses equal the device-update step's, byte
                for byte; again with TCC_CUDA_EMU_STREAMS=deferred and
                =deferred-first (a copy that lacks its event shows as stale
                gradients or weights) and with TCC_HOST_THREADS=1;
  adamw-accumulators
                --offload=all, the gradient accumulators on the host too: the
                same run against the device update (byte for byte, or within
                1e-5 relative where the norm's summation order shows through
                clipping); the micro-step replayed as a CUDA graph (the
                copies to the host in it, TCC_HOST_TIER_STATS counting the
                launches; TCC_CUDA_GRAPHS=1, as such steps run op by op by
                default) and run op by op, with deferred streams too, all
                equal to it byte for byte;
  sgd           the same with SGD, momentum 0.9, Nesterov;
  mixed         --offload=auto under a budget that puts one parameter's
                state on the host and recomputes activations: device and host
                rows in one apply; its losses, weights and state equal, byte
                for byte, those of the step planned without host memory under
                the budget that recomputes the same FLOPs;
  swap          --swap-activations=all under the budget that recomputes:
                the recomputed values copied to the host buffer and back
                instead; byte for byte the recomputing step's run, as a CUDA
                graph and op by op, with deferred and deferred-first streams
                (a missing wait for a copy shows as stale activations); and
                with the accumulators on the host too (--offload=all);
  parity        tiny_gpt_opset17's loss and gradients (--grads-only), with
                state and with accumulators on the host, against the CPU
                target's, within the 1e-2 fp16 bound (bench/gpu/compare.py),
                and against the device step's, byte for byte;
  overlap       the host update overlapping the next micro-step (a step
                run op by op, --no-cuda-graphs: each parameter's first
                reader waits for its new fp16 copy, tcck.await_weights,
                while the host updates the ones after): byte for byte the
                device update's run, also under deferred and deferred-first
                streams (a missing wait for an upload shows as stale
                weights), with TCC_HOST_TIER_STATS counting the chunks
                updated while the micro-step was queued (none with
                TCC_HOST_OVERLAP=0);
  skip          a static loss scale that overflows fp16: every step skipped
                on both steps, the weights still the initial ones;
  kill-resume   --checkpoint-every 1, SIGKILL after step 2 of 5, --resume:
                the final parameters and state equal an uninterrupted run's;
  save          --save from the host step writes the same ONNX file as the
                device step.
Prints each case and ends with `N passed, M failed`.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import case_harness  # noqa: E402
import compare  # noqa: E402  (bench/gpu/compare.py: the GPU check's parity table)
import step_abi  # noqa: E402
from case_harness import case, require, summary  # noqa: E402

import numpy as np  # noqa: E402

DEMO = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
SMALL = os.path.join(ROOT, "examples", "tiny_gpt_opset17.onnx")
SMALL_FEED = os.path.join(ROOT, "examples", "tiny_gpt_opset17.feed")
DATA = os.path.join(ROOT, "examples", "data", "train.bin")
TRAIN = ["--data", DATA, "--accum", "2", "--lr", "3e-3", "--weight-decay", "0.1", "--clip-norm", "1.0",
         "--seed", "0", "--print-every", "1"]
# A budget (planned peak, bytes) under which --offload=auto keeps one
# parameter's state on the host and recomputes activations (the demo GPT's
# unconstrained CUDA plan peaks at 103831744).
MIXED_BUDGET = 103000000
# The budget under which the plan without host memory recomputes what
# MIXED_BUDGET's does.
REMAT_BUDGET = 103200000
# A budget under which --offload=all (accumulators on the host) recomputes
# activations too.
ALL_REMAT_BUDGET = 101600000

ARGS = None


def run(cmd, env=None, check=True):
    full = dict(os.environ, **(env or {}))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full)
    if check and r.returncode != 0:
        raise case_harness.CaseFailure("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    return r


def build(name, model, *flags):
    """Builds (once) step `name` with the CUDA emulation; returns its path."""
    so = os.path.join(ARGS.workdir, name + ".so")
    if not os.path.exists(so):
        target = ["--target=cpu"] if name.startswith("cpu") else ["--target=cuda", "--cuda-emulation"]
        run([ARGS.tcc, model] + target + list(flags) + ["-o", so])
    return so


def train(so, out, steps, *more, env=None, all_skipped=False):
    """Trains `so`; --dump and a final checkpoint into `out`; returns the log.
    With all_skipped, the run must skip every step and say so with exit 1."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = run([ARGS.tcc_run, so, "--steps", str(steps), "--dump", os.path.join(out, "dump"),
             "--checkpoint", os.path.join(out, "ck")] + TRAIN + list(more), env=env,
            check=not all_skipped)
    if all_skipped:
        require(r.returncode == 1 and "every optimizer step of this run" in r.stdout,
                "a run that skipped every step: exit %d, %r" % (r.returncode, r.stdout[-400:]))
    return r.stdout


def files(out):
    """Every dumped array and the checkpoint's bytes, by relative name."""
    got = {}
    for f in sorted(glob.glob(os.path.join(out, "dump", "**", "*.npy"), recursive=True)):
        got[os.path.relpath(f, out)] = np.load(f)
    ck = os.path.join(out, "ck", "checkpoint.bin")
    if os.path.exists(ck):
        got["checkpoint.bin"] = np.fromfile(ck, dtype=np.uint8)
    return got


def differences(a, b):
    """The names whose contents differ (or that one side lacks)."""
    bad = sorted(set(a) ^ set(b))
    for k in sorted(set(a) & set(b)):
        if a[k].shape != b[k].shape or a[k].dtype != b[k].dtype or not np.array_equal(a[k], b[k]):
            bad.append(k)
    return bad


def require_equal(a, b, what):
    bad = differences(a, b)
    require(not bad, "%s: %d of %d files differ: %s" % (what, len(bad), len(a), bad[:6]))


def graphs_and_op_by_op(so, out, ref, what, graph_env, op_flags):
    """Trains `so` 3 steps as a CUDA graph (`graph_env`) and op by op
    (`op_flags`), with deferred streams too: each run must end byte for
    byte at `ref`, and TCC_HOST_TIER_STATS must count the micro-steps
    replayed as a graph (5 of 6: the first runs op by op, the second is
    captured) or none."""
    graphs = {}
    deferred = {"TCC_CUDA_EMU_STREAMS": "deferred"}
    for label, env, more in (("graph", graph_env, []),
                             ("graph, deferred", dict(graph_env, **deferred), []),
                             ("graph, deferred-first", dict(graph_env, TCC_CUDA_EMU_STREAMS="deferred-first"), []),
                             ("op by op", {}, op_flags),
                             ("op by op, deferred", deferred, op_flags)):
        log = train(so, out, 3, *more, env=dict(env, TCC_HOST_TIER_STATS="1"))
        require_equal(ref, files(out), "%s (%s)" % (what, label))
        m = re.search(r"(\d+) micro-steps run as a CUDA graph", log)
        require(m, "%s: no graph count: %r" % (label, log[-400:]))
        graphs[label] = int(m.group(1))
    require(all(graphs[k] == 5 for k in graphs if k.startswith("graph")) and
            all(graphs[k] == 0 for k in graphs if k.startswith("op by op")),
            "micro-steps run as a CUDA graph: %s" % graphs)


@case("tables")
def tables_case():
    dev = build("demo-dev", DEMO)
    host = build("demo-host", DEMO, "--offload=optimizer", "--host-budget=1G")
    di, _ = step_abi.read_info(dev)
    hi, device = step_abi.read_info(host)
    require(hi.abi_version == 9 and device, "abi %d, device %s" % (hi.abi_version, device))
    require(all(p.location == 1 for p in hi.params), "parameters not all on the host: %s"
            % [p.name for p in hi.params if p.location != 1][:4])
    require(all(s.location == 1 for s in hi.state), "optimizer state not all on the host")
    require(all(g.location == 0 for g in hi.grads), "a gradient accumulator left the arena")
    moved = sum(p.bytes for p in di.params) + sum(s.bytes for s in di.state)
    require(di.arena_bytes - hi.arena_bytes >= moved - 64 * len(di.params) * 3,
            "arena %d -> %d, but %d bytes moved" % (di.arena_bytes, hi.arena_bytes, moved))
    return "arena %d -> %d bytes; %d parameters' masters and state (%d bytes) in host memory" % (
        di.arena_bytes, hi.arena_bytes, len(hi.params), moved)


def equal_runs(dev, host, out, steps, *more):
    train(dev, out + "-dev", steps, *more)
    ref = files(out + "-dev")
    log = train(host, out + "-host", steps, *more)
    require_equal(ref, files(out + "-host"), "host update vs device update")
    for label, env in (("deferred", {"TCC_CUDA_EMU_STREAMS": "deferred"}),
                       ("deferred-first", {"TCC_CUDA_EMU_STREAMS": "deferred-first"}),
                       ("one thread", {"TCC_HOST_THREADS": "1"})):
        train(host, out + "-host-x", steps, *more, env=env)
        require_equal(ref, files(out + "-host-x"), "host update (%s) vs device update" % label)
    losses = np.load(os.path.join(out + "-host", "dump", "losses.npy"))
    return ref, log, losses


@case("adamw")
def adamw_case():
    dev = build("demo-dev", DEMO)
    host = build("demo-host", DEMO, "--offload=optimizer", "--host-budget=1G")
    ref, log, losses = equal_runs(dev, host, os.path.join(ARGS.workdir, "adamw"), 3)
    require("pinned host buffer" in log, "tcc-run does not report the host buffer: %r" % log[-300:])
    return "%d files (parameters, AdamW state, losses %s) equal byte for byte" % (
        len(ref), " ".join("%.4f" % x for x in losses[::2]))


@case("overlap")
def overlap_case():
    dev = build("demo-dev", DEMO)
    host = build("demo-host", DEMO, "--offload=optimizer", "--host-budget=1G")
    out = os.path.join(ARGS.workdir, "overlap")
    ref = files(os.path.join(ARGS.workdir, "adamw") + "-dev")  # the adamw case's device update
    if not ref:
        train(dev, out + "-dev", 3)
        ref = files(out + "-dev")
    stats = {}
    for label, env in (("overlapped", {}),
                       ("overlapped, deferred streams", {"TCC_CUDA_EMU_STREAMS": "deferred"}),
                       ("overlapped, deferred-first streams", {"TCC_CUDA_EMU_STREAMS": "deferred-first"}),
                       ("not overlapped", {"TCC_HOST_OVERLAP": "0"})):
        log = train(host, out + "-x", 3, "--no-cuda-graphs", env=dict(env, TCC_HOST_TIER_STATS="1"))
        require_equal(ref, files(out + "-x"), "host update (%s) vs device update" % label)
        m = re.search(r"host update: (\d+) chunks updated, (\d+) of them", log)
        require(m, "%s: no host update statistics: %r" % (label, log[-400:]))
        stats[label] = (int(m.group(1)), int(m.group(2)))
    overlapped = [v for k, v in stats.items() if k.startswith("overlapped")]
    require(all(n > 0 for _, n in overlapped) and stats["not overlapped"][1] == 0,
            "chunks updated while the next micro-step was queued: %s" % stats)
    total, during = stats["overlapped"]
    return ("byte for byte the device update's (also with deferred and deferred-first streams); %d of %d "
            "chunks updated while the next micro-step was queued, 0 with TCC_HOST_OVERLAP=0"
            % (during, total))


@case("adamw-accumulators")
def adamw_accumulators_case():
    """--offload=all: the gradient accumulators too. Each micro-step's
    gradient is copied down as its op finishes and added on the host (GEMM
    products written in fp32 for it, as the device adds them in place), and
    the norm's share of the host accumulators is summed on the host."""
    dev = build("demo-dev", DEMO)
    host = build("demo-all", DEMO, "--offload=all", "--host-budget=1G")
    info, _ = step_abi.read_info(host)
    require(all(g.location == 1 for g in info.grads if g.bytes), "an accumulator is in the arena")
    out = os.path.join(ARGS.workdir, "all")
    train(dev, out + "-dev", 3)
    ref = files(out + "-dev")
    train(host, out + "-host", 3)
    got = files(out + "-host")
    bad = differences(ref, got)
    if not bad:
        detail = "%d files equal byte for byte" % len(ref)
    else:
        # The global norm (clipping) sums in another order: fp32 rounding.
        worst = max(float(np.max(np.abs(ref[k].astype(np.float64) - got[k]) /
                              np.maximum(np.abs(ref[k].astype(np.float64)), 1e-3)))
                    for k in bad if k != "checkpoint.bin")
        require(worst < 1e-5, "%d files differ, worst relative %.2e: %s" % (len(bad), worst, bad[:4]))
        detail = "%d of %d files differ, by %.1e relative at most (the norm's summation order)" % (
            len(bad), len(ref), worst)
    # The runs above go op by op (the default for such steps: the host work
    # overlaps the micro-step); TCC_CUDA_GRAPHS=1 replays the micro-step as
    # a CUDA graph, its copies to the host included.
    graphs_and_op_by_op(host, out + "-host-x", got, "accumulators on the host",
                        {"TCC_CUDA_GRAPHS": "1"}, [])
    return detail + ("; the same as a CUDA graph (TCC_CUDA_GRAPHS=1: 5 of 6 micro-steps) and op by op (the "
                     "default), with deferred streams too")


@case("sgd")
def sgd_case():
    dev = build("demo-dev-sgd", DEMO, "--optimizer=sgd")
    host = build("demo-host-sgd", DEMO, "--optimizer=sgd", "--offload=optimizer", "--host-budget=1G")
    ref, _, _ = equal_runs(dev, host, os.path.join(ARGS.workdir, "sgd"), 3, "--momentum", "0.9", "--nesterov")
    return "%d files equal byte for byte" % len(ref)


@case("mixed")
def mixed_case():
    """Device and host rows in one apply, under a budget that also
    recomputes: against the plan that recomputes the same (REMAT_BUDGET,
    no host memory)."""
    reports = {}
    steps = {}
    for key, flags in (("mixed", ["--mem-budget=%d" % MIXED_BUDGET, "--offload=auto", "--host-budget=1G"]),
                       ("remat", ["--mem-budget=%d" % REMAT_BUDGET])):
        report = os.path.join(ARGS.workdir, "demo-%s.json" % key)
        steps[key] = build("demo-" + key, DEMO, "--memory-report", report, *flags)
        reports[key] = json.load(open(report))
    info, _ = step_abi.read_info(steps["mixed"])
    on_host = [p.name for p in info.params if p.location == 1]
    require(0 < len(on_host) < len(info.params), "host rows %d of %d" % (len(on_host), len(info.params)))
    flops = [reports[k]["recomputed_flops"] for k in ("mixed", "remat")]
    require(flops[0] == flops[1] > 0, "the two plans recompute %d and %d FLOPs" % tuple(flops))
    out = os.path.join(ARGS.workdir, "mixed")
    train(steps["mixed"], out, 3)
    train(steps["remat"], out + "-remat", 3)
    require_equal(files(out + "-remat"), files(out), "mixed host and device rows vs the device step")
    return ("%d of %d parameters' state on the host (%s), %d FLOPs recomputed: equal byte for byte "
            "to the device step that recomputes the same" % (len(on_host), len(info.params),
                                                              ", ".join(on_host), flops[0]))


@case("swap")
def swap_case():
    """--swap-activations=all under REMAT_BUDGET: the values the plan
    recomputes are copied to the host buffer after the forward pass and
    back before the backward pass instead; the step must compute what the
    recomputing one does, bit for bit, whatever order the copy streams run
    in, as a CUDA graph and op by op."""
    reports = {k: os.path.join(ARGS.workdir, "demo-%s-report.json" % k) for k in ("remat", "swap")}
    remat = build("demo-remat-swapcase", DEMO, "--mem-budget=%d" % REMAT_BUDGET, "--memory-report", reports["remat"])
    swap = build("demo-swap-swapcase", DEMO, "--mem-budget=%d" % REMAT_BUDGET, "--swap-activations=all",
                 "--memory-report", reports["swap"])
    rr, sr = (json.load(open(reports[k])) for k in ("remat", "swap"))
    s = sr["activation_swap"]
    require(s["swapped"] and s["values"] > 0 and s["host_bytes"] > 0, "nothing swapped: %s" % s)
    require(sr["recomputed_flops"] < rr["recomputed_flops"],
            "recomputed FLOPs %d with swapping, %d without" % (sr["recomputed_flops"], rr["recomputed_flops"]))
    require(sr["planned_peak_bytes"] <= REMAT_BUDGET, "the swapped plan takes %d bytes" % sr["planned_peak_bytes"])
    out = os.path.join(ARGS.workdir, "swap")
    train(remat, out + "-remat", 3)
    ref = files(out + "-remat")
    graphs_and_op_by_op(swap, out + "-x", ref, "swapped activations vs recomputed", {},
                        ["--no-cuda-graphs"])
    # With the gradient accumulators on the host too: the swaps' waits and
    # the gradient copies' waits in one micro-step.
    flags = ["--offload=all", "--host-budget=1G", "--mem-budget=%d" % ALL_REMAT_BUDGET]
    all_remat = build("demo-all-remat", DEMO, *flags)
    all_swap = build("demo-all-swap", DEMO, *flags, "--swap-activations=all")
    train(all_remat, out + "-all-remat", 3)
    ref = files(out + "-all-remat")
    for label, env in (("default", {}), ("deferred", {"TCC_CUDA_EMU_STREAMS": "deferred"}),
                       ("deferred-first", {"TCC_CUDA_EMU_STREAMS": "deferred-first"})):
        train(all_swap, out + "-all-x", 3, env=env)
        require_equal(ref, files(out + "-all-x"), "--offload=all, swapped (%s) vs recomputed" % label)
    return ("%d of %d recomputed values swapped (%d bytes of host memory; recomputed FLOPs %d -> %d, plan %d "
            "-> %d bytes): byte for byte the recomputing step's, as a CUDA graph and op by op, with deferred "
            "streams too; so with --offload=all" % (s["values"], s["candidates"], s["host_bytes"], rr["recomputed_flops"],
                             sr["recomputed_flops"], rr["planned_peak_bytes"], sr["planned_peak_bytes"]))


@case("parity")
def parity_case():
    roots = {}
    for key, flags in (("cpu-small", []), ("small-dev", []),
                       ("small-host", ["--offload=optimizer", "--host-budget=1G"]),
                       ("small-all", ["--offload=all", "--host-budget=1G"])):
        so = build(key, SMALL, *flags)
        roots[key] = os.path.join(ARGS.workdir, "parity-" + key)
        shutil.rmtree(roots[key], ignore_errors=True)
        run([ARGS.tcc_run, so, "--feed", SMALL_FEED, "--grads-only", "--dump",
             os.path.join(roots[key], "tiny_gpt")])
    for key in ("small-host", "small-all"):
        require(compare.parity(roots["cpu-small"], roots[key], ["tiny_gpt"], label=key) == 0,
                "%s: over the 1e-2 bound" % key)
    for key in ("small-host", "small-all"):
        grads = lambda d: {os.path.basename(f): np.load(f)  # noqa: E731
                           for f in glob.glob(os.path.join(d, "tiny_gpt", "grads", "*.npy"))}
        require_equal(grads(roots["small-dev"]), grads(roots[key]), "%s gradients vs the device step's" % key)
    return ("loss and gradients within 1e-2 of the CPU target, with state and with accumulators on the "
            "host; the gradients equal the device step's byte for byte")


def initial_parameters(model):
    """The model's initializers, by dump file name."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(model)
    return {os.path.join("dump", "params", t.name.replace("/", "_") + ".npy"): numpy_helper.to_array(t)
            for t in m.graph.initializer}


@case("skip")
def skip_case():
    dev = build("demo-dev", DEMO)
    host = build("demo-host", DEMO, "--offload=optimizer", "--host-budget=1G")
    out = os.path.join(ARGS.workdir, "skip")
    logs = [train(so, out + "-" + k, 2, "--loss-scale", "1e30", all_skipped=True)
            for k, so in (("dev", dev), ("host", host))]
    require_equal(files(out + "-dev"), files(out + "-host"), "skipped steps")
    require(all("2 of 2 steps skipped" in l for l in logs), "not every step skipped: %r" % logs[1][-300:])
    init = initial_parameters(DEMO)
    got = files(out + "-host")
    params = [k for k in got if "/params/" in k]
    require(params and set(params) <= set(init), "dumped %s, initializers %s" % (params[:3], sorted(init)[:3]))
    require(not differences({k: init[k] for k in params}, {k: got[k] for k in params}),
            "a skipped step changed the parameters")
    return "2 of 2 steps skipped on both; parameters the initial ones"


@case("kill-resume")
def kill_resume_case():
    host = build("demo-host", DEMO, "--offload=optimizer", "--host-budget=1G")
    out = os.path.join(ARGS.workdir, "resume")
    train(host, out + "-whole", 5)
    ref = files(out + "-whole")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    ck, metrics = os.path.join(out, "ck"), os.path.join(out, "metrics.jsonl")
    cmd = [ARGS.tcc_run, host, "--steps", "5", "--checkpoint", ck, "--checkpoint-every", "1",
           "--metrics", metrics] + TRAIN
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while p.poll() is None and time.time() < deadline:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 2:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    require(p.returncode == -9, "the run ended before it was killed (%d)" % p.returncode)
    resumed_at = json.load(open(os.path.join(ck, "checkpoint.json"))).get("step") \
        if os.path.exists(os.path.join(ck, "checkpoint.json")) else None
    run([ARGS.tcc_run, host, "--steps", "5", "--resume", ck, "--checkpoint", ck,
         "--dump", os.path.join(out, "dump")] + TRAIN)
    got = files(out)
    params = [k for k in ref if "/params/" in k] + ["checkpoint.bin"]
    require_equal({k: ref[k] for k in params}, {k: got[k] for k in params if k in got},
                  "resumed after kill -9")
    return "killed after step %s, resumed: parameters and checkpoint equal the uninterrupted run" % (
        resumed_at if resumed_at is not None else ">= 2")


@case("save")
def save_case():
    dev = build("demo-dev", DEMO)
    host = build("demo-host", DEMO, "--offload=optimizer", "--host-budget=1G")
    out = os.path.join(ARGS.workdir, "save")
    saved = []
    for k, so in (("dev", dev), ("host", host)):
        path = os.path.join(ARGS.workdir, "save-%s.onnx" % k)
        train(so, out + "-" + k, 2, "--save", path)
        saved.append(open(path, "rb").read())
    require(saved[0] == saved[1], "the saved models differ (%d and %d bytes)" % (len(saved[0]), len(saved[1])))
    return "--save wrote identical models (%d bytes)" % len(saved[0])


# In order: overlap compares with the adamw case's device run.
CASES = dict((("tables", tables_case), ("adamw", adamw_case), ("overlap", overlap_case),
              ("adamw-accumulators", adamw_accumulators_case), ("sgd", sgd_case), ("mixed", mixed_case),
              ("swap", swap_case), ("parity", parity_case), ("skip", skip_case),
              ("kill-resume", kill_resume_case), ("save", save_case)))


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--cases", help="comma-separated case names (default: all): " + ", ".join(CASES))
    ARGS = p.parse_args()
    names = ARGS.cases.split(",") if ARGS.cases else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        p.error("unknown case %s (the cases: %s)" % (", ".join(unknown), ", ".join(CASES)))
    shutil.rmtree(ARGS.workdir, ignore_errors=True)  # steps built by an older tcc
    os.makedirs(ARGS.workdir)
    case_harness.WORKDIR = ARGS.workdir
    for n in names:
        CASES[n]()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
