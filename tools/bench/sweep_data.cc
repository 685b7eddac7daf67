// Host data and references of the GPU sweep (see sweep_data.h). Layer: tools/bench.
#include "sweep_data.h"

#include <algorithm>
#include <cmath>

#include "commx/numeric.h"
#include "values.h"

namespace commx::bench {

std::vector<uint8_t> sweep_pattern(DataType t, int64_t n, int rank, double base) {
  std::vector<uint8_t> b(n * dtype_size(t));
  for (int64_t i = 0; i < n; ++i)
    store_value(t, b.data(), i, static_cast<float>(base * (1 + ((i * 7 + rank * 13) % 17))));
  return b;
}

int64_t count_wrong(const std::string& op, DataType t, const uint8_t* got, int64_t n, int rank,
                    int world) {
  // Element i of rank r's pattern (base 1), without materialising every rank's buffer (1 GiB
  // ops at 4-8 ranks).
  auto at = [](int r, int64_t i) { return 1.0 + static_cast<double>((i * 7 + r * 13) % 17); };
  int64_t wrong = 0, chunk = n / world;
  int64_t m = op == "reduce_scatter" ? chunk : n;
  for (int64_t i = 0; i < m; ++i) {
    double ref = 0;
    if (op == "all_reduce")
      for (int r = 0; r < world; ++r) ref += at(r, i);
    if (op == "reduce_scatter")
      for (int r = 0; r < world; ++r) ref += at(r, rank * chunk + i);
    if (op == "all_gather") ref = at(static_cast<int>(i / chunk), i % chunk);
    if (op == "all_to_all") ref = at(static_cast<int>(i / chunk), rank * chunk + i % chunk);
    double g = load_value(t, got, i);
    if (std::fabs(g - ref) > 1e-2 * std::fabs(ref) + 1e-6) ++wrong;
  }
  return wrong;
}

std::vector<double> normal_data(int64_t n, int rank) {
  std::vector<double> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * (rank + 1) + static_cast<uint64_t>(n);
  auto next = [&x] {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
  };
  for (int64_t i = 0; i + 1 < n; i += 2) {
    double u1 = std::max(next(), 1e-300), u2 = next();
    double r = std::sqrt(-2 * std::log(u1));
    v[i] = r * std::cos(6.283185307179586 * u2);
    v[i + 1] = r * std::sin(6.283185307179586 * u2);
  }
  if (n % 2) v[n - 1] = 0.5;
  return v;
}

std::vector<uint8_t> to_input_bytes(const std::vector<double>& v, DataType t, bool fp8) {
  std::vector<uint8_t> b(v.size() * (fp8 ? 1 : dtype_size(t)));
  for (size_t i = 0; i < v.size(); ++i) {
    float f = static_cast<float>(v[i]);
    if (t == DataType::kBFloat16) f = bf16_to_float(float_to_bf16(f));
    store_value(fp8 ? DataType::kFloat8E4M3 : t, b.data(), static_cast<int64_t>(i), f);
  }
  return b;
}

double relative_error(DataType t, bool fp8, const uint8_t* got, int64_t n, int world) {
  std::vector<double> ref(n, 0.0);
  for (int r = 0; r < world; ++r) {
    auto v = normal_data(n, r);
    for (int64_t i = 0; i < n; ++i) {
      float f = static_cast<float>(v[i]);
      ref[i] += t == DataType::kBFloat16 ? bf16_to_float(float_to_bf16(f)) : f;
    }
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    double g = load_value(fp8 ? DataType::kFloat8E4M3 : t, got, i);
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

double sweep_bus_factor(const std::string& op, int w) {
  if (op == "all_reduce") return 2.0 * (w - 1) / w;
  return static_cast<double>(w - 1) / w;
}

}  // namespace commx::bench
