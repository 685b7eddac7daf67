// HashStore: an in-process store (threads as ranks, single-rank jobs, tests).
// Layer: store.
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>

#include "commx/error.h"
#include "commx/store.h"
#include "store/counter.h"
#include "store/socket_io.h"

namespace commx {
namespace {

class HashStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      kv_[key] = value;
    }
    cv_.notify_all();
  }
  Bytes get(const std::string& key) override {
    // One lock across wait and read: a delete in between cannot make the read fail.
    std::unique_lock<std::mutex> g(mu_);
    wait_locked(g, {key}, timeout());
    return kv_.at(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    AddResult r;
    {
      std::lock_guard<std::mutex> g(mu_);
      r = add_counter(kv_, key, delta, v);
    }
    if (r != AddResult::kOk)
      throw Error(ErrorCode::kInvalidArgument, "HashStore: " + add_error(r, key, delta));
    cv_.notify_all();
    return v;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes result;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = kv_.find(key);
      if (it == kv_.end()) {
        if (!expected.empty()) return expected;
        kv_[key] = desired;
        result = desired;
      } else if (it->second == expected) {
        it->second = desired;
        result = desired;
      } else {
        return it->second;
      }
    }
    cv_.notify_all();
    return result;
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> g(mu_);
    return all_present(keys);
  }
  void wait(const std::vector<std::string>& keys, Timeout timeout) override {
    std::unique_lock<std::mutex> g(mu_);
    wait_locked(g, keys, timeout);
  }
  bool delete_key(const std::string& key) override {
    std::lock_guard<std::mutex> g(mu_);
    return kv_.erase(key) > 0;
  }
  int64_t num_keys() override {
    std::lock_guard<std::mutex> g(mu_);
    return static_cast<int64_t>(kv_.size());
  }
  void append(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto& v = kv_[key];
      v.insert(v.end(), value.begin(), value.end());
    }
    cv_.notify_all();
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    std::unique_lock<std::mutex> g(mu_);
    wait_locked(g, keys, timeout());
    std::vector<Bytes> out;
    for (auto& k : keys) out.push_back(kv_.at(k));
    return out;
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "HashStore multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = 0; i < keys.size(); ++i) kv_[keys[i]] = values[i];
    }
    cv_.notify_all();
  }

 private:
  // wait_until with a saturated deadline: wait_for(Timeout::max()) would overflow the clock.
  void wait_locked(std::unique_lock<std::mutex>& g, const std::vector<std::string>& keys,
                   Timeout timeout) {
    if (cv_.wait_until(g, sockio::deadline_after(timeout), [&] { return all_present(keys); }))
      return;
    std::string names;
    for (auto& k : keys)
      if (!kv_.count(k)) names += (names.empty() ? "'" : ", '") + k + "'";
    throw Error(ErrorCode::kTimeout, "HashStore: wait timed out after " +
                                         std::to_string(timeout.count()) +
                                         " ms; missing keys: " + names);
  }
  bool all_present(const std::vector<std::string>& keys) const {
    for (auto& k : keys)
      if (!kv_.count(k)) return false;
    return true;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> kv_;
};

}  // namespace

std::shared_ptr<Store> make_hash_store() { return std::make_shared<HashStore>(); }

}  // namespace commx
