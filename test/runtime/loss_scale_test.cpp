// Standalone test of runtime/loss_scale.h (tcc-run's loss scaler) against
// the documented behaviour of PyTorch's torch.cuda.amp.GradScaler
// (torch/amp/grad_scaler.py, `_amp_update_scale_` in
// aten/src/ATen/native/cuda/AmpKernels.cu):
//
//   found_inf:  scale *= backoff_factor; growth_tracker = 0
//   otherwise:  successful = growth_tracker + 1
//               if successful == growth_interval:
//                 scale *= growth_factor (if finite in float32);
//                 growth_tracker = 0
//               else: growth_tracker = successful
//
// with defaults init_scale=2**16, growth_factor=2, backoff_factor=0.5,
// growth_interval=2000. (GradScaler itself needs CUDA, so the reference is
// the rule above, reimplemented in `reference` below, plus hand-worked
// sequences.) Prints "N passed, M failed" last; exits non-zero on any
// failure.
//
//   g++ -std=c++17 -O2 -fno-exceptions -Wall -Wextra -I/work/main
//       test/runtime/loss_scale_test.cpp -o /tmp/ls && /tmp/ls
#include "runtime/loss_scale.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using tcc::LossScaler;

static int g_pass = 0, g_fail = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (cond) {                                                                \
      ++g_pass;                                                                \
    } else {                                                                   \
      ++g_fail;                                                                \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
    }                                                                          \
  } while (0)

#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    double a_ = static_cast<double>(a), b_ = static_cast<double>(b);           \
    if (a_ == b_) {                                                            \
      ++g_pass;                                                                \
    } else {                                                                   \
      ++g_fail;                                                                \
      std::printf("FAIL %s:%d: %s == %s (%.17g vs %.17g)\n", __FILE__,         \
                  __LINE__, #a, #b, a_, b_);                                   \
    }                                                                          \
  } while (0)

