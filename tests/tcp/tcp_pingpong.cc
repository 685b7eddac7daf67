// tcp_pingpong: latency and bandwidth of the TCP transport between two forked processes over
// loopback (or the address in COMMX_SOCKET_IFADDR). Not a test: prints one row per size.
// Usage: tcp_pingpong [sizes in bytes...]   (default 8 65536 16777216 67108864)
// Layer: tests (measurement tool).
#include <cstdio>
#include <cstdlib>

#include "tcp_test_util.h"

using namespace commx;
using namespace commx::test;

namespace {

int iterations_for(size_t bytes) {
  if (bytes <= 4096) return 20000;
  if (bytes <= (1 << 20)) return 2000;
  return 30;
}

int rank_main(int r, const TempDir& dir, const std::vector<size_t>& sizes) {
  auto t = make_tcp_transport(r, 2, std::make_shared<DirStore>(dir.path()), "pingpong", {});
  size_t max_bytes = 1;
  for (size_t s : sizes) max_bytes = std::max(max_bytes, s);
  std::vector<uint8_t> buf(max_bytes, r);
  const Deadline far = in_ms(600000);
  auto ping = [&](size_t bytes) {
    SendReq s{1 - r, buf.data(), bytes};
    RecvReq v{1 - r, buf.data(), bytes};
    if (r == 0) {
      t->exchange({&s, 1}, {}, far);
      t->exchange({}, {&v, 1}, far);
    } else {
      t->exchange({}, {&v, 1}, far);
      t->exchange({&s, 1}, {}, far);
    }
  };
  if (r == 0) {
    std::printf("%12s %8s %14s %14s %16s\n", "bytes", "iters", "latency_us", "pp_GB/s",
                "stream_GB/s");
  }
  for (size_t bytes : sizes) {
    int iters = iterations_for(bytes);
    for (int i = 0; i < std::max(2, iters / 10); ++i) ping(bytes);  // warm-up (and connect)
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) ping(bytes);
    double one_way_us = ms_since(t0) * 1000.0 / iters / 2;
    // Streaming: rank 0 sends back-to-back, rank 1 acknowledges the last message only.
    int stream_iters = std::max(4, iters / 2);
    int ack = 0;
    t0 = Clock::now();
    for (int i = 0; i < stream_iters; ++i) {
      if (r == 0) {
        SendReq s{1, buf.data(), bytes};
        t->exchange({&s, 1}, {}, far);
      } else {
        RecvReq v{0, buf.data(), bytes};
        t->exchange({}, {&v, 1}, far);
      }
    }
    if (r == 0) {
      RecvReq v{1, &ack, sizeof(ack)};
      t->exchange({}, {&v, 1}, far);
    } else {
      SendReq s{0, &ack, sizeof(ack)};
      t->exchange({&s, 1}, {}, far);
    }
    double stream_s = ms_since(t0) / 1000.0;
    if (r == 0) {
      std::printf("%12zu %8d %14.2f %14.3f %16.3f\n", bytes, iters, one_way_us,
                  bytes / one_way_us / 1000.0, bytes * double(stream_iters) / stream_s / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {8, 65536, 16u << 20, 64u << 20};
  TempDir dir;
  auto st = run_processes(
      2, [&](int r) { return rank_main(r, dir, sizes); }, 600000);
  return st[0] == 0 && st[1] == 0 ? 0 : 1;
}
