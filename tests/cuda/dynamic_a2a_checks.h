// The all_to_all_v_dynamic checks shared by the GPU backends' tests (cuda native, nccl): one op of
// any form against the host reference (counts, rows, nothing written past them), every form over
// random counts with zeros, hot spots and a silent sender, CUDA-graph replays with the counts
// changed between replays, and a capacity error that fails every rank's Work and leaves the comm
// usable. Run inside rank processes. Layer: tests.
#pragma once

#include <cstring>

#include "cuda/collective_checks.h"
#include "dynamic_a2a_reference.h"

namespace commx::testing {

inline std::vector<uint8_t> as_bytes(const std::vector<int64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
inline std::vector<int64_t> as_counts(const std::vector<uint8_t>& b) {
  std::vector<int64_t> v(b.size() / 8);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// One op of form f on device buffers; checks counts, rows and the untouched tail. `scale`
// multiplies every count (large ones go through several rounds of a small buffer).
inline void check_one(Comm& c, RankCtx& ctx, Form f, int L, Pattern p, int64_t row, DataType dt,
               uint32_t seed, int64_t scale = 1) {
  const int n = ctx.world, me = ctx.rank;
  const Device dev = Device::cuda(ctx.device);
  const size_t es = dtype_size(dt);
  auto counts = make_counts(f, n, L, p, seed);
  for (auto& r : counts)
    for (auto& v : r) v *= scale;
  int64_t sent = 0;
  for (int64_t v : counts[me]) sent += v;
  const int64_t in_elems = sent * row + 3;
  std::vector<uint8_t> in(in_elems * es);
  for (int64_t e = 0; e < in_elems; ++e)
    for (size_t b = 0; b < es; ++b) in[e * es + b] = input_byte(me, e, b);
  Expected x = reference(f, n, L, counts, me, row, es);
  const int64_t cap = static_cast<int64_t>(x.out.size() / es) + 2 * row + 1;
  DevBuf din(in.size()), dout(cap * es), dic(n * L * 8), doc(n * L * 8);
  to_dev(din.p, in);
  to_dev(dout.p, std::vector<uint8_t>(cap * es, kUntouched));
  to_dev(dic.p, as_bytes(counts[me]));
  to_dev(doc.p, std::vector<uint8_t>(n * L * 8, 0xFF));
  run_form(c, f, Tensor(dout.p, cap, dt, dev), Tensor(din.p, in_elems, dt, dev),
           Tensor(doc.p, n * L, DataType::kInt64, dev), Tensor(dic.p, n * L, DataType::kInt64, dev),
           row);
  CU(cudaDeviceSynchronize());
  const std::string what = std::string(form_name(f)) + " L=" + std::to_string(L) +
                           " row=" + std::to_string(row) + " " + dtype_name(dt) + " pattern " +
                           std::to_string(static_cast<int>(p)) + " scale " + std::to_string(scale);
  RANK_CHECK(as_counts(from_dev(doc.p, n * L * 8)) == x.counts, what + ": received counts");
  auto out = from_dev(dout.p, cap * es);
  RANK_CHECK(std::memcmp(out.data(), x.out.data(), x.out.size()) == 0, what + ": received rows");
  for (size_t b = x.out.size(); b < out.size(); ++b)
    RANK_CHECK(out[b] == kUntouched,
               what + ": byte " + std::to_string(b) + " past the rows written");
}

inline void check_every_form(Comm& c, RankCtx& ctx) {
  uint32_t seed = 1;
  for (Form f : {Form::kPlain, Form::kDispatch, Form::kCombine})
    for (int L : {1, 3}) {
      if (f == Form::kPlain && L > 1) continue;
      for (Pattern p : {Pattern::kRandom, Pattern::kHotSpot, Pattern::kSilentSender})
        for (int64_t row : {1, 7, 4096})
          for (DataType dt : {DataType::kBFloat16, DataType::kFloat32, DataType::kInt8})
            check_one(c, ctx, f, L, p, row, dt, seed++);
    }
}

// Dispatch then combine, captured once and replayed with new counts and data each time: the host
// never sees the counts. `warm_up`: one eager op first, as a graph's users run one (NCCL sets up
// its connections at a comm's first operations).
inline void check_graph_replays(Comm& c, RankCtx& ctx, bool warm_up = false) {
  if (warm_up) check_one(c, ctx, Form::kDispatch, 2, Pattern::kRandom, 64, DataType::kBFloat16, 49);
  const int n = ctx.world, me = ctx.rank, L = 2;
  const int64_t row = 64, max_rows = 6 * n * L, cap = n * max_rows * row;
  const Device dev = Device::cuda(ctx.device);
  DevBuf din(max_rows * row * 2), dmid(cap * 2), dback(cap * 2), dic(n * L * 8),
      dmc(n * L * 8), dbc(n * L * 8);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto t = [&](DevBuf& b, int64_t cnt, DataType dt) {
    return Tensor(b.p, cnt, dt, dev, s);
  };
  cudaGraph_t graph;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  c.dispatch(t(dmid, cap, DataType::kBFloat16), t(din, max_rows * row, DataType::kBFloat16),
             t(dmc, n * L, DataType::kInt64), t(dic, n * L, DataType::kInt64), row);
  c.combine(t(dback, cap, DataType::kBFloat16), t(dmid, cap, DataType::kBFloat16),
            t(dbc, n * L, DataType::kInt64), t(dmc, n * L, DataType::kInt64), row);
  CU(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 5; ++rep) {
    auto counts = make_counts(Form::kDispatch, n, L,
                              rep == 3 ? Pattern::kHotSpot : Pattern::kRandom, 50 + rep);
    int64_t sent = 0;
    for (int64_t v : counts[me]) sent += v;
    std::vector<uint8_t> in(max_rows * row * 2);
    for (size_t i = 0; i < in.size(); ++i) in[i] = input_byte(me + rep, i / 2, i % 2);
    to_dev(din.p, in);
    to_dev(dic.p, as_bytes(counts[me]));
    CU(cudaGraphLaunch(exec, s));
    CU(cudaStreamSynchronize(s));
    Expected x = reference(Form::kDispatch, n, L, counts, me, row, 2);
    // The reference's bytes are for input_byte(k, ...): replays shift the rank by rep.
    auto mid = from_dev(dmid.p, x.out.size());
    size_t at = 0;
    bool same = true;
    for (int l = 0; l < L; ++l)
      for (int k = 0; k < n; ++k) {
        int64_t first = 0;
        for (int e = 0; e < me * L + l; ++e) first += counts[k][e];
        for (int64_t el = first * row; el < (first + counts[k][me * L + l]) * row; ++el)
          for (size_t b = 0; b < 2; ++b) same &= mid[at++] == input_byte(k + rep, el, b);
      }
    RANK_CHECK(same && at == x.out.size(),
               "replay " + std::to_string(rep) + ": dispatched rows");
    RANK_CHECK(as_counts(from_dev(dmc.p, n * L * 8)) == x.counts,
               "replay " + std::to_string(rep) + ": dispatched counts");
    RANK_CHECK(as_counts(from_dev(dbc.p, n * L * 8)) == counts[me],
               "replay " + std::to_string(rep) + ": combined counts");
    auto back = from_dev(dback.p, sent * row * 2);
    RANK_CHECK(std::memcmp(back.data(), in.data(), back.size()) == 0,
               "replay " + std::to_string(rep) + ": combine brought the rows back");
  }
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  CU(cudaStreamDestroy(s));
}

// Rank 0 offers 5 of the 4 * n elements it would receive: every rank's Work fails alike and nothing
// is written. Then the failure of an op whose Work is never asked is reported by the next Work
// polled, and the same comm still runs correct ops.
inline void check_capacity_error_then_go_on(Comm& c, RankCtx& ctx) {
  const int n = ctx.world;
  const Device dev = Device::cuda(ctx.device);
  DevBuf din(64 * 4), dout(64 * 4), dbig(64 * 4), dic(n * 8), doc(n * 8);
  to_dev(din.p, std::vector<uint8_t>(64 * 4, 1));
  to_dev(dout.p, std::vector<uint8_t>(64 * 4, kUntouched));
  to_dev(dic.p, as_bytes(std::vector<int64_t>(n, 4)));
  const int64_t cap = ctx.rank == 0 ? 5 : 64;
  auto too_small = [&] {
    return c.all_to_all_v_dynamic(Tensor(dout.p, cap, DataType::kFloat32, dev),
                                  Tensor(din.p, 64, DataType::kFloat32, dev),
                                  Tensor(doc.p, n, DataType::kInt64, dev),
                                  Tensor(dic.p, n, DataType::kInt64, dev), 1, true);
  };
  const std::initializer_list<const char*> says = {
      "all_to_all_v_dynamic", "capacity exceeded: rank 0 would receive",
      "holds 5 elements", "the comm stays usable"};
  Work w = too_small();
  expect_error([&] { w.wait_blocking(); }, ErrorCode::kInvalidArgument, says,
               "the op's own Work reports the capacity error");
  CU(cudaDeviceSynchronize());
  for (uint8_t b : from_dev(dout.p, 64 * 4)) RANK_CHECK(b == kUntouched, "the output was written");
  check_one(c, ctx, Form::kPlain, 1, Pattern::kRandom, 3, DataType::kFloat32, 11);

  // The next op of the same kind (on every path of a backend, the one that reported the first).
  Work unasked = too_small();
  Work later = c.all_to_all_v_dynamic(Tensor(dbig.p, 64, DataType::kFloat32, dev),
                                      Tensor(din.p, 64, DataType::kFloat32, dev),
                                      Tensor(doc.p, n, DataType::kInt64, dev),
                                      Tensor(dic.p, n, DataType::kInt64, dev), 1, true);
  expect_error([&] { later.wait_blocking(); }, ErrorCode::kInvalidArgument,
               {"an earlier all_to_all_v_dynamic", "capacity exceeded"},
               "a later Work reports the unasked failure");
  CU(cudaDeviceSynchronize());
  RANK_CHECK(as_counts(from_dev(doc.p, n * 8)) == std::vector<int64_t>(n, 4),
             "the later op still ran: received counts");
  check_one(c, ctx, Form::kDispatch, 2, Pattern::kHotSpot, 5, DataType::kBFloat16, 12);
  c.barrier();
  CU(cudaDeviceSynchronize());
}

}  // namespace commx::testing
