//===- fuzz_hello.cpp - libFuzzer harness: the rendezvous's hello -------===//
//
// Any bytes as what a connection to rank 0's rendezvous port says
// (runtime/comm/tcp_star.h): Star::admit reads the hello from a socket pair
// whose other end holds the input (then end of file), judges it against a
// world of four ranks of one launch meeting (rank 1 free, ranks 2 and 3
// held) or met (every rank held), and answers. Whatever
// the bytes, the result is an answer or a dropped connection, never a read
// past the hello, a hang or a crash; an answer is one of the protocol's.
//
//===----------------------------------------------------------------------===//
#include "runtime/comm/tcp_star.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static tcc::net::Star &star = *[] {
    auto *s = new tcc::net::Star();
    s->setWorldForFuzzing(4, "pid 1 on host fuzz (127.0.0.1), which joined at 00:00:00 UTC");
    return s;
  }();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    __builtin_trap();
  // The input, then end of file: a hello cut short ends the read at once.
  size_t put = 0;
  while (put < size) {
    ssize_t n = ::send(sv[1], data + put, size - put, MSG_NOSIGNAL);
    if (n <= 0)
      break; // more than the socket holds: the rest is never read anyway
    put += static_cast<size_t>(n);
  }
  ::shutdown(sv[1], SHUT_WR);
  sockaddr_storage from{};
  from.ss_family = AF_UNIX;
  tcc::net::Star::Hello h{};
  tcc::net::Star::Answer a{};
  // The meeting's judgement, or (the input's last byte odd) the late comers'.
  const bool met = size > 0 && (data[size - 1] & 1);
  bool answered = star.admit(sv[0], from, tcc::net::Star::clock::now() + std::chrono::seconds(2),
                             /*token=*/0x1234, met, h, a);
  if (answered && (a.magic != 0x2a434354 || a.status < 0 || a.status > 5 || a.size != 4))
    __builtin_trap();
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}
