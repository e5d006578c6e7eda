//===- MemoryPlot.cpp - the memory plan as a picture ----------------------===//
//
// Writes `tcc --memory-plot`: one SVG per plan (two side by side share one
// byte scale), inline in an HTML page or as a bare SVG document. Nothing is
// fetched: no script, font, style sheet or image from anywhere; the SVG is
// complete without the page's CSS (which only adds hover effects).
//
// Each plan's SVG has an upper panel, the bytes live at each op of the
// schedule stacked by category (the fixed categories as constant bands, then
// the saved activations and the other temporaries live at the op), with the
// budget, the planned peak, the forward/backward boundary, the ops that make
// recomputed values and the temporaries' peak with its largest values; and a
// lower panel, the arena's temporaries region as a map: one block per value,
// from the op that makes it to its last use, at its offset in the region.
// Hovering an area or a block shows its <title>.
//
// DOM contract (test/e2e/check_memory_plot.py relies on it; keep it stable):
//
//   <svg class="tcc-memory-plot" ...>       one per plan, in plan order
//     data-planned-peak="N"                 MemoryPlan::plannedPeak
//     data-budget="N"                       MemoryPlan::budget (0: none)
//     data-peak-op="TEXT"                   ops[peakOp] ("" if none)
//     data-peak-live-bytes="N"              MemoryPlan::peakLiveBytes
//     data-ops="N"                          ops.size()
//     data-first-backward="K"               MemoryPlan::firstBackward
//     data-y0="Y"                           y (user units of this svg) of 0
//                                           bytes in the upper panel
//     data-px-per-gib="P"                   so bytes b lie at
//                                           y0 - b / 2^30 * P
//   <g class="category" data-key="KEY" data-bytes="N">   area + legend entry
//     KEY: each nonzero FixedCategory::key (its bytes), and
//     "activations_and_temporaries"  temporariesRegion (always present),
//     "saved_activations"            the most saved bytes live at one op,
//     "temporaries"                  the most other bytes live at one op.
//   <line class="budget" data-bytes="N">        only when budget > 0
//   <line class="planned-peak" data-bytes="N">  at plannedPeak
//   <g class="peak" data-op-index="K">          only when 0 <= peakOp < ops
//   <rect class="value">                        one per PlannedValue, with
//     a <title> "WHAT — SIZE — live ops A–B" (and "— saved for the
//     backward pass" / "— recomputed" where they apply).
//
// The work is linear in ops + values: live bytes per op come from difference
// arrays, and the areas are drawn per pixel column (the most bytes live in
// it) when there are more ops than columns.
//
//===----------------------------------------------------------------------===//

#include "compiler/tcc/MemoryPlot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace mlir::tcc::plot {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr const char *kFont =
    "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif";
constexpr const char *kBudgetColor = "#b2182b";
constexpr const char *kRecomputedColor = "#d62728";
constexpr const char *kSavedColors[2] = {"#ef8a3c", "#e07b2e"};
constexpr const char *kOtherColors[2] = {"#f6c85f", "#edbb48"};
constexpr const char *kRegionFill = "#fdf3e3";
constexpr const char *kRegionStroke = "#e0b57c";
constexpr const char *kInk = "#222";
constexpr const char *kMuted = "#666";
constexpr const char *kGrid = "#e4e4e4";

//===----------------------------------------------------------------------===//
// Text
//===----------------------------------------------------------------------===//

/// Appends `s` escaped for XML text and attribute values. Invalid UTF-8 and
/// the control characters XML does not allow become U+FFFD; tabs and line
/// breaks become spaces.
void appendEscaped(std::string &out, const std::string &s) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  const auto *p = reinterpret_cast<const unsigned char *>(s.data());
  const auto *e = p + s.size();
  while (p < e) {
    unsigned char c = *p;
    if (c < 0x80) {
      switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t': case '\n': case '\r': out += ' '; break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += kReplacement;
        else
          out += static_cast<char>(c);
      }
      ++p;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len != 0 && e - p >= len;
    for (int i = 1; ok && i < len; ++i) {
      if ((p[i] & 0xC0) != 0x80)
        ok = false;
      else
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (ok && ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ||
               cp == 0xFFFE || cp == 0xFFFF))
      ok = false;
    if (!ok) {
      out += kReplacement;
      ++p;
      continue;
    }
    out.append(reinterpret_cast<const char *>(p), len);
    p += len;
  }
}

/// The number of code points of `s` (bytes that do not continue one).
size_t codePoints(const std::string &s) {
  size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

/// The byte offset of `s`'s code point `n` (its size if it has fewer).
size_t codePointOffset(const std::string &s, size_t n) {
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == n)
        return i;
      ++seen;
    }
  }
  return s.size();
}

/// The last `n` code points of `s`.
std::string tail(const std::string &s, size_t n) {
  size_t total = codePoints(s);
  return n >= total ? s : s.substr(codePointOffset(s, total - n));
}

/// `s` cut to at most `max` code points, "…" where it is cut. For "OP NODE"
/// (as describePlanned names values; OP may be "tcc.fusion (A B C)"), the
/// fusion's list of ops is cut first, then the start of the node, so the op
/// and the end of the node stay; anything else keeps its start and its end.
std::string truncated(const std::string &s, size_t max) {
  static const char kEllipsis[] = "\xE2\x80\xA6";
  size_t n = codePoints(s);
  if (n <= max || max < 8)
    return s;
  std::string op, node;
  size_t open = s.find(" ("), close = s.find(") ");
  if (open != std::string::npos && close != std::string::npos &&
      close > open && s.find(' ') == open) {
    std::string inner = s.substr(open + 2, close - open - 2);
    size_t innerN = codePoints(inner), excess = n - max + 1;
    if (innerN > excess + 4)
      return s.substr(0, open + 2) +
             inner.substr(0, codePointOffset(inner, innerN - excess)) +
             kEllipsis + s.substr(close);
    op = s.substr(0, open + 2) + kEllipsis + ") ";
    node = s.substr(close + 2);
  } else if (size_t space = s.find(' '); space != std::string::npos) {
    op = s.substr(0, space + 1);
    node = s.substr(space + 1);
  }
  size_t opN = codePoints(op);
  if (!op.empty() && opN + codePoints(node) <= max)
    return op + node;
  if (!op.empty() && opN + 1 + 10 <= max)
    return op + kEllipsis + tail(node, max - opN - 1);
  size_t head = (max - 1) * 2 / 5;
  return s.substr(0, codePointOffset(s, head)) + kEllipsis +
         tail(s, max - 1 - head);
}

