// GPU tests of the cuda backend's hierarchical (multi-host) all_reduce, all_gather and
// reduce_scatter on one machine with a forced host boundary (comm hint ranks_per_host, the
// COMMX_CUDA_RANKS_PER_HOST option): 2 ranks on 2 GPUs as 2 hosts of 1 rank, and 4 ranks on 2
// GPUs as 2 hosts of 2 ranks sharing one GPU (rank r on GPU r / 2, so each inter-host NCCL comm
// spans both GPUs). Every dtype and reduction against the reference of the C++ tests
// (conformance/reference.h, through collective_checks.h), odd sizes, unaligned
// buffers, chunking, bit-identical results across ranks, graph capture + replay, async ops,
// in-place all_gather. Needs 2 GPUs and NCCL, else skips. Layer: tests (label gpu).
#include <gtest/gtest.h>

#include "cuda/collective_checks.h"

namespace commx::testing {
namespace {

#define REQUIRE_HIER()                                                                         \
  do {                                                                                         \
    if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();                \
    if (!nccl_loadable()) GTEST_SKIP() << "libnccl.so.2 not loadable (set COMMX_NCCL_LIBRARY)"; \
  } while (0)

// Every dtype and reduction the path claims, sizes around the shard and tail boundaries.
void check_every_dtype_op(Comm& c, RankCtx& ctx, uint64_t& seed) {
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                            DataType::kFloat64, DataType::kInt32,    DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                          ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::premul_sum(0.5)};
  for (DataType t : types)
    for (ReduceOp op : ops) {
      if (!dtype_is_floating(t) && (op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum))
        continue;
      for (int64_t n : {0, 1, 7, 8, 33, 1001, 65541}) check_allreduce(c, ctx, t, op, n, seed++);
    }
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16})
    for (ReduceOp op : ops) check_allreduce(c, ctx, t, op, 1000003, seed++);
  // Unaligned user buffers (element offset 1).
  for (int64_t n : {7, 1001, 100003}) check_allreduce(c, ctx, DataType::kFloat32, ReduceOp::SUM, n, seed++, {}, 1);
  // Bit-identical results on every rank.
  for (int64_t n : {7, 1000003}) {
    auto bytes = check_allreduce(c, ctx, DataType::kFloat32, ReduceOp::SUM, n, 999 + n);
    std::string key = "hier_bits_" + std::to_string(n);
    if (ctx.rank == 0) ctx.store->set(key, bytes);
    RANK_CHECK(ctx.store->get(key) == bytes, "results differ between ranks, n=" + std::to_string(n));
  }
}

// all_gather_single (also in place: the input is this rank's slice of the output) and the list
// all_gather (some outputs unaligned) against the ranks' inputs.
void check_all_gather(Comm& c, RankCtx& ctx, uint64_t seed) {
  const int W = ctx.world, me = ctx.rank;
  const Device dev = Device::cuda(ctx.device);
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16})
    for (int64_t n : {0, 1, 7, 1001, 65541, 300001}) {
      const size_t es = dtype_size(t), un = static_cast<size_t>(n);
      const std::string sz = std::string(" ") + dtype_name(t) + " n=" + std::to_string(n);
      const std::vector<Buf> all = gen_all(seed++, W, un, t, ReduceKind::kSum);
      const Buf ref = gathered(all, un, t);
      DevBuf in(n * es), out(W * n * es);
      upload(in.p, all[me], un, t);
      c.all_gather_single(Tensor(out.p, W * n, t, dev), Tensor(in.p, n, t, dev)).wait_blocking();
      expect_device(ref, out.p, W * un, t, "all_gather_single" + sz);
      CU(cudaMemset(out.p, 0, W * n * es));
      upload(out.c() + me * n * es, all[me], un, t);
      c.all_gather_single(Tensor(out.p, W * n, t, dev), Tensor(out.c() + me * n * es, n, t, dev))
          .wait_blocking();
      expect_device(ref, out.p, W * un, t, "in-place all_gather_single" + sz);
      std::vector<std::unique_ptr<DevBuf>> outs;
      std::vector<Tensor> ts;
      for (int r = 0; r < W; ++r) {
        outs.push_back(std::make_unique<DevBuf>(n * es + 16));
        ts.emplace_back(outs.back()->c() + es * (r % 2), n, t, dev);
      }
      c.all_gather(ts, Tensor(in.p, n, t, dev)).wait_blocking();
      for (int r = 0; r < W; ++r)
        expect_device(all[r], ts[r].data, un, t, "all_gather[" + std::to_string(r) + "]" + sz);
    }
}

