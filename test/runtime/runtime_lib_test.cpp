// The runtime library under tcc-run (runtime/lib) on its own, without the
// CLI: the step loader, the arena and its host mirror, feeds and dumps, and
// the text helpers.
//
//   runtime-lib-test FAKE.so CPU.so WORKDIR TOKENS.bin
//
// CPU.so is the demo GPT compiled with --target=cpu; FAKE.so is the fake
// device step (test/runtime/fake_device_step.c), which forwards to CPU.so
// (TCC_FAKE_DEVICE_STEP) but keeps its arena where the caller cannot touch
// it. The two must agree byte for byte: the initial parameters read back
// through the device copies, and one micro-step's loss and gradients. The
// trainer (runTraining, what tcc-run runs) then trains both on TOKENS.bin:
// the same losses and parameters, byte for byte; a run checkpointed and
// resumed ends where the uninterrupted one does. Prints
// "N passed, M failed" last; exits non-zero on any failure.
#include "runtime/lib/arena.h"
#include "runtime/lib/feeds.h"
#include "runtime/lib/step_library.h"
#include "runtime/lib/tensor_values.h"
#include "runtime/lib/text.h"
#include "runtime/lib/trainer.h"
#include "runtime/posix_io.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace tcc::run;

static int g_pass = 0, g_fail = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (cond) {                                                                \
      ++g_pass;                                                                \
    } else {                                                                   \
      ++g_fail;                                                                \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
      std::printf(__VA_ARGS__);                                                \
      std::printf("\n");                                                       \
    }                                                                          \
  } while (0)

static bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

/// The file's bytes, or false where it cannot be read.
static bool slurp(const std::string &path, std::string &out) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return false;
  out.clear();
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
    out.append(buf, n);
  std::fclose(f);
  return true;
}

