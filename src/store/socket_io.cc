// Blocking socket helpers with deadlines for the TCP store.
// Layer: store (internal).
#include "store/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace commx::sockio {

Clock::time_point deadline_after(Timeout t) {
  auto now = Clock::now();
  if (t.count() < 0) return now;
  auto limit = std::chrono::duration_cast<Timeout>(Clock::time_point::max() - now);
  if (t >= limit) return Clock::time_point::max();
  return now + t;
}

int poll_ms_left(Clock::time_point deadline) {
  auto now = Clock::now();
  if (deadline <= now) return 0;
  if (deadline == Clock::time_point::max()) return INT_MAX;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

namespace {

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, poll_ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

}  // namespace

int try_connect(const std::string& host, uint16_t port, Clock::time_point deadline,
                std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0) {
    why = std::string("cannot resolve '") + host + "': " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      why = std::string("socket: ") + strerror(errno);
      continue;
    }
    // Non-blocking connect so the attempt ends at the deadline.
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        why = "connect timed out";
        ::close(fd);
        fd = -1;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r != 0) {
      why = std::string("connect: ") + strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

IoStatus send_all(int fd, const void* data, size_t n, Clock::time_point deadline,
                  std::string& why) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return IoStatus::kTimeout;
      continue;
    }
    why = std::string("send: ") + strerror(errno);
    return (errno == EPIPE || errno == ECONNRESET) ? IoStatus::kClosed : IoStatus::kError;
  }
  return IoStatus::kOk;
}

IoStatus recv_exact(int fd, void* data, size_t n, Clock::time_point deadline, std::string& why) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) return IoStatus::kTimeout;
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      why = "connection closed by the peer";
      return IoStatus::kClosed;
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    why = std::string("recv: ") + strerror(errno);
    return errno == ECONNRESET ? IoStatus::kClosed : IoStatus::kError;
  }
  return IoStatus::kOk;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    port = ntohs(a->sin_port);
    return std::string(buf) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    port = ntohs(a->sin6_port);
    return "[" + std::string(buf) + "]:" + std::to_string(port);
  }
  return "?";
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace commx::sockio
