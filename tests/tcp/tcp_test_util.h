// Helpers of the TCP transport tests: ranks as threads or as forked processes, a store in a
// directory (works across processes and network namespaces), and test patterns.
// Layer: tests.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commx/error.h"
#include "commx/store.h"
#include "cpu/fork_ranks.h"
#include "transport/tcp_transport.h"

namespace commx::test {

// A minimal Store over files of one directory: set writes a file atomically (rename), get/wait
// poll for it. No add/compare_set/append (nothing here needs them).
class DirStore : public Store {
 public:
  explicit DirStore(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, const Bytes& v) override {
    std::string tmp = path(key) + ".tmp." + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(v.data()), v.size());
    }
    std::filesystem::rename(tmp, path(key));
  }
  Bytes get(const std::string& key) override {
    wait({key}, timeout());
    std::ifstream f(path(key), std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), {});
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      if (!std::filesystem::exists(path(k))) return false;
    }
    return true;
  }
  void wait(const std::vector<std::string>& keys, Timeout t) override {
    auto end = std::chrono::steady_clock::now() + t;
    while (!check(keys)) {
      if (std::chrono::steady_clock::now() >= end) {
        throw Error(ErrorCode::kTimeout, "DirStore: wait timed out");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bool delete_key(const std::string& key) override { return std::filesystem::remove(path(key)); }
  int64_t add(const std::string&, int64_t) override { throw unsupported(); }
  Bytes compare_set(const std::string&, const Bytes&, const Bytes&) override {
    throw unsupported();
  }
  int64_t num_keys() override { throw unsupported(); }
  void append(const std::string&, const Bytes&) override { throw unsupported(); }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    std::vector<Bytes> out;
    for (const auto& k : keys) out.push_back(get(k));
    return out;
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
  }

 private:
  static Error unsupported() { return Error(ErrorCode::kUnsupported, "DirStore: not needed"); }
  std::string path(const std::string& key) const {
    std::string name;
    for (char c : key) name += (c == '/') ? '%' : c;
    return dir_ + "/" + name;
  }
  std::string dir_;
};

// A fresh empty directory under /tmp, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/commx_tcp_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline Deadline in_ms(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Runs fn(rank) on `n` threads; rethrows the first exception.
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errs(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errs[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errs) {
    if (e) std::rethrow_exception(e);
  }
}

// Runs fn(rank) in `n` forked processes; returns each one's exit status (0: fn returned 0;
// 100: fn threw, with the message on stderr; 128+sig: killed). Children still alive after
// `limit_ms` are killed, so a hang fails the test instead of blocking it.
inline std::vector<int> run_processes(
    int n, const std::function<int(int)>& fn, int64_t limit_ms = 60000,
    std::vector<pid_t>* pids_out = nullptr,
    const std::function<void(std::vector<pid_t>&)>& parent = nullptr) {
  std::vector<pid_t> pids = testing::fork_ranks(n, [&](int r) {
    int rc = 100;
    try {
      rc = fn(r);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", r, e.what());
    }
    return rc;
  });
  if (pids_out) *pids_out = pids;
  if (parent) parent(pids);
  std::vector<int> status =
      testing::wait_ranks(pids, Clock::now() + std::chrono::milliseconds(limit_ms));
  // Exit codes; a signal (the deadline's SIGKILL included) as 128 + its number.
  for (int& s : status)
    s = s < 0 ? 128 + SIGKILL : WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  return status;
}

// A byte pattern that differs per (sender, message, position).
inline uint8_t pattern(int sender, int msg, size_t i) {
  return static_cast<uint8_t>((sender * 131 + msg * 31 + i * 7 + (i >> 9)) & 0xff);
}
inline std::vector<uint8_t> make_payload(int sender, int msg, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = pattern(sender, msg, i);
  return v;
}
// Index of the first wrong byte, or -1.
inline int64_t first_mismatch(const std::vector<uint8_t>& v, int sender, int msg) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != pattern(sender, msg, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace commx::test
