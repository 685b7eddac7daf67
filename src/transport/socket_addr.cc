// Socket address helpers of the TCP transport (see socket_addr.h). Layer: transport.
#include "transport/socket_addr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "commx/error.h"
#include "core/env.h"
#include "core/settings.h"

namespace commx {
namespace {

std::string hint_or_env(const Hints& hints, const char* hint, const char* env) {
  auto it = hints.find(hint);
  if (it != hints.end() && !it->second.empty()) return it->second;
  return setting_str(env).value_or("");
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  int rc = getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  if (rc != 0) throw Error(ErrorCode::kSystem, std::string("getnameinfo: ") + gai_strerror(rc));
  return host;
}

// The first usable address of interface `ifname` (IPv4 preferred; IPv6 link-local skipped since
// it would need a scope id in every peer's connect).
std::string interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw Error(ErrorCode::kSystem, std::string("getifaddrs: ") + std::strerror(errno));
  }
  std::string v4, v6;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || ifname != a->ifa_name) continue;
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      v4 = numeric_host(a->ifa_addr, sizeof(sockaddr_in));
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) v6 = numeric_host(a->ifa_addr, sizeof(*in6));
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  throw Error(ErrorCode::kInvalidArgument, "tcp transport: interface '" + ifname +
                                               "' (COMMX_SOCKET_IFNAME) has no usable address");
}

// The local address the kernel would use to reach `host`: a UDP connect() sends nothing.
std::string route_source_address(const std::string& host) {
  SockAddr dst = resolve_address(host, 9);
  int fd = socket(dst.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorCode::kSystem, std::string("socket: ") + std::strerror(errno));
  SockAddr local;
  local.len = sizeof(local.storage);
  bool ok = connect(fd, dst.get(), dst.len) == 0 && getsockname(fd, local.get(), &local.len) == 0;
  int err = errno;
  close(fd);
  if (!ok) {
    throw Error(ErrorCode::kInvalidArgument, "tcp transport: no route to MASTER_ADDR '" + host +
                                                 "': " + std::strerror(err) +
                                                 " (set COMMX_SOCKET_IFADDR)");
  }
  return numeric_host(local.get(), local.len);
}

}  // namespace

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

std::string SockAddr::to_string() const {
  std::string host = numeric_host(get(), len);
  if (family() == AF_INET6) host = "[" + host + "]";
  return host + ":" + std::to_string(port());
}

SockAddr resolve_address(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0 || !res) {
    throw Error(ErrorCode::kInvalidArgument,
                "tcp transport: cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  SockAddr out;
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  out.len = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

SockAddr parse_host_port(const std::string& s, const std::string& what) {
  auto bad = [&]() {
    return Error(ErrorCode::kInvalidArgument,
                 "tcp transport: malformed address '" + s + "' for " + what);
  };
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) throw bad();
  std::string host = s.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']') throw bad();
    host = host.substr(1, host.size() - 2);
  }
  char* end = nullptr;
  long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) throw bad();
  return resolve_address(host, static_cast<uint16_t>(port));
}

std::string choose_bind_address(const Hints& hints) {
  std::string addr = hint_or_env(hints, "socket_ifaddr", "COMMX_SOCKET_IFADDR");
  if (!addr.empty()) {
    SockAddr a = resolve_address(addr, 0);
    return numeric_host(a.get(), a.len);
  }
  std::string ifname = hint_or_env(hints, "socket_ifname", "COMMX_SOCKET_IFNAME");
  if (!ifname.empty()) return interface_address(ifname);
  if (auto master = env_str("MASTER_ADDR")) return route_source_address(*master);
  return "127.0.0.1";
}

}  // namespace commx
