// Throughput of the CPU FP8 codec (one thread): encode, decode and decode-accumulate, for each
// input dtype and block size, in GB/s of the unencoded data (4 bytes per f32 element, 2 per
// bf16/f16), and in G elements/s, timed in thread CPU time. Usage: lowp_codec_bench [elements]
// [repeats]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "commx/numeric.h"
#include "lowp/fp8_codec.h"

using namespace commx;
using namespace commx::lowp;

namespace {

// Thread CPU time, so that other processes on a shared machine do not distort the numbers.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = cpu_now();
    f();
    best = std::min(best, cpu_now() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24);
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(g);
  std::vector<uint16_t> h16(n), hb(n);
  for (int64_t i = 0; i < n; ++i) {
    hb[i] = float_to_bf16(x[i]);
    h16[i] = float_to_f16(x[i]);
  }
  std::vector<float> acc(n, 0.0f), out(n);
  std::printf("%-6s %-8s %6s %10s %10s %10s %10s\n", "dtype", "format", "block", "enc_GB/s",
              "dec_GB/s", "acc_GB/s", "enc_Gel/s");
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int64_t block : {128, 256, 512}) {
      if (f == Fp8Format::kE5M2 && block != 256) continue;
      Fp8Codec codec({f, block});
      std::vector<uint8_t> enc(codec.encoded_bytes(n));
      struct In {
        const char* name;
        const void* p;
        DataType t;
      } ins[] = {{"f32", x.data(), DataType::kFloat32},
                 {"bf16", hb.data(), DataType::kBFloat16},
                 {"f16", h16.data(), DataType::kFloat16}};
      for (const In& in : ins) {
        if (block != 256 && in.t != DataType::kFloat32) continue;
        const double bytes = static_cast<double>(n) * dtype_size(in.t);
        double te = best_seconds(reps, [&] { codec.encode(in.p, in.t, n, enc.data()); });
        double td = best_seconds(reps, [&] { codec.decode(enc.data(), n, out.data(), in.t); });
        double ta = best_seconds(reps, [&] { codec.accumulate(acc.data(), enc.data(), n); });
        std::printf("%-6s %-8s %6ld %10.2f %10.2f %10.2f %10.2f\n", in.name, fp8_format_name(f),
                    static_cast<long>(block), bytes / te / 1e9, bytes / td / 1e9,
                    static_cast<double>(n) * 4 / ta / 1e9, n / te / 1e9);
      }
    }
  }
  // Stochastic rounding costs a hash per element.
  Fp8Codec sr({Fp8Format::kE4M3, 256, true, 1});
  std::vector<uint8_t> enc(sr.encoded_bytes(n));
  double ts = best_seconds(reps, [&] { sr.encode(x.data(), DataType::kFloat32, n, enc.data()); });
  std::printf("f32    fp8e4m3 stochastic encode: %.2f GB/s\n", n * 4.0 / ts / 1e9);
  return 0;
}
