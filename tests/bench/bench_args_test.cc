// commx-bench command line, size parsing, shapes and bus-bandwidth factors. Layer: tests.
#include <gtest/gtest.h>

#include <sstream>

#include "args.h"
#include "collective.h"
#include "commx/error.h"
#include "header.h"

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
  EXPECT_TRUE(o.comm_hints.empty());
  Options h = parse({"all_reduce", "--comm-hint", "transport=tcp", "--comm-hint", "a=b=c"});
  ASSERT_EQ(h.comm_hints.size(), 2u);
  EXPECT_EQ(h.comm_hints[0], (std::pair<std::string, std::string>{"transport", "tcp"}));
  EXPECT_EQ(h.comm_hints[1], (std::pair<std::string, std::string>{"a", "b=c"}));
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
  EXPECT_THROW(parse({"all_reduce", "--comm-hint", "transport"}), Error);
  EXPECT_THROW(parse({"all_reduce", "--comm-hint", "=tcp"}), Error);
  try {
    parse({"all_reduce", "--graph", "1"});
    FAIL() << "--graph on CPU must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos);
  }
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(BenchArgs, RemainingNcclTestsFlags) {
  Options d = parse({"all_reduce"});
  EXPECT_EQ(d.agg_iters, 0);
  EXPECT_EQ(d.average, Options::Average::kMax);
  EXPECT_FALSE(d.blocking);
  EXPECT_EQ(d.cycles, 1);
  Options o = parse({"all_reduce", "-t", "1", "-g", "1", "-a", "1", "-m", "4", "-z", "1", "-T",
                     "30", "-N", "3", "-o", "mulsum", "-G", "0"});
  EXPECT_EQ(o.nthreads, 1);
  EXPECT_EQ(o.ngpus, 1);
  EXPECT_EQ(o.average, Options::Average::kMean);
  EXPECT_EQ(o.agg_iters, 4);
  EXPECT_TRUE(o.blocking);
  EXPECT_EQ(o.timeout_s, 30);
  EXPECT_EQ(o.cycles, 3);
  ASSERT_EQ(o.ops.size(), 1u);
  EXPECT_EQ(o.ops[0].kind, ReduceKind::kPremulSum);
  EXPECT_FALSE(o.graph);
  Options l = parse({"all_reduce", "--nthreads", "1", "--ngpus=1", "--average=2", "--agg_iters",
                     "2", "--blocking", "0", "--run_cycles", "0", "--timeout=5", "--op",
                     "sum,mulsum:0.25", "--minbytes", "1K", "--maxbytes=4K", "--stepbytes",
                     "1K", "--datatype", "int32", "--warmup_iters", "0", "--iters", "3",
                     "--check", "0", "--root", "1"});
  EXPECT_EQ(l.average, Options::Average::kMin);
  EXPECT_EQ(l.agg_iters, 2);
  EXPECT_EQ(l.cycles, 0);
  EXPECT_EQ(l.timeout_s, 5);
  ASSERT_EQ(l.ops.size(), 2u);
  EXPECT_EQ(l.ops[1].kind, ReduceKind::kPremulSum);
  EXPECT_EQ(size_list(l), (std::vector<uint64_t>{1024, 2048, 3072, 4096}));
  EXPECT_EQ(l.dtypes[0], DataType::kInt32);
  EXPECT_EQ(l.warmup, 0);
  EXPECT_EQ(l.iters, 3);
  EXPECT_FALSE(l.check);
  EXPECT_EQ(l.root, 1);
  Options a3 = parse({"all_reduce", "-a", "3"});
  EXPECT_EQ(a3.average, Options::Average::kMax);
  Options a0 = parse({"all_reduce", "-a", "0"});
  EXPECT_EQ(a0.average, Options::Average::kRank0);
  Options g = parse({"all_reduce", "--device", "cuda", "-G", "10"});
  EXPECT_TRUE(g.graph);
  EXPECT_EQ(g.graph_launches, 10);
  Options png = parse({"all_reduce", "--svg", "a.svg", "--png", "b.png"});
  EXPECT_EQ(png.png_path, "b.png");
}

std::string error_of(std::vector<const char*> a) {
  try {
    parse(std::move(a));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BenchArgs, RemainingNcclTestsFlagErrorsSayWhy) {
  EXPECT_NE(error_of({"all_reduce", "-t", "2"}).find("one rank per process"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-g", "8"}).find("one device per rank"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-a", "4"}).find("-a must be in [0, 3]"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-m", "-1"}).find("-m must be in"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-z", "2"}).find("-z must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-N", "x"}).find("-N expects an integer"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-T", "0"}).find("-T must be in"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-o", "mulsumx"}).find("mulsumx"), std::string::npos);
  for (const char* f : {"-p", "-y", "-k", "-l", "-C", "-O", "-u", "-B", "-F", "-L", "-s", "-S",
                        "-P", "-R", "-A", "--local_register"})
    EXPECT_NE(error_of({"all_reduce", f, "1"}).find(std::string("nccl-tests flag ") + f +
                                                    " is not supported by commx-bench"),
              std::string::npos)
        << f;
  EXPECT_NE(error_of({"all_reduce", "-Q", "1"}).find("unknown flag '-Q'"), std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "--png", "x.png"}).find("--png needs --svg"),
            std::string::npos);
  EXPECT_NE(error_of({"all_reduce", "-G", "1"}).find("-G needs --device cuda"), std::string::npos);
}

TEST(BenchHeader, ParameterLineAsNcclTests) {
  EXPECT_EQ(nccl_tests_parameter_line(parse({"all_reduce"})),
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 33554432 step: 2(factor) warmup iters: 5 "
            "iters: 20 agg iters: 0 validation: 1 graph: 0");
  EXPECT_EQ(nccl_tests_parameter_line(parse({"all_reduce", "-b", "1K", "-e", "8K", "-i", "1K",
                                             "-w", "1", "-n", "3", "-m", "2", "-c", "0",
                                             "--device", "cuda", "-G", "4"})),
            "# nThread 1 nGpus 1 minBytes 1024 maxBytes 8192 step: 1024(bytes) warmup iters: 1 "
            "iters: 3 agg iters: 2 validation: 0 graph: 4");
  EXPECT_EQ(nccl_tests_parameter_line(parse({"all_reduce", "-f", "1.5"})).find("step: 1.5(factor)")
                != std::string::npos,
            true);
}

TEST(BenchHeader, UsingDevicesBlock) {
  EXPECT_EQ(device_line(3, 0, 4242, "node7", "cpu [cpus 0-3] Some CPU"),
            "#  Rank  3 Group  0 Pid   4242 on      node7 device cpu [cpus 0-3] Some CPU");
  EXPECT_EQ(device_line(12, 1, 7, "h", " 1 [0x1b] NVIDIA H100"),
            "#  Rank 12 Group  1 Pid      7 on          h device  1 [0x1b] NVIDIA H100");
  std::string cpu = this_device(Device::cpu());
  EXPECT_EQ(cpu.rfind("cpu [cpus ", 0), 0u) << cpu;
  std::ostringstream os;
  Options o = parse({"all_reduce", "-z", "1"});
  print_run_header(os, o, {"#  Rank  0 a", "#  Rank  1 b"});
  EXPECT_EQ(os.str(), nccl_tests_parameter_line(o) +
                          "\n# Blocking Enabled: wait for completion after each collective\n#\n"
                          "# Using devices\n#  Rank  0 a\n#  Rank  1 b\n");
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
