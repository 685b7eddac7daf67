// GPU tests of the cuda backend (and the nccl backend it is compared with): every collective
// against a CPU reference on random data, dtypes/ops, odd and unaligned sizes, chunking, CUDA
// graph capture and replay, async ops, a peer that never arrives, two comms at once, several
// ranks per GPU. Ranks are processes forked before any CUDA call. Skips without a GPU.
// Layer: tests (label gpu).
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/collective_checks.h"

namespace commx::testing {
namespace {

TEST(CudaBackend, AllReduceEveryDtypeOpAndSize) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "ar");
    check_allreduce_coverage(*c, ctx, "ar");
  });
  EXPECT_EQ(err, "");
}

// The opt-in LL128 one-shot (algorithm=ll128): every dtype/op, sizes around the 120-byte line
// payload (tails), unaligned buffers, bit-identical ranks, then 300 back-to-back 256 KiB ops of
// fresh random data checked every time (a torn 128-byte line would show stale data of op k-2),
// graph capture and replay, and 3-4 ranks sharing GPUs.
TEST(CudaBackend, AllReduceLL128) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "ll128");
    const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                              DataType::kFloat64, DataType::kInt32, DataType::kInt64};
    const ReduceOp ops[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,
                            ReduceOp::AVG, ReduceOp::premul_sum(0.5)};
    uint64_t seed = 1;
    for (DataType t : types)
      for (ReduceOp op : ops) {
        if (!dtype_is_floating(t) && (op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum))
          continue;
        for (int64_t n : {0, 1, 3, 15, 16, 17, 1000, 4099, 70001, 131072 + 5})
          check_allreduce(*c, ctx, t, op, n, seed++, algo("ll128"));
      }
    // Unaligned user buffers (element offset 1: element loads and stores).
    for (DataType t : types)
      for (int64_t n : {17, 1000, 70001})
        check_allreduce(*c, ctx, t, ReduceOp::SUM, n, seed++, algo("ll128"), 1);
    // Bit-identical results on every rank (fixed reduction order), aligned and not.
    int key = 0;
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64})
      for (int64_t off : {0, 1}) {
        auto bytes = check_allreduce(*c, ctx, t, ReduceOp::SUM, 131072 + 5, 900 + key, algo("ll128"), off);
        std::string k = "ll128_bits_" + std::to_string(key++);
        if (ctx.rank == 0) ctx.store->set(k, bytes);
        RANK_CHECK(ctx.store->get(k) == bytes, std::string("ll128 results differ between ranks: ") +
                                                   dtype_name(t) + " off " + std::to_string(off));
      }
    // Stress: 300 ops of 256 KiB f32, ten enqueued back to back (no host sync between them) on
    // ten buffers, each with fresh random data, every result checked.
    stage("ll128 stress and graph", [&] {
      const DataType t = DataType::kFloat32;
      const int64_t n = (256 << 10) / 4;
      const int batch = 10;
      const Device dev = Device::cuda(ctx.device);
      std::vector<std::unique_ptr<DevBuf>> bufs;
      const int64_t gn[3] = {1, 4099, 70001};  // the graph part's sizes, below
      for (int b = 0; b < batch; ++b) bufs.push_back(std::make_unique<DevBuf>(std::max(n, gn[2]) * 4));
      for (int it = 0; it < 300 / batch; ++it) {
        std::vector<std::vector<Buf>> all;
        for (int b = 0; b < batch; ++b) {
          all.push_back(gen_all(5000 + it * batch + b, ctx.world, n, t, ReduceKind::kSum));
          upload(bufs[b]->p, all[b][ctx.rank], n, t);
        }
        for (int b = 0; b < batch; ++b)
          c->all_reduce(Tensor(bufs[b]->p, n, t, dev), ReduceOp::SUM, false, algo("ll128"));
        CU(cudaDeviceSynchronize());
        for (int b = 0; b < batch; ++b)
          expect_device(reduced(all[b], 0, n, t, ReduceOp::SUM), bufs[b]->p, n, t,
                        "ll128 stress op " + std::to_string(it * batch + b));
      }
      // Graph capture: three ll128 ops (flags and buffer halves follow the device op counter),
      // replayed with fresh data, then an eager op.
      cudaStream_t s;
      CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      cudaGraph_t graph;
      CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int b = 0; b < 3; ++b)
        c->all_reduce(Tensor(bufs[b]->p, gn[b], t, dev, s), ReduceOp::SUM, false, algo("ll128"));
      CU(cudaStreamEndCapture(s, &graph));
      cudaGraphExec_t exec;
      CU(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<std::vector<Buf>> all;
        for (int b = 0; b < 3; ++b) {
          all.push_back(gen_all(7000 + rep * 3 + b, ctx.world, gn[b], t, ReduceKind::kSum));
          upload(bufs[b]->p, all[b][ctx.rank], gn[b], t);
        }
        CU(cudaGraphLaunch(exec, s));
        CU(cudaStreamSynchronize(s));
        for (int b = 0; b < 3; ++b)
          expect_device(reduced(all[b], 0, gn[b], t, ReduceOp::SUM), bufs[b]->p, gn[b], t,
                        "ll128 graph replay " + std::to_string(rep) + " op " + std::to_string(b));
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(s);
      check_allreduce(*c, ctx, t, ReduceOp::SUM, 4097, 77, algo("ll128"));
    });
  });
  EXPECT_EQ(err, "");
  // 3 and 4 ranks sharing GPUs (time-sliced contexts, one block), and 4 ranks on 2 GPUs (P2P and
  // same-GPU pairs in one comm).
  std::vector<std::pair<int, int>> shapes{{3, gpu_count() >= 2 ? 2 : 1}, {4, 1}};
  if (gpu_count() >= 2) shapes.push_back({4, 2});
  for (auto [world, gpus] : shapes) {
    std::string e = run_ranks(world, gpus, [](RankCtx& ctx) {
      auto c = make_comm(ctx, "cuda", "ll128_shared");
      uint64_t seed = 41;
      check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 5003, seed++, algo("ll128"));
      check_allreduce(*c, ctx, DataType::kBFloat16, ReduceOp::MIN, 33, seed++, algo("ll128"));
      check_allreduce(*c, ctx, DataType::kFloat64, ReduceOp::MAX, 4099, seed++, algo("ll128"));
      check_allreduce(*c, ctx, DataType::kInt32, ReduceOp::SUM, 17, seed++, algo("ll128"));
      check_allreduce(*c, ctx, DataType::kFloat16, ReduceOp::AVG, 1000, seed++, algo("ll128"), 1);
      auto bytes = check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 70001, seed++, algo("ll128"));
      if (ctx.rank == 0) ctx.store->set("ll128_shared_bits", bytes);
      RANK_CHECK(ctx.store->get("ll128_shared_bits") == bytes, "ll128 results differ between ranks");
    });
    EXPECT_EQ(e, "") << "world " << world << " on " << gpus << " GPU(s)";
  }
}