/// GradScaler.update()'s rule, written out from its documentation, with the
/// scale held as a float32 as PyTorch holds it.
struct Reference {
  float scale;
  int64_t tracker = 0;
  double growth, backoff;
  int64_t interval;
  void update(bool foundInf) {
    if (foundInf) {
      scale = static_cast<float>(scale * backoff);
      tracker = 0;
      return;
    }
    int64_t successful = tracker + 1;
    if (successful == interval) {
      double grown = static_cast<double>(scale) * growth;
      if (grown <= FLT_MAX)
        scale = static_cast<float>(grown);
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
};

static void testDefaults() {
  LossScaler s = LossScaler::dynamic();
  CHECK(s.enabled());
  CHECK(s.isDynamic());
  CHECK(s.mode() == LossScaler::Dynamic);
  CHECK_EQ(s.scale(), 65536.0);
  CHECK_EQ(s.config().growthFactor, 2.0);
  CHECK_EQ(s.config().backoffFactor, 0.5);
  CHECK_EQ(s.config().growthInterval, 2000);
  CHECK_EQ(s.growthTracker(), 0);
  CHECK_EQ(s.skipped(), 0);
  CHECK(s.describe() == "dynamic");
}

static void testBackoff() {
  LossScaler s = LossScaler::dynamic();
  s.update(true);
  CHECK_EQ(s.scale(), 32768.0);
  CHECK_EQ(s.skipped(), 1);
  CHECK_EQ(s.growthTracker(), 0);
  s.update(true);
  CHECK_EQ(s.scale(), 16384.0);
  CHECK_EQ(s.skipped(), 2);
  // Clean steps do not change the scale before the interval.
  s.update(false);
  CHECK_EQ(s.scale(), 16384.0);
  CHECK_EQ(s.growthTracker(), 1);
  CHECK_EQ(s.skipped(), 2);
}

static void testGrowthExactlyAtInterval() {
  LossScaler s = LossScaler::dynamic();
  for (int i = 1; i < 2000; ++i) {
    s.update(false);
    if (s.scale() != 65536.0) {
      CHECK(!"grew before growth_interval clean steps");
      std::printf("  grew after %d clean steps\n", i);
      return;
    }
  }
  CHECK_EQ(s.growthTracker(), 1999);
  CHECK_EQ(s.scale(), 65536.0);
  s.update(false); // the 2000th
  CHECK_EQ(s.scale(), 131072.0);
  CHECK_EQ(s.growthTracker(), 0);
  // And again after another full interval, not before.
  for (int i = 0; i < 1999; ++i)
    s.update(false);
  CHECK_EQ(s.scale(), 131072.0);
  s.update(false);
  CHECK_EQ(s.scale(), 262144.0);
  CHECK_EQ(s.skipped(), 0);
}

static void testInfResetsCounter() {
  LossScaler::Config c;
  c.growthInterval = 5;
  LossScaler s = LossScaler::dynamic(c);
  for (int i = 0; i < 4; ++i)
    s.update(false);
  CHECK_EQ(s.growthTracker(), 4);
  s.update(true); // one short of growing: backs off and restarts the count
  CHECK_EQ(s.scale(), 32768.0);
  CHECK_EQ(s.growthTracker(), 0);
  for (int i = 0; i < 4; ++i)
    s.update(false);
  CHECK_EQ(s.scale(), 32768.0); // 4 clean steps since the inf: no growth
  s.update(false);               // the 5th
  CHECK_EQ(s.scale(), 65536.0);
  CHECK_EQ(s.growthTracker(), 0);
  CHECK_EQ(s.skipped(), 1);
}

static void testCustomFactors() {
  LossScaler::Config c;
  c.initScale = 1024;
  c.growthFactor = 4;
  c.backoffFactor = 0.25;
  c.growthInterval = 1; // grows after every clean step
  LossScaler s = LossScaler::dynamic(c);
  CHECK_EQ(s.scale(), 1024.0);
  s.update(false);
  CHECK_EQ(s.scale(), 4096.0);
  s.update(true);
  CHECK_EQ(s.scale(), 1024.0);
  s.update(false);
  CHECK_EQ(s.scale(), 4096.0);
}

static void testNoGrowthPastFloat32() {
  // GradScaler keeps the scale in a float32 tensor and grows it only if the
  // result is finite: 2**127 stays 2**127.
  LossScaler::Config c;
  c.initScale = std::ldexp(1.0, 126);
  c.growthInterval = 1;
  LossScaler s = LossScaler::dynamic(c);
  s.update(false);
  CHECK_EQ(s.scale(), std::ldexp(1.0, 127));
  s.update(false);
  CHECK_EQ(s.scale(), std::ldexp(1.0, 127));
  CHECK_EQ(s.growthTracker(), 0);
  s.update(true);
  CHECK_EQ(s.scale(), std::ldexp(1.0, 126));
}

static void testAgainstReference() {
  // A pseudo-random sequence of clean and non-finite steps (about one in
  // 40 non-finite), against the reference rule, with a short interval so
  // that both growth and backoff happen many times.
  LossScaler::Config c;
  c.growthInterval = 7;
  LossScaler s = LossScaler::dynamic(c);
  Reference r{65536.0f, 0, 2.0, 0.5, 7};
  uint64_t x = 0x853c49e6748fea9bull;
  int64_t infs = 0, mismatches = 0, grew = 0, last = 65536;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    bool inf = (x >> 33) % 40 == 0;
    infs += inf;
    s.update(inf);
    r.update(inf);
    if (s.scale() != static_cast<double>(r.scale) ||
        s.growthTracker() != r.tracker)
      ++mismatches;
    if (s.scale() > last)
      ++grew;
    last = static_cast<int64_t>(std::fmin(s.scale(), 1e18));
  }
  CHECK_EQ(mismatches, 0);
  CHECK_EQ(s.skipped(), infs);
  CHECK(grew > 10);
  CHECK(infs > 10);
}

static void testStaticAndOff() {
  LossScaler off = LossScaler::off();
  CHECK(!off.enabled());
  CHECK(off.mode() == LossScaler::Off);
  CHECK_EQ(off.scale(), 1.0);
  off.update(true);
  off.update(false);
  CHECK_EQ(off.scale(), 1.0);
  CHECK_EQ(off.skipped(), 1); // skipped steps are counted in every mode
  CHECK(off.describe() == "off");

  LossScaler st = LossScaler::fixed(1024);
  CHECK(st.enabled());
  CHECK(!st.isDynamic());
  CHECK(st.mode() == LossScaler::Static);
  CHECK_EQ(st.scale(), 1024.0);
  for (int i = 0; i < 5000; ++i)
    st.update(false);
  CHECK_EQ(st.scale(), 1024.0);
  st.update(true);
  CHECK_EQ(st.scale(), 1024.0);
  CHECK_EQ(st.growthTracker(), 0);
  CHECK_EQ(st.skipped(), 1);
  CHECK(st.describe() == "1024");
}

static void testParse() {
  LossScaler s;
  CHECK(tcc::parseLossScale("dynamic", s).empty());
  CHECK(s.isDynamic() && s.scale() == 65536.0);
  CHECK(tcc::parseLossScale("off", s).empty());
  CHECK(!s.enabled() && s.scale() == 1.0);
  CHECK(tcc::parseLossScale("128", s).empty());
  CHECK(s.mode() == LossScaler::Static && s.scale() == 128.0);
  CHECK(tcc::parseLossScale("0.5", s).empty());
  CHECK(s.mode() == LossScaler::Static && s.scale() == 0.5);
  CHECK(tcc::parseLossScale("1e3", s).empty());
  CHECK(s.scale() == 1000.0);
  for (const char *bad : {"", "0", "-1", "nan", "inf", "1e400", "1e39",
                          "dyn", "Dynamic", "12x", " 1"}) {
    LossScaler before = LossScaler::fixed(7);
    LossScaler t = before;
    std::string err = tcc::parseLossScale(bad, t);
    if (err.empty() || t.scale() != 7.0) {
      CHECK(!"a bad --loss-scale value was accepted");
      std::printf("  value '%s'\n", bad);
    } else {
      CHECK(err.find("--loss-scale") != std::string::npos);
    }
  }
}

static void testStateRoundTrip() {
  LossScaler::Config c;
  c.growthInterval = 3;
  LossScaler a = LossScaler::dynamic(c);
  a.update(true);
  a.update(false);
  a.update(false);
  LossScaler::State saved = a.state();
  CHECK_EQ(saved.mode, LossScaler::Dynamic);
  CHECK_EQ(saved.scale, 32768.0);
  CHECK_EQ(saved.growthTracker, 2);
  CHECK_EQ(saved.skipped, 1);

  // A fresh scaler restored from the state continues exactly as `a`.
  LossScaler b = LossScaler::dynamic(c);
  b.restore(saved);
  CHECK_EQ(b.scale(), a.scale());
  CHECK_EQ(b.growthTracker(), a.growthTracker());
  CHECK_EQ(b.skipped(), a.skipped());
  const bool seq[] = {false, true, false, false, false, true, false};
  for (bool inf : seq) {
    a.update(inf);
    b.update(inf);
  }
  CHECK_EQ(b.scale(), a.scale());
  CHECK_EQ(b.growthTracker(), a.growthTracker());
  CHECK_EQ(b.skipped(), a.skipped());
  CHECK_EQ(a.skipped(), 3);

  // restoreSkipped keeps the mode and scale, takes the count only.
  LossScaler st = LossScaler::fixed(8);
  st.restoreSkipped(saved);
  CHECK(st.mode() == LossScaler::Static);
  CHECK_EQ(st.scale(), 8.0);
  CHECK_EQ(st.skipped(), 1);
}

int main() {
  testDefaults();
  testBackoff();
  testGrowthExactlyAtInterval();
  testInfResetsCounter();
  testCustomFactors();
  testNoGrowthPastFloat32();
  testAgainstReference();
  testStaticAndOff();
  testParse();
  testStateRoundTrip();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
