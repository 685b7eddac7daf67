// TCPStoreServer: a c10d-protocol store server (docs/tcpstore_protocol.md). One event-loop
// thread (epoll) serves every client; WAIT replies are deferred until the keys exist. A malformed
// or oversized request closes only that client's connection; the server keeps serving the others.
// Limits on memory, connections and idle time (TCPStoreServerLimits) keep any one client from
// stalling or bloating it.
// Layer: store.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "commx/error.h"
#include "commx/store.h"
#include "store/counter.h"
#include "store/socket_io.h"
#include "store/store_auth.h"
#include "store/wire.h"

namespace commx {
namespace {

using wire::Query;
using Clock = std::chrono::steady_clock;

// The key limit is far above any real key; the key count bounds one WAIT/CHECK/MULTI_* request.
constexpr uint64_t kMaxKeyBytes = 64 * 1024;
using wire::kMaxKeysPerRequest;
constexpr size_t kReadChunk = 256 * 1024;
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
// Descriptors kept free for the listen socket, epoll, logging and the process around the server.
constexpr int kReservedFds = 64;
// Per-event log lines (refused or timed-out connections) are summed into at most one a second.
constexpr auto kLogInterval = std::chrono::seconds(1);

struct Request {
  uint8_t code = 0;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  int64_t delta = 0;
  uint32_t u32 = 0;
};

enum class Parse { kIncomplete, kOk, kBad };

// The fields of a request after its code: a fixed head, then (after a key count) the `each`
// fields once per key. Used to find where a request ends before any of it is copied.
enum class Field : uint8_t { kU32, kI64, kKey, kValue, kCount, kNonce, kDigest };
struct Layout {
  std::vector<Field> head;
  std::vector<Field> each;
};

bool known_code(uint8_t code) {
  return code <= wire::kMaxQuery || code == auth::kChallengeQuery || code == auth::kResponseQuery;
}

const Layout& layout_of(uint8_t code) {
  using F = Field;
  static const Layout kChallenge{{F::kNonce}, {}}, kResponse{{F::kDigest}, {}};
  if (code == auth::kChallengeQuery) return kChallenge;
  if (code == auth::kResponseQuery) return kResponse;
  static const Layout kLayouts[wire::kMaxQuery + 1] = {
      {{F::kU32}, {}},                        // VALIDATE
      {{F::kKey, F::kValue}, {}},             // SET
      {{F::kKey, F::kValue, F::kValue}, {}},  // COMPARE_SET
      {{F::kKey}, {}},                        // GET
      {{F::kKey, F::kI64}, {}},               // ADD
      {{F::kCount}, {F::kKey}},               // CHECK
      {{F::kCount}, {F::kKey}},               // WAIT
      {{}, {}},                               // GETNUMKEYS
      {{F::kKey}, {}},                        // DELETE_KEY
      {{F::kKey, F::kValue}, {}},             // APPEND
      {{F::kCount}, {F::kKey}},               // MULTI_GET
      {{F::kCount}, {F::kKey, F::kValue}},    // MULTI_SET
      {{}, {}},                               // CANCEL_WAIT
      {{F::kU32}, {}},                        // PING
      {{F::kKey, F::kValue}, {}},             // QUEUE_PUSH
      {{F::kKey}, {}},                        // QUEUE_POP
      {{F::kKey}, {}},                        // QUEUE_LEN
      {{}, {}},                               // LIST_KEYS
  };
  return kLayouts[code];
}

// How far the scan of a partly received request got, so that each byte is looked at once however
// thinly the request arrives (a re-scan from the start would make a slow sender cost quadratic
// time).
struct Scan {
  bool started = false;
  uint8_t code = 0;
  size_t pos = 0;      // bytes of whole fields seen
  size_t head = 0;     // next head field
  uint64_t items = 0;  // keys left to scan
  size_t each = 0;     // next field of the current key
};

struct Client {
  uint64_t id = 0;
  int fd = -1;
  std::string name;
  Bytes in;
  size_t in_pos = 0;  // start of the first unparsed request in `in`
  Bytes out;
  size_t out_pos = 0;
  size_t accounted = 0;  // in.size() + unsent out, as counted in buffered_
  Scan scan;             // of the request at in_pos
  bool validated = false;
  bool authenticated = false;  // proved it knows the token (always true without one)
  bool challenged = false;     // sent AUTH_CHALLENGE: the nonces below are set
  auth::Nonce client_nonce{}, server_nonce{};
  uint32_t interest = 0;  // the epoll events registered
  Clock::time_point connected;
  Clock::time_point last_active;  // last byte received or reply fully sent
  // The keys its pending WAIT still needs, each with its ticket in waiters_[key].
  std::unordered_map<std::string, uint64_t> awaited;

