// lower_op and the shape queries of OpDesc: every user-facing form lowers to its canonical
// collective with one view per rank, and dtype/agreed_count/bytes/one-buffer answer the same for
// the forms that describe the same data.
#include <gtest/gtest.h>

#include <vector>

#include "commx/backend.h"

using namespace commx;

namespace {

constexpr int kSize = 4;

// The views' (offset in elements from `base`, count) pairs.
std::vector<std::pair<int64_t, int64_t>> layout(const std::vector<Tensor>& views, const float* base) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Tensor& t : views) out.emplace_back(static_cast<const float*>(t.data) - base, t.count);
  return out;
}

using Layout = std::vector<std::pair<int64_t, int64_t>>;

}  // namespace

TEST(CanonicalOp, EveryFormLowersToItsCollective) {
  const std::pair<OpType, Collective> expected[] = {
      {OpType::kAllReduce, Collective::kAllReduce},
      {OpType::kReduce, Collective::kReduce},
      {OpType::kBroadcast, Collective::kBroadcast},
      {OpType::kAllGather, Collective::kAllGather},
      {OpType::kAllGatherSingle, Collective::kAllGather},
      {OpType::kAllGatherV, Collective::kAllGather},
      {OpType::kReduceScatter, Collective::kReduceScatter},
      {OpType::kReduceScatterSingle, Collective::kReduceScatter},
      {OpType::kReduceScatterV, Collective::kReduceScatter},
      {OpType::kAllToAll, Collective::kAllToAll},
      {OpType::kAllToAllSingle, Collective::kAllToAll},
      {OpType::kAllToAllVSingle, Collective::kAllToAll},
      {OpType::kGather, Collective::kGather},
      {OpType::kGatherSingle, Collective::kGather},
      {OpType::kScatter, Collective::kScatter},
      {OpType::kBarrier, Collective::kBarrier},
      {OpType::kSend, Collective::kP2P},
      {OpType::kRecv, Collective::kP2P},
      {OpType::kBatchP2P, Collective::kP2P},
      {OpType::kAllToAllVDynamic, Collective::kAllToAllVDynamic},
  };
  static_assert(std::size(expected) == kNumOpTypes);
  for (auto [t, c] : expected) EXPECT_EQ(collective_of(t), c) << op_type_name(t);
  EXPECT_STREQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
}

TEST(CanonicalOp, SingleFormsBecomeViewsIntoTheirBuffer) {
  std::vector<float> big(kSize * 3), small(3);
  OpDesc ag{.type = OpType::kAllGatherSingle,
            .input = make_tensor(small.data(), 3),
            .output = make_tensor(big.data(), kSize * 3)};
  lower_op(ag, 1, kSize);
  EXPECT_EQ(ag.collective, Collective::kAllGather);
  EXPECT_EQ(layout(ag.outputs, big.data()), (Layout{{0, 3}, {3, 3}, {6, 3}, {9, 3}}));
  EXPECT_TRUE(ag.outputs_one_buffer());
  EXPECT_EQ(ag.agreed_count(), 3);
  EXPECT_EQ(ag.bytes(), big.size() * sizeof(float));

  OpDesc rs{.type = OpType::kReduceScatterSingle,
            .input = make_tensor(big.data(), kSize * 3),
            .output = make_tensor(small.data(), 3)};
  lower_op(rs, 2, kSize);
  EXPECT_EQ(layout(rs.inputs, big.data()), (Layout{{0, 3}, {3, 3}, {6, 3}, {9, 3}}));
  EXPECT_TRUE(rs.inputs_one_buffer());
  EXPECT_EQ(rs.agreed_count(), 3);
  EXPECT_EQ(rs.bytes(), big.size() * sizeof(float));

  std::vector<float> out(kSize * 3);
  OpDesc a2a{.type = OpType::kAllToAllSingle,
             .input = make_tensor(big.data(), kSize * 3),
             .output = make_tensor(out.data(), kSize * 3)};
  lower_op(a2a, 0, kSize);
  EXPECT_EQ(layout(a2a.inputs, big.data()), (Layout{{0, 3}, {3, 3}, {6, 3}, {9, 3}}));
  EXPECT_EQ(layout(a2a.outputs, out.data()), (Layout{{0, 3}, {3, 3}, {6, 3}, {9, 3}}));
  EXPECT_TRUE(a2a.equal_split());
  EXPECT_EQ(a2a.agreed_count(), kSize * 3);
}

TEST(CanonicalOp, SplitsBecomeViewsAtTheirOffsets) {
  std::vector<float> in(10), out(10);
  OpDesc op{.type = OpType::kAllToAllVSingle,
            .input = make_tensor(in.data(), 10),
            .output = make_tensor(out.data(), 10),
            .inputs = split_views(make_tensor(in.data(), 10), {1, 0, 4, 2}),
            .outputs = split_views(make_tensor(out.data(), 10), {3, 3, 0, 1})};
  lower_op(op, 3, kSize);
  EXPECT_EQ(op.collective, Collective::kAllToAll);
  EXPECT_EQ(layout(op.inputs, in.data()), (Layout{{0, 1}, {1, 0}, {1, 4}, {5, 2}}));
  EXPECT_EQ(layout(op.outputs, out.data()), (Layout{{0, 3}, {3, 3}, {6, 0}, {6, 1}}));
  EXPECT_FALSE(op.equal_split());
  EXPECT_FALSE(op.inputs_one_buffer());
  EXPECT_EQ(op.agreed_count(), 0);  // per-peer counts differ between ranks
  EXPECT_EQ(op.bytes(), 7 * sizeof(float));
}

