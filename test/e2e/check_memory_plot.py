"""tcc --memory-plot's page in a real browser, against --memory-report.

Usage: /usr/bin/python3 check_memory_plot.py --html PLOT.html
           --report REPORT.json [--report2 REPORT2.json]
           --screenshot OUT.png [--chromium /usr/bin/chromium]

Renders PLOT.html (or a bare PLOT.svg) in headless Chromium and checks:

  screenshot   a 1600x900 screenshot is written, is a PNG of that size and
               is not blank (many distinct colours, not one background).
  self-contained
               the file names no URL (other than SVG's XML namespace), loads
               no script, style sheet, font or image from anywhere.
  figures      per plan (the first <svg class="tcc-memory-plot"> against
               --report, the second against --report2), as the browser
               parsed the page: data-planned-peak, data-budget,
               data-peak-op and data-peak-live-bytes equal the report's
               planned_peak_bytes, budget_bytes, peak.op and
               peak.live_bytes; every nonzero category of the report (and
               activations_and_temporaries always) has its
               <g class="category" data-key=...> with those bytes; the
               <line class="budget"> (absent without a budget) and the
               <line class="planned-peak"> carry their bytes.
  geometry     measured in the browser from the rendered elements (their
               bounding boxes, brought back to the svg's user units by its
               screen CTM): the budget line and the planned-peak line lie
               within 0.5 px of data-y0 - bytes / 2^30 * data-px-per-gib;
               the planned-peak line is not above the budget line when the
               plan fits (and not below it when it does not); two plans are
               side by side, inside the 1600 px window.

Prints a PASS line per plan with its figures; exits 1 with a message naming
the mismatch otherwise. Uses the standard library only.
"""

import argparse
import html
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

WIDTH, HEIGHT = 1600, 900
GIB = float(1 << 30)
TIMEOUT_S = 60

# Runs in the page once it is parsed: everything the checks need, as the
# browser sees it, written as JSON into an element with id tcc-measure.
MEASURE_JS = r"""
(function () {
  function num(v) { return v === null || v === undefined ? null : Number(v); }
  var out = { plots: [], errors: [] };
  try {
    var svgs = document.querySelectorAll('svg.tcc-memory-plot');
    for (var i = 0; i < svgs.length; i++) {
      var svg = svgs[i];
      var inv = svg.getScreenCTM().inverse();
      var toUser = function (x, y) {
        var p = svg.createSVGPoint(); p.x = x; p.y = y;
        return p.matrixTransform(inv);
      };
      var line = function (cls) {
        var l = svg.querySelector('line.' + cls);
        if (!l) return null;
        var r = l.getBoundingClientRect();
        var a = toUser(r.left, r.top + r.height / 2);
        var b = toUser(r.right, r.top + r.height / 2);
        // The same through the element's own CTM, from its rendered geometry.
        var m = inv.multiply(l.getScreenCTM());
        var bb = l.getBBox();
        var p = svg.createSVGPoint(); p.x = bb.x; p.y = bb.y + bb.height / 2;
        var c = p.matrixTransform(m);
        return { bytes: l.getAttribute('data-bytes'), y: a.y, y_ctm: c.y,
                 x_from: a.x, x_to: b.x, screen_y: r.top + r.height / 2,
                 visible: r.width > 0 &&
                          getComputedStyle(l).visibility !== 'hidden' &&
                          getComputedStyle(l).display !== 'none' };
      };
      var cats = {};
      var dup = [];
      var gs = svg.querySelectorAll('g.category');
      for (var k = 0; k < gs.length; k++) {
        var key = gs[k].getAttribute('data-key');
        if (key in cats) dup.push(key);
        cats[key] = gs[k].getAttribute('data-bytes');
      }
      var peak = svg.querySelector('g.peak');
      var box = svg.getBoundingClientRect();
      out.plots.push({
        planned_peak: svg.getAttribute('data-planned-peak'),
        budget: svg.getAttribute('data-budget'),
        peak_op: svg.getAttribute('data-peak-op'),
        peak_live_bytes: svg.getAttribute('data-peak-live-bytes'),
        ops: svg.getAttribute('data-ops'),
        first_backward: svg.getAttribute('data-first-backward'),
        y0: svg.getAttribute('data-y0'),
        px_per_gib: svg.getAttribute('data-px-per-gib'),
        categories: cats, duplicate_categories: dup,
        budget_line: line('budget'),
        planned_peak_line: line('planned-peak'),
        peak_op_index: peak ? peak.getAttribute('data-op-index') : null,
        values: svg.querySelectorAll('rect.value').length,
        titled_values: svg.querySelectorAll('rect.value > title').length,
        box: { left: box.left, top: box.top, right: box.right,
               bottom: box.bottom },
      });
    }
  } catch (e) {
    out.errors.push(String(e && e.stack || e));
  }
  var doc = document.documentElement;
  var pre = doc.namespaceURI === 'http://www.w3.org/2000/svg'
      ? document.createElementNS('http://www.w3.org/2000/svg', 'desc')
      : document.createElement('pre');
  pre.setAttribute('id', 'tcc-measure');
  pre.textContent = JSON.stringify(out);
  (document.body || doc).appendChild(pre);
})();
"""