TEST(CudaBackend, ChunkingThroughASmallBuffer) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "chunks", {{"buffer_bytes", "1M"}});
    for (const char* a : {"flat", "tree"})
      check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, (1 << 20) + 7, 5, algo(a));
    check_allreduce(*c, ctx, DataType::kBFloat16, ReduceOp::MAX, (1 << 19) + 1, 6, algo("tree"));
    check_collectives(*c, ctx, 300001, 7, false);
  });
  EXPECT_EQ(err, "");
}

// A large two-shot all_reduce runs as one kernel over pieces that alternate buffer halves, each
// block moving on with only its per-block barriers. Through a 1 MiB buffer (2 to 17 pieces):
// sizes that end on a piece boundary and ones with a short last piece and a tail, each of
// f32/bf16/f16, unaligned buffers, reduce to a non-zero root, results bit-identical on every
// rank and to the one-shot's (same reduction order) on a comm whose buffer holds the whole op,
// back-to-back ops of fresh data, graph capture and replay, and 3 ranks (uneven slices).
TEST(CudaBackend, TwoShotPiecesInOneLaunch) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto small = make_comm(ctx, "cuda", "pieces", {{"buffer_bytes", "1M"}});
    uint64_t seed = 500;
    // 1047552 elements: exactly 4 pieces of f32 or 2 of bf16/f16 (1047552-byte pieces at 2 ranks).
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
      for (int64_t n : {int64_t(1047552), (int64_t(1) << 21) + 3, 3 * (int64_t(1) << 18) + 9})
        check_allreduce(*small, ctx, t, ReduceOp::SUM, n, seed++, algo("tree"));
    check_allreduce(*small, ctx, DataType::kBFloat16, ReduceOp::SUM, (1 << 23) + 5, seed++,
                    algo("tree"));
    check_allreduce(*small, ctx, DataType::kBFloat16, ReduceOp::AVG, (1 << 20) + 5, seed++,
                    algo("tree"), 1);
    check_allreduce(*small, ctx, DataType::kFloat32, ReduceOp::MAX, (1 << 20) + 1, seed++,
                    algo("tree"), 0, 1);
    for (int i = 0; i < 8; ++i)
      check_allreduce(*small, ctx, DataType::kFloat32, ReduceOp::SUM, 300001 + i, seed++,
                      algo("tree"));
    auto whole = make_comm(ctx, "cuda", "pieces_whole");
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16}) {
      const int64_t n = (1 << 20) + 7;
      auto pieces = check_allreduce(*small, ctx, t, ReduceOp::SUM, n, 990, algo("tree"));
      auto one_shot = check_allreduce(*whole, ctx, t, ReduceOp::SUM, n, 990, algo("flat"));
      RANK_CHECK(pieces == one_shot, std::string("two-shot in pieces differs from the one-shot: ") +
                                         dtype_name(t));
      const std::string key = std::string("pieces_bits_") + dtype_name(t);
      if (ctx.rank == 0) ctx.store->set(key, pieces);
      RANK_CHECK(ctx.store->get(key) == pieces, "two-shot in pieces differs between ranks");
    }
    // Graph capture of an op of 5 pieces, replayed with fresh data, then an eager op.
    const Device dev = Device::cuda(ctx.device);
    const DataType t = DataType::kFloat32;
    const int64_t n = (1 << 20) + 3;
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DevBuf b(n * 4);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    small->all_reduce(Tensor(b.p, n, t, dev, s), ReduceOp::SUM, false, algo("tree"));
    CU(cudaStreamEndCapture(s, &graph));
    CU(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      const auto v = gen_all(700 + rep, 2, n, t, ReduceKind::kSum);
      upload(b.p, v[ctx.rank], n, t);
      CU(cudaGraphLaunch(exec, s));
      CU(cudaStreamSynchronize(s));
      expect_device(reduced(v, 0, n, t, ReduceOp::SUM), b.p, n, t,
                    "graph two-shot in pieces, replay " + std::to_string(rep));
    }
    check_allreduce(*small, ctx, t, ReduceOp::SUM, 300007, seed++, algo("tree"));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  });
  EXPECT_EQ(err, "");
  err = run_ranks(3, gpu_count() >= 2 ? 2 : 1, [](RankCtx& ctx) {
    auto small = make_comm(ctx, "cuda", "pieces3", {{"buffer_bytes", "1M"}});
    check_allreduce(*small, ctx, DataType::kFloat32, ReduceOp::SUM, (1 << 20) + 7, 31, algo("tree"));
    check_allreduce(*small, ctx, DataType::kBFloat16, ReduceOp::MIN, (1 << 20) + 1, 32, algo("tree"));
  });
  EXPECT_EQ(err, "") << "world 3";
}

