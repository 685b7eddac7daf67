// Proof of membership for peer connections (TCP transport, TCP windows): both ends of a
// connection prove they hold the job token (COMMX_AUTH_TOKEN, the one the store checks) with
// HMAC-SHA256 over the connection's own hello and fresh nonces, so the token never crosses the
// wire and a recorded handshake cannot be replayed. Without a token nothing is proved (as for the
// store). Threat model: docs/security.md. Layer: transport (internal).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "store/store_auth.h"

namespace commx::peer_auth {

using auth::Digest;
using auth::Nonce;

// The job token (nullopt without one), read where a comm or window is made.
std::optional<std::string> job_token();

// What the accepting side sends to prove the token, bound to the hello it answers and both
// nonces; and what the connecting side answers.
Digest acceptor_proof(const std::string& token, std::string_view hello, const Nonce& connector,
                      const Nonce& acceptor);
Digest connector_proof(const std::string& token, std::string_view hello, const Nonce& connector,
                       const Nonce& acceptor);

// One line on stderr naming a refused connection (the refusing rank's log; the stranger may be
// no commx process at all, so it gets no explanation).
void log_refusal(const std::string& where, const std::string& why);

}  // namespace commx::peer_auth
