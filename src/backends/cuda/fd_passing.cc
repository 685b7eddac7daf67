// fd_passing: SCM_RIGHTS over abstract-namespace Unix stream sockets, with deadlines.
// Layer: transport (plain POSIX).
#include "cuda/fd_passing.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "commx/error.h"

namespace commx::cuda {
namespace {

[[noreturn]] void throw_errno(const std::string& where, const std::string& what, int err) {
  throw Error(ErrorCode::kSystem, where + what + ": " + std::strerror(err));
}

// Fills `addr` for abstract `name`; returns the address length.
socklen_t abstract_addr(const std::string& name, sockaddr_un* addr, const std::string& where) {
  if (name.empty() || name.size() > 100 || name.find('\0') != std::string::npos)
    throw Error(ErrorCode::kInvalidArgument,
                where + "bad fd socket name '" + name + "' (1..100 bytes, no NUL)");
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool wait_io(int fd, short events, Deadline deadline, const std::string& where) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
    if (n > 0) return true;  // ready, or an error/hang-up the next call reports
    if (n < 0 && errno != EINTR) throw_errno(where, "poll", errno);
  }
}

UniqueFd new_socket(const std::string& where) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) throw_errno(where, "socket(AF_UNIX)", errno);
  return UniqueFd(s);
}

