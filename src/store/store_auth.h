// Authentication of TCP store connections: a job-wide token (COMMX_AUTH_TOKEN, or the file named
// by COMMX_AUTH_TOKEN_FILE; commx-run makes one per job) that both ends prove they know by an
// HMAC-SHA256 challenge-response over fresh nonces, so the token itself never crosses the wire.
// Without a token nothing is checked (torch's TCPStore has no authentication) and one warning
// line says so. Threat model: docs/security.md. Layer: store (internal).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "store/sha256.h"

namespace commx::auth {

constexpr size_t kNonceBytes = 16;
using Nonce = std::array<uint8_t, kNonceBytes>;

// Codes of the two authentication requests, outside the range c10d uses.
constexpr uint8_t kChallengeQuery = 0x40;  // client nonce -> server nonce + server proof
constexpr uint8_t kResponseQuery = 0x41;   // client proof -> 1 byte kAccepted
constexpr uint8_t kAccepted = 1;
constexpr size_t kMinTokenBytes = 16;

Nonce random_nonce();
// What the server sends to show it knows the token, and what the client answers.
Digest server_proof(const std::string& token, const Nonce& client, const Nonce& server);
Digest client_proof(const std::string& token, const Nonce& client, const Nonce& server);

// The job's token: COMMX_AUTH_TOKEN, else the first line of COMMX_AUTH_TOKEN_FILE; nullopt when
// neither is set. A token shorter than kMinTokenBytes is an error.
std::optional<std::string> token_from_env();
// A fresh token: 32 random bytes as hex (commx-run hands it to its ranks).
std::string new_token();

// Prints, once per process, that the store at `where` is used without authentication.
void warn_unauthenticated(const std::string& where);

}  // namespace commx::auth