// reduce_scatter_single and the list form (odd offsets: unaligned inputs) for every dtype and
// reduction against the reference.
void check_reduce_scatter(Comm& c, RankCtx& ctx, uint64_t seed) {
  const int W = ctx.world, me = ctx.rank;
  const Device dev = Device::cuda(ctx.device);
  const ReduceOp ops[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                          ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::premul_sum(0.5)};
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64, DataType::kInt32})
    for (ReduceOp op : ops) {
      if (!dtype_is_floating(t) && (op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum))
        continue;
      for (int64_t n : {0, 1, 7, 1001, 65541}) {
        const size_t es = dtype_size(t), un = static_cast<size_t>(n);
        const std::string what = std::string(dtype_name(t)) + " " + reduce_kind_name(op.kind) +
                                 " n=" + std::to_string(n);
        const std::vector<Buf> all = gen_all(seed++, W, W * un, t, op.kind);
        const Buf ref = reduced(all, me * un, un, t, op);
        DevBuf in(W * n * es), out(n * es + 16);
        upload(in.p, all[me], W * un, t);
        c.reduce_scatter_single(Tensor(out.p, n, t, dev), Tensor(in.p, W * n, t, dev), op)
            .wait_blocking();
        expect_device(ref, out.p, un, t, "reduce_scatter_single " + what, op);
        std::vector<std::unique_ptr<DevBuf>> ins;
        std::vector<Tensor> ts;
        for (int r = 0; r < W; ++r) {
          ins.push_back(std::make_unique<DevBuf>(n * es + 16));
          char* p = ins.back()->c() + es * (r % 2);
          upload(p, piece(all[me], r * un, un, t), un, t);
          ts.emplace_back(p, n, t, dev);
        }
        CU(cudaMemset(out.p, 0, n * es + 16));
        c.reduce_scatter(Tensor(out.c() + es, n, t, dev), ts, op).wait_blocking();
        expect_device(ref, out.c() + es, un, t, "reduce_scatter (list, unaligned) " + what, op);
      }
    }
}