/// The width `s` takes at `size` px, roughly (a sans-serif's average glyph;
/// generous, for DejaVu Sans).
double textWidth(const std::string &s, double size, bool bold = false) {
  return static_cast<double>(codePoints(s)) * size * (bold ? 0.63 : 0.57);
}

/// `v` with at most `decimals` decimals, trailing zeros dropped.
std::string num(double v, int decimals = 1) {
  if (!std::isfinite(v))
    return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0')
      s.pop_back();
    if (!s.empty() && s.back() == '.')
      s.pop_back();
  }
  if (s == "-0")
    s = "0";
  return s;
}

std::string integer(int64_t v) { return std::to_string(v); }

/// 3012 -> "3,012".
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

/// Bytes in binary units: "475 MiB", "2.19 GiB", "1.5 GiB", "0".
std::string bytesText(int64_t b) {
  static const char *const kUnits[] = {"B",   "KiB", "MiB",
                                       "GiB", "TiB", "PiB"};
  if (b == 0)
    return "0";
  double v = static_cast<double>(b);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0)
    return std::to_string(b) + " B";
  double a = std::fabs(v);
  std::string s = num(v, a >= 100 ? 0 : a >= 10 ? 1 : 2);
  return s + " " + kUnits[u];
}

//===----------------------------------------------------------------------===//
// Scales and colours
//===----------------------------------------------------------------------===//

/// A round step in binary units (a power of two bytes) that divides [0, max]
/// into at most `maxTicks` steps.
int64_t byteStep(int64_t max, int maxTicks) {
  int64_t step = 1;
  while (step < (int64_t(1) << 60) && (max + step - 1) / step > maxTicks)
    step *= 2;
  return step;
}

/// A round step (1, 2 or 5 times a power of ten) that divides [0, max] into
/// at most `maxTicks` steps.
int64_t countStep(int64_t max, int maxTicks) {
  int64_t base = 1;
  for (;;) {
    for (int64_t m : {1, 2, 5})
      if ((max + m * base - 1) / (m * base) <= maxTicks)
        return m * base;
    if (base > (int64_t(1) << 58))
      return base;
    base *= 10;
  }
}

struct Swatch {
  const char *fill;
  const char *text; // the colour of a label drawn on it
};

Swatch fixedSwatch(const std::string &key, size_t index) {
  struct Entry {
    const char *key;
    Swatch swatch;
  };
  static const Entry kKnown[] = {
      {"parameters", {"#3d6a9e", "#fff"}},
      {"gradients", {"#5aa7a0", "#fff"}},
      {"optimizer_state", {"#8e7cc3", "#fff"}},
      {"fp16_working_copies", {"#9ec3e6", "#1d2b3a"}},
      {"inputs", {"#7fb77e", "#10240f"}},
      {"outputs", {"#b8dca0", "#10240f"}},
      {"library_workspace", {"#c7b08d", "#2e2416"}},
      {"constants_and_runtime_reserve", {"#b9b9b9", "#222"}},
  };
  for (const Entry &e : kKnown)
    if (key == e.key)
      return e.swatch;
  static const Swatch kOthers[] = {{"#6f8fa8", "#fff"},
                                   {"#a3a380", "#222"},
                                   {"#9a7f9f", "#fff"},
                                   {"#8aa39b", "#222"}};
  return kOthers[index % (sizeof kOthers / sizeof kOthers[0])];
}

//===----------------------------------------------------------------------===//
// What is drawn: the plan, measured
//===----------------------------------------------------------------------===//

struct Analysis {
  int64_t nOps = 1; // columns of the schedule (at least one)
  int64_t fixedSum = 0;
  std::vector<int64_t> saved, other; // live bytes per op
  int64_t maxSaved = 0, maxOther = 0, maxLive = 0;
  int64_t liveAtPeak = 0; // saved + other at peakOp, from the values
  int64_t peakOp = -1;    // peakOp if in range, else -1
  std::vector<size_t> peakValues; // the largest values live at peakOp
  std::vector<char> makesRecomputed; // per op
  int64_t recomputedValues = 0, recomputedBytes = 0;
  int64_t savedValues = 0;
  int64_t regionTop = 0; // the most of temporariesRegion, offset + bytes
  int64_t top = 0;       // the most bytes the upper panel must show
};

int64_t clampOp(int64_t k, int64_t nOps) {
  return std::max<int64_t>(0, std::min<int64_t>(k, nOps - 1));
}

