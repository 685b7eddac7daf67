// Tests of the block-scaled FP8 codec: bit-exact rounding against numeric.h, block scales, zero
// and tiny blocks, NaN/Inf policy, stochastic rounding, accumulate, bf16/f16, counters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "commx/error.h"
#include "commx/numeric.h"
#include "lowp/fp8_bits.h"
#include "lowp/fp8_codec.h"

using namespace commx;
using namespace commx::lowp;

namespace {

uint8_t ref_fp8(float f, Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? float_to_fp8e4m3(f) : float_to_fp8e5m2(f);
}
float ref_val(uint8_t c, Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? fp8e4m3_to_float(c) : fp8e5m2_to_float(c);
}
Fp8Traits tr(Fp8Format f) { return f == Fp8Format::kE4M3 ? e4m3_traits() : e5m2_traits(); }

std::vector<float> normal_data(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

float scale_of(const std::vector<uint8_t>& enc, int64_t k) {
  float s;
  std::memcpy(&s, enc.data() + 4 * k, 4);
  return s;
}

class FormatTest : public ::testing::TestWithParam<Fp8Format> {};

}  // namespace

// fp8_rne agrees with the scalar reference of numeric.h on every FP8 value, every midpoint
// between neighbours (ties to even), one float ulp on either side, and random values.
TEST_P(FormatTest, RneMatchesReferenceBitExact) {
  const Fp8Format fmt = GetParam();
  const Fp8Traits t = tr(fmt);
  std::vector<float> probes;
  for (int c = 0; c <= t.max_code; ++c) {
    float lo = ref_val(static_cast<uint8_t>(c), fmt);
    probes.push_back(lo);
    if (c < t.max_code) {
      float hi = ref_val(static_cast<uint8_t>(c + 1), fmt);
      float mid = (lo + hi) / 2;
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0f));
      probes.push_back(std::nextafter(mid, INFINITY));
    }
  }
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) probes.push_back(t.max * std::pow(u(g), 12.0f));
  probes.push_back(std::ldexp(1.0f, -140));  // float subnormal
  probes.push_back(0.0f);
  int checked = 0;
  for (float p : probes) {
    for (float x : {p, -p}) {
      ASSERT_EQ(fp8_rne(x, t), ref_fp8(x, fmt)) << fp8_format_name(fmt) << " x=" << x;
      ++checked;
    }
  }
  EXPECT_GT(checked, 400000);
  // Saturation: beyond the largest finite value, the largest finite code (satfinite).
  EXPECT_EQ(fp8_rne(t.max * 1.5f, t), t.max_code);
  EXPECT_EQ(fp8_rne(-t.max * 100.0f, t), 0x80 | t.max_code);
}

TEST_P(FormatTest, EncodeDecodeErrorWithinHalfQuantum) {
  const Fp8Format fmt = GetParam();
  for (int64_t block : {16, 128, 256, 512, 4096}) {
    Fp8Codec codec({fmt, block});
    for (int64_t n : {1, 15, 255, 256, 257, 1000, 4097}) {
      auto x = normal_data(n, static_cast<uint32_t>(n + block), 3.0f);
      std::vector<uint8_t> enc(codec.encoded_bytes(n));
      ASSERT_EQ(enc.size(), static_cast<size_t>(4 * ((n + block - 1) / block) + n));
      codec.encode(x.data(), DataType::kFloat32, n, enc.data());
      std::vector<float> y(n);
      codec.decode(enc.data(), n, y.data(), DataType::kFloat32);
      const int mant = fmt == Fp8Format::kE4M3 ? 3 : 2;
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = i / block;
        float amax = 0;
        for (int64_t j = k * block; j < std::min(n, (k + 1) * block); ++j)
          amax = std::max(amax, std::fabs(x[j]));
        float s = scale_of(enc, k);
        EXPECT_FLOAT_EQ(s, amax / tr(fmt).max);
        // |err| <= half a quantum of the code's binade (relative 2^-(mant+1)), or half the
        // smallest subnormal quantum, in scaled units; a little slack for the scale rounding.
        float q = std::fabs(x[i]) / s;
        float sub_q = fmt == Fp8Format::kE4M3 ? std::ldexp(1.0f, -9) : std::ldexp(1.0f, -16);
        float bound = std::max(q * std::ldexp(1.0f, -(mant + 1)), sub_q / 2) * s * 1.0001f;
        EXPECT_LE(std::fabs(y[i] - x[i]), bound) << "i=" << i << " x=" << x[i];
      }
    }
  }
}

