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
// ends the call with a message after `timeout` seconds. Rank 0 listens only
// on the address it was given (MASTER_ADDR), and a connection that is not a
// rank of this launch (its hello's token, from TCC_WORLD_TOKEN or
// torchrun's TORCHELASTIC_RUN_ID, differs; or another protocol version) is
// told so and dropped: it can neither end the world nor take a rank. On a
// network others share, set TCC_WORLD_TOKEN to a secret on every rank. A
// second process that claims a rank, during the meeting or after it (rank 0
// keeps answering on its port while the world trains), is told which
// process holds it (pid, host, address, when it joined), and rank 0 names
// it on stderr.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_COMM_TCP_STAR_H
#define TCC_RUNTIME_COMM_TCP_STAR_H

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
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
  using clock = std::chrono::steady_clock;
  Star() = default;
  Star(const Star &) = delete;
  Star &operator=(const Star &) = delete;
  ~Star() { close(); }

  /// Rank 0 only, before open(): listens on `port` (0: a free port, which
  /// port() then says) of `host`'s address (MASTER_ADDR: nothing else on the
  /// machine's other interfaces reaches the rendezvous), or of every
  /// address when `host` is empty. Returns "" or why not.
  std::string listen(int port, const std::string &host = "") {
    if (!host.empty())
      return listenOn(host, port);
    // Every address, IPv6 and IPv4 on one socket where the machine has
    // IPv6, else IPv4's.
    int one = 1, zero = 0;
    listen_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_ >= 0) {
      ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ::setsockopt(listen_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      if (::bind(listen_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
        const int why = errno;
        ::close(listen_);
        listen_ = -1;
        if (why == EADDRINUSE)
          return "port " + std::to_string(port) + " is in use by another process";
      }
    }
    if (listen_ < 0) {
      listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (listen_ < 0)
        return errnoText("socket");
      ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      if (::bind(listen_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
        return errno == EADDRINUSE ? "port " + std::to_string(port) + " is in use by another process"
                                   : errnoText("binding port " + std::to_string(port));
    }
    return finishListen();
  }

  /// Listens on `port` of the first of `host`'s addresses that binds.
  std::string listenOn(const std::string &host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
      return "cannot resolve " + host + ": " + ::gai_strerror(rc);
    std::string err = "no address";
    for (addrinfo *a = res; a; a = a->ai_next) {
      int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        err = errnoText("socket");
        continue;
      }
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
        listen_ = fd;
        break;
      }
      const int why = errno;
      ::close(fd);
      err = why == EADDRINUSE ? "port " + std::to_string(port) + " is in use by another process"
            : why == EADDRNOTAVAIL
                ? host + " is not an address of this machine (rank 0 listens on MASTER_ADDR, so it must be rank 0's own address)"
                : "binding " + host + ":" + std::to_string(port) + ": " + std::strerror(why);
      if (why == EADDRINUSE)
        break;
    }
    ::freeaddrinfo(res);
    if (listen_ < 0)
      return err;
    return finishListen();
  }

  std::string finishListen() {
    if (::listen(listen_, 128) != 0)
      return errnoText("listen");
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(listen_, reinterpret_cast<sockaddr *>(&a), &len) == 0)
      port_ = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&a)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in *>(&a)->sin_port);
    return "";
  }
  int port() const { return port_; }

  /// The launch's token: a digest of TCC_WORLD_TOKEN, else of torchrun's
  /// TORCHELASTIC_RUN_ID, else 0. Every rank of one launch has the same, so
  /// a process of another launch (or a stranger) cannot take a rank.
  static uint64_t launchToken() {
    const char *t = std::getenv("TCC_WORLD_TOKEN");
    if (!t || !*t)
      t = std::getenv("TORCHELASTIC_RUN_ID");
    if (!t || !*t)
      return 0;
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
    for (const char *c = t; *c; ++c)
      h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
    return h;
  }

  /// Joins the star of `size` ranks as `rank`: rank 0 accepts the others
  /// (after listen()), the others connect to host:port, retrying until
  /// `timeout` seconds have passed. Each rank says who it is (a magic word,
  /// the protocol's version, its rank and the world size it was given) and
  /// rank 0 answers: a connection that is not a tcc rank is dropped; a rank
  /// that disagrees on the world size, or one that joined already, is
  /// refused, and both sides say why. Returns "" or why not.
  std::string open(const std::string &host, int port, int rank, int size, double timeout) {
    rank_ = rank;
    size_ = size;
    timeout_ = timeout;
    const auto deadline = clock::now() + seconds(timeout);
    if (rank == 0)
      return accept(host, port, deadline);
    std::string last = "no attempt";
    while (clock::now() < deadline) {
      int fd = -1;
      std::string err = connectTo(host, port, deadline, fd);
      if (fd < 0) {
        if (err.rfind("cannot resolve", 0) == 0)
          return err;
        last = err;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      noDelay(fd);
      Hello hello = makeHello(rank, size);
      Answer answer{};
      Holder holder{};
      err = writeAll(fd, &hello, sizeof hello, deadline);
      if (err.empty())
        err = readAll(fd, &answer, sizeof answer, deadline);
      if (err.empty() && answer.magic != kMagic)
        err = "what listens there is not rank 0 of a tcc world";
      if (err.empty() && answer.status == kDuplicate &&
          readAll(fd, &holder, sizeof holder, std::min(deadline, clock::now() + seconds(kHelloSeconds))).empty())
        holder.text[sizeof holder.text - 1] = 0;
      else
        holder.text[0] = 0;
      if (err.empty() && answer.status != kAccepted)
        err = refusal(answer, rank, size, holder.text);
      if (!err.empty()) {
        ::close(fd);
        return "rank 0 at " + host + ":" + std::to_string(port) + ": " + err;
      }
      root_ = fd;
      return "";
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

  /// Closes the sockets to the peers (the world's collectives now go over
  /// NCCL) but keeps answering late comers until close().
  void closePeers() {
    for (int &fd : peers_)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
    if (root_ >= 0) {
      ::close(root_);
      root_ = -1;
    }
  }

  void close() {
    if (doorman_.joinable()) {
      (void)!::write(wake_[1], "x", 1);
      doorman_.join();
    }
    for (int *fd : {&wake_[0], &wake_[1]})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
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

public:
  // The handshake: a rank's hello, rank 0's answer.
  static constexpr uint32_t kMagic = 0x2a434354; // "TCC*"
  static constexpr uint32_t kVersion = 3; // 2: the launch token; 3: who holds a rank
  enum : int32_t {
    kAccepted = 0,
    kWrongVersion = 1,
    kWrongSize = 2,
    kDuplicate = 3,
    kBadRank = 4,
    kWrongLaunch = 5
  };
  struct Hello {
    uint32_t magic, version;
    int32_t rank, size;
    uint64_t token; // launchToken()
    int32_t pid, reserved;
    char host[64]; // gethostname(), NUL-terminated
  };
  struct Answer {
    uint32_t magic;
    int32_t status, size; // rank 0's world size
  };
  /// What follows an Answer of kDuplicate: the process holding the rank, in
  /// words, NUL-terminated.
  struct Holder {
    char text[128];
  };

private:
  static Hello makeHello(int rank, int size) {
    Hello h{kMagic, kVersion, rank, size, launchToken(), static_cast<int32_t>(::getpid()), 0, {}};
    if (::gethostname(h.host, sizeof h.host - 1) != 0)
      h.host[0] = 0;
    h.host[sizeof h.host - 1] = 0;
    return h;
  }
  /// "pid P on host H (ADDR)", from a hello and its connection's address;
  /// the host's bytes that are not printable ASCII are left out.
  static std::string describe(const Hello &h, const sockaddr_storage &from) {
    std::string host;
    for (size_t i = 0; i < sizeof h.host && h.host[i]; ++i)
      if (h.host[i] > 0x20 && h.host[i] < 0x7f)
        host += h.host[i];
    return "pid " + std::to_string(h.pid) + " on host " + (host.empty() ? "?" : host) + " (" +
           peerName(from) + ")";
  }
  static std::string refusal(const Answer &a, int rank, int size, const char *holder) {
    switch (a.status) {
    case kWrongVersion:
      return "refused: another version of tcc-run's rendezvous";
    case kWrongSize:
      return "refused: this rank has WORLD_SIZE=" + std::to_string(size) + ", rank 0 has " +
             std::to_string(a.size);
    case kWrongLaunch:
      return "refused: this process is not of rank 0's launch (TCC_WORLD_TOKEN or "
             "TORCHELASTIC_RUN_ID differs)";
    case kDuplicate:
      return "refused: rank " + std::to_string(rank) + " is held already" +
             (*holder ? std::string(" by ") + holder : std::string(" by another process")) +
             " (two processes with the same RANK)";
    default:
      return "refused: rank " + std::to_string(rank) + " is not a rank of rank 0's world of " +
             std::to_string(a.size);
    }
  }

public:
  /// Rank 0: reads the hello on `fd`, a connection from `from`, by `by`,
  /// and answers it: kAccepted for a free rank of this launch (`token`),
  /// else why not, with who holds the rank after a kDuplicate (named on
  /// stderr too); after the meeting (`met`) every rank is held. False,
  /// with nothing answered, when the connection is not a tcc rank's (its
  /// magic, or a hello cut short). The caller keeps or closes `fd`.
  /// Public for the fuzz harness (test/fuzz/fuzz_hello.cpp), with
  /// setWorldForFuzzing.
  bool admit(int fd, const sockaddr_storage &from, clock::time_point by, uint64_t token, bool met,
             Hello &h, Answer &a) {
    // The fixed part first: another version's hello may be shorter.
    constexpr size_t kFixed = offsetof(Hello, token);
    if (!readAll(fd, &h, kFixed, by).empty() || h.magic != kMagic)
      return false;
    a = Answer{kMagic, kAccepted, size_};
    if (h.version != kVersion)
      a.status = kWrongVersion;
    else if (!readAll(fd, reinterpret_cast<char *>(&h) + kFixed, sizeof h - kFixed, by).empty())
      return false;
    else if (h.token != token)
      a.status = kWrongLaunch;
    else if (h.size != size_)
      a.status = kWrongSize;
    else if (h.rank <= 0 || h.rank >= size_)
      a.status = kBadRank;
    else if (met || peers_[h.rank] >= 0)
      a.status = kDuplicate;
    (void)writeAll(fd, &a, sizeof a, by);
    if (a.status == kDuplicate) {
      (void)writeAll(fd, &holders_[h.rank], sizeof(Holder), by);
      if (!quiet_)
        std::fprintf(stderr, "tcc-run: warning: rank 0: %s claimed rank %d%s; told it that rank %d is held by %s\n",
                     describe(h, from).c_str(), h.rank, met ? " after the world met" : "", h.rank,
                     holders_[h.rank].text);
    }
    return true;
  }
  /// The fuzz harness's world: `size` ranks meeting, rank 1 still free and
  /// the others held by `holder` (a descriptor of /dev/null each).
  void setWorldForFuzzing(int size, const char *holder) {
    quiet_ = true;
    size_ = size;
    peers_.assign(static_cast<size_t>(size), -1);
    holders_.assign(static_cast<size_t>(size), Holder{});
    for (int r = 2; r < size; ++r) {
      peers_[r] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      std::snprintf(holders_[r].text, sizeof(Holder), "%s", holder);
    }
  }

private:
  /// Rank 0: accepts the other ranks. A connection that says nothing within
  /// a few seconds, or is not a tcc rank, is dropped and does not count; so
  /// is one of another launch (its token differs) or of another version of
  /// this protocol, which is told so and named on stderr: a stranger cannot
  /// end or join the world. A rank of this launch told another world size
  /// ends it at once, on both sides.
  std::string accept(const std::string &host, int port, clock::time_point deadline) {
    if (listen_ < 0)
      if (std::string err = listen(port, host); !err.empty())
        return err;
    peers_.assign(static_cast<size_t>(size_), -1);
    holders_.assign(static_cast<size_t>(size_), Holder{});
    std::string duplicates; // ranks a second process claimed too
    std::string strangers;  // connections dropped, for the timeout's message
    const uint64_t token = launchToken();
    for (int joined = 1; joined < size_;) {
      if (std::string err = waitFor(listen_, POLLIN, deadline); !err.empty())
        return "waiting for " + std::to_string(size_ - joined) + " of " + std::to_string(size_ - 1) +
               " ranks to connect to port " + std::to_string(port_) + ": " + err +
               (duplicates.empty() ? "" : " (a second process claimed rank" + duplicates + ": two with the same RANK?)") +
               (strangers.empty() ? "" : " (dropped:" + strangers + ")");
      sockaddr_storage from{};
      int fd = acceptOne(from);
      if (fd < 0)
        continue;
      Hello h{};
      Answer a{};
      if (!admit(fd, from, std::min(deadline, clock::now() + seconds(kHelloSeconds)), token,
                 /*met=*/false, h, a)) {
        ::close(fd);
        continue; // not one of ours
      }
      if (a.status != kAccepted) {
        ::close(fd);
        if (a.status == kWrongSize) {
          ::close(listen_);
          listen_ = -1;
          return "rank " + std::to_string(h.rank) + " has WORLD_SIZE=" + std::to_string(h.size) +
                 ", rank 0 has " + std::to_string(size_);
        }
        if (a.status == kWrongVersion || a.status == kWrongLaunch) {
          std::string who = peerName(from) + (a.status == kWrongVersion
                                                  ? " (another version of tcc-run's rendezvous)"
                                                  : " (not this launch: its token differs)");
          std::fprintf(stderr, "tcc-run: warning: rank 0: dropped a connection from %s claiming rank %d\n",
                       who.c_str(), h.rank);
          strangers += " " + who;
          continue; // the world can still meet
        }
        if (a.status == kDuplicate)
          duplicates += " " + std::to_string(h.rank);
        continue; // a stray duplicate: the world can still meet
      }
      noDelay(fd);
      peers_[h.rank] = fd;
      std::snprintf(holders_[h.rank].text, sizeof(Holder), "%s, which joined at %s",
                    describe(h, from).c_str(), timeOfDay().c_str());
      ++joined;
    }
    // The world met; a late process that claims a rank is still answered.
    if (::pipe2(wake_, O_CLOEXEC) == 0)
      doorman_ = std::thread([this] { answerLateComers(); });
    else {
      ::close(listen_);
      listen_ = -1;
    }
    return "";
  }

  /// Rank 0, after the meeting, until close(): answers each connection on
  /// the rendezvous port as the meeting would have, a hello of this launch
  /// with kDuplicate and who holds its rank (a process started twice, or a
  /// rank restarted by hand, learns at once why it cannot join instead of
  /// retrying until its timeout), and names it on stderr.
  void answerLateComers() {
    for (;;) {
      pollfd p[2] = {{listen_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      int rc = ::poll(p, 2, -1);
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc < 0 || p[1].revents)
        return;
      sockaddr_storage from{};
      int fd = acceptOne(from);
      if (fd < 0)
        continue;
      Hello h{};
      Answer a{};
      (void)admit(fd, from, clock::now() + seconds(kHelloSeconds), launchToken(), /*met=*/true, h, a);
      ::close(fd);
    }
  }

  /// One connection from the listening socket, and its peer's address in
  /// `from`; -1 when none. Non-blocking, as every wait here is bounded by
  /// poll().
  int acceptOne(sockaddr_storage &from) {
    socklen_t fromLen = sizeof from;
    return ::accept4(listen_, reinterpret_cast<sockaddr *>(&from), &fromLen,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
  }

  /// The time of day, "HH:MM:SS UTC".
  static std::string timeOfDay() {
    std::time_t now = std::time(nullptr);
    std::tm t{};
    char text[32] = "?";
    if (::gmtime_r(&now, &t))
      std::strftime(text, sizeof text, "%H:%M:%S UTC", &t);
    return text;
  }

  /// A peer's address as text.
  static std::string peerName(const sockaddr_storage &a) {
    char text[INET6_ADDRSTRLEN] = "?";
    if (a.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in &>(a).sin_addr, text, sizeof text);
    else if (a.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 &>(a).sin6_addr, text, sizeof text);
    return text;
  }

  /// One attempt to connect to host:port (every address it resolves to,
  /// IPv4 or IPv6), bounded by the deadline. `fd` is the socket, or -1 with
  /// why not. A name that does not resolve for good is "cannot resolve";
  /// a temporary failure (EAI_AGAIN) is retried by the caller.
  static std::string connectTo(const std::string &host, int port, clock::time_point deadline, int &fd) {
    fd = -1;
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
      return rc == EAI_AGAIN ? std::string("resolving ") + host + ": " + ::gai_strerror(rc)
                             : "cannot resolve " + host + ": " + ::gai_strerror(rc);
    std::string err = "no address";
    for (addrinfo *a = res; a && fd < 0; a = a->ai_next) {
      int s = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (s < 0) {
        err = errnoText("socket");
        continue;
      }
      int rc = ::connect(s, a->ai_addr, a->ai_addrlen);
      err = rc == 0 ? "" : std::strerror(errno);
      if (rc != 0 && errno == EINPROGRESS) {
        const auto by = std::min(deadline, clock::now() + seconds(kHelloSeconds));
        err = waitFor(s, POLLOUT, by);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (err.empty() && ::getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
          err = errnoText("getsockopt");
        else if (err.empty() && soerr != 0)
          err = std::strerror(soerr);
        rc = err.empty() ? 0 : -1;
      }
      if (rc == 0) {
        fd = s;
        break;
      }
      ::close(s);
    }
    ::freeaddrinfo(res);
    return fd >= 0 ? "" : err;
  }

  static constexpr double kHelloSeconds = 5; // a connection's first words

  int listen_ = -1, port_ = 0, root_ = -1;
  std::vector<int> peers_; // rank 0: one socket per rank (peers_[0] unused)
  std::vector<Holder> holders_; // rank 0: who holds each rank
  std::thread doorman_;         // rank 0, after the meeting: answerLateComers
  int wake_[2] = {-1, -1};      // ends it
  bool quiet_ = false;          // the fuzz harness: no warnings
  int rank_ = 0, size_ = 1;
  double timeout_ = 0;
};

} // namespace tcc::net

#endif // TCC_RUNTIME_COMM_TCP_STAR_H