// reduce_scatter_single captured into a graph (the first one of the comm: its scratch buffer is
// a graph allocation) and replayed; then eager again.
void check_graph_reduce_scatter(Comm& c, RankCtx& ctx) {
  const Device dev = Device::cuda(ctx.device);
  const DataType t = DataType::kFloat32;
  const int W = ctx.world, me = ctx.rank;
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int64_t n : {5, 4099}) {
    const size_t un = static_cast<size_t>(n);
    DevBuf in(W * n * 4), out(n * 4);
    cudaGraph_t graph;
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    c.reduce_scatter_single(Tensor(out.p, n, t, dev, s), Tensor(in.p, W * n, t, dev, s),
                            ReduceOp::AVG);
    CU(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CU(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      const std::vector<Buf> all = gen_all(400 + rep, W, W * un, t, ReduceKind::kAvg);
      upload(in.p, all[me], W * un, t);
      CU(cudaGraphLaunch(exec, s));
      CU(cudaStreamSynchronize(s));
      expect_device(reduced(all, me * un, un, t, ReduceOp::AVG), out.p, un, t,
                    "graph reduce_scatter avg n=" + std::to_string(n) + " replay " +
                        std::to_string(rep),
                    ReduceOp::AVG);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(s);
}

// Captures all_reduces (aligned, odd-sized, avg) into a graph and replays it on fresh data.
void check_graph(Comm& c, RankCtx& ctx) {
  const Device dev = Device::cuda(ctx.device);
  const DataType t = DataType::kFloat32;
  const int W = ctx.world;
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t n1 = 4096, n2 = 100003, n3 = 5;
  DevBuf a(n1 * 4), b(n2 * 4), d(n3 * 4), g(W * n3 * 4);
  c.all_reduce(Tensor(a.p, n1, t, dev, s), ReduceOp::SUM).wait_blocking();  // warm-up
  cudaGraph_t graph;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  c.all_reduce(Tensor(a.p, n1, t, dev, s), ReduceOp::SUM);
  c.all_reduce(Tensor(b.p, n2, t, dev, s), ReduceOp::AVG);
  c.all_reduce(Tensor(d.p, n3, t, dev, s), ReduceOp::MAX);
  c.all_gather_single(Tensor(g.p, W * n3, t, dev, s), Tensor(d.p, n3, t, dev, s));
  CU(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<Buf> va = gen_all(100 + rep, W, n1, t, ReduceKind::kSum);
    const std::vector<Buf> vb = gen_all(200 + rep, W, n2, t, ReduceKind::kAvg);
    const std::vector<Buf> vd = gen_all(300 + rep, W, n3, t, ReduceKind::kMax);
    upload(a.p, va[ctx.rank], n1, t);
    upload(b.p, vb[ctx.rank], n2, t);
    upload(d.p, vd[ctx.rank], n3, t);
    CU(cudaGraphLaunch(exec, s));
    CU(cudaStreamSynchronize(s));
    const std::string replay = " replay " + std::to_string(rep);
    expect_device(reduced(va, 0, n1, t, ReduceOp::SUM), a.p, n1, t, "graph sum" + replay);
    expect_device(reduced(vb, 0, n2, t, ReduceOp::AVG), b.p, n2, t, "graph avg (odd size)" + replay,
                  ReduceOp::AVG);
    const Buf max = reduced(vd, 0, n3, t, ReduceOp::MAX);
    expect_device(max, d.p, n3, t, "graph max (tail only)" + replay);
    // The all_gather captured after the max: every rank's block is the max.
    expect_device(gathered(std::vector<Buf>(W, max), n3, t), g.p, W * n3, t,
                  "graph all_gather" + replay);
  }
  check_allreduce(c, ctx, t, ReduceOp::SUM, 4097, 77);  // eager ops after the replays
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

void check_async(Comm& c, RankCtx& ctx) {
  const Device dev = Device::cuda(ctx.device);
  const DataType t = DataType::kBFloat16;
  const int64_t n = 50001;
  const std::vector<Buf> v = gen_all(3, ctx.world, n, t, ReduceKind::kSum);
  DevBuf a(n * 2);
  upload(a.p, v[ctx.rank], n, t);
  Work w = c.all_reduce(Tensor(a.p, n, t, dev), ReduceOp::SUM, true);
  w.wait_blocking();
  RANK_CHECK(w.status() == WorkStatus::kCompleted, "async all_reduce not completed");
  expect_device(reduced(v, 0, n, t, ReduceOp::SUM), a.p, n, t, "async hierarchical all_reduce");
}

TEST(CudaHier, ReduceScatter) {
  REQUIRE_HIER();
  std::string err = run_ranks(2, 2, [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "hier_rs1", {{"ranks_per_host", "1"}});
    check_reduce_scatter(*c, ctx, 1000);
    // A fresh comm: its first reduce_scatter is captured (scratch from a graph allocation).
    auto g = make_comm(ctx, "cuda", "hier_rs1_graph", {{"ranks_per_host", "1"}});
    check_graph_reduce_scatter(*g, ctx);
  }, std::chrono::seconds(120));
  EXPECT_EQ(err, "") << "2 hosts x 1 rank";
  err = run_ranks(4, 2, [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "hier_rs2", {{"ranks_per_host", "2"}});
    check_reduce_scatter(*c, ctx, 2000);
    // A fresh comm: its first reduce_scatter is captured (scratch from a graph allocation).
    auto g = make_comm(ctx, "cuda", "hier_rs2_graph", {{"ranks_per_host", "2"}});
    check_graph_reduce_scatter(*g, ctx);
    auto small = make_comm(ctx, "cuda", "hier_rs2_small",
                           {{"ranks_per_host", "2"}, {"buffer_bytes", "1M"}});
    check_reduce_scatter(*small, ctx, 3000);
  }, std::chrono::seconds(180), 2);
  EXPECT_EQ(err, "") << "2 hosts x 2 ranks";
}

TEST(CudaHier, TwoHostsOfOneRank) {
  REQUIRE_HIER();
  std::string err = run_ranks(2, 2, [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "hier1", {{"ranks_per_host", "1"}});
    uint64_t seed = 1;
    check_every_dtype_op(*c, ctx, seed);
    check_graph(*c, ctx);
    check_async(*c, ctx);
    check_all_gather(*c, ctx, 800);
    // Other ops go to the full-comm NCCL delegate.
    check_collectives(*c, ctx, 1001, 700, true);
  }, std::chrono::seconds(180));
  EXPECT_EQ(err, "");
}