  size_t unsent() const { return out.size() - out_pos; }
  size_t unparsed() const { return in.size() - in_pos; }
  bool idle() const { return unparsed() == 0 && unsent() == 0 && awaited.empty(); }
};

size_t descriptor_budget() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 65536;
  return rl.rlim_cur > kReservedFds * 2 ? rl.rlim_cur - kReservedFds : kReservedFds;
}

class TcpStoreServerImpl : public TCPStoreServer {
 public:
  TcpStoreServerImpl(const std::string& bind_host, uint16_t port, const TCPStoreServerLimits& lim)
      : lim_(lim), token_(auth::token_from_env()) {
    max_connections_ =
        lim.max_connections > 0 ? static_cast<size_t>(lim.max_connections) : descriptor_budget();
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
    if (!token_)
      auth::warn_unauthenticated("the TCP store server on port " + std::to_string(port_));
    thread_ = std::thread([this] { loop(); });
  }
  ~TcpStoreServerImpl() override { stop(); }

  uint16_t port() const override { return port_; }

  TCPStoreServerStats stats() const override {
    TCPStoreServerStats s;
    s.connections = stat_connections_.load();
    s.buffered_bytes = stat_buffered_.load();
    s.stored_bytes = stat_stored_.load();
    s.connections_refused = stat_refused_.load();
    s.connections_closed_idle = stat_closed_idle_.load();
    return s;
  }

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

  // How often the timers (handshake timeout, log summaries) are looked at.
  int tick_ms() const {
    auto t = std::min<std::chrono::milliseconds>(lim_.handshake_timeout, kLogInterval) / 4;
    return static_cast<int>(std::clamp<int64_t>(t.count(), 5, 250));
  }

  void loop() {
    epoll_event events[64];
    for (;;) {
      int n = ::epoll_wait(ep_, events, 64, tick_ms());
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
        if ((e & (EPOLLHUP | EPOLLERR)) && reply_backpressure(it->second)) {
          drop(it->second, "");  // gone while its replies were held back
          continue;
        }
        if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(it->second);
      }
      on_tick();
      publish_stats();
    }
  }

  // Closes connections that never validated in time and writes the summaries of the events
  // counted since the last one.
  void on_tick() {
    auto now = Clock::now();
    if (now - last_sweep_ < std::chrono::milliseconds(tick_ms())) return;
    last_sweep_ = now;
    std::vector<uint64_t> late;
    for (uint64_t id : unvalidated_)
      if (now - clients_.at(id).connected > lim_.handshake_timeout) late.push_back(id);
    for (uint64_t id : late) {
      ++pending_handshake_closed_;
      drop(clients_.at(id), "");
    }
    if (now - last_summary_ < kLogInterval) return;
    last_summary_ = now;
    if (pending_handshake_closed_ > 0)
      log("closed " + std::to_string(pending_handshake_closed_) +
          " connection(s) that did not complete the handshake (VALIDATE, and the token check "
          "when the store has one) within " +
          std::to_string(lim_.handshake_timeout.count()) + " ms");
    if (pending_refused_ > 0)
      log("connection cap (" + std::to_string(max_connections_) + ") reached: refused " +
          std::to_string(pending_refused_) + " connection(s), last from " + last_refused_ +
          "; none was idle for " + std::to_string(lim_.idle_timeout.count()) +
          " ms (raise COMMX_STORE_MAX_CONNECTIONS)");
    if (pending_idle_closed_ > 0)
      log("connection cap (" + std::to_string(max_connections_) + ") reached: closed " +
          std::to_string(pending_idle_closed_) + " connection(s) idle for over " +
          std::to_string(lim_.idle_timeout.count()) + " ms to make room");
    pending_handshake_closed_ = pending_refused_ = pending_idle_closed_ = 0;
  }

