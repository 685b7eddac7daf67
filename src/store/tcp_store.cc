// TCPStore client: a Store over the c10d TCPStore wire protocol (docs/tcpstore_protocol.md),
// so commx joins the store torchrun/torch.distributed host, or the one commx-run/rank 0 hosts.
// One request in flight per connection, guarded by a mutex; user keys go out as "/<key>".
// Layer: store.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "commx/error.h"
#include "commx/store.h"
#include "store/socket_io.h"
#include "store/store_auth.h"
#include "store/wire.h"

namespace commx {
namespace {

using sockio::Clock;
using sockio::IoStatus;
using wire::Query;

// A reply value larger than this is taken as a broken stream rather than allocated.
constexpr uint64_t kMaxReplyValue = uint64_t{4} << 30;

class TcpStoreClient : public Store {
 public:
  TcpStoreClient(std::string host, const TCPStoreOptions& opts)
      : host_(std::move(host)), token_(auth::token_from_env()) {
    timeout_ = opts.timeout;
    port_ = opts.port;
    if (opts.is_server) {
      // Hosting: listen on every interface unless the address is a loopback one.
      server_ = start_tcp_store_server(sockio::is_loopback_host(host_) ? host_ : "0.0.0.0", port_);
      port_ = server_->port();
    }
    if (!token_) auth::warn_unauthenticated(where());
    std::lock_guard<std::mutex> g(mu_);
    connect_locked(sockio::deadline_after(timeout_));
    if (opts.wait_for_workers && opts.num_workers)
      wait_for_workers_locked(*opts.num_workers, opts.is_server);
  }
  ~TcpStoreClient() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const Bytes& value) override {
    write_value(Query::kSet, "SET", key, value);
  }

  Bytes get(const std::string& key) override {
    std::lock_guard<std::mutex> g(mu_);
    wait_locked({key}, timeout_);
    wire::Writer w;
    w.query(Query::kGet);
    w.str(wk(key));
    auto dl = request_locked(w, "GET", key);
    return read_bytes(dl, "GET", key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    wire::Writer w;
    w.query(Query::kAdd);
    w.str(wk(key));
    w.i64(delta);
    std::lock_guard<std::mutex> g(mu_);
    auto dl = request_locked(w, "ADD", key);
    int64_t v;
    read_raw(&v, sizeof v, dl, "ADD", key);
    return v;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    wire::Writer w;
    w.query(Query::kCompareSet);
    w.str(wk(key));
    w.bytes(expected);
    w.bytes(desired);
    std::lock_guard<std::mutex> g(mu_);
    auto dl = request_locked(w, "COMPARE_SET", key);
    return read_bytes(dl, "COMPARE_SET", key);
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> g(mu_);
    if (keys.size() <= wire::kMaxKeysPerRequest) return check_locked(keys);
    for (auto& part : chunks(keys))
      if (!check_locked(part)) return false;
    return true;
  }

  void wait(const std::vector<std::string>& keys, Timeout timeout) override {
    if (keys.empty()) return;  // nothing to wait for, whatever a server makes of WAIT 0
    std::lock_guard<std::mutex> g(mu_);
    wait_all_locked(keys, timeout);
  }

  bool delete_key(const std::string& key) override {
    wire::Writer w;
    w.query(Query::kDeleteKey);
    w.str(wk(key));
    std::lock_guard<std::mutex> g(mu_);
    auto dl = request_locked(w, "DELETE_KEY", key);
    int64_t v;
    read_raw(&v, sizeof v, dl, "DELETE_KEY", key);
    return v != 0;
  }

  int64_t num_keys() override {
    wire::Writer w;
    w.query(Query::kGetNumKeys);
    std::lock_guard<std::mutex> g(mu_);
    auto dl = request_locked(w, "GETNUMKEYS", "");
    int64_t v;
    read_raw(&v, sizeof v, dl, "GETNUMKEYS", "");
    return v;
  }

  void append(const std::string& key, const Bytes& value) override {
    write_value(Query::kAppend, "APPEND", key, value);
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    if (keys.empty()) return {};
    std::lock_guard<std::mutex> g(mu_);
    wait_all_locked(keys, timeout_);
    std::vector<Bytes> out;
    out.reserve(keys.size());
    for (auto& part : chunks(keys)) {
      wire::Writer w;
      w.query(Query::kMultiGet);
      w.u64(part.size());
      for (auto& k : part) w.str(wk(k));
      auto dl = request_locked(w, "MULTI_GET", "");
      for (auto& k : part) out.push_back(read_bytes(dl, "MULTI_GET", k));
    }
    return out;
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "TCPStore multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
    std::lock_guard<std::mutex> g(mu_);
    for (size_t first = 0; first < keys.size(); first += wire::kMaxKeysPerRequest) {
      size_t n = std::min<size_t>(keys.size() - first, wire::kMaxKeysPerRequest);
      wire::Writer w;
      w.query(Query::kMultiSet);
      w.u64(n);
      for (size_t i = first; i < first + n; ++i) {
        w.str(wk(keys[i]));
        w.bytes(values[i]);
      }
      request_locked(w, "MULTI_SET", "");
    }
  }

 private:
  // A request that sends `value` for `key` and expects no answer (set, append).
  void write_value(Query q, const char* op, const std::string& key, const Bytes& value) {
    wire::Writer w;
    w.query(q);
    w.str(wk(key));
    w.bytes(value);
    std::lock_guard<std::mutex> g(mu_);
    request_locked(w, op, key);
  }
  static std::string wk(const std::string& key) { return "/" + key; }

  // `keys` in pieces the server accepts in one request.
  static std::vector<std::vector<std::string>> chunks(const std::vector<std::string>& keys) {
    std::vector<std::vector<std::string>> out;
    for (size_t i = 0; i < keys.size(); i += wire::kMaxKeysPerRequest)
      out.emplace_back(keys.begin() + static_cast<std::ptrdiff_t>(i),
                       keys.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(
                                          keys.size(), i + wire::kMaxKeysPerRequest)));
    return out;
  }

