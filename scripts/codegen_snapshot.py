#!/usr/bin/env python3
"""Snapshot of what tcc generates, to show that a refactoring changes nothing.

Usage:
  codegen_snapshot.py --tcc build/bin/tcc --out DIR MODEL_OR_FOLDER...
  codegen_snapshot.py --compare BEFORE AFTER

For every model (an .onnx file, or every .onnx under a folder) it runs tcc
on both targets with `--emit=source`, with the fusion and memory reports,
and once more with a budget 40% of the activations and temporaries below
the unconstrained plan's peak (which makes tcc-remat choose by its cost
model), and with the optimizer and placement variants (SGD, ZeRO-1 over
two ranks, and on CUDA --offload=optimizer and =all), and writes each
output's SHA-256
to DIR/manifest.json (and the files themselves under DIR/files). A model
that tcc refuses is recorded with its exit status and message, so a change
in a diagnostic shows too.

Generated sources that are byte for byte the same build steps whose losses
and gradients are bit-identical: `--compare` prints every output that
differs and exits 1 if any does. Runs two tcc processes at a time.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import tempfile


def models_of(paths):
    found = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                found += [os.path.join(root, f) for f in files if f.endswith(".onnx")]
        elif p.endswith(".onnx"):
            found.append(p)
        else:
            sys.exit(f"codegen_snapshot.py: error: {p} is neither an .onnx file nor a folder")
    return sorted(set(found))


def digest_tree(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for f in sorted(files):
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


# The variants beside each target's default run: (name, extra flags, CUDA only).
VARIANTS = [("sgd", ["--optimizer=sgd"], False), ("zero1", ["--data-parallel=2"], False),
            ("offload", ["--offload=optimizer"], True), ("offload-all", ["--offload=all"], True)]


def run_tcc(tcc, model, target, budget, keep, extra=()):
    """One tcc run; returns {output name: sha256} plus the status."""
    with tempfile.TemporaryDirectory(prefix="tcc-snapshot-") as tmp:
        src = os.path.join(tmp, "source")
        cmd = [tcc, model, "--target=" + target, "--emit=source", "-o", src,
               "--fusion-report=" + os.path.join(tmp, "fusion.json"),
               "--memory-report=" + os.path.join(tmp, "memory.json")]
        if budget:
            cmd.append("--mem-budget=%d" % budget)
            if target == "cuda" and not any(e.startswith(("--offload", "--swap-activations")) for e in extra):
                cmd.append("--offload=none")  # the device plan, as before the budget decided
        cmd += list(extra)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        # The message names the model by its path, which is the same in both
        # snapshots when they are made from the same folders.
        result = {"rc": p.returncode, "stderr": p.stderr.strip()}
        files = {}
        if os.path.isdir(src):
            files.update({"source/" + k: v for k, v in digest_tree(src).items()})
        result["files"] = files
        # The reports are kept whole, so --compare can say which field moved.
        for report in ("fusion.json", "memory.json"):
            path = os.path.join(tmp, report)
            if os.path.exists(path):
                with open(path) as fh:
                    result[report] = json.load(fh)
                # The host tier's default budget is the memory this machine
                # has available now: not tcc's output.
                host = result[report].get("host") if isinstance(result[report], dict) else None
                if isinstance(host, dict) and "--host-budget" not in " ".join(extra):
                    host.pop("budget_bytes", None)
        budget_to_try = None
        mem = os.path.join(tmp, "memory.json")
        if os.path.exists(mem):
            with open(mem) as fh:
                report = json.load(fh)
            temporaries = report["categories"]["activations_and_temporaries"]
            budget_to_try = report["planned_peak_bytes"] - int(0.4 * temporaries)
        if keep:
            os.makedirs(keep, exist_ok=True)
            subprocess.run(["cp", "-r", tmp + "/.", keep], check=False)
        return result, budget_to_try


def snapshot_model(tcc, model, files_dir):
    entry = {}
    for target in ("cpu", "cuda"):
        key = hashlib.sha256(model.encode()).hexdigest()[:12]
        keep = os.path.join(files_dir, key, target) if files_dir else None
        entry[target], budget = run_tcc(tcc, model, target, 0, keep)
        if budget:
            keep = os.path.join(files_dir, key, target + "-budget") if files_dir else None
            entry[target + "-tight"], _ = run_tcc(tcc, model, target, budget, keep)
        for name, extra, cuda_only in VARIANTS:
            if cuda_only and target != "cuda":
                continue
            keep = os.path.join(files_dir, key, target + "-" + name) if files_dir else None
            entry[target + "-" + name], _ = run_tcc(tcc, model, target, 0, keep, extra)
    return model, entry


def compare(before, after):
    with open(os.path.join(before, "manifest.json")) as f:
        a = json.load(f)
    with open(os.path.join(after, "manifest.json")) as f:
        b = json.load(f)
    differ = 0
    for model in sorted(set(a) | set(b)):
        if model not in a or model not in b:
            print(f"only in {'after' if model in b else 'before'}: {model}")
            differ += 1
            continue
        for run in sorted(set(a[model]) | set(b[model])):
            ra, rb = a[model].get(run), b[model].get(run)
            if ra == rb:
                continue
            differ += 1
            if ra is None or rb is None:
                print(f"{model} [{run}]: run only in {'after' if rb else 'before'}")
                continue
            if ra["rc"] != rb["rc"] or ra["stderr"] != rb["stderr"]:
                print(f"{model} [{run}]: exit {ra['rc']} -> {rb['rc']}\n  before: {ra['stderr'][:300]}\n  after:  {rb['stderr'][:300]}")
            for name in sorted(set(ra["files"]) | set(rb["files"])):
                if ra["files"].get(name) != rb["files"].get(name):
                    print(f"{model} [{run}]: {name} differs")
            for report in ("fusion.json", "memory.json"):
                fa, fb = ra.get(report) or {}, rb.get(report) or {}
                for key in sorted(set(fa) | set(fb)):
                    if fa.get(key) != fb.get(key):
                        print(f"{model} [{run}]: {report} {key}: "
                              f"{json.dumps(fa.get(key))[:80]} -> {json.dumps(fb.get(key))[:80]}")
    runs = sum(len(v) for v in a.values())
    print(f"{len(a)} models, {runs} tcc runs compared: {differ} differ")
    return 1 if differ else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tcc")
    p.add_argument("--out")
    p.add_argument("--keep-files", action="store_true",
                   help="also keep the generated files under OUT/files (for diffing)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    p.add_argument("-j", type=int, default=2)
    p.add_argument("models", nargs="*")
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.tcc or not args.out or not args.models:
        p.error("--tcc, --out and at least one model or folder are needed")
    models = models_of(args.models)
    os.makedirs(args.out, exist_ok=True)
    files_dir = os.path.join(args.out, "files") if args.keep_files else None
    manifest = {}
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        futures = [pool.submit(snapshot_model, args.tcc, m, files_dir) for m in models]
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            model, entry = fut.result()
            manifest[model] = entry
            if i % 25 == 0 or i == len(models):
                print(f"{i}/{len(models)} models", file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    failed = sum(1 for e in manifest.values() for r in e.values() if r["rc"])
    print(f"{len(manifest)} models, {sum(len(e) for e in manifest.values())} tcc runs "
          f"({failed} refused by tcc) -> {args.out}/manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
