// The TCP store server's limits from the COMMX_STORE_* settings. Layer: store.
#include <chrono>

#include "commx/store.h"
#include "core/settings.h"

namespace commx {

TCPStoreServerLimits tcp_store_server_limits_from_env() {
  TCPStoreServerLimits l;
  l.max_value_bytes = setting_bytes("COMMX_STORE_MAX_VALUE_BYTES", l.max_value_bytes);
  l.max_request_bytes = setting_bytes("COMMX_STORE_MAX_REQUEST_BYTES", l.max_request_bytes);
  l.max_unsent_reply_bytes =
      setting_bytes("COMMX_STORE_MAX_UNSENT_REPLY_BYTES", l.max_unsent_reply_bytes);
  l.max_buffered_bytes = setting_bytes("COMMX_STORE_MAX_BUFFERED_BYTES", l.max_buffered_bytes);
  l.max_stored_bytes = setting_bytes("COMMX_STORE_MAX_STORED_BYTES", l.max_stored_bytes);
  l.max_connections =
      static_cast<int>(setting_int("COMMX_STORE_MAX_CONNECTIONS", l.max_connections));
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  l.handshake_timeout = ms(setting_seconds("COMMX_STORE_HANDSHAKE_TIMEOUT_SECONDS",
                                           l.handshake_timeout.count() / 1000.0));
  l.idle_timeout =
      ms(setting_seconds("COMMX_STORE_IDLE_TIMEOUT_SECONDS", l.idle_timeout.count() / 1000.0));
  return l;
}

}  // namespace commx