  // WAIT for any number of keys: piece by piece, within one overall timeout.
  void wait_all_locked(const std::vector<std::string>& keys, Timeout timeout) {
    if (keys.size() <= wire::kMaxKeysPerRequest) return wait_locked(keys, timeout);
    auto deadline = sockio::deadline_after(timeout);
    for (auto& part : chunks(keys)) {
      auto left = std::chrono::duration_cast<Timeout>(deadline - Clock::now());
      wait_locked(part, std::max(left, Timeout(0)));
    }
  }

  std::string where() const { return "TCPStore " + host_ + ":" + std::to_string(port_); }

  // Connects with jittered exponential backoff until the deadline, then VALIDATE + PING.
  void connect_locked(Clock::time_point deadline) {
    std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                     static_cast<unsigned>(Clock::now().time_since_epoch().count()));
    auto backoff = std::chrono::milliseconds(10);
    std::string why;
    int attempts = 0;
    for (;;) {
      ++attempts;
      int fd = sockio::try_connect(host_, port_, deadline, why);
      if (fd >= 0) {
        bool fatal = false;
        if (handshake(fd, deadline, why, fatal)) {
          fd_ = fd;
          return;
        }
        ::close(fd);
        // A server that fails authentication will fail it again: no retries.
        if (fatal) throw Error(ErrorCode::kInvalidArgument, where() + ": " + why);
      }
      auto now = Clock::now();
      if (now >= deadline) break;
      std::uniform_int_distribution<int> jitter(0, static_cast<int>(backoff.count()) / 2);
      auto sleep = backoff + std::chrono::milliseconds(jitter(rng));
      if (deadline != Clock::time_point::max())
        sleep = std::min<std::chrono::milliseconds>(
            sleep, std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
      std::this_thread::sleep_for(sleep);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
    }
    throw Error(ErrorCode::kTimeout,
                "cannot connect to " + where() + " within " + std::to_string(timeout_.count()) +
                    " ms (" + std::to_string(attempts) + " attempts; last: " + why + ")");
  }

  // With a token: VALIDATE + AUTH_CHALLENGE, check the server's proof, answer with ours. Then
  // PING; the server must echo the nonce. `fatal` when authentication failed.
  bool handshake(int fd, Clock::time_point deadline, std::string& why, bool& fatal) {
    uint32_t nonce = static_cast<uint32_t>(::getpid());
    wire::Writer w;
    w.query(Query::kValidate);
    w.u32(wire::kValidationMagic);
    if (token_ && !authenticate(fd, w, deadline, why, fatal)) return false;
    w.query(Query::kPing);
    w.u32(nonce);
    if (sockio::send_all(fd, w.buf().data(), w.buf().size(), deadline, why) != IoStatus::kOk)
      return false;
    if (token_) {
      uint8_t verdict = 0;
      IoStatus st = sockio::recv_exact(fd, &verdict, 1, deadline, why);
      if (st == IoStatus::kClosed || (st == IoStatus::kOk && verdict != auth::kAccepted)) {
        fatal = true;
        why =
            "the server rejected this process's token (COMMX_AUTH_TOKEN differs from the "
            "store's)";
      }
      if (st != IoStatus::kOk || fatal) return false;
    }
    uint32_t echo = 0;
    IoStatus st = sockio::recv_exact(fd, &echo, sizeof echo, deadline, why);
    if (st == IoStatus::kTimeout) why = "no PING reply";
    if (st != IoStatus::kOk) return false;
    if (echo != nonce) {
      why = "PING echo mismatch (not a TCPStore server?)";
      return false;
    }
    return true;
  }

