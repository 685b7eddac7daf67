// Test helpers: several handles on one shared store of each kind (hash, TCP, file, prefix), so
// parameterised tests run every Store method against every implementation.
// Layer: tests (store).
#pragma once

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "commx/store.h"

namespace commx::test {

// A fresh file path under TMPDIR (the file itself is not created).
inline std::string temp_store_path(const std::string& tag) {
  static std::atomic<int> n{0};
  const char* tmp = getenv("TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/commx-test-" + tag + "-" + std::to_string(getpid()) +
         "-" + std::to_string(n++);
}

class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  // Another handle on the same store (a new connection for TCP, a new open for files).
  virtual std::shared_ptr<Store> client() = 0;
};

class HashEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> client() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = make_hash_store();
};

class TcpEnv : public StoreEnv {
 public:
  TcpEnv() : server_(start_tcp_store_server("127.0.0.1", 0)) {}
  std::shared_ptr<Store> client() override {
    TCPStoreOptions o;
    o.port = server_->port();
    o.timeout = std::chrono::seconds(30);
    return make_tcp_store("127.0.0.1", o);
  }
  uint16_t port() const { return server_->port(); }
  TCPStoreServer& server() { return *server_; }

 private:
  std::unique_ptr<TCPStoreServer> server_;
};

class FileEnv : public StoreEnv {
 public:
  FileEnv() : path_(temp_store_path("file")) {}
  ~FileEnv() override { ::unlink(path_.c_str()); }
  std::shared_ptr<Store> client() override { return make_file_store(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Prefix views over another kind; every handle uses the same prefix.
class PrefixEnv : public StoreEnv {
 public:
  explicit PrefixEnv(std::unique_ptr<StoreEnv> base) : base_(std::move(base)) {}
  std::shared_ptr<Store> client() override { return make_prefix_store("pfx", base_->client()); }

 private:
  std::unique_ptr<StoreEnv> base_;
};

inline std::unique_ptr<StoreEnv> make_env(const std::string& kind) {
  if (kind == "hash") return std::make_unique<HashEnv>();
  if (kind == "tcp") return std::make_unique<TcpEnv>();
  if (kind == "file") return std::make_unique<FileEnv>();
  if (kind == "prefix_tcp") return std::make_unique<PrefixEnv>(std::make_unique<TcpEnv>());
  return std::make_unique<PrefixEnv>(std::make_unique<FileEnv>());
}

inline Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline std::string S(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace commx::test
