// TCPStoreServer: a c10d-protocol store server (research/tcpstore_protocol.md). One event-loop
// thread (epoll) serves every client; WAIT replies are deferred until the keys exist. A malformed
// or oversized request closes only that client's connection; the server keeps serving the others.
// Layer: store.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "commx/error.h"
#include "commx/store.h"
#include "store/counter.h"
#include "store/socket_io.h"
#include "store/wire.h"

namespace commx {
namespace {

using wire::Query;

// Limits that protect the server from a peer that sends nonsense lengths. The key limit is far
// above any real key; the value limit bounds what one request may make the server buffer.
constexpr uint64_t kMaxKeyBytes = 64 * 1024;
constexpr uint64_t kMaxValueBytes = 256ull << 20;
constexpr uint64_t kMaxKeysPerRequest = 1u << 20;
constexpr size_t kMaxBufferedRequest = 512ull << 20;
// Stop parsing a client's requests while this much of its output is unsent (backpressure).
constexpr size_t kMaxPendingOutput = 64ull << 20;
constexpr size_t kReadChunk = 256 * 1024;
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;

struct Request {
  uint8_t code = 0;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  int64_t delta = 0;
  uint32_t u32 = 0;
};

enum class Parse { kIncomplete, kOk, kBad };

struct Client {
  uint64_t id = 0;
  int fd = -1;
  std::string name;
  Bytes in;
  size_t in_pos = 0;  // start of the first unparsed request in `in`
  Bytes out;
  size_t out_pos = 0;
  bool validated = false;
  bool want_out = false;             // EPOLLOUT registered
  int64_t waiting = 0;               // keys its pending WAIT still needs
  std::vector<std::string> awaited;  // keys of its pending WAIT (to cancel)
};

class TcpStoreServerImpl : public TCPStoreServer {
 public:
  TcpStoreServerImpl(const std::string& bind_host, uint16_t port) {
    listen_fd_ = bind_listen(bind_host, port);
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ep_ < 0 || wake_fd_ < 0) {
      int e = errno;
      close_fds();
      throw Error(ErrorCode::kSystem,
                  std::string("TCPStore server: epoll/eventfd: ") + strerror(e));
    }
    add_fd(listen_fd_, kListenId, EPOLLIN);
    add_fd(wake_fd_, kWakeId, EPOLLIN);
    thread_ = std::thread([this] { loop(); });
  }
  ~TcpStoreServerImpl() override { stop(); }

  uint16_t port() const override { return port_; }

  void stop() override {
    std::lock_guard<std::mutex> g(stop_mu_);
    if (thread_.joinable()) {
      uint64_t one = 1;
      ssize_t w = ::write(wake_fd_, &one, sizeof one);
      (void)w;
      thread_.join();
    }
    for (auto& [id, c] : clients_) ::close(c.fd);
    clients_.clear();
    close_fds();
  }

 private:
  int bind_listen(const std::string& host, uint16_t port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    std::string port_s = std::to_string(port);
    int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
    if (rc != 0)
      throw Error(ErrorCode::kSystem, "TCPStore server: cannot resolve bind address '" + host +
                                          "': " + gai_strerror(rc));
    std::string why;
    int fd = -1;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) {
        why = std::string("socket: ") + strerror(errno);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
      why = strerror(errno);
      ::close(fd);
      fd = -1;
    }
    ::freeaddrinfo(res);
    if (fd < 0)
      throw Error(ErrorCode::kSystem, "TCPStore server: cannot listen on " + host + ":" +
                                          std::to_string(port) + ": " + why);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }

  void close_fds() {
    for (int* fd : {&listen_fd_, &ep_, &wake_fd_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  void add_fd(int fd, uint64_t id, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  }

  void loop() {
    epoll_event events[64];
    for (;;) {
      int n = ::epoll_wait(ep_, events, 64, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        log("epoll_wait failed: " + std::string(strerror(errno)) + "; server stops");
        return;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kWakeId) return;
        if (id == kListenId) {
          accept_all();
          continue;
        }
        auto it = clients_.find(id);
        if (it == clients_.end()) continue;  // closed earlier in this batch
        uint32_t e = events[i].events;
        if (e & EPOLLOUT) {
          if (!flush(it->second)) continue;
          // Output drained below the limit: parse input that was held back.
          if (!process(it->second)) continue;
        }
        if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(it->second);
      }
    }
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          log("accept failed: " + std::string(strerror(errno)));
          // Out of descriptors: back off instead of spinning on the ready listen socket.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      uint64_t id = next_id_++;
      Client& c = clients_[id];
      c.id = id;
      c.fd = fd;
      c.name = sockio::peer_name(fd);
      add_fd(fd, id, EPOLLIN);
    }
  }

  void on_readable(Client& c) {
    uint8_t buf[kReadChunk];
    ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
    if (r == 0) return drop(c, "");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return;
      // A reset is a client going away abruptly, not a protocol error: no log line.
      return drop(c, errno == ECONNRESET ? "" : std::string("recv: ") + strerror(errno));
    }
    c.in.insert(c.in.end(), buf, buf + r);
    process(c);
  }