class Failure(Exception):
    pass


def fail(msg):
    raise Failure(msg)


def chromium(binary, args, url, what):
    """Runs headless Chromium on `url` with `args`; returns its stdout."""
    with tempfile.TemporaryDirectory(prefix="tcc-plot-chromium-") as profile:
        cmd = [binary, "--headless", "--disable-gpu", "--no-sandbox",
               "--hide-scrollbars", "--no-first-run",
               "--user-data-dir=" + profile,
               "--window-size=%d,%d" % (WIDTH, HEIGHT)] + args + [url]
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            err = (e.stderr or b"").decode("utf-8", "replace")
            fail("%s: chromium ran past %d s\n%s" % (what, TIMEOUT_S, err))
        except OSError as e:
            fail("%s: cannot run %s: %s" % (what, binary, e))
        if p.returncode != 0:
            fail("%s: chromium exited with %d\n%s" %
                 (what, p.returncode, p.stderr.decode("utf-8", "replace")))
        return p.stdout.decode("utf-8", "replace"), \
            p.stderr.decode("utf-8", "replace")


def png_pixels(path):
    """(width, height, rows of pixel tuples) of an 8-bit RGB(A)/grey PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if ihdr is None:
        fail("%s has no IHDR" % path)
    width, height, depth, colour, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace:
        return width, height, None  # only the size can be checked
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        off = y * (stride + 1)
        kind, line = raw[off], bytearray(raw[off + 1:off + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, (rows, channels)


def check_screenshot(path):
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        fail("no screenshot was written to %s" % path)
    width, height, pixels = png_pixels(path)
    if (width, height) != (WIDTH, HEIGHT):
        fail("the screenshot is %dx%d, not %dx%d" %
             (width, height, WIDTH, HEIGHT))
    if pixels is None:
        return "size only (not an 8-bit PNG)"
    rows, channels = pixels
    counts = {}
    for row in rows[::3]:
        for i in range(0, len(row), channels * 3):
            px = row[i:i + channels]
            counts[px] = counts.get(px, 0) + 1
    total = sum(counts.values())
    background = max(counts.values())
    if len(counts) < 64:
        fail("the screenshot looks blank: %d distinct colours" % len(counts))
    if total - background < total // 10:
        fail("the screenshot looks blank: %.1f%% of it is one colour" %
             (100.0 * background / total))
    return "%d distinct colours, %.0f%% background" % (
        len(counts), 100.0 * background / total)


NAMESPACES = ("http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink",
              "http://www.w3.org/1999/xhtml")


def check_self_contained(text):
    """Fails if the file could fetch anything: a URL (other than an XML
    namespace), an attribute that loads a resource, CSS that does."""
    for m in re.finditer(r"(?i)\b(?:https?|ftp)://", text):
        if not any(text.startswith(ns, m.start()) for ns in NAMESPACES):
            fail("the plot names a URL, near %r" %
                 text[max(0, m.start() - 20):m.end() + 40])
    for pattern, what in [
            (r"(?i)<[a-z][^>]*\s(?:src|href|xlink:href|srcset|poster|action)"
             r"\s*=", "a resource (a src or href attribute)"),
            (r"(?i)<link\b", "a <link>"),
            (r"(?i)@import", "a CSS @import"),
            (r"(?i)@font-face", "a web font"),
            (r"(?i)<(?:img|image|iframe|object|embed|use)\b",
             "an image, frame or <use>"),
            (r"(?i)url\(", "a CSS url()")]:
        m = re.search(pattern, text)
        if m:
            fail("the plot loads %s, near %r" %
                 (what, text[max(0, m.start() - 20):m.end() + 40]))


def inject(text, is_svg):
    script = MEASURE_JS
    if is_svg:
        tag = "<script><![CDATA[%s]]></script>" % script
        cut = text.rfind("</svg>")
        if cut < 0:
            fail("the SVG has no closing </svg>")
        return text[:cut] + tag + text[cut:]
    tag = "<script>%s</script>" % script
    cut = text.lower().rfind("</body>")
    if cut < 0:
        fail("the page has no </body>")
    return text[:cut] + tag + text[cut:]


def measure(binary, path, is_svg, workdir):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    check_self_contained(text)
    copy = os.path.join(workdir, "measure" + (".svg" if is_svg else ".html"))
    with open(copy, "w", encoding="utf-8") as f:
        f.write(inject(text, is_svg))
    dom, err = chromium(binary, ["--dump-dom"], pathlib.Path(copy).as_uri(),
                        "--dump-dom")
    m = re.search(r'id="tcc-measure"[^>]*>(.*?)</(?:pre|desc)>', dom, re.S)
    if not m:
        fail("the measuring script wrote nothing (did the page parse?)\n"
             "chromium's stderr:\n%s" % err)
    got = json.loads(html.unescape(m.group(1)))
    if got["errors"]:
        fail("the measuring script failed: %s" % "; ".join(got["errors"]))
    return got["plots"]


def as_int(v, what):
    try:
        return int(v)
    except (TypeError, ValueError):
        fail("%s is %r, not an integer" % (what, v))


def as_float(v, what):
    try:
        return float(v)
    except (TypeError, ValueError):
        fail("%s is %r, not a number" % (what, v))


def fmt(b):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= size:
            return "%.2f %s" % (b / size, unit)
    return "%d B" % b


def check_plot(n, plot, report):
    name = "plot %d" % n
    def eq(what, got, want):
        if got != want:
            fail("%s: %s is %r, the report says %r" % (name, what, got, want))

    planned = as_int(report["planned_peak_bytes"], "planned_peak_bytes")
    budget = as_int(report["budget_bytes"], "budget_bytes")
    peak = report.get("peak", {})
    eq("data-planned-peak", as_int(plot["planned_peak"], "data-planned-peak"),
       planned)
    eq("data-budget", as_int(plot["budget"], "data-budget"), budget)
    eq("data-peak-op", plot["peak_op"], peak.get("op"))
    eq("data-peak-live-bytes",
       as_int(plot["peak_live_bytes"], "data-peak-live-bytes"),
       as_int(peak.get("live_bytes"), "peak.live_bytes"))

    cats = plot["categories"]
    if plot["duplicate_categories"]:
        fail("%s: categories drawn twice: %s" %
             (name, ", ".join(plot["duplicate_categories"])))
    checked = []
    for key, value in sorted(report["categories"].items()):
        value = as_int(value, "categories." + key)
        if key not in cats:
            if value != 0 or key == "activations_and_temporaries":
                fail("%s: no <g class=\"category\" data-key=\"%s\"> (the "
                     "report has %d bytes)" % (name, key, value))
            continue
        eq("category %s's data-bytes" % key,
           as_int(cats[key], "data-bytes of " + key), value)
        checked.append(key)
    for key in ("saved_activations", "temporaries"):
        if key not in cats:
            fail("%s: no <g class=\"category\" data-key=\"%s\">" % (name, key))

    y0 = as_float(plot["y0"], "data-y0")
    ppg = as_float(plot["px_per_gib"], "data-px-per-gib")
    if ppg <= 0:
        fail("%s: data-px-per-gib is %r" % (name, ppg))

    def line_at(kind, line, bytes_):
        if line is None:
            fail("%s: no <line class=\"%s\">" % (name, kind))
        eq("the %s line's data-bytes" % kind,
           as_int(line["bytes"], kind + " data-bytes"), bytes_)
        if not line["visible"]:
            fail("%s: the %s line is not rendered" % (name, kind))
        want = y0 - bytes_ / GIB * ppg
        for how in ("y", "y_ctm"):
            if abs(line[how] - want) > 0.5:
                fail("%s: the %s line is drawn at y=%.2f (%s), not at %.2f "
                     "(%s)" % (name, kind, line[how],
                               "bounding box" if how == "y" else "CTM", want,
                               fmt(bytes_)))
        return line["y"]

    py = line_at("planned-peak", plot["planned_peak_line"], planned)
    if budget > 0:
        by = line_at("budget", plot["budget_line"], budget)
        if planned <= budget and py < by - 0.01:
            fail("%s: the plan fits its budget but the planned-peak line "
                 "(y=%.2f) is drawn above the budget line (y=%.2f)" %
                 (name, py, by))
        if planned > budget and py > by + 0.01:
            fail("%s: the plan exceeds its budget but the planned-peak line "
                 "(y=%.2f) is drawn below the budget line (y=%.2f)" %
                 (name, py, by))
        if by < 0:
            fail("%s: the budget line is above the svg (y=%.2f)" % (name, by))
    elif plot["budget_line"] is not None:
        fail("%s: there is no budget but a budget line is drawn" % name)

    if peak.get("op") and plot["peak_op_index"] is None:
        fail("%s: no <g class=\"peak\">" % name)
    if plot["values"] != plot["titled_values"]:
        fail("%s: %d of %d value blocks have no <title>" %
             (name, plot["values"] - plot["titled_values"], plot["values"]))
    lines = "planned-peak line y=%.2f" % py
    if budget > 0:
        lines += ", budget line y=%.2f" % by
    print("PASS %s: planned peak %s, budget %s, peak %s live at op %s of %s "
          "(%r); %d categories as reported (%s); %s, each within 0.5 px of "
          "data-y0 - bytes/2^30*data-px-per-gib; %d value blocks, all titled"
          % (name, fmt(planned), fmt(budget) if budget else "none",
             fmt(as_int(plot["peak_live_bytes"], "")), plot["peak_op_index"],
             plot["ops"], peak.get("op"), len(checked),
             ", ".join("%s %s" % (k, fmt(as_int(cats[k], k)))
                       for k in checked), lines, plot["values"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html", required=True, help="tcc --memory-plot output")
    ap.add_argument("--report", required=True, help="tcc --memory-report")
    ap.add_argument("--report2", help="the second plan's --memory-report")
    ap.add_argument("--screenshot", required=True, help="PNG to write")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    try:
        if not (os.path.isfile(args.chromium) or shutil.which(args.chromium)):
            fail("no chromium at %s" % args.chromium)
        path = os.path.abspath(args.html)
        if not os.path.isfile(path):
            fail("no plot at %s" % args.html)
        is_svg = path.lower().endswith(".svg")
        reports = []
        for r in [args.report] + ([args.report2] if args.report2 else []):
            with open(r, encoding="utf-8") as f:
                reports.append(json.load(f))
        shot = os.path.abspath(args.screenshot)
        if os.path.exists(shot):
            os.remove(shot)
        chromium(args.chromium, ["--screenshot=" + shot],
                 pathlib.Path(path).as_uri(),
                 "--screenshot")
        look = check_screenshot(shot)
        print("PASS screenshot %s: %dx%d, %s" % (shot, WIDTH, HEIGHT, look))
        with tempfile.TemporaryDirectory(prefix="tcc-plot-") as work:
            plots = measure(args.chromium, path, is_svg, work)
        if len(plots) < len(reports):
            fail("%d <svg class=\"tcc-memory-plot\"> in the page, %d reports"
                 % (len(plots), len(reports)))
        for n, (plot, report) in enumerate(zip(plots, reports), 1):
            check_plot(n, plot, report)
        boxes = [p["box"] for p in plots]
        for n, b in enumerate(boxes, 1):
            if b["left"] < -0.5 or b["right"] > WIDTH + 0.5:
                fail("plot %d lies outside the %d px window (%.0f..%.0f)" %
                     (n, WIDTH, b["left"], b["right"]))
        for n in range(1, len(boxes)):
            if boxes[n]["left"] < boxes[n - 1]["right"] - 0.5:
                fail("plots %d and %d are not side by side" % (n, n + 1))
        print("PASS %s: %d plot(s), self-contained" % (args.html, len(plots)))
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    except KeyError as e:
        print("FAIL: the report has no %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
