// GPU tests of the cuda backend's low-precision (FP8) collectives: every result must equal, bit
// for bit, the host path (lowp_collectives.cc, run in threads over an in-process transport on
// the same inputs), for f32/bf16/f16, SUM/AVG, odd sizes, one- and two-term gathers, chunking
// through a small buffer, CUDA graph replay, 2-4 ranks; stochastic rounding must give the same
// bits on every rank; the error against float64 stays under the documented bound.
// Layer: tests (label gpu). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/gpu_check.h"
#include "lowp/inproc_transport.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_test_util.h"

namespace commx::testing {
namespace {

using lowp::CodecConfig;
using lowp::Fp8Codec;
using lowp::LowpContext;

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kAllToAll };
const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "all_reduce";
    case Coll::kReduceScatter: return "reduce_scatter_single";
    case Coll::kAllGather: return "all_gather_single";
    case Coll::kAllToAll: return "all_to_all_single";
  }
  return "?";
}

struct Case {
  Coll coll;
  DataType dtype;
  ReduceKind kind;
  int64_t n;  // all_reduce: count; others: count per rank pair
  uint64_t seed;
};

// Inputs of every rank (all_reduce: n; reduce_scatter/all_to_all: world * n; all_gather: n).
std::vector<Buf> inputs(const Case& k, int world) {
  const int64_t len = (k.coll == Coll::kAllReduce || k.coll == Coll::kAllGather) ? k.n : world * k.n;
  std::vector<Buf> in;
  for (int r = 0; r < world; ++r)
    in.push_back(make_buf(k.dtype, gen(Dist::kNormal, len, k.seed * 16 + r)));
  return in;
}

int64_t out_len(const Case& k, int world) {
  return k.coll == Coll::kReduceScatter ? k.n : (k.coll == Coll::kAllReduce ? k.n : world * k.n);
}

// What rank `me` must get: the host path on the same inputs.
Buf host_result(const Case& k, std::vector<Buf> in, int world, int me, const CodecConfig& cfg,
                bool two_term) {
  Fp8Codec codec(cfg);
  std::vector<Buf> out;
  for (int r = 0; r < world; ++r) out.emplace_back(k.dtype, out_len(k, world));
  run_ranks(world, [&](int r, Transport& t) {
    LowpContext c{t, r, world, Clock::now() + std::chrono::seconds(60), codec, nullptr, 0,
                  "[host ref] "};
    c.two_term_gather = two_term;
    Tensor i = in[r].tensor(), o = out[r].tensor();
    std::vector<Tensor> is, os;
    for (int q = 0; q < world; ++q) {
      if (k.coll != Coll::kAllGather && k.coll != Coll::kAllReduce) is.push_back(i.slice(q * k.n, k.n));
      if (k.coll == Coll::kAllGather || k.coll == Coll::kAllToAll) os.push_back(o.slice(q * k.n, k.n));
    }
    switch (k.coll) {
      case Coll::kAllReduce: return lowp::lowp_all_reduce(c, i, o, k.kind);
      case Coll::kReduceScatter: return lowp::lowp_reduce_scatter(c, is, o, k.kind);
      case Coll::kAllGather: return lowp::lowp_all_gather(c, i, os);
      case Coll::kAllToAll: return lowp::lowp_all_to_all(c, is, os);
    }
  });
  return out[me];
}

