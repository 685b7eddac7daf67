// TcpWindow (tcp_window.h). Layer: backends/cpu.
#include "backends/cpu/tcp_window.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "commx/error.h"
#include "store/socket_io.h"
#include "transport/peer_auth.h"
#include "transport/socket_addr.h"

namespace commx {
namespace {

constexpr uint32_t kHelloMagic = 0x48584d43;  // "CMXH"
constexpr uint32_t kMsgMagic = 0x57584d43;    // "CMXW"
enum Kind : uint32_t { kPut = 1, kSignal = 2, kBye = 3 };

struct Hello {
  uint32_t magic;
  int32_t rank;
  // With the job token: the connector's proof over the window, both ranks and the listener's
  // nonce (published with its address, fresh per window), so only members may connect.
  auth::Digest proof;
};

std::string hex_of(const auth::Nonce& n) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : n) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

auth::Nonce nonce_of(const std::string& hex) {
  auth::Nonce n{};
  for (size_t i = 0; i < n.size() && 2 * i + 1 < hex.size(); ++i)
    n[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return n;
}

auth::Digest window_proof(const std::string& token, const std::string& key, int from, int to,
                          const auth::Nonce& listener) {
  const std::string link = key + ":" + std::to_string(from) + ">" + std::to_string(to);
  return peer_auth::connector_proof(token, link, auth::Nonce{}, listener);
}

struct Message {
  uint32_t magic;
  uint32_t kind;
  uint64_t offset;
  uint64_t bytes;
};
static_assert(sizeof(Message) == 24);

Error system_error(const char* what) {
  return Error(ErrorCode::kSystem, std::string(what) + ": " + std::strerror(errno));
}

}  // namespace

TcpWindow::TcpWindow(Store& store, const std::string& key, int rank, int size, int64_t count,
                     DataType dtype, Timeout timeout, const Hints& hints, const WaitTuning& tuning,
                     const std::string& where)
    : SignalWaits(rank, tuning),
      size_(size),
      count_(count),
      dtype_(dtype),
      bytes_(static_cast<size_t>(count) * dtype_size(dtype)),
      timeout_(timeout),
      buffer_(new char[bytes_ > 0 ? bytes_ : 1]()),
      signals_(new ShmWord[size]()),
      out_(size, -1),
      in_(size, -1),
      send_mu_(new std::mutex[size]),
      in_state_(new std::atomic<int>[size]) {
  for (int r = 0; r < size; ++r) in_state_[r].store(r == rank ? kOpen : kDead);
  const auto deadline = sockio::deadline_after(timeout);
  const std::optional<std::string> token = peer_auth::job_token();
  auth::Nonce nonce{};
  int listen_fd = -1;
  try {
    SockAddr a = resolve_address(choose_bind_address(hints), 0);
    listen_fd = socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) throw system_error("socket");
    if (bind(listen_fd, a.get(), a.len) != 0) throw system_error("bind");
    if (listen(listen_fd, SOMAXCONN) != 0) throw system_error("listen");
    SockAddr bound;
    bound.len = sizeof(bound.storage);
    if (getsockname(listen_fd, bound.get(), &bound.len) != 0) throw system_error("getsockname");
    if (token) {
      nonce = auth::random_nonce();
      store.set_str(key + "/" + std::to_string(rank) + "/nonce", hex_of(nonce));
    }
    store.set_str(key + "/" + std::to_string(rank), bound.to_string());
    // Outgoing links: connect to every peer (its listener exists once its address is published).
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      SockAddr peer = parse_host_port(store.get_str(key + "/" + std::to_string(r)), "window address");
      std::string host = peer.to_string();  // "1.2.3.4:5" or "[::1]:5"
      host = host.substr(0, host.rfind(':'));
      if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
      std::string why;
      int fd = sockio::try_connect(host, peer.port(), deadline, why);
      if (fd < 0)
        throw Error(ErrorCode::kPeerFailure, "cannot connect to rank " + std::to_string(r) + ": " + why);
      out_[r] = fd;
      Hello h{kHelloMagic, rank, {}};
      if (token)
        h.proof = window_proof(*token, key, rank, r,
                               nonce_of(store.get_str(key + "/" + std::to_string(r) + "/nonce")));
      if (sockio::send_all(fd, &h, sizeof(h), deadline, why) != sockio::IoStatus::kOk)
        throw Error(ErrorCode::kPeerFailure, "hello to rank " + std::to_string(r) + ": " + why);
    }
    // Incoming links: one from every peer, told apart by their hello.
    for (int got = 0; got < size - 1;) {
      pollfd p{listen_fd, POLLIN, 0};
      int n = poll(&p, 1, sockio::poll_ms_left(deadline));
      if (n == 0)
        throw Error(ErrorCode::kTimeout, "only " + std::to_string(got) + " of " +
                                             std::to_string(size - 1) + " peers connected in time");
      if (n < 0) {
        if (errno == EINTR) continue;
        throw system_error("poll");
      }
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Hello h{};
      std::string why;
      if (sockio::recv_exact(fd, &h, sizeof(h), deadline, why) != sockio::IoStatus::kOk ||
          h.magic != kHelloMagic || h.rank < 0 || h.rank >= size || h.rank == rank || in_[h.rank] >= 0) {
        close(fd);  // not one of ours
        continue;
      }
      if (token && !auth::digests_equal(h.proof, window_proof(*token, key, h.rank, rank, nonce))) {
        peer_auth::log_refusal(where, "a window connection claiming rank " + std::to_string(h.rank) +
                                          " did not prove the job token");
        close(fd);
        continue;
      }
      in_[h.rank] = fd;
      in_state_[h.rank].store(kOpen);
      ++got;
    }
    close(listen_fd);
    listen_fd = -1;
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw system_error("eventfd");
    server_ = std::thread([this] { serve(); });
  } catch (...) {
    if (listen_fd >= 0) close(listen_fd);
    for (int fd : out_)
      if (fd >= 0) close(fd);
    for (int fd : in_)
      if (fd >= 0) close(fd);
    if (wake_fd_ >= 0) close(wake_fd_);
    rethrow_with_prefix(where);
  }
}

