// The host side of the cuda backend's call checks (plain C++, runs on the CPU): a DeviceCall
// carries the whole fingerprint, its hash tells exactly the calls fingerprints_match pairs apart
// (the op number aside), the calls a rank issued lately are found by hash, and a mismatch report
// becomes a message naming both calls. Layer: tests (unit).
#include "cuda/call_stamp.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

namespace commx::cuda {
namespace {

OpFingerprint all_reduce_sum(int64_t count, uint64_t seq = 7, uint32_t ordinal = 3) {
  OpFingerprint f;
  f.seq = seq;
  f.ordinal = ordinal;
  f.type = static_cast<uint8_t>(OpType::kAllReduce);
  f.dtype = static_cast<uint8_t>(DataType::kFloat32);
  f.reduce = static_cast<uint8_t>(ReduceKind::kSum);
  f.count = count;
  return f;
}

TEST(CudaCallStamp, CarriesTheWholeFingerprint) {
  OpFingerprint f = all_reduce_sum(1024);
  f.sizes = 0x1234567890abcdefull;
  f.root = 5;
  f.flags = OpFingerprint::kPremulFactor;
  const DeviceCall c = device_call(f);
  const OpFingerprint back = fingerprint_of_words(c.words);
  EXPECT_EQ(describe_call(back), describe_call(f));
  EXPECT_EQ(back.seq, f.seq);
  EXPECT_EQ(back.sizes, f.sizes);
  EXPECT_EQ(back.ordinal, f.ordinal);
  EXPECT_TRUE(fingerprints_match(back, f));
  EXPECT_EQ(c.hash, call_hash(c.words));
}

// Every field fingerprints_match compares changes the hash; the op number does not.
TEST(CudaCallStamp, HashSeparatesWhatFingerprintsMatchSeparates) {
  const OpFingerprint base = all_reduce_sum(1024);
  const std::vector<std::pair<const char*, std::function<void(OpFingerprint&)>>> changes = {
      {"type", [](OpFingerprint& f) { f.type = static_cast<uint8_t>(OpType::kBroadcast); }},
      {"dtype", [](OpFingerprint& f) { f.dtype = static_cast<uint8_t>(DataType::kBFloat16); }},
      {"reduce", [](OpFingerprint& f) { f.reduce = static_cast<uint8_t>(ReduceKind::kMax); }},
      {"count", [](OpFingerprint& f) { f.count = 1025; }},
      {"sizes", [](OpFingerprint& f) { f.sizes = 1; }},
      {"root", [](OpFingerprint& f) { f.root = 1; }},
      {"ordinal", [](OpFingerprint& f) { f.ordinal = 4; }},
      {"flags", [](OpFingerprint& f) { f.flags = OpFingerprint::kPremulFactor; }},
      {"lowp format", [](OpFingerprint& f) { f.lowp_format = 1; }},
  };
  for (const auto& [what, change] : changes) {
    OpFingerprint other = base;
    change(other);
    EXPECT_FALSE(fingerprints_match(base, other)) << what;
    EXPECT_NE(device_call(base).hash, device_call(other).hash) << what;
  }
  OpFingerprint renumbered = base;
  renumbered.seq = 99;
  EXPECT_EQ(device_call(base).hash, device_call(renumbered).hash);
}

TEST(CudaCallStamp, RecentCallsFindAPeersCallByItsHash) {
  RecentCalls recent;
  EXPECT_FALSE(recent.find(device_call(all_reduce_sum(1)).hash, 3));
  // 100 distinct calls, each repeated at growing ordinals: the last kSize distinct ones are kept.
  uint32_t ordinal = 0;
  for (int i = 0; i < 100; ++i)
    for (int rep = 0; rep < 3; ++rep, ++ordinal) recent.note(all_reduce_sum(i, ordinal, ordinal));
  EXPECT_FALSE(recent.find(device_call(all_reduce_sum(35, 0, 500)).hash, 500));
  // A peer's call at ordinal 500 is found whatever ordinal this rank issued it at.
  auto f = recent.find(device_call(all_reduce_sum(36, 0, 500)).hash, 500);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->count, 36);
  EXPECT_EQ(f->ordinal, 500u);
  // Not when the hash is of another ordinal than the one asked for.
  EXPECT_FALSE(recent.find(device_call(all_reduce_sum(36, 0, 501)).hash, 500));
}

CallMismatch report(const OpFingerprint& mine, const OpFingerprint& theirs, bool known) {
  CallMismatch m{};
  const DeviceCall a = device_call(mine), b = device_call(theirs);
  for (int w = 0; w < 5; ++w) {
    m.mine[w] = a.words[w];
    m.theirs[w] = known ? b.words[w] : 0;
  }
  m.their_hash = b.hash;
  m.theirs_known = known;
  return m;
}

TEST(CudaCallStamp, MismatchMessageNamesBothCalls) {
  const OpFingerprint mine = all_reduce_sum(16, 4);
  OpFingerprint theirs = mine;
  theirs.type = static_cast<uint8_t>(OpType::kBroadcast);
  theirs.reduce = OpFingerprint::kNoReduce;
  theirs.root = 1;
  RecentCalls recent;
  EXPECT_EQ(call_mismatch_message(report(mine, theirs, true), 0, 1, recent),
            "rank 0 called all_reduce #4 (sum, 16 x float) but rank 1 called broadcast #4 (root "
            "1, 16 x float): the ranks' calls do not match");
  // Known by hash only: found among this rank's own calls, or named by its hash.
  const std::string unknown = call_mismatch_message(report(mine, theirs, false), 0, 1, recent);
  EXPECT_NE(unknown.find("rank 0 called all_reduce #4 (sum, 16 x float) but rank 1 called "
                         "another collective (call hash "),
            std::string::npos)
      << unknown;
  OpFingerprint earlier = theirs;
  earlier.seq = 2;
  earlier.ordinal = 1;
  recent.note(earlier);
  EXPECT_EQ(call_mismatch_message(report(mine, theirs, false), 1, 0, recent),
            "rank 1 called all_reduce #4 (sum, 16 x float) but rank 0 called broadcast #4 (root "
            "1, 16 x float): the ranks' calls do not match");
}

// A barrier that could not read the peer's call entry reports only the flag's check of its hash:
// the call is still found among this rank's own calls by that check at that flag value.
TEST(CudaCallStamp, MismatchKnownOnlyByItsFlagCheckIsFoundByIt) {
  const OpFingerprint mine = all_reduce_sum(16, 4);
  OpFingerprint theirs = mine;
  theirs.type = static_cast<uint8_t>(OpType::kAllGather);
  theirs.reduce = OpFingerprint::kNoReduce;
  const unsigned long long value = 4 * 4 + 1;  // a flag of op 4
  CallMismatch m = report(mine, theirs, false);
  m.check_value = value;
  m.their_hash = flag_check(device_call(theirs).hash, value);
  RecentCalls recent;
  const std::string unknown = call_mismatch_message(m, 0, 1, recent);
  char check[16];
  std::snprintf(check, sizeof(check), "%05llx", m.their_hash);
  EXPECT_NE(unknown.find(std::string("called another collective (flag check ") + check +
                         " at flag 17, none this rank issued lately)"),
            std::string::npos)
      << unknown;
  for (int i = 1; i < 20; ++i) recent.note(all_reduce_sum(i, i, i));
  OpFingerprint earlier = theirs;
  earlier.seq = 2;
  earlier.ordinal = 1;
  recent.note(earlier);
  for (int i = 20; i < 30; ++i) recent.note(all_reduce_sum(i, i, i));
  EXPECT_EQ(call_mismatch_message(m, 0, 1, recent),
            "rank 0 called all_reduce #4 (sum, 16 x float) but rank 1 called all_gather #4 (16 x "
            "float): the ranks' calls do not match");
  // The check alone is not a hash: looked up as one, it names nothing.
  EXPECT_FALSE(recent.find(m.their_hash, mine.ordinal));
}

// A barrier flag carries its call's check in its low bits: later flag values stay larger whatever
// the calls (so a peer ahead still passes "flag >= mine"), the value reads back, and two calls'
// checks agree at one value by chance (about 2^-20) but not again at the next.
TEST(CudaCallStamp, BarrierWordsOrderByValueAndSeparateCalls) {
  std::mt19937_64 rng(20261127);
  const unsigned long long mask = (1ull << kFlagCheckBits) - 1;
  int agree_once = 0, agree_twice = 0;
  for (int i = 0; i < 200000; ++i) {
    const unsigned long long top = (1ull << (64 - kFlagCheckBits)) - 2;
    const unsigned long long v = i < 100 ? top - i : rng() % top + 1;
    const unsigned long long a = rng(), b = i % 2 ? rng() : a ^ (1ull << (i % 64));
    ASSERT_LT(barrier_word(v, a), barrier_word(v + 1, b)) << v;
    ASSERT_EQ(barrier_word(v, a) >> kFlagCheckBits, v);
    ASSERT_EQ(barrier_word(v, a) & mask, flag_check(a, v));
    const bool now = flag_check(a, v) == flag_check(b, v);
    agree_once += now;
    agree_twice += now && flag_check(a, v + 1) == flag_check(b, v + 1);
  }
  EXPECT_LE(agree_once, 5);  // 200000 pairs at 2^-20: about 0.2 expected
  EXPECT_EQ(agree_twice, 0);
  // The same call at the same value always carries the same check.
  EXPECT_EQ(barrier_word(12345, 0xabcdefull), barrier_word(12345, 0xabcdefull));
}

}  // namespace
}  // namespace commx::cuda