Analysis analyse(const MemoryPlan &plan) {
  Analysis a;
  a.nOps = std::max<int64_t>(1, static_cast<int64_t>(plan.ops.size()));
  for (const FixedCategory &c : plan.fixed)
    a.fixedSum += std::max<int64_t>(0, c.bytes);
  std::vector<int64_t> dSaved(a.nOps + 1, 0), dOther(a.nOps + 1, 0);
  a.makesRecomputed.assign(a.nOps, 0);
  a.regionTop = std::max<int64_t>(0, plan.temporariesRegion);
  for (const PlannedValue &v : plan.values) {
    int64_t bytes = std::max<int64_t>(0, v.bytes);
    int64_t s = clampOp(v.start, a.nOps);
    int64_t e = clampOp(std::max(v.end, v.start), a.nOps);
    std::vector<int64_t> &d = v.saved ? dSaved : dOther;
    d[s] += bytes;
    d[e + 1] -= bytes;
    if (v.recomputed) {
      a.makesRecomputed[s] = 1;
      ++a.recomputedValues;
      a.recomputedBytes += bytes;
    }
    a.savedValues += v.saved;
    a.regionTop = std::max(a.regionTop, std::max<int64_t>(0, v.offset) + bytes);
  }
  a.saved.resize(a.nOps);
  a.other.resize(a.nOps);
  int64_t s = 0, o = 0;
  for (int64_t k = 0; k < a.nOps; ++k) {
    s += dSaved[k];
    o += dOther[k];
    a.saved[k] = s;
    a.other[k] = o;
    a.maxSaved = std::max(a.maxSaved, s);
    a.maxOther = std::max(a.maxOther, o);
    a.maxLive = std::max(a.maxLive, s + o);
  }
  if (plan.peakOp >= 0 && plan.peakOp < static_cast<int64_t>(plan.ops.size())) {
    a.peakOp = plan.peakOp;
    a.liveAtPeak = a.saved[a.peakOp] + a.other[a.peakOp];
    for (size_t i = 0; i < plan.values.size(); ++i) {
      const PlannedValue &v = plan.values[i];
      if (clampOp(v.start, a.nOps) <= a.peakOp &&
          a.peakOp <= clampOp(std::max(v.end, v.start), a.nOps))
        a.peakValues.push_back(i);
    }
    size_t keep = std::min<size_t>(6, a.peakValues.size());
    std::partial_sort(a.peakValues.begin(), a.peakValues.begin() + keep,
                      a.peakValues.end(), [&](size_t x, size_t y) {
                        if (plan.values[x].bytes != plan.values[y].bytes)
                          return plan.values[x].bytes > plan.values[y].bytes;
                        return x < y;
                      });
    a.peakValues.resize(keep);
  }
  a.top = std::max({a.fixedSum + a.maxLive, plan.plannedPeak, plan.budget,
                    a.fixedSum + plan.temporariesRegion, int64_t(1) << 20});
  return a;
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

/// What the plans share: the size of each SVG and the byte scales.
struct Frame {
  double width = 0, height = 0;
  double left = 72, right = 0; // the plot's x range
  double legendTop = 58;
  double upperTop = 0, upperBottom = 0; // the upper panel
  double mapTop = 0, mapBottom = 0;     // the region's map
  int64_t upperMax = 0, upperStep = 0;  // bytes at upperTop; tick step
  int64_t mapMax = 0, mapStep = 0;      // bytes at mapTop; tick step
  double legendRows = 0;
  double pxPerByte() const { return (upperBottom - upperTop) / upperMax; }
  double mapPxPerByte() const { return (mapBottom - mapTop) / mapMax; }
};

/// A legend entry: its swatch and its text (label, then bytes, in bold).
struct LegendEntry {
  std::string label, value;
  double width() const {
    return 16 + textWidth(label + " ", 11) + textWidth(value, 11, true) + 18;
  }
};

/// Where each legend entry goes: its x offset from the plot's left and its
/// row. A grid (row-major, each column as wide as its widest entry) when
/// that takes no more rows than packing the entries line by line;
/// else packed.
struct LegendLayout {
  std::vector<double> x;
  std::vector<size_t> row;
  size_t rows = 0;
};

LegendLayout legendLayout(const std::vector<LegendEntry> &entries,
                          double avail) {
  LegendLayout flow;
  double at = 0;
  size_t row = 0;
  for (const LegendEntry &e : entries) {
    double w = e.width();
    if (at > 0 && at + w > avail) {
      ++row;
      at = 0;
    }
    flow.x.push_back(at);
    flow.row.push_back(row);
    at += w;
  }
  flow.rows = entries.empty() ? 0 : row + 1;
  for (size_t cols = entries.size(); cols >= 1; --cols) {
    std::vector<double> widths(cols, 0);
    for (size_t i = 0; i < entries.size(); ++i)
      widths[i % cols] = std::max(widths[i % cols], entries[i].width());
    double total = 0;
    for (double w : widths)
      total += w;
    if (total > avail)
      continue;
    size_t rows = (entries.size() + cols - 1) / cols;
    if (rows > flow.rows)
      break;
    LegendLayout grid;
    for (size_t i = 0; i < entries.size(); ++i) {
      double x = 0;
      for (size_t c = 0; c < i % cols; ++c)
        x += widths[c];
      grid.x.push_back(x);
      grid.row.push_back(i / cols);
    }
    grid.rows = rows;
    return grid;
  }
  return flow;
}

/// The legend of `plan`, in stacking order: its nonzero fixed categories,
/// the temporaries' region, the saved activations, the other temporaries
/// and, if any, the recomputed values.
std::vector<LegendEntry> legendEntries(const MemoryPlan &plan,
                                       const Analysis &a) {
  std::vector<LegendEntry> entries;
  for (const FixedCategory &c : plan.fixed)
    if (c.bytes > 0)
      entries.push_back({truncated(c.label.empty() ? c.key : c.label, 48),
                         bytesText(c.bytes)});
  entries.push_back({"activations & temporaries (region)",
                     bytesText(plan.temporariesRegion)});
  entries.push_back({"saved activations, peak", bytesText(a.maxSaved)});
  entries.push_back({"other temporaries, peak", bytesText(a.maxOther)});
  if (a.recomputedValues)
    entries.push_back({"recomputed: " + grouped(a.recomputedValues) +
                           " values,",
                       bytesText(a.recomputedBytes)});
  return entries;
}

//===----------------------------------------------------------------------===//
// Drawing
//===----------------------------------------------------------------------===//

/// One plan's SVG, appended to `out`.
class PlanWriter {
public:
  PlanWriter(std::string &out, const MemoryPlan &plan, const Analysis &a,
             const Frame &f)
      : out(out), plan(plan), a(a), f(f) {}

  void write(bool nested, double xOffset);

private:
  std::string &out;
  const MemoryPlan &plan;
  const Analysis &a;
  const Frame &f;

  double x(double op) const {
    return f.left + (f.right - f.left) * op / static_cast<double>(a.nOps);
  }
  double y(double bytes) const { return f.upperBottom - bytes * f.pxPerByte(); }
  double mapY(double offset) const {
    return f.mapBottom - offset * f.mapPxPerByte();
  }

  void text(double tx, double ty, const std::string &s, double size,
            const char *anchor = "start", const char *fill = nullptr,
            const char *extra = "") {
    out += "<text x=\"" + num(tx) + "\" y=\"" + num(ty) + "\" font-size=\"" +
           num(size) + "\"";
    if (std::strcmp(anchor, "start") != 0)
      out += std::string(" text-anchor=\"") + anchor + "\"";
    out += std::string(" fill=\"") + (fill ? fill : kInk) + "\"";
    out += extra;
    out += ">";
    appendEscaped(out, s);
    out += "</text>\n";
  }
  void title(const std::string &s) {
    out += "<title>";
    appendEscaped(out, s);
    out += "</title>";
  }
  /// A white outline behind text drawn over the areas.
  static const char *halo() {
    return " stroke=\"#fff\" stroke-width=\"3\" stroke-linejoin=\"round\""
           " paint-order=\"stroke\"";
  }

  void writeHeader();
  void writeLegendAndAreas();
  void writeAxes();
  void writeLines();
  void writePeak();
  void writeMap();

  /// The live areas, as step paths: columns of ops, each the most bytes live
  /// in it (one column per op when the ops are fewer than the pixels).
  struct Column {
    double x0, x1;
    int64_t saved, total;
  };
  std::vector<Column> columns() const;

  double bandLabelSide = 0; // 0: bands labelled on the left; 1: right
};

std::vector<PlanWriter::Column> PlanWriter::columns() const {
  std::vector<Column> cols;
  int64_t pixels = std::max<int64_t>(1, static_cast<int64_t>(f.right - f.left));
  if (a.nOps <= pixels) {
    for (int64_t k = 0; k < a.nOps; ++k)
      cols.push_back({x(k), x(k + 1), a.saved[k], a.saved[k] + a.other[k]});
  } else {
    for (int64_t c = 0; c < pixels; ++c) {
      int64_t k0 = c * a.nOps / pixels, k1 = (c + 1) * a.nOps / pixels;
      Column col{x(k0), x(k1), 0, 0};
      for (int64_t k = k0; k < k1; ++k) {
        col.saved = std::max(col.saved, a.saved[k]);
        col.total = std::max(col.total, a.saved[k] + a.other[k]);
      }
      cols.push_back(col);
    }
  }
  // Merge neighbours that draw the same.
  std::vector<Column> merged;
  for (const Column &c : cols) {
    if (!merged.empty() && merged.back().saved == c.saved &&
        merged.back().total == c.total)
      merged.back().x1 = c.x1;
    else
      merged.push_back(c);
  }
  return merged;
}

void PlanWriter::write(bool nested, double xOffset) {
  out += "<svg class=\"tcc-memory-plot\"";
  if (nested)
    out += " x=\"" + num(xOffset) + "\" y=\"0\" width=\"" + num(f.width) +
           "\" height=\"" + num(f.height) + "\"";
  out += " viewBox=\"0 0 " + num(f.width) + " " + num(f.height) + "\"";
  out += " role=\"img\" aria-label=\"memory plan: ";
  appendEscaped(out, plan.title);
  out += "\"";
  out += " font-family=\"" + std::string(kFont) + "\"";
  out += " data-planned-peak=\"" + integer(plan.plannedPeak) + "\"";
  out += " data-budget=\"" + integer(plan.budget) + "\"";
  if (plan.hostBytes > 0)
    out += " data-host-bytes=\"" + integer(plan.hostBytes) + "\"";
  out += " data-peak-op=\"";
  if (a.peakOp >= 0)
    appendEscaped(out, plan.ops[a.peakOp]);
  out += "\"";
  out += " data-peak-live-bytes=\"" + integer(plan.peakLiveBytes) + "\"";
  out += " data-ops=\"" + integer(static_cast<int64_t>(plan.ops.size())) + "\"";
  out += " data-first-backward=\"" + integer(plan.firstBackward) + "\"";
  out += " data-y0=\"" + num(f.upperBottom, 3) + "\"";
  out += " data-px-per-gib=\"" + num(f.pxPerByte() * kGiB, 6) + "\"";
  out += ">\n";
  out += "<rect width=\"" + num(f.width) + "\" height=\"" + num(f.height) +
         "\" fill=\"#fff\"/>\n";
  // The peak's callout goes on the side away from the peak; the bands'
  // labels on the other.
  if (a.peakOp >= 0 && x(a.peakOp + 0.5) > (f.left + f.right) / 2)
    bandLabelSide = 1;
  writeHeader();
  writeAxes();
  writeLegendAndAreas();
  writeLines();
  writePeak();
  writeMap();
  out += "</svg>\n";
}

void PlanWriter::writeHeader() {
  text(f.left, 22, truncated(plan.title.empty() ? "memory plan" : plan.title,
                             static_cast<size_t>((f.width - f.left) / 9.5)),
       15, "start", kInk, " font-weight=\"600\"");
  // The figures, in one line.
  out += "<text x=\"" + num(f.left) + "\" y=\"42\" font-size=\"12\" fill=\"" +
         kMuted + "\">planned peak <tspan font-weight=\"600\" fill=\"" + kInk +
         "\">" + bytesText(plan.plannedPeak) + "</tspan>";
  if (plan.budget > 0) {
    out += " · budget <tspan font-weight=\"600\" fill=\"" +
           std::string(kBudgetColor) + "\">" + bytesText(plan.budget) +
           "</tspan>";
    if (plan.plannedPeak <= plan.budget)
      out += " (" + bytesText(plan.budget - plan.plannedPeak) + " to spare)";
    else
      out += " (<tspan fill=\"" + std::string(kBudgetColor) +
             "\" font-weight=\"600\">over by " +
             bytesText(plan.plannedPeak - plan.budget) + "</tspan>)";
  } else {
    out += " · no budget";
  }
  if (plan.hostBytes > 0) {
    out += " · <tspan><title>";
    appendEscaped(out, "pinned host memory (tcc --offload), not on the device: " + plan.hostNote);
    out += "</title>host " + bytesText(plan.hostBytes) + "</tspan>";
  }
  out += " · " + grouped(static_cast<int64_t>(plan.ops.size())) + " ops · " +
         grouped(static_cast<int64_t>(plan.values.size())) + " temporaries";
  if (a.recomputedValues)
    out += " · <tspan fill=\"" + std::string(kRecomputedColor) + "\">" +
           grouped(a.recomputedValues) + " recomputed</tspan>";
  out += "</text>\n";
}

void PlanWriter::writeAxes() {
  out += "<g class=\"axis\" font-size=\"11\">\n";
  // Byte gridlines and labels.
  for (int64_t b = 0; b <= f.upperMax; b += f.upperStep) {
    double yy = y(static_cast<double>(b));
    if (b)
      out += "<line x1=\"" + num(f.left) + "\" x2=\"" + num(f.right) +
             "\" y1=\"" + num(yy, 2) + "\" y2=\"" + num(yy, 2) +
             "\" stroke=\"" + kGrid + "\"/>\n";
    text(f.left - 6, yy + 4, bytesText(b), 11, "end", kMuted);
  }
  // Op ticks under the upper panel and under the map.
  int64_t step = countStep(a.nOps, std::max(2, static_cast<int>(
                                                   (f.right - f.left) / 75)));
  for (int64_t k = 0; k <= a.nOps; k += step) {
    double xx = x(static_cast<double>(k));
    if (a.nOps - k < step / 3 && k != a.nOps && k != 0)
      continue; // too close to the end label
    for (double base : {f.upperBottom, f.mapBottom}) {
      out += "<line x1=\"" + num(xx) + "\" x2=\"" + num(xx) + "\" y1=\"" +
             num(base) + "\" y2=\"" + num(base + 4) + "\" stroke=\"#999\"/>\n";
      text(xx, base + 24, grouped(k), 11, "middle", kMuted);
    }
  }
  out += "</g>\n";
  // The recomputed ops: red ticks just under the upper panel's axis, one per
  // pixel column at most.
  if (a.recomputedValues) {
    out += "<g class=\"recomputed-ops\" stroke=\"" +
           std::string(kRecomputedColor) + "\" stroke-width=\"1.5\">";
    title(grouped(a.recomputedValues) + " recomputed values (" +
          bytesText(a.recomputedBytes) +
          "): the red ticks are the ops that make them");
    out += "\n";
    double last = -1e9;
    for (int64_t k = 0; k < a.nOps; ++k) {
      if (!a.makesRecomputed[k])
        continue;
      double xx = x(k + 0.5);
      if (xx - last < 1.5)
        continue;
      last = xx;
      out += "<line x1=\"" + num(xx) + "\" x2=\"" + num(xx) + "\" y1=\"" +
             num(f.upperBottom + 2) + "\" y2=\"" + num(f.upperBottom + 11) +
             "\"/>\n";
    }
    out += "</g>\n";
  }
}

void PlanWriter::writeLegendAndAreas() {
  // The legend's entries, in stacking order (bottom first).
  struct Item {
    std::string key, label, valueText, tooltip;
    int64_t bytes;
    Swatch swatch;
    int kind; // 0: fixed band, 1: region, 2: saved, 3: other
  };
  std::vector<Item> items;
  size_t index = 0;
  for (const FixedCategory &c : plan.fixed) {
    if (c.bytes <= 0)
      continue;
    std::string label = c.label.empty() ? c.key : c.label;
    items.push_back({c.key, label, bytesText(c.bytes),
                     label + ": " + bytesText(c.bytes) + " (" +
                         grouped(c.bytes) + " bytes) for the whole step",
                     c.bytes, fixedSwatch(c.key, index++), 0});
  }
  items.push_back(
      {"activations_and_temporaries", "activations & temporaries (region)",
       bytesText(plan.temporariesRegion),
       "activations and temporaries: the arena's temporaries region, " +
           bytesText(plan.temporariesRegion) + " (" +
           grouped(plan.temporariesRegion) +
           " bytes); the areas in it are the bytes live at each op",
       plan.temporariesRegion, {kRegionFill, kInk}, 1});
  items.push_back({"saved_activations", "saved activations, peak",
                   bytesText(a.maxSaved),
                   "saved activations (forward values the backward pass "
                   "reads): at most " +
                       bytesText(a.maxSaved) + " (" + grouped(a.maxSaved) +
                       " bytes) live at one op; " + grouped(a.savedValues) +
                       " values",
                   a.maxSaved, {kSavedColors[0], kInk}, 2});
  items.push_back(
      {"temporaries", "other temporaries, peak", bytesText(a.maxOther),
       "other temporaries: at most " + bytesText(a.maxOther) + " (" +
           grouped(a.maxOther) + " bytes) live at one op; " +
           grouped(static_cast<int64_t>(plan.values.size()) - a.savedValues) +
           " values",
       a.maxOther, {kOtherColors[0], kInk}, 3});

  // The same entries as items (labels and bytes), then the recomputed.
  std::vector<LegendEntry> entries = legendEntries(plan, a);
  LegendLayout layout = legendLayout(entries, f.right - f.left);
  auto entryPos = [&](size_t i, double &ex, double &ey) {
    ex = f.left + layout.x[i];
    ey = f.legendTop + 17.0 * static_cast<double>(layout.row[i]);
  };
  auto legendText = [&](double ex, double ey, const LegendEntry &e) {
    out += "<text x=\"" + num(ex + 16) + "\" y=\"" + num(ey + 10) +
           "\" font-size=\"11\" fill=\"" + kInk + "\">";
    appendEscaped(out, e.label);
    out += " <tspan font-weight=\"600\">";
    appendEscaped(out, e.value);
    out += "</tspan></text>\n";
  };

  double bandsTop = y(static_cast<double>(a.fixedSum));
  std::vector<Column> cols = columns();
  int64_t below = 0;
  for (size_t n = 0; n < items.size(); ++n) {
    const Item &i = items[n];
    out += "<g class=\"category\" data-key=\"";
    appendEscaped(out, i.key);
    out += "\" data-bytes=\"" + integer(i.bytes) + "\">";
    title(i.tooltip);
    out += "\n";
    if (i.kind == 0) {
      double y0 = y(static_cast<double>(below));
      double y1 = y(static_cast<double>(below + i.bytes));
      out += "<rect class=\"area\" x=\"" + num(f.left) + "\" y=\"" +
             num(y1, 2) + "\" width=\"" + num(f.right - f.left) +
             "\" height=\"" + num(y0 - y1, 2) + "\" fill=\"" + i.swatch.fill +
             "\"/>\n";
      if (y0 - y1 >= 15) {
        std::string label = i.label + " " + i.valueText;
        bool right = bandLabelSide != 0;
        text(right ? f.right - 8 : f.left + 8, (y0 + y1) / 2 + 4, label, 11,
             right ? "end" : "start", i.swatch.text);
      }
      below += i.bytes;
    } else if (i.kind == 1) {
      double y1 = y(static_cast<double>(a.fixedSum + plan.temporariesRegion));
      out += "<rect class=\"area\" x=\"" + num(f.left) + "\" y=\"" +
             num(y1, 2) + "\" width=\"" + num(f.right - f.left) +
             "\" height=\"" + num(std::max(0.0, bandsTop - y1), 2) +
             "\" fill=\"" + kRegionFill + "\"/>\n";
    } else {
      // Saved: from the bands up to the saved bytes; other: from there up to
      // the total. The top edge forward, the bottom edge back.
      bool saved = i.kind == 2;
      std::string d = "M" + num(f.left) + " ";
      auto lower = [&](const Column &c) {
        return saved ? y(static_cast<double>(a.fixedSum))
                     : y(static_cast<double>(a.fixedSum + c.saved));
      };
      auto upper = [&](const Column &c) {
        return y(static_cast<double>(a.fixedSum +
                                     (saved ? c.saved : c.total)));
      };
      d += num(lower(cols.front()));
      for (const Column &c : cols)
        d += "V" + num(upper(c)) + "H" + num(c.x1);
      for (size_t k = cols.size(); k-- > 0;)
        d += "V" + num(lower(cols[k])) + "H" + num(cols[k].x0);
      d += "Z";
      out += "<path class=\"area\" d=\"" + d + "\" fill=\"" +
             (saved ? kSavedColors[0] : kOtherColors[0]) + "\"/>\n";
    }
    // The legend entry.
    double ex, ey;
    entryPos(n, ex, ey);
    out += "<rect x=\"" + num(ex) + "\" y=\"" + num(ey) +
           "\" width=\"11\" height=\"11\" rx=\"2\" fill=\"" + i.swatch.fill +
           "\"";
    if (i.kind == 1)
      out += std::string(" stroke=\"") + kRegionStroke +
             "\" stroke-dasharray=\"2 1.5\"";
    out += "/>\n";
    legendText(ex, ey, entries[n]);
    out += "</g>\n";
  }
  if (a.recomputedValues) {
    double ex, ey;
    entryPos(items.size(), ex, ey);
    out += "<g class=\"recomputed-legend\">";
    title("values rematerialisation recomputes in the backward pass: red "
          "ticks under the axis mark the ops that make them, red outlines "
          "their blocks in the arena");
    out += "<rect x=\"" + num(ex) + "\" y=\"" + num(ey) +
           "\" width=\"11\" height=\"11\" rx=\"2\" fill=\"" +
           kSavedColors[0] + "\" stroke=\"" + kRecomputedColor +
           "\" stroke-width=\"2\"/>\n";
    legendText(ex, ey, entries[items.size()]);
    out += "</g>\n";
  }
  // The region's outline and the bands' top edge, over the areas.
  double regionTop =
      y(static_cast<double>(a.fixedSum + plan.temporariesRegion));
  out += "<rect x=\"" + num(f.left) + "\" y=\"" + num(regionTop, 2) +
         "\" width=\"" + num(f.right - f.left) + "\" height=\"" +
         num(std::max(0.0, bandsTop - regionTop), 2) +
         "\" fill=\"none\" stroke=\"" + kRegionStroke +
         "\" stroke-dasharray=\"3 2\" pointer-events=\"none\"/>\n";
  out += "<line x1=\"" + num(f.left) + "\" x2=\"" + num(f.right) + "\" y1=\"" +
         num(f.upperBottom) + "\" y2=\"" + num(f.upperBottom) +
         "\" stroke=\"#555\"/>\n";
}

void PlanWriter::writeLines() {
  // Forward | backward.
  if (plan.firstBackward >= 0 && plan.firstBackward <= a.nOps) {
    double xx = x(static_cast<double>(plan.firstBackward));
    out += "<g class=\"forward-backward\" data-op-index=\"" +
           integer(plan.firstBackward) + "\">";
    title("the backward pass starts at op " + grouped(plan.firstBackward) +
          (plan.firstBackward < static_cast<int64_t>(plan.ops.size())
               ? ": " + plan.ops[plan.firstBackward]
               : std::string()));
    for (auto [y0, y1] : {std::pair(f.upperTop, f.upperBottom),
                          std::pair(f.mapTop, f.mapBottom)})
      out += "<line x1=\"" + num(xx) + "\" x2=\"" + num(xx) + "\" y1=\"" +
             num(y0) + "\" y2=\"" + num(y1) +
             "\" stroke=\"#444\" stroke-width=\"1.2\" "
             "stroke-dasharray=\"4 3\"/>\n";
    text(xx - 6, f.upperTop + 12, "\xE2\x86\x90 forward", 11, "end", "#444",
         halo());
    text(xx + 6, f.upperTop + 12, "backward \xE2\x86\x92", 11, "start",
         "#444", halo());
    out += "</g>\n";
  }
  // The budget and the planned peak, labelled at the right end: the higher
  // line's label above it, the lower one's below.
  bool budgetAbove = plan.budget >= plan.plannedPeak;
  double labelX = f.right - 6;
  double py = y(static_cast<double>(plan.plannedPeak));
  out += "<line class=\"planned-peak\" data-bytes=\"" +
         integer(plan.plannedPeak) + "\" x1=\"" + num(f.left) + "\" x2=\"" +
         num(f.right) + "\" y1=\"" + num(py, 2) + "\" y2=\"" + num(py, 2) +
         "\" stroke=\"" + kInk +
         "\" stroke-width=\"1.5\" stroke-dasharray=\"7 4\">";
  title("planned peak: " + bytesText(plan.plannedPeak) + " (" +
        grouped(plan.plannedPeak) +
        " bytes): the fixed categories and the temporaries' region");
  out += "</line>\n";
  text(labelX, plan.budget > 0 && budgetAbove ? py + 14 : py - 5,
       "planned peak " + bytesText(plan.plannedPeak), 11.5, "end", kInk,
       halo());
  if (plan.budget > 0) {
    double by = y(static_cast<double>(plan.budget));
    out += "<line class=\"budget\" data-bytes=\"" + integer(plan.budget) +
           "\" x1=\"" + num(f.left) + "\" x2=\"" + num(f.right) + "\" y1=\"" +
           num(by, 2) + "\" y2=\"" + num(by, 2) + "\" stroke=\"" +
           kBudgetColor + "\" stroke-width=\"2\">";
    title("--mem-budget: " + bytesText(plan.budget) + " (" +
          grouped(plan.budget) + " bytes)");
    out += "</line>\n";
    text(labelX, budgetAbove ? by - 5 : by + 14,
         "budget " + bytesText(plan.budget), 11.5, "end", kBudgetColor,
         (std::string(halo()) + " font-weight=\"600\"").c_str());
  }
}

void PlanWriter::writePeak() {
  if (a.peakOp < 0)
    return;
  double px = x(a.peakOp + 0.5);
  double py = y(static_cast<double>(a.fixedSum + a.liveAtPeak));
  out += "<g class=\"peak\" data-op-index=\"" + integer(a.peakOp) + "\">";
  title("peak of the activations and temporaries: " +
        bytesText(plan.peakLiveBytes) + " live at op " + grouped(a.peakOp) +
        ": " + plan.ops[a.peakOp]);
  out += "\n";
  for (auto [y0, y1] : {std::pair(py, f.upperBottom),
                        std::pair(f.mapTop, f.mapBottom)})
    out += "<line x1=\"" + num(px) + "\" x2=\"" + num(px) + "\" y1=\"" +
           num(y0) + "\" y2=\"" + num(y1) +
           "\" stroke=\"#111\" stroke-width=\"1\" "
           "stroke-dasharray=\"1.5 2\"/>\n";

  // The callout: a header, the op, and the largest values live there.
  double boxW = std::min(390.0, (f.right - f.left) * 0.5);
  double lineH = 14.5;
  double boxH = 10 + lineH * 2 + 4 +
                lineH * static_cast<double>(a.peakValues.size()) + 4;
  bool toLeft = px > (f.left + f.right) / 2;
  double bx = toLeft ? px - 28 - boxW : px + 28;
  bx = std::max(f.left + 4, std::min(bx, f.right - 4 - boxW));
  double bandsTop = y(static_cast<double>(a.fixedSum));
  double by = bandsTop + 10;
  if (by + boxH > f.upperBottom - 8)
    by = std::max(f.upperTop + 4, f.upperBottom - 8 - boxH);
  // The leader, from the dot to the box's nearer top corner.
  double cx = toLeft ? bx + boxW : bx;
  out += "<line x1=\"" + num(px) + "\" y1=\"" + num(py) + "\" x2=\"" +
         num(cx) + "\" y2=\"" + num(by) + "\" stroke=\"#111\"/>\n";
  out += "<rect x=\"" + num(bx) + "\" y=\"" + num(by) + "\" width=\"" +
         num(boxW) + "\" height=\"" + num(boxH) +
         "\" rx=\"4\" fill=\"#fff\" fill-opacity=\"0.95\" stroke=\"#333\"/>\n";
  out += "<circle cx=\"" + num(px) + "\" cy=\"" + num(py) +
         "\" r=\"4.5\" fill=\"#111\" stroke=\"#fff\" stroke-width=\"1.5\"/>\n";
  double tx = bx + 9, ty = by + 8 + 11;
  size_t chars = static_cast<size_t>((boxW - 18) / (11 * 0.57));
  out += "<text x=\"" + num(tx) + "\" y=\"" + num(ty) +
         "\" font-size=\"11.5\" font-weight=\"600\" fill=\"" + kInk +
         "\">peak: " + bytesText(plan.peakLiveBytes) +
         " of temporaries live at op " + grouped(a.peakOp) + "</text>\n";
  ty += lineH;
  text(tx, ty, truncated(plan.ops[a.peakOp], chars), 11, "start", kMuted);
  ty += lineH + 4;
  size_t whatChars = static_cast<size_t>((boxW - 18 - 84) / (11 * 0.57));
  for (size_t i : a.peakValues) {
    const PlannedValue &v = plan.values[i];
    out += "<rect x=\"" + num(tx) + "\" y=\"" + num(ty - 8.5) +
           "\" width=\"8\" height=\"8\" rx=\"1.5\" fill=\"" +
           (v.saved ? kSavedColors[0] : kOtherColors[0]) + "\"";
    if (v.recomputed)
      out += std::string(" stroke=\"") + kRecomputedColor +
             "\" stroke-width=\"1.5\"";
    out += "/>\n";
    text(tx + 76, ty, bytesText(v.bytes), 11, "end", kInk,
         " font-weight=\"600\"");
    text(tx + 84, ty, truncated(v.what, whatChars), 11, "start", kInk);
    ty += lineH;
  }
  out += "</g>\n";
}

void PlanWriter::writeMap() {
  out += "<g class=\"arena\">\n";
  double titleY = f.mapTop - 14;
  text(f.left, titleY,
       "Arena: temporaries region, one block per value (x: ops it is live, "
       "y: offset)",
       12, "start", kInk, " font-weight=\"600\"");
  double region = static_cast<double>(plan.temporariesRegion);
  double ry = mapY(region);
  out += "<rect x=\"" + num(f.left) + "\" y=\"" + num(ry, 2) + "\" width=\"" +
         num(f.right - f.left) + "\" height=\"" +
         num(std::max(0.0, f.mapBottom - ry), 2) + "\" fill=\"#f5f5f5\"/>\n";
  out += "<g class=\"axis\">\n";
  for (int64_t b = 0; b <= f.mapMax; b += f.mapStep) {
    double yy = mapY(static_cast<double>(b));
    if (b)
      out += "<line x1=\"" + num(f.left) + "\" x2=\"" + num(f.right) +
             "\" y1=\"" + num(yy, 2) + "\" y2=\"" + num(yy, 2) +
             "\" stroke=\"" + kGrid + "\" stroke-dasharray=\"2 3\"/>\n";
    text(f.left - 6, yy + 4, bytesText(b), 11, "end", kMuted);
  }
  out += "</g>\n";
  // The blocks, grouped by their look: saved or not (two shades each, so
  // neighbours part), recomputed ones outlined.
  double ppb = f.mapPxPerByte();
  for (int group = 0; group < 6; ++group) {
    bool recomputed = group >= 4;
    bool saved = recomputed ? group == 4 : group < 2;
    int shade = group & 1;
    std::string head = "<g class=\"values";
    head += saved ? " saved" : " other";
    if (recomputed)
      head += " recomputed";
    head += std::string("\" fill=\"") +
            (saved ? kSavedColors[shade] : kOtherColors[shade]) + "\"";
    if (recomputed)
      head += std::string(" stroke=\"") + kRecomputedColor +
              "\" stroke-width=\"1.2\"";
    head += ">\n";
    bool opened = false;
    for (size_t i = 0; i < plan.values.size(); ++i) {
      const PlannedValue &v = plan.values[i];
      if (v.recomputed != recomputed || v.saved != saved ||
          (!recomputed && static_cast<int>(i & 1) != shade))
        continue;
      if (!opened) {
        out += head;
        opened = true;
      }
      int64_t bytes = std::max<int64_t>(0, v.bytes);
      int64_t s = clampOp(v.start, a.nOps);
      int64_t e = clampOp(std::max(v.end, v.start), a.nOps);
      double x0 = x(static_cast<double>(s)), x1 = x(static_cast<double>(e + 1));
      double y1 = mapY(static_cast<double>(std::max<int64_t>(0, v.offset) +
                                           bytes));
      out += "<rect class=\"value\" x=\"" + num(x0) + "\" y=\"" + num(y1) +
             "\" width=\"" + num(x1 - x0) + "\" height=\"" +
             num(static_cast<double>(bytes) * ppb, 2) + "\"><title>";
      appendEscaped(out, v.what);
      out += " \xE2\x80\x94 " + bytesText(bytes) +
             " \xE2\x80\x94 live ops " + grouped(v.start) + "\xE2\x80\x93" +
             grouped(v.end);
      if (v.saved)
        out += " \xE2\x80\x94 saved for the backward pass";
      if (v.recomputed)
        out += " \xE2\x80\x94 recomputed";
      out += "</title></rect>\n";
    }
    if (opened)
      out += "</g>\n";
  }
  // The region's top, labelled.
  out += "<line x1=\"" + num(f.left) + "\" x2=\"" + num(f.right) + "\" y1=\"" +
         num(ry, 2) + "\" y2=\"" + num(ry, 2) + "\" stroke=\"" +
         kRegionStroke + "\" stroke-width=\"1.2\" stroke-dasharray=\"4 2\"/>\n";
  text(f.right - 6, ry - 5,
       "region " + bytesText(plan.temporariesRegion), 11, "end", "#8a5a1c",
       halo());
  out += "<line x1=\"" + num(f.left) + "\" x2=\"" + num(f.right) + "\" y1=\"" +
         num(f.mapBottom) + "\" y2=\"" + num(f.mapBottom) +
         "\" stroke=\"#555\"/>\n";
  text(f.right, f.mapBottom + 40, "schedule (op index) \xE2\x86\x92", 11,
       "end", kMuted);
  out += "</g>\n";
}

//===----------------------------------------------------------------------===//
// The document
//===----------------------------------------------------------------------===//

const char *kStyle =
    "svg.tcc-memory-plot rect.value:hover{stroke:#000;stroke-width:1.5px}\n"
    "svg.tcc-memory-plot g.category:hover .area{filter:brightness(1.08)}\n"
    "svg.tcc-memory-plot g.values.recomputed rect.value:hover{stroke:#000}\n";

Frame frameFor(const std::vector<MemoryPlan> &plans,
               const std::vector<Analysis> &analyses) {
  Frame f;
  f.width = plans.size() <= 1 ? 1560 : 780;
  f.right = f.width - 24;
  // The legend's rows: the largest any plan needs.
  double rows = 1;
  for (size_t p = 0; p < plans.size(); ++p) {
    std::vector<LegendEntry> probe = legendEntries(plans[p], analyses[p]);
    rows = std::max(rows, static_cast<double>(
                              legendLayout(probe, f.right - f.left).rows));
  }
  f.legendRows = rows;
  f.upperTop = f.legendTop + 17 * rows + 12;
  double upperH = 360, mapH = 210;
  f.upperBottom = f.upperTop + upperH;
  f.mapTop = f.upperBottom + 64;
  f.mapBottom = f.mapTop + mapH;
  f.height = f.mapBottom + 48;

  // The byte scale: the most any plan shows, with room above it for the
  // labels (at least 30 px), rounded up to a tick.
  int64_t top = int64_t(1) << 20, region = int64_t(1) << 20;
  for (const Analysis &a : analyses) {
    top = std::max(top, a.top);
    region = std::max(region, a.regionTop);
  }
  double needed = static_cast<double>(top) / (1.0 - 30.0 / upperH);
  f.upperStep = byteStep(static_cast<int64_t>(needed), 8);
  // Rounded up to half a step: the top tick need not be labelled.
  int64_t round = std::max<int64_t>(1, f.upperStep / 2);
  f.upperMax = (static_cast<int64_t>(needed) + round - 1) / round * round;
  double mapNeeded = static_cast<double>(region) / (1.0 - 18.0 / mapH);
  f.mapStep = byteStep(static_cast<int64_t>(mapNeeded), 4);
  f.mapMax = (static_cast<int64_t>(mapNeeded) + f.mapStep - 1) / f.mapStep *
             f.mapStep;
  return f;
}

} // namespace

