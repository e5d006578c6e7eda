//===- posix_io.cpp - POSIX file helpers shared by the runtime ------------===//

#include "runtime/posix_io.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tcc::io {

std::string errnoText(int err) { return std::strerror(err); }

int openRetry(const char *path, int flags, mode_t mode) {
  // A reader opens without blocking, so that a FIFO named as a file fails
  // its regular-file check instead of waiting for a writer.
  if ((flags & O_ACCMODE) == O_RDONLY && !(flags & O_CREAT))
    flags |= O_NONBLOCK;
  int fd;
  do
    fd = ::open(path, flags, mode);
  while (fd < 0 && errno == EINTR);
  return fd;
}

bool writeAll(int fd, const void *src, uint64_t n) {
  const char *p = static_cast<const char *>(src);
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : static_cast<size_t>(n);
    ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    if (w == 0) {
      errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return true;
}

int readAll(int fd, void *dst, uint64_t n) {
  char *p = static_cast<char *>(dst);
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : static_cast<size_t>(n);
    ssize_t r = ::read(fd, p, chunk);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (r == 0)
      return 1;
    p += r;
    n -= static_cast<uint64_t>(r);
  }
  return 0;
}

int preadAll(int fd, void *dst, uint64_t n, uint64_t off) {
  char *p = static_cast<char *>(dst);
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : static_cast<size_t>(n);
    ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (r == 0)
      return 1;
    p += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return 0;
}

SignalHold::SignalHold() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGQUIT);
  pthread_sigmask(SIG_BLOCK, &set, &old);
}

SignalHold::~SignalHold() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }

void fsyncDir(const std::string &dir) {
  int dfd = ::open(dir.empty() ? "." : dir.c_str(),
                   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

AtomicFile::~AtomicFile() { discard(); }

bool AtomicFile::createBeside(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string tmpl = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
                     "." + path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp." +
                     std::string(6, 'X');
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    return false;
  adopt(fd, name.data());
  // mkstemp creates the file 0600; give it the mode a plain creat() would.
  mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) {
    discard();
    return false;
  }
  return true;
}

void AtomicFile::adopt(int fd, const std::string &tmp) {
  fd_ = fd;
  tmp_ = tmp;
}

const char *AtomicFile::commit(const std::string &path,
                               const std::string &dir) {
  if (::fsync(fd_) != 0)
    return "fsync";
  int closeRc = ::close(fd_);
  fd_ = -1;
  if (closeRc != 0)
    return "close";
  if (::rename(tmp_.c_str(), path.c_str()) != 0)
    return "rename";
  tmp_.clear();
  fsyncDir(dir);
  return nullptr;
}

void AtomicFile::discard() {
  int err = errno;
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty())
    ::unlink(tmp_.c_str());
  tmp_.clear();
  errno = err;
}

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

void removeStaleTemporaries(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  std::string prefix = "." + path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp.";
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::string full = joinPath(dir, name);
    struct stat st;
    if (::lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      ::unlink(full.c_str());
  }
  ::closedir(d);
}

std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string makeDirs(const std::string &dir) {
  if (dir.empty())
    return "cannot create a directory with an empty name";
  std::string cur;
  size_t i = 0;
  while (i <= dir.size()) {
    size_t next = dir.find('/', i);
    if (next == std::string::npos)
      next = dir.size();
    cur = dir.substr(0, next);
    i = next + 1;
    if (cur.empty() || cur == "." || cur == ".." ||
        (cur.size() >= 2 && cur.compare(cur.size() - 2, 2, "/.") == 0) ||
        (cur.size() >= 3 && cur.compare(cur.size() - 3, 3, "/..") == 0) ||
        cur.back() == '/')
      continue;
    if (::mkdir(cur.c_str(), 0777) == 0)
      continue;
    int err = errno;
    struct stat st;
    if (::stat(cur.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode))
        continue;
      return "cannot create directory " + cur +
             ": it exists and is not a directory";
    }
    return "cannot create directory " + cur + ": " + errnoText(err);
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return "cannot create directory " + dir;
  return "";
}

FdCloser::~FdCloser() {
  if (fd >= 0)
    ::close(fd);
}


StagedFolder::~StagedFolder() { removeStage(); }

void StagedFolder::removeStage() {
  if (stage_.empty())
    return;
  int saved = errno;
  for (const std::string &f : files_)
    ::unlink(joinPath(stage_, f).c_str());
  for (auto it = subdirs_.rbegin(); it != subdirs_.rend(); ++it)
    ::rmdir(joinPath(stage_, *it).c_str());
  ::rmdir(stage_.c_str());
  stage_.clear();
  files_.clear();
  subdirs_.clear();
  errno = saved;
}

std::string StagedFolder::open(const std::string &dir) {
  removeStage();
  dir_ = dir;
  std::string templ = joinPath(dir, ".tcc-staging.XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    return "cannot create a staging folder in " + dir + ": " + errnoText(errno);
  stage_ = buf.data();
  return "";
}

std::string StagedFolder::path(const std::string &rel, std::string &err) {
  size_t slash = rel.rfind('/');
  if (slash != std::string::npos) {
    std::string sub = rel.substr(0, slash);
    bool known = false;
    for (const std::string &d : subdirs_)
      known |= d == sub;
    if (!known) {
      if (::mkdir(joinPath(stage_, sub).c_str(), 0777) != 0) {
        err = "cannot create " + joinPath(stage_, sub) + ": " + errnoText(errno);
        return "";
      }
      subdirs_.push_back(sub);
    }
  }
  files_.push_back(rel);
  return joinPath(stage_, rel);
}

std::string StagedFolder::commit() {
  SignalHold hold;
  for (size_t i = 0; i < files_.size(); ++i) {
    const std::string &f = files_[i];
    std::string to = joinPath(dir_, f);
    if (::rename(joinPath(stage_, f).c_str(), to.c_str()) != 0) {
      std::string why = "cannot move " + to + " into place: " + errnoText(errno) +
                        (i ? " (the " + std::to_string(i) + " files before it were moved)" : "");
      files_.erase(files_.begin(), files_.begin() + static_cast<long>(i));
      removeStage();
      return why;
    }
  }
  for (const std::string &d : subdirs_)
    fsyncDir(joinPath(dir_, d));
  fsyncDir(dir_);
  files_.clear();
  removeStage();
  return "";
}

} // namespace tcc::io
