// Store: the key-value rendezvous service. TCPStore speaks the c10d TCPStore wire protocol,
// so commx can join the store torchrun hosts, or host one for processes without torch.
// Layer: public API (implementations in src/store/).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commx/options.h"

namespace commx {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until the key exists or the store's timeout passes (Timeout error).
  virtual Bytes get(const std::string& key) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // See the c10d semantics in docs/store.md.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, Timeout timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;
  virtual void append(const std::string& key, const Bytes& value) = 0;
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys) = 0;
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) = 0;

  Timeout timeout() const { return timeout_; }
  void set_timeout(Timeout t) { timeout_ = t; }

  // Convenience for string values.
  void set_str(const std::string& key, const std::string& v) { set(key, Bytes(v.begin(), v.end())); }
  std::string get_str(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  Timeout timeout_ = std::chrono::seconds(300);
};

struct TCPStoreOptions {
  uint16_t port = 0;  // 0 with is_server: pick a free port (see TCPStoreServer::port())
  bool is_server = false;
  std::optional<int> num_workers;   // wait-for-workers: counted via ADD "init/" 1
  bool wait_for_workers = false;
  Timeout timeout = std::chrono::seconds(300);
};

// Client of a c10d-protocol TCP store (and optionally its host).
std::shared_ptr<Store> make_tcp_store(const std::string& host, TCPStoreOptions opts);

// What the TCP store server allows one client, and all of them together, so that no client that
// can reach its port stalls or bloats it (docs/store.md, "Server limits"). A request over a limit
// closes that client's connection with a log line; the server keeps serving the others.
struct TCPStoreServerLimits {
  uint64_t max_value_bytes = uint64_t{256} << 20;     // one value, set or grown by APPEND
  uint64_t max_request_bytes = uint64_t{512} << 20;   // one request, and one request's reply
  uint64_t max_unsent_reply_bytes = uint64_t{64} << 20;  // per client: stop reading it beyond
  uint64_t max_buffered_bytes = uint64_t{1} << 30;    // all clients' partial requests + replies
  uint64_t max_stored_bytes = uint64_t{2} << 30;      // keys + values + queued items
  int max_connections = 0;  // 0: the descriptor limit (RLIMIT_NOFILE) less a reserve of 64
  // A connection that sent no VALIDATE this long after connecting is closed.
  std::chrono::milliseconds handshake_timeout{10000};
  // At the connection cap, a connection idle this long (no request, nothing pending) is closed
  // to make room for a new one; without one idle that long, the new connection is refused.
  std::chrono::milliseconds idle_timeout{30000};
};

// Counters of a running server (for tests and diagnostics).
struct TCPStoreServerStats {
  uint64_t connections = 0;
  uint64_t buffered_bytes = 0;  // partial requests and unsent replies of every client
  uint64_t stored_bytes = 0;
  uint64_t connections_refused = 0;
  uint64_t connections_closed_idle = 0;
};

// A standalone c10d-protocol server (used by commx-run and by rank 0 when nobody hosts one).
class TCPStoreServer {
 public:
  virtual ~TCPStoreServer() = default;
  virtual uint16_t port() const = 0;
  virtual TCPStoreServerStats stats() const = 0;
  virtual void stop() = 0;
};
// The defaults above, overridden by the COMMX_STORE_* variables (docs/env.md).
TCPStoreServerLimits tcp_store_server_limits_from_env();
std::unique_ptr<TCPStoreServer> start_tcp_store_server(
    const std::string& bind_host, uint16_t port,
    const TCPStoreServerLimits& limits = tcp_store_server_limits_from_env());

// A store in one file shared by the processes of one host (locks with flock).
std::shared_ptr<Store> make_file_store(const std::string& path, int num_workers = -1);
// A store inside one process (threads as ranks, tests).
std::shared_ptr<Store> make_hash_store();
// Prefixes every key with "<prefix>/".
std::shared_ptr<Store> make_prefix_store(const std::string& prefix, std::shared_ptr<Store> base);

}  // namespace commx