// The normal (not FP8) path on the same comm: all_reduce MAX of n f32 elements that are rank + 1
// on every rank (hints `o`), so each element must be exactly the world size.
void check_max_of_ranks(Comm& c, RankCtx& ctx, int64_t n, const OpOptions& o,
                        const std::string& what) {
  const Buf in = make_buf(DataType::kFloat32, std::vector<double>(n, ctx.rank + 1.0));
  DevBuf d(n * 4);
  to_dev(d.p, in.bytes.data(), n * 4);
  c.all_reduce(Tensor(d.p, n, DataType::kFloat32, Device::cuda(ctx.device)), ReduceOp::MAX, false, o)
      .wait_blocking();
  Buf got(DataType::kFloat32, n);
  CU(cudaMemcpy(got.bytes.data(), d.p, n * 4, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; ++i)
    RANK_CHECK(got.get(i) == static_cast<float>(ctx.world),
               what + ": element " + std::to_string(i) + " is " + std::to_string(got.get(i)) +
                   ", expected " + std::to_string(ctx.world));
}

Hints lowp_hints(const CodecConfig& cfg, bool two_term) {
  return {{"low_precision", cfg.format == lowp::Fp8Format::kE5M2 ? "fp8e5m2" : "fp8e4m3"},
          {"low_precision_min_bytes", "0"},
          {"low_precision_block", std::to_string(cfg.block)},
          {"low_precision_gather", two_term ? "fp8x2" : "fp8"},
          {"low_precision_rounding", cfg.stochastic ? "stochastic" : "nearest"},
          {"low_precision_seed", std::to_string(cfg.seed)}};
}

// Issues the case's op on device buffers (in place for all_reduce when `in_place`).
void issue(Comm& c, const Case& k, RankCtx& ctx, void* in, void* out, cudaStream_t s) {
  const Device d = Device::cuda(ctx.device);
  const int w = ctx.world;
  const ReduceOp op = k.kind == ReduceKind::kAvg ? ReduceOp::AVG : ReduceOp::SUM;
  switch (k.coll) {
    case Coll::kAllReduce:
      c.all_reduce(Tensor(in, k.n, k.dtype, d, s), op, false);
      break;
    case Coll::kReduceScatter:
      c.reduce_scatter_single(Tensor(out, k.n, k.dtype, d, s), Tensor(in, w * k.n, k.dtype, d, s),
                              op, false);
      break;
    case Coll::kAllGather:
      c.all_gather_single(Tensor(out, w * k.n, k.dtype, d, s), Tensor(in, k.n, k.dtype, d, s),
                          false);
      break;
    case Coll::kAllToAll:
      c.all_to_all_single(Tensor(out, w * k.n, k.dtype, d, s), Tensor(in, w * k.n, k.dtype, d, s),
                          false);
      break;
  }
}

// Runs the case on the GPU (eagerly, or captured once and replayed twice) and compares bits.
void check_case(Comm& c, RankCtx& ctx, const Case& k, const CodecConfig& cfg, bool two_term,
                bool graph = false) {
  const int w = ctx.world;
  auto in = inputs(k, w);
  const size_t es = dtype_size(k.dtype);
  const int64_t olen = out_len(k, w);
  DevBuf din(in[ctx.rank].n * es + 16), dout(olen * es + 16);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraphExec_t exec =
      graph ? capture_graph(s, [&] { issue(c, k, ctx, din.p, dout.p, s); }) : nullptr;
  const std::string what = std::string(coll_name(k.coll)) + " " + dtype_name(k.dtype) + " " +
                           reduce_kind_name(k.kind) + " n " + std::to_string(k.n) +
                           (two_term ? " fp8x2" : "") + (graph ? " graph" : "") + " block " +
                           std::to_string(cfg.block);
  for (int rep = 0; rep < (graph ? 2 : 1); ++rep) {
    // On the op's stream: a non-blocking stream does not wait for the legacy default stream.
    CU(cudaMemcpyAsync(din.p, in[ctx.rank].bytes.data(), in[ctx.rank].n * es,
                       cudaMemcpyHostToDevice, s));
    CU(cudaMemsetAsync(dout.p, 0xff, olen * es, s));
    if (graph)
      CU(cudaGraphLaunch(exec, s));
    else
      issue(c, k, ctx, din.p, dout.p, s);
    CU(cudaStreamSynchronize(s));
    Buf got(k.dtype, olen);
    CU(cudaMemcpy(got.bytes.data(), k.coll == Coll::kAllReduce ? din.p : dout.p, olen * es,
                  cudaMemcpyDeviceToHost));
    Buf want = host_result(k, in, w, ctx.rank, cfg, two_term);
    int64_t first = -1;
    for (int64_t i = 0; i < olen && first < 0; ++i)
      if (std::memcmp(got.bytes.data() + i * es, want.bytes.data() + i * es, es) != 0) first = i;
    RANK_CHECK(first < 0, what + ": element " + std::to_string(first) + " is " +
                              std::to_string(first >= 0 ? got.get(first) : 0) + ", host path " +
                              std::to_string(first >= 0 ? want.get(first) : 0));
    if (k.coll == Coll::kAllReduce && k.n > 1000) {
      std::vector<double> ref(k.n, 0.0);
      for (const Buf& b : in)
        for (int64_t i = 0; i < k.n; ++i) ref[i] += b.get(i);
      if (k.kind == ReduceKind::kAvg)
        for (double& v : ref) v /= w;
      double err = rel_l2(got, ref);
      // docs/low_precision.md: under 3.6e-2 in E4M3, 6.3e-2 to 7.1e-2 in E5M2 (normal data).
      const double bound = cfg.format == lowp::Fp8Format::kE5M2 ? 8e-2 : 4e-2;
      RANK_CHECK(err < bound, what + ": relative L2 error " + std::to_string(err));
    }
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
}

TEST(CudaLowp, EveryCollectiveDtypeAndKindMatchesTheHostPath) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    for (bool two : {false, true}) {
      CodecConfig cfg{lowp::Fp8Format::kE4M3, 256};
      auto c = make_comm(ctx, "cuda", std::string("lowp") + (two ? "2" : "1"), lowp_hints(cfg, two));
      uint64_t seed = 1;
      for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
        for (ReduceKind k : {ReduceKind::kSum, ReduceKind::kAvg})
          for (int64_t n : {1, 255, 4097, 300001})
            check_case(*c, ctx, {Coll::kAllReduce, t, k, n, seed++}, cfg, two);
      if (two) continue;  // the two-term gather changes all_reduce only
      for (Coll coll : {Coll::kReduceScatter, Coll::kAllGather, Coll::kAllToAll})
        for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
          for (int64_t n : {1, 1001, 70000})
            check_case(*c, ctx, {coll, t, ReduceKind::kAvg, n, seed++}, cfg, false);
    }
  });
  EXPECT_EQ(err, "");
}