  // Parses and runs every complete request of `c`. False when `c` was dropped.
  bool process(Client& c) {
    current_ = c.id;
    while (c.out.size() - c.out_pos < kMaxPendingOutput) {
      Request req;
      std::string why;
      wire::Reader rd(c.in.data() + c.in_pos, c.in.size() - c.in_pos);
      Parse p = parse(rd, req, why);
      if (p == Parse::kBad)
        return drop(c, std::string(wire::query_name(req.code)) + " request: " + why), false;
      if (p == Parse::kIncomplete) {
        if (c.in.size() - c.in_pos > kMaxBufferedRequest)
          return drop(c, "request larger than " + std::to_string(kMaxBufferedRequest) + " bytes"),
                 false;
        break;
      }
      c.in_pos += rd.pos();
      if (!execute(c, req, why)) return drop(c, why), false;
    }
    if (c.in_pos > 0) {
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_pos));
      c.in_pos = 0;
    }
    return flush(c);
  }

  // Reads one whole request without acting on it, so a partial request never runs halfway.
  static Parse parse(wire::Reader& rd, Request& req, std::string& why) {
    if (!rd.u8(req.code)) return Parse::kIncomplete;
    auto key = [&](std::string& k) -> Parse {
      uint64_t n;
      bool too_long;
      if (!rd.length(kMaxKeyBytes, n, too_long)) return Parse::kIncomplete;
      if (too_long) {
        why = "key length " + std::to_string(n) + " exceeds " + std::to_string(kMaxKeyBytes);
        return Parse::kBad;
      }
      return rd.str(k, n) ? Parse::kOk : Parse::kIncomplete;
    };
    auto value = [&](Bytes& v) -> Parse {
      uint64_t n;
      bool too_long;
      if (!rd.length(kMaxValueBytes, n, too_long)) return Parse::kIncomplete;
      if (too_long) {
        why = "value length " + std::to_string(n) + " exceeds " + std::to_string(kMaxValueBytes);
        return Parse::kBad;
      }
      return rd.bytes(v, n) ? Parse::kOk : Parse::kIncomplete;
    };
    auto count = [&](uint64_t& n) -> Parse {
      bool too_long;
      if (!rd.length(kMaxKeysPerRequest, n, too_long)) return Parse::kIncomplete;
      if (too_long) {
        why = "key count " + std::to_string(n) + " exceeds " + std::to_string(kMaxKeysPerRequest);
        return Parse::kBad;
      }
      return Parse::kOk;
    };
#define COMMX_PARSE(expr)            \
  do {                               \
    Parse p_ = (expr);               \
    if (p_ != Parse::kOk) return p_; \
  } while (0)
    auto one_key = [&]() {
      req.keys.emplace_back();
      return key(req.keys.back());
    };
    auto one_value = [&]() {
      req.values.emplace_back();
      return value(req.values.back());
    };
    if (req.code > wire::kMaxQuery) {
      why = "unknown query code " + std::to_string(req.code);
      return Parse::kBad;
    }
    switch (static_cast<Query>(req.code)) {
      case Query::kValidate:
      case Query::kPing:
        return rd.u32(req.u32) ? Parse::kOk : Parse::kIncomplete;
      case Query::kSet:
      case Query::kAppend:
      case Query::kQueuePush:
        COMMX_PARSE(one_key());
        return one_value();
      case Query::kCompareSet:
        COMMX_PARSE(one_key());
        COMMX_PARSE(one_value());
        return one_value();
      case Query::kGet:
      case Query::kDeleteKey:
      case Query::kQueuePop:
      case Query::kQueueLen:
        return one_key();
      case Query::kAdd:
        COMMX_PARSE(one_key());
        return rd.i64(req.delta) ? Parse::kOk : Parse::kIncomplete;
      case Query::kCheck:
      case Query::kWait:
      case Query::kMultiGet: {
        uint64_t n;
        COMMX_PARSE(count(n));
        for (uint64_t i = 0; i < n; ++i) COMMX_PARSE(one_key());
        return Parse::kOk;
      }
      case Query::kMultiSet: {
        uint64_t n;
        COMMX_PARSE(count(n));
        for (uint64_t i = 0; i < n; ++i) {
          COMMX_PARSE(one_key());
          COMMX_PARSE(one_value());
        }
        return Parse::kOk;
      }
      case Query::kGetNumKeys:
      case Query::kCancelWait:
      case Query::kListKeys:
        return Parse::kOk;
    }
#undef COMMX_PARSE
    why = "unknown query code " + std::to_string(req.code);
    return Parse::kBad;
  }

  bool present(const std::string& k) const {
    if (kv_.count(k)) return true;
    auto q = queues_.find(k);
    return q != queues_.end() && !q->second.empty();
  }

  // Runs one parsed request. False (with `why`) when the client must be dropped.
  bool execute(Client& c, Request& req, std::string& why) {
    auto q = static_cast<Query>(req.code);
    if (!c.validated) {
      if (q != Query::kValidate) {
        why = std::string("first request is ") + wire::query_name(req.code) + ", not VALIDATE";
        return false;
      }
      if (req.u32 != wire::kValidationMagic) {
        char buf[64];
        snprintf(buf, sizeof buf, "bad VALIDATE magic 0x%08x", req.u32);
        why = buf;
        return false;
      }
      c.validated = true;
      return true;
    }
    wire::Writer w;
    switch (q) {
      case Query::kValidate:
        why = "second VALIDATE on one connection";
        return false;
      case Query::kPing:
        w.u32(req.u32);
        break;
      case Query::kSet:
        kv_[req.keys[0]] = std::move(req.values[0]);
        wake(req.keys[0], true);
        break;
      case Query::kAppend: {
        Bytes& v = kv_[req.keys[0]];
        v.insert(v.end(), req.values[0].begin(), req.values[0].end());
        wake(req.keys[0], true);
        break;
      }
      case Query::kCompareSet: {
        auto it = kv_.find(req.keys[0]);
        const Bytes& expected = req.values[0];
        if (it == kv_.end()) {
          if (!expected.empty()) {
            w.bytes(expected);
            break;
          }
          it = kv_.emplace(req.keys[0], std::move(req.values[1])).first;
          w.bytes(it->second);
          wake(req.keys[0], true);
        } else if (it->second == expected) {
          it->second = std::move(req.values[1]);
          w.bytes(it->second);
          wake(req.keys[0], true);
        } else {
          w.bytes(it->second);
        }
        break;
      }
      case Query::kGet: {
        // Never blocks (clients WAIT first); a missing key reads as empty, as libuv servers do.
        auto it = kv_.find(req.keys[0]);
        w.bytes(it == kv_.end() ? Bytes{} : it->second);
        break;
      }
      case Query::kAdd: {
        std::optional<int64_t> v = add_counter(kv_, req.keys[0], req.delta);
        if (!v) {
          why = "ADD on key '" + req.keys[0] + "' whose value is not a decimal integer";
          return false;
        }
        w.i64(*v);
        wake(req.keys[0], true);
        break;
      }
      case Query::kCheck: {
        bool all = true;
        for (auto& k : req.keys) all = all && present(k);
        w.u8(all ? wire::kCheckReady : wire::kCheckNotReady);
        break;
      }
      case Query::kWait: {
        if (c.waiting > 0) {
          why = "WAIT while an earlier WAIT is pending";
          return false;
        }
        for (auto& k : req.keys) {
          if (present(k)) continue;
          waiters_[k].push_back(c.id);
          c.awaited.push_back(k);
          ++c.waiting;
        }
        if (c.waiting == 0) w.u8(wire::kStopWaiting);
        break;
      }
      case Query::kGetNumKeys:
        w.i64(static_cast<int64_t>(kv_.size()));
        break;
      case Query::kDeleteKey:
        w.i64(kv_.erase(req.keys[0]) ? 1 : 0);
        break;
      case Query::kMultiGet:
        for (auto& k : req.keys) {
          auto it = kv_.find(k);
          w.bytes(it == kv_.end() ? Bytes{} : it->second);
        }
        break;
      case Query::kMultiSet:
        for (size_t i = 0; i < req.keys.size(); ++i) {
          kv_[req.keys[i]] = std::move(req.values[i]);
          wake(req.keys[i], true);
        }
        break;
      case Query::kCancelWait:
        cancel_waits(c);
        w.u8(wire::kWaitCanceled);
        break;
      case Query::kQueuePush:
        queues_[req.keys[0]].push_back(std::move(req.values[0]));
        wake(req.keys[0], false);
        break;
      case Query::kQueuePop: {
        auto it = queues_.find(req.keys[0]);
        int64_t len = it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
        w.i64(len);
        if (len > 0) {
          w.bytes(it->second.front());
          it->second.pop_front();
          if (it->second.empty()) queues_.erase(it);
        }
        break;
      }
      case Query::kQueueLen: {
        auto it = queues_.find(req.keys[0]);
        w.i64(it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size()));
        break;
      }
      case Query::kListKeys:
        w.i64(static_cast<int64_t>(kv_.size()));
        for (auto& [k, v] : kv_) w.str(k);
        break;
    }
    append_out(c, w.buf());
    return true;
  }

  // A key appeared: count it for its waiters (all of them, or one for a queue push).
  void wake(const std::string& key, bool all) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    std::vector<uint64_t> ids;
    if (all) {
      ids = std::move(it->second);
      waiters_.erase(it);
    } else {
      ids.push_back(it->second.front());
      it->second.erase(it->second.begin());
      if (it->second.empty()) waiters_.erase(it);
    }
    for (uint64_t id : ids) {
      auto c = clients_.find(id);
      if (c == clients_.end() || c->second.waiting == 0) continue;
      if (--c->second.waiting == 0) {
        c->second.awaited.clear();
        Bytes reply{wire::kStopWaiting};
        append_out(c->second, reply);
        // Another client's reply goes out now; flushing may drop it, and `c` is not used after.
        if (id != current_) flush(c->second);
      }
    }
  }

  void cancel_waits(Client& c) {
    for (auto& k : c.awaited) {
      auto it = waiters_.find(k);
      if (it == waiters_.end()) continue;
      auto& v = it->second;
      for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == c.id) {
          v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      if (v.empty()) waiters_.erase(it);
    }
    c.awaited.clear();
    c.waiting = 0;
  }

  void append_out(Client& c, const Bytes& b) { c.out.insert(c.out.end(), b.begin(), b.end()); }

  // Sends what it can; registers for EPOLLOUT if some is left. False when `c` was dropped.
  bool flush(Client& c) {
    while (c.out_pos < c.out.size()) {
      ssize_t w = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        c.out_pos += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop(c, std::string("send: ") + strerror(errno));
      return false;
    }
    if (c.out_pos == c.out.size()) {
      c.out.clear();
      c.out_pos = 0;
    }
    bool want = c.out_pos < c.out.size();
    if (want != c.want_out) {
      epoll_event ev{};
      ev.events = static_cast<uint32_t>(want ? (EPOLLIN | EPOLLOUT) : EPOLLIN);
      ev.data.u64 = c.id;
      ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
      c.want_out = want;
    }
    return true;
  }

  // Closes one client; `why` empty for an orderly close by the peer.
  void drop(Client& c, const std::string& why) {
    if (!why.empty()) log("closing connection from " + c.name + ": " + why);
    cancel_waits(c);
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    clients_.erase(c.id);
  }

  void log(const std::string& msg) const {
    std::fprintf(stderr, "commx TCPStore server (port %u): %s\n", port_, msg.c_str());
  }

  int listen_fd_ = -1;
  int ep_ = -1;
  int wake_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex stop_mu_;
  // Owned by the loop thread.
  uint64_t next_id_ = 2;
  std::map<uint64_t, Client> clients_;
  uint64_t current_ = 0;  // the client whose request is running (flushed by process())
  std::map<std::string, Bytes> kv_;
  std::unordered_map<std::string, std::deque<Bytes>> queues_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;
};

}  // namespace

std::unique_ptr<TCPStoreServer> start_tcp_store_server(const std::string& bind_host,
                                                       uint16_t port) {
  return std::make_unique<TcpStoreServerImpl>(bind_host, port);
}

}  // namespace commx
