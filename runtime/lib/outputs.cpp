//===- outputs.cpp - where a run writes, checked before it starts ---------===//

#include "runtime/lib/outputs.h"
#include "runtime/lib/trainer.h"

#include "runtime/checkpoint.h"
#include "runtime/lib/arena.h"
#include "runtime/lib/feeds.h"
#include "runtime/lib/report.h"
#include "runtime/lib/tensor_values.h"
#include "runtime/lib/text.h"
#include "runtime/loss_scale.h"
#include "runtime/npy.h"
#include "runtime/onnx_save.h"
#include "runtime/posix_io.h"
#include "runtime/step_table.h"
#include "runtime/tensorboard.h"
#include "runtime/trace.h"
#include "runtime/train_data.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::run {

using tcc::io::errnoText;
using tcc::io::joinPath;

//===----------------------------------------------------------------------===//
// Output locations
//===----------------------------------------------------------------------===//

/// Creates `dir` if needed and checks that a file can be created in it (by
/// creating one: access() says yes to root even on a read-only file system).
std::string probeDir(const std::string &dir, const char *what) {
  std::string err = tcc::io::makeDirs(dir);
  if (!err.empty())
    return err + " (for the " + what + ")";
  std::string tmpl = joinPath(dir, ".tcc-run-probe.XXXXXX");
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    return "the " + std::string(what) + " " + dir + " is not writable: " +
           errnoText(errno);
  ::close(fd);
  ::unlink(name.data());
  return "";
}

/// Checks that `path` can be written as a file: its directory (created if
/// needed) is writable and `path` is not a directory.
std::string probeFile(const std::string &path, const char *what) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return "the " + std::string(what) + " " + path + " is a directory";
  // A device, FIFO or socket is not a file to replace (the output is
  // written beside and renamed over the path, which would replace
  // /dev/null itself), and opening a FIFO would block.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return "the " + std::string(what) + " " + path + " is not a regular file (" +
           (S_ISFIFO(st.st_mode)  ? "a FIFO"
            : S_ISCHR(st.st_mode) ? "a character device"
            : S_ISBLK(st.st_mode) ? "a block device"
            : S_ISSOCK(st.st_mode) ? "a socket"
                                   : "not a file") +
           "); tcc-run writes a new file there, so give the path of a regular file or "
           "of none";
  std::string dir = tcc::io::dirOf(path);
  std::string err = probeDir(dir, "directory");
  if (!err.empty())
    return "cannot write the " + std::string(what) + " " + path + ": " + err;
  return "";
}

//===----------------------------------------------------------------------===//
// Outputs that must not overwrite inputs or each other
//===----------------------------------------------------------------------===//

/// What a path names: its device and inode when it exists (links and other
/// spellings of it compare equal), else its absolute spelling under its
/// parent's real path.
struct PathId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string spelled;
};

PathId pathId(const std::string &path) {
  PathId id;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    return id;
  }
  std::string dir = tcc::io::dirOf(path), base = path.substr(path.find_last_of('/') + 1);
  char real[PATH_MAX];
  id.spelled = (::realpath(dir.c_str(), real) ? std::string(real) : dir) + "/" + base;
  return id;
}

/// `path` as an absolute path through real folders: the real path of its
/// deepest existing ancestor, then the components that do not exist yet.
std::string absoluteSpelling(const std::string &path) {
  std::string rest, head = path.empty() ? "." : path;
  char real[PATH_MAX];
  for (;;) {
    if (::realpath(head.c_str(), real))
      return std::string(real) + (rest.empty() || std::string(real) == "/" ? "" : "/") + rest;
    size_t slash = head.find_last_of('/');
    std::string base = slash == std::string::npos ? head : head.substr(slash + 1);
    if (base != "." && !base.empty())
      rest = rest.empty() ? base : base + "/" + rest;
    if (slash == std::string::npos)
      head = ".";
    else if (slash == 0)
      head = "/";
    else
      head = head.substr(0, slash);
  }
}

bool samePath(const PathId &a, const PathId &b) {
  if (a.exists != b.exists)
    return false;
  return a.exists ? a.dev == b.dev && a.ino == b.ino : a.spelled == b.spelled;
}

