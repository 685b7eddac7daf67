// A tiny all_reduce latency probe (not a test): forks N ranks, runs back-to-back f32 SUM
// all_reduces per size and prints the median per-op time seen by rank 0.
// Usage: cpu_allreduce_timing [ranks=2] [algorithm=auto] [max_bytes=64MiB] [min_bytes=8]
// With COMMX_TIMING_BIND=1 rank r is bound to CPU r % ncpus, as mpirun binds by default.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/harness.h"
#include "cpu/timing.h"

using namespace commx;
using namespace commx::testing;

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 2;
  std::string algo = argc > 2 ? argv[2] : "auto";
  size_t max_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : size_t{64} << 20;
  size_t min_bytes = argc > 4 ? std::strtoull(argv[4], nullptr, 0) : 8;
  const char* bind = std::getenv("COMMX_TIMING_BIND");
  auto res = run_forked(
      n,
      [&](RankEnv& env) {
        if (bind && std::string(bind) == "1") {
          cpu_set_t all, one;
          sched_getaffinity(0, sizeof(all), &all);
          int want = env.rank % CPU_COUNT(&all), seen = 0;
          CPU_ZERO(&one);
          for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &all) && seen++ == want) CPU_SET(c, &one);
          sched_setaffinity(0, sizeof(one), &one);
        }
        auto comm = env.comm("timing");
        OpOptions o;
        o.hints["algorithm"] = algo;
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= (bytes < 4096 ? 8 : 4)) {
          size_t count = bytes / 4;
          std::vector<float> buf(count, 1.0f);
          Tensor t(buf.data(), static_cast<int64_t>(count), DataType::kFloat32);
          int iters = bytes <= (64 << 10)   ? 2000
                      : bytes <= (1 << 20)  ? 200
                      : bytes <= (16 << 20) ? 20
                                            : 8;
          for (int i = 0; i < 3; ++i) comm->all_reduce(t, ReduceOp::SUM, false, o);
          comm->barrier();
          std::vector<double> us =
              sorted_times_us(iters, [&] { comm->all_reduce(t, ReduceOp::SUM, false, o); });
          if (env.rank == 0)
            std::printf(
                "ranks %d algo %-6s %10zu B  median %10.2f us  p10 %10.2f us  p25 %.2f p75 %.2f "
                "busbw %6.2f GB/s\n",
                n, algo.c_str(), bytes, us[us.size() / 2], us[us.size() / 10], us[us.size() / 4],
                us[us.size() * 3 / 4], bytes * 2.0 * (n - 1) / n / us[us.size() / 2] / 1e3);
          std::fflush(stdout);
        }
      },
      600);
  return res.all_ok() ? 0 : 1;
}
