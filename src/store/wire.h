// The c10d TCPStore wire format (docs/tcpstore_protocol.md): query codes, native
// little-endian integers, u64-length-prefixed strings. Shared by the TCP store client and server.
// Layer: store (internal).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "commx/store.h"

namespace commx::wire {

enum class Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  kQueuePush = 14,
  kQueuePop = 15,
  kQueueLen = 16,
  kListKeys = 17,
};
inline constexpr uint8_t kMaxQuery = 17;

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// Keys in one CHECK/WAIT/MULTI_GET/MULTI_SET request: the server refuses more (so one request
// costs it a few milliseconds at most); commx's client splits longer lists.
inline constexpr uint64_t kMaxKeysPerRequest = 1u << 16;
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;
// The wait-for-workers counter: a raw key, without the "/" that user keys get.
inline constexpr const char* kInitKey = "init/";

const char* query_name(uint8_t code);

// Builds one request (or reply) in memory so it goes out in one write.
class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void query(Query q) { u8(static_cast<uint8_t>(q)); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void bytes(const Bytes& b) {
    u64(b.size());
    raw(b.data(), b.size());
  }
  void raw(const void* p, size_t n) {
    auto* c = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  const Bytes& buf() const { return buf_; }
  Bytes& buf() { return buf_; }

 private:
  Bytes buf_;
};

// Reads fields from a buffer that may hold only part of a message: every read returns false
// when the bytes are not all there yet (the caller waits for more and parses again).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool u8(uint8_t& v) { return fixed(&v, 1); }
  bool u32(uint32_t& v) { return fixed(&v, 4); }
  bool u64(uint64_t& v) { return fixed(&v, 8); }
  bool i64(int64_t& v) { return fixed(&v, 8); }
  // A length prefix; `too_long` is set when it exceeds `max` (the caller drops the peer).
  bool length(uint64_t max, uint64_t& n, bool& too_long) {
    if (!u64(n)) return false;
    too_long = n > max;
    return true;
  }
  bool str(std::string& s, uint64_t n) {
    if (size_ - pos_ < n) return false;
    s.assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }
  bool bytes(Bytes& b, uint64_t n) {
    if (size_ - pos_ < n) return false;
    b.assign(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return true;
  }
  bool skip(uint64_t n) {
    if (size_ - pos_ < n) return false;
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  bool fixed(void* v, size_t n) {
    if (size_ - pos_ < n) return false;
    std::memcpy(v, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace commx::wire
