// Measurement (not a test): all_reduce over the TCP transport (threads as ranks, loopback), the
// same direct reduce-scatter + all-gather schedule with raw f32/bf16 on the wire versus FP8
// (and FP8 with the two-term gather). Usage: lowp_tcp_bench [ranks=2] [max_bytes=64MiB] [dtype]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "commx/numeric.h"
#include "commx/store.h"
#include "lowp/lowp_collectives.h"
#include "transport/tcp_transport.h"

using namespace commx;
using namespace commx::lowp;

namespace {

// The baseline: direct reduce-scatter and all-gather of raw elements, FP32 sums.
void raw_all_reduce(Transport& t, int rank, int size, void* data, int64_t n, DataType dt,
                    std::vector<uint8_t>& rbuf, std::vector<float>& acc) {
  const size_t es = dtype_size(dt);
  auto off = [&](int r) { return n * r / size; };
  auto len = [&](int r) { return off(r + 1) - off(r); };
  char* d = static_cast<char*>(data);
  const int64_t mine = len(rank);
  rbuf.resize(static_cast<size_t>(mine) * es * size);
  std::vector<SendReq> s;
  std::vector<RecvReq> r;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    s.push_back({p, d + off(p) * es, static_cast<size_t>(len(p)) * es});
    r.push_back({p, rbuf.data() + p * mine * es, static_cast<size_t>(mine) * es});
  }
  t.exchange(s, r, Clock::now() + std::chrono::seconds(60));
  acc.assign(static_cast<size_t>(mine), 0.0f);
  for (int p = 0; p < size; ++p) {
    const char* src =
        p == rank ? d + off(rank) * es : reinterpret_cast<char*>(rbuf.data()) + p * mine * es;
    std::vector<float> f(static_cast<size_t>(mine));
    to_float(src, dt, mine, f.data());
    for (int64_t i = 0; i < mine; ++i) acc[i] += f[i];
  }
  from_float(acc.data(), mine, d + off(rank) * es, dt);
  s.clear();
  r.clear();
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    s.push_back({p, d + off(rank) * es, static_cast<size_t>(mine) * es});
    r.push_back({p, d + off(p) * es, static_cast<size_t>(len(p)) * es});
  }
  t.exchange(s, r, Clock::now() + std::chrono::seconds(60));
}

}  // namespace

int main(int argc, char** argv) {
  const int size = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : size_t{64} << 20;
  const DataType dt = parse_dtype(argc > 3 ? argv[3] : "f32");
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < size; ++r) ts.push_back(make_tcp_transport(r, size, store, "bench", {}));
  std::printf("%-5s %5s %11s %12s %12s %12s %8s\n", "dtype", "ranks", "bytes", "raw_us", "fp8_us",
              "fp8x2_us", "speedup");
  for (size_t bytes = 256 << 10; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / dtype_size(dt));
    double med[3];
    for (int mode = 0; mode < 3; ++mode) {
      const int iters = bytes <= (4 << 20) ? 10 : 4;
      std::vector<double> us(iters + 1);
      std::vector<std::thread> th;
      for (int r = 0; r < size; ++r)
        th.emplace_back([&, r] {
          std::vector<uint8_t> data(bytes, 0), rbuf;
          std::vector<float> acc;
          Fp8Codec codec({});
          LowpScratch sc;
          for (int it = 0; it <= iters; ++it) {
            auto t0 = std::chrono::steady_clock::now();
            if (mode == 0) {
              raw_all_reduce(*ts[r], r, size, data.data(), n, dt, rbuf, acc);
            } else {
              LowpContext c{*ts[r], r,       size, Clock::now() + std::chrono::seconds(60),
                            codec,  nullptr, 0,    ""};
              c.two_term_gather = mode == 2;
              c.scratch = &sc;
              lowp_all_reduce(c, Tensor(data.data(), n, dt), Tensor(data.data(), n, dt),
                              ReduceKind::kSum);
            }
            if (r == 0)
              us[it] =
                  std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                      .count();
          }
        });
      for (auto& t : th) t.join();
      us.erase(us.begin());  // warm-up
      std::sort(us.begin(), us.end());
      med[mode] = us[us.size() / 2];
    }
    std::printf("%-5s %5d %11zu %12.0f %12.0f %12.0f %8.2f\n", dtype_name(dt), size, bytes, med[0],
                med[1], med[2], med[0] / med[1]);
    std::fflush(stdout);
  }
  return 0;
}
