#!/usr/bin/env python3
"""What tcc-run --trace costs on the CPU demo: steps/s without a trace, with
the default trace (the first 2 optimizer steps), and with every step traced,
measured in one run, rounds interleaved so that drift in the machine's speed
falls on all three alike.

    python3 bench/trace_overhead.py [--build build] [--steps 60] [--rounds 5]

The reference is the run without --trace (the hook unset: a load and a branch
per op). Prints a markdown table: median steps/s over the rounds, and the
change against the reference.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def steps_per_s(cmd, metrics, steps):
    subprocess.run(cmd + ["--metrics", metrics], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    # From the end of step 1 (the first step warms caches) to the last.
    return (steps - 1) / (rows[-1]["elapsed_s"] - rows[0]["elapsed_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tcc = os.path.join(args.build, "bin", "tcc")
    tcc_run = os.path.join(args.build, "bin", "tcc-run")
    with tempfile.TemporaryDirectory() as work:
        so = os.path.join(work, "demo.so")
        subprocess.run([tcc, os.path.join(REPO, "examples", "tiny_gpt_demo.onnx"), "--target=cpu",
                        "-o", so], check=True, stderr=subprocess.DEVNULL)
        base = [tcc_run, so, "--data", os.path.join(REPO, "examples", "data", "train.bin"),
                "--steps", str(args.steps), "--accum", str(args.accum), "--quiet"]
        trace = os.path.join(work, "t.json")
        configs = [
            ("no --trace (reference)", []),
            ("--trace (first 2 steps)", ["--trace", trace]),
            ("--trace --trace-steps=%d (every step)" % args.steps,
             ["--trace", trace, "--trace-steps", str(args.steps)]),
        ]
        results = {name: [] for name, _ in configs}
        for r in range(args.rounds):
            for name, extra in configs:
                results[name].append(steps_per_s(base + extra, os.path.join(work, "m.jsonl"),
                                                 args.steps))
            print("round %d/%d done" % (r + 1, args.rounds), file=sys.stderr)
        ops = None
        sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
        try:
            import step_abi
            ops = len(step_abi.read_info(so)[0].ops)
        except Exception:  # numpy missing: the op count is only a label
            pass
    ref = statistics.median(results[configs[0][0]])
    print("CPU demo (examples/tiny_gpt_demo.onnx, --target=cpu), %d steps x --accum %d%s, "
          "median of %d rounds" % (args.steps, args.accum,
                                   ", %d ops per micro-step" % ops if ops else "", args.rounds))
    print()
    print("| run | steps/s (median) | min | max | vs reference |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in configs:
        xs = results[name]
        med = statistics.median(xs)
        print("| %s | %.2f | %.2f | %.2f | %+.1f%% |" % (name, med, min(xs), max(xs),
                                                        100.0 * (med / ref - 1.0)))


if __name__ == "__main__":
    main()