  // Sends the challenge (after the VALIDATE already in `w`), checks the server's proof and leaves
  // the answer in `w` (cleared of what was sent). The token never goes on the wire.
  bool authenticate(int fd, wire::Writer& w, Clock::time_point deadline, std::string& why,
                    bool& fatal) {
    auth::Nonce mine = auth::random_nonce();
    w.u8(auth::kChallengeQuery);
    w.raw(mine.data(), mine.size());
    if (sockio::send_all(fd, w.buf().data(), w.buf().size(), deadline, why) != IoStatus::kOk)
      return false;
    w.buf().clear();
    uint8_t reply[auth::kNonceBytes + 32];
    IoStatus st = sockio::recv_exact(fd, reply, sizeof reply, deadline, why);
    if (st == IoStatus::kClosed) {
      fatal = true;
      why =
          "the server closed the connection on the authentication request (a store without "
          "authentication, such as torch's TCPStore? Unset COMMX_AUTH_TOKEN to use it)";
    }
    if (st != IoStatus::kOk) return false;
    auth::Nonce theirs;
    auth::Digest proof;
    std::memcpy(theirs.data(), reply, theirs.size());
    std::memcpy(proof.data(), reply + theirs.size(), proof.size());
    if (!auth::digests_equal(proof, auth::server_proof(*token_, mine, theirs))) {
      fatal = true;
      why =
          "the server did not prove it knows this job's token (a store with another token or "
          "none, or not the job's store)";
      return false;
    }
    auth::Digest answer = auth::client_proof(*token_, mine, theirs);
    w.u8(auth::kResponseQuery);
    w.raw(answer.data(), answer.size());
    return true;
  }

  // Sends one request (reconnecting first if an earlier error broke the connection) and
  // returns the deadline for its reply.
  Clock::time_point request_locked(const wire::Writer& w, const char* op, const std::string& key) {
    auto dl = sockio::deadline_after(timeout_);
    // Between requests nothing may arrive: a readable socket means the server closed it (SET
    // has no reply, so this is the only way a dead server shows before the next read).
    if (fd_ >= 0) {
      pollfd p{fd_, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) != 0) {
        ::close(fd_);
        fd_ = -1;
      }
    }
    if (fd_ < 0) connect_locked(dl);
    std::string why;
    IoStatus st = sockio::send_all(fd_, w.buf().data(), w.buf().size(), dl, why);
    if (st != IoStatus::kOk) fail(st, why, op, key);
    return dl;
  }

  // The connection is unusable after any error (a reply may be half read): close it; the next
  // operation reconnects.
  [[noreturn]] void fail(IoStatus st, const std::string& why, const char* op,
                         const std::string& key) {
    ::close(fd_);
    fd_ = -1;
    std::string what = where() + ": " + op + (key.empty() ? "" : " '" + key + "'") + ": ";
    if (st == IoStatus::kTimeout)
      throw Error(ErrorCode::kTimeout,
                  what + "no reply within " + std::to_string(timeout_.count()) + " ms");
    if (st == IoStatus::kClosed)
      throw Error(ErrorCode::kPeerFailure,
                  what + why + " (the server closes the connection on a request it rejects)");
    throw Error(ErrorCode::kSystem, what + why);
  }

  void read_raw(void* p, size_t n, Clock::time_point dl, const char* op, const std::string& key) {
    std::string why;
    IoStatus st = sockio::recv_exact(fd_, p, n, dl, why);
    if (st != IoStatus::kOk) fail(st, why, op, key);
  }

  Bytes read_bytes(Clock::time_point dl, const char* op, const std::string& key) {
    uint64_t n = 0;
    read_raw(&n, sizeof n, dl, op, key);
    if (n > kMaxReplyValue)
      protocol_error(op, "value length " + std::to_string(n) + " (not a TCPStore server?)");
    Bytes b(n);
    if (n > 0) read_raw(b.data(), n, dl, op, key);
    return b;
  }

