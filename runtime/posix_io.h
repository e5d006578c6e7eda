//===- posix_io.h - POSIX file helpers shared by the runtime ----*- C++ -*-===//
//
// Small wrappers around POSIX I/O that tcc-run's files share: full reads and
// writes that retry on EINTR, holding back the terminating signals, atomic
// file replacement (temporary, fsync, rename, fsync of the directory), path
// helpers and `mkdir -p`. C++ standard library and POSIX only; no exceptions.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_POSIX_IO_H
#define TCC_RUNTIME_POSIX_IO_H

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

namespace tcc::io {

/// The text of an errno value (strerror).
std::string errnoText(int err);

/// open(2) that retries while it fails with EINTR. Returns the descriptor, or
/// -1 with errno set.
int openRetry(const char *path, int flags, mode_t mode = 0);

/// Writes all `n` bytes to `fd`, retrying on EINTR. Returns false with errno
/// set on failure (EIO if write(2) makes no progress).
bool writeAll(int fd, const void *src, uint64_t n);

/// Reads exactly `n` bytes from `fd`, retrying on EINTR. Returns 0, -1 with
/// errno set, or 1 at end of file.
int readAll(int fd, void *dst, uint64_t n);

/// Reads exactly `n` bytes at offset `off` (pread), retrying on EINTR.
/// Returns 0, -1 with errno set, or 1 at end of file.
int preadAll(int fd, void *dst, uint64_t n, uint64_t off);

/// Holds back SIGINT, SIGTERM, SIGHUP and SIGQUIT in the calling thread for
/// its lifetime; a signal that arrives meanwhile is delivered when it ends.
class SignalHold {
public:
  SignalHold();
  ~SignalHold();
  SignalHold(const SignalHold &) = delete;
  SignalHold &operator=(const SignalHold &) = delete;

private:
  sigset_t old;
};

/// fsyncs the directory `dir` ("" means ".") so that a rename in it is
/// durable. Failures are ignored: some file systems refuse to fsync a
/// directory, which is no reason to fail.
void fsyncDir(const std::string &dir);

/// Closes a file descriptor when it goes out of scope (-1: nothing).
struct FdCloser {
  int fd;
  explicit FdCloser(int fd) : fd(fd) {}
  ~FdCloser();
  FdCloser(const FdCloser &) = delete;
  FdCloser &operator=(const FdCloser &) = delete;
};

/// A file replaced atomically: written to a temporary beside its destination,
/// then fsynced, renamed over it and its directory fsynced. The terminating
/// signals are held back for the writer's lifetime, so that neither a partial
/// file nor a temporary is left behind. A writer destroyed without a
/// successful commit() removes its temporary.
class AtomicFile {
public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  /// Creates a temporary of a unique name beside `path` (".NAME.tmp.XXXXXX"
  /// in its folder, mkstemp: O_CREAT | O_EXCL, so never through a symlink or
  /// over an existing file), mode 0666 less the umask, so that concurrent
  /// writers of one path never share it. Every file tcc-run writes goes
  /// through one. Returns false with errno set.
  bool createBeside(const std::string &path);
  /// Takes over `fd`, already open on the temporary `tmp` (from mkstemp).
  void adopt(int fd, const std::string &tmp);
  /// The temporary's descriptor (-1 once closed).
  int fd() const { return fd_; }
  /// fsyncs and closes the temporary, renames it to `path` and fsyncs `dir`
  /// (the directory of `path`). Returns nullptr on success; otherwise the
  /// step that failed ("fsync", "close" or "rename") with errno set, and the
  /// temporary is still to be discard()ed.
  const char *commit(const std::string &path, const std::string &dir);
  /// Closes and removes the temporary, if any; errno is preserved.
  void discard();

private:
  SignalHold hold;
  int fd_ = -1;
  std::string tmp_;
};

/// `dir` + "/" + `name` (no second '/' if `dir` ends with one); `name` alone
/// if `dir` is empty.
std::string joinPath(const std::string &dir, const std::string &name);

/// The directory part of `path`: "." if it has no '/', "/" for "/name".
std::string dirOf(const std::string &path);

/// Removes the temporaries that AtomicFile::createBeside(path) made and a
/// killed writer left behind: regular files named ".NAME.tmp.XXXXXX" in
/// path's folder. Only for a folder that one process writes at a time (a
/// locked checkpoint folder).
void removeStaleTemporaries(const std::string &path);

/// Files written into a folder as one: each goes to a staging folder inside
/// it (named from mkdtemp's template ".tcc-staging.XXXXXX"), and commit()
/// renames them all into place. Until then the folder keeps the files it
/// had, so a failure while writing (a full disk) leaves the last complete
/// set, never a mixture; a folder destroyed without a successful commit()
/// removes its staging folder and what is in it. The renames themselves
/// are one per file, not one for the set: a rename that fails half way
/// through commit() (it needs no data blocks, only directory entries) leaves
/// the files before it moved, and says so.
class StagedFolder {
public:
  StagedFolder() = default;
  ~StagedFolder();
  StagedFolder(const StagedFolder &) = delete;
  StagedFolder &operator=(const StagedFolder &) = delete;

  /// Makes the staging folder in `dir`, which exists. Returns "" or why not.
  std::string open(const std::string &dir);
  /// Where to write `rel` ("NAME" or "SUB/NAME"; SUB is made in the staging
  /// folder, and must exist in `dir` by commit()). Sets `err` on failure.
  std::string path(const std::string &rel, std::string &err);
  /// Renames every staged file to its place in `dir` and fsyncs the folders.
  /// Returns "" or why not.
  std::string commit();

private:
  void removeStage();
  std::string dir_, stage_;
  std::vector<std::string> files_, subdirs_;
};

/// Creates `dir` and its missing parents (like `mkdir -p`). Returns "" on
/// success, otherwise a message that names the directory at fault.
std::string makeDirs(const std::string &dir);

} // namespace tcc::io

#endif // TCC_RUNTIME_POSIX_IO_H
