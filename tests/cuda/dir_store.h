// TEST-ONLY rendezvous for multi-process GPU tests until the commx TCP/file stores land: one file
// per key in a directory, written atomically (write + rename), read by polling.
// Layer: tests.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "commx/error.h"
#include "commx/store.h"

namespace commx::testing {

class DirStore : public Store {
 public:
  explicit DirStore(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
  }
  void set(const std::string& key, const Bytes& value) override {
    std::string tmp = path(key) + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(value.data()), value.size());
    }
    std::filesystem::rename(tmp, path(key));
  }
  Bytes get(const std::string& key) override {
    wait({key}, timeout());
    return read(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    Lock l(dir_);
    int64_t v = 0;
    if (exists(key)) {
      Bytes b = read(key);
      v = std::stoll(std::string(b.begin(), b.end()));
    }
    v += delta;
    std::string s = std::to_string(v);
    set(key, Bytes(s.begin(), s.end()));
    return v;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Lock l(dir_);
    if (!exists(key)) {
      if (expected.empty()) set(key, desired);
      return expected.empty() ? desired : expected;
    }
    Bytes cur = read(key);
    if (cur == expected) {
      set(key, desired);
      return desired;
    }
    return cur;
  }
  bool check(const std::vector<std::string>& keys) override {
    for (auto& k : keys)
      if (!exists(k)) return false;
    return true;
  }
  void wait(const std::vector<std::string>& keys, Timeout t) override {
    auto deadline = std::chrono::steady_clock::now() + t;
    while (!check(keys)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(ErrorCode::kTimeout, "DirStore: wait for '" + keys[0] + "' timed out");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bool delete_key(const std::string& key) override { return std::filesystem::remove(path(key)); }
  int64_t num_keys() override {
    return std::distance(std::filesystem::directory_iterator(dir_), {});
  }
  void append(const std::string& key, const Bytes& value) override {
    Lock l(dir_);
    Bytes b = exists(key) ? read(key) : Bytes();
    b.insert(b.end(), value.begin(), value.end());
    set(key, b);
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
  struct Lock {
    int fd;
    explicit Lock(const std::string& dir) {
      fd = ::open((dir + "/.lock").c_str(), O_CREAT | O_RDWR, 0600);
      flock(fd, LOCK_EX);
    }
    ~Lock() {
      flock(fd, LOCK_UN);
      ::close(fd);
    }
  };
  std::string path(const std::string& key) const {
    std::string k = key;
    for (char& c : k)
      if (c == '/') c = '%';
    return dir_ + "/" + k;
  }
  bool exists(const std::string& key) const { return std::filesystem::exists(path(key)); }
  Bytes read(const std::string& key) const {
    std::ifstream f(path(key), std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), {});
  }
  std::string dir_;
};

}  // namespace commx::testing
