// Collective-by-collective checks run inside rank processes; shared by the cuda and nccl backend
// tests. Every expected result comes from the one reference of the C++ tests
// (conformance/reference.h: its data, reductions, gathered and received pieces, and comparison);
// this header only runs the ops on device buffers. Layer: tests.
#pragma once

#include <cstdlib>

#include "conformance/reference.h"
#include "cuda/gpu_check.h"

namespace commx::testing {

// The first `count` elements of reference data `b` to device address `dst`.
inline void upload(void* dst, const Buf& b, size_t count, DataType t) {
  to_dev(dst, b.data(), count * dtype_size(t));
}

// The `count` elements at device address `p` against the reference result `want` (exact; AVG
// and PREMUL_SUM within one rounding of the scaling, see element_matches).
inline void expect_device(const Buf& want, const void* p, size_t count, DataType t,
                          const std::string& what, ReduceOp op = {}) {
  const std::vector<uint8_t> got = from_dev(p, count * dtype_size(t));
  const std::string diff = mismatch(want.data(), got.data(), count, t, op);
  RANK_CHECK(diff.empty(), what + ": " + diff);
}

// all_reduce (or reduce to `root` >= 0) of n elements at element offset `off` of a fresh buffer,
// on reference.h's data for case `seed`, checked against its reduction. Returns the raw result
// bytes (for bit-identity checks).
inline std::vector<uint8_t> check_allreduce(Comm& c, RankCtx& ctx, DataType t, ReduceOp op,
                                            int64_t n, uint64_t seed, const OpOptions& o = {},
                                            int64_t off = 0, int root = -1, cudaStream_t s = nullptr) {
  const size_t es = dtype_size(t);
  const size_t count = static_cast<size_t>(n);
  const std::string what = std::string(root < 0 ? "all_reduce " : "reduce ") + dtype_name(t) + " " +
                           reduce_kind_name(op.kind) + " n=" + std::to_string(n) + " off=" +
                           std::to_string(off) +
                           (o.hints.count("algorithm") ? " algo=" + o.hints.at("algorithm") : "");
  const std::vector<Buf> all = gen_all(seed, ctx.world, count, t, op.kind);
  DevBuf buf((n + off + 4) * es);
  char* p = buf.c() + off * es;
  std::vector<uint8_t> bytes;
  stage(what.c_str(), [&] {
    upload(p, all[ctx.rank], count, t);
    Tensor tensor(p, n, t, Device::cuda(ctx.device), s);
    Work w = root < 0 ? c.all_reduce(tensor, op, false, o) : c.reduce(tensor, root, op, false, o);
    w.wait_blocking();
    CU(cudaStreamSynchronize(s));
    bytes = from_dev(p, count * es);
  });
  if (root >= 0 && ctx.rank != root) return bytes;
  const std::string diff = mismatch(reduced(all, 0, count, t, op).data(), bytes.data(), count, t, op);
  RANK_CHECK(diff.empty(), what + ": " + diff);
  return bytes;
}

// all_gather (list and single), reduce_scatter (list and single), all_to_all_single, broadcast,
// gather, scatter, barrier on n f32 elements per rank (and the v/p2p ops when `with_v`), on
// reference.h's data for case `seed`, checked against it.
inline void check_collectives(Comm& c, RankCtx& ctx, int64_t n, uint64_t seed, bool with_v) {
  const int W = ctx.world, me = ctx.rank;
  const Device dev = Device::cuda(ctx.device);
  const DataType t = DataType::kFloat32;
  const size_t es = 4, un = static_cast<size_t>(n);
  const std::string sz = " n=" + std::to_string(n);
  const std::vector<Buf> all = gen_all(seed, W, un * W, t, ReduceKind::kSum);  // W*n per rank
  auto part = [&](const Buf& b, size_t off, size_t count) { return piece(b, off, count, t); };
  auto expect = [&](const Buf& want, const void* p, size_t count, const std::string& what) {
    expect_device(want, p, count, t, what);
  };
  const Buf all_first_n = gathered(all, un, t);  // all_gather's and gather's result
  // all_gather_single and list.
  {
    DevBuf in(n * es), out(W * n * es);
    upload(in.p, all[me], un, t);
    c.all_gather_single(Tensor(out.p, W * n, t, dev), Tensor(in.p, n, t, dev)).wait_blocking();
    expect(all_first_n, out.p, un * W, "all_gather_single" + sz);
    std::vector<std::unique_ptr<DevBuf>> outs;
    std::vector<Tensor> ts;
    for (int r = 0; r < W; ++r) {
      outs.push_back(std::make_unique<DevBuf>(n * es + 16));
      ts.emplace_back(outs.back()->c() + 4 * (r % 2), n, t, dev);  // some unaligned outputs
    }
    c.all_gather(ts, Tensor(in.p, n, t, dev)).wait_blocking();
    for (int r = 0; r < W; ++r)
      expect(part(all[r], 0, un), ts[r].data, un, "all_gather[" + std::to_string(r) + "]" + sz);
  }
  // reduce_scatter_single and list (sum), all_to_all_single.
  {
    DevBuf in(W * n * es), out(n * es + 16);
    upload(in.p, all[me], un * W, t);
    c.reduce_scatter_single(Tensor(out.p, n, t, dev), Tensor(in.p, W * n, t, dev), ReduceOp::SUM)
        .wait_blocking();
    const Buf ref = reduced(all, me * un, un, t, ReduceOp::SUM);
    expect(ref, out.p, un, "reduce_scatter_single" + sz);
    std::vector<Tensor> ins;
    for (int r = 0; r < W; ++r) ins.emplace_back(in.c() + r * n * es, n, t, dev);
    CU(cudaMemset(out.p, 0, n * es));
    c.reduce_scatter(Tensor(out.p, n, t, dev), ins, ReduceOp::SUM).wait_blocking();
    expect(ref, out.p, un, "reduce_scatter" + sz);
    c.all_to_all_single(Tensor(out.p, 0, t, dev), Tensor(in.p, 0, t, dev)).wait_blocking();
    DevBuf a2a(W * n * es);
    c.all_to_all_single(Tensor(a2a.p, W * n, t, dev), Tensor(in.p, W * n, t, dev)).wait_blocking();
    const Buf aref = received(all, std::vector<size_t>(W, me * un), std::vector<size_t>(W, un), t);
    expect(aref, a2a.p, un * W, "all_to_all_single" + sz);
  }
  // broadcast from the last rank, gather and scatter at root 1 % W.
  {
    const int broot = W - 1, root = 1 % W;
    DevBuf b(n * es);
    upload(b.p, all[me], un, t);
    c.broadcast(Tensor(b.p, n, t, dev), broot).wait_blocking();
    expect(part(all[broot], 0, un), b.p, un, "broadcast" + sz);
    DevBuf in(n * es), out(W * n * es);
    upload(in.p, all[me], un, t);
    c.gather_single(Tensor(out.p, W * n, t, dev), Tensor(in.p, n, t, dev), root).wait_blocking();
    if (me == root) expect(all_first_n, out.p, un * W, "gather_single" + sz);
    std::vector<Tensor> ins;
    DevBuf sc(W * n * es);
    upload(sc.p, all[me], un * W, t);
    for (int r = 0; r < W; ++r) ins.emplace_back(sc.c() + r * n * es, n, t, dev);
    c.scatter(Tensor(in.p, n, t, dev), me == root ? ins : std::vector<Tensor>{}, root).wait_blocking();
    expect(part(all[root], me * un, un), in.p, un, "scatter" + sz);
    c.barrier();
  }
  if (!with_v) return;
  // all_to_all_v_single with uneven splits, send/recv in a ring, all_gather_v.
  {
    // What rank s sends rank d.
    auto split = [&](int s, int d) { return static_cast<int64_t>((s + d) % 3 + n % 5); };
    std::vector<int64_t> in_splits(W), out_splits(W);
    int64_t tin = 0, tout = 0;
    for (int q = 0; q < W; ++q) {
      in_splits[q] = split(me, q);
      out_splits[q] = split(q, me);
      tin += in_splits[q];
      tout += out_splits[q];
    }
    // Rank q's input: all it sends, in destination order; this rank's block of it starts at
    // offs[q] and holds lens[q] elements.
    std::vector<Buf> sources;
    std::vector<size_t> offs(W, 0), lens(W);
    for (int q = 0; q < W; ++q) {
      size_t total = 0;
      for (int d = 0; d < W; ++d) {
        if (d == me) offs[q] = total;
        total += static_cast<size_t>(split(q, d));
      }
      sources.push_back(gen(seed + 1, q, total, t, ReduceKind::kSum));
      lens[q] = static_cast<size_t>(out_splits[q]);
    }
    DevBuf in(tin * es + 4), out(tout * es + 4);
    upload(in.p, sources[me], static_cast<size_t>(tin), t);
    c.all_to_all_v_single(Tensor(out.p, tout, t, dev), Tensor(in.p, tin, t, dev), out_splits,
                          in_splits).wait_blocking();
    expect(received(sources, offs, lens, t), out.p, static_cast<size_t>(tout),
           "all_to_all_v_single");
    DevBuf sbuf(n * es + 4), rbuf(n * es + 4);
    upload(sbuf.p, all[me], un, t);
    const int prev = (me + W - 1) % W;
    auto b = c.batch_op_create();
    b.send(Tensor(sbuf.p, n, t, dev), (me + 1) % W).recv(Tensor(rbuf.p, n, t, dev), prev);
    b.issue().wait_blocking();
    expect(part(all[prev], 0, un), rbuf.p, un, "batch p2p");
    std::vector<std::unique_ptr<DevBuf>> outs;
    std::vector<Tensor> ts;
    for (int r = 0; r < W; ++r) {
      outs.push_back(std::make_unique<DevBuf>((n + r) * es + 4));
      ts.emplace_back(outs.back()->p, n + r, t, dev);
    }
    DevBuf vin((n + me) * es + 4);
    upload(vin.p, gen(seed + 2, me, un + me, t, ReduceKind::kSum), un + me, t);
    c.all_gather_v(ts, Tensor(vin.p, n + me, t, dev)).wait_blocking();
    for (int r = 0; r < W; ++r)
      expect(gen(seed + 2, r, un + r, t, ReduceKind::kSum), ts[r].data, un + r,
             "all_gather_v[" + std::to_string(r) + "]");
  }
}

inline OpOptions algo(const char* a) {
  OpOptions o;
  o.hints["algorithm"] = a;
  return o;
}

// The all_reduce coverage the cuda backend runs over each peer-memory path: every dtype, op and
// odd size on each algorithm, unaligned buffers, automatic selection at large sizes, reduce to a
// non-zero root, bit-identical results on every rank (store keys start with `tag`).
inline void check_allreduce_coverage(Comm& c, RankCtx& ctx, const std::string& tag) {
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                            DataType::kFloat64, DataType::kInt32, DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,
                          ReduceOp::AVG, ReduceOp::premul_sum(0.5)};
  uint64_t seed = 1;
  for (const char* a : {"ll", "flat", "tree"})
    for (DataType t : types)
      for (ReduceOp op : ops) {
        if (!dtype_is_floating(t) && (op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum))
          continue;
        for (int64_t n : {0, 1, 3, 17, 1000, 4099, 70001})
          check_allreduce(c, ctx, t, op, n, seed++, algo(a));
      }
  // Unaligned user buffers (element offset 1) on every path.
  for (const char* a : {"ll", "flat", "tree"})
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16})
      for (int64_t n : {1000, 70001}) check_allreduce(c, ctx, t, ReduceOp::SUM, n, seed++, algo(a), 1);
  // Automatic selection across sizes, large bf16 and f32.
  check_allreduce(c, ctx, DataType::kBFloat16, ReduceOp::SUM, (1 << 20) + 3, seed++);
  check_allreduce(c, ctx, DataType::kFloat32, ReduceOp::SUM, (3 << 20) + 5, seed++);
  // reduce to a non-zero root on both paths.
  for (const char* a : {"flat", "tree"})
    check_allreduce(c, ctx, DataType::kFloat32, ReduceOp::SUM, 5001, seed++, algo(a), 0, 1);
  // Bit-identical results on every rank (fixed reduction order).
  for (const char* a : {"ll", "flat", "tree"}) {
    auto bytes = check_allreduce(c, ctx, DataType::kFloat32, ReduceOp::SUM, 70001, 999, algo(a));
    std::string key = tag + "_bits_" + a;
    if (ctx.rank == 0) ctx.store->set(key, bytes);
    RANK_CHECK(ctx.store->get(key) == bytes, std::string("results differ between ranks: ") + a);
  }
}

