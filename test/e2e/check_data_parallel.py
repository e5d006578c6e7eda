#!/usr/bin/env python3
"""Data parallelism on the CPU target under Open MPI: `mpirun -np N tcc-run
--accum K` against one process with `--accum N*K`, on the bundled demo.

  equality   np 2 and 3, K 1 and 2, random and sequential token windows:
             every micro-step loss bit-identical to the single process's (the
             same micro-batches; the gradients differ only in rounding, which
             does not reach the losses here), and two runs of one world
             bit-identical. The parameters are not: the accumulators are
             summed in another order (micro-step by micro-step on each rank,
             then across ranks, where one process adds micro-step by
             micro-step), and a parameter that one micro-step's gradient
             reaches twice (the tied embedding) is summed in another grouping
             even with K = 1. With SGD (momentum 0.9) the parameters stay
             within 1e-6 of a tensor's largest value; with AdamW within 5e-3
             (measured: 1.4e-3 at most since the f32 step's GEMMs accumulate
             in float, on the BLAS, as PyTorch's do; 1e-3 before):
             where a gradient is rounding noise in exact arithmetic (the
             attention's query and key biases, which softmax's shift
             invariance makes zero), Adam's normalisation turns the noise of
             either order into a full-size step;
  dropout    a GPT with dropout: every rank draws the single process's masks
             for its micro-batches;
  resume     a world checkpointed and resumed ends with the uninterrupted
             world's parameters byte for byte; its checkpoint resumes in one
             process with --accum N*K; a world whose ranks x --accum differ
             from the checkpoint's is refused;
  kill -9    one rank killed mid-run: mpirun ends every rank, the last
             checkpoint resumes to the uninterrupted run's parameters;
  failure    a rank that fails (its data file missing) ends every rank with an
             error naming it; a rank that stops answering (SIGSTOP) leaves
             the others in a collective that times out (TCC_COMM_TIMEOUT),
             with an error naming the rank and the collective: nothing hangs;
  agreement  ranks given different flags (--lr, --accum, --steps) or steps
             (AdamW and SGD) are refused before training, naming the field
             and the ranks.

Exit 0 when everything holds, 1 otherwise.
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

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
problems = []
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]


def fail(msg):
    problems.append(msg)
    print("FAIL: " + msg)


def run(cmd, expect=0, timeout=300, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, env=env)
    if expect is not None and p.returncode != expect:
        raise SystemExit("exit %d (expected %d): %s\n%s" % (p.returncode, expect, " ".join(cmd),
                                                           p.stdout[-3000:]))
    return p


def load_dump(folder):
    losses = np.load(os.path.join(folder, "losses.npy"))
    params = {os.path.basename(f): np.load(f) for f in glob.glob(os.path.join(folder, "params", "*.npy"))}
    return losses, params


def rel_diff(a, b):
    """The largest |a - b| over the largest |a|, parameter by parameter."""
    worst = 0.0
    for name in a:
        scale = float(np.max(np.abs(a[name]))) or 1.0
        worst = max(worst, float(np.max(np.abs(a[name].astype(np.float64) - b[name]))) / scale)
    return worst


def same_bytes(a, b):
    return all(a[n].tobytes() == b[n].tobytes() for n in a) and set(a) == set(b)


def compare(what, single, world, first, param_bound=5e-3):
    (ls, ps), (lw, pw) = single, world
    if len(ls) != len(lw):
        return fail("%s: %d losses, the single process %d" % (what, len(lw), len(ls)))
    if ls[:first].tobytes() != lw[:first].tobytes():
        fail("%s: the first step's %d losses differ from the single process's: %s vs %s"
             % (what, first, lw[:first], ls[:first]))
    loss_rel = float(np.max(np.abs(ls.astype(np.float64) - lw) / np.abs(ls)))
    param_rel = rel_diff(ps, pw)
    if loss_rel > 1e-6 or param_rel > param_bound:
        fail("%s: losses within %.2g, parameters within %.2g relative (bounds 1e-6, %g)"
             % (what, loss_rel, param_rel, param_bound))
    print("%s: first step's %d losses bit-identical; then losses within %.2g, parameters "
          "within %.2g relative" % (what, first, loss_rel, param_rel))


def kill_one_rank(cmd, ckk, tcc_run, so, resume_args, train_to, ahead=4):
    """Starts the world `cmd` (which checkpoints into `ckk`), kills its last
    rank with SIGKILL once a checkpoint exists, expects mpirun to end every
    rank, then asks tcc-run the checkpoint's step S (a resume to step 1 says
    it) and calls train_to(S + ahead, resumed): the resumed run's and the
    uninterrupted run's dumps. Returns (exit code, S, resumed, straight), or
    None after a failure it reported."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(ckk, "checkpoint.bin")):
        time.sleep(0.1)
    time.sleep(0.5)
    ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE,
                           text=True).stdout.split()
    if len(ranks) < 2:
        fail("kill -9: could not find the ranks of mpirun (%s)" % ranks)
        proc.kill()
        proc.communicate()
        return None
    os.kill(int(ranks[-1]), signal.SIGKILL)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("kill -9 of a rank: the world did not end within 60 s")
        return None
    if proc.returncode == 0:
        fail("kill -9 of a rank: mpirun exited 0")
        return None
    # A fast machine may be well past any fixed step when the kill lands, so
    # ask the checkpoint where it is.
    p = run(MPIRUN + ["-np", "2", tcc_run, so, "--steps", "1", "--resume", ckk] + resume_args)
    m = re.search(r"is at step (\d+);", p.stdout)
    if not m:
        fail("kill -9: tcc-run did not say the checkpoint's step: %r" % p.stdout[-400:])
        return None
    step = int(m.group(1))
    resumed, straight = train_to(step + ahead)
    return proc.returncode, step, resumed, straight