TEST(CudaLowp, ChunksThroughASmallBufferE5M2AndBlock64) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    setenv("COMMX_CUDA_BUFFER_BYTES", "1M", 1);  // 1 MiB halves: many rounds
    for (CodecConfig cfg : {CodecConfig{lowp::Fp8Format::kE5M2, 256},
                            CodecConfig{lowp::Fp8Format::kE4M3, 64}}) {
      auto c = make_comm(ctx, "cuda", "lowp_small_" + std::to_string(cfg.block),
                         lowp_hints(cfg, true));
      check_case(*c, ctx, {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, 3000017, 5},
                 cfg, true);
      check_case(*c, ctx, {Coll::kAllToAll, DataType::kFloat32, ReduceKind::kSum, 700001, 6}, cfg,
                 false);
      check_case(*c, ctx, {Coll::kAllGather, DataType::kBFloat16, ReduceKind::kSum, 900001, 7},
                 cfg, false);
      check_case(*c, ctx,
                 {Coll::kReduceScatter, DataType::kFloat16, ReduceKind::kSum, 800001, 8}, cfg,
                 false);
    }
    unsetenv("COMMX_CUDA_BUFFER_BYTES");
  });
  EXPECT_EQ(err, "");
}

// With slots in the op counter's buffer half (the default), one launch runs every round of an op,
// round i on op counter epoch + i. Through 1 MiB halves (2-8 rounds): each collective captured in
// a CUDA graph and replayed, back-to-back all_reduces (350K values per rank: one round over both
// halves, where one half takes two, lowp_all_reduce_both_halves), the two-term gather (rounds of
// one half again), all bit-identical to the host path; then a two-shot all_reduce in pieces, whose
// op counters must follow on.
TEST(CudaLowp, RoundsOfALargeOpInOneLaunch) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    setenv("COMMX_CUDA_BUFFER_BYTES", "1M", 1);
    CodecConfig cfg{lowp::Fp8Format::kE4M3, 256};
    auto c = make_comm(ctx, "cuda", "lowp_rounds", lowp_hints(cfg, false));
    check_case(*c, ctx, {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, (1 << 21) + 5, 1},
               cfg, false, true);
    check_case(*c, ctx, {Coll::kReduceScatter, DataType::kFloat32, ReduceKind::kSum, 2000003, 2},
               cfg, false, true);
    check_case(*c, ctx, {Coll::kAllGather, DataType::kBFloat16, ReduceKind::kSum, 1500001, 3}, cfg,
               false, true);
    check_case(*c, ctx, {Coll::kAllToAll, DataType::kFloat16, ReduceKind::kSum, 1200003, 4}, cfg,
               false, true);
    // 3 rounds of 343808 values per owner (an odd number of pairs), then 100 pairs: the last
    // round alone would qualify for line streams, which take ops of one round only.
    check_case(*c, ctx,
               {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, 2 * (3 * 343808 + 51200),
                9},
               cfg, false);
    for (int i = 0; i < 4; ++i)
      check_case(*c, ctx,
                 {Coll::kAllReduce, DataType::kFloat32, ReduceKind::kAvg, 700001 + 64 * i,
                  10u + static_cast<uint64_t>(i)},
                 cfg, false);
    auto two = make_comm(ctx, "cuda", "lowp_rounds_x2", lowp_hints(cfg, true));
    check_case(*two, ctx, {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, 2000003, 20},
               cfg, true);
    OpOptions tree;
    tree.hints["algorithm"] = "tree";
    tree.hints["low_precision"] = "off";
    check_max_of_ranks(*c, ctx, (1 << 20) + 3, tree, "two-shot MAX after FP8 rounds");
    unsetenv("COMMX_CUDA_BUFFER_BYTES");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaLowp, GraphCaptureAndReplay) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    CodecConfig cfg{lowp::Fp8Format::kE4M3, 256};
    auto c = make_comm(ctx, "cuda", "lowp_graph", lowp_hints(cfg, false));
    // A first op outside the capture (nothing is set up lazily, but ops before a capture are the
    // common case).
    check_case(*c, ctx, {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, 1000, 1}, cfg, false);
    check_case(*c, ctx, {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, 1 << 20, 2}, cfg,
               false, true);
    check_case(*c, ctx, {Coll::kAllGather, DataType::kFloat32, ReduceKind::kSum, 4099, 3}, cfg,
               false, true);
    // The normal paths still work after low-precision ops (shared buffers and flags): the MAX of
    // every rank's number.
    check_max_of_ranks(*c, ctx, 4097, {}, "all_reduce MAX after low-precision ops");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaLowp, ThreeAndFourRanksShareGpus) {
  REQUIRE_GPUS(1);
  for (int world : {3, 4}) {
    std::string err = run_ranks(world, two_gpus(), [](RankCtx& ctx) {
      CodecConfig cfg{lowp::Fp8Format::kE4M3, 128};
      auto c = make_comm(ctx, "cuda", "lowp_world", lowp_hints(cfg, false));
      check_case(*c, ctx, {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kSum, 100003, 1}, cfg,
                 false);
      check_case(*c, ctx, {Coll::kAllReduce, DataType::kFloat32, ReduceKind::kAvg, 77, 2}, cfg,
                 false);
      check_case(*c, ctx, {Coll::kReduceScatter, DataType::kBFloat16, ReduceKind::kSum, 5003, 3},
                 cfg, false);
      check_case(*c, ctx, {Coll::kAllToAll, DataType::kFloat16, ReduceKind::kSum, 2001, 4}, cfg,
                 false);
    });
    EXPECT_EQ(err, "") << "world " << world;
  }
}

