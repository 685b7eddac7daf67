// Socket addresses for the TCP transport: parsing and formatting "host:port", and choosing the
// local address a rank listens on (hint, COMMX_SOCKET_IFADDR/IFNAME, the route to MASTER_ADDR).
// Layer: transport.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "commx/options.h"

namespace commx {

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  // "1.2.3.4:5" or "[::1]:5".
  std::string to_string() const;
};

// Resolves `host` (a literal address or a name) with `port`; throws InvalidArgument on failure.
SockAddr resolve_address(const std::string& host, uint16_t port);
// Parses what to_string() wrote; throws InvalidArgument naming `what` on a malformed string.
SockAddr parse_host_port(const std::string& s, const std::string& what);

// The literal address a rank binds its listener to, in order: hints "socket_ifaddr", env
// COMMX_SOCKET_IFADDR, hints "socket_ifname", env COMMX_SOCKET_IFNAME (first IPv4, else IPv6
// address of that interface), the local address of the route to MASTER_ADDR, else 127.0.0.1.
std::string choose_bind_address(const Hints& hints);

}  // namespace commx
