// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), for the store's challenge-response
// authentication: small and dependency-free, checked against the RFC 4231 vectors.
// Layer: store (internal).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace commx::auth {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(const void* data, size_t n);
Digest hmac_sha256(const std::string& key, const void* msg, size_t n);

// Equal in time independent of where the inputs differ (no early exit to time).
bool digests_equal(const Digest& a, const Digest& b);

}  // namespace commx::auth