// all_reduces of one round whose every slice is whole pairs of 256-value blocks take the gather
// (and at 2 ranks P1) as LL128 line streams (lowp_lines.cuh; at 2 ranks the two-rank kernel,
// lowp_two_rank.cuh): each element type, 2 and 4 ranks, one pair per owner, a few per warp, and
// more pairs than warps (warps with one unit more than others), and captured in a graph; E5M2;
// the same ops with two terms, which keep the slots; all bit-identical to the host path.
TEST(CudaLowp, GatherAsLineStreams) {
  REQUIRE_GPUS(1);
  for (int world : {2, 4}) {
    std::string err = run_ranks(world, two_gpus(), [](RankCtx& ctx) {
      const int64_t pairs = 512 * static_cast<int64_t>(ctx.world);  // one pair per owner
      CodecConfig cfg{lowp::Fp8Format::kE4M3, 256};
      uint64_t seed = 1;
      for (bool two : {false, true}) {
        auto c = make_comm(ctx, "cuda", std::string("lowp_lines") + (two ? "2" : "1"),
                           lowp_hints(cfg, two));
        for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
          for (int64_t k : {1, 37, 2113})
            check_case(*c, ctx, {Coll::kAllReduce, t, ReduceKind::kSum, k * pairs, seed++}, cfg,
                       two);
        check_case(*c, ctx,
                   {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kAvg, 2113 * pairs, seed++},
                   cfg, two, true);
      }
      const CodecConfig e5{lowp::Fp8Format::kE5M2, 256};
      auto c5 = make_comm(ctx, "cuda", "lowp_lines_e5m2", lowp_hints(e5, false));
      check_case(*c5, ctx,
                 {Coll::kAllReduce, DataType::kFloat16, ReduceKind::kAvg, 37 * pairs, seed++}, e5,
                 false);
    });
    EXPECT_EQ(err, "") << "world " << world;
  }
}

