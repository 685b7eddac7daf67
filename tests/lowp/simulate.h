// Serial simulation of the documented low-precision all_reduce schedule, for tests that check
// a distributed run bit for bit (in threads, or in forked ranks through a Comm).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "lowp/fp8_codec.h"
#include "lowp/lowp_test_util.h"

namespace commx::testing {

// The documented schedule, serially: block-aligned slices, every peer's slice encoded, the
// owner's own slice exact, rank order, AVG divides once, re-quantize, decode.
Buf simulate_all_reduce(const lowp::Fp8Codec& codec, std::vector<Buf>& in, ReduceKind kind,
                        bool two_term = false) {
  const int size = static_cast<int>(in.size());
  const int64_t n = in[0].n;
  const int64_t b = codec.config().block;
  const int64_t nb = (n + b - 1) / b;
  Buf out(in[0].dtype, n);
  for (int s = 0; s < size; ++s) {
    int64_t off = std::min(n, nb * s / size * b), end = std::min(n, nb * (s + 1) / size * b);
    int64_t m = end - off;
    if (m == 0) continue;
    std::vector<float> acc(m, 0.0f);
    for (int r = 0; r < size; ++r) {
      if (r == s) {
        for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] + in[r].get(off + i);
      } else {
        std::vector<uint8_t> e(codec.encoded_bytes(m));
        codec.encode(in[r].tensor().slice(off, m).data, in[r].dtype, m, e.data());
        codec.accumulate(acc.data(), e.data(), m);
      }
    }
    if (kind == ReduceKind::kAvg)
      for (auto& v : acc) v = v / static_cast<float>(size);
    std::vector<uint8_t> e(codec.encoded_bytes(m));
    codec.encode(acc.data(), DataType::kFloat32, m, e.data());
    if (!two_term) {
      codec.decode(e.data(), m, out.tensor().slice(off, m).data, out.dtype);
      continue;
    }
    std::vector<float> d(m), res(m);
    codec.decode(e.data(), m, d.data(), DataType::kFloat32);
    for (int64_t i = 0; i < m; ++i) res[i] = std::isfinite(d[i]) ? acc[i] - d[i] : 0.0f;
    std::vector<uint8_t> e2(codec.encoded_bytes(m));
    codec.encode(res.data(), DataType::kFloat32, m, e2.data());
    codec.accumulate(d.data(), e2.data(), m);
    for (int64_t i = 0; i < m; ++i) out.set(off + i, d[i]);
  }
  return out;
}

}  // namespace commx::testing