  void publish_stats() {
    stat_connections_ = clients_.size();
    stat_buffered_ = buffered_;
    stat_stored_ = stored_;
  }

  // At the cap: closes the connection idle longest, if idle past the idle timeout. A failed scan
  // says when the next one can succeed (a client that becomes idle later is active now), so a
  // flood of connections at the cap costs one scan per idle timeout, not one per connection.
  bool make_room(Clock::time_point now) {
    if (now < no_room_until_) return false;
    Client* oldest = nullptr;
    for (auto& [id, c] : clients_)
      if (c.idle() && (!oldest || c.last_active < oldest->last_active)) oldest = &c;
    if (!oldest || now - oldest->last_active < lim_.idle_timeout) {
      no_room_until_ = (oldest ? oldest->last_active : now) + lim_.idle_timeout;
      return false;
    }
    ++pending_idle_closed_;
    ++stat_closed_idle_;
    drop(*oldest, "");
    return true;
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
      auto now = Clock::now();
      if (clients_.size() >= max_connections_ && !make_room(now)) {
        // Closed at once, so the client sees a refusal instead of a silent backlog.
        ++pending_refused_;
        ++stat_refused_;
        last_refused_ = sockio::peer_name(fd);
        ::close(fd);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      uint64_t id = next_id_++;
      Client& c = clients_[id];
      c.id = id;
      c.fd = fd;
      c.name = sockio::peer_name(fd);
      c.connected = c.last_active = now;
      c.interest = EPOLLIN;
      unvalidated_.insert(id);
      add_fd(fd, id, EPOLLIN);
    }
  }

  // Keeps buffered_ equal to the sum of every client's partial input and unsent output.
  void account(Client& c) {
    size_t now = c.in.size() + c.unsent();
    buffered_ = buffered_ - c.accounted + now;
    c.accounted = now;
  }

  // Reading stops while a client's replies are not being read (its unsent output is over the
  // per-client limit, or the server's buffers are over the global one), so a client that only
  // sends holds the server's memory only up to those limits.
  bool reply_backpressure(const Client& c) const {
    return c.unsent() >= lim_.max_unsent_reply_bytes ||
           (c.unsent() > 0 && buffered_ >= lim_.max_buffered_bytes);
  }

  void set_interest(Client& c, uint32_t events) {
    if (events == c.interest) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    c.interest = events;
  }

  void update_interest(Client& c) {
    uint32_t ev = 0;
    if (!reply_backpressure(c)) ev |= EPOLLIN;
    if (c.unsent() > 0) ev |= EPOLLOUT;
    set_interest(c, ev);
  }

