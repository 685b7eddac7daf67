// GPU tests of the hierarchical path with low precision on: the inter-host step of all_reduce and
// reduce_scatter moves FP8 (the steps within a host stay exact). On one machine with a forced
// host boundary (hint ranks_per_host): 2 hosts of 1 rank (2 GPUs), and 2 hosts of 2 ranks
// sharing a GPU each. Every result must equal, bit for bit, the host path's FP8 collective
// (lowp_collectives.cc, over an in-process transport) run among the hosts on the hosts' exact
// partial sums; one- and two-term gathers, odd sizes, AVG, graph capture and replay. Needs 2 GPUs
// and NCCL, else skips. Layer: tests (label gpu).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/gpu_check.h"
#include "cuda/host_layout.h"
#include "lowp/inproc_transport.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_test_util.h"

namespace commx::testing {
namespace {

using lowp::CodecConfig;

#define REQUIRE_HIER()                                                                         \
  do {                                                                                         \
    if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();                \
    if (!nccl_loadable()) GTEST_SKIP() << "libnccl.so.2 not loadable (set COMMX_NCCL_LIBRARY)"; \
  } while (0)

Hints hier_lowp_hints(int ranks_per_host, bool two_term) {
  return {{"ranks_per_host", std::to_string(ranks_per_host)},
          {"low_precision", "fp8e4m3"},
          {"low_precision_min_bytes", "0"},
          {"low_precision_gather", two_term ? "fp8x2" : "fp8"}};
}

// The host path's FP8 collective among `ins.size()` hosts: all_reduce (ins of one count) or
// reduce_scatter (ins of hosts * n, out n). Returns every host's output.
std::vector<Buf> host_lowp(bool all_reduce, std::vector<Buf> ins, int64_t n, bool two_term) {
  const int hosts = static_cast<int>(ins.size());
  lowp::Fp8Codec codec(CodecConfig{lowp::Fp8Format::kE4M3, 256});
  std::vector<Buf> out;
  for (int h = 0; h < hosts; ++h) out.emplace_back(ins[0].dtype, n);
  run_ranks(hosts, [&](int h, Transport& t) {
    lowp::LowpContext c{t, h, hosts, Clock::now() + std::chrono::seconds(60), codec, nullptr, 0,
                        "[host ref] "};
    c.two_term_gather = two_term;
    if (all_reduce) return lowp::lowp_all_reduce(c, ins[h].tensor(), out[h].tensor(), ReduceKind::kSum);
    std::vector<Tensor> parts;
    for (int p = 0; p < hosts; ++p) parts.push_back(ins[h].tensor().slice(p * n, n));
    lowp::lowp_reduce_scatter(c, parts, out[h].tensor(), ReduceKind::kSum);
  });
  return out;
}

// Every rank's input (count elements), seeded per rank.
std::vector<Buf> rank_inputs(DataType t, int64_t count, int world, uint64_t seed) {
  std::vector<Buf> in;
  for (int r = 0; r < world; ++r) in.push_back(make_buf(t, gen(Dist::kNormal, count, seed * 16 + r)));
  return in;
}

// Host h's exact partial sum (FP32, local rank order, rounded once) of elements [at, at + len)
// of its local ranks' inputs, times `scale` (a power of two: exact).
Buf partial(const std::vector<Buf>& in, int h, int local, int64_t at, int64_t len, float scale) {
  Buf p(in[0].dtype, len);
  for (int64_t i = 0; i < len; ++i) {
    float acc = 0.0f;
    for (int q = 0; q < local; ++q) acc += in[h * local + q].get(at + i);
    p.set(i, acc * scale);
  }
  return p;
}

// What rank `me` must get from an all_reduce: per local shard (the path's plan_shards), the host
// path among the hosts on that shard of their partials.
Buf all_reduce_ref(const std::vector<Buf>& in, int hosts, int local, float scale, bool two_term) {
  const int64_t n = in[0].n;
  const cuda::ShardPlan plan = cuda::plan_shards(n, static_cast<int64_t>(dtype_size(in[0].dtype)), local);
  Buf ref(in[0].dtype, n);
  for (int q = 0; q < local; ++q) {
    const int64_t at = plan.begin(q), len = plan.owned(q, local);
    if (len == 0) continue;
    std::vector<Buf> parts;
    for (int h = 0; h < hosts; ++h) parts.push_back(partial(in, h, local, at, len, scale));
    Buf got = host_lowp(true, parts, len, two_term)[0];
    std::memcpy(ref.bytes.data() + at * dtype_size(ref.dtype), got.bytes.data(),
                len * dtype_size(ref.dtype));
  }
  return ref;
}

// What rank (host, q) must get from a reduce_scatter of n per rank: the host path's
// reduce_scatter among the hosts, host g's input holding, for every destination host h', its
// partial of rank (h', q)'s block.
Buf reduce_scatter_ref(const std::vector<Buf>& in, int hosts, int local, int64_t n, int me) {
  const int host = me / local, q = me % local;
  std::vector<Buf> parts;
  for (int g = 0; g < hosts; ++g) {
    Buf p(in[0].dtype, hosts * n);
    for (int h2 = 0; h2 < hosts; ++h2) {
      Buf b = partial(in, g, local, (h2 * local + q) * n, n, 1.0f);
      std::memcpy(p.bytes.data() + h2 * n * dtype_size(p.dtype), b.bytes.data(),
                  n * dtype_size(p.dtype));
    }
    parts.push_back(std::move(p));
  }
  return host_lowp(false, parts, n, false)[host];
}

void expect_bits(const Buf& got, const Buf& want, const std::string& what) {
  const size_t es = dtype_size(got.dtype);
  int64_t first = -1;
  for (int64_t i = 0; i < got.n && first < 0; ++i)
    if (std::memcmp(got.bytes.data() + i * es, want.bytes.data() + i * es, es) != 0) first = i;
  RANK_CHECK(first < 0, what + ": element " + std::to_string(first) + " is " +
                            std::to_string(first >= 0 ? got.get(first) : 0) + ", reference " +
                            std::to_string(first >= 0 ? want.get(first) : 0));
}

Buf from_device(const void* p, DataType t, int64_t n) {
  Buf b(t, n);
  CU(cudaMemcpy(b.bytes.data(), p, n * dtype_size(t), cudaMemcpyDeviceToHost));
  return b;
}

// all_reduce in place, eagerly (or captured once and replayed with new inputs each time).
void check_all_reduce(Comm& c, RankCtx& ctx, int local, DataType t, ReduceOp op, int64_t n,
                      uint64_t seed, bool two_term, bool graph = false) {
  const int hosts = ctx.world / local;
  const size_t es = dtype_size(t);
  const float scale = op.kind == ReduceKind::kAvg ? 1.0f / static_cast<float>(ctx.world) : 1.0f;
  const Device dev = Device::cuda(ctx.device);
  DevBuf buf(n * es + 16);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraphExec_t exec =
      graph ? capture_graph(s, [&] { c.all_reduce(Tensor(buf.p, n, t, dev, s), op, false); })
            : nullptr;
  for (int rep = 0; rep < (graph ? 2 : 1); ++rep) {
    auto in = rank_inputs(t, n, ctx.world, seed + 1000 * rep);
    CU(cudaMemcpyAsync(buf.p, in[ctx.rank].bytes.data(), n * es, cudaMemcpyHostToDevice, s));
    if (graph)
      CU(cudaGraphLaunch(exec, s));
    else
      c.all_reduce(Tensor(buf.p, n, t, dev, s), op, false);
    CU(cudaStreamSynchronize(s));
    const std::string what = std::string("all_reduce ") + dtype_name(t) + " " +
                             reduce_kind_name(op.kind) + " n " + std::to_string(n) +
                             (two_term ? " fp8x2" : " fp8") + (graph ? " graph" : "");
    expect_bits(from_device(buf.p, t, n), all_reduce_ref(in, hosts, local, scale, two_term), what);
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
}

void check_reduce_scatter(Comm& c, RankCtx& ctx, int local, DataType t, int64_t n, uint64_t seed) {
  const int hosts = ctx.world / local;
  const size_t es = dtype_size(t);
  const Device dev = Device::cuda(ctx.device);
  auto in = rank_inputs(t, ctx.world * n, ctx.world, seed);
  DevBuf din(ctx.world * n * es + 16), dout(n * es + 16);
  to_dev(din.p, in[ctx.rank].bytes);
  const Buf want = reduce_scatter_ref(in, hosts, local, n, ctx.rank);
  const std::string what = std::string(dtype_name(t)) + " n " + std::to_string(n);
  c.reduce_scatter_single(Tensor(dout.p, n, t, dev), Tensor(din.p, ctx.world * n, t, dev),
                          ReduceOp::SUM)
      .wait_blocking();
  expect_bits(from_device(dout.p, t, n), want, "reduce_scatter_single " + what);
  // The list form (its lowered op has per-rank inputs and no single input tensor).
  std::vector<Tensor> ins;
  for (int r = 0; r < ctx.world; ++r) ins.emplace_back(din.c() + r * n * es, n, t, dev);
  CU(cudaMemset(dout.p, 0, n * es));
  c.reduce_scatter(Tensor(dout.p, n, t, dev), ins, ReduceOp::SUM).wait_blocking();
  expect_bits(from_device(dout.p, t, n), want, "reduce_scatter (list) " + what);
}

TEST(CudaHierLowp, TwoHostsOfOneRank) {
  REQUIRE_HIER();
  std::string err = run_ranks(2, 2, [](RankCtx& ctx) {
    uint64_t seed = 1;
    for (bool two : {false, true}) {
      auto c = make_comm(ctx, "cuda", two ? "hlp1x2" : "hlp1", hier_lowp_hints(1, two));
      for (DataType t : {DataType::kFloat32, DataType::kBFloat16})
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG})
          for (int64_t n : {1, 7, 1001, 65541, 300001})
            check_all_reduce(*c, ctx, 1, t, op, n, seed++, two);
      check_all_reduce(*c, ctx, 1, DataType::kFloat32, ReduceOp::SUM, 65541, seed++, two, true);
      if (two) continue;  // the two-term gather changes all_reduce only
      for (DataType t : {DataType::kFloat32, DataType::kBFloat16})
        for (int64_t n : {1, 1001, 70001}) check_reduce_scatter(*c, ctx, 1, t, n, seed++);
    }
  }, std::chrono::seconds(240));
  EXPECT_EQ(err, "");
}

TEST(CudaHierLowp, TwoHostsOfTwoRanksSharingAGpu) {
  REQUIRE_HIER();
  std::string err = run_ranks(4, 2, [](RankCtx& ctx) {
    uint64_t seed = 100;
    for (bool two : {false, true}) {
      auto c = make_comm(ctx, "cuda", two ? "hlp2x2" : "hlp2", hier_lowp_hints(2, two));
      for (int64_t n : {7, 1001, 65541, 300001})
        check_all_reduce(*c, ctx, 2, DataType::kFloat32, ReduceOp::SUM, n, seed++, two);
      check_all_reduce(*c, ctx, 2, DataType::kFloat32, ReduceOp::SUM, 65541, seed++, two, true);
      if (two) continue;
      for (int64_t n : {1001, 70001}) check_reduce_scatter(*c, ctx, 2, DataType::kFloat32, n, seed++);
    }
  }, std::chrono::seconds(240), 2);
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace commx::testing
