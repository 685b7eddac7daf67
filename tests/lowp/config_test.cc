// Tests of the low-precision settings: hints, environment (with the RCCL alias), per-collective
// switches, size threshold, block size, and the per-op decision with its precedence.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "commx/error.h"
#include "lowp/lowp_config.h"

using namespace commx;
using namespace commx::lowp;

namespace {

// Sets environment variables for one test and removes every COMMX/RCCL low-precision one after.
class EnvGuard {
 public:
  EnvGuard() { clear(); }
  ~EnvGuard() { clear(); }
  void set(const char* k, const char* v) { setenv(k, v, 1); }

 private:
  static void clear() {
    for (const char* k :
         {"COMMX_LOW_PRECISION_ENABLE", "RCCL_LOW_PRECISION_ENABLE", "COMMX_LOW_PRECISION_FORMAT",
          "COMMX_LOW_PRECISION_ENABLE_ALLREDUCE", "COMMX_LOW_PRECISION_ENABLE_ALLGATHER",
          "COMMX_LOW_PRECISION_ENABLE_REDUCESCATTER", "COMMX_LOW_PRECISION_ENABLE_ALLTOALL",
          "COMMX_LOW_PRECISION_MIN_BYTES", "COMMX_LOW_PRECISION_BLOCK",
          "COMMX_LOW_PRECISION_ROUNDING", "COMMX_LOW_PRECISION_SEED", "COMMX_LOW_PRECISION_GATHER"})
      unsetenv(k);
  }
};

constexpr int64_t kBig = 64 << 20;
const DataType kF32 = DataType::kFloat32;

}  // namespace

TEST(LowpConfig, OffByDefault) {
  EnvGuard env;
  LowpSettings s = resolve_lowp_settings({});
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.min_bytes, kDefaultMinBytes);
  EXPECT_EQ(s.codec.block, kDefaultBlock);
  EXPECT_EQ(s.codec.format, Fp8Format::kE4M3);
  EXPECT_FALSE(lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {}));
}

TEST(LowpConfig, EnvEnablesAndRcclAliasWorks) {
  for (const char* var : {"COMMX_LOW_PRECISION_ENABLE", "RCCL_LOW_PRECISION_ENABLE"}) {
    EnvGuard env;
    env.set(var, "1");
    LowpSettings s = resolve_lowp_settings({});
    EXPECT_TRUE(s.enabled) << var;
    auto c = lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {});
    ASSERT_TRUE(c) << var;
    EXPECT_EQ(c->codec.format, Fp8Format::kE4M3);
    // Below the threshold: the normal path.
    EXPECT_FALSE(lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, 1024, {}));
  }
  EnvGuard env;
  env.set("COMMX_LOW_PRECISION_ENABLE", "0");
  env.set("RCCL_LOW_PRECISION_ENABLE", "1");  // the COMMX_ name wins
  EXPECT_FALSE(resolve_lowp_settings({}).enabled);
}

TEST(LowpConfig, CommHintsAndEnvOverride) {
  EnvGuard env;
  Hints h{{"low_precision", "fp8e5m2"},   {"low_precision_min_bytes", "4096"},
          {"low_precision_block", "128"}, {"low_precision_rounding", "stochastic"},
          {"low_precision_seed", "42"},   {"low_precision_gather", "fp8x2"}};
  LowpSettings s = resolve_lowp_settings(h);
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.codec.format, Fp8Format::kE5M2);
  EXPECT_EQ(s.min_bytes, 4096);
  EXPECT_EQ(s.codec.block, 128);
  EXPECT_TRUE(s.codec.stochastic);
  EXPECT_EQ(s.codec.seed, 42u);
  EXPECT_TRUE(s.two_term_gather);
  auto plan = lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {});
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->two_term_gather);
  EXPECT_EQ(plan->codec.block, 128);
  env.set("COMMX_LOW_PRECISION_ENABLE", "off");
  env.set("COMMX_LOW_PRECISION_BLOCK", "512");
  env.set("COMMX_LOW_PRECISION_MIN_BYTES", "0");
  env.set("COMMX_LOW_PRECISION_FORMAT", "e4m3");
  env.set("COMMX_LOW_PRECISION_ROUNDING", "nearest");
  env.set("COMMX_LOW_PRECISION_GATHER", "fp8");
  s = resolve_lowp_settings(h);
  EXPECT_FALSE(s.two_term_gather);
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.codec.block, 512);
  EXPECT_EQ(s.min_bytes, 0);
  EXPECT_EQ(s.codec.format, Fp8Format::kE4M3);
  EXPECT_FALSE(s.codec.stochastic);
}

TEST(LowpConfig, PerCollectiveSwitches) {
  EnvGuard env;
  env.set("COMMX_LOW_PRECISION_ENABLE", "1");
  env.set("COMMX_LOW_PRECISION_ENABLE_ALLGATHER", "0");
  env.set("COMMX_LOW_PRECISION_ENABLE_ALLTOALL", "0");
  LowpSettings s = resolve_lowp_settings({});
  EXPECT_TRUE(lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {}));
  EXPECT_TRUE(lowp_choice(s, OpType::kReduceScatterSingle, kF32, ReduceOp::AVG, kBig, {}));
  EXPECT_FALSE(lowp_choice(s, OpType::kAllGather, kF32, ReduceOp::SUM, kBig, {}));
  EXPECT_FALSE(lowp_choice(s, OpType::kAllGatherSingle, kF32, ReduceOp::SUM, kBig, {}));
  EXPECT_FALSE(lowp_choice(s, OpType::kAllToAllSingle, kF32, ReduceOp::SUM, kBig, {}));
  // An op hint overrides the switch.
  EXPECT_TRUE(lowp_choice(s, OpType::kAllGather, kF32, ReduceOp::SUM, kBig,
                          {{"low_precision", "fp8e4m3"}}));
}

