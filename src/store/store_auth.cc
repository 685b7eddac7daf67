// Store authentication helpers (see store_auth.h). Layer: store.
#include "store/store_auth.h"

#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commx/error.h"
#include "core/settings.h"

namespace commx::auth {
namespace {

void fill_random(void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = ::getrandom(b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(ErrorCode::kSystem, std::string("getrandom: ") + std::strerror(errno));
    b += r;
    n -= static_cast<size_t>(r);
  }
}

Digest proof(const std::string& token, const char* label, const Nonce& a, const Nonce& b) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(a.data()), a.size());
  msg.append(reinterpret_cast<const char*>(b.data()), b.size());
  return hmac_sha256(token, msg.data(), msg.size());
}

std::string checked_token(std::string t, const char* source) {
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.size() < kMinTokenBytes)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(source) + ": the authentication token has " + std::to_string(t.size()) +
                    " characters, fewer than " + std::to_string(kMinTokenBytes) +
                    " (too easy to guess)");
  return t;
}

}  // namespace

Nonce random_nonce() {
  Nonce n;
  fill_random(n.data(), n.size());
  return n;
}

Digest server_proof(const std::string& token, const Nonce& client, const Nonce& server) {
  return proof(token, "commx-store-server", client, server);
}

Digest client_proof(const std::string& token, const Nonce& client, const Nonce& server) {
  return proof(token, "commx-store-client", server, client);
}

std::optional<std::string> token_from_env() {
  if (auto t = setting_str("COMMX_AUTH_TOKEN")) return checked_token(*t, "COMMX_AUTH_TOKEN");
  if (auto path = setting_str("COMMX_AUTH_TOKEN_FILE")) {
    std::string text = read_setting_file("COMMX_AUTH_TOKEN_FILE", *path, 4096);
    return checked_token(text.substr(0, text.find('\n')), "COMMX_AUTH_TOKEN_FILE");
  }
  return std::nullopt;
}

std::string new_token() {
  uint8_t raw[32];
  fill_random(raw, sizeof raw);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : raw) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

void warn_unauthenticated(const std::string& where) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "commx: warning: %s is used without authentication (no COMMX_AUTH_TOKEN): any "
               "process that can reach its port can read and write its keys; see "
               "docs/security.md\n",
               where.c_str());
}

}  // namespace commx::auth