// all_gather, all_to_all, reduce_scatter, broadcast, gather and scatter of n elements of t per
// pair, enqueued on one stream (eagerly or into a graph), on reference.h's data: every input is
// read from `in` (this rank's W * n elements), each op writes its own output (NaN before).
struct LargeExchangeOps {
  RankCtx& ctx;
  DataType t;
  int64_t n;
  int W, me, root;
  size_t es;
  DevBuf in, ag, a2a, rs, bc, ga, sc;
  LargeExchangeOps(RankCtx& c, DataType type, int64_t count)
      : ctx(c), t(type), n(count), W(c.world), me(c.rank), root(1 % c.world),
        es(dtype_size(type)), in(W * n * es), ag(W * n * es), a2a(W * n * es), rs(n * es),
        bc(n * es), ga(W * n * es), sc(n * es) {}

  std::vector<Buf> upload(uint64_t seed) {
    std::vector<Buf> all = gen_all(seed, W, static_cast<size_t>(W * n), t, ReduceKind::kSum);
    testing::upload(in.p, all[me], static_cast<size_t>(W * n), t);
    testing::upload(bc.p, all[me], static_cast<size_t>(n), t);
    for (const DevBuf* out : {&ag, &a2a, &ga}) CU(cudaMemset(out->p, 0xff, W * n * es));  // NaN
    for (const DevBuf* out : {&rs, &sc}) CU(cudaMemset(out->p, 0xff, n * es));
    CU(cudaDeviceSynchronize());  // before the ops on a non-blocking stream
    return all;
  }

