// Names of the c10d TCPStore query codes, for log lines and error messages.
// Layer: store (internal).
#include "store/wire.h"

namespace commx::wire {

const char* query_name(uint8_t code) {
  static const char* const kNames[] = {
      "VALIDATE",    "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",
      "WAIT",        "GETNUMKEYS", "DELETE_KEY",  "APPEND",    "MULTI_GET", "MULTI_SET",
      "CANCEL_WAIT", "PING",       "QUEUE_PUSH",  "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS"};
  if (code == 0x40) return "AUTH_CHALLENGE";
  if (code == 0x41) return "AUTH_RESPONSE";
  return code <= kMaxQuery ? kNames[code] : "UNKNOWN";
}

}  // namespace commx::wire
