"""Checks --memory-report's activation_swap estimate.

Usage: check_activation_swap.py A.json B.json NONE.json [ALL.json AUTO.json]
  A: a CUDA plan that recomputes, at the default --pcie-gbps (31.5);
  B: the same plan at --pcie-gbps=315;
  NONE: a plan without recomputation;
  ALL, AUTO: A's with --swap-activations=all and =auto.
The estimate covers the bytes the remat decisions stopped keeping, its copy
time is those bytes at the PCIe rate, ten times the rate gives a tenth of the
time, and a plan that recomputes nothing has none. Prints the figures for
FileCheck; exits non-zero on a failed check.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    a, b, none = (load(p) for p in sys.argv[1:4])
    sa, sb = a.get("activation_swap"), b.get("activation_swap")
    if not sa or not sb:
        sys.exit("no activation_swap in a plan that recomputes")
    kept = sum(d["bytes"] for d in a["remat_decisions"])
    if sa["bytes"] != kept or kept <= 0:
        sys.exit("activation_swap bytes %d, the remat decisions' %d" % (sa["bytes"], kept))
    if abs(sa["copy_seconds_each_way"] - kept / 31.5e9) > 1e-9 * sa["copy_seconds_each_way"]:
        sys.exit("copy time %g for %d bytes at 31.5 GB/s" % (sa["copy_seconds_each_way"], kept))
    if abs(sb["copy_seconds_each_way"] * 10 - sa["copy_seconds_each_way"]) > 1e-9 * sa["copy_seconds_each_way"]:
        sys.exit("--pcie-gbps=315 does not make the copies ten times faster")
    if not 0 < sa["recompute_seconds"] < sa["micro_step_compute_seconds"]:
        sys.exit("recompute %g of a %g s micro-step" % (sa["recompute_seconds"],
                                                       sa["micro_step_compute_seconds"]))
    if "activation_swap" in none:
        sys.exit("activation_swap in a plan that recomputes nothing")
    print("swap %d bytes: %.3g s each way, exposed %.3g s, recompute %.3g s, pays %s"
          % (kept, sa["copy_seconds_each_way"], sa["exposed_copy_seconds"], sa["recompute_seconds"],
             "yes" if sa["swap_pays"] else "no"))
    if len(sys.argv) > 5:
        every, auto = load(sys.argv[4]), load(sys.argv[5])
        s = every.get("activation_swap", {})
        if not s.get("swapped") or s.get("values", 0) <= 0 or s.get("mode") != "all":
            sys.exit("--swap-activations=all swapped nothing: %s" % s)
        host = every.get("host", {})
        if host.get("categories", {}).get("swapped_activations") != s["host_bytes"] or \
                not 0 < s["host_bytes"] <= host.get("bytes", 0):
            sys.exit("host memory %s, swapped %d bytes" % (host, s["host_bytes"]))
        if every["planned_peak_bytes"] > every["budget_bytes"]:
            sys.exit("the swapped plan is over its budget")
        print("--swap-activations=all: %d of %d values swapped, %d bytes in host memory"
              % (s["values"], s["candidates"], s["host_bytes"]))
        t = auto.get("activation_swap", {})
        if t.get("swapped") or t.get("mode") != "auto" or "host" in auto:
            sys.exit("--swap-activations=auto swapped where the copies cost more: %s" % t)
        if t["exposed_copy_seconds"] < t["recompute_seconds"]:
            sys.exit("auto did not swap although its estimate says it pays: %s" % t)
        print("--swap-activations=auto: %d of %d values swapped (the copies cost more)"
              % (t["values"], t["candidates"]))


if __name__ == "__main__":
    main()