  void enqueue(Comm& c, cudaStream_t s) {
    const Device dev = Device::cuda(ctx.device);
    auto ten = [&](const DevBuf& b, int64_t count) { return Tensor(b.p, count, t, dev, s); };
    c.all_gather_single(ten(ag, W * n), ten(in, n));
    c.all_to_all_single(ten(a2a, W * n), ten(in, W * n));
    c.reduce_scatter_single(ten(rs, n), ten(in, W * n), ReduceOp::SUM);
    c.broadcast(ten(bc, n), W - 1);
    c.gather_single(ten(ga, W * n), ten(in, n), root);
    std::vector<Tensor> pieces;
    if (me == root)
      for (int r = 0; r < W; ++r) pieces.emplace_back(in.c() + r * n * es, n, t, dev, s);
    c.scatter(ten(sc, n), pieces, root);
  }

  void check(const std::vector<Buf>& all, const std::string& tag) {
    const size_t un = static_cast<size_t>(n);
    auto expect = [&](const Buf& want, const DevBuf& got, size_t count, const char* op) {
      const std::string diff = mismatch(want.data(), from_dev(got.p, count * es).data(), count, t);
      RANK_CHECK(diff.empty(), std::string(op) + " " + dtype_name(t) + " n=" + std::to_string(n) +
                                   " " + tag + ": " + diff);
    };
    const Buf gathered_all = gathered(all, un, t);
    expect(gathered_all, ag, un * W, "all_gather_single");
    expect(received(all, std::vector<size_t>(W, me * un), std::vector<size_t>(W, un), t), a2a,
           un * W, "all_to_all_single");
    expect(reduced(all, me * un, un, t, ReduceOp::SUM), rs, un, "reduce_scatter_single");
    expect(piece(all[W - 1], 0, un, t), bc, un, "broadcast");
    if (me == root) expect(gathered_all, ga, un * W, "gather_single");
    expect(piece(all[root], me * un, un, t), sc, un, "scatter");
  }
};

