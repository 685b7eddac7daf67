// all_to_all_v_dynamic and its MoE dispatch/combine forms on the cuda backend: every form against
// the host reference (random counts with zeros, hot spots, a silent sender, odd row sizes,
// several element sizes) at 2 ranks and at 3 and 4 ranks sharing GPUs, in rounds through a small
// registered buffer, CUDA-graph replays with the counts changed between replays, and capacity
// exceeded reported through the device error path with nothing written past the output.
// Layer: tests (label gpu; skips without a GPU).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/collective_checks.h"
#include "dynamic_a2a_reference.h"

namespace commx::testing {
namespace {

#define REQUIRE_GPUS(N)                                                                         \
  do {                                                                                          \
    if (gpu_count() < (N)) GTEST_SKIP() << "needs " << (N) << " GPU(s), found " << gpu_count(); \
  } while (0)

std::vector<uint8_t> as_bytes(const std::vector<int64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<int64_t> as_counts(const std::vector<uint8_t>& b) {
  std::vector<int64_t> v(b.size() / 8);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// One op of form f on device buffers; checks counts, rows and the untouched tail. `scale`
// multiplies every count (large ones go through several rounds of a small buffer).
void check_one(Comm& c, RankCtx& ctx, Form f, int L, Pattern p, int64_t row, DataType dt,
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

void check_every_form(Comm& c, RankCtx& ctx) {
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

TEST(CudaAllToAllVDynamic, EveryFormTwoRanks) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn2");
                        check_every_form(*c, ctx);
                      }),
            "");
}

TEST(CudaAllToAllVDynamic, ThreeAndFourRanksShareGpus) {
  REQUIRE_GPUS(1);
  for (int world : {3, 4})
    EXPECT_EQ(
        run_ranks(
            world, gpu_count() >= 2 ? 2 : 1,
            [](RankCtx& ctx) {
              auto c = make_comm(ctx, "cuda", "dyn_shared");
              uint32_t seed = 100;
              for (Form f : {Form::kPlain, Form::kDispatch, Form::kCombine})
                for (Pattern p : {Pattern::kRandom, Pattern::kHotSpot, Pattern::kSilentSender})
                  check_one(*c, ctx, f, f == Form::kPlain ? 1 : 2, p, 5, DataType::kBFloat16,
                            seed++);
            }),
        "")
        << "world " << world;
}

TEST(CudaAllToAllVDynamic, WorldOfOne) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(1, 1,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn1");
                        check_one(*c, ctx, Form::kPlain, 1, Pattern::kRandom, 3, DataType::kFloat32,
                                  5);
                        check_one(*c, ctx, Form::kDispatch, 4, Pattern::kRandom, 3,
                                  DataType::kFloat32, 6);
                      }),
            "");
}

// A 1 MiB buffer half: 512 KiB per sender at 2 ranks, so large counts take several rounds.
TEST(CudaAllToAllVDynamic, RoundsThroughASmallBuffer) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn_rounds", {{"buffer_bytes", "1M"}});
                        check_one(*c, ctx, Form::kPlain, 1, Pattern::kHotSpot, 4096,
                                  DataType::kBFloat16, 7, 40);
                        check_one(*c, ctx, Form::kDispatch, 2, Pattern::kRandom, 1000,
                                  DataType::kFloat32, 8, 50);
                        check_one(*c, ctx, Form::kCombine, 2, Pattern::kRandom, 7, DataType::kInt8,
                                  9, 9000);
                        // And an ordinary collective after them: the op counters still agree.
                        check_collectives(*c, ctx, 1001, 10, false);
                      }),
            "");
}

// Captured once, replayed with new counts and data each time: the host never sees the counts.
TEST(CudaAllToAllVDynamic, GraphReplayWithChangingCounts) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(
      run_ranks(
          2, two_gpus(),
          [](RankCtx& ctx) {
            auto c = make_comm(ctx, "cuda", "dyn_graph");
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
            c->dispatch(t(dmid, cap, DataType::kBFloat16),
                        t(din, max_rows * row, DataType::kBFloat16),
                        t(dmc, n * L, DataType::kInt64), t(dic, n * L, DataType::kInt64), row);
            c->combine(t(dback, cap, DataType::kBFloat16), t(dmid, cap, DataType::kBFloat16),
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
          }),
      "");
}

TEST(CudaAllToAllVDynamic, CapacityExceededIsADeviceError) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn_cap");
                        const int n = ctx.world;
                        const Device dev = Device::cuda(ctx.device);
                        DevBuf din(64 * 4), dout(64 * 4), dic(n * 8), doc(n * 8);
                        to_dev(din.p, std::vector<uint8_t>(64 * 4, 1));
                        to_dev(dout.p, std::vector<uint8_t>(64 * 4, kUntouched));
                        to_dev(dic.p, as_bytes(std::vector<int64_t>(n, 4)));
                        // Rank 0 offers 5 of the 4 * n elements it would receive.
                        const int64_t cap = ctx.rank == 0 ? 5 : 64;
                        c->all_to_all_v_dynamic(Tensor(dout.p, cap, DataType::kFloat32, dev),
                                                Tensor(din.p, 64, DataType::kFloat32, dev),
                                                Tensor(doc.p, n, DataType::kInt64, dev),
                                                Tensor(dic.p, n, DataType::kInt64, dev), 1);
                        CU(cudaDeviceSynchronize());
                        auto out = from_dev(dout.p, 64 * 4);
                        for (uint8_t b : out) RANK_CHECK(b == kUntouched, "the output was written");
                        expect_error(
                            [&] { c->barrier(); }, ErrorCode::kInvalidArgument,
                            {"all_to_all_v_dynamic",
                             "capacity exceeded: rank 0 would receive 8 rows", "holds 5 elements"},
                            "the next op reports the capacity error");
                      }),
            "");
}

}  // namespace
}  // namespace commx::testing