TEST(CanonicalOp, ListFormsKeepTheirViews) {
  std::vector<float> a(2), b(2), c(5), d(2), in(2);
  std::vector<Tensor> pieces{make_tensor(a.data(), 2), make_tensor(b.data(), 2),
                             make_tensor(c.data(), 5), make_tensor(d.data(), 2)};
  OpDesc v{.type = OpType::kAllGatherV, .input = make_tensor(in.data(), 2), .outputs = pieces};
  lower_op(v, 0, kSize);
  EXPECT_EQ(v.collective, Collective::kAllGather);
  EXPECT_EQ(v.outputs.size(), 4u);
  EXPECT_FALSE(v.outputs_one_buffer());
  EXPECT_EQ(v.agreed_count(), 11);  // the sum: every rank holds the whole list
  EXPECT_EQ(v.bytes(), 11 * sizeof(float));

  // A list whose pieces happen to be one buffer is one buffer.
  std::vector<float> whole(8);
  std::vector<Tensor> back;
  for (int r = 0; r < kSize; ++r) back.push_back(make_tensor(whole.data() + 2 * r, 2));
  OpDesc ag{.type = OpType::kAllGather, .input = make_tensor(in.data(), 2), .outputs = back};
  lower_op(ag, 0, kSize);
  EXPECT_TRUE(ag.outputs_one_buffer());
  std::swap(ag.outputs[1], ag.outputs[2]);
  EXPECT_FALSE(ag.outputs_one_buffer());
}

TEST(CanonicalOp, RootedViewsExistOnTheRootOnly) {
  std::vector<float> big(kSize * 2), in(2);
  OpDesc g{.type = OpType::kGatherSingle,
           .input = make_tensor(in.data(), 2),
           .output = make_tensor(big.data(), kSize * 2),
           .root = 1};
  OpDesc at_root = g, elsewhere = g;
  lower_op(at_root, 1, kSize);
  lower_op(elsewhere, 0, kSize);
  EXPECT_EQ(layout(at_root.outputs, big.data()), (Layout{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_TRUE(elsewhere.outputs.empty());
  // Both ranks agree on what the op is.
  EXPECT_EQ(at_root.agreed_count(), elsewhere.agreed_count());
  EXPECT_EQ(at_root.bytes(), elsewhere.bytes());

  std::vector<int32_t> out(2);
  std::vector<Tensor> pieces(kSize, make_tensor(out.data(), 2));
  OpDesc s{.type = OpType::kScatter, .output = make_tensor(out.data(), 2), .inputs = pieces, .root = 0};
  lower_op(s, 2, kSize);
  EXPECT_TRUE(s.inputs.empty());
  EXPECT_EQ(s.dtype(), DataType::kInt32);
  EXPECT_EQ(s.agreed_count(), 2);
}

TEST(CanonicalOp, SendAndRecvAreListsOfOne) {
  std::vector<double> x(5);
  OpDesc send{.type = OpType::kSend, .input = make_tensor(x.data(), 5), .root = 3};
  lower_op(send, 0, kSize);
  ASSERT_EQ(send.p2p.size(), 1u);
  EXPECT_TRUE(send.p2p[0].is_send);
  EXPECT_EQ(send.p2p[0].peer, 3);
  EXPECT_EQ(send.p2p[0].tensor.count, 5);
  EXPECT_EQ(send.dtype(), DataType::kFloat64);
  EXPECT_EQ(send.bytes(), 5 * sizeof(double));

  OpDesc recv{.type = OpType::kRecv, .input = make_tensor(x.data(), 5), .root = 2};
  lower_op(recv, 0, kSize);
  ASSERT_EQ(recv.p2p.size(), 1u);
  EXPECT_FALSE(recv.p2p[0].is_send);
  EXPECT_EQ(recv.p2p[0].peer, 2);
}

TEST(CanonicalOp, ReductionsReportTheReducedType) {
  std::vector<int64_t> in(8), out(2);
  OpDesc rs{.type = OpType::kReduceScatterSingle,
            .input = make_tensor(in.data(), 8),
            .output = make_tensor(out.data(), 2)};
  lower_op(rs, 0, kSize);
  EXPECT_EQ(rs.dtype(), DataType::kInt64);
  std::vector<Tensor> list;
  for (int r = 0; r < kSize; ++r) list.push_back(make_tensor(in.data() + 2 * r, 2));
  OpDesc rl{.type = OpType::kReduceScatter, .output = make_tensor(out.data(), 2), .inputs = list};
  lower_op(rl, 0, kSize);
  EXPECT_EQ(rl.dtype(), DataType::kInt64);
  EXPECT_EQ(rl.agreed_count(), rs.agreed_count());
  EXPECT_EQ(rl.bytes(), rs.bytes());
  EXPECT_TRUE(rl.inputs_one_buffer());
}