TcpWindow::~TcpWindow() {
  stop("finalized");
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  // A service thread blocked inside a message from a stalled peer wakes up too.
  for (int fd : in_)
    if (fd >= 0) shutdown(fd, SHUT_RD);
  if (server_.joinable()) server_.join();
  const auto deadline = sockio::deadline_after(std::chrono::milliseconds(200));
  for (int r = 0; r < size_; ++r) {
    if (out_[r] < 0) continue;
    Message bye{kMsgMagic, kBye, 0, 0};
    std::string why;
    (void)sockio::send_all(out_[r], &bye, sizeof(bye), deadline, why);  // best effort
    close(out_[r]);
  }
  for (int fd : in_)
    if (fd >= 0) close(fd);
  close(wake_fd_);
}

Tensor TcpWindow::local() { return Tensor(buffer_.get(), count_, dtype_, Device::cpu()); }

Tensor TcpWindow::remote(int rank) { return rank == rank_ ? local() : Tensor(); }

void TcpWindow::send_message(int dst, uint32_t kind, uint64_t offset, const void* data,
                             uint64_t bytes) {
  Message m{kMsgMagic, kind, offset, bytes};
  std::lock_guard<std::mutex> g(send_mu_[dst]);
  if (out_[dst] < 0)
    throw Error(ErrorCode::kPeerFailure, "the link to rank " + std::to_string(dst) + " failed earlier");
  const auto deadline = sockio::deadline_after(timeout_);
  std::string why;
  sockio::IoStatus s = sockio::send_all(out_[dst], &m, sizeof(m), deadline, why);
  if (s == sockio::IoStatus::kOk && bytes > 0) s = sockio::send_all(out_[dst], data, bytes, deadline, why);
  if (s == sockio::IoStatus::kOk) return;
  close(out_[dst]);  // the stream is cut mid-message: no later message may follow on it
  out_[dst] = -1;
  throw Error(s == sockio::IoStatus::kTimeout ? ErrorCode::kTimeout : ErrorCode::kPeerFailure,
              "sending to rank " + std::to_string(dst) + ": " + why);
}

void TcpWindow::put(const void* src, size_t bytes, int dst, size_t offset) {
  if (dst == rank_) {
    if (bytes) std::memmove(buffer_.get() + offset, src, bytes);
    return;
  }
  send_message(dst, kPut, offset, src, bytes);
}

void TcpWindow::signal(int dst) {
  if (dst == rank_) {
    ring_bell(signals_[rank_]);
    return;
  }
  send_message(dst, kSignal, 0, nullptr, 0);
}

void TcpWindow::lose(int src, Link why) {
  in_state_[src].store(why);  // the fd stays open until the destructor (no reuse race)
  futex_wake_all(signals_[src]);  // a waiter on src looks again
}

bool TcpWindow::serve_one(int src) {
  Message m{};
  std::string why;
  const auto deadline = sockio::deadline_after(timeout_);
  if (sockio::recv_exact(in_[src], &m, sizeof(m), deadline, why) != sockio::IoStatus::kOk ||
      m.magic != kMsgMagic) {
    lose(src, kDead);
    return false;
  }
  switch (m.kind) {
    case kPut:
      // Bounds were checked by the sender's Window; a stream that disagrees is cut.
      if (m.offset > bytes_ || m.bytes > bytes_ - m.offset ||
          sockio::recv_exact(in_[src], buffer_.get() + m.offset, m.bytes, deadline, why) !=
              sockio::IoStatus::kOk) {
        lose(src, kDead);
        return false;
      }
      return true;
    case kSignal:
      ring_bell(signals_[src]);  // after the puts above it on this link
      return true;
    case kBye:
      lose(src, kClosed);
      return false;
    default:
      lose(src, kDead);
      return false;
  }
}

void TcpWindow::serve() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (;;) {
    fds.clear();
    who.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (int r = 0; r < size_; ++r)
      if (in_[r] >= 0 && in_state_[r].load() == kOpen) {
        fds.push_back({in_[r], POLLIN, 0});
        who.push_back(r);
      }
    int n = poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      for (int r = 0; r < size_; ++r)  // no more service: waits on peers must not hang
        if (r != rank_ && in_state_[r].load() == kOpen) lose(r, kDead);
      return;
    }
    if (fds[0].revents) return;  // destroyed
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) serve_one(who[i - 1]);
  }
}

}  // namespace commx
