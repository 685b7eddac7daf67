// Tests of the backend hook lowp_maybe_run(): which ops it takes (settings, hints, threshold),
// and that every OpDesc form (list, single) gives the same result as the direct collective.
#include <gtest/gtest.h>

#include <vector>

#include "commx/error.h"
#include "lowp/inproc_transport.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_dispatch.h"
#include "lowp/lowp_test_util.h"

using namespace commx;
using namespace commx::lowp;
using namespace commx::testing;

namespace {

LowpSettings enabled(int64_t min_bytes = 0) {
  LowpSettings s;
  s.enabled = true;
  s.min_bytes = min_bytes;
  s.codec.block = 64;
  return s;
}

Deadline soon() { return Clock::now() + std::chrono::seconds(20); }

}  // namespace

TEST(LowpDispatch, TakesOnlyWhatTheSettingsSay) {
  std::vector<float> a(1000, 1.0f);
  OpDesc op;
  op.type = OpType::kAllReduce;
  op.input = op.output = make_tensor(a.data(), 1000);
  op.op = ReduceOp::SUM;
  lower_op(op, 0, 1);
  run_ranks(1, [&](int r, Transport& t) {
    EXPECT_FALSE(lowp_maybe_run(op, LowpSettings{}, t, r, 1, soon(), ""));    // off
    EXPECT_FALSE(lowp_maybe_run(op, enabled(1 << 20), t, r, 1, soon(), ""));  // small
    EXPECT_TRUE(lowp_maybe_run(op, enabled(4000), t, r, 1, soon(), ""));      // 4000 bytes
    OpDesc mx = op;
    mx.op = ReduceOp::MAX;
    EXPECT_FALSE(lowp_maybe_run(mx, enabled(), t, r, 1, soon(), ""));
    OpDesc bc = op;
    bc.type = OpType::kBroadcast;
    lower_op(bc, 0, 1);
    EXPECT_FALSE(lowp_maybe_run(bc, enabled(), t, r, 1, soon(), ""));
    OpDesc hinted = op;
    hinted.hints["low_precision"] = "fp8e4m3";
    EXPECT_TRUE(lowp_maybe_run(hinted, LowpSettings{}, t, r, 1, soon(), ""));
  });
  EXPECT_EQ(op.bytes(), 4000u);
  OpDesc ag;
  ag.type = OpType::kAllGatherSingle;
  ag.input = make_tensor(a.data(), 250);
  ag.output = make_tensor(a.data(), 1000);
  lower_op(ag, 0, 4);
  EXPECT_EQ(ag.bytes(), 4000u);
}

TEST(LowpDispatch, SingleAndListFormsMatchTheCollectives) {
  const int size = 4;
  const int64_t each = 300;
  Fp8Codec codec(enabled().codec);
  std::vector<Buf> in;
  for (int r = 0; r < size; ++r)
    in.push_back(make_buf(DataType::kBFloat16, gen(Dist::kNormal, each * size, r)));
  // reduce_scatter_single vs reduce_scatter over the same pieces
  std::vector<Buf> o1, o2;
  for (int r = 0; r < size; ++r) {
    o1.emplace_back(DataType::kBFloat16, each);
    o2.emplace_back(DataType::kBFloat16, each);
  }
  run_ranks(size, [&](int r, Transport& t) {
    OpDesc op;
    op.type = OpType::kReduceScatterSingle;
    op.input = in[r].tensor();
    op.output = o1[r].tensor();
    op.op = ReduceOp::AVG;
    op.seq = 9;
    lower_op(op, r, size);
    ASSERT_TRUE(lowp_maybe_run(op, enabled(), t, r, size, soon(), ""));
    std::vector<Tensor> pieces;
    for (int p = 0; p < size; ++p) pieces.push_back(in[r].tensor().slice(p * each, each));
    LowpContext c{t, r, size, soon(), codec, nullptr, 9, ""};
    lowp_reduce_scatter(c, pieces, o2[r].tensor(), ReduceKind::kAvg);
  });
  for (int r = 0; r < size; ++r) EXPECT_TRUE(o1[r].same_bits(o2[r])) << r;

  // all_gather_single and all_to_all_single
  std::vector<Buf> g(size), a2a(size);
  for (int r = 0; r < size; ++r) {
    g[r] = Buf(DataType::kBFloat16, each * size * size);
    a2a[r] = Buf(DataType::kBFloat16, each * size);
  }
  run_ranks(size, [&](int r, Transport& t) {
    OpDesc op;
    op.type = OpType::kAllGatherSingle;
    op.input = in[r].tensor();
    op.output = g[r].tensor();
    lower_op(op, r, size);
    ASSERT_TRUE(lowp_maybe_run(op, enabled(), t, r, size, soon(), ""));
    OpDesc b;
    b.type = OpType::kAllToAllSingle;
    b.input = in[r].tensor();
    b.output = a2a[r].tensor();
    lower_op(b, r, size);
    ASSERT_TRUE(lowp_maybe_run(b, enabled(), t, r, size, soon(), ""));
  });
  for (int r = 1; r < size; ++r) EXPECT_TRUE(g[r].same_bits(g[0]));
  for (int r = 0; r < size; ++r) {
    for (int p = 0; p < size; ++p) {
      // g[.] block p = decode(encode(in[p])); a2a[r] piece p ~ in[p] piece r
      for (int64_t i = 0; i < each * size; i += 97)
        EXPECT_NEAR(g[r].get(p * each * size + i), in[p].get(i),
                    0.07 * std::fabs(in[p].get(i)) + 0.02);
      for (int64_t i = 0; i < each; i += 31)
        EXPECT_NEAR(a2a[r].get(p * each + i), in[p].get(r * each + i),
                    0.07 * std::fabs(in[p].get(r * each + i)) + 0.02);
    }
  }
}

TEST(LowpDispatch, ForcedOnIneligibleOpIsUnsupported) {
  std::vector<int32_t> a(16);
  OpDesc op;
  op.type = OpType::kAllReduce;
  op.input = op.output = make_tensor(a.data(), 16);
  op.hints["low_precision"] = "on";
  lower_op(op, 0, 1);
  run_ranks(1, [&](int r, Transport& t) {
    try {
      lowp_maybe_run(op, LowpSettings{}, t, r, 1, soon(), "[ctx] ");
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("[ctx] "), std::string::npos);
    }
  });
}

TEST(LowpDispatch, CountersAddUpPerComm) {
  std::vector<std::vector<float>> a(2, std::vector<float>(1000, 1.0f));
  a[0][3] = NAN;
  a[1][900] = INFINITY;
  std::vector<CodecStats> st(2);
  run_ranks(2, [&](int r, Transport& t) {
    OpDesc op;
    op.type = OpType::kAllReduce;
    op.input = op.output = make_tensor(a[r].data(), 1000);
    op.op = ReduceOp::SUM;
    lower_op(op, r, 2);
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(lowp_maybe_run(op, enabled(), t, r, 2, soon(), "", &st[r]));
  });
  EXPECT_TRUE(std::isnan(a[0][3]) && std::isnan(a[1][3]));
  EXPECT_EQ(a[0][900], INFINITY);
  uint64_t elements = 0, nonfinite = 0;
  for (auto& s : st) {
    elements += s.elements;
    nonfinite += s.nonfinite_values;
    EXPECT_EQ(s.saturated, 0u);
  }
  EXPECT_EQ(elements, 2u * 2 * 1000);  // two ops, each rank encodes 1000 elements per op
  EXPECT_GE(nonfinite, 4u);
}