// The two-rank kernel takes an op of more units a warp than a round holds in several rounds of
// one launch (lowp_two_rank.cuh). With two units a warp a round (COMMX_CUDA_LOWP_LINE_UNITS=2)
// and 16 warps a block on up to 132 SMs, slices of 5000 and 13000 pairs are 2 and 4 rounds (on
// fewer SMs, more), 3001 pairs one; each element type, AVG captured in a graph, the normal paths
// after them; all bit-identical to the host path.
TEST(CudaLowp, TwoRankKernelRounds) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    setenv("COMMX_CUDA_LOWP_LINE_UNITS", "2", 1);
    CodecConfig cfg{lowp::Fp8Format::kE4M3, 256};
    auto c = make_comm(ctx, "cuda", "lowp_two_rank_rounds", lowp_hints(cfg, false));
    uint64_t seed = 1;
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
      for (int64_t pairs : {5000, 13000})
        check_case(*c, ctx, {Coll::kAllReduce, t, ReduceKind::kSum, 2 * 512 * pairs, seed++}, cfg,
                   false);
    check_case(*c, ctx,
               {Coll::kAllReduce, DataType::kBFloat16, ReduceKind::kAvg, 2 * 512 * 13000, seed++},
               cfg, false, true);
    check_max_of_ranks(*c, ctx, 4097, {}, "all_reduce MAX after two-rank rounds");
    check_case(*c, ctx,
               {Coll::kAllReduce, DataType::kFloat32, ReduceKind::kSum, 2 * 512 * 3001, seed++},
               cfg, false);
    unsetenv("COMMX_CUDA_LOWP_LINE_UNITS");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaLowp, StochasticRoundingIsBitIdenticalAcrossRanks) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    CodecConfig cfg{lowp::Fp8Format::kE4M3, 256, true, 1234};
    auto c = make_comm(ctx, "cuda", "lowp_sr", lowp_hints(cfg, false));
    for (int64_t n : {200003, 2 * 512 * 197}) {  // the second: the gather as line streams
      auto v = gen(Dist::kNormal, n, 99 + ctx.rank);
      Buf in = make_buf(DataType::kBFloat16, v);
      DevBuf d(n * 2);
      CU(cudaMemcpy(d.p, in.bytes.data(), n * 2, cudaMemcpyHostToDevice));
      c->all_reduce(Tensor(d.p, n, DataType::kBFloat16, Device::cuda(ctx.device)), ReduceOp::SUM)
          .wait_blocking();
      Buf got(DataType::kBFloat16, n);
      CU(cudaMemcpy(got.bytes.data(), d.p, n * 2, cudaMemcpyDeviceToHost));
      const std::string key = "sr/" + std::to_string(n) + "/";
      ctx.store->set(key + std::to_string(ctx.rank),
                     Bytes(got.bytes.begin(), got.bytes.begin() + n * 2));
      for (int r = 0; r < ctx.world; ++r) {
        Bytes other = ctx.store->get(key + std::to_string(r));
        RANK_CHECK(std::memcmp(other.data(), got.bytes.data(), n * 2) == 0,
                   "stochastic rounding: rank " + std::to_string(r) + " got other bits");
      }
      std::vector<double> ref(n, 0.0);
      for (int r = 0; r < ctx.world; ++r) {
        Buf b = make_buf(DataType::kBFloat16, gen(Dist::kNormal, n, 99 + r));
        for (int64_t i = 0; i < n; ++i) ref[i] += b.get(i);
      }
      double e = rel_l2(got, ref);
      // Stochastic rounding is unbiased but noisier than round-to-nearest (about 1.3x the error).
      RANK_CHECK(e < 6e-2, "stochastic rounding error " + std::to_string(e));
    }
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace commx::testing
