#!/usr/bin/env python3
"""The rendezvous of a world launched without MPI (torchrun's variables), on
a CUDA-emulation step of the demo GPT: what a stranger on the network can and
cannot do to it (issue 47), runtime/comm/tcp_star.h.

  meets      two ranks (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) train
             two SGD steps together, NCCL (emulated) summing the gradients;
  strangers  before the real rank 1 connects, two strangers do: one with
             another launch's token (TCC_WORLD_TOKEN differs) claiming rank
             1, one speaking version 1 of the protocol. Each is answered
             with its refusal (kWrongLaunch, kWrongVersion) and dropped,
             rank 0 names each on stderr, and the real rank 1 then joins and
             the world trains; before this, either ended rank 0 or took
             rank 1;
  size       a rank of the same launch told another WORLD_SIZE: both ranks
             refused within seconds, each naming the sizes;
  late       a second process with RANK=1 of the same launch, started
             after the world met (rank 0 keeps answering on its port): it
             is refused within seconds, naming the pid that holds rank 1,
             rank 0 names it on stderr, and the world trains on; before
             this, it retried until its timeout against a closed port;
  agree      ranks of one world given different --lr, --accum or --steps:
             refused on both ranks before the first step, naming the field
             and rank 1 (the digests issue 47 added, compared over the
             rendezvous as over MPI, where data-parallel also checks an
             AdamW step beside an SGD one);
  address    rank 0 listens on MASTER_ADDR only: with MASTER_ADDR=127.0.0.1,
             the machine's other address (if it has one) refuses the
             connection; a MASTER_ADDR that is not this machine's is refused
             by rank 0 with a message naming it.

Usage: python3 check_rendezvous.py --tcc TCC --tcc-run TCC_RUN --workdir DIR
Exit 0 when everything holds.
"""
import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_data_parallel_cuda import free_port  # noqa: E402  (the torchrun worlds' port picker)
REPO = os.path.dirname(os.path.dirname(HERE))
MAGIC, VERSION = 0x2A434354, 3
WRONG_VERSION, WRONG_LAUNCH = 1, 5
problems = []


def fail(msg):
    problems.append(msg)
    print("FAIL: " + msg)


def fnv(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def rank_env(rank, size, port, addr="127.0.0.1", token="launch-A", **more):
    e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
             MASTER_ADDR=addr, MASTER_PORT=str(port), TCC_WORLD_TOKEN=token)
    e["TCC_COMM_TIMEOUT"] = "30"
    e.update(more)
    for k in ("TCC_NCCL", "TORCHELASTIC_USE_AGENT_STORE", "TCC_MASTER_PORT", "OMPI_COMM_WORLD_SIZE",
              "PMI_SIZE"):
        e.pop(k, None)
    return e


def start(cmd, env):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(procs, timeout=90):
    out = []
    for p in procs:
        try:
            out.append((p.wait(timeout=timeout), p.stdout.read()))
        except subprocess.TimeoutExpired:
            p.kill()
            out.append((None, p.stdout.read()))
    return out


def with_flag(cmd, flag, value):
    """cmd with `flag value`, replacing the flag's value if it has one."""
    out = list(cmd)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def hello_bytes(rank, size, token, version=VERSION):
    """A hello as runtime/comm/tcp_star.h's Hello: magic, version, rank,
    size, token, pid, reserved, host[64]."""
    return struct.pack("<IIiiQii64s", MAGIC, version, rank, size, fnv(token), os.getpid(), 0,
                       b"check-rendezvous")


def hello(port, payload, deadline=20.0):
    """Connects to rank 0 (retrying while it starts), sends `payload`,
    returns the 12-byte answer as (magic, status, size), or None."""
    t0 = time.time()
    while time.time() - t0 < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(payload)
                data = b""
                while len(data) < 12:
                    chunk = s.recv(12 - len(data))
                    if not chunk:
                        break
                    data += chunk
                return struct.unpack("<Iii", data) if len(data) == 12 else None
        except (ConnectionRefusedError, socket.timeout, OSError):
            time.sleep(0.1)
    return None


