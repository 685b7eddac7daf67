// Timing probe (not a test): all_reduce through Comm on the cpu backend, normal path vs FP8 (and
// FP8 with the two-term gather), per size and dtype; prints the median time seen by rank 0.
// Usage: lowp_allreduce_timing [ranks=2] [max_bytes=64MiB] [dtype=f32|bf16]
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
  size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : size_t{64} << 20;
  DataType dt = parse_dtype(argc > 3 ? argv[3] : "f32");
  auto res = run_forked(
      n,
      [&](RankEnv& env) {
        auto comm = env.comm("lowp_timing");
        for (size_t bytes = 64 << 10; bytes <= max_bytes; bytes *= 4) {
          size_t count = bytes / dtype_size(dt);
          std::vector<uint8_t> buf(bytes, 0);
          Tensor t(buf.data(), static_cast<int64_t>(count), dt);
          double med[3];
          const char* modes[3] = {"off", "fp8e4m3", "fp8e4m3"};
          for (int m = 0; m < 3; ++m) {
            OpOptions o;
            o.hints["low_precision"] = modes[m];
            int iters = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 4;
            // fp8x2 needs a comm setting: a second comm with the gather hint, made once.
            static std::shared_ptr<Comm> c2;
            if (m == 2 && !c2) {
              CommOptions co;
              co.hints["low_precision_gather"] = "fp8x2";
              c2 = env.comm("lowp_timing_x2", co);
            }
            Comm& c = m == 2 ? *c2 : *comm;
            for (int i = 0; i < 2; ++i) c.all_reduce(t, ReduceOp::SUM, false, o);
            comm->barrier();
            std::vector<double> us =
                sorted_times_us(iters, [&] { c.all_reduce(t, ReduceOp::SUM, false, o); });
            med[m] = us[us.size() / 2];
          }
          if (env.rank == 0)
            std::printf("ranks %d %-5s %10zu B  normal %10.1f us  fp8 %10.1f us  fp8x2 %10.1f us\n",
                        n, dtype_name(dt), bytes, med[0], med[1], med[2]);
          std::fflush(stdout);
        }
      },
      600);
  return res.all_ok() ? 0 : 1;
}