TEST(LowpConfig, EligibilityOfOpsDtypesAndReductions) {
  EXPECT_TRUE(lowp_eligible(OpType::kAllReduce, DataType::kBFloat16, ReduceOp::SUM));
  EXPECT_TRUE(lowp_eligible(OpType::kAllReduce, DataType::kFloat16, ReduceOp::AVG));
  EXPECT_FALSE(lowp_eligible(OpType::kAllReduce, DataType::kFloat64, ReduceOp::SUM));
  EXPECT_FALSE(lowp_eligible(OpType::kAllReduce, DataType::kInt32, ReduceOp::SUM));
  EXPECT_FALSE(lowp_eligible(OpType::kAllReduce, kF32, ReduceOp::MAX));
  EXPECT_TRUE(lowp_eligible(OpType::kAllGather, kF32, ReduceOp::MAX));  // op ignored
  EXPECT_FALSE(lowp_eligible(OpType::kBroadcast, kF32, ReduceOp::SUM));
  EXPECT_FALSE(lowp_eligible(OpType::kAllToAllVSingle, kF32, ReduceOp::SUM));
  EXPECT_FALSE(lowp_eligible(OpType::kReduceScatterV, kF32, ReduceOp::SUM));
  EnvGuard env;
  env.set("COMMX_LOW_PRECISION_ENABLE", "1");
  LowpSettings s = resolve_lowp_settings({});
  EXPECT_FALSE(lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::MAX, kBig, {}));
  EXPECT_FALSE(lowp_choice(s, OpType::kAllReduce, DataType::kFloat64, ReduceOp::SUM, kBig, {}));
}

TEST(LowpConfig, OpHintPrecedence) {
  EnvGuard env;
  LowpSettings s = resolve_lowp_settings({});  // off
  auto c =
      lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, 16, {{"low_precision", "fp8e5m2"}});
  ASSERT_TRUE(c);  // forced, below the threshold too
  EXPECT_EQ(c->codec.format, Fp8Format::kE5M2);
  env.set("COMMX_LOW_PRECISION_ENABLE", "1");
  s = resolve_lowp_settings({});
  EXPECT_FALSE(
      lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {{"low_precision", "off"}}));
  EXPECT_TRUE(
      lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {{"low_precision", "auto"}}));
  // Forcing FP8 on an op that cannot use it is an error naming why.
  try {
    lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::MAX, kBig, {{"low_precision", "on"}},
                "[comm 'c' rank 0/2] all_reduce #3: ");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    std::string m = e.what();
    EXPECT_NE(m.find("all_reduce #3"), std::string::npos) << m;
    EXPECT_NE(m.find("max"), std::string::npos) << m;
  }
}

TEST(LowpConfig, OpHintsOverrideTheCommSettingsForThatOp) {
  EnvGuard env;
  env.set("COMMX_LOW_PRECISION_GATHER", "fp8");  // the environment sets the comm's settings only
  LowpSettings s = resolve_lowp_settings({{"low_precision", "on"}});
  Hints h{{"low_precision", "fp8e4m3"},  {"low_precision_gather", "fp8x2"},
          {"low_precision_block", "64"}, {"low_precision_rounding", "stochastic"},
          {"low_precision_seed", "7"}};
  auto c = lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, h);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->two_term_gather);
  EXPECT_EQ(c->codec.block, 64);
  EXPECT_TRUE(c->codec.stochastic);
  EXPECT_EQ(c->codec.seed, 7u);
  // Without them the comm's settings apply.
  c = lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig, {{"low_precision", "on"}});
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->two_term_gather);
  EXPECT_EQ(c->codec.block, kDefaultBlock);
  // The threshold of an op that is not forced.
  EXPECT_FALSE(lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, 4096, {}));
  EXPECT_TRUE(lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, 4096,
                          {{"low_precision_min_bytes", "1024"}}));
  try {
    lowp_choice(s, OpType::kAllReduce, kF32, ReduceOp::SUM, kBig,
                {{"low_precision", "on"}, {"low_precision_gather", "fp16"}},
                "[comm 'c' rank 1/2] all_reduce #4: ");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    std::string m = e.what();
    EXPECT_NE(m.find("rank 1/2] all_reduce #4: op hint low_precision_gather='fp16'"),
              std::string::npos)
        << m;
  }
}

TEST(LowpConfig, BadValuesAreClearErrors) {
  {
    EnvGuard env;
    EXPECT_THROW(resolve_lowp_settings({{"low_precision", "fp9"}}), Error);
    EXPECT_THROW(resolve_lowp_settings({{"low_precision_block", "100"}}), Error);
    EXPECT_THROW(resolve_lowp_settings({{"low_precision_min_bytes", "lots"}}), Error);
    EXPECT_THROW(resolve_lowp_settings({{"low_precision_rounding", "up"}}), Error);
    EXPECT_THROW(resolve_lowp_settings({{"low_precision_gather", "fp16"}}), Error);
    EXPECT_THROW(lowp_choice(LowpSettings{}, OpType::kAllReduce, kF32, ReduceOp::SUM, 1,
                             {{"low_precision", "maybe"}}),
                 Error);
  }
  EnvGuard env;
  env.set("COMMX_LOW_PRECISION_BLOCK", "7");
  try {
    resolve_lowp_settings({});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("COMMX_LOW_PRECISION_BLOCK"), std::string::npos);
  }
}