def stall_one_rank(rank_cmd, who, started=4.0):
    """Two ranks of `rank_cmd` (a tcc-run command without --steps) training a
    long run; `started` seconds in, the second is stopped (SIGSTOP: a rank
    that no longer answers, wherever it is: in a micro-step, in a collective
    or between steps). The first's next collective must time out
    (TCC_COMM_TIMEOUT=5) and end every rank with an error naming it; nothing
    hangs. (A rank told fewer --steps than the others is refused before
    training: Trainer::agree.) Returns what went wrong, or None (and prints
    what happened)."""
    proc = subprocess.Popen(MPIRUN + ["-x", "TCC_COMM_TIMEOUT", "-np", "2"] + rank_cmd +
                            ["--steps", "100000"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, TCC_COMM_TIMEOUT="5"))
    time.sleep(started)
    ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
    try:
        if len(ranks) < 2:
            return "%s stopped mid-run: could not find the ranks of mpirun (%s)" % (who, ranks)
        os.kill(int(ranks[-1]), signal.SIGSTOP)
        t0 = time.time()
        try:
            out = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            return "%s stopped mid-run: the world did not end within 60 s" % who
        took = time.time() - t0
        error = next((l for l in out.splitlines() if "error:" in l), "(no error line)")
        if proc.returncode == 0 or "did not complete within 5 s" not in out or "rank 0 of 2" not in error:
            return "%s stopped mid-run: exit %d, %r" % (who, proc.returncode, out[-600:])
        print("%s stopped mid-run (SIGSTOP): every rank ended %.1f s later (exit %d): %s"
              % (who, took, proc.returncode, error))
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for r in ranks:  # none may outlive the test, stopped or not
            try:
                os.kill(int(r), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    so = os.path.join(work, "demo.so")
    run([args.tcc, os.path.join(REPO, "examples", "tiny_gpt_demo.onnx"), "--target=cpu", "-o", so])
    data = os.path.join(REPO, "examples", "data", "train.bin")
    steps = 4

    def train(np_, accum, out, extra=(), steps=steps, mpi=None):
        cmd = [args.tcc_run, so, "--steps", str(steps), "--accum", str(accum), "--lr", "1e-3",
               "--quiet", "--dump", out] + list(extra)
        if np_ is not None:
            cmd = (mpi or MPIRUN) + ["-np", str(np_)] + cmd
        run(cmd)
        return load_dump(out)

    sources = [("random windows", ["--data", data, "--seed", "7"]),
               ("sequential windows", ["--data", data, "--data-order", "sequential"])]
    for label, src in sources:
        for n, k in ((2, 1), (3, 1), (2, 2)):
            tag = "%s np%d k%d" % (label.split()[0], n, k)
            single = train(None, n * k, os.path.join(work, tag + "-single"), src)
            world = train(n, k, os.path.join(work, tag + "-world"), src)
            compare("%s: mpirun -np %d --accum %d vs --accum %d" % (label, n, k, n * k),
                    single, world, n * k)
    # SGD, where no normalisation amplifies the rounding of the other
    # summation order, stays within 1e-6.
    sgd = os.path.join(work, "sgd.so")
    run([args.tcc, os.path.join(REPO, "examples", "tiny_gpt_demo.onnx"), "--target=cpu",
         "--optimizer=sgd", "-o", sgd])
    for n, k in ((2, 2), (3, 1)):
        cmd = [args.tcc_run, sgd, "--steps", str(steps), "--lr", "0.1", "--momentum", "0.9",
               "--quiet"] + sources[0][1]
        a, b = os.path.join(work, "sgd-single-%d" % n), os.path.join(work, "sgd-world-%d" % n)
        run(cmd + ["--accum", str(n * k), "--dump", a])
        run(MPIRUN + ["-np", str(n)] + cmd + ["--accum", str(k), "--dump", b])
        compare("SGD (momentum 0.9): mpirun -np %d --accum %d vs --accum %d" % (n, k, n * k),
                load_dump(a), load_dump(b), n * k, param_bound=1e-6)
    again = train(2, 2, os.path.join(work, "again"),
                  sources[0][1] + ["--trace", os.path.join(work, "again.json")])
    with open(os.path.join(work, "again.json")) as f:
        events = json.load(f)["traceEvents"]
    collectives = [e for e in events if e.get("cat") == "collective"]
    if len(collectives) != 2 or not all(e["args"]["bytes"] > 0 for e in collectives):
        fail("the trace of mpirun -np 2 has %d gradient all-reduce events, expected 2"
             % len(collectives))
    else:
        print("rank 0's trace shows the gradient all-reduce of each traced step (%d bytes)"
              % collectives[0]["args"]["bytes"])
    if not same_bytes(load_dump(os.path.join(work, "random np2 k2-world"))[1], again[1]):
        fail("two runs of mpirun -np 2 differ")
    else:
        print("mpirun -np 2 twice: bit-identical parameters")

    # Dropout: a GPT with GPT-2's dropouts.
    sys.path.insert(0, os.path.join(REPO, "test", "models"))
    try:
        import export_models
        dropout_dir = os.path.join(work, "dropout")
        os.makedirs(dropout_dir)
        export_models.export_one("tiny_gpt_dropout", dropout_dir)
        onnx_path = os.path.join(dropout_dir, "tiny_gpt_dropout.onnx")
        dso = os.path.join(dropout_dir, "step.so")
        run([args.tcc, onnx_path, "--target=cpu", "-o", dso])
        feed_dir = os.path.join(dropout_dir, "tiny_gpt_dropout.feed")
        out1 = os.path.join(dropout_dir, "single")
        out2 = os.path.join(dropout_dir, "world")
        base = [args.tcc_run, dso, "--feed", feed_dir, "--steps", "2", "--lr", "1e-2", "--quiet",
                "--seed", "5"]
        run(base + ["--accum", "4", "--dump", out1])
        run(MPIRUN + ["-np", "2"] + base + ["--accum", "2", "--dump", out2])
        compare("dropout (tiny_gpt_dropout, --feed): mpirun -np 2 --accum 2 vs --accum 4",
                load_dump(out1), load_dump(out2), 4)
    except (ImportError, KeyError, AttributeError) as e:
        fail("the dropout model could not be exported: %r" % e)

    # Resume.
    ck = os.path.join(work, "ck")
    src = sources[0][1]
    full = train(2, 2, os.path.join(work, "full"), src, steps=6)
    train(2, 2, os.path.join(work, "half"), src + ["--checkpoint", ck], steps=3)
    ck1, ck2 = os.path.join(work, "ck-one"), os.path.join(work, "ck-three")
    for c in (ck1, ck2):
        shutil.copytree(ck, c)
        os.remove(os.path.join(c, ".tcc-run.lock"))
    resumed = train(2, 2, os.path.join(work, "resumed"), src + ["--checkpoint", ck, "--resume", ck],
                    steps=6)
    if not same_bytes(full[1], resumed[1]) or full[0][-12:].tobytes() != resumed[0].tobytes():
        fail("mpirun -np 2: resumed at step 3 of 6, the parameters or losses differ from the "
             "uninterrupted run's")
    else:
        print("resume: mpirun -np 2 checkpointed at step 3 and resumed ends bit-identical to "
              "the uninterrupted run")
    one = train(None, 4, os.path.join(work, "resumed-one"), src + ["--resume", ck1], steps=6)
    print("resume in one process with --accum 4 from the world's checkpoint: parameters within "
          "%.2g relative of the world's" % rel_diff(full[1], one[1]))
    if rel_diff(full[1], one[1]) > 1e-3:
        fail("the world's checkpoint resumed in one process drifts past 1e-3")
    p = run(MPIRUN + ["-np", "3", args.tcc_run, so, "--steps", "6", "--accum", "2", "--quiet",
                      "--resume", ck2] + src, expect=None)
    if p.returncode == 0 or "micro-batches per optimizer step" not in p.stdout:
        fail("resuming 2 x 2 with 3 x 2 was not refused: %r" % p.stdout[-400:])
    else:
        print("resume with 3 ranks x --accum 2 from a 2 x 2 checkpoint: refused")

    # kill -9 of one rank mid-run: the last whole checkpoint resumes to the
    # uninterrupted run's end.
    ckk = os.path.join(work, "ck-kill")
    cmd = MPIRUN + ["-np", "2", args.tcc_run, so, "--steps", "100000", "--accum", "2", "--quiet",
                    "--checkpoint", ckk, "--checkpoint-every", "2"] + src
    killed = kill_one_rank(
        cmd, ckk, args.tcc_run, so, ["--accum", "2"] + src,
        lambda target: (train(2, 2, os.path.join(work, "after-kill"), src + ["--resume", ckk],
                              steps=target),
                        train(2, 2, os.path.join(work, "straight"), src, steps=target)))
    if killed:
        code, at, resumed, straight = killed
        print("kill -9 of one rank: mpirun ended the world (exit %d)" % code)
        if not same_bytes(straight[1], resumed[1]):
            fail("kill -9: resuming the last checkpoint does not end at the uninterrupted "
                 "run's parameters")
        else:
            print("kill -9: the checkpoint at step %d resumed to step %d equals the "
                  "uninterrupted run byte for byte" % (at, at + 4))

    # A rank that fails, and a rank that leaves early.
    base = [args.tcc_run, so, "--steps", "3", "--quiet"]
    p = run(MPIRUN + ["-np", "1"] + base + src + [":", "-np", "1"] + base +
            ["--data", os.path.join(work, "missing.bin")], expect=None, timeout=120)
    if p.returncode == 0 or "rank 1 of 2" not in p.stdout:
        fail("a failing rank: exit %d, %r" % (p.returncode, p.stdout[-500:]))
    else:
        print("a rank whose data is missing: every rank ended, exit %d, the error names rank 1"
              % p.returncode)
    failure = stall_one_rank([args.tcc_run, so, "--quiet"] + src, "a rank")
    if failure:
        fail(failure)

    # Ranks that would train different things (issue 47): each mismatch is
    # refused on every rank before training, naming the field and the rank.
    for label, rank1, needle in (
            ("--lr 1e-3 against --lr 0.5", [so, "--lr", "0.5"], "--lr differs"),
            ("an AdamW step against an SGD step", [sgd, "--momentum", "0.9"],
             "the optimizer differs"),
            ("--accum 2 against --accum 1", [so, "--accum", "1"], "--accum differs"),
            ("--steps 3 against --steps 2", [so, "--steps", "2"], "--steps differs")):
        r0 = [args.tcc_run, so, "--steps", "3", "--accum", "2", "--quiet"] + src
        r1 = [args.tcc_run] + rank1 + ["--quiet"] + src
        for flag, value in (("--steps", "3"), ("--accum", "2")):  # rank 0's, unless overridden
            if flag not in rank1:
                r1 += [flag, value]
        t0 = time.time()
        p = run(MPIRUN + ["-np", "1"] + r0 + [":", "-np", "1"] + r1, expect=None, timeout=120)
        took = time.time() - t0
        if p.returncode == 0 or needle not in p.stdout or "rank 1" not in p.stdout:
            fail("ranks with %s: exit %d, %r" % (label, p.returncode, p.stdout[-600:]))
        else:
            print("ranks with %s: refused in %.1f s (exit %d): %s" % (
                label, took, p.returncode,
                [ln for ln in p.stdout.splitlines() if needle in ln][0][:160]))

    if problems:
        print("%d problem(s)" % len(problems))
        return 1
    print("all data-parallel checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
