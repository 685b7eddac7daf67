// A test-only Store in a directory (one file per key, written by rename, add() under flock), so
// forked ranks can rendezvous without the TCP/File stores of the store component.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "commx/error.h"
#include "commx/store.h"

namespace commx::testing {

class DirStore : public Store {
 public:
  explicit DirStore(std::string dir) : dir_(std::move(dir)) {}

  void set(const std::string& key, const Bytes& value) override {
    std::string tmp = path(key) + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    }
    std::rename(tmp.c_str(), path(key).c_str());
  }
  Bytes get(const std::string& key) override {
    wait({key}, timeout());
    return read(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int lk = ::open((dir_ + "/.lock").c_str(), O_CREAT | O_RDWR, 0600);
    flock(lk, LOCK_EX);
    int64_t v = 0;
    if (exists(key)) {
      Bytes b = read(key);
      v = std::stoll(std::string(b.begin(), b.end()));
    }
    v += delta;
    std::string s = std::to_string(v);
    set(key, Bytes(s.begin(), s.end()));
    flock(lk, LOCK_UN);
    ::close(lk);
    return v;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    int lk = ::open((dir_ + "/.lock").c_str(), O_CREAT | O_RDWR, 0600);
    flock(lk, LOCK_EX);
    Bytes cur = exists(key) ? read(key) : Bytes{};
    if ((!exists(key) && expected.empty()) || cur == expected) {
      set(key, desired);
      cur = desired;
    }
    flock(lk, LOCK_UN);
    ::close(lk);
    return cur;
  }
  bool check(const std::vector<std::string>& keys) override {
    for (auto& k : keys)
      if (!exists(k)) return false;
    return true;
  }
  void wait(const std::vector<std::string>& keys, Timeout t) override {
    auto end = std::chrono::steady_clock::now() + t;
    while (!check(keys)) {
      if (std::chrono::steady_clock::now() > end)
        throw Error(ErrorCode::kTimeout, "DirStore wait timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
  bool delete_key(const std::string& key) override { return std::remove(path(key).c_str()) == 0; }
  int64_t num_keys() override { return 0; }
  void append(const std::string& key, const Bytes& value) override {
    Bytes cur = exists(key) ? read(key) : Bytes{};
    cur.insert(cur.end(), value.begin(), value.end());
    set(key, cur);
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    std::vector<Bytes> out;
    for (auto& k : keys) out.push_back(get(k));
    return out;
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
  }

 private:
  std::string path(const std::string& key) const {
    std::string p = dir_ + "/k_";
    for (char c : key) p += (c == '/' ? '#' : c);
    return p;
  }
  bool exists(const std::string& key) const { return access(path(key).c_str(), F_OK) == 0; }
  Bytes read(const std::string& key) const {
    std::ifstream f(path(key), std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), {});
  }
  std::string dir_;
};

}  // namespace commx::testing