def other_address():
    """This machine's address on its default route, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # sends nothing
            a = s.getsockname()[0]
            return None if a.startswith("127.") else a
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    step = os.path.join(args.workdir, "sgd.so")
    r = subprocess.run([args.tcc, os.path.join(REPO, "examples", "tiny_gpt_demo.onnx"), "--target=cuda",
                        "--cuda-emulation", "--optimizer=sgd", "-o", step],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout)
        return 1
    cmd = [args.tcc_run, step, "--steps", "2", "--lr", "1e-2", "--data",
           os.path.join(REPO, "examples", "data", "train.bin"), "--seed", "3"]

    # meets, with two strangers first.
    port = free_port()
    r0 = start(cmd, rank_env(0, 2, port))
    intruder = hello(port, hello_bytes(1, 2, "intruder"))
    old = hello(port, struct.pack("<IIii", MAGIC, 1, 1, 2))
    r1 = start(cmd, rank_env(1, 2, port))
    (c0, o0), (c1, o1) = finish([r0, r1])
    if intruder is None or intruder[1] != WRONG_LAUNCH:
        fail("a stranger with another launch's token: answered %r, not %d" % (intruder, WRONG_LAUNCH))
    if old is None or old[1] != WRONG_VERSION:
        fail("a stranger speaking version 1: answered %r, not %d" % (old, WRONG_VERSION))
    dropped = [ln for ln in o0.splitlines() if "dropped a connection from" in ln]
    if c0 != 0 or c1 != 0 or len(dropped) != 2 or "gradients summed with NCCL" not in o0:
        fail("the world after two strangers: exits %s %s, rank 0: %r" % (c0, c1, o0[-800:]))
    else:
        print("strangers: another launch's hello (status %d) and a version-1 hello (status %d) "
              "dropped; the real rank 1 joined and the world trained:\n  %s"
              % (intruder[1], old[1], "\n  ".join(dropped)))

    # size: a rank of this launch told WORLD_SIZE=3.
    port = free_port()
    t0 = time.time()
    (c0, o0), (c1, o1) = finish([start(cmd, rank_env(0, 2, port)), start(cmd, rank_env(1, 3, port))], 60)
    took = time.time() - t0
    if c0 in (0, None) or c1 in (0, None) or "WORLD_SIZE=3" not in o0 or "WORLD_SIZE=3" not in o1 \
            or took > 20:
        fail("ranks told WORLD_SIZE 2 and 3: exits %s %s after %.1f s: %r / %r"
             % (c0, c1, took, o0[-300:], o1[-300:]))
    else:
        print("size: ranks told WORLD_SIZE 2 and 3 both refused in %.1f s" % took)

    # late: a second RANK=1 after the world met.
    port = free_port()
    long_cmd = cmd[:]
    long_cmd[long_cmd.index("--steps") + 1] = "16"
    long_cmd += ["--print-every", "1"]
    r0 = start(long_cmd, rank_env(0, 2, port))
    r1 = start(long_cmd, rank_env(1, 2, port))
    lines0 = []
    reader = threading.Thread(target=lambda: lines0.extend(iter(r0.stdout.readline, "")), daemon=True)
    reader.start()
    t0 = time.time()
    while time.time() - t0 < 60 and not any(ln.startswith("step ") for ln in lines0) \
            and r0.poll() is None:
        time.sleep(0.05)
    t0 = time.time()
    late = subprocess.run(long_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=rank_env(1, 2, port), timeout=60)
    took = time.time() - t0
    c0 = r0.wait(timeout=120)
    reader.join(10)
    o0 = "".join(lines0)
    (c1, o1), = finish([r1])
    told = [ln for ln in o0.splitlines() if "after the world met" in ln]
    if late.returncode == 0 or "rank 1 is held already by pid %d" % r1.pid not in late.stdout \
            or took > 15 or not told or c0 != 0 or c1 != 0:
        fail("a late second rank 1: exit %s after %.1f s: %r; rank 0 (exit %s) said %r; rank 1 exit %s"
             % (late.returncode, took, late.stdout[-400:], c0, told, c1))
    else:
        print("late: a second RANK=1 after the world met refused in %.1f s:\n  %s\n  rank 0: %s"
              % (took, next(ln for ln in late.stdout.splitlines() if "held already" in ln)[:220],
                 told[0][:220]))

    # agree: the ranks' flags and steps compared before training.
    for label, rank1, needle in (
            ("--lr 1e-2 against --lr 0.5", with_flag(cmd, "--lr", "0.5"), "--lr differs"),
            ("--accum 1 against --accum 2", with_flag(cmd, "--accum", "2"), "--accum differs"),
            ("--steps 2 against --steps 3", with_flag(cmd, "--steps", "3"), "--steps differs")):
        port = free_port()
        t0 = time.time()
        (c0, o0), (c1, o1) = finish([start(cmd, rank_env(0, 2, port)), start(rank1, rank_env(1, 2, port))], 60)
        took = time.time() - t0
        if c0 in (0, None) or c1 in (0, None) or any(needle not in o or "rank 1" not in o for o in (o0, o1)):
            fail("ranks with %s over the rendezvous: exits %s %s after %.1f s: %r / %r"
                 % (label, c0, c1, took, o0[-300:], o1[-300:]))
        else:
            print("agree: ranks with %s refused on both in %.1f s: %s"
                  % (label, took, next(ln for ln in o1.splitlines() if needle in ln)[:160]))

    # address: rank 0 listens on MASTER_ADDR only.
    port = free_port()
    r0 = start(cmd, rank_env(0, 2, port, TCC_COMM_TIMEOUT="4"))
    t0 = time.time()
    while time.time() - t0 < 20:  # until rank 0 listens (a silent connection: it drops it)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            break
        except OSError:
            time.sleep(0.1)
    addr = other_address()
    if addr:
        try:
            with socket.create_connection((addr, port), timeout=3):
                reached = True
        except OSError:
            reached = False
    (c0, o0), = finish([r0], 60)
    if addr and reached:
        fail("address: rank 0 with MASTER_ADDR=127.0.0.1 accepted a connection on %s" % addr)
    elif addr:
        print("address: MASTER_ADDR=127.0.0.1, a connection to %s:%d refused" % (addr, port))
    else:
        print("address: skipped the other-interface check (this machine has no non-loopback address)")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=rank_env(0, 2, free_port(), addr="198.51.100.77"), timeout=60)
    if p.returncode == 0 or "198.51.100.77 is not an address of this machine" not in p.stdout:
        fail("a MASTER_ADDR of another machine on rank 0: exit %d, %r" % (p.returncode, p.stdout[-400:]))
    else:
        print("address: MASTER_ADDR=198.51.100.77 on rank 0 refused: %s"
              % next(ln for ln in p.stdout.splitlines() if "error" in ln)[:200])

    print("%d problem(s)" % len(problems) if problems else "all held")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
