// Bit-exact checks of the float <-> f16/bf16/fp8 conversions against independent references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "commx/numeric.h"

using namespace commx;

TEST(Numeric, Bf16RoundTripAndRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  // 1 + 2^-8 is a tie between 1 and 1+2^-7: rounds to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  std::mt19937 g(1);
  std::uniform_int_distribution<uint32_t> d;
  for (int i = 0; i < 10000; ++i) {
    uint16_t h = static_cast<uint16_t>(d(g));
    float f = bf16_to_float(h);
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), h);
    }
  }
}

TEST(Numeric, F16AllEncodingsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_f16(f), h) << std::hex << h;
  }
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
}

TEST(Numeric, Fp8E4M3) {
  EXPECT_EQ(fp8e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8e4m3_to_float(0x7f)));
  EXPECT_EQ(float_to_fp8e4m3(1e6f), 0x7e);     // saturates
  EXPECT_EQ(float_to_fp8e4m3(-1e6f), 0xfe);
  EXPECT_EQ(float_to_fp8e4m3(INFINITY), 0x7e);
  EXPECT_EQ(float_to_fp8e4m3(NAN) & 0x7f, 0x7f);
  for (int b = 0; b < 256; ++b) {
    float f = fp8e4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp8e4m3(f), b == 0x80 ? 0x80 : b) << b;
  }
  // Ties to even: 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39).
  EXPECT_EQ(float_to_fp8e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_fp8e4m3(1.1875f), 0x3a);
}

TEST(Numeric, Fp8E5M2) {
  EXPECT_EQ(fp8e5m2_to_float(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(fp8e5m2_to_float(0x7c)));
  EXPECT_TRUE(std::isnan(fp8e5m2_to_float(0x7e)));
  EXPECT_EQ(float_to_fp8e5m2(INFINITY), 0x7c);
  for (int b = 0; b < 256; ++b) {
    float f = fp8e5m2_to_float(static_cast<uint8_t>(b));
    if (std::isnan(f) || std::isinf(f)) continue;
    EXPECT_EQ(float_to_fp8e5m2(f), b) << b;
  }
}
