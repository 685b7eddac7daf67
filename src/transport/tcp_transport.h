// TCP transport: ordered byte messages between ranks over TCP sockets, between hosts or on one
// host (the cpu backend uses it across hosts, or everywhere with hints {"transport": "tcp"}).
// Layer: transport. See docs/tcp_transport.md.
//
// Each rank listens on one socket and publishes "host:port" once under the store key
// "<tag>/addr/<rank>" (tag: hint "tcp_tag", default "tcp"). Connections are made lazily, on the
// first exchange() that involves a peer, by whichever side needs it first; when both connect at
// once the connection opened by the lower rank is kept. A hello frame (comm name, ranks, size)
// lets a rank reject a connection that is not meant for it. No thread runs in the background:
// sockets progress only inside exchange(), with non-blocking I/O and poll().
#pragma once

#include <memory>
#include <string>

#include "commx/options.h"
#include "commx/store.h"
#include "transport/transport.h"

namespace commx {

// Creates rank `rank` of `size`'s transport: binds and listens, publishes its address in `store`
// (already private to the comm) and returns; it does not wait for any peer.
// Hints (explicit hints win over the environment):
//   socket_ifaddr / COMMX_SOCKET_IFADDR  address to listen on (default: the local address of the
//                                        route to MASTER_ADDR, else 127.0.0.1)
//   socket_ifname / COMMX_SOCKET_IFNAME  interface whose address to listen on
//   tcp_tag                              store key prefix, to run two tcp transports in one comm
//   tcp_refused_grace_ms / COMMX_SOCKET_REFUSED_GRACE_MS  how long a peer may refuse connections
//                                        before it counts as dead (default 2000)
// Throws InvalidArgument on a bad hint and System when the socket cannot be set up.
std::unique_ptr<Transport> make_tcp_transport(int rank, int size, std::shared_ptr<Store> store,
                                              const std::string& comm_name, const Hints& hints);

}  // namespace commx
