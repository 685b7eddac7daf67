// How the cuda backend's FP8 kernels cut a data area into slots (plain C++, runs on the CPU):
// a chunk's codes and scales fit its slot, and an all_reduce takes both buffer halves exactly
// when they hold it in one round where one half would not. Layer: tests (unit).
#include "cuda/lowp_slots.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace commx::cuda {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Encoded bytes of `chunk` elements in a slot: scales and codes, each padded to 16 bytes.
uint64_t slot_bytes(int64_t chunk, int64_t block) {
  auto pad = [](uint64_t b) { return (b + 15) / 16 * 16; };
  return pad(static_cast<uint64_t>(chunk / block) * 4) + pad(static_cast<uint64_t>(chunk));
}

TEST(CudaLowpSlots, ChunksFitTheirSlots) {
  for (uint64_t area : {1 * kMiB, 31 * kMiB, 62 * kMiB, 1000 * kMiB + 12345})
    for (int slots : {1, 3, 7, 15})
      for (int terms : {1, 2})
        for (int64_t block : {16, 256, 4096}) {
          const LowpSlots s = lowp_slots(area, slots, terms, block);
          ASSERT_EQ(s.cap % 256, 0u);
          ASSERT_LE(s.cap * static_cast<uint64_t>(slots), area);
          ASSERT_GT(s.chunk, 0) << area << " " << slots << " " << block;
          ASSERT_EQ(s.chunk % block, 0);
          ASSERT_LE(slot_bytes(s.chunk, block) * static_cast<uint64_t>(terms), s.cap);
          // One more codec block would not fit with the 32 bytes of padding kept back.
          ASSERT_GT(static_cast<uint64_t>(s.chunk / block + 1) * (block + 4) + 32, s.cap / terms);
        }
  EXPECT_EQ(lowp_slots(1000, 8, 1, 256).chunk, 0);  // too small: the caller reports it
}

TEST(CudaLowpSlots, AllReduceTakesBothHalvesForOneRoundOnly) {
  // 2 ranks, the default 31 MiB halves, 3 slots (a receive slot and two gather slots), one term,
  // blocks of 256: bf16 64 MiB has a longest range of 16M elements.
  const uint64_t half = 31 * kMiB;
  const int64_t one = lowp_slots(half, 3, 1, 256).chunk,
                both = lowp_slots(2 * half, 3, 1, 256).chunk;
  ASSERT_LT(one, int64_t(16) << 20);
  ASSERT_GE(both, int64_t(16) << 20);
  EXPECT_TRUE(lowp_all_reduce_both_halves(half, 3, 1, 256, int64_t(16) << 20));  // bf16 64 MiB
  EXPECT_FALSE(
      lowp_all_reduce_both_halves(half, 3, 1, 256, int64_t(4) << 20));  // 16 MiB: one round
  EXPECT_FALSE(lowp_all_reduce_both_halves(half, 3, 1, 256, int64_t(8) << 20));   // f32 64 MiB
  EXPECT_FALSE(lowp_all_reduce_both_halves(half, 3, 1, 256, int64_t(64) << 20));  // 256 MiB
  // The edges: one element past what one half holds, and what both hold exactly.
  EXPECT_FALSE(lowp_all_reduce_both_halves(half, 3, 1, 256, one));
  EXPECT_TRUE(lowp_all_reduce_both_halves(half, 3, 1, 256, one + 1));
  EXPECT_TRUE(lowp_all_reduce_both_halves(half, 3, 1, 256, both));
  EXPECT_FALSE(lowp_all_reduce_both_halves(half, 3, 1, 256, both + 1));
  // Two terms (fp8x2) halve the chunk: the same op then needs both halves at half the size.
  EXPECT_TRUE(lowp_all_reduce_both_halves(half, 3, 2, 256, int64_t(8) << 20));
  // A buffer too small for any chunk never switches.
  EXPECT_FALSE(lowp_all_reduce_both_halves(100, 3, 1, 256, 1000));
}

}  // namespace
}  // namespace commx::cuda