/// One micro-step of `step` on all-zero inputs (token 0 everywhere, valid for
/// the demo); the loss and the first gradient come back in `loss`, `grad`.
static std::string microStep(const Step &step, Arena &mem, double &loss, std::vector<char> &grad) {
  const tcc_step_info &info = *step.info;
  for (int32_t i = 0; i < info.num_inputs; ++i)
    std::memset(mem.host + info.inputs[i].offset, 0, info.inputs[i].bytes);
  std::string err = mem.copyIn(info.inputs, info.num_inputs);
  if (!err.empty())
    return err;
  if (int rc = step.microStep(mem.stepArena(), 1.0))
    return "micro_step returned " + std::to_string(rc);
  const tcc_tensor_desc *lossDesc = nullptr;
  for (int32_t i = 0; i < info.num_outputs; ++i)
    if (info.outputs[i].rank == 0)
      lossDesc = &info.outputs[i];
  if (!lossDesc)
    return "the step has no scalar output";
  if (!(err = mem.copyOut(*lossDesc)).empty() || !(err = mem.copyOut(info.grads[0])).empty())
    return err;
  loss = elementAsDouble(mem.host + lossDesc->offset, lossDesc->dtype);
  grad.assign(mem.host + info.grads[0].offset, mem.host + info.grads[0].offset + info.grads[0].bytes);
  return "";
}

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: runtime-lib-test FAKE.so CPU.so WORKDIR TOKENS.bin\n");
    return 2;
  }
  const std::string fakePath = argv[1], cpuPath = argv[2], work = argv[3], tokens = argv[4];
  ::setenv("TCC_FAKE_DEVICE_STEP", cpuPath.c_str(), 1);

  // The loader refuses what is not a step library, naming it.
  {
    Step s;
    std::string err = loadStep(work + "/missing.so", s);
    CHECK(contains(err, "missing.so does not exist"), "%s", err.c_str());
    std::string text = work + "/text.so";
    FILE *f = std::fopen(text.c_str(), "w");
    std::fputs("not a library\n", f);
    std::fclose(f);
    err = loadStep(text, s);
    CHECK(!err.empty() && contains(err, "text.so"), "%s", err.c_str());
  }

  // Both steps load; the fake one has a device arena.
  Step cpu, fake;
  std::string err = loadStep(cpuPath, cpu);
  CHECK(err.empty(), "%s", err.c_str());
  err = loadStep(fakePath, fake);
  CHECK(err.empty(), "%s", err.c_str());
  if (!cpu.info || !fake.info) {
    std::printf("%d passed, %d failed\n", g_pass, g_fail);
    return 1;
  }
  CHECK(!cpu.device && fake.device && fake.deviceOpen && fake.copyOut, "device %d/%d", cpu.device, fake.device);
  CHECK(fake.info->num_params == cpu.info->num_params && cpu.info->num_params > 0, "%d params",
        cpu.info->num_params);

  // The arenas: the device one's parameters, read back through its copies,
  // are the CPU step's.
  tcc::dp::World world; // one process
  Arena cpuMem, fakeMem;
  err = prepareArena(cpu, cpuMem, world, false);
  CHECK(err.empty(), "%s", err.c_str());
  err = prepareArena(fake, fakeMem, world, false);
  CHECK(err.empty(), "%s", err.c_str());
  CHECK(fakeMem.dev && fakeMem.stepArena() == fakeMem.dev && cpuMem.stepArena() == cpuMem.host, "arenas");
  err = fakeMem.copyOutParamsAndState(true);
  CHECK(err.empty(), "%s", err.c_str());
  int same = 0;
  for (int32_t i = 0; i < cpu.info->num_params; ++i) {
    const tcc_tensor_desc &p = cpu.info->params[i], &q = fake.info->params[i];
    same += p.bytes == q.bytes && std::memcmp(cpuMem.host + p.offset, fakeMem.host + q.offset, p.bytes) == 0;
  }
  CHECK(same == cpu.info->num_params, "%d of %d parameters equal", same, cpu.info->num_params);

  // One micro-step through each: the same loss and gradient bits.
  double lossCpu = 0, lossFake = 0;
  std::vector<char> gCpu, gFake;
  err = microStep(cpu, cpuMem, lossCpu, gCpu);
  CHECK(err.empty(), "%s", err.c_str());
  err = microStep(fake, fakeMem, lossFake, gFake);
  CHECK(err.empty(), "%s", err.c_str());
  CHECK(std::isfinite(lossCpu) && lossCpu > 0 && lossCpu == lossFake, "loss %.9g vs %.9g", lossCpu, lossFake);
  CHECK(!gCpu.empty() && gCpu == gFake, "the first gradient differs (%zu bytes)", gCpu.size());

  // A tensor dumped as .npy feeds back the same bytes; a wrong dtype is
  // refused, naming both.
  const tcc_tensor_desc &p0 = cpu.info->params[0];
  err = dumpTensor(work + "/" + fileNameFor(p0.name), p0, cpuMem.host);
  CHECK(err.empty(), "%s", err.c_str());
  std::vector<char> back(p0.bytes);
  err = feedInputTo(work, p0, back.data());
  CHECK(err.empty() && std::memcmp(back.data(), cpuMem.host + p0.offset, p0.bytes) == 0, "%s", err.c_str());
  tcc_tensor_desc wrong = p0;
  wrong.dtype = TCC_DTYPE_I64;
  err = feedInputTo(work, wrong, back.data());
  CHECK(contains(err, "does not match") && contains(err, "int64"), "%s", err.c_str());
  err = feedInputTo(work + "/nowhere", p0, back.data());
  CHECK(contains(err, "is missing"), "%s", err.c_str());

  // Budgets, meanings, text.
  tcc_step_info over = *cpu.info;
  over.mem_budget = over.arena_bytes - 1;
  CHECK(contains(checkMemory(over), "exceeds the budget"), "%s", checkMemory(over).c_str());
  CHECK(stepErrorMeaning(1) && !stepErrorMeaning(7), "meanings");
  CHECK(formatBytes(1536) == "1.5 KiB", "%s", formatBytes(1536).c_str());
  CHECK(formatBytes(10737418240ULL) == "10 GiB", "%s", formatBytes(10737418240ULL).c_str());
  CHECK(formatBytes(100) == "100 bytes", "%s", formatBytes(100).c_str());
  CHECK(formatCount(12345) == "12.3k", "%s", formatCount(12345).c_str());
  CHECK(formatDuration(125) == "2m05s" && formatDuration(NAN) == "?", "%s", formatDuration(125).c_str());
  CHECK(jsonNumber(NAN) == "null" && jsonNumber(0.5) == "0.5", "%s", jsonNumber(0.5).c_str());
  CHECK(halfToDouble(0x3c00) == 1.0 && halfToDouble(0xc000) == -2.0 && std::isinf(halfToDouble(0x7c00)),
        "halves");

  // The trainer, through both steps: 3 AdamW steps of 2 micro-batches. (The
  // fake step holds one device arena at a time: close this one.)
  CHECK(fake.deviceClose(fakeMem.dev) == 0, "device_close");
  fakeMem.dev = nullptr;
  auto options = [&](const Step &s, const std::string &dump) {
    Options o;
    o.step = s.path;
    o.haveData = true;
    o.data = tokens;
    o.steps = 3;
    o.accum = 2;
    o.seed = 5;
    o.quiet = true;
    o.haveDump = true;
    o.dump = work + "/" + dump;
    o.haveLossScale = true; // the fake step would scale dynamically
    o.lossScaler = tcc::LossScaler::off();
    return o;
  };
  auto sameFile = [&](const std::string &a, const std::string &b, const char *file) {
    std::string x, y;
    return slurp(work + "/" + a + "/" + file, x) && slurp(work + "/" + b + "/" + file, y) && !x.empty() &&
           x == y;
  };
  auto sameParams = [&](const std::string &a, const std::string &b) {
    int n = 0;
    for (int32_t i = 0; i < cpu.info->num_params; ++i)
      n += sameFile(a, b, ("params/" + fileNameFor(cpu.info->params[i].name)).c_str());
    return n == cpu.info->num_params;
  };
  Options oc = options(cpu, "train-cpu"), of = options(fake, "train-fake");
  CHECK(runTraining(oc, cpu, world, false) == 0, "the CPU step's run failed");
  CHECK(runTraining(of, fake, world, false) == 0, "the fake device step's run failed");
  CHECK(sameFile("train-cpu", "train-fake", "losses.npy") && sameParams("train-cpu", "train-fake"),
        "the two steps' runs differ");
  // Checkpointed after 2 steps and resumed to 3: the uninterrupted run's bytes.
  Options first = options(fake, "train-first");
  first.steps = 2;
  first.checkpoint = work + "/ck";
  CHECK(runTraining(first, fake, world, false) == 0, "the checkpointed run failed");
  Options resumed = options(fake, "train-resumed");
  resumed.resume = work + "/ck";
  CHECK(runTraining(resumed, fake, world, false) == 0, "the resumed run failed");
  CHECK(sameParams("train-fake", "train-resumed"), "the resumed run ends elsewhere");
  // A missing data file is an error (exit code 1), before any output.
  Options bad = options(cpu, "train-bad");
  bad.data = work + "/missing.bin";
  CHECK(runTraining(bad, cpu, world, false) == 1, "a missing data file did not fail");
  std::string left;
  CHECK(!slurp(work + "/train-bad/losses.npy", left), "it left a dump");

  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