TEST(CudaHier, TwoHostsOfTwoRanksSharingAGpu) {
  REQUIRE_HIER();
  std::string err = run_ranks(4, 2, [](RankCtx& ctx) {
    // The option as users set it (the hint is the same option).
    setenv("COMMX_CUDA_RANKS_PER_HOST", "2", 1);
    auto c = make_comm(ctx, "cuda", "hier2");
    uint64_t seed = 1;
    check_every_dtype_op(*c, ctx, seed);
    check_graph(*c, ctx);
    check_async(*c, ctx);
    // A 1 MiB buffer: the local steps run in chunks.
    auto small = make_comm(ctx, "cuda", "hier2_small", {{"buffer_bytes", "1M"}});
    check_allreduce(*small, ctx, DataType::kFloat32, ReduceOp::SUM, (1 << 20) + 7, 5);
    check_allreduce(*small, ctx, DataType::kBFloat16, ReduceOp::MAX, (1 << 19) + 1, 6);
    check_all_gather(*c, ctx, 800);
    check_all_gather(*small, ctx, 900);
    // Two ranks of the comm share a GPU, so no full-comm NCCL delegate exists: other ops (and
    // the "nccl" algorithm) must fail clearly. This also shows that the hierarchical path ran.
    for (int k = 0; k < 2; ++k) {
      bool threw = false;
      try {
        DevBuf b(64);
        Tensor x(b.p, 4, DataType::kFloat32, Device::cuda(ctx.device));
        if (k == 0)
          c->broadcast(x, 0).wait_blocking();
        else
          c->all_reduce(x, ReduceOp::SUM, false, [] {
            OpOptions o;
            o.hints["algorithm"] = "nccl";
            return o;
          }()).wait_blocking();
      } catch (const Error& e) {
        threw = e.code() == ErrorCode::kUnsupported &&
                std::string(e.what()).find("share a GPU") != std::string::npos;
        RANK_CHECK(threw, e.what());
      }
      RANK_CHECK(threw, "an op needing the full-comm NCCL delegate did not fail");
    }
    // Peer memory unusable within the hosts: every rank must decide to fall back to NCCL, which
    // cannot span ranks sharing a GPU: a clear Unsupported error on every rank, no hang.
    setenv("COMMX_CUDA_FORCE_NO_P2P", "1", 1);
    expect_error([&] { make_comm(ctx, "cuda", "hier2_nop2p"); }, ErrorCode::kUnsupported,
                 {"COMMX_CUDA_FORCE_NO_P2P", "share a GPU"},
                 "comm creation without P2P and without NCCL");
    unsetenv("COMMX_CUDA_FORCE_NO_P2P");
  }, std::chrono::seconds(240), 2);
  EXPECT_EQ(err, "");
}

TEST(CudaHier, PeerThatNeverArrivesEndsWithinTheTimeout) {
  REQUIRE_HIER();
  // 2 hosts x 2 ranks; rank 3 joins no op. Rank 2 waits for it in the local step (a device-side
  // timeout that must name comm rank 3, not its local index 1); rank 1 waits for it in the
  // inter-host NCCL step (the host-side bound aborts the comm and its NCCL comms); rank 0 may
  // finish or fail, but nobody hangs.
  std::string err = run_ranks(4, 2, [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "hier_late", {{"ranks_per_host", "2"}},
                       std::chrono::milliseconds(500));
    if (ctx.rank == 3) {
      for (int r = 0; r < 3; ++r) ctx.store->get("hier_late_done_" + std::to_string(r));
      return;
    }
    auto a = std::make_unique<DevBuf>(4096 * 4);
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    ErrorCode code = ErrorCode::kInternal;
    bool threw = false;
    try {
      c->all_reduce(Tensor(a->p, 4096, DataType::kFloat32, Device::cuda(ctx.device)), ReduceOp::SUM)
          .wait_blocking();
    } catch (const Error& e) {
      threw = true;
      msg = e.what();
      code = e.code();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "hier_late rank %d: op ended after %.2f s: %s\n", ctx.rank, secs,
                 msg.c_str());
    ctx.store->set_str("hier_late_done_" + std::to_string(ctx.rank), "1");
    a.reset();
    std::fprintf(stderr, "hier_late rank %d: buffer freed\n", ctx.rank);
    c.reset();
    std::fprintf(stderr, "hier_late rank %d: comm destroyed\n", ctx.rank);
    RANK_CHECK(secs < 10, "took " + std::to_string(secs) + " s: " + msg);
    if (ctx.rank == 2) {
      RANK_CHECK(threw && code == ErrorCode::kTimeout, msg);
      RANK_CHECK(msg.find("waiting for rank 3") != std::string::npos, msg);
    }
    if (ctx.rank == 1)
      RANK_CHECK(threw && (code == ErrorCode::kTimeout || code == ErrorCode::kAborted), msg);
  }, std::chrono::seconds(40), 2);
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace commx::testing
