#!/usr/bin/env python3
"""Data parallelism of a CUDA step, in tcc's CUDA emulation under Open MPI:
`mpirun -np N tcc-run emu.so --accum K` against one process with
`--accum N*K`, on the bundled demo GPT (`--target=cuda --cuda-emulation`).

The step's NCCL path runs as on GPUs: ncclCommInitRank from rank 0's id
(sent over MPI), the gradient accumulators summed in buckets on the
communicator's own stream as the last micro-step's backward pass finishes
them, events ordering the buckets after their writes and the update after
the buckets. Only the collectives are emulated: runtime/cuda/emu/nccl.h
sums over tcc-run's MPI plugin.

  sgd        SGD with momentum 0.9, np 2 x K 2 and np 3 x K 1: every loss
             bit-identical to the single process's, the parameters within
             1e-6 of a tensor's largest value (the accumulators are summed in
             another order: on each rank, then across ranks);
  buckets    the same with buckets of 20 KB (TCC_DP_BUCKET_MB=0.02: a dozen
             buckets, most of them summed while the backward pass still
             runs), under TCC_CUDA_EMU_STREAMS=deferred-first, where the
             step's stream runs as late as it may and the communicator's at
             once: a bucket queued before its gradients' last writes, or
             without the event that orders it after them, sums stale values
             and fails the check (without the event's wait in comm.cuh the
             parameters end 0.25 off);
  adamw      AdamW, np 2 x K 2: the first optimizer step's losses
             bit-identical, the others within 1e-5 (Adam turns the rounding
             noise of the attention biases' zero gradients into full steps:
             check_data_parallel.py says why), and within 1e-2 of the CPU
             target's world (np 2 x K 2, fp32);
  skip       loss scale 1e30: every rank skips every step (the inf/NaN
             decision is taken on the world's sums), the parameters stay the
             single process's;
  resume     a world checkpointed at step 2 and resumed to step 4 ends with
             the uninterrupted world's parameters byte for byte;
  zero1      ZeRO-1 (tcc --data-parallel=N): the gradients reduce-scattered
             into each rank's chunk in the same buckets as the all-reduce
             (each bucket's part in chunk r an ncclReduce to rank r), the chunk
             updated with its optimizer state, the fp32 parameters
             all-gathered with ncclAllGather and their fp16 copies
             refreshed. AdamW np 2 x K 2: losses and parameters bit-identical
             to the unsharded CUDA world, the arena's state halved
             (--memory-report), with 20 KB buckets under
             TCC_CUDA_EMU_STREAMS=deferred-first, and the losses within
             1e-2 of the CPU target's world; SGD np 3 x K 1 with
             --clip-norm (chunks that cut tensors, the world's norm from
             the shards' sums): losses
             bit-identical, parameters within 1e-6; loss scale 1e30: every
             rank skips every step; a sharded checkpoint at step 2 resumed
             to 4 ends byte for byte where the uninterrupted world does; a
             rank killed with SIGKILL mid-run: the last checkpoint resumes
             to the uninterrupted world's bytes; a 2-rank step under 3
             ranks is refused;
  trace      --trace of a ZeRO-1 np 2 world with 20 KB buckets: the NCCL
             collectives (timed by events on the communicator's stream) on
             their own lane, in order, after the last micro-step began, with
             the accumulators' bytes in all; ZeRO-1's all-gather among them;
  no MPI     launched with torchrun's variables (RANK, WORLD_SIZE,
             MASTER_ADDR, MASTER_PORT) and no MPI: the ranks meet at rank
             0's port, get the NCCL id there, and every collective after
             goes over the step's communicator (the emulation's NCCL then
             runs over TCP). SGD 2 x K 2 and ZeRO-1 AdamW 2 x K 2: losses and
             parameters byte for byte the mpirun world's; refused with a
             message: a CPU step, a missing MASTER_PORT; a rank alone ends
             after TCC_COMM_TIMEOUT; a rank killed with SIGKILL mid-run ends
             the other with an error naming it and the collective;
  world of 1 TCC_NCCL=1 in one process: the NCCL path (communicator,
             buckets, events) gives the plain run's bytes;
  refusals   a step whose gradient accumulators are in host memory
             (--offload=all), and more ranks on a machine than it has GPUs
             (3 ranks, TCC_CUDA_EMU_DEVICES=2), are refused with a message.

Exit 0 when everything holds, 1 otherwise.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The CPU world's check: its launcher line, runner, dump reader and measure.
# Its fail() and problems too, which kill_one_rank reports to.
from check_data_parallel import (MPIRUN, REPO, fail, kill_one_rank, stall_one_rank,  # noqa: E402
                                 load_dump, problems, rel_diff, run)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--torch-python", help="a Python with torch 2.x: its torchrun launches a world too")
    args = ap.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    onnx = os.path.join(REPO, "examples", "tiny_gpt_demo.onnx")
    data = ["--data", os.path.join(REPO, "examples", "data", "train.bin"), "--seed", "3"]
    steps = {}
    for name, extra in (("sgd", ["--target=cuda", "--cuda-emulation", "--optimizer=sgd"]),
                        ("adamw", ["--target=cuda", "--cuda-emulation"]),
                        ("cpu", ["--target=cpu"]),
                        ("offload", ["--target=cuda", "--cuda-emulation", "--offload=all"]),
                        ("zero1", ["--target=cuda", "--cuda-emulation", "--data-parallel=2"]),
                        ("zero1-sgd3", ["--target=cuda", "--cuda-emulation", "--optimizer=sgd",
                                        "--data-parallel=3"])):
        steps[name] = os.path.join(work, name + ".so")
        run([args.tcc, onnx, "-o", steps[name], "--memory-report",
             os.path.join(work, name + ".json")] + extra)

    def train(step, np_, accum, tag, extra=(), env=None, n_steps=2, expect=0):
        out = os.path.join(work, tag)
        cmd = [args.tcc_run, steps[step], "--steps", str(n_steps), "--accum", str(accum),
               "--quiet", "--dump", out] + data + list(extra)
        if np_:
            cmd = MPIRUN + sum((["-x", k] for k in (env or {})), []) + ["-np", str(np_)] + cmd
        p = run(cmd, env=dict(os.environ, **(env or {})), expect=expect)
        return load_dump(out) + (p.stdout,)

    sgd = ["--lr", "1e-2", "--momentum", "0.9"]
    singles = {}
    for n, k in ((2, 2), (3, 1)):
        singles[n * k] = train("sgd", None, n * k, "sgd-single-%d" % (n * k), sgd)
    cases = [("sgd", 2, 2, {}), ("sgd", 3, 1, {}),
             ("buckets deferred-first", 2, 2,
              {"TCC_DP_BUCKET_MB": "0.02", "TCC_CUDA_EMU_STREAMS": "deferred-first"})]
    for label, n, k, env in cases:
        ls, ps, _ = singles[n * k]
        lw, pw, out = train("sgd", n, k, "sgd-%s-np%d" % (label.replace(" ", "-"), n), sgd, env)
        rel = rel_diff(ps, pw)
        said = [l for l in out.splitlines() if l.startswith("gradients summed with NCCL")]
        if not said or " %d ranks," % n not in said[0]:
            fail("%s: no line saying NCCL summed the gradients: %r" % (label, out[-600:]))
        if lw.tobytes() != ls.tobytes() or rel > 1e-6:
            fail("%s: mpirun -np %d --accum %d vs --accum %d: losses %s vs %s, parameters "
                 "within %.2g (bound 1e-6)" % (label, n, k, n * k, lw, ls, rel))
        else:
            print("%s: mpirun -np %d --accum %d vs --accum %d: all %d losses bit-identical, "
                  "parameters within %.2g relative (%s)"
                  % (label, n, k, n * k, len(ls), rel, said[0] if said else "?"))

    # Every parameter of the demo is trained: its accumulators' bytes.
    trace_collectives(args, work, steps, sgd, sum(4 * v.size for v in singles[4][1].values()))

    # A world of one process through the NCCL path (TCC_NCCL=1): the sums are
    # the step's own, so the run is the plain one's byte for byte.
    ls, ps, _ = singles[4]
    l1, p1, out = train("sgd", None, 4, "sgd-nccl-world1", sgd,
                        {"TCC_NCCL": "1", "TCC_DP_BUCKET_MB": "0.02",
                         "TCC_CUDA_EMU_STREAMS": "deferred-first"})
    said = [l for l in out.splitlines() if l.startswith("gradients summed with NCCL")]
    if l1.tobytes() != ls.tobytes() or any(ps[n].tobytes() != p1[n].tobytes() for n in ps):
        fail("TCC_NCCL=1 in one process: not the plain run's bytes")
    elif not said or " 1 rank," not in said[0] or " 0 buckets" in said[0]:
        fail("TCC_NCCL=1 in one process: no NCCL line, or nothing summed: %r" % out[-600:])
    else:
        print("TCC_NCCL=1, one process: losses and parameters byte for byte the plain run's "
              "(%s)" % said[0])

    # AdamW, against one process and against the CPU target's world.
    ls, ps, _ = train("adamw", None, 4, "adamw-single", ["--lr", "1e-3"])
    lw, pw, _ = train("adamw", 2, 2, "adamw-np2", ["--lr", "1e-3"])
    lc, _, _ = train("cpu", 2, 2, "cpu-np2", ["--lr", "1e-3"])
    loss_rel = float(np.max(np.abs(ls.astype(np.float64) - lw) / np.abs(ls)))
    cpu_rel = float(np.max(np.abs(lc.astype(np.float64) - lw) / np.abs(lc)))
    if ls[:4].tobytes() != lw[:4].tobytes() or loss_rel > 1e-5 or cpu_rel > 1e-2:
        fail("adamw: first step %s vs %s, losses within %.2g (1e-5), of the CPU world's "
             "within %.2g (1e-2)" % (lw[:4], ls[:4], loss_rel, cpu_rel))
    else:
        print("adamw: mpirun -np 2 --accum 2 vs --accum 4: the first step's 4 losses "
              "bit-identical, all within %.2g; the CPU target's world within %.2g"
              % (loss_rel, cpu_rel))

    zero1(args, work, steps, train, sgd)
    without_mpi(args, work, steps, train, sgd)

    # Every step overflows: every rank skips it.
    # A run that skipped every step exits 1 (issue 47), its dump written.
    ls, ps, _ = train("sgd", None, 4, "skip-single", sgd + ["--loss-scale=1e30"], expect=1)
    lw, pw, out = train("sgd", 2, 2, "skip-np2", sgd + ["--loss-scale=1e30"], expect=1)
    if "(2 of 2 steps skipped)" not in out or "every optimizer step of this run (2 of 2)" not in out \
            or any(ps[n].tobytes() != pw[n].tobytes() for n in ps):
        fail("skip: %r" % out[-600:])
    else:
        print("skip: loss scale 1e30, 2 of 2 steps skipped on every rank, parameters equal "
              "the single process's")

    # Checkpoint and resume.
    ck = os.path.join(work, "ck")
    train("sgd", 2, 2, "ck-first", sgd + ["--checkpoint", ck], n_steps=2)
    _, resumed, _ = train("sgd", 2, 2, "ck-resumed", sgd + ["--resume", ck], n_steps=4)
    _, straight, _ = train("sgd", 2, 2, "ck-straight", sgd, n_steps=4)
    if any(straight[n].tobytes() != resumed[n].tobytes() for n in straight):
        fail("resume: the resumed world's parameters differ from the uninterrupted one's")
    else:
        print("resume: checkpointed at step 2 and resumed to 4, byte for byte the "
              "uninterrupted world's")

    # Refusals.
    base = [args.tcc_run, "--steps", "1", "--quiet"] + data
    p = run(MPIRUN + ["-np", "2", args.tcc_run, steps["offload"]] + base[1:], expect=None)
    if p.returncode == 0 or "accumulators are in host memory" not in p.stdout:
        fail("an --offload=all step under mpirun was not refused: %r" % p.stdout[-600:])
    else:
        print("--offload=all under mpirun: refused (gradient accumulators in host memory)")
    env = dict(os.environ, TCC_CUDA_EMU_DEVICES="2")
    p = run(MPIRUN + ["-x", "TCC_CUDA_EMU_DEVICES", "-np", "3", args.tcc_run, steps["sgd"]] +
            base[1:], expect=None, env=env)
    if p.returncode == 0 or "GPU 2 asked for, but this machine has 2" not in p.stdout:
        fail("three ranks on a machine with two GPUs were not refused: %r" % p.stdout[-600:])
    else:
        print("three ranks, two GPUs: refused (local rank 2 names the missing GPU)")

    # Failures: a CUDA rank that stops (SIGSTOP) in the middle of a run, wherever it is (in a micro-step, in the
    # gradients' NCCL sums over the emulation's MPI, or between steps): the
    # other's collective times out and every rank ends, with an error that
    # names the rank and what it waited for.
    one = [args.tcc_run, steps["sgd"], "--quiet"] + data + sgd + ["--accum", "2"]
    failure = stall_one_rank(one, "a CUDA rank")
    if failure:
        fail(failure)

    if problems:
        print("%d problem(s)" % len(problems))
        return 1
    return 0


def zero1(args, work, steps, train, sgd):
    """ZeRO-1 on the CUDA target, against the unsharded CUDA world."""
    with open(os.path.join(work, "zero1.json")) as f:
        dp = json.load(f)["data_parallel"]
    per_rank, whole = dp["optimizer_state_per_rank_bytes"], dp["optimizer_state_unsharded_bytes"]
    if dp["ranks"] != 2 or not whole / 2 <= per_rank < whole / 2 + 4096:
        fail("zero1: --memory-report's state per rank %d of %d unsharded (2 ranks)" % (per_rank, whole))
    else:
        print("zero1: --memory-report: optimizer state %d bytes per rank, %d unsharded"
              % (per_rank, whole))

    def same(a, b):
        return all(a[n].tobytes() == b[n].tobytes() for n in a) and set(a) == set(b)

    adam = ["--lr", "1e-3"]
    lu, pu, _ = train("adamw", 2, 2, "z-unsharded", adam, n_steps=3)
    # The step's stream as late as it may run, the communicator's at once: a
    # collective not ordered after the writes it reads (or the update not
    # after the sums) reads stale values.
    # Buckets of 20 KB: most of them reduce-scattered while the backward pass
    # still runs, some cut by the chunk boundary.
    lz, pz, out = train("zero1", 2, 2, "z-sharded", adam,
                        {"TCC_CUDA_EMU_STREAMS": "deferred-first", "TCC_DP_BUCKET_MB": "0.02"},
                        n_steps=3)
    lc, _, _ = train("cpu", 2, 2, "z-cpu", adam, n_steps=3)
    cpu_rel = float(np.max(np.abs(lc.astype(np.float64) - lz) / np.abs(lc)))
    said = [l for l in out.splitlines() if l.startswith("gradients summed with NCCL")]
    if lz.tobytes() != lu.tobytes() or not same(pu, pz) or cpu_rel > 1e-2:
        fail("zero1 AdamW np 2: not the unsharded world's bytes (losses %s vs %s, parameters "
             "within %.2g), or the CPU world's losses not within 1e-2 (%.2g)"
             % (lz, lu, rel_diff(pu, pz), cpu_rel))
    elif (not said or "ZeRO-1" not in said[0] or " 3 all-gathers" not in said[0]
          or int(re.search(r"; (\d+) buckets", said[0]).group(1)) < 9):
        fail("zero1 AdamW np 2: no line saying NCCL reduce-scattered: %r" % out[-600:])
    else:
        print("zero1: AdamW, mpirun -np 2 --accum 2, 3 steps, 20 KB buckets, streams deferred-first: losses "
              "and parameters byte for byte the unsharded world's, losses within %.2g of the CPU "
              "target's world (%s)" % (cpu_rel, said[0]))

    clip = sgd + ["--clip-norm", "0.05"]
    lu, pu, _ = train("sgd", 3, 1, "z3-unsharded", clip, n_steps=3)
    lz, pz, _ = train("zero1-sgd3", 3, 1, "z3-sharded", clip, n_steps=3)
    rel = rel_diff(pu, pz)
    if lz.tobytes() != lu.tobytes() or rel > 1e-6:
        fail("zero1 SGD np 3 --clip-norm 0.05: losses %s vs %s, parameters within %.2g (1e-6)"
             % (lz, lu, rel))
    else:
        print("zero1: SGD, --clip-norm 0.05, mpirun -np 3: losses bit-identical, parameters "
              "within %.2g relative (the world's norm from three shards' sums)" % rel)

    lz, pz, out = train("zero1", 2, 2, "z-skip", adam + ["--loss-scale=1e30"], expect=1)
    _, p0, _ = train("zero1", 2, 2, "z-noop", ["--lr", "0"], n_steps=1)
    if "(2 of 2 steps skipped)" not in out or not same(pz, p0):
        fail("zero1 skip: %r" % out[-600:])
    else:
        print("zero1: loss scale 1e30, 2 of 2 steps skipped on every rank, the parameters "
              "untouched")

    ck = os.path.join(work, "z-ck")
    train("zero1", 2, 2, "z-ck-first", adam + ["--checkpoint", ck], n_steps=2)
    _, resumed, _ = train("zero1", 2, 2, "z-ck-resumed", adam + ["--resume", ck], n_steps=4)
    _, straight, _ = train("zero1", 2, 2, "z-ck-straight", adam, n_steps=4)
    shards = sorted(f for f in os.listdir(ck) if "shard" in f)
    if not same(straight, resumed) or len(shards) < 2:
        fail("zero1 resume: not the uninterrupted world's bytes, or no shard files (%s)" % shards)
    else:
        print("zero1: checkpointed at step 2 (%s) and resumed to 4, byte for byte the "
              "uninterrupted world's" % ", ".join(shards))

    data = ["--data", os.path.join(REPO, "examples", "data", "train.bin"), "--seed", "3"]
    ckk = os.path.join(work, "z-ck-kill")
    cmd = MPIRUN + ["-np", "2", args.tcc_run, steps["zero1"], "--steps", "100000", "--accum", "2",
                    "--quiet", "--checkpoint", ckk, "--checkpoint-every", "1"] + data + adam
    killed = kill_one_rank(
        cmd, ckk, args.tcc_run, steps["zero1"], ["--accum", "2"] + data + adam,
        lambda target: (train("zero1", 2, 2, "z-after-kill", adam + ["--resume", ckk],
                              n_steps=target)[1],
                        train("zero1", 2, 2, "z-kill-ref", adam, n_steps=target)[1]), ahead=2)
    if killed:
        code, at, after, ref = killed
        if not same(after, ref):
            fail("zero1 kill -9: resumed from step %d, not the uninterrupted world's bytes" % at)
        else:
            print("zero1: a rank killed with SIGKILL (mpirun exit %d); the checkpoint at step %d "
                  "resumed to step %d, byte for byte the uninterrupted world's" % (code, at, at + 2))

    p = run(MPIRUN + ["-np", "3", args.tcc_run, steps["zero1"], "--steps", "1", "--quiet"] + data,
            expect=None)
    if p.returncode == 0 or "sharded across 2 ranks" not in p.stdout:
        fail("zero1: a 2-rank step under 3 ranks was not refused: %r" % p.stdout[-600:])
    else:
        print("zero1: a --data-parallel=2 step under mpirun -np 3: refused")


def trace_collectives(args, work, steps, sgd, grad_bytes):
    """--trace of a world: the NCCL collectives on their own lane."""
    data = ["--data", os.path.join(REPO, "examples", "data", "train.bin"), "--seed", "3"]
    # ZeRO-1's world: its buckets' reduce-scatters and the all-gather (the
    # all-reduce's buckets are timed by the same code, comm.cuh collective()).
    for step, extra, want in (("zero1", ["--lr", "1e-3"], "the parameter all-gather"),):
        path = os.path.join(work, "trace-%s.json" % step)
        run(MPIRUN + ["-x", "TCC_DP_BUCKET_MB", "-np", "2", args.tcc_run, steps[step], "--steps", "1",
                      "--accum", "2", "--quiet", "--trace", path] + data + extra,
            env=dict(os.environ, TCC_DP_BUCKET_MB="0.02"))
        with open(path) as f:
            events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        lanes = {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name"}
        comm = [e for e in events if e.get("ph") == "X" and e.get("tid") == lanes.get("NCCL communicator stream")]
        device = [e for e in events if e.get("ph") == "X" and e.get("tid") == lanes.get("device stream")
                  and e.get("cat") == "micro_step"]
        grads = sum(e["args"]["bytes"] for e in comm if "gather" not in e["name"])
        last = max(device, key=lambda e: e["ts"]) if device else None
        ok = (comm and last and want in " ".join(e["name"] for e in comm)
              and all(e["dur"] >= 0 and e["ts"] >= last["ts"] - 1 for e in comm)
              and all(a["ts"] <= b["ts"] for a, b in zip(comm, comm[1:]))
              and grads == grad_bytes)
        if not ok:
            fail("--trace %s world: %d collectives on the NCCL lane (%d gradient bytes), last "
                 "device micro-step %s: %s" % (step, len(comm), grads, last and last["ts"],
                                             [(e["name"], e["ts"], e["dur"]) for e in comm][:4]))
        else:
            early = sum(1 for e in comm if e["ts"] < last["ts"] + last["dur"])
            print("--trace, %s world of 2: %d NCCL collectives on their own lane after the last "
                  "micro-step began (%d of them before its device work ended), %d gradient bytes "
                  "in all, e.g. %r" % (step, len(comm), early, grads, comm[0]["name"]))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(cmd, n, env=None, timeout=120, kill_after=None, port=None, sizes=None):
    """Starts `cmd` as ranks 0..n-1 of a world without MPI (torchrun's
    variables, a fresh MASTER_PORT unless `port`; `sizes` the WORLD_SIZE
    each rank is told, else n); with kill_after, SIGKILLs the last rank
    that many seconds in. Returns [(exit code, output)] by rank and the
    seconds the others took to end after the kill (or the whole run)."""
    port = str(port or free_port())
    procs = []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(sizes[r] if sizes else n), LOCAL_RANK=str(r),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **(env or {}))
        e.pop("TCC_NCCL", None)
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=e))
    t0 = time.time()
    if kill_after is not None:
        time.sleep(kill_after)
        procs[-1].kill()
        t0 = time.time()
    out = []
    for p in procs:
        try:
            out.append((p.wait(timeout=timeout), p.stdout.read()))
        except subprocess.TimeoutExpired:
            p.kill()
            out.append((None, p.stdout.read()))
    return out, time.time() - t0


def without_mpi(args, work, steps, train, sgd):
    """A world launched with torchrun's variables, without MPI."""
    data = ["--data", os.path.join(REPO, "examples", "data", "train.bin"), "--seed", "3"]

    def world(step, tag, extra, n_steps=2, env=None, port=None):
        out = os.path.join(work, tag)
        cmd = [args.tcc_run, steps[step], "--steps", str(n_steps), "--accum", "2", "--quiet",
               "--dump", out] + data + extra
        ranks, _ = torchrun(cmd, 2, env, port=port)
        if any(rc != 0 for rc, _ in ranks):
            fail("no MPI: %s: exit codes %s: %r" % (tag, [rc for rc, _ in ranks], ranks[0][1][-600:]))
            return None
        return load_dump(out) + (ranks[0][1],)

    # The ZeRO-1 world also checkpoints at its end (step 2), resumed below.
    ck = os.path.join(work, "nompi-ck")
    for step, extra, label in (("sgd", sgd, "SGD"), ("zero1", ["--lr", "1e-3"], "ZeRO-1 AdamW")):
        lm, pm, _ = train(step if step != "zero1" else "adamw", 2, 2, "mpi-" + step, extra)
        got = world(step, "nompi-" + step, extra + (["--checkpoint", ck] if step == "zero1" else []))
        if got is None:
            continue
        lt, pt, out = got
        said = [l for l in out.splitlines() if l.startswith("gradients summed with NCCL")]
        if lt.tobytes() != lm.tobytes() or any(pm[n].tobytes() != pt[n].tobytes() for n in pm):
            fail("no MPI: %s: not the mpirun world's bytes (losses %s vs %s)" % (label, lt, lm))
        elif not said or "over TCP" not in said[0]:
            fail("no MPI: %s: no line saying NCCL summed: %r" % (label, out[-600:]))
        else:
            print("no MPI: %s, 2 ranks x --accum 2 from torchrun's variables: losses and "
                  "parameters byte for byte the mpirun world's (%s)" % (label, said[0]))

    # ZeRO-1's sharded checkpoint (its manifest agreed over NCCL, written
    # by the world above) resumed to step 4: the uninterrupted 4-step world
    # is zero1()'s mpirun one (z-ck-straight, the same flags), which the
    # worlds without MPI equal byte for byte.
    adam = ["--lr", "1e-3"]
    resumed = world("zero1", "nompi-ck-resumed", adam + ["--resume", ck], n_steps=4)
    straight = load_dump(os.path.join(work, "z-ck-straight"))
    shards = sorted(f for f in os.listdir(ck) if "shard" in f) if os.path.isdir(ck) else []
    if resumed:
        if any(resumed[1][n].tobytes() != straight[1][n].tobytes() for n in straight[1]) or len(shards) < 2:
            fail("no MPI: ZeRO-1 resume: not the uninterrupted world's bytes, or no shard files (%s)" % shards)
        else:
            print("no MPI: ZeRO-1 checkpointed at step 2 (%s) and resumed to 4, byte for byte the "
                  "uninterrupted world's" % ", ".join(shards))

    # Real torchrun (torch 2.x): its agent's store holds MASTER_PORT.
    if args.torch_python:
        out = os.path.join(work, "torchrun-sgd")
        e = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TCC_NCCL")}
        p = run([args.torch_python, "-m", "torch.distributed.run", "--nproc-per-node=2",
                 "--master-port=%d" % free_port(), "--no-python", args.tcc_run, steps["sgd"],
                 "--steps", "2", "--accum", "2", "--quiet", "--dump", out] + data + sgd,
                expect=None, env=dict(e, OMP_NUM_THREADS="1"))
        lm = load_dump(os.path.join(work, "mpi-sgd"))[0]
        if p.returncode != 0 or not os.path.isdir(out):
            fail("no MPI: torchrun --nproc-per-node=2: exit %d: %r" % (p.returncode, p.stdout[-800:]))
        elif load_dump(out)[0].tobytes() != lm.tobytes():
            fail("no MPI: torchrun: losses %s, not the mpirun world's %s" % (load_dump(out)[0], lm))
        else:
            print("no MPI: %s -m torch.distributed.run --nproc-per-node=2 --no-python tcc-run: the "
                  "mpirun world's losses byte for byte" % args.torch_python)

    # Under torchrun its agent's store holds MASTER_PORT: the ranks meet at
    # the next port.
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen(1)
        got = world("sgd", "nompi-agent-store", sgd, env={"TORCHELASTIC_USE_AGENT_STORE": "True"},
                    port=held.getsockname()[1])
    lm = load_dump(os.path.join(work, "mpi-sgd"))[0]
    if got and got[0].tobytes() == lm.tobytes():
        print("no MPI: MASTER_PORT held (torchrun's agent store, TORCHELASTIC_USE_AGENT_STORE): "
              "the ranks met at MASTER_PORT+1, the mpirun world's losses")
    elif got:
        fail("no MPI: agent store: losses %s, not the mpirun world's %s" % (got[0], lm))
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen(1)
        p = run([args.tcc_run, steps["sgd"], "--steps", "1", "--quiet"] + data, expect=None,
                env=dict(os.environ, RANK="0", WORLD_SIZE="2", MASTER_PORT=str(held.getsockname()[1])))
    if p.returncode == 0 or "in use" not in p.stdout or "TCC_MASTER_PORT" not in p.stdout:
        fail("no MPI: a MASTER_PORT in use: %r" % p.stdout[-600:])
    else:
        print("no MPI: MASTER_PORT in use: %s" % error_line(p.stdout))

    cmd = [args.tcc_run, steps["sgd"], "--steps", "1", "--quiet"] + data
    ranks, took = torchrun(cmd, 2, {"TCC_COMM_TIMEOUT": "20"}, sizes=[2, 3], timeout=60)
    if (any(rc in (0, None) for rc, _ in ranks) or "WORLD_SIZE=3" not in ranks[0][1]
            or "WORLD_SIZE=3" not in ranks[1][1] or took > 15):
        fail("no MPI: ranks told different world sizes: %s after %.1f s: %r"
             % ([rc for rc, _ in ranks], took, [o[-300:] for _, o in ranks]))
    else:
        print("no MPI: ranks told WORLD_SIZE 2 and 3 both refused in %.1f s: %s / %s"
              % (took, error_line(ranks[0][1]), error_line(ranks[1][1])))

    one = [args.tcc_run, steps["cpu"], "--steps", "1", "--quiet"] + data
    ranks, _ = torchrun(one, 2)
    if any(rc == 0 or "is a CPU step: its data parallelism runs over MPI" not in o for rc, o in ranks):
        fail("no MPI: a CPU step was not refused: %r" % ranks[0][1][-600:])
    else:
        print("no MPI: a CPU step refused on every rank (its data parallelism runs over MPI)")
    e = dict(os.environ, RANK="0", WORLD_SIZE="2")
    e.pop("MASTER_PORT", None)
    p = run([args.tcc_run, steps["sgd"], "--steps", "1", "--quiet"] + data, expect=None, env=e)
    if p.returncode == 0 or "MASTER_PORT is not set" not in p.stdout:
        fail("no MPI: a missing MASTER_PORT was not refused: %r" % p.stdout[-600:])
    else:
        print("no MPI: WORLD_SIZE=2 without MASTER_PORT refused")
    e = dict(os.environ, RANK="0", WORLD_SIZE="2", MASTER_PORT=str(free_port()), TCC_COMM_TIMEOUT="3")
    t0 = time.time()
    p = run([args.tcc_run, steps["sgd"], "--steps", "1", "--quiet"] + data, expect=None, env=e)
    took = time.time() - t0
    if p.returncode == 0 or "waiting for 1 of 1 ranks to connect" not in p.stdout or took > 30:
        fail("no MPI: rank 0 alone: exit %d after %.1f s: %r" % (p.returncode, took, p.stdout[-600:]))
    else:
        print("no MPI: rank 0 alone ended after %.1f s (TCC_COMM_TIMEOUT=3): %s"
              % (took, error_line(p.stdout)))
    cmd = [args.tcc_run, steps["sgd"], "--steps", "100000", "--accum", "2", "--quiet"] + data + sgd
    ranks, took = torchrun(cmd, 2, {"TCC_COMM_TIMEOUT": "5"}, timeout=60, kill_after=5)
    rc, out = ranks[0]
    if rc in (0, None) or "rank 0 of 2" not in out or took > 30:
        fail("no MPI: a rank killed mid-run: the other exited %s after %.1f s: %r" % (rc, took, out[-600:]))
    else:
        print("no MPI: a rank killed with SIGKILL mid-run; the other ended %.1f s later (exit %d): %s"
              % (took, rc, error_line(out)))


def error_line(out):
    """The first tcc-run error line of a world's output."""
    return next((l for l in out.splitlines() if "error:" in l), "(no error line)")


if __name__ == "__main__":
    sys.exit(main())