void send_all(int sock, const void* data, size_t n, const std::string& where) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(sock, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (!wait_io(sock, POLLOUT, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                     where))
          throw Error(ErrorCode::kTimeout, where + "fd socket send blocked for 10 s");
        continue;
      }
      throw_errno(where, "send on fd socket", errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recv_all(int sock, void* data, size_t n, Deadline deadline, const std::string& peer,
              const std::string& where) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_io(sock, POLLIN, deadline, where))
      throw Error(ErrorCode::kTimeout, where + "timed out waiting for data from " + peer);
    ssize_t k = ::recv(sock, p, n, 0);
    if (k == 0) throw Error(ErrorCode::kPeerFailure, where + peer + " closed its fd socket early");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw_errno(where, "recv from " + peer, errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Whether the process at the other end of `sock` runs as this process's user.
bool same_user(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  return ::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == ::geteuid();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

FdListener::FdListener(const std::string& name, int backlog, const std::string& where)
    : name_(name) {
  sockaddr_un addr;
  socklen_t len = abstract_addr(name, &addr, where);
  sock_ = new_socket(where);
  if (::bind(sock_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    throw_errno(where, "bind fd socket '@" + name + "'", errno);
  if (::listen(sock_.get(), backlog < 1 ? 1 : backlog) != 0)
    throw_errno(where, "listen on fd socket '@" + name + "'", errno);
}

std::string FdListener::unique_name(const std::string& tag) {
  uint64_t token = random_u64();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(token));
  return "commx/" + tag + "/" + std::to_string(::getpid()) + "/" + hex;
}

UniqueFd FdListener::accept(Deadline deadline, const std::string& waiting_for,
                            const std::string& where) {
  for (;;) {
    if (!wait_io(sock_.get(), POLLIN, deadline, where))
      throw Error(ErrorCode::kTimeout,
                  where + "timed out waiting for " + waiting_for + " (fd socket '@" + name_ + "')");
    int c = ::accept4(sock_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c >= 0) return UniqueFd(c);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
      throw_errno(where, "accept on fd socket '@" + name_ + "'", errno);
  }
}

UniqueFd connect_fd_socket(const std::string& name, Deadline deadline, const std::string& peer,
                           const std::string& where) {
  sockaddr_un addr;
  socklen_t len = abstract_addr(name, &addr, where);
  UniqueFd s = new_socket(where);
  for (;;) {
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return s;
    int err = errno;
    if (err == ECONNREFUSED || err == ENOENT)
      throw Error(ErrorCode::kPeerFailure, where + "no process listens on fd socket '@" + name +
                                               "' of " + peer + " (it exited or failed)");
    if (err != EAGAIN && err != EINTR) throw_errno(where, "connect to " + peer, err);
    // EAGAIN: the listener's backlog is full; it drains as the peer accepts.
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(ErrorCode::kTimeout, where + "timed out connecting to " + peer +
                                           " (fd socket '@" + name + "' stays full)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void send_fd(int sock, int fd, uint64_t tag, const std::string& where) {
  iovec iov{&tag, sizeof(tag)};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
  std::memset(ctl, 0, sizeof(ctl));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl;
  msg.msg_controllen = sizeof(ctl);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    ssize_t k = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (k == static_cast<ssize_t>(sizeof(tag))) return;
    if (k >= 0) {  // the fd went with the first byte; the rest of the tag follows plainly
      send_all(sock, reinterpret_cast<char*>(&tag) + k, sizeof(tag) - k, where);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      if (!wait_io(sock, POLLOUT, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                   where))
        throw Error(ErrorCode::kTimeout, where + "fd socket sendmsg blocked for 10 s");
      continue;
    }
    throw_errno(where, "sendmsg(SCM_RIGHTS)", errno);
  }
}

UniqueFd recv_fd(int sock, uint64_t* tag, Deadline deadline, const std::string& peer,
                 const std::string& where) {
  uint64_t v = 0;
  iovec iov{&v, sizeof(v)};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  ssize_t k;
  for (;;) {
    if (!wait_io(sock, POLLIN, deadline, where))
      throw Error(ErrorCode::kTimeout,
                  where + "timed out waiting for a file descriptor from " + peer);
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
    k = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (k >= 0) break;
    if (errno != EINTR && errno != EAGAIN) throw_errno(where, "recvmsg from " + peer, errno);
  }
  if (k == 0)
    throw Error(ErrorCode::kPeerFailure,
                where + peer + " closed its fd socket without sending a file descriptor");
  UniqueFd got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (!got)
        got.reset(f);
      else
        ::close(f);  // more than one: keep the first
    }
  }
  if (!got)
    throw Error(ErrorCode::kInternal,
                where + "message from " + peer + " carried no file descriptor" +
                    ((msg.msg_flags & MSG_CTRUNC) ? " (control data truncated)" : ""));
  if (k < static_cast<ssize_t>(sizeof(v)))
    recv_all(sock, reinterpret_cast<char*>(&v) + k, sizeof(v) - k, deadline, peer, where);
  if (tag) *tag = v;
  return got;
}

void send_u64(int sock, uint64_t v, const std::string& where) {
  send_all(sock, &v, sizeof(v), where);
}

uint64_t recv_u64(int sock, Deadline deadline, const std::string& peer, const std::string& where) {
  uint64_t v = 0;
  recv_all(sock, &v, sizeof(v), deadline, peer, where);
  return v;
}

namespace {
constexpr std::chrono::seconds kHelloTimeout{3};
}  // namespace

std::vector<UniqueFd> exchange_fds(Store& store, const std::string& key, int rank, int world,
                                   const std::vector<int>& peers, int fd, Deadline deadline,
                                   const std::string& where_in) {
  const std::string where = where_in + "fd exchange (rank " + std::to_string(rank) + "): ";
  std::vector<UniqueFd> out(world);
  if (peers.empty()) return out;
  for (int p : peers)
    if (p < 0 || p >= world || p == rank)
      throw Error(ErrorCode::kInternal, where + "bad peer rank " + std::to_string(p));
  // Abstract socket names are visible to every process of the network namespace: a peer proves
  // itself with a secret that only the store carries (and must run as the same user).
  FdListener listener(FdListener::unique_name("fd"), static_cast<int>(peers.size()) + 1, where);
  const uint64_t secret = random_u64();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(secret));
  store.set_str(key + "/" + std::to_string(rank), listener.name() + "\n" + hex);
  // Connect to every peer first: connecting needs no accept on the other side (the backlog holds
  // it), so no rank waits for another's progress before serving its own listener.
  std::vector<UniqueFd> socks(world);
  for (int p : peers) {
    const std::string peer = "rank " + std::to_string(p);
    std::string rec = store.get_str(key + "/" + std::to_string(p));
    size_t nl = rec.find('\n');
    if (nl == std::string::npos || nl + 17 != rec.size())
      throw Error(ErrorCode::kInternal, where + "bad fd socket record from " + peer);
    uint64_t peer_secret = std::strtoull(rec.c_str() + nl + 1, nullptr, 16);
    socks[p] = connect_fd_socket(rec.substr(0, nl), deadline, peer, where);
    send_u64(socks[p].get(), static_cast<uint64_t>(rank), where);
    send_u64(socks[p].get(), peer_secret, where);
  }
  // Serve: each peer says who it is and gets `fd`; strangers are dropped.
  std::vector<bool> served(world, false);
  for (size_t done = 0; done < peers.size();) {
    std::vector<int> pending;
    for (int p : peers)
      if (!served[p]) pending.push_back(p);
    UniqueFd conn =
        listener.accept(deadline, "rank(s) " + rank_list(pending) + " to connect", where);
    if (!same_user(conn.get())) continue;
    // A peer says hello right after connecting; a silent stranger gets a few seconds, not the
    // whole deadline.
    const Deadline hello = std::min(deadline, std::chrono::steady_clock::now() + kHelloTimeout);
    uint64_t r = 0, their_secret = 0;
    try {
      r = recv_u64(conn.get(), hello, "a connecting peer", where);
      their_secret = recv_u64(conn.get(), hello, "a connecting peer", where);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kTimeout && std::chrono::steady_clock::now() >= deadline) throw;
      continue;  // a stranger that hung up or kept silent
    }
    if (their_secret != secret) continue;
    bool known = false;
    for (int p : peers) known |= static_cast<uint64_t>(p) == r;
    if (!known || served[r])
      throw Error(ErrorCode::kInternal, where + "unexpected connection claiming rank " +
                                            std::to_string(r) + " (pending: " + rank_list(pending) +
                                            ")");
    send_fd(conn.get(), fd, static_cast<uint64_t>(rank), where);
    served[r] = true;
    ++done;
  }
  // Receive: one fd from each peer (already queued or on its way).
  for (int p : peers) {
    const std::string peer = "rank " + std::to_string(p);
    uint64_t tag = 0;
    out[p] = recv_fd(socks[p].get(), &tag, deadline, peer, where);
    if (tag != static_cast<uint64_t>(p))
      throw Error(ErrorCode::kInternal,
                  where + "the fd from " + peer + " is tagged as rank " + std::to_string(tag));
  }
  return out;
}

}  // namespace commx::cuda