  void on_readable(Client& c) {
    if (reply_backpressure(c)) return update_interest(c);  // hangups still arrive
    uint8_t buf[kReadChunk];
    ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
    if (r == 0) return drop(c, "");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return;
      // A reset is a client going away abruptly, not a protocol error: no log line.
      return drop(c, errno == ECONNRESET ? "" : std::string("recv: ") + strerror(errno));
    }
    c.in.insert(c.in.end(), buf, buf + r);
    c.last_active = Clock::now();
    account(c);
    if (buffered_ > lim_.max_buffered_bytes && !shed_largest_request(c)) return;
    process(c);
  }

  // The server's buffers are over the global limit after reading from `reader`: closes the
  // client holding the largest partial request (a slow or hostile sender), which may be
  // `reader` itself. False when `reader` was the one closed.
  bool shed_largest_request(Client& reader) {
    Client* big = &reader;
    for (auto& [id, c] : clients_)
      if (c.unparsed() > big->unparsed()) big = &c;
    bool self = big == &reader;
    drop(*big, "the server's buffers hold over " + std::to_string(lim_.max_buffered_bytes) +
                   " bytes over all connections; this one holds " +
                   std::to_string(big->unparsed()) + " bytes of an incomplete request");
    return !self;
  }

  // Parses and runs every complete request of `c` that its reply backpressure allows, sending
  // the replies as it goes. False when `c` was dropped.
  bool process(Client& c) {
    current_ = c.id;
    for (;;) {
      bool incomplete = false;
      while (!incomplete && !reply_backpressure(c)) {
        std::string why;
        Parse p = scan(c, why);
        if (p == Parse::kBad)
          return drop(c, std::string(wire::query_name(c.scan.code)) + " request: " + why), false;
        if (p == Parse::kIncomplete) {
          if (c.unparsed() > lim_.max_request_bytes)
            return drop(c,
                        "request larger than " + std::to_string(lim_.max_request_bytes) + " bytes"),
                   false;
          incomplete = true;
          break;
        }
        Request req;
        wire::Reader rd(c.in.data() + c.in_pos, c.scan.pos);
        if (parse(rd, req, why) != Parse::kOk || rd.pos() != c.scan.pos)
          return drop(c, "internal error: a scanned request does not parse: " + why), false;
        c.in_pos += c.scan.pos;
        c.scan = Scan{};
        if (!execute(c, req, why)) return drop(c, why), false;
      }
      if (c.in_pos > 0) {
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_pos));
        c.in_pos = 0;
        if (c.in.capacity() > 2 * kReadChunk && c.in.size() < kReadChunk) c.in.shrink_to_fit();
      }
      account(c);
      if (!flush(c)) return false;
      // Stopped by backpressure but every reply went out: the requests already read go on.
      if (incomplete || c.unparsed() == 0 || c.unsent() > 0) return true;
    }
  }

  // Moves `c.scan` past the whole fields received so far. kOk: the request ends at c.scan.pos.
  Parse scan(Client& c, std::string& why) const {
    const uint8_t* p = c.in.data() + c.in_pos;
    size_t n = c.unparsed();
    Scan& s = c.scan;
    if (!s.started) {
      if (n == 0) return Parse::kIncomplete;
      s.code = p[0];
      if (!known_code(s.code)) {
        why = "unknown query code " + std::to_string(s.code);
        return Parse::kBad;
      }
      s.started = true;
      s.pos = 1;
    }
    const Layout& l = layout_of(s.code);
    for (; s.head < l.head.size(); ++s.head)
      if (Parse r = field(l.head[s.head], p, n, s, why); r != Parse::kOk) return r;
    for (; s.items > 0; --s.items, s.each = 0)
      for (; s.each < l.each.size(); ++s.each)
        if (Parse r = field(l.each[s.each], p, n, s, why); r != Parse::kOk) return r;
    return Parse::kOk;
  }

  // One field at s.pos: skipped when all of it is there; lengths are checked as soon as read.
  Parse field(Field f, const uint8_t* p, size_t n, Scan& s, std::string& why) const {
    size_t fixed = f == Field::kU32 ? 4 : f == Field::kNonce ? 16 : f == Field::kDigest ? 32 : 8;
    if (n - s.pos < fixed) return Parse::kIncomplete;
    if (f != Field::kKey && f != Field::kValue && f != Field::kCount) {
      s.pos += fixed;
      return Parse::kOk;
    }
    uint64_t v;
    std::memcpy(&v, p + s.pos, 8);
    if (f == Field::kCount) {
      if (v > kMaxKeysPerRequest) {
        why = "key count " + std::to_string(v) + " exceeds " + std::to_string(kMaxKeysPerRequest);
        return Parse::kBad;
      }
      s.items = v;
      s.pos += 8;
      return Parse::kOk;
    }
    uint64_t max = f == Field::kKey ? kMaxKeyBytes : lim_.max_value_bytes;
    if (v > max) {
      why = std::string(f == Field::kKey ? "key" : "value") + " length " + std::to_string(v) +
            " exceeds " + std::to_string(max);
      return Parse::kBad;
    }
    if (n - s.pos - 8 < v) return Parse::kIncomplete;
    s.pos += 8 + v;
    return Parse::kOk;
  }

  // Reads one whole request (found complete by scan()) into `req`.
  Parse parse(wire::Reader& rd, Request& req, std::string& why) const {
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
      if (!rd.length(lim_.max_value_bytes, n, too_long)) return Parse::kIncomplete;
      if (too_long) {
        why = "value length " + std::to_string(n) + " exceeds " +
              std::to_string(lim_.max_value_bytes);
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
    if (req.code == auth::kChallengeQuery || req.code == auth::kResponseQuery) {
      req.values.emplace_back();
      return rd.bytes(req.values.back(), req.code == auth::kChallengeQuery ? 16 : 32)
                 ? Parse::kOk
                 : Parse::kIncomplete;
    }
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

  // Stores `v` at `k` unless the store would then hold more than its limit.
  bool put(const std::string& k, Bytes v, std::string& why) {
    auto it = kv_.find(k);
    uint64_t old = it == kv_.end() ? 0 : k.size() + it->second.size();
    if (!fits(old, k.size() + v.size(), k, why)) return false;
    stored_ = stored_ - old + k.size() + v.size();
    if (it == kv_.end())
      kv_.emplace(k, std::move(v));
    else
      it->second = std::move(v);
    return true;
  }

  bool fits(uint64_t old_bytes, uint64_t new_bytes, const std::string& k, std::string& why) const {
    if (stored_ - old_bytes + new_bytes <= lim_.max_stored_bytes) return true;
    why = "storing key '" + k.substr(0, 64) + "' would make the store hold over " +
          std::to_string(lim_.max_stored_bytes) + " bytes";
    return false;
  }

  void erase(std::map<std::string, Bytes>::iterator it) {
    stored_ -= it->first.size() + it->second.size();
    kv_.erase(it);
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
      c.authenticated = !token_;
      if (c.authenticated) unvalidated_.erase(c.id);
      return true;
    }
    if (req.code == auth::kChallengeQuery || req.code == auth::kResponseQuery)
      return authenticate(c, req, why);
    if (!c.authenticated) {
      why = std::string("unauthenticated ") + wire::query_name(req.code) +
            " request (this store requires the job's token, COMMX_AUTH_TOKEN)";
      return false;
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
        if (!put(req.keys[0], std::move(req.values[0]), why)) return false;
        wake(req.keys[0], true);
        break;
      case Query::kAppend: {
        const std::string& k = req.keys[0];
        auto it = kv_.find(k);
        uint64_t have = it == kv_.end() ? 0 : it->second.size();
        if (have + req.values[0].size() > lim_.max_value_bytes) {
          why = "APPEND would grow key '" + k.substr(0, 64) + "' to " +
                std::to_string(have + req.values[0].size()) + " bytes, over the " +
                std::to_string(lim_.max_value_bytes) + "-byte value limit";
          return false;
        }
        if (!fits(0, req.values[0].size() + (it == kv_.end() ? k.size() : 0), k, why)) return false;
        if (it == kv_.end()) {
          stored_ += k.size();
          it = kv_.emplace(k, Bytes{}).first;
        }
        stored_ += req.values[0].size();
        it->second.insert(it->second.end(), req.values[0].begin(), req.values[0].end());
        wake(k, true);
        break;
      }
      case Query::kCompareSet: {
        auto it = kv_.find(req.keys[0]);
        const Bytes& expected = req.values[0];
        if (it == kv_.end() ? expected.empty() : it->second == expected) {
          if (!put(req.keys[0], std::move(req.values[1]), why)) return false;
          w.bytes(kv_.at(req.keys[0]));
          wake(req.keys[0], true);
        } else {
          w.bytes(it == kv_.end() ? expected : it->second);
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
        const std::string& k = req.keys[0];
        auto it = kv_.find(k);
        int64_t cur = 0;
        if (it != kv_.end() && !parse_counter(it->second, cur)) {
          why = "ADD: " + add_error(AddResult::kNotAnInteger, k, req.delta);
          return false;
        }
        std::optional<int64_t> v = checked_add(cur, req.delta);
        if (!v) {
          why = "ADD: " + add_error(AddResult::kOverflow, k, req.delta);
          return false;
        }
        if (!put(k, counter_bytes(*v), why)) return false;
        w.i64(*v);
        wake(k, true);
        break;
      }
      case Query::kCheck: {
        bool all = true;
        for (auto& k : req.keys) all = all && present(k);
        w.u8(all ? wire::kCheckReady : wire::kCheckNotReady);
        break;
      }
      case Query::kWait: {
        if (!c.awaited.empty()) {
          why = "WAIT while an earlier WAIT is pending";
          return false;
        }
        // A key listed twice is awaited once: registration and cancellation stay linear.
        for (auto& k : req.keys) {
          if (c.awaited.count(k) || present(k)) continue;
          uint64_t ticket = next_ticket_++;
          waiters_[k].emplace(ticket, c.id);
          c.awaited.emplace(k, ticket);
        }
        if (c.awaited.empty()) w.u8(wire::kStopWaiting);
        break;
      }
      case Query::kGetNumKeys:
        w.i64(static_cast<int64_t>(kv_.size()));
        break;
      case Query::kDeleteKey: {
        auto it = kv_.find(req.keys[0]);
        bool found = it != kv_.end();
        if (found) erase(it);
        w.i64(found ? 1 : 0);
        break;
      }
      case Query::kMultiGet: {
        // The reply is sized first: a key repeated many times must not build a huge reply.
        uint64_t reply = 0;
        std::vector<const Bytes*> found;
        found.reserve(req.keys.size());
        static const Bytes kEmpty;
        for (auto& k : req.keys) {
          auto it = kv_.find(k);
          found.push_back(it == kv_.end() ? &kEmpty : &it->second);
          reply += 8 + found.back()->size();
        }
        if (reply > lim_.max_request_bytes) {
          why = "MULTI_GET reply of " + std::to_string(reply) + " bytes exceeds " +
                std::to_string(lim_.max_request_bytes);
          return false;
        }
        w.buf().reserve(reply);
        for (const Bytes* v : found) w.bytes(*v);
        break;
      }
      case Query::kMultiSet:
        for (size_t i = 0; i < req.keys.size(); ++i) {
          if (!put(req.keys[i], std::move(req.values[i]), why)) return false;
          wake(req.keys[i], true);
        }
        break;
      case Query::kCancelWait:
        cancel_waits(c);
        w.u8(wire::kWaitCanceled);
        break;
      case Query::kQueuePush: {
        const std::string& k = req.keys[0];
        if (!fits(0, k.size() + req.values[0].size(), k, why)) return false;
        stored_ += k.size() + req.values[0].size();
        queues_[k].push_back(std::move(req.values[0]));
        wake(k, false);
        break;
      }
      case Query::kQueuePop: {
        auto it = queues_.find(req.keys[0]);
        int64_t len = it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
        w.i64(len);
        if (len > 0) {
          w.bytes(it->second.front());
          stored_ -= it->first.size() + it->second.front().size();
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

  // The challenge-response of store_auth.h. Without a token the server cannot prove anything:
  // it answers a challenge with zeros, which the client rejects.
  bool authenticate(Client& c, const Request& req, std::string& why) {
    wire::Writer w;
    if (req.code == auth::kChallengeQuery) {
      std::memcpy(c.client_nonce.data(), req.values[0].data(), auth::kNonceBytes);
      if (token_) {
        c.server_nonce = auth::random_nonce();
        c.challenged = true;
        w.raw(c.server_nonce.data(), c.server_nonce.size());
        auth::Digest p = auth::server_proof(*token_, c.client_nonce, c.server_nonce);
        w.raw(p.data(), p.size());
      } else {
        Bytes zeros(auth::kNonceBytes + 32, 0);
        w.raw(zeros.data(), zeros.size());
      }
      append_out(c, w.buf());
      return true;
    }
    if (!token_ || !c.challenged) {
      why = token_ ? "AUTH_RESPONSE before AUTH_CHALLENGE"
                   : "AUTH_RESPONSE to a store without a token";
      return false;
    }
    auth::Digest got;
    std::memcpy(got.data(), req.values[0].data(), got.size());
    if (!auth::digests_equal(got, auth::client_proof(*token_, c.client_nonce, c.server_nonce))) {
      why = "authentication failed (the client's token differs from this store's)";
      return false;
    }
    c.authenticated = true;
    c.challenged = false;
    unvalidated_.erase(c.id);
    w.u8(auth::kAccepted);
    append_out(c, w.buf());
    return true;
  }

  // A key appeared: wake its waiters (all of them, or the earliest for a queue push).
  void wake(const std::string& key, bool all) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    std::vector<uint64_t> ids;
    if (all) {
      for (auto& [ticket, id] : it->second) ids.push_back(id);
      waiters_.erase(it);
    } else {
      ids.push_back(it->second.begin()->second);
      it->second.erase(it->second.begin());
      if (it->second.empty()) waiters_.erase(it);
    }
    for (uint64_t id : ids) {
      auto c = clients_.find(id);
      if (c == clients_.end() || c->second.awaited.erase(key) == 0) continue;
      if (c->second.awaited.empty()) {
        Bytes reply{wire::kStopWaiting};
        append_out(c->second, reply);
        // Another client's reply goes out now; flushing may drop it, and `c` is not used after.
        if (id != current_) flush(c->second);
      }
    }
  }

  void cancel_waits(Client& c) {
    for (auto& [k, ticket] : c.awaited) {
      auto it = waiters_.find(k);
      if (it == waiters_.end()) continue;
      it->second.erase(ticket);
      if (it->second.empty()) waiters_.erase(it);
    }
    c.awaited.clear();
  }

  void append_out(Client& c, const Bytes& b) {
    c.out.insert(c.out.end(), b.begin(), b.end());
    account(c);
  }

  // Sends what it can and updates the epoll interest. False when `c` was dropped.
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
      c.last_active = Clock::now();
      if (c.out.capacity() > 2 * kReadChunk) c.out.shrink_to_fit();
    } else if (c.out_pos > lim_.max_unsent_reply_bytes / 2) {
      // Compact a long-lived queue of replies so sent bytes are not held.
      c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(c.out_pos));
      c.out_pos = 0;
    }
    account(c);
    update_interest(c);
    return true;
  }

  // Closes one client; `why` empty for an orderly close or one counted in a summary line.
  void drop(Client& c, const std::string& why) {
    if (!why.empty()) log("closing connection from " + c.name + ": " + why);
    cancel_waits(c);
    buffered_ -= c.accounted;
    unvalidated_.erase(c.id);
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    clients_.erase(c.id);
  }

  void log(const std::string& msg) const {
    std::fprintf(stderr, "commx TCPStore server (port %u): %s\n", port_, msg.c_str());
  }

  const TCPStoreServerLimits lim_;
  const std::optional<std::string> token_;  // COMMX_AUTH_TOKEN: clients must prove they know it
  size_t max_connections_ = 0;
  int listen_fd_ = -1;
  int ep_ = -1;
  int wake_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex stop_mu_;
  std::atomic<uint64_t> stat_connections_{0}, stat_buffered_{0}, stat_stored_{0}, stat_refused_{0},
      stat_closed_idle_{0};
  // Owned by the loop thread.
  uint64_t next_id_ = 2;
  uint64_t next_ticket_ = 0;
  std::map<uint64_t, Client> clients_;
  uint64_t current_ = 0;  // the client whose request is running (flushed by process())
  uint64_t buffered_ = 0;
  uint64_t stored_ = 0;
  std::set<uint64_t> unvalidated_;     // connections that have not sent VALIDATE yet
  Clock::time_point no_room_until_{};  // make_room() cannot succeed before then
  std::map<std::string, Bytes> kv_;
  std::unordered_map<std::string, std::deque<Bytes>> queues_;
  // Per key, its waiters in arrival order (ticket -> client id).
  std::unordered_map<std::string, std::map<uint64_t, uint64_t>> waiters_;
  Clock::time_point last_sweep_{}, last_summary_{};
  uint64_t pending_handshake_closed_ = 0, pending_refused_ = 0, pending_idle_closed_ = 0;
  std::string last_refused_;
};

}  // namespace

std::unique_ptr<TCPStoreServer> start_tcp_store_server(const std::string& bind_host, uint16_t port,
                                                       const TCPStoreServerLimits& limits) {
  return std::make_unique<TcpStoreServerImpl>(bind_host, port, limits);
}

}  // namespace commx
