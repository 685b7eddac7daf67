// Peer connection proofs (peer_auth.h). Layer: transport.
#include "transport/peer_auth.h"

#include <cstdio>

namespace commx::peer_auth {
namespace {

Digest proof(const std::string& token, const char* label, std::string_view hello, const Nonce& a,
             const Nonce& b) {
  std::string msg(label);
  msg += '\0';
  msg.append(hello);
  msg.append(reinterpret_cast<const char*>(a.data()), a.size());
  msg.append(reinterpret_cast<const char*>(b.data()), b.size());
  return auth::hmac_sha256(token, msg.data(), msg.size());
}

}  // namespace

std::optional<std::string> job_token() { return auth::token_from_env(); }

Digest acceptor_proof(const std::string& token, std::string_view hello, const Nonce& connector,
                      const Nonce& acceptor) {
  return proof(token, "commx-peer-acceptor", hello, connector, acceptor);
}

Digest connector_proof(const std::string& token, std::string_view hello, const Nonce& connector,
                       const Nonce& acceptor) {
  return proof(token, "commx-peer-connector", hello, acceptor, connector);
}

void log_refusal(const std::string& where, const std::string& why) {
  std::fprintf(stderr, "commx: %srefused a connection: %s\n", where.c_str(), why.c_str());
}

}  // namespace commx::peer_auth