/// Refuses an output path (--save, --dump, --metrics, --checkpoint, --trace,
/// --tensorboard) that
/// names an input of the run (the step library, the model, the data, the
/// weights it starts from) or another output.
std::string checkOutputPaths(const Options &opts, const std::string &model) {
  struct Named {
    const char *what;
    std::string path;
  };
  std::vector<Named> outputs, inputs = {{"the step library", opts.step}};
  if (!model.empty())
    inputs.push_back({"the model", model});
  for (const Named &n : {Named{"--data", opts.data}, Named{"--feed", opts.feed},
                         Named{"--init-weights", opts.initWeights}})
    if (!n.path.empty())
      inputs.push_back(n);
  for (const Named &n : {Named{"--save", opts.save}, Named{"--metrics", opts.metrics},
                         Named{"--checkpoint", opts.checkpoint},
                         Named{"--trace", opts.trace}, Named{"--tensorboard", opts.tensorboard},
                         Named{"--dump", opts.haveDump ? opts.dump : ""}})
    if (!n.path.empty())
      outputs.push_back(n);
  // --resume is an input, except that a run may resume from the folder it
  // checkpoints into (and usually does).
  if (!opts.resume.empty() && !samePath(pathId(opts.resume), pathId(opts.checkpoint)))
    inputs.push_back({"--resume", opts.resume});
  // A file output inside a folder that another output fills (--save
  // ck/checkpoint.bin with --checkpoint ck, --metrics d/losses.npy with
  // --dump d) would be overwritten by it, or overwrite it.
  for (const Named &file : outputs) {
    std::string what = file.what;
    if (what != "--save" && what != "--metrics" && what != "--trace")
      continue;
    std::string dir = absoluteSpelling(tcc::io::dirOf(file.path));
    for (const Named &folder : outputs) {
      std::string fw = folder.what;
      if (fw != "--checkpoint" && fw != "--dump" && fw != "--tensorboard")
        continue;
      std::string f = absoluteSpelling(folder.path);
      if (dir == f || (dir.size() > f.size() && dir.compare(0, f.size(), f) == 0 &&
                       (f == "/" || dir[f.size()] == '/')))
        return std::string(file.what) + " " + file.path + " lies inside the " + fw +
               " folder " + folder.path + ", which tcc-run fills with files of its own; "
               "put it elsewhere";
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    PathId out = pathId(outputs[i].path);
    for (const Named &in : inputs)
      if (samePath(out, pathId(in.path)))
        return std::string(outputs[i].what) + " " + outputs[i].path + " names " + in.what +
               (in.path != outputs[i].path ? " (" + in.path + ")" : "") +
               ", which it would overwrite; choose another path";
    for (size_t j = 0; j < i; ++j)
      if (samePath(out, pathId(outputs[j].path)))
        return std::string(outputs[j].what) + " and " + outputs[i].what +
               " name the same path " + outputs[i].path + "; give each its own";
  }
  return "";
}

/// Holds a write lock on DIR/.tcc-run.lock (a POSIX record lock, which
/// names the process holding it) for the life of the process, so that two
/// runs never write checkpoints into one folder. The file stays empty.
std::string lockCheckpointDir(const std::string &dir) {
  std::string path = joinPath(dir, ".tcc-run.lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return "cannot create the checkpoint folder's lock " + path + ": " + errnoText(errno);
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &fl) == 0)
    return ""; // fd stays open, and the lock held, until the process exits
  int e = errno;
  struct flock holder = fl;
  bool known = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
  ::close(fd);
  if (e == EACCES || e == EAGAIN)
    return "the checkpoint folder " + dir + " is in use by another tcc-run" +
           (known ? " (process " + std::to_string(holder.l_pid) + ")" : std::string()) +
           "; two runs would overwrite each other's checkpoints (give this one "
           "its own --checkpoint folder)";
  return "cannot lock " + path + ": " + errnoText(e);
}

std::string dumpNotWritten(const std::string &dir, const std::string &why) {
  return "--dump " + dir + ": not written, and what the folder held is kept (" + why + ")";
}

} // namespace tcc::run
