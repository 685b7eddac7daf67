// Test helpers: a raw TCP connection (to send hand-made frames to the store server) and a
// one-connection fake server (to capture the bytes the store client sends).
// Layer: tests (store).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commx/store.h"

namespace commx::test {

using Raw = std::vector<uint8_t>;

inline int listen_loopback(uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 16);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// A port nobody listens on (bound then released).
inline uint16_t free_port() {
  uint16_t port;
  int fd = listen_loopback(port);
  ::close(fd);
  return port;
}

class RawConn {
 public:
  explicit RawConn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  explicit RawConn(int fd, bool) : fd_(fd), ok_(true) {}
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  int fd() const { return fd_; }
  void send(const Raw& b) { (void)::send(fd_, b.data(), b.size(), MSG_NOSIGNAL); }
  // Reads exactly n bytes within timeout_ms; returns fewer on timeout or close.
  Raw recv(size_t n, int timeout_ms = 5000) {
    Raw out;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) break;
      uint8_t buf[4096];
      ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (r <= 0) break;
      out.insert(out.end(), buf, buf + r);
    }
    return out;
  }
  // True when the peer closed (EOF or reset) within timeout_ms; unread data is discarded.
  bool closed_by_peer(int timeout_ms = 5000) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return false;
      uint8_t buf[4096];
      ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// Frame builders (native little-endian, as the protocol is).
struct Frame {
  Raw b;
  Frame& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Frame& u32(uint32_t v) { return raw(&v, 4); }
  Frame& u64(uint64_t v) { return raw(&v, 8); }
  Frame& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Frame& raw(const void* p, size_t n) {
    auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
};

inline Raw validate_frame() { return Frame().u8(0).u32(0x3C85F7CE).b; }

// Options of a commx client of the server on `port`.
inline TCPStoreOptions client_opts(uint16_t port, Timeout t = std::chrono::seconds(10)) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout = t;
  return o;
}

// A validated raw connection to the server.
inline std::unique_ptr<RawConn> validated(uint16_t port) {
  auto c = std::make_unique<RawConn>(port);
  EXPECT_TRUE(c->ok());
  c->send(validate_frame());
  return c;
}

inline int64_t as_i64(const Raw& r, size_t off = 0) {
  int64_t v = 0;
  if (r.size() >= off + 8) std::memcpy(&v, r.data() + off, 8);
  return v;
}

}  // namespace commx::test