TEST_P(FormatTest, ExactValuesRoundTripAndBlockMaxHitsMaxCode) {
  const Fp8Format fmt = GetParam();
  Fp8Codec codec({fmt, 32});
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = ref_val(static_cast<uint8_t>(i * 3), fmt);
  x[5] = tr(fmt).max;  // amax == max: scale 1
  std::vector<uint8_t> enc(codec.encoded_bytes(32));
  codec.encode(x.data(), DataType::kFloat32, 32, enc.data());
  EXPECT_EQ(scale_of(enc, 0), 1.0f);
  std::vector<float> y(32);
  codec.decode(enc.data(), 32, y.data(), DataType::kFloat32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;
  EXPECT_EQ(enc[4 + 5], tr(fmt).max_code);
}

TEST_P(FormatTest, ZeroAndTinyBlocks) {
  const Fp8Format fmt = GetParam();
  Fp8Codec codec({fmt, 16});
  std::vector<float> x(48, 0.0f);
  x[3] = -0.0f;
  for (int i = 16; i < 32; ++i) x[i] = std::ldexp(1.0f, -130);  // inv overflows: zero block
  for (int i = 32; i < 48; ++i) x[i] = (i % 2 ? 1e-30f : -2e-30f);
  std::vector<uint8_t> enc(codec.encoded_bytes(48));
  CodecStats st;
  codec.encode(x.data(), DataType::kFloat32, 48, enc.data(), &st);
  EXPECT_EQ(scale_of(enc, 0), 0.0f);
  EXPECT_EQ(scale_of(enc, 1), 0.0f);
  std::vector<float> y(48, 1.0f);
  codec.decode(enc.data(), 48, y.data(), DataType::kFloat32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  EXPECT_TRUE(std::signbit(y[3]));
  for (int i = 32; i < 48; ++i) EXPECT_NEAR(y[i], x[i], 1e-31f) << i;
  EXPECT_EQ(st.underflow, 16u);  // the tiny block is counted as underflow
  EXPECT_EQ(st.nonfinite_blocks, 0u);
  EXPECT_EQ(st.saturated, 0u);
  EXPECT_EQ(st.elements, 48u);
}

// NaN/Inf policy: a block with NaN or Inf is flagged (negative scale); decoding reproduces NaN
// and +-Inf exactly, and the finite values of that block are still encoded.
TEST_P(FormatTest, NonFiniteBlocksAreFlaggedAndReproduced) {
  const Fp8Format fmt = GetParam();
  Fp8Codec codec({fmt, 16});
  auto x = normal_data(48, 3);
  x[2] = NAN;
  x[7] = INFINITY;
  x[9] = -INFINITY;
  x[40] = -NAN;
  std::vector<uint8_t> enc(codec.encoded_bytes(48));
  CodecStats st;
  codec.encode(x.data(), DataType::kFloat32, 48, enc.data(), &st);
  EXPECT_TRUE(std::signbit(scale_of(enc, 0)));
  EXPECT_FALSE(std::signbit(scale_of(enc, 1)));
  EXPECT_TRUE(std::signbit(scale_of(enc, 2)));
  EXPECT_EQ(st.nonfinite_values, 4u);
  EXPECT_EQ(st.nonfinite_blocks, 2u);
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
    std::vector<float> y(48);
    std::vector<uint16_t> h(48);
    if (dt == DataType::kFloat32) {
      codec.decode(enc.data(), 48, y.data(), dt);
    } else {
      codec.decode(enc.data(), 48, h.data(), dt);
      for (int i = 0; i < 48; ++i)
        y[i] = dt == DataType::kBFloat16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
    }
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_TRUE(std::isnan(y[40]));
    EXPECT_EQ(y[7], INFINITY);
    EXPECT_EQ(y[9], -INFINITY);
    for (int i = 0; i < 48; ++i) {
      if (i == 2 || i == 7 || i == 9 || i == 40) continue;
      EXPECT_NEAR(y[i], x[i], 0.1f * std::fabs(x[i]) + 0.02f) << i;
    }
  }
  // accumulate propagates them too.
  std::vector<float> acc(48, 1.0f);
  codec.accumulate(acc.data(), enc.data(), 48);
  EXPECT_TRUE(std::isnan(acc[2]));
  EXPECT_EQ(acc[7], INFINITY);
  EXPECT_EQ(acc[9], -INFINITY);
  // A block of only non-finite values.
  std::vector<float> z(16, INFINITY);
  std::vector<uint8_t> e2(codec.encoded_bytes(16));
  codec.encode(z.data(), DataType::kFloat32, 16, e2.data());
  std::vector<float> w(16);
  codec.decode(e2.data(), 16, w.data(), DataType::kFloat32);
  for (float v : w) EXPECT_EQ(v, INFINITY);
}

TEST_P(FormatTest, AccumulateEqualsAddingTheDecodedValues) {
  const Fp8Format fmt = GetParam();
  Fp8Codec codec({fmt, 128});
  const int64_t n = 1003;
  auto x = normal_data(n, 11);
  auto a = normal_data(n, 12);
  std::vector<uint8_t> enc(codec.encoded_bytes(n));
  codec.encode(x.data(), DataType::kFloat32, n, enc.data());
  std::vector<float> d(n);
  codec.decode(enc.data(), n, d.data(), DataType::kFloat32);
  auto acc = a;
  codec.accumulate(acc.data(), enc.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    volatile float sum = a[i] + d[i];
    EXPECT_EQ(acc[i], sum) << i;
  }
}

TEST_P(FormatTest, Bf16AndF16InputsEncodeLikeTheirFloatValues) {
  const Fp8Format fmt = GetParam();
  Fp8Codec codec({fmt, 256});
  const int64_t n = 777;
  auto x = normal_data(n, 5, 10.0f);
  for (DataType dt : {DataType::kBFloat16, DataType::kFloat16}) {
    std::vector<uint16_t> h(n);
    std::vector<float> xf(n);
    for (int64_t i = 0; i < n; ++i) {
      h[i] = dt == DataType::kBFloat16 ? float_to_bf16(x[i]) : float_to_f16(x[i]);
      xf[i] = dt == DataType::kBFloat16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
    }
    std::vector<uint8_t> e1(codec.encoded_bytes(n)), e2(codec.encoded_bytes(n));
    codec.encode(h.data(), dt, n, e1.data());
    codec.encode(xf.data(), DataType::kFloat32, n, e2.data());
    EXPECT_EQ(e1, e2) << dtype_name(dt);
    std::vector<uint16_t> out(n);
    std::vector<float> outf(n);
    codec.decode(e1.data(), n, out.data(), dt);
    codec.decode(e1.data(), n, outf.data(), DataType::kFloat32);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(out[i], dt == DataType::kBFloat16 ? float_to_bf16(outf[i]) : float_to_f16(outf[i]));
  }
}

// Stochastic rounding: reproducible from the seed, different across seeds/streams, unbiased.
TEST_P(FormatTest, StochasticRoundingIsReproducibleAndUnbiased) {
  const Fp8Format fmt = GetParam();
  const int64_t n = 4096;
  auto x = normal_data(n, 21);
  CodecConfig cfg{fmt, 256, true, 1234};
  Fp8Codec codec(cfg);
  std::vector<uint8_t> e1(codec.encoded_bytes(n)), e2(e1.size()), e3(e1.size()), e4(e1.size());
  codec.encode(x.data(), DataType::kFloat32, n, e1.data(), nullptr, 5, 0);
  codec.encode(x.data(), DataType::kFloat32, n, e2.data(), nullptr, 5, 0);
  codec.encode(x.data(), DataType::kFloat32, n, e3.data(), nullptr, 6, 0);
  Fp8Codec other({fmt, 256, true, 99});
  other.encode(x.data(), DataType::kFloat32, n, e4.data(), nullptr, 5, 0);
  EXPECT_EQ(e1, e2);
  EXPECT_NE(e1, e3);
  EXPECT_NE(e1, e4);
  // Unbiased: the mean of many independent roundings of one value approaches it, while RNE
  // stays at a fixed error.
  std::vector<float> v(256, 0.0f);
  v[0] = tr(fmt).max;                                         // scale 1
  for (int i = 1; i < 256; ++i) v[i] = 1.0f + 0.3f * 0.125f;  // 30% of a quantum above 1 (E4M3)
  double mean = 0;
  const int trials = 2000;
  std::vector<uint8_t> e(codec.encoded_bytes(256));
  std::vector<float> d(256);
  for (int t = 0; t < trials; ++t) {
    codec.encode(v.data(), DataType::kFloat32, 256, e.data(), nullptr, static_cast<uint64_t>(t), 0);
    codec.decode(e.data(), 256, d.data(), DataType::kFloat32);
    for (int i = 1; i < 256; ++i) mean += d[i];
  }
  mean /= trials * 255.0;
  EXPECT_NEAR(mean, v[1], 5e-4) << "stochastic rounding is biased";
  // Every code SR picks is one of the two neighbours.
  for (int64_t i = 0; i < n; ++i) {
    float s = scale_of(e1, i / 256);
    float q = x[i] / s;
    uint8_t c = e1[4 * (n / 256) + i];
    uint8_t rne = fp8_rne(q, tr(fmt));
    EXPECT_LE(std::abs(int(c & 0x7f) - int(rne & 0x7f)), 1) << i;
  }
}

TEST(Codec, RejectsBadBlockSizeAndDtype) {
  EXPECT_THROW(Fp8Codec({Fp8Format::kE4M3, 0}), Error);
  EXPECT_THROW(Fp8Codec({Fp8Format::kE4M3, 100}), Error);
  EXPECT_THROW(Fp8Codec({Fp8Format::kE4M3, 8192}), Error);
  Fp8Codec c({});
  int32_t v[4] = {};
  uint8_t enc[64];
  try {
    c.encode(v, DataType::kInt32, 4, enc);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

TEST(Codec, ChunksEncodeIndependently) {
  // Encoding a tensor chunk by chunk (chunks starting at block multiples) gives the same codes
  // and scales as encoding it whole, so the chunks of a tensor can be sent separately.
  Fp8Codec codec({Fp8Format::kE4M3, 128});
  const int64_t n = 1000;
  auto x = normal_data(n, 9);
  std::vector<uint8_t> whole(codec.encoded_bytes(n));
  codec.encode(x.data(), DataType::kFloat32, n, whole.data());
  std::vector<uint8_t> c1(codec.encoded_bytes(512)), c2(codec.encoded_bytes(n - 512));
  codec.encode(x.data(), DataType::kFloat32, 512, c1.data());
  codec.encode(x.data() + 512, DataType::kFloat32, n - 512, c2.data());
  const int64_t nb = 8;
  EXPECT_EQ(std::memcmp(whole.data(), c1.data(), 16), 0);
  EXPECT_EQ(std::memcmp(whole.data() + 16, c2.data(), 16), 0);
  EXPECT_EQ(std::memcmp(whole.data() + 4 * nb, c1.data() + 16, 512), 0);
  EXPECT_EQ(std::memcmp(whole.data() + 4 * nb + 512, c2.data() + 16, n - 512), 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, FormatTest, ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                         [](const auto& i) { return std::string(fp8_format_name(i.param)); });
