#!/usr/bin/env python3
"""A quick picture of a `tcc-run --trace` file, for a machine without a trace
viewer: the lanes (training loop, data reader, device stream) as rows, each
event a box nested under the one it runs inside, coloured by kind (step,
micro-step, kernel, copy, data, optimizer, checkpoint), hover for its name and
duration. One self-contained SVG, nothing fetched.

    python3 scripts/trace_timeline.py trace.json -o timeline.svg [--step N]

--step N draws optimizer step N alone (default: everything traced). The trace
itself is in the Chrome trace event format: Perfetto (ui.perfetto.dev) and
chrome://tracing open it with zoom, search and flow; this is only a glance.
"""

import argparse
import html
import json
import sys

COLOURS = {"step": "#5b7db1", "micro_step": "#8fb0d9", "kernel": "#e8964a", "copy": "#6bb38a",
           "data": "#a58fd0", "optimizer": "#d45d5d", "checkpoint": "#c9a227"}
LANES = {1: "training loop", 2: "data reader", 3: "device stream"}


def depth_of(events):
    """Nesting depth of each event within its lane (by time containment)."""
    out = {}
    stack = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and not (e["ts"] >= stack[-1]["ts"] - 0.01 and
                             e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 0.01):
            stack.pop()
        out[id(e)] = len(stack)
        stack.append(e)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--step", type=int, help="draw this optimizer step only")
    ap.add_argument("--width", type=int, default=1560)
    args = ap.parse_args()
    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    if not events:
        sys.exit("%s: no complete events" % args.trace)
    if args.step is not None:
        steps = [e for e in events if e["cat"] == "step" and e["name"] == "step %d" % args.step]
        if not steps:
            sys.exit("%s: no step %d" % (args.trace, args.step))
        lo, hi = steps[0]["ts"], steps[0]["ts"] + steps[0]["dur"]
        events = [e for e in events if e["ts"] + e["dur"] >= lo and e["ts"] <= hi]
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e["dur"] for e in events)
    left, right, row_h, gap = 130, 20, 22, 18
    scale = (args.width - left - right) / max(t1 - t0, 1e-9)
    parts, y = [], 40
    for tid in sorted({e["tid"] for e in events}):
        lane = [e for e in events if e["tid"] == tid]
        depth = depth_of(lane)
        rows = max(depth.values()) + 1
        parts.append('<text x="8" y="%d" class="lane">%s</text>' % (y + 15, LANES.get(tid, "tid %d" % tid)))
        for e in lane:
            x = left + (e["ts"] - t0) * scale
            w = max(e["dur"] * scale, 0.6)
            ey = y + depth[id(e)] * row_h
            tip = "%s (%s): %.3f ms" % (e["name"], e["cat"], e["dur"] / 1000.0)
            parts.append('<g><title>%s</title><rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" '
                         'stroke="#fff" stroke-width="0.4"/>' % (html.escape(tip), x, ey, w, row_h - 2,
                                                                   COLOURS.get(e["cat"], "#999")))
            label = e["name"]
            if w > 40:
                chars = int(w / 6.2)
                text = label if len(label) <= chars else label[:max(chars - 1, 1)] + "\u2026"
                parts.append('<text x="%.2f" y="%d" class="ev">%s</text>' % (x + 3, ey + 14, html.escape(text)))
            parts.append("</g>")
        y += rows * row_h + gap
    # The time axis, in milliseconds.
    span_ms = (t1 - t0) / 1000.0
    tick = next(t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4)
                if span_ms / t <= 12)
    axis = ['<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>' % (left, y, args.width - right, y)]
    k = 0
    while k * tick <= span_ms + 1e-9:
        x = left + k * tick * 1000.0 * scale
        axis.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#444"/><text x="%.1f" y="%d" '
                    'class="tick">%g ms</text>' % (x, y, x, y + 5, x - 10, y + 18, k * tick))
        k += 1
    legend = []
    lx = left
    for cat, colour in COLOURS.items():
        legend.append('<rect x="%d" y="10" width="12" height="12" fill="%s"/><text x="%d" y="21" class="leg">%s'
                      '</text>' % (lx, colour, lx + 16, cat.replace("_", "-")))
        lx += 16 + 8 * len(cat) + 24
    height = y + 30
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
           '<style>text{font-family:system-ui,sans-serif}.lane{font-size:13px;font-weight:600}'
           '.ev{font-size:11px;fill:#111}.tick{font-size:11px;fill:#444}.leg{font-size:12px}</style>'
           '<rect width="100%%" height="100%%" fill="#fff"/>%s%s%s</svg>\n'
           % (args.width, height, args.width, height, "".join(legend), "".join(parts), "".join(axis)))
    with open(args.out, "w") as f:
        f.write(svg)


if __name__ == "__main__":
    main()