// The byte exchange (all_gather, all_to_all, broadcast, gather, scatter) and the chunked
// reduce_scatter run an op larger than a buffer half as one kernel over rounds that alternate
// the halves, blocks moving on with per-block barriers only. Through 1 MiB halves, 7 MiB and a
// few bytes per pair (15 rounds at 2 ranks, 22 at 3, the last one short, a tail of less than a
// pack): every op eagerly in f32 and bf16, then captured into a graph and replayed with fresh
// data, then eagerly again (its op counters follow the replays'), and 3 ranks sharing GPUs.
TEST(CudaBackend, LargeExchangeAndReduceScatterInRounds) {
  REQUIRE_GPUS(1);
  const int64_t f32_n = (int64_t(7) << 20) / 4 + 3, bf16_n = (int64_t(7) << 20) / 2 + 5;
  std::string err = run_ranks(2, two_gpus(), [&](RankCtx& ctx) {
    auto small = make_comm(ctx, "cuda", "xrounds", {{"buffer_bytes", "1M"}});
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint64_t seed = 1400;
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16}) {
      LargeExchangeOps ops(ctx, t, t == DataType::kFloat32 ? f32_n : bf16_n);
      const auto all = ops.upload(seed);
      stage("large exchange eager", [&] {
        ops.enqueue(*small, s);
        CU(cudaStreamSynchronize(s));
      });
      ops.check(all, "eager seed " + std::to_string(seed++));
    }
    LargeExchangeOps ops(ctx, DataType::kFloat32, f32_n);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ops.enqueue(*small, s);
    CU(cudaStreamEndCapture(s, &graph));
    CU(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      const auto all = ops.upload(seed + 1 + rep);
      stage("large exchange graph replay", [&] {
        CU(cudaGraphLaunch(exec, s));
        CU(cudaStreamSynchronize(s));
      });
      ops.check(all, "graph replay " + std::to_string(rep));
    }
    const auto after = ops.upload(seed + 9);
    stage("large exchange eager after the graph", [&] {
      ops.enqueue(*small, s);
      CU(cudaStreamSynchronize(s));
    });
    ops.check(after, "eager after the graph");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  });
  EXPECT_EQ(err, "");
  err = run_ranks(3, gpu_count() >= 2 ? 2 : 1, [&](RankCtx& ctx) {
    auto small = make_comm(ctx, "cuda", "xrounds3", {{"buffer_bytes", "1M"}});
    LargeExchangeOps ops(ctx, DataType::kFloat32, f32_n);
    const auto all = ops.upload(1500);
    stage("large exchange eager, 3 ranks", [&] {
      ops.enqueue(*small, nullptr);
      CU(cudaStreamSynchronize(nullptr));
    });
    ops.check(all, "3 ranks");
  });
  EXPECT_EQ(err, "") << "world 3";
}

TEST(CudaBackend, EveryCollectiveTwoRanks) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "coll");
    uint64_t seed = 11;
    for (int64_t n : {0, 1, 7, 1001, 65536 + 3}) check_collectives(*c, ctx, n, seed++, false);
    // Ops the native path delegates to NCCL (when it loads; NCCL needs one GPU per rank).
    if (nccl_loadable() && gpu_count() >= 2) check_collectives(*c, ctx, 1001, seed++, true);
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, ThreeAndFourRanksShareGpus) {
  REQUIRE_GPUS(1);
  for (int world : {3, 4}) {
    std::string err = run_ranks(world, gpu_count() >= 2 && world == 3 ? 2 : 1, [](RankCtx& ctx) {
      auto c = make_comm(ctx, "cuda", "shared");
      for (const char* a : {"flat", "tree"}) {
        check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 5003, 21, algo(a));
        check_allreduce(*c, ctx, DataType::kBFloat16, ReduceOp::MIN, 33, 22, algo(a));
      }
      check_collectives(*c, ctx, 999, 23, false);
    });
    EXPECT_EQ(err, "") << "world " << world;
  }
}