std::string render(const std::vector<MemoryPlan> &plans, bool html) {
  std::vector<Analysis> analyses;
  size_t values = 0;
  for (const MemoryPlan &p : plans) {
    analyses.push_back(analyse(p));
    values += p.values.size();
  }
  Frame f = frameFor(plans, analyses);
  std::string out;
  out.reserve(4096 + values * 200);
  std::string pageTitle = "tcc memory plan";
  if (!plans.empty() && !plans[0].title.empty())
    pageTitle += ": " + plans[0].title;
  for (size_t p = 1; p < plans.size(); ++p)
    if (!plans[p].title.empty())
      pageTitle += " | " + plans[p].title;

  if (html) {
    out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
           "charset=\"utf-8\">\n<meta name=\"viewport\" "
           "content=\"width=device-width, initial-scale=1\">\n<title>";
    appendEscaped(out, pageTitle);
    out += "</title>\n<style>\n";
    out += std::string("html,body{margin:0;background:#fff;color:#222;"
                       "font-family:") +
           kFont + "}\n";
    out += "body{padding:8px 14px}\n"
           "header{display:flex;align-items:baseline;gap:14px;"
           "margin:0 0 4px}\n"
           "h1{font-size:16px;margin:0;font-weight:650}\n"
           "header p{font-size:12px;color:#666;margin:0}\n"
           ".plots{display:flex;gap:14px;align-items:flex-start}\n"
           ".plots figure{margin:0;flex:1 1 0;min-width:0}\n"
           "svg.tcc-memory-plot{display:block;width:100%;height:auto;"
           "max-height:calc(100vh - 44px)}\n";
    out += kStyle;
    bool device = std::any_of(plans.begin(), plans.end(), [](const MemoryPlan &p) { return p.device; });
    out += "</style>\n</head>\n<body>\n<header><h1>tcc memory plan</h1><p>";
    out += device ? "Device memory" : "Memory (the CPU step's arena)";
    out += " over one training step's schedule, stacked by category";
    if (plans.size() > 1)
      out += "; the plans share one byte scale";
    out += ". Hover an area or an arena block for its size and ONNX "
           "node.</p></header>\n<div class=\"plots\">\n";
    for (size_t p = 0; p < plans.size(); ++p) {
      out += "<figure>\n";
      PlanWriter(out, plans[p], analyses[p], f).write(false, 0);
      out += "</figure>\n";
    }
    if (plans.empty())
      out += "<p>No plan.</p>\n";
    out += "</div>\n</body>\n</html>\n";
    return out;
  }

  double total =
      f.width * static_cast<double>(std::max<size_t>(1, plans.size()));
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(total) +
         "\" height=\"" + num(f.height) + "\" viewBox=\"0 0 " + num(total) +
         " " + num(f.height) + "\" font-family=\"" + kFont + "\">\n<title>";
  appendEscaped(out, pageTitle);
  out += "</title>\n<style>\n";
  out += kStyle;
  out += "</style>\n<rect width=\"" + num(total) + "\" height=\"" +
         num(f.height) + "\" fill=\"#fff\"/>\n";
  for (size_t p = 0; p < plans.size(); ++p)
    PlanWriter(out, plans[p], analyses[p], f)
        .write(true, f.width * static_cast<double>(p));
  out += "</svg>\n";
  return out;
}

} // namespace mlir::tcc::plot
