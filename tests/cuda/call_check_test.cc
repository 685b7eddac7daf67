// The cuda backend's call checks on the GPU: two ranks that issue different collectives, roots,
// reduce ops, dtypes or counts each get an InvalidArgument naming both calls, no data of the
// peer's reaches their buffers, and the comm is failed afterwards (the next op throws). Covers
// every native kernel (LL, LL128, flat and two-shot all_reduce, the FP8 all_reduce, the barrier
// and LL exchanges, the LL reduce-scatter, all_to_all_v_dynamic, the barrier), a kernel against
// one of another protocol (LL polling against a flag barrier), and calls replayed from a CUDA
// graph.
// Layer: tests (label gpu; skips without a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "cuda/collective_checks.h"

namespace commx::testing {
namespace {

constexpr int64_t kElems = 8192;  // floats in each rank's input and output buffers
const DataType kF32 = DataType::kFloat32;

// Rank r's input: 1 + r * 65536 + i, exact in float32, so a value from the peer's range in a
// buffer means the peer's data arrived.
float pattern(int rank, int64_t i) { return static_cast<float>(1 + rank * 65536 + i); }

struct Buffers {
  const Device dev;
  cudaStream_t stream = nullptr;
  DevBuf in{kElems * 4}, out{kElems * 4}, counts{64};
  Tensor f32_in(int64_t n) const { return Tensor(in.p, n, kF32, dev, stream); }
  Tensor f32_out(int64_t n) const { return Tensor(out.p, n, kF32, dev, stream); }
};

// What one rank issues: the op, and the call it is, as an error message names it: the op's name
// (followed by " #<seq>") and its arguments.
struct Call {
  std::function<Work(Comm&, Buffers&)> issue;
  std::string name;
  std::string args;
};

struct Case {
  const char* what;
  Call calls[2];  // rank 0's, rank 1's
};

Work all_reduce(Comm& c, Buffers& b, int64_t n, ReduceOp op, const char* algorithm,
                DataType t = kF32) {
  return c.all_reduce(Tensor(b.in.p, n, t, b.dev, b.stream), op, false, algo(algorithm));
}

std::vector<Case> cases() {
  auto ar = [](int64_t n, ReduceOp op, const char* a, DataType t = kF32) {
    return [=](Comm& c, Buffers& b) { return all_reduce(c, b, n, op, a, t); };
  };
  auto fp8_ar = [](int64_t n) {
    return [=](Comm& c, Buffers& b) {
      OpOptions o;
      o.hints = {{"low_precision", "fp8e4m3"}, {"low_precision_min_bytes", "0"}};
      return c.all_reduce(b.f32_in(n), ReduceOp::SUM, false, o);
    };
  };
  auto bcast = [](int root) {
    return [=](Comm& c, Buffers& b) { return c.broadcast(b.f32_in(1024), root); };
  };
  return {
      {"LL all_reduce, sum against max",
       {{ar(1024, ReduceOp::SUM, "ll"), "all_reduce", "(sum, 1024 x float)"},
        {ar(1024, ReduceOp::MAX, "ll"), "all_reduce", "(max, 1024 x float)"}}},
      {"LL128 all_reduce, float against bfloat16",
       {{ar(4096, ReduceOp::SUM, "ll128"), "all_reduce", "(sum, 4096 x float)"},
        {ar(4096, ReduceOp::SUM, "ll128", DataType::kBFloat16), "all_reduce",
         "(sum, 4096 x bfloat16)"}}},
      {"flat all_reduce, 1000 against 1001 elements",
       {{ar(1000, ReduceOp::SUM, "flat"), "all_reduce", "(sum, 1000 x float)"},
        {ar(1001, ReduceOp::SUM, "flat"), "all_reduce", "(sum, 1001 x float)"}}},
      // FP8 all_reduce: the round kernel's barrier after P1 checks the call before P2 reads the
      // peer's codes.
      {"FP8 all_reduce, 8192 against 8191 elements",
       {{fp8_ar(8192), "all_reduce", "(sum, 8192 x float)"},
        {fp8_ar(8191), "all_reduce", "(sum, 8191 x float)"}}},
      {"two-shot all_reduce, sum against min",
       {{ar(8192, ReduceOp::SUM, "tree"), "all_reduce", "(sum, 8192 x float)"},
        {ar(8192, ReduceOp::MIN, "tree"), "all_reduce", "(min, 8192 x float)"}}},
      {"broadcast, root 0 against root 1",
       {{bcast(0), "broadcast", "(root 0, 1024 x float)"},
        {bcast(1), "broadcast", "(root 1, 1024 x float)"}}},
      {"all_gather_single against all_to_all_single",
       {{[](Comm& c, Buffers& b) { return c.all_gather_single(b.f32_out(1024), b.f32_in(512)); },
         "all_gather_single", "(512 x float)"},
        {[](Comm& c, Buffers& b) { return c.all_to_all_single(b.f32_out(1024), b.f32_in(1024)); },
         "all_to_all_single", "(1024 x float)"}}},
      {"reduce_scatter_single against all_reduce",
       {{[](Comm& c, Buffers& b) {
           return c.reduce_scatter_single(b.f32_out(512), b.f32_in(1024), ReduceOp::SUM);
         },
         "reduce_scatter_single", "(sum, 512 x float)"},
        {ar(512, ReduceOp::SUM, "ll"), "all_reduce", "(sum, 512 x float)"}}},
      // LL polling on one rank, a flag barrier on the other: neither's data or flags ever come;
      // the call entries in the pads tell.
      {"LL all_reduce against a broadcast (barrier exchange)",
       {{ar(1024, ReduceOp::SUM, "ll"), "all_reduce", "(sum, 1024 x float)"},
        {bcast(0), "broadcast", "(root 0, 1024 x float)"}}},
      {"all_to_all_v_dynamic against all_to_all_single",
       {{[](Comm& c, Buffers& b) {
           const int64_t split[2] = {256, 256};
           CU(cudaMemcpy(b.counts.p, split, sizeof(split), cudaMemcpyHostToDevice));
           Tensor sizes(b.counts.p, 2, DataType::kInt64, b.dev, b.stream);
           Tensor out_sizes(b.counts.c() + 16, 2, DataType::kInt64, b.dev, b.stream);
           return c.all_to_all_v_dynamic(b.f32_out(1024), b.f32_in(512), out_sizes, sizes, 1);
         },
         "all_to_all_v_dynamic", "(0 x float)"},
        {[](Comm& c, Buffers& b) { return c.all_to_all_single(b.f32_out(512), b.f32_in(512)); },
         "all_to_all_single", "(512 x float)"}}},
      {"barrier against a flat all_reduce",
       {{[](Comm& c, Buffers&) { return c.barrier(); }, "barrier", ""},
        {ar(1024, ReduceOp::SUM, "flat"), "all_reduce", "(sum, 1024 x float)"}}},
  };
}

void fill_buffers(Buffers& b, int rank) {
  std::vector<float> in(kElems);
  for (int64_t i = 0; i < kElems; ++i) in[i] = pattern(rank, i);
  CU(cudaMemcpy(b.in.p, in.data(), kElems * 4, cudaMemcpyHostToDevice));
  CU(cudaMemset(b.out.p, 0xab, kElems * 4));
}

// No byte of `b` changed but what the op may write from this rank's own input (a local copy
// into the output), and nothing of the peer's arrived.
void check_untouched(const Buffers& b, int rank, const std::string& what) {
  std::vector<float> in(kElems), out(kElems);
  CU(cudaMemcpy(in.data(), b.in.p, kElems * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(out.data(), b.out.p, kElems * 4, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < kElems; ++i)
    RANK_CHECK(in[i] == pattern(rank, i), what + ": input changed at " + std::to_string(i));
  const float lo = pattern(1 - rank, 0), hi = pattern(1 - rank, kElems);
  for (int64_t i = 0; i < kElems; ++i)
    RANK_CHECK(!(out[i] >= lo && out[i] < hi), what + ": the peer's data reached the output at " +
                                                  std::to_string(i));
}

// The words of the mismatch error `me` must see: both calls, each as its rank issued it.
std::vector<std::string> needles(const Case& k, int me) {
  const Call& mine = k.calls[me];
  const Call& theirs = k.calls[1 - me];
  auto after = [](const Call& c) { return c.args.empty() ? std::string() : " " + c.args; };
  return {"rank " + std::to_string(me) + " called " + mine.name + " #",
          after(mine) + " but rank " + std::to_string(1 - me) + " called " + theirs.name + " #",
          after(theirs) + ": the ranks' calls do not match"};
}

void expect_mismatch_error(const std::function<void()>& fn, const std::vector<std::string>& want,
                           const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    RANK_CHECK(e.code() == ErrorCode::kInvalidArgument, what + ": wrong error code: " + m);
    for (const std::string& n : want)
      RANK_CHECK(m.find(n) != std::string::npos, what + ": no '" + n + "' in: " + m);
    return;
  }
  RANK_CHECK(false, what + ": no error");
}

// Two matching all_reduces first (checked), so the mismatch is not the comm's first op.
void warm_up(Comm& c, Buffers& b, int rank) {
  for (int i = 0; i < 2; ++i) {
    fill_buffers(b, rank);
    all_reduce(c, b, 16, ReduceOp::SUM, "ll").wait_blocking();
    CU(cudaDeviceSynchronize());
    std::vector<float> got(16);
    CU(cudaMemcpy(got.data(), b.in.p, 64, cudaMemcpyDeviceToHost));
    for (int64_t e = 0; e < 16; ++e)
      RANK_CHECK(got[e] == pattern(0, e) + pattern(1, e), "warm-up all_reduce result");
  }
  fill_buffers(b, rank);
}

// After the mismatch the comm is failed: a matching op throws at once, naming the earlier error.
void expect_failed_comm(Comm& c, Buffers& b, const std::string& what) {
  expect_mismatch_error([&] { all_reduce(c, b, 16, ReduceOp::SUM, "ll").wait_blocking(); },
                        {"an earlier op failed", "the ranks' calls do not match"},
                        what + ": the next op");
}

TEST(CudaCallCheck, EveryKernelReportsBothCalls) {
  REQUIRE_GPUS(1);
  const std::vector<Case> all = cases();
  std::string err = run_ranks(2, two_gpus(), [&](RankCtx& ctx) {
    for (size_t i = 0; i < all.size(); ++i) {
      const Case& k = all[i];
      stage(k.what, [&] {
        auto c = make_comm(ctx, "cuda", "mismatch" + std::to_string(i), {}, std::chrono::seconds(5));
        Buffers b{Device::cuda(ctx.device)};
        warm_up(*c, b, ctx.rank);
        expect_mismatch_error([&] { k.calls[ctx.rank].issue(*c, b).wait_blocking(); },
                              needles(k, ctx.rank), k.what);
        CU(cudaDeviceSynchronize());
        check_untouched(b, ctx.rank, k.what);
        expect_failed_comm(*c, b, k.what);
      });
    }
  }, std::chrono::seconds(240));
  EXPECT_EQ(err, "");
}

// Captured calls carry their check into every replay: the host is not there to compare them.
TEST(CudaCallCheck, GraphReplayOfMismatchedCalls) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "graph_mismatch", {}, std::chrono::seconds(5));
    Buffers b{Device::cuda(ctx.device)};
    CU(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    warm_up(*c, b, ctx.rank);
    // A matching captured op first: it replays correctly, then the mismatched one fails.
    cudaGraph_t graph;
    CU(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
    all_reduce(*c, b, 16, ReduceOp::SUM, "ll");
    CU(cudaStreamEndCapture(b.stream, &graph));
    cudaGraphExec_t exec;
    CU(cudaGraphInstantiate(&exec, graph, 0));
    fill_buffers(b, ctx.rank);
    CU(cudaGraphLaunch(exec, b.stream));
    CU(cudaStreamSynchronize(b.stream));
    std::vector<float> got(16);
    CU(cudaMemcpy(got.data(), b.in.p, 64, cudaMemcpyDeviceToHost));
    for (int64_t e = 0; e < 16; ++e)
      RANK_CHECK(got[e] == pattern(0, e) + pattern(1, e), "matching graph replay result");

    const ReduceOp op = ctx.rank == 0 ? ReduceOp::SUM : ReduceOp::MAX;
    cudaGraph_t bad;
    CU(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
    all_reduce(*c, b, 1024, op, "ll");
    CU(cudaStreamEndCapture(b.stream, &bad));
    cudaGraphExec_t bad_exec;
    CU(cudaGraphInstantiate(&bad_exec, bad, 0));
    fill_buffers(b, ctx.rank);
    CU(cudaGraphLaunch(bad_exec, b.stream));
    CU(cudaStreamSynchronize(b.stream));  // the kernel ends: it found the mismatch
    check_untouched(b, ctx.rank, "graph replay");
    const Case k{"graph", {{nullptr, "all_reduce", "(sum, 1024 x float)"},
                           {nullptr, "all_reduce", "(max, 1024 x float)"}}};
    std::vector<std::string> want = needles(k, ctx.rank);
    want.push_back("an earlier op failed");
    expect_mismatch_error([&] { all_reduce(*c, b, 16, ReduceOp::SUM, "ll").wait_blocking(); },
                          want, "the op after the replay");
    cudaGraphExecDestroy(exec);
    cudaGraphExecDestroy(bad_exec);
    cudaGraphDestroy(graph);
    cudaGraphDestroy(bad);
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace commx::testing
