// Collective-by-collective checks run inside rank processes against a CPU reference; shared by
// the cuda and nccl backend tests. Layer: tests.
#pragma once

#include <dlfcn.h>
#include <cstdlib>

#include "cuda/gpu_check.h"

namespace commx::testing {

inline std::shared_ptr<Comm> make_comm(RankCtx& ctx, const std::string& backend,
                                       const std::string& name, Hints hints = {},
                                       Timeout timeout = std::chrono::seconds(60)) {
  CU(cudaSetDevice(ctx.device));
  CommOptions o;
  o.store = ctx.store;
  o.rank = ctx.rank;
  o.size = ctx.world;
  o.timeout = timeout;
  o.hints = std::move(hints);
  return Comm::create(backend, Device::cuda(ctx.device), name, o);
}

// NCCL can be loaded (asked in a child so the parent stays CUDA-free).
inline bool nccl_loadable() {
  static int cached = -1;
  if (cached >= 0) return cached;
  pid_t pid = fork();
  if (pid == 0) {
    const char* p = std::getenv("COMMX_NCCL_LIBRARY");
    _exit(dlopen(p ? p : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL) ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  cached = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  return cached;
}

inline std::vector<std::vector<double>> gen_all(DataType t, int64_t n, uint64_t seed, int world,
                                                ReduceKind k) {
  std::vector<std::vector<double>> v;
  for (int r = 0; r < world; ++r) v.push_back(gen(t, n, seed, r, k));
  return v;
}

// all_reduce (or reduce to `root` >= 0) of n elements at element offset `off` of a fresh buffer.
// Returns the raw result bytes (for bit-identity checks).
inline std::vector<uint8_t> check_allreduce(Comm& c, RankCtx& ctx, DataType t, ReduceOp op,
                                            int64_t n, uint64_t seed, const OpOptions& o = {},
                                            int64_t off = 0, int root = -1, cudaStream_t s = nullptr) {
  const size_t es = dtype_size(t);
  const std::string what = std::string(root < 0 ? "all_reduce " : "reduce ") + dtype_name(t) + " " +
                           reduce_kind_name(op.kind) + " n=" + std::to_string(n) + " off=" +
                           std::to_string(off) +
                           (o.hints.count("algorithm") ? " algo=" + o.hints.at("algorithm") : "");
  auto all = gen_all(t, n, seed, ctx.world, op.kind);
  DevBuf buf((n + off + 4) * es);
  char* p = buf.c() + off * es;
  std::vector<uint8_t> bytes;
  stage(what.c_str(), [&] {
    to_dev(p, encode(t, all[ctx.rank]));
    Tensor tensor(p, n, t, Device::cuda(ctx.device), s);
    Work w = root < 0 ? c.all_reduce(tensor, op, false, o) : c.reduce(tensor, root, op, false, o);
    w.wait_blocking();
    CU(cudaStreamSynchronize(s));
    bytes = from_dev(p, n * es);
  });
  if (root >= 0 && ctx.rank != root) return bytes;
  std::vector<double> ref(n), scale(n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> xs;
    for (int r = 0; r < ctx.world; ++r) {
      xs.push_back(all[r][i]);
      scale[i] += std::fabs(all[r][i]) * (op.kind == ReduceKind::kPremulSum ? std::fabs(op.factor) : 1);
    }
    ref[i] = fold(op, xs, ctx.world);
    if (op.kind == ReduceKind::kProduct || op.kind == ReduceKind::kMin || op.kind == ReduceKind::kMax)
      scale[i] = std::fabs(ref[i]);
  }
  expect_close(t, decode(t, bytes), ref, scale, what);
  return bytes;
}

// all_gather (list and single), reduce_scatter (list and single), all_to_all_single, broadcast,
// gather, scatter, barrier on n elements per rank (and the v/p2p ops when `with_v`).
inline void check_collectives(Comm& c, RankCtx& ctx, int64_t n, uint64_t seed, bool with_v) {
  const int W = ctx.world, me = ctx.rank;
  const Device dev = Device::cuda(ctx.device);
  const DataType t = DataType::kFloat32;
  const size_t es = 4;
  const std::string sz = " n=" + std::to_string(n);
  auto all = gen_all(t, n * W, seed, W, ReduceKind::kSum);  // each rank: W*n values
  auto first_n = [&](int r) { return std::vector<double>(all[r].begin(), all[r].begin() + n); };
  // all_gather_single and list.
  {
    DevBuf in(n * es), out(W * n * es);
    to_dev(in.p, encode(t, first_n(me)));
    c.all_gather_single(Tensor(out.p, W * n, t, dev), Tensor(in.p, n, t, dev)).wait_blocking();
    auto got = decode(t, from_dev(out.p, W * n * es));
    std::vector<double> ref;
    for (int r = 0; r < W; ++r) for (double x : first_n(r)) ref.push_back(x);
    expect_close(t, got, ref, {}, "all_gather_single" + sz);
    std::vector<std::unique_ptr<DevBuf>> outs;
    std::vector<Tensor> ts;
    for (int r = 0; r < W; ++r) {
      outs.push_back(std::make_unique<DevBuf>(n * es + 16));
      ts.emplace_back(outs.back()->c() + 4 * (r % 2), n, t, dev);  // some unaligned outputs
    }
    c.all_gather(ts, Tensor(in.p, n, t, dev)).wait_blocking();
    for (int r = 0; r < W; ++r)
      expect_close(t, decode(t, from_dev(ts[r].data, n * es)), first_n(r), {},
                   "all_gather[" + std::to_string(r) + "]" + sz);
  }
  // reduce_scatter_single and list (sum), all_to_all_single.
  {
    DevBuf in(W * n * es), out(n * es + 16);
    to_dev(in.p, encode(t, all[me]));
    c.reduce_scatter_single(Tensor(out.p, n, t, dev), Tensor(in.p, W * n, t, dev), ReduceOp::SUM)
        .wait_blocking();
    std::vector<double> ref(n, 0), scale(n, 0);
    for (int64_t i = 0; i < n; ++i)
      for (int r = 0; r < W; ++r) {
        ref[i] += all[r][me * n + i];
        scale[i] += std::fabs(all[r][me * n + i]);
      }
    expect_close(t, decode(t, from_dev(out.p, n * es)), ref, scale, "reduce_scatter_single" + sz);
    std::vector<Tensor> ins;
    for (int r = 0; r < W; ++r) ins.emplace_back(in.c() + r * n * es, n, t, dev);
    CU(cudaMemset(out.p, 0, n * es));
    c.reduce_scatter(Tensor(out.p, n, t, dev), ins, ReduceOp::SUM).wait_blocking();
    expect_close(t, decode(t, from_dev(out.p, n * es)), ref, scale, "reduce_scatter" + sz);
    c.all_to_all_single(Tensor(out.p, 0, t, dev), Tensor(in.p, 0, t, dev)).wait_blocking();
    DevBuf a2a(W * n * es);
    c.all_to_all_single(Tensor(a2a.p, W * n, t, dev), Tensor(in.p, W * n, t, dev)).wait_blocking();
    std::vector<double> aref;
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < n; ++i) aref.push_back(all[r][me * n + i]);
    expect_close(t, decode(t, from_dev(a2a.p, W * n * es)), aref, {}, "all_to_all_single" + sz);
  }
  // broadcast from the last rank, gather and scatter at root 1 % W.
  {
    const int broot = W - 1, root = 1 % W;
    DevBuf b(n * es);
    to_dev(b.p, encode(t, first_n(me)));
    c.broadcast(Tensor(b.p, n, t, dev), broot).wait_blocking();
    expect_close(t, decode(t, from_dev(b.p, n * es)), first_n(broot), {}, "broadcast" + sz);
    DevBuf in(n * es), out(W * n * es);
    to_dev(in.p, encode(t, first_n(me)));
    c.gather_single(Tensor(out.p, W * n, t, dev), Tensor(in.p, n, t, dev), root).wait_blocking();
    if (me == root) {
      std::vector<double> ref;
      for (int r = 0; r < W; ++r) for (double x : first_n(r)) ref.push_back(x);
      expect_close(t, decode(t, from_dev(out.p, W * n * es)), ref, {}, "gather_single" + sz);
    }
    std::vector<Tensor> ins;
    DevBuf sc(W * n * es);
    to_dev(sc.p, encode(t, all[me]));
    for (int r = 0; r < W; ++r) ins.emplace_back(sc.c() + r * n * es, n, t, dev);
    c.scatter(Tensor(in.p, n, t, dev), me == root ? ins : std::vector<Tensor>{}, root).wait_blocking();
    expect_close(t, decode(t, from_dev(in.p, n * es)),
                 std::vector<double>(all[root].begin() + me * n, all[root].begin() + (me + 1) * n),
                 {}, "scatter" + sz);
    c.barrier();
  }
  if (!with_v) return;
  // all_to_all_v_single with uneven splits, send/recv in a ring, all_gather_v.
  {
    std::vector<int64_t> in_splits(W), out_splits(W);
    for (int q = 0; q < W; ++q) {
      in_splits[q] = (me + q) % 3 + n % 5;   // what me sends to q
      out_splits[q] = (q + me) % 3 + n % 5;  // what q sends to me
    }
    int64_t tin = 0, tout = 0;
    for (int q = 0; q < W; ++q) tin += in_splits[q], tout += out_splits[q];
    DevBuf in(tin * es + 4), out(tout * es + 4);
    auto src = gen(t, tin, seed + 1, me, ReduceKind::kSum);
    to_dev(in.p, encode(t, src));
    c.all_to_all_v_single(Tensor(out.p, tout, t, dev), Tensor(in.p, tin, t, dev), out_splits,
                          in_splits).wait_blocking();
    std::vector<double> ref;
    for (int q = 0; q < W; ++q) {
      int64_t qtotal = 0, qoff = 0;
      for (int k = 0; k < W; ++k) qtotal += (q + k) % 3 + n % 5;
      for (int k = 0; k < me; ++k) qoff += (q + k) % 3 + n % 5;
      auto qsrc = gen(t, qtotal, seed + 1, q, ReduceKind::kSum);
      for (int64_t i = 0; i < out_splits[q]; ++i) ref.push_back(qsrc[qoff + i]);
    }
    expect_close(t, decode(t, from_dev(out.p, tout * es)), ref, {}, "all_to_all_v_single");
    DevBuf sbuf(n * es + 4), rbuf(n * es + 4);
    to_dev(sbuf.p, encode(t, first_n(me)));
    auto b = c.batch_op_create();
    b.send(Tensor(sbuf.p, n, t, dev), (me + 1) % W).recv(Tensor(rbuf.p, n, t, dev), (me + W - 1) % W);
    b.issue().wait_blocking();
    expect_close(t, decode(t, from_dev(rbuf.p, n * es)), first_n((me + W - 1) % W), {}, "batch p2p");
    std::vector<std::unique_ptr<DevBuf>> outs;
    std::vector<Tensor> ts;
    for (int r = 0; r < W; ++r) {
      outs.push_back(std::make_unique<DevBuf>((n + r) * es + 4));
      ts.emplace_back(outs.back()->p, n + r, t, dev);
    }
    auto mine = gen(t, n + me, seed + 2, me, ReduceKind::kSum);
    DevBuf vin((n + me) * es + 4);
    to_dev(vin.p, encode(t, mine));
    c.all_gather_v(ts, Tensor(vin.p, n + me, t, dev)).wait_blocking();
    for (int r = 0; r < W; ++r)
      expect_close(t, decode(t, from_dev(ts[r].data, (n + r) * es)), gen(t, n + r, seed + 2, r, ReduceKind::kSum),
                   {}, "all_gather_v[" + std::to_string(r) + "]");
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
    auto va = gen_all(t, n1, 100 + rep, 2, ReduceKind::kSum);
    auto vb = gen_all(t, n2, 200 + rep, 2, ReduceKind::kSum);
    auto vg = gen_all(t, ng, 300 + rep, 2, ReduceKind::kSum);
    to_dev(a.p, encode(t, va[ctx.rank]));
    to_dev(b.p, encode(t, vb[ctx.rank]));
    to_dev(gin.p, encode(t, vg[ctx.rank]));
    CU(cudaGraphLaunch(exec, s));
    CU(cudaStreamSynchronize(s));
    auto check_sum = [&](void* p, int64_t n, std::vector<std::vector<double>>& v, const char* w) {
      std::vector<double> ref(n), sc(n);
      for (int64_t i = 0; i < n; ++i) {
        ref[i] = v[0][i] + v[1][i];
        sc[i] = std::fabs(v[0][i]) + std::fabs(v[1][i]);
      }
      expect_close(t, decode(t, from_dev(p, n * 4)), ref, sc,
                   tag + ": " + w + " replay " + std::to_string(rep));
    };
    check_sum(a.p, n1, va, "graph ll+flat (sum then max of equal values)");
    check_sum(b.p, n2, vb, "graph tree");
    std::vector<double> gref(vg[0]);
    gref.insert(gref.end(), vg[1].begin(), vg[1].end());
    expect_close(t, decode(t, from_dev(gout.p, 2 * ng * 4)), gref, {}, tag + ": graph all_gather");
  }
  // Eager ops still agree with the replays' flag epochs afterwards.
  check_allreduce(c, ctx, t, ReduceOp::SUM, 4097, 77);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace commx::testing
