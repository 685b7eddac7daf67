// Blocking socket helpers with deadlines for the TCP store: connect, send all, receive exactly.
// Layer: store (internal).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "commx/options.h"

namespace commx::sockio {

using Clock = std::chrono::steady_clock;

// now + t, saturating instead of overflowing for huge timeouts.
Clock::time_point deadline_after(Timeout t);
// Milliseconds left until `deadline` for poll(): 0 when past, capped to fit an int.
int poll_ms_left(Clock::time_point deadline);

// One connection attempt to host:port (IPv4 or IPv6, by name or literal). Returns the fd, or -1
// with `why` set. The socket is blocking with TCP_NODELAY.
int try_connect(const std::string& host, uint16_t port, Clock::time_point deadline,
                std::string& why);

// Result of a bounded I/O call.
enum class IoStatus { kOk, kTimeout, kClosed, kError };

IoStatus send_all(int fd, const void* data, size_t n, Clock::time_point deadline, std::string& why);
IoStatus recv_exact(int fd, void* data, size_t n, Clock::time_point deadline, std::string& why);

// "addr:port" of the peer of a connected socket (for log lines).
std::string peer_name(int fd);
// True for loopback names and literals ("localhost", 127.x.y.z, ::1).
bool is_loopback_host(const std::string& host);

}  // namespace commx::sockio