TEST(CudaBackend, WorldOfOne) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(1, 1, [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "one");
    check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, 1);
    check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::AVG, 1001, 2);
    check_collectives(*c, ctx, 77, 3, false);
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, GraphCaptureAndReplay) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "graph");
    check_graph_replay(*c, ctx, "graph");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, AsyncOpsAndStreams) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "async");
    const Device dev = Device::cuda(ctx.device);
    const DataType t = DataType::kFloat32;
    const int64_t n = 50001;
    const std::vector<Buf> v = gen_all(3, ctx.world, n, t, ReduceKind::kSum);
    DevBuf a(n * 4), b(n * 4);
    upload(a.p, v[ctx.rank], n, t);
    upload(b.p, v[ctx.rank], n, t);
    Work w1 = c->all_reduce(Tensor(a.p, n, t, dev), ReduceOp::SUM, true);
    Work w2 = c->all_reduce(Tensor(b.p, n, t, dev), ReduceOp::MAX, true, algo("tree"));
    w1.wait();  // the default stream waits
    w2.wait_blocking();
    CU(cudaDeviceSynchronize());
    RANK_CHECK(w1.is_completed() && w2.status() == WorkStatus::kCompleted, "async works not completed");
    expect_device(reduced(v, 0, n, t, ReduceOp::SUM), a.p, n, t, "async sum");
    expect_device(reduced(v, 0, n, t, ReduceOp::MAX), b.p, n, t, "async max");
    // Sync ops on two different user streams stay in issue order.
    cudaStream_t s1, s2;
    CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    for (int i = 0; i < 10; ++i) {
      check_allreduce(*c, ctx, t, ReduceOp::SUM, 3001, 50 + i, {}, 0, -1, i % 2 ? s1 : s2);
    }
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, WorkOutlivesItsComm) {
  REQUIRE_GPUS(1);
  // Python drops a Work after its comm (a script's locals): polling it then must not call into
  // the destroyed backend. Both backends whose Works poll their comm: cuda, and nccl when usable.
  std::vector<std::string> backends{"cuda"};
  if (nccl_loadable() && gpu_count() >= 2) backends.push_back("nccl");
  for (const std::string& b : backends) {
    std::string err = run_ranks(2, two_gpus(), [&b](RankCtx& ctx) {
      const Device dev = Device::cuda(ctx.device);
      auto c = make_comm(ctx, b, "outlive_" + b);  // first: it makes the rank's GPU current
      DevBuf a(1024 * 4);
      CU(cudaMemset(a.p, 0, 1024 * 4));
      Work w = c->all_reduce(Tensor(a.p, 1024, DataType::kFloat32, dev), ReduceOp::SUM, true);
      c->finalize();
      c.reset();  // the backend is destroyed; the Work is not
      w.wait_blocking();  // polls the Work after its backend is gone
      RANK_CHECK(w.is_completed(), b + ": the op of a destroyed comm is not complete");
      RANK_CHECK(w.status() == WorkStatus::kCompleted, b + ": bad status after the comm is gone");
    });
    EXPECT_EQ(err, "") << b;
  }
}

TEST(CudaBackend, PeerThatNeverArrivesTimesOutOnTheGpu) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    // One comm per device-side wait: LL and LL128 polling, per-block flag barrier, exchange barrier.
    const char* kinds[] = {"ll", "ll128", "tree", "broadcast"};
    std::vector<std::shared_ptr<Comm>> comms;
    for (const char* k : kinds)
      comms.push_back(make_comm(ctx, "cuda", std::string("late_") + k, {}, std::chrono::milliseconds(400)));
    if (ctx.rank == 1) {
      ctx.store->get("rank0_done");  // joins no op; keeps its buffers mapped meanwhile
      return;
    }
    DevBuf a(2048 * 4);
    const Device dev = Device::cuda(ctx.device);
    for (int i = 0; i < 4; ++i) {
      Comm& c = *comms[i];
      auto t0 = std::chrono::steady_clock::now();
      bool threw = false;
      try {
        if (i < 3)
          c.all_reduce(Tensor(a.p, 1024, DataType::kFloat32, dev), ReduceOp::SUM, false, algo(kinds[i]))
              .wait_blocking();
        else
          c.broadcast(Tensor(a.p, 1024, DataType::kFloat32, dev), 0).wait_blocking();
      } catch (const Error& e) {
        threw = true;
        std::string m = e.what();
        RANK_CHECK(e.code() == ErrorCode::kTimeout, m);
        RANK_CHECK(m.find("waiting for rank 1") != std::string::npos, m);
        RANK_CHECK(m.find(i < 3 ? "all_reduce" : "broadcast") != std::string::npos, m);
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      RANK_CHECK(threw, std::string("no timeout error for ") + kinds[i]);
      RANK_CHECK(secs < 5, "took " + std::to_string(secs) + " s");
      bool next_threw = false;
      try {
        c.barrier();
      } catch (const Error&) {
        next_threw = true;
      }
      RANK_CHECK(next_threw, "the comm kept working after a device-side timeout");
    }
    ctx.store->set_str("rank0_done", "1");
  });
  EXPECT_EQ(err, "");
}

