//===- tcp_star.h - a rendezvous of N processes over TCP ---------*- C++ -*-===//
//
// N processes meet at rank 0's address: rank 0 listens, every other rank
// connects and says its rank, and rank 0 keeps one socket per peer. On that
// star, allgather() gives every rank every rank's bytes (rank 0 collects
// them in rank order and sends the whole back), from which the small
// agreements of a rendezvous are made.
//
// Two users, for bootstrap and tests only: tcc-run's launch without MPI
// (torchrun's variables: rank 0's MASTER_ADDR:MASTER_PORT is the store
// where the ranks meet and receive the NCCL id; the gradients and every
// collective of training then go over NCCL), and the CUDA emulation's
// NCCL when no MPI plugin is loaded (runtime/cuda/emu/nccl.h, whose unique
// id names rank 0's port, as NCCL's names its bootstrap address).
//
// Every wait is bounded: a peer that never connects, or stops sending,
// ends the call with a message after `timeout` seconds.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_COMM_TCP_STAR_H
#define TCC_RUNTIME_COMM_TCP_STAR_H

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tcc::net {

class Star {
public:
  Star() = default;
  Star(const Star &) = delete;
  Star &operator=(const Star &) = delete;
  ~Star() { close(); }

  /// Rank 0 only, before open(): listens on `port` of every address (0: a
  /// free port, which port() then says). Returns "" or why not.
  std::string listen(int port) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_ < 0)
      return errnoText("socket");
    int one = 1;
    ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listen_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
      return errnoText("binding port " + std::to_string(port));
    if (::listen(listen_, 128) != 0)
      return errnoText("listen");
    socklen_t len = sizeof a;
    if (::getsockname(listen_, reinterpret_cast<sockaddr *>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
    return "";
  }
  int port() const { return port_; }

  /// Joins the star of `size` ranks as `rank`: rank 0 accepts the others
  /// (after listen()), the others connect to host:port, retrying until
  /// `timeout` seconds have passed. Returns "" or why not.
  std::string open(const std::string &host, int port, int rank, int size, double timeout) {
    rank_ = rank;
    size_ = size;
    timeout_ = timeout;
    const auto deadline = clock::now() + seconds(timeout);
    if (rank == 0) {
      if (listen_ < 0)
        if (std::string err = listen(port); !err.empty())
          return err;
      peers_.assign(static_cast<size_t>(size), -1);
      for (int joined = 1; joined < size;) {
        if (std::string err = waitFor(listen_, POLLIN, deadline); !err.empty())
          return "waiting for " + std::to_string(size - joined) + " of " + std::to_string(size - 1) +
                 " ranks to connect to port " + std::to_string(port_) + ": " + err;
        int fd = ::accept(listen_, nullptr, nullptr);
        if (fd < 0)
          continue;
        int32_t r = -1;
        if (!readAll(fd, &r, sizeof r, deadline).empty() || r <= 0 || r >= size || peers_[r] >= 0) {
          ::close(fd);
          continue; // not one of ours, or a duplicate: ignored
        }
        noDelay(fd);
        peers_[r] = fd;
        ++joined;
      }
      ::close(listen_);
      listen_ = -1;
      return "";
    }
    std::string last = "no attempt";
    while (clock::now() < deadline) {
      addrinfo hints{}, *res = nullptr;
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
        return "cannot resolve " + host + ": " + ::gai_strerror(rc);
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
      ::freeaddrinfo(res);
      if (rc == 0) {
        int32_t r = rank;
        noDelay(fd);
        if (std::string err = writeAll(fd, &r, sizeof r, deadline); !err.empty()) {
          ::close(fd);
          return err;
        }
        root_ = fd;
        return "";
      }
      last = std::strerror(errno);
      if (fd >= 0)
        ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "cannot connect to rank 0 at " + host + ":" + std::to_string(port) + " within " +
           std::to_string(static_cast<int>(timeout)) + " s (" + last + ")";
  }

  /// Every rank's `bytes` bytes of `send` into `recv` (size * bytes, in rank
  /// order), on every rank. Returns "" or why not.
  std::string allgather(const void *send, size_t bytes, void *recv) {
    const auto deadline = clock::now() + seconds(timeout_);
    char *out = static_cast<char *>(recv);
    const size_t total = bytes * static_cast<size_t>(size_);
    if (rank_ != 0) {
      std::string err = writeAll(root_, send, bytes, deadline);
      if (err.empty())
        err = readAll(root_, out, total, deadline);
      return err.empty() ? "" : "exchanging with rank 0: " + err;
    }
    std::memmove(out, send, bytes);
    for (int r = 1; r < size_; ++r)
      if (std::string err = readAll(peers_[r], out + bytes * r, bytes, deadline); !err.empty())
        return "receiving from rank " + std::to_string(r) + ": " + err;
    for (int r = 1; r < size_; ++r)
      if (std::string err = writeAll(peers_[r], out, total, deadline); !err.empty())
        return "sending to rank " + std::to_string(r) + ": " + err;
    return "";
  }

  void close() {
    for (int &fd : peers_)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
    for (int *fd : {&root_, &listen_})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }

  bool joined() const { return root_ >= 0 || !peers_.empty(); }
  int rank() const { return rank_; }
  int size() const { return size_; }

private:
  using clock = std::chrono::steady_clock;
  static clock::duration seconds(double s) {
    return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s > 0 ? s : 1e9));
  }
  static std::string errnoText(const std::string &what) { return what + ": " + std::strerror(errno); }
  static void noDelay(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  static std::string waitFor(int fd, short events, clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0)
        return "timed out";
      pollfd p{fd, events, 0};
      int rc = ::poll(&p, 1, static_cast<int>(left > 1000 ? 1000 : left));
      if (rc > 0)
        return "";
      if (rc < 0 && errno != EINTR)
        return errnoText("poll");
    }
  }
  static std::string readAll(int fd, void *buf, size_t n, clock::time_point deadline) {
    char *p = static_cast<char *>(buf);
    while (n > 0) {
      if (std::string err = waitFor(fd, POLLIN, deadline); !err.empty())
        return err;
      ssize_t got = ::recv(fd, p, n, 0);
      if (got == 0)
        return "the peer closed the connection";
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN)
          continue;
        return errnoText("recv");
      }
      p += got;
      n -= static_cast<size_t>(got);
    }
    return "";
  }
  static std::string writeAll(int fd, const void *buf, size_t n, clock::time_point deadline) {
    const char *p = static_cast<const char *>(buf);
    while (n > 0) {
      if (std::string err = waitFor(fd, POLLOUT, deadline); !err.empty())
        return err;
      ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
      if (put < 0) {
        if (errno == EINTR || errno == EAGAIN)
          continue;
        return errnoText("send");
      }
      p += put;
      n -= static_cast<size_t>(put);
    }
    return "";
  }

  int listen_ = -1, port_ = 0, root_ = -1;
  std::vector<int> peers_; // rank 0: one socket per rank (peers_[0] unused)
  int rank_ = 0, size_ = 1;
  double timeout_ = 0;
};

} // namespace tcc::net

#endif // TCC_RUNTIME_COMM_TCP_STAR_H