  bool check_locked(const std::vector<std::string>& keys) {
    wire::Writer w;
    w.query(Query::kCheck);
    w.u64(keys.size());
    for (auto& k : keys) w.str(wk(k));
    auto dl = request_locked(w, "CHECK", keys.size() == 1 ? keys[0] : "");
    uint8_t r;
    read_raw(&r, 1, dl, "CHECK", "");
    if (r != wire::kCheckReady && r != wire::kCheckNotReady)
      protocol_error("CHECK", "reply byte " + std::to_string(r));
    return r == wire::kCheckReady;
  }

  [[noreturn]] void protocol_error(const char* op, const std::string& what) {
    ::close(fd_);
    fd_ = -1;
    throw Error(ErrorCode::kInternal, where() + ": " + op + ": unexpected " + what);
  }

  // WAIT; the server stays silent until all keys exist, so the timeout is ours: on expiry send
  // CANCEL_WAIT and read the reply (STOP_WAITING may have raced the cancel).
  void wait_locked(const std::vector<std::string>& keys, Timeout timeout) {
    wire::Writer w;
    w.query(Query::kWait);
    w.u64(keys.size());
    for (auto& k : keys) w.str(wk(k));
    request_locked(w, "WAIT", keys.size() == 1 ? keys[0] : "");
    auto dl = sockio::deadline_after(timeout);
    uint8_t r = 0;
    std::string why;
    IoStatus st = sockio::recv_exact(fd_, &r, 1, dl, why);
    if (st == IoStatus::kOk) {
      if (r != wire::kStopWaiting) protocol_error("WAIT", "reply byte " + std::to_string(r));
      return;
    }
    if (st != IoStatus::kTimeout) fail(st, why, "WAIT", "");
    wire::Writer c;
    c.query(Query::kCancelWait);
    auto cdl = request_locked(c, "CANCEL_WAIT", "");
    read_raw(&r, 1, cdl, "CANCEL_WAIT", "");
    if (r == wire::kStopWaiting) {
      // The keys arrived just before the cancel: the wait succeeded.
      read_raw(&r, 1, cdl, "CANCEL_WAIT", "");
      if (r != wire::kWaitCanceled)
        protocol_error("CANCEL_WAIT", "reply byte " + std::to_string(r));
      return;
    }
    if (r != wire::kWaitCanceled) protocol_error("CANCEL_WAIT", "reply byte " + std::to_string(r));
    std::string missing;
    for (auto& k : keys) {
      if (!check_locked({k})) missing += (missing.empty() ? "'" : ", '") + k + "'";
    }
    throw Error(ErrorCode::kTimeout, where() + ": wait timed out after " +
                                         std::to_string(timeout.count()) +
                                         " ms; missing keys: " + missing);
  }

  // torch's wait-for-workers: every counted participant adds 1 to the raw key "init/" once; the
  // host polls it until all have joined.
  void wait_for_workers_locked(int num_workers, bool is_host) {
    auto add_init = [&](int64_t d) {
      wire::Writer w;
      w.query(Query::kAdd);
      w.str(wire::kInitKey);
      w.i64(d);
      auto dl = request_locked(w, "ADD", wire::kInitKey);
      int64_t v;
      read_raw(&v, sizeof v, dl, "ADD", wire::kInitKey);
      return v;
    };
    int64_t joined = add_init(1);
    if (!is_host) return;
    auto deadline = sockio::deadline_after(timeout_);
    while (joined < num_workers) {
      if (Clock::now() >= deadline)
        throw Error(ErrorCode::kTimeout, where() + ": timed out after " +
                                             std::to_string(timeout_.count()) +
                                             " ms waiting for clients; " + std::to_string(joined) +
                                             "/" + std::to_string(num_workers) + " clients joined");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      joined = add_init(0);
    }
  }

  std::string host_;
  std::optional<std::string> token_;  // COMMX_AUTH_TOKEN: prove it to the server, and it to us
  uint16_t port_ = 0;
  std::unique_ptr<TCPStoreServer> server_;  // when this client hosts the store
  std::mutex mu_;
  int fd_ = -1;
};

}  // namespace

std::shared_ptr<Store> make_tcp_store(const std::string& host, TCPStoreOptions opts) {
  return std::make_shared<TcpStoreClient>(host, opts);
}

}  // namespace commx
