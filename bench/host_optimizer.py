#!/usr/bin/python3
"""The host AdamW of steps with host memory (tcc --offload), against PyTorch's
CPU AdamW measured in the same run.

Usage: /usr/bin/python3 bench/host_optimizer.py [--elements N] [--repeat R]
           [--threads 1,2] [--python VENV_PYTHON]

Compiles a small harness around runtime/host_optimizer.h (the update
runtime/cuda/host_tier.cuh runs, chunk by chunk, on `threads` threads) with
the host flags of a CUDA step's build (nvcc -O3 passes -O3 and
-fno-math-errno to the host compiler: codegen/StepBuilder.cpp) and, for
comparison, with -O2 (the CUDA emulation's flags, under which GCC does not
vectorise the loops), and times one AdamW update of N fp32 parameters
(master weights, gradient, two moments, and the fp16 working copy written).
The reference: torch.optim.AdamW on the CPU (foreach, the default; and
fused where the PyTorch build has it), same N, same thread counts
(torch.set_num_threads), without the fp16 copy. Also prints the bytes each
update moves per element as
GB/s, the figure `tcc --host-gbps` stands for (default 30).
(4 + 4 + 4 + 4 read and written each, the zeroed gradient written, and
the fp16 copy's 4 + 2: 38 bytes.)

Prints a table; the median of R repeats after one warm-up.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
# adamw_range reads p, g, m, v (16 bytes) and writes p, m, v and the zeroed
# g (16); the fp16 copy reads p (4) and writes 2.
BYTES_PER_ELEMENT = 38

HARNESS = r'''
#include "host_optimizer.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char **argv) {
  const int64_t n = std::atoll(argv[1]);
  const int threads = std::atoi(argv[2]), repeat = std::atoi(argv[3]);
  std::vector<float> p(n, 0.5f), g(n), m(n, 0.0f), v(n, 0.0f);
  std::vector<uint16_t> h(n);
  std::vector<double> times;
  for (int r = 0; r <= repeat; ++r) {
    for (int64_t i = 0; i < n; ++i)
      g[i] = 1e-3f * static_cast<float>((i % 97) - 48);
    tcc::host::OptTensor t{p.data(), g.data(), m.data(), v.data(), h.data(), n, 0.01f};
    const tcc::host::AdamConstants a = tcc::host::adam_constants(1e-3, 0.9, 0.999, 1e-8, r + 1, 1.0);
    auto t0 = std::chrono::steady_clock::now();
    tcc::host::adamw(&t, 1, a, threads);
    auto t1 = std::chrono::steady_clock::now();
    if (r > 0)
      times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  for (double s : times)
    std::printf("%.6f\n", s);
  return p[n / 2] == 12345.0f; // keep the result live
}
'''

TORCH = r'''
import statistics, sys, time, torch
n, threads, repeat, fused = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.set_num_threads(threads)
p = torch.nn.Parameter(torch.full((n,), 0.5))
kw = {"fused": True} if fused else {"foreach": True}
try:
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
except (RuntimeError, TypeError) as e:
    print("unsupported", e)
    sys.exit(0)
g = (torch.arange(n) % 97 - 48).float() * 1e-3
times = []
for r in range(repeat + 1):
    p.grad = g.clone()
    t0 = time.perf_counter()
    try:
        opt.step()
    except RuntimeError as e:
        print("unsupported", str(e).splitlines()[0])
        sys.exit(0)
    t1 = time.perf_counter()
    if r:
        times.append(t1 - t0)
print(torch.__version__)
for t in times:
    print("%.6f" % t)
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", default="1,%d" % (os.cpu_count() or 1))
    ap.add_argument("--python", default=os.path.expanduser("~/.cache/tcc/venv/bin/python"),
                    help="the interpreter whose torch is the reference (default: scripts/setup.sh's venv)")
    args = ap.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    n = args.elements
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "harness.cpp")
        with open(src, "w") as f:
            f.write(HARNESS)
        builds = {}
        for label, flags in (("tcc host AdamW, CUDA step's host flags (-O3 -fno-math-errno)",
                              ["-O3", "-fno-math-errno"]),
                             ("tcc host AdamW, emulation's flags (-O2)", ["-O2"])):
            exe = os.path.join(tmp, "h%d" % len(builds))
            subprocess.run(["g++", "-std=c++17", "-pthread", "-I", os.path.join(ROOT, "runtime"), src, "-o", exe]
                           + flags, check=True)
            builds[label] = exe
        for label, exe in builds.items():
            for t in threads:
                out = subprocess.run([exe, str(n), str(t), str(args.repeat)], stdout=subprocess.PIPE,
                                     text=True, check=False).stdout.split()
                rows.append((label, t, statistics.median(float(x) for x in out)))
        py = args.python if os.path.exists(args.python) else sys.executable
        with open(os.path.join(tmp, "ref.py"), "w") as f:
            f.write(TORCH)
        for fused in (False, True):
            for t in threads:
                out = subprocess.run([py, os.path.join(tmp, "ref.py"), str(n), str(t), str(args.repeat),
                                      "1" if fused else "0"], stdout=subprocess.PIPE, text=True).stdout.split("\n")
                label = "torch.optim.AdamW (%s, CPU)" % ("fused" if fused else "foreach")
                if not out[0] or out[0].startswith("unsupported"):
                    rows.append((label, t, None))
                    continue
                label = "torch %s optim.AdamW (%s, CPU)" % (out[0], "fused" if fused else "foreach")
                rows.append((label, t, statistics.median(float(x) for x in out[1:] if x)))
    print("AdamW update of %d fp32 parameters on this host (%d cores), median of %d" % (n, os.cpu_count(), args.repeat))
    print()
    print("| implementation | threads | ms | Melem/s | GB/s (38 bytes per element) |")
    print("|---|---|---|---|---|")
    for label, t, s in rows:
        if s is None:
            print("| %s | %d | unsupported | | |" % (label, t))
            continue
        print("| %s | %d | %.1f | %.0f | %.1f |" % (label, t, s * 1e3, n / s / 1e6, n * BYTES_PER_ELEMENT / s / 1e9))


if __name__ == "__main__":
    main()
