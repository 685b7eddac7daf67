// FileStore: a Store shared by the processes of one host through one file. The file is an
// append-only log of SET/DELETE records written under an exclusive flock; each process replays
// the records it has not seen yet into a cache. Blocking waits poll with short sleeps, bounded
// by the timeout. Semantics match the TCP store for every Store method.
// Layer: store.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "commx/error.h"
#include "commx/store.h"
#include "store/counter.h"
#include "store/socket_io.h"

namespace commx {
namespace {

constexpr uint8_t kRecSet = 1;
constexpr uint8_t kRecDelete = 2;
// Bookkeeping keys (hidden from num_keys): handles opened so far and handles open now. The file
// is removed when no handle is open any more and at least num_workers were opened, so a process
// that closes one store and opens another (one per comm) never sees the file vanish under it.
constexpr const char* kOpenedKey = "\x01commx/file_store/opened";
constexpr const char* kOpenKey = "\x01commx/file_store/open";

// flock for the life of the object (exclusive or shared).
class FileLock {
 public:
  FileLock(int fd, int op, const std::string& path) : fd_(fd) {
    while (::flock(fd_, op) != 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::kSystem, "FileStore " + path + ": flock: " + strerror(errno));
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

class FileStore : public Store {
 public:
  FileStore(std::string path, int num_workers) : path_(std::move(path)), num_workers_(num_workers) {
    for (;;) {
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd_ < 0)
        throw Error(ErrorCode::kSystem, "FileStore: cannot open " + path_ + ": " + strerror(errno));
      if (num_workers_ <= 0) return;
      FileLock l(fd_, LOCK_EX, path_);
      struct stat st;
      if (::fstat(fd_, &st) == 0 && st.st_nlink == 0) {
        // The last handle of a finished job removed it between our open and lock: open anew.
        ::close(fd_);
        continue;
      }
      add_under_lock(kOpenedKey, 1);
      add_under_lock(kOpenKey, 1);
      return;
    }
  }

  ~FileStore() override {
    try {
      if (num_workers_ > 0) {
        std::lock_guard<std::mutex> g(mu_);
        FileLock l(fd_, LOCK_EX, path_);
        if (add_under_lock(kOpenKey, -1) == 0 && add_under_lock(kOpenedKey, 0) >= num_workers_)
          ::unlink(path_.c_str());
      }
    } catch (const Error&) {
      // A destructor must not throw; the file then stays behind.
    }
    ::close(fd_);
  }

  void set(const std::string& key, const Bytes& value) override {
    std::lock_guard<std::mutex> g(mu_);
    FileLock l(fd_, LOCK_EX, path_);
    Bytes rec;
    encode(rec, kRecSet, key, &value);
    write_locked(rec);
  }

  Bytes get(const std::string& key) override {
    auto deadline = sockio::deadline_after(timeout_);
    for (;;) {
      wait_until({key}, deadline, timeout_);
      std::lock_guard<std::mutex> g(mu_);
      FileLock l(fd_, LOCK_SH, path_);
      refresh_locked();
      auto it = kv_.find(key);
      if (it != kv_.end()) return it->second;
      // Deleted between the wait and the read: wait again.
    }
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> g(mu_);
    FileLock l(fd_, LOCK_EX, path_);
    return add_under_lock(key, delta);
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    std::lock_guard<std::mutex> g(mu_);
    FileLock l(fd_, LOCK_EX, path_);
    refresh_locked();
    auto it = kv_.find(key);
    if (it == kv_.end() ? !expected.empty() : it->second != expected)
      return it == kv_.end() ? expected : it->second;
    Bytes rec;
    encode(rec, kRecSet, key, &desired);
    write_locked(rec);
    return desired;
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> g(mu_);
    refresh_if_grown();
    return missing_locked(keys).empty();
  }

  void wait(const std::vector<std::string>& keys, Timeout timeout) override {
    wait_until(keys, sockio::deadline_after(timeout), timeout);
  }

  bool delete_key(const std::string& key) override {
    std::lock_guard<std::mutex> g(mu_);
    FileLock l(fd_, LOCK_EX, path_);
    refresh_locked();
    if (!kv_.count(key)) return false;
    Bytes rec;
    encode(rec, kRecDelete, key, nullptr);
    write_locked(rec);
    return true;
  }

  int64_t num_keys() override {
    std::lock_guard<std::mutex> g(mu_);
    refresh_if_grown();
    return static_cast<int64_t>(kv_.size() - kv_.count(kOpenedKey) - kv_.count(kOpenKey));
  }

  void append(const std::string& key, const Bytes& value) override {
    std::lock_guard<std::mutex> g(mu_);
    FileLock l(fd_, LOCK_EX, path_);
    refresh_locked();
    Bytes v = kv_.count(key) ? kv_[key] : Bytes{};
    v.insert(v.end(), value.begin(), value.end());
    Bytes rec;
    encode(rec, kRecSet, key, &v);
    write_locked(rec);
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    auto deadline = sockio::deadline_after(timeout_);
    for (;;) {
      wait_until(keys, deadline, timeout_);
      std::lock_guard<std::mutex> g(mu_);
      FileLock l(fd_, LOCK_SH, path_);
      refresh_locked();
      if (!missing_locked(keys).empty()) continue;
      std::vector<Bytes> out;
      out.reserve(keys.size());
      for (auto& k : keys) out.push_back(kv_.at(k));
      return out;
    }
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    if (keys.size() != values.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "FileStore multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
    Bytes rec;
    for (size_t i = 0; i < keys.size(); ++i) encode(rec, kRecSet, keys[i], &values[i]);
    std::lock_guard<std::mutex> g(mu_);
    FileLock l(fd_, LOCK_EX, path_);
    write_locked(rec);
  }

 private:
  static void put_u64(Bytes& b, uint64_t v) {
    auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  static void encode(Bytes& out, uint8_t op, const std::string& key, const Bytes* value) {
    out.push_back(op);
    put_u64(out, key.size());
    out.insert(out.end(), key.begin(), key.end());
    if (value) {
      put_u64(out, value->size());
      out.insert(out.end(), value->begin(), value->end());
    }
  }

  // mu_ and the exclusive flock are held.
  int64_t add_under_lock(const std::string& key, int64_t delta) {
    refresh_locked();
    int64_t cur = 0;
    auto it = kv_.find(key);
    if (it != kv_.end() && !parse_counter(it->second, cur))
      throw Error(ErrorCode::kInvalidArgument,
                  "FileStore " + path_ + ": " + add_error(AddResult::kNotAnInteger, key, delta));
    std::optional<int64_t> sum = checked_add(cur, delta);
    if (!sum)
      throw Error(ErrorCode::kInvalidArgument,
                  "FileStore " + path_ + ": " + add_error(AddResult::kOverflow, key, delta));
    int64_t v = *sum;
    Bytes val = counter_bytes(v);
    Bytes rec;
    encode(rec, kRecSet, key, &val);
    write_locked(rec);
    return v;
  }

  // Appends records (the exclusive lock is held) and replays them into the cache.
  void write_locked(const Bytes& rec) {
    refresh_locked();
    size_t done = 0;
    while (done < rec.size()) {
      ssize_t w = ::write(fd_, rec.data() + done, rec.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0)
        throw Error(ErrorCode::kSystem, "FileStore " + path_ + ": write: " + strerror(errno));
      done += static_cast<size_t>(w);
    }
    refresh_locked();
  }

  // Replays whole records past `offset_` (a lock is held, so no record is half written).
  void refresh_locked() {
    struct stat st;
    if (::fstat(fd_, &st) != 0)
      throw Error(ErrorCode::kSystem, "FileStore " + path_ + ": fstat: " + strerror(errno));
    auto size = static_cast<uint64_t>(st.st_size);
    if (size <= offset_) return;
    Bytes buf(size - offset_);
    size_t got = 0;
    while (got < buf.size()) {
      ssize_t r =
          ::pread(fd_, buf.data() + got, buf.size() - got, static_cast<off_t>(offset_ + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        throw Error(ErrorCode::kSystem, "FileStore " + path_ + ": read: " + strerror(errno));
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    size_t pos = 0;
    auto u64_at = [&](size_t p, uint64_t& v) {
      if (got - p < 8) return false;
      std::memcpy(&v, buf.data() + p, 8);
      return true;
    };
    for (;;) {
      size_t p = pos;
      if (p >= got) break;
      uint8_t op = buf[p++];
      if (op != kRecSet && op != kRecDelete)
        throw Error(ErrorCode::kInternal, "FileStore " + path_ + ": corrupt record at offset " +
                                              std::to_string(offset_ + pos) +
                                              " (not a commx store file?)");
      uint64_t klen;
      if (!u64_at(p, klen) || got - (p + 8) < klen) break;
      p += 8;
      std::string key(reinterpret_cast<const char*>(buf.data() + p), klen);
      p += klen;
      if (op == kRecDelete) {
        kv_.erase(key);
      } else {
        uint64_t vlen;
        if (!u64_at(p, vlen) || got - (p + 8) < vlen) break;
        p += 8;
        kv_[key] = Bytes(buf.begin() + static_cast<std::ptrdiff_t>(p),
                         buf.begin() + static_cast<std::ptrdiff_t>(p + vlen));
        p += vlen;
      }
      pos = p;
    }
    offset_ += pos;
  }

  // Polling path: take the shared lock only when the file grew since the last replay.
  void refresh_if_grown() {
    struct stat st;
    if (::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) == offset_) return;
    FileLock l(fd_, LOCK_SH, path_);
    refresh_locked();
  }

  std::string missing_locked(const std::vector<std::string>& keys) const {
    std::string missing;
    for (auto& k : keys)
      if (!kv_.count(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
    return missing;
  }

  void wait_until(const std::vector<std::string>& keys, sockio::Clock::time_point deadline,
                  Timeout timeout) {
    auto nap = std::chrono::microseconds(500);
    for (;;) {
      std::string missing;
      {
        std::lock_guard<std::mutex> g(mu_);
        refresh_if_grown();
        missing = missing_locked(keys);
      }
      if (missing.empty()) return;
      if (sockio::Clock::now() >= deadline)
        throw Error(ErrorCode::kTimeout, "FileStore " + path_ + ": wait timed out after " +
                                             std::to_string(timeout.count()) +
                                             " ms; missing keys: " + missing);
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(10));
    }
  }

  std::string path_;
  int num_workers_;
  int fd_ = -1;
  std::mutex mu_;  // flock does not exclude threads sharing this descriptor
  uint64_t offset_ = 0;
  std::map<std::string, Bytes> kv_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& path, int num_workers) {
  return std::make_shared<FileStore>(path, num_workers);
}

}  // namespace commx
