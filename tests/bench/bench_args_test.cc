// commx-bench command line, size parsing, shapes and bus-bandwidth factors. Layer: tests.
#include <gtest/gtest.h>

#include "args.h"
#include "collective.h"
#include "commx/error.h"

using namespace commx;
using namespace commx::bench;

namespace {

Options parse(std::vector<const char*> a) {
  a.insert(a.begin(), "commx-bench");
  return parse_args(static_cast<int>(a.size()), a.data());
}

TEST(BenchArgs, Sizes) {
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("64K"), 65536u);
  EXPECT_EQ(parse_size("64k"), 65536u);
  EXPECT_EQ(parse_size("1M"), 1u << 20);
  EXPECT_EQ(parse_size("2G"), 2ull << 30);
  EXPECT_EQ(parse_size("1KiB"), 1024u);
  EXPECT_EQ(parse_size("512B"), 512u);
  EXPECT_EQ(parse_size("0.5K"), 512u);
  EXPECT_THROW(parse_size(""), Error);
  EXPECT_THROW(parse_size("12Q"), Error);
  EXPECT_THROW(parse_size("K"), Error);
  EXPECT_THROW(parse_size("-4"), Error);
  EXPECT_EQ(format_size(65536), "64K");
  EXPECT_EQ(format_size(1000), "1000");
}

TEST(BenchArgs, NcclTestsFlags) {
  Options o = parse({"all_reduce", "-b", "8", "-e", "64K", "-f", "4", "-d", "half,bf16", "-o",
                     "max", "-r", "1", "-w", "2", "-n", "7", "-c", "0"});
  ASSERT_EQ(o.colls.size(), 1u);
  EXPECT_EQ(o.colls[0], Coll::kAllReduce);
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 65536u);
  EXPECT_EQ(o.step_factor, 4.0);
  ASSERT_EQ(o.dtypes.size(), 2u);
  EXPECT_EQ(o.dtypes[0], DataType::kFloat16);
  EXPECT_EQ(o.dtypes[1], DataType::kBFloat16);
  ASSERT_EQ(o.ops.size(), 1u);
  EXPECT_EQ(o.ops[0].kind, ReduceKind::kMax);
  EXPECT_EQ(o.root, 1);
  EXPECT_EQ(o.warmup, 2);
  EXPECT_EQ(o.iters, 7);
  EXPECT_FALSE(o.check);
  ASSERT_EQ(o.backends.size(), 1u);
  EXPECT_EQ(o.backends[0].name, "cpu");
  std::vector<uint64_t> want = {8, 32, 128, 512, 2048, 8192, 32768};
  EXPECT_EQ(size_list(o), want);
}

TEST(BenchArgs, CommxFlags) {
  Options o = parse({"all", "--backend", "cpu:ring,gloo,mpi", "--np", "4", "--inplace", "1",
                     "--json=out.json", "--svg", "o.svg", "--md", "o.md", "--tune", "t.txt", "-d",
                     "all", "-o", "all"});
  EXPECT_EQ(o.colls.size(), all_colls().size());
  ASSERT_EQ(o.backends.size(), 3u);
  EXPECT_EQ(o.backends[0].name, "cpu");
  EXPECT_EQ(o.backends[0].algorithm, "ring");
  EXPECT_EQ(o.backends[0].label(), "cpu:ring");
  EXPECT_EQ(o.backends[2].label(), "mpi");
  EXPECT_EQ(o.np, 4);
  EXPECT_EQ(o.inplace, 1);
  EXPECT_EQ(o.json_path, "out.json");
  EXPECT_EQ(o.svg_path, "o.svg");
  EXPECT_EQ(o.md_path, "o.md");
  EXPECT_EQ(o.tune_path, "t.txt");
  EXPECT_EQ(o.dtypes.size(), 12u);
  EXPECT_EQ(o.ops.size(), 5u);
  Options g = parse({"allreduce_perf", "--device", "cuda:1", "--graph", "1"});
  EXPECT_EQ(g.colls[0], Coll::kAllReduce);
  EXPECT_TRUE(g.device.is_cuda());
  EXPECT_EQ(g.backends[0].name, "cuda");
  EXPECT_TRUE(g.graph);
}

TEST(BenchArgs, Errors) {
  EXPECT_THROW(parse({}), Error);
  EXPECT_THROW(parse({"nope"}), Error);
  EXPECT_THROW(parse({"all_reduce", "-b"}), Error);
  EXPECT_THROW(parse({"all_reduce", "-b", "1M", "-e", "1K"}), Error);
  EXPECT_THROW(parse({"all_reduce", "-f", "1"}), Error);
  EXPECT_THROW(parse({"all_reduce", "-n", "x"}), Error);
  EXPECT_THROW(parse({"all_reduce", "-c", "2"}), Error);
  EXPECT_THROW(parse({"all_reduce", "--bogus", "1"}), Error);
  EXPECT_THROW(parse({"all_reduce", "-d", "float7"}), Error);
  EXPECT_THROW(parse({"all_reduce", "--backend", ","}), Error);
  try {
    parse({"all_reduce", "--graph", "1"});
    FAIL() << "--graph on CPU must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos);
  }
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(BenchCollectives, BusBandwidthFactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kReduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kSendRecv, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllReduce, 1), 0.0);
}

TEST(BenchCollectives, ShapesRoundAsNcclTests) {
  Shape s = shape_for(Coll::kAllGather, 100, 4, 3);  // 25 elements -> 24 = 3 x 8
  EXPECT_EQ(s.count, 24);
  EXPECT_EQ(s.send, 8);
  EXPECT_EQ(s.recv, 24);
  EXPECT_EQ(s.bytes, 96u);
  s = shape_for(Coll::kReduceScatter, 64, 4, 4);
  EXPECT_EQ(s.send, 16);
  EXPECT_EQ(s.recv, 4);
  s = shape_for(Coll::kAllReduce, 10, 4, 4);
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.bytes, 8u);
  for (Coll c : all_colls()) EXPECT_EQ(parse_coll(coll_name(c)), c);
  EXPECT_EQ(parse_coll("alltoall"), Coll::kAllToAll);
}

}  // namespace
