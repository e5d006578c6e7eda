#!/usr/bin/env python3
"""ZeRO-1 on the CPU target: `tcc --data-parallel=N` (the optimizer state
sharded across N ranks) under `mpirun -np N`, against the same world with
the whole state on every rank, on the bundled demo.

  plan       --memory-report: each rank's optimizer state is one chunk per
             kind, 1/N of the unsharded state plus padding; the arena shrinks
             by about (N-1)/N of it (less the reduce-scatter buffer);
  equality   AdamW, np 2 (K 1 and 2): losses and parameters bit-identical to
             the unsharded world (two ranks' sums are the same in either
             collective); np 3: the first step's losses bit-identical, and
             with SGD (momentum 0.9) the parameters within 1e-6 of a tensor's
             largest value (MPI's reduce-scatter may add three ranks'
             gradients in another order than its all-reduce), with AdamW
             within 1e-3 (data-parallel's bound: Adam's normalisation turns
             rounding noise in gradients that are zero in exact arithmetic
             into full steps); with --clip-norm the world's norm is the sum
             of the shards' (np 2 stays bit-identical);
  checkpoint one shard file per rank beside checkpoint.bin and its manifest;
             a checkpoint resumed ends byte for byte where the uninterrupted
             run does; only the last checkpoint's shards are kept;
  kill -9    one rank killed mid-run: the last checkpoint resumes to the
             uninterrupted run's parameters byte for byte;
  refusals   a sharded step in one process or under another world size; a
             missing or corrupt shard; an unsharded checkpoint resumed by a
             sharded step; --data-parallel with --offload or 0 ranks. (The
             CUDA target's ZeRO-1 is checked by check_data_parallel_cuda.py.)
             Each exits non-zero with a message that says what to do.

Exit 0 when everything holds, 1 otherwise.
"""

