//===- resume_flags.cpp - the training flags a checkpoint remembers -------===//

#include "runtime/lib/resume_flags.h"

#include "runtime/lib/text.h"
#include "runtime/posix_io.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>

namespace tcc::run {

namespace {

/// The remembered flags, in the file's order.
const char *const kRemembered[] = {
    "--steps",    "--accum",     "--lr",        "--lr-schedule",  "--warmup",
    "--min-lr",   "--beta1",     "--beta2",     "--eps",          "--weight-decay",
    "--no-decay", "--momentum",  "--nesterov",  "--clip-norm",    "--loss-scale",
    "--data-order", "--labels",
};

std::string real(double v) { return format("%.17g", v); }

/// The value `flag` has in `opts`, as the record writes it; "" when the
/// record leaves it out.
std::string valueOf(const Options &o, const std::string &flag) {
  if (flag == "--steps")
    return std::to_string(o.steps);
  if (flag == "--accum")
    return std::to_string(o.accum);
  if (flag == "--lr")
    return real(o.lr);
  if (flag == "--lr-schedule")
    return o.cosine ? "cosine" : "constant";
  if (flag == "--warmup")
    return std::to_string(o.warmup);
  if (flag == "--min-lr")
    return real(o.minLr);
  if (flag == "--beta1")
    return real(o.beta1);
  if (flag == "--beta2")
    return real(o.beta2);
  if (flag == "--eps")
    return real(o.eps);
  if (flag == "--weight-decay")
    return o.haveWeightDecay ? real(o.weightDecay) : "";
  if (flag == "--no-decay") {
    std::string all;
    for (const std::string &g : o.noDecay)
      all += (all.empty() ? "" : ",") + g;
    return all;
  }
  if (flag == "--momentum")
    return real(o.momentum);
  if (flag == "--nesterov")
    return o.nesterov ? "on" : "off";
  if (flag == "--clip-norm")
    return real(o.clipNorm);
  if (flag == "--loss-scale") {
    if (!o.haveLossScale)
      return "";
    return o.lossScaler.isDynamic() ? "dynamic"
           : o.lossScaler.enabled() ? real(o.lossScaler.scale())
                                    : "off";
  }
  if (flag == "--data-order")
    return o.sequential ? "sequential" : "random";
  if (flag == "--labels")
    return o.labels;
  return "";
}

bool remembered(const std::string &flag) {
  for (const char *f : kRemembered)
    if (flag == f)
      return true;
  return false;
}

} // namespace

std::string flagsPath(const std::string &dir) { return io::joinPath(dir, "training-flags"); }

std::string recordFlags(const Options &opts) {
  std::string text = "# The flags the checkpoint beside this file was trained with. tcc-run\n"
                     "# --resume takes each one that is not given again.\n";
  for (const char *f : kRemembered) {
    std::string v = valueOf(opts, f);
    if (!v.empty())
      text += std::string(f) + " " + v + "\n";
  }
  return text;
}

std::string writeFlags(const std::string &dir, const std::string &text) {
  const std::string path = flagsPath(dir);
  io::AtomicFile out;
  auto fail = [&](const char *what) {
    int err = errno;
    out.discard();
    return "cannot write " + path + (what[0] ? std::string(" (") + what + ")" : std::string()) +
           ": " + io::errnoText(err);
  };
  if (!out.createBeside(path))
    return fail("");
  if (!io::writeAll(out.fd(), text.data(), text.size()))
    return fail("");
  if (const char *what = out.commit(path, dir))
    return fail(what);
  return "";
}

std::string applyRecordedFlags(
    const std::string &dir, Options &opts,
    const std::function<std::string(const std::string &, const std::string &)> &apply,
    std::vector<std::string> &notes) {
  const std::string path = flagsPath(dir);
  int fd = io::openRetry(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return ""; // an older tcc-run's checkpoint: the command line only
    return "cannot read " + path + ": " + io::errnoText(errno);
  }
  io::FdCloser closer(fd);
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return "cannot read " + path + ": " + io::errnoText(errno);
    if (n == 0)
      break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (1u << 20))
      return path + " is not a training-flags file (over 1 MiB)";
  }
  std::string taken;
  size_t lineNo = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++lineNo;
    if (line.empty() || line[0] == '#')
      continue;
    size_t space = line.find(' ');
    std::string flag = line.substr(0, space);
    std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (!remembered(flag) || value.empty())
      return path + " line " + std::to_string(lineNo) + ": '" + line +
             "' is not a remembered training flag; remove the line (or the file, to resume "
             "from the command line's flags only)";
    if (opts.wasGiven(flag.c_str())) {
      std::string now = valueOf(opts, flag);
      if (now != value)
        notes.push_back(flag + " " + (now.empty() ? "(default)" : now) +
                        " overrides the checkpoint's " + flag + " " + value);
      continue;
    }
    std::string err;
    if (flag == "--nesterov") {
      if (value != "on" && value != "off")
        err = "--nesterov is on or off";
      opts.nesterov = value == "on";
    } else {
      if (flag == "--no-decay")
        opts.noDecay.clear();
      err = apply(flag, value);
    }
    if (!err.empty())
      return path + " line " + std::to_string(lineNo) + ": " + err;
    if (valueOf(Options(), flag) != value)
      taken += (taken.empty() ? "" : ", ") + flag + " " + value;
  }
  if (!taken.empty())
    notes.insert(notes.begin(), "resuming with the checkpoint's " + taken);
  return "";
}

} // namespace tcc::run