// CUDA graph capture of LL, flat and tree all_reduces and an all_gather_single, replayed with
// fresh data, then an eager op (its flag epochs must agree with the replays'). `tag` names the
// suite in failures.
inline void check_graph_replay(Comm& c, RankCtx& ctx, const std::string& tag) {
  const Device dev = Device::cuda(ctx.device);
  const DataType t = DataType::kFloat32;
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t n1 = 1000, n2 = 100003, ng = 513;
  DevBuf a(n1 * 4), b(n2 * 4), gin(ng * 4), gout(2 * ng * 4);
  // Warm-up outside the graph (lazy setup must not happen during capture).
  c.all_reduce(Tensor(a.p, n1, t, dev, s), ReduceOp::SUM).wait_blocking();
  cudaGraph_t graph;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  c.all_reduce(Tensor(a.p, n1, t, dev, s), ReduceOp::SUM, false, algo("ll"));
  c.all_reduce(Tensor(a.p, n1, t, dev, s), ReduceOp::MAX, false, algo("flat"));
  c.all_reduce(Tensor(b.p, n2, t, dev, s), ReduceOp::SUM, false, algo("tree"));
  c.all_gather_single(Tensor(gout.p, 2 * ng, t, dev, s), Tensor(gin.p, ng, t, dev, s));
  CU(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 4; ++rep) {
    const auto va = gen_all(100 + rep, 2, n1, t, ReduceKind::kSum);
    const auto vb = gen_all(200 + rep, 2, n2, t, ReduceKind::kSum);
    const auto vg = gen_all(300 + rep, 2, ng, t, ReduceKind::kSum);
    upload(a.p, va[ctx.rank], n1, t);
    upload(b.p, vb[ctx.rank], n2, t);
    upload(gin.p, vg[ctx.rank], ng, t);
    CU(cudaGraphLaunch(exec, s));
    CU(cudaStreamSynchronize(s));
    const std::string replay = " replay " + std::to_string(rep);
    auto expect = [&](const Buf& want, const void* p, int64_t n, const std::string& what) {
      expect_device(want, p, n, t, tag + ": " + what + replay);
    };
    expect(reduced(va, 0, n1, t, ReduceOp::SUM), a.p, n1,
           "graph ll+flat (sum then max of equal values)");
    expect(reduced(vb, 0, n2, t, ReduceOp::SUM), b.p, n2, "graph tree");
    expect(gathered(vg, ng, t), gout.p, 2 * ng, "graph all_gather");
  }
  // Eager ops still agree with the replays' flag epochs afterwards.
  check_allreduce(c, ctx, t, ReduceOp::SUM, 4097, 77);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace commx::testing