import argparse
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_data_parallel import (MPIRUN, REPO, fail, kill_one_rank, load_dump,  # noqa: E402
                                 problems, rel_diff, run, same_bytes)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(REPO, "examples", "tiny_gpt_demo.onnx")
    data = os.path.join(REPO, "examples", "data", "train.bin")
    src = ["--data", data, "--seed", "7"]

    def build(name, extra):
        so = os.path.join(work, name + ".so")
        report = os.path.join(work, name + ".json")
        run([args.tcc, model, "--target=cpu", "-o", so, "--memory-report", report] + extra)
        with open(report) as f:
            return so, json.load(f)

    plain, plain_r = build("plain", [])
    plain_sgd, _ = build("plain-sgd", ["--optimizer=sgd"])
    z2, z2_r = build("zero2", ["--data-parallel=2"])
    z3, z3_r = build("zero3", ["--data-parallel=3"])
    z3_sgd, _ = build("zero3-sgd", ["--data-parallel=3", "--optimizer=sgd"])

    # The plan.
    full_state = plain_r["categories"]["optimizer_state"]
    for n, r in ((2, z2_r), (3, z3_r)):
        dp = r.get("data_parallel")
        state = r["categories"]["optimizer_state"]
        if not dp or dp["ranks"] != n:
            fail("--data-parallel=%d: the memory report has no data_parallel section" % n)
            continue
        share = full_state / n
        if not (share <= state <= share + 2 * 64 * n):
            fail("--data-parallel=%d: each rank's optimizer state is %d bytes, expected 1/%d of "
                 "%d plus padding" % (n, state, n, full_state))
        saved = plain_r["arena_bytes"] - r["arena_bytes"]
        print("plan, --data-parallel=%d: optimizer state per rank %d bytes (unsharded %d), "
              "reduce-scatter buffer %d, arena %d -> %d bytes per rank"
              % (n, state, full_state, dp["reduce_scatter_buffer_bytes"], plain_r["arena_bytes"],
                 r["arena_bytes"]))
        if saved <= 0:
            fail("--data-parallel=%d does not shrink the arena" % n)

    def train(so, np_, accum, out, extra=(), steps=4):
        cmd = MPIRUN + ["-np", str(np_), args.tcc_run, so, "--steps", str(steps), "--accum",
                        str(accum), "--lr", "1e-3", "--quiet", "--dump", out] + src + list(extra)
        run(cmd)
        return load_dump(out)

    # Equality against the unsharded world.
    def compare(what, ref, got, exact, bound):
        (lr_, pr), (lg, pg) = ref, got
        if exact:
            if lr_.tobytes() != lg.tobytes() or not same_bytes(pr, pg):
                return fail("%s: not bit-identical (losses %s, parameters within %.2g)"
                            % (what, lr_.tobytes() == lg.tobytes(), rel_diff(pr, pg)))
            return print("%s: losses and parameters bit-identical" % what)
        first = len(lr_) // 4
        if lr_[:first].tobytes() != lg[:first].tobytes():
            fail("%s: the first step's losses differ" % what)
        d = rel_diff(pr, pg)
        if d > bound:
            return fail("%s: parameters within %.2g relative (bound %g)" % (what, d, bound))
        print("%s: first step's %d losses bit-identical, parameters within %.2g relative "
              "(bound %g)" % (what, first, d, bound))

    for k in (1, 2):
        compare("AdamW, np 2, --accum %d: ZeRO-1 vs unsharded" % k,
                train(plain, 2, k, os.path.join(work, "u2k%d" % k)),
                train(z2, 2, k, os.path.join(work, "z2k%d" % k)), True, 0)
    compare("AdamW, np 2, --clip-norm 0.05: ZeRO-1 vs unsharded",
            train(plain, 2, 1, os.path.join(work, "u2clip"), ["--clip-norm", "0.05"]),
            train(z2, 2, 1, os.path.join(work, "z2clip"), ["--clip-norm", "0.05"]), True, 0)
    compare("SGD (momentum 0.9), np 3: ZeRO-1 vs unsharded",
            train(plain_sgd, 3, 1, os.path.join(work, "u3sgd"), ["--momentum", "0.9"]),
            train(z3_sgd, 3, 1, os.path.join(work, "z3sgd"), ["--momentum", "0.9"]), False, 1e-6)
    compare("AdamW, np 3: ZeRO-1 vs unsharded",
            train(plain, 3, 1, os.path.join(work, "u3")),
            train(z3, 3, 1, os.path.join(work, "z3")), False, 1e-3)

    # Checkpoints: resume, stale shards, the manifest's refusals.
    ck = os.path.join(work, "ck")
    straight = train(z2, 2, 2, os.path.join(work, "straight6"), steps=6)
    train(z2, 2, 2, os.path.join(work, "first3"), ["--checkpoint", ck, "--checkpoint-every", "1"],
          steps=3)
    shards = sorted(f for f in os.listdir(ck) if f.startswith("checkpoint.shard-"))
    want = ["checkpoint.shard-%d-of-2.step-3.bin" % r for r in range(2)]
    if shards != want:
        fail("after 3 steps with --checkpoint-every 1 the shard files are %s, expected %s"
             % (shards, want))
    else:
        print("checkpoint: checkpoint.bin and %s (the older steps' shards removed)"
              % ", ".join(shards))
    ck_copy = os.path.join(work, "ck-copy")
    shutil.copytree(ck, ck_copy)
    resumed = train(z2, 2, 2, os.path.join(work, "resumed6"), ["--resume", ck], steps=6)
    if not same_bytes(straight[1], resumed[1]) or straight[0][-4:].tobytes() != resumed[0][-4:].tobytes():
        fail("resume: checkpointed at step 3 and resumed to 6 differs from the uninterrupted run")
    else:
        print("resume: checkpointed at step 3 and resumed to step 6 equals the uninterrupted run "
              "byte for byte")

    def refused(what, cmd, pattern):
        p = run(cmd, expect=None, timeout=120)
        if p.returncode == 0 or not re.search(pattern, p.stdout):
            fail("%s: not refused as expected (exit %d): %r" % (what, p.returncode, p.stdout[-600:]))
        else:
            line = next((l for l in p.stdout.splitlines() if re.search(pattern, l)), "")
            print("%s: refused (exit %d): %s" % (what, p.returncode, line.strip()[:200]))

    base = [args.tcc_run, z2, "--steps", "5", "--accum", "2", "--quiet"] + src
    refused("a --data-parallel=2 step in one process", base, r"mpirun -np 2")
    refused("a --data-parallel=2 step under mpirun -np 3", MPIRUN + ["-np", "3"] + base,
            r"sharded across 2 ranks")
    bad = os.path.join(work, "ck-missing")
    shutil.copytree(ck_copy, bad)
    os.remove(os.path.join(bad, want[1]))
    refused("a checkpoint missing rank 1's shard",
            MPIRUN + ["-np", "2"] + base + ["--resume", bad], r"needs its shard .* is missing")
    bad = os.path.join(work, "ck-corrupt")
    shutil.copytree(ck_copy, bad)
    with open(os.path.join(bad, want[0]), "r+b") as f:
        f.seek(300)
        byte = f.read(1)
        f.seek(300)
        f.write(bytes([byte[0] ^ 0x40]))
    refused("a checkpoint with a corrupt shard", MPIRUN + ["-np", "2"] + base + ["--resume", bad],
            r"corrupt \(checksum mismatch\)")
    ck_plain = os.path.join(work, "ck-plain")
    train(plain, 2, 2, os.path.join(work, "plain3"), ["--checkpoint", ck_plain], steps=3)
    refused("an unsharded checkpoint resumed by a sharded step",
            MPIRUN + ["-np", "2"] + base + ["--resume", ck_plain], r"without sharded optimizer state")
    refused("a sharded checkpoint resumed by an unsharded step",
            MPIRUN + ["-np", "2", args.tcc_run, plain, "--steps", "5", "--accum", "2", "--quiet",
                      "--resume", ck_copy] + src, r"holds optimizer state sharded across 2 ranks")
    refused("tcc --data-parallel=2 --offload=all",
            [args.tcc, model, "--target=cuda", "--cuda-emulation", "--data-parallel=2",
             "--offload=all", "-o", os.path.join(work, "cuda.so")],
            r"host memory tiers \(--offload\) do not combine")
    refused("tcc --data-parallel=0", [args.tcc, model, "--target=cpu", "--data-parallel=0", "-o",
                                      os.path.join(work, "zero.so")], r"expected a number of ranks")
    for f in ("cuda.so", "zero.so"):
        if os.path.exists(os.path.join(work, f)):
            fail("a refused tcc run left %s behind" % f)

    # kill -9 of one rank mid-run, then resume from the last whole checkpoint.
    ckk = os.path.join(work, "ck-kill")
    cmd = MPIRUN + ["-np", "2", args.tcc_run, z2, "--steps", "100000", "--accum", "2", "--quiet",
                    "--checkpoint", ckk, "--checkpoint-every", "2"] + src
    killed = kill_one_rank(
        cmd, ckk, args.tcc_run, z2, ["--accum", "2"] + src,
        lambda target: (train(z2, 2, 2, os.path.join(work, "after-kill"), ["--resume", ckk],
                              steps=target),
                        train(z2, 2, 2, os.path.join(work, "kill-ref"), steps=target)), ahead=2)
    if killed:
        code, at, after, ref = killed
        if not same_bytes(ref[1], after[1]):
            fail("kill -9: the last checkpoint resumed does not end at the uninterrupted "
                 "run's parameters")
        else:
            print("kill -9 of one rank: the world ended (exit %d); the checkpoint at step %d "
                  "resumed to step %d equals the uninterrupted run byte for byte"
                  % (code, at, at + 2))

    if problems:
        print("%d problem(s)" % len(problems))
        return 1
    print("all ZeRO-1 checks hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
