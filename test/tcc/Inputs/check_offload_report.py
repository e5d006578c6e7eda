"""Checks a `tcc --offload --memory-report` against the model's own shapes.

Usage: check_offload_report.py MODEL.onnx REPORT.json BUDGET

Prints one line: the device plan against the budget, the host bytes, how
many parameters have their state and their accumulators on the host, and
the recomputed share. Exits non-zero when the report contradicts the model:
the device plan over the budget; host bytes by category that are not what
the named parameters' shapes (read from the ONNX file with onnx, not from
tcc) give (fp32 master weights 4 bytes, AdamW moments 8, accumulators 4 per
element); the bytes per optimizer step over PCIe not the host-updated
parameters' accumulators down (4 bytes each, unless on the host) and fp16
working copies up (2); the bytes per micro-step not between 2 bytes an
element of the host accumulators and 4 per element and consumer; an
estimate missing or not positive where bytes move.
"""
import json
import sys

import onnx


def main():
    model, report, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    g = onnx.load(model, load_external_data=False).graph
    elements = {}
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        elements[t.name] = n
    r = json.load(open(report))
    host = r.get("host")
    if host is None:
        sys.exit("no host section in the report")
    state, grads = host["state_on_host"], host["gradients_on_host"]
    for name in state + grads:
        if name not in elements:
            sys.exit("parameter %s is not an initializer of the model" % name)
    n_state = sum(elements[p] for p in state)
    n_grads = sum(elements[p] for p in grads)
    cats = host["categories"]
    want = {"parameters": 4 * n_state, "optimizer_state": 8 * n_state, "gradients": 4 * n_grads}
    problems = []
    for k, v in want.items():
        if cats[k] != v:
            problems.append("host %s: %d bytes, the shapes give %d" % (k, cats[k], v))
    if host["bytes"] < sum(want.values()):
        problems.append("host buffer %d smaller than its contents" % host["bytes"])
    if r["planned_peak_bytes"] > budget:
        problems.append("device plan %d over the budget %d" % (r["planned_peak_bytes"], budget))
    e = r["estimate"]
    pcie = sum(6 * elements[p] for p in state if p not in grads) + \
        sum(2 * elements[p] for p in grads)
    if e["pcie_bytes_per_optimizer_step"] != pcie:
        problems.append("PCIe bytes per step %d, the shapes give %d"
                        % (e["pcie_bytes_per_optimizer_step"], pcie))
    # Each micro-step's gradient goes down in fp16 or fp32, as one result
    # per consumer at most (a tied embedding's gather and GEMM each give one;
    # tcc-split-gradient-sums), so between 2 bytes an element and 4 per
    # element and consumer.
    uses = {}
    for node in g.node:
        for x in node.input:
            uses[x] = uses.get(x, 0) + 1
    most = sum(4 * elements[p] * max(1, uses.get(p, 1)) for p in grads)
    if grads and not 2 * n_grads <= e["pcie_bytes_per_micro_step"] <= most:
        problems.append("PCIe bytes per micro-step %d outside [%d, %d]"
                        % (e["pcie_bytes_per_micro_step"], 2 * n_grads, most))
    if state and not (e["transfer_seconds_per_optimizer_step"] > 0 and
                      e["host_update_seconds_per_optimizer_step"] > 0):
        problems.append("bytes move but the estimate has no time for them")
    if not e["micro_step_compute_seconds"] > 0:
        problems.append("no compute estimate")
    print("device %s budget; host %d bytes; state of %d, accumulators of %d parameters on the "
          "host; %.2f%% recomputed" % ("within" if r["planned_peak_bytes"] <= budget else "over",
                                       host["bytes"], len(state), len(grads),
                                       100.0 * r["recomputed_flops"] / r["step_flops"]))
    for p in problems:
        print("error: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