// A tensor whose memory is on another GPU, or in plain host memory, is refused by every op of
// the cuda and nccl backends with an error naming the tensor and where its memory is; the comm
// stays usable (both ranks refuse before anything is sent).
TEST(CudaBackend, BuffersOnTheWrongGpuOrInHostMemoryAreRefused) {
  REQUIRE_GPUS(1);
  const bool two = gpu_count() >= 2;
  std::string err = run_ranks(2, two_gpus(), [two](RankCtx& ctx) {
    for (const char* backend : {"cuda", "nccl"}) {
      if (std::string(backend) == "nccl" && (!two || !nccl_loadable())) continue;
      auto c = make_comm(ctx, backend, std::string("where_") + backend);
      const Device dev = Device::cuda(ctx.device);
      const int64_t n = 1000;
      std::vector<float> host(n, 1.0f);
      const std::string tag = std::string(backend) + ": ";
      expect_error([&] { c->all_reduce(Tensor(host.data(), n, DataType::kFloat32, dev), ReduceOp::SUM); },
                   ErrorCode::kInvalidArgument, {"the input", "is not CUDA memory"}, tag + "host input");
      DevBuf good(n * 4);
      expect_error(
          [&] {
            c->all_gather_single(Tensor(good.p, n, DataType::kFloat32, dev),
                                 Tensor(host.data(), n / 2, DataType::kFloat32, dev));
          },
          ErrorCode::kInvalidArgument, {"is not CUDA memory"}, tag + "host input of all_gather");
      if (two) {
        const int other = 1 - ctx.device;
        CU(cudaSetDevice(other));
        DevBuf far(n * 4);
        CU(cudaSetDevice(ctx.device));
        const std::string on_other = "its memory is on cuda:" + std::to_string(other);
        expect_error([&] { c->all_reduce(Tensor(far.p, n, DataType::kFloat32, dev), ReduceOp::SUM); },
                     ErrorCode::kInvalidArgument, {"the input", on_other.c_str()}, tag + "input on the other GPU");
        expect_error(
            [&] {
              c->all_gather_single(Tensor(far.p, 2 * n, DataType::kFloat32, dev),
                                   Tensor(good.p, n, DataType::kFloat32, dev));
            },
            ErrorCode::kInvalidArgument, {"the output", on_other.c_str()}, tag + "output on the other GPU");
        // A tensor that says it is on the other GPU: refused by the core's device check.
        expect_error(
            [&] {
              c->all_reduce(Tensor(far.p, n, DataType::kFloat32, Device::cuda(other)), ReduceOp::SUM);
            },
            ErrorCode::kInvalidArgument, {"is on device cuda:", "bound to cuda:"}, tag + "tensor of the other GPU");
      }
      // The comm still works, and memory of this GPU passes (cached verdicts included).
      for (int rep = 0; rep < 2; ++rep) check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 4099, 5 + rep);
    }
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, TwoCommsAtOnce) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto a = make_comm(ctx, "cuda", "first");
    auto b = make_comm(ctx, "cuda", "second");
    for (int i = 0; i < 6; ++i) {
      check_allreduce(*a, ctx, DataType::kFloat32, ReduceOp::SUM, 1000 + i, 400 + i, algo("flat"));
      check_allreduce(*b, ctx, DataType::kBFloat16, ReduceOp::SUM, 20000 + i, 500 + i, algo("tree"));
    }
    check_collectives(*b, ctx, 333, 600, false);
    check_collectives(*a, ctx, 333, 601, false);
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, NoPeerAccessFallsBackToNcclOrRefuses) {
  REQUIRE_GPUS(1);
  bool nccl = nccl_loadable();
  if (nccl && gpu_count() < 2) GTEST_SKIP() << "the NCCL fallback needs one GPU per rank";
  std::string err = run_ranks(2, two_gpus(), [nccl](RankCtx& ctx) {
    setenv("COMMX_CUDA_FORCE_NO_P2P", "1", 1);
    if (nccl) {
      auto c = make_comm(ctx, "cuda", "nop2p");
      check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, 9);
      return;
    }
    expect_error([&] { make_comm(ctx, "cuda", "nop2p"); }, ErrorCode::kUnsupported,
                 {"COMMX_CUDA_FORCE_NO_P2P"}, "comm creation without P2P and NCCL");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaBackend, DdaDisabledOrNcclHintGoesThroughNccl) {
  REQUIRE_GPUS(2);
  if (!nccl_loadable()) GTEST_SKIP() << "libnccl.so.2 not loadable (set COMMX_NCCL_LIBRARY)";
  std::string err = run_ranks(2, 2, [](RankCtx& ctx) {
    setenv("RCCL_DDA_ENABLE", "0", 1);  // the alias of COMMX_DDA_ENABLE
    auto c = make_comm(ctx, "cuda", "nodda");
    check_allreduce(*c, ctx, DataType::kBFloat16, ReduceOp::SUM, 1001, 3);
    check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::MAX, 70001, 4);
    unsetenv("RCCL_DDA_ENABLE");
    auto d = make_comm(ctx, "cuda", "hint");
    check_allreduce(*d, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, 5, algo("nccl"));
    check_allreduce(*d, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, 6, algo("ll"));
    bool threw = false;
    try {
      check_allreduce(*d, ctx, DataType::kFloat32, ReduceOp::SUM, 10, 7, algo("bogus"));
    } catch (const Error& e) {
      threw = e.code() == ErrorCode::kInvalidArgument;
    }
    RANK_CHECK(threw, "an unknown algorithm hint must be an InvalidArgument error");
  });
  EXPECT_EQ(err, "");
}

TEST(NcclBackend, EveryCollective) {
  REQUIRE_GPUS(1);
  if (!nccl_loadable()) GTEST_SKIP() << "libnccl.so.2 not loadable (set COMMX_NCCL_LIBRARY)";
  // NCCL refuses two ranks on one GPU.
  if (gpu_count() < 2) GTEST_SKIP() << "NCCL needs one GPU per rank";
  std::string err = run_ranks(2, 2, [](RankCtx& ctx) {
    auto c = make_comm(ctx, "nccl", "nccl");
    uint64_t seed = 31;
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32})
      for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::PRODUCT})
        for (int64_t n : {1, 1001}) check_allreduce(*c, ctx, t, op, n, seed++);
    check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::AVG, 1001, seed++);
    check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, seed++, {}, 0, 1);
    for (int64_t n : {1, 1001}) check_collectives(*c, ctx, n, seed++, true);
    Work w = c->all_reduce(Tensor(nullptr, 0, DataType::kFloat32, Device::cuda(ctx.device)),
                           ReduceOp::SUM, true);
    w.wait_blocking();
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace commx::testing
