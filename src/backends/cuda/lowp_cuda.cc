// Low-precision collectives of the cuda backend (see lowp_cuda.h). Each rank's data area (both
// halves of the registered buffer) is cut into slots, one per peer that sends to it (all_gather:
// one per rank; all_reduce: plus one per owner for the gather); a round moves one chunk of every
// rank's data through them in the fused kernel (lowp_kernels.h): encode and write to the
// destination slots, barrier, (reduce and re-encode or round,) barrier, decode. With slots in the
// op counter's half (the default) one launch runs every round of the op, alternating halves; else
// one launch per round (an all_reduce that both halves hold in one round takes them:
// Rounds::layout).
// Layer: backends (cuda).
#include "cuda/lowp_cuda.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include "commx/error.h"
#include "commx/env.h"
#include "cuda/kernels.h"
#include "cuda/lowp_kernels.h"
#include "cuda/lowp_slots.h"
#include "cuda/tuning.h"
#include "cuda_common/cuda_util.h"
#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_dispatch.h"

namespace commx::cuda {
namespace {

// The device address of element `elem` of t.
char* elem_ptr(const Tensor& t, int64_t elem) {
  return static_cast<char*>(t.data) + elem * static_cast<int64_t>(dtype_size(t.dtype));
}

int64_t clamp_len(int64_t len, int64_t from, int64_t most) {
  return std::max<int64_t>(0, std::min(most, len - from));
}

// What every round of one op needs.
struct Rounds {
  const PeerSet& ps;
  cudaStream_t s;
  const std::string& where;
  const lowp::LowpPlan& plan;
  unsigned long long* stats;
  uint64_t seq;
  DataType dtype;
  int max_blocks;
  uint64_t cap = 0;   // bytes per slot
  int64_t chunk = 0;  // elements per slot and round
  int64_t step = 0;   // elements per launch: every round (halves) or one
  bool halves = true;  // this op's slots in one buffer half (see layout)

  // Cuts each rank's data area (the op counter's half: COMMX_CUDA_LOWP_HALVES=1, the default;
  // both halves, with barriers at both ends of an op: 0) into `slots` slots holding `terms`
  // encoded chunks each (lowp_slots.h). An all_reduce whose longest range is `longest` elements
  // takes both halves when they hold it in one round where one half would take two or more.
  void layout(int slots, int terms, int64_t longest = 0) {
    const int64_t b = plan.codec.block;
    halves = halves_setting() &&
             !(longest > 0 && lowp_all_reduce_both_halves(ps.half_bytes, slots, terms, b, longest));
    const LowpSlots sl = lowp_slots((halves ? 1 : 2) * ps.half_bytes, slots, terms, b);
    cap = sl.cap;
    chunk = sl.chunk;
    if (chunk <= 0)
      throw Error(ErrorCode::kInvalidArgument,
                  where + "the registered buffer is too small for low-precision chunks "
                          "(raise COMMX_CUDA_BUFFER_BYTES)");
    step = halves ? std::numeric_limits<int64_t>::max() / 2 : chunk;
  }
  static bool halves_setting() {
    static const bool on = env_bool("COMMX_CUDA_LOWP_HALVES", true);
    return on;
  }
  // 0: no line streams, 1: all_reduce's gather, 2: its P1 too (2 ranks).
  static int lines_setting() {
    static const int v = static_cast<int>(env_int("COMMX_CUDA_LOWP_LINES", 2));
    return v;
  }
  uint64_t sr(int phase) const { return lowp::sr_stream_of(seq, phase, ps.rank); }
  LowpRound round(LowpMode mode) const {
    LowpRound r{};
    r.mode = mode;
    r.halves = halves;
    r.lines = lines_setting() >= 1 && ps.half_bytes % kLL128Line == 0 && cap % kLL128Line == 0;
    r.lines_p1 = lines_setting() >= 2;
    r.cap = cap;
    r.seed = plan.codec.seed;
    r.stats = stats;
    // Saturation is always counted; elements, underflows and NaN/Inf only when asked for (they
    // cost the kernels 0-4%).
    r.full_stats = lowp::lowp_stats_requested();
    return r;
  }
  // Grid: every codec block of the largest chunk gets a warp, up to max_blocks blocks of threads.
  // A function of sizes every rank knows (the per-block barriers need the same grid everywhere).
  int grid(int64_t elements) const {
    const int64_t units = (elements + plan.codec.block - 1) / plan.codec.block;
    const int64_t g = (units + kThreads / 32 - 1) / (kThreads / 32);
    return static_cast<int>(std::clamp<int64_t>(g, 1, max_blocks));
  }
  // The rounds of one launch from element c0 of `total` (the longest per-rank length; the same on
  // every rank); r's counts are what is left of each range from c0 (the kernel cuts the rounds).
  void launch(const LowpRound& r, int64_t c0, int64_t total) const {
    LowpRound x = r;
    x.chunk = chunk;
    x.rounds = (std::min(step, total - c0) + chunk - 1) / chunk;
    x.leading = c0 == 0;
    x.trailing = c0 + step >= total;
    COMMX_CUDA_CHECK_CTX(
        launch_lowp_round(ps, x, dtype, plan.codec, grid(std::min(chunk, total)), s), where);
  }
};

// Blocks of threads the FP8 kernel runs at once, which cap its grid (launch_rounds): one or two
// per SM, as COMMX_CUDA_LOWP_BLOCKS_PER_SM says.
int resident_lowp_blocks() {
  static const int n = [] {
    int dev = 0, sms = 1;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    return sms * static_cast<int>(env_int("COMMX_CUDA_LOWP_BLOCKS_PER_SM", 1));
  }();
  return n;
}

void all_reduce(Rounds& rd, const Tensor& in, const Tensor& out, bool avg) {
  const int w = rd.ps.world, me = rd.ps.rank;
  const bool two = rd.plan.two_term_gather;
  const lowp::LowpSlices sl(in.count, rd.plan.codec.block, w);
  const int64_t longest = *std::max_element(sl.len.begin(), sl.len.end());
  rd.layout(2 * w - 1, two ? 2 : 1, longest);  // a recv slot per peer, then a gather slot per owner
  LowpRound r = rd.round(LowpMode::kAllReduce);
  r.recv_off = 0;
  r.gather_off = static_cast<uint64_t>(w - 1) * rd.cap;
  r.avg = avg;
  r.two_term = two;
  // Line streams only for the one-term gather (with two terms they were level to 3% slower) and
  // up to line_units units a warp (COMMX_CUDA_LOWP_LINE_UNITS): their bytes (about 7% more) then
  // cost less than the barriers they save. In the round kernel at 4 units (f32 at 2 ranks:
  // 16 MiB, 2 units, 4-9% faster; 64 MiB, 8 units, 4% slower;
  // bench/results/h200x2_2026-11-28/0235_fp8_lines); in the two-rank kernel at 8 a round (bf16
  // 32 MiB and f32 64 MiB, 8 units, 20-23% faster than the round kernel without lines:
  // bench/results/h200x2_2026-11-28/0800_fp8_two_rank_kernel).
  static const int64_t units_setting = env_int("COMMX_CUDA_LOWP_LINE_UNITS", 0);
  const int64_t line_units = units_setting > 0 ? units_setting : (w == 2 ? 8 : 4);
  const int64_t warps =
      static_cast<int64_t>(std::min(rd.grid(std::min(rd.chunk, longest)), resident_lowp_blocks())) *
      (kThreads / 32);
  r.line_units = r.lines && r.lines_p1 && !two ? line_units : 0;
  r.lines = r.lines && !two && (longest / 512 + warps - 1) / warps <= line_units;
  r.sr1 = rd.sr(0);
  r.sr2 = rd.sr(1);
  r.sr2b = rd.sr(4);
  for (int64_t c0 = 0; c0 < longest; c0 += rd.step) {
    for (int q = 0; q < w; ++q) {
      const int64_t m = clamp_len(sl.len[q], c0, rd.step);
      r.in[q] = elem_ptr(in, sl.off[q] + c0);
      r.n_in[q] = q == me ? 0 : m;
      r.out[q] = elem_ptr(out, sl.off[q] + c0);
      r.n_out[q] = m;
    }
    r.own = elem_ptr(in, sl.off[me] + c0);
    r.n_own = clamp_len(sl.len[me], c0, rd.step);
    r.sr_off1 = c0;
    r.sr_off2 = sl.off[me] + c0;
    rd.launch(r, c0, longest);
  }
}

void reduce_scatter(Rounds& rd, const std::vector<Tensor>& ins, const Tensor& out, bool avg) {
  const int w = rd.ps.world, me = rd.ps.rank;
  rd.layout(std::max(1, w - 1), 1);  // a recv slot per peer
  LowpRound r = rd.round(LowpMode::kReduceScatter);
  r.avg = avg;
  r.sr1 = rd.sr(0);
  for (int64_t c0 = 0; c0 < out.count; c0 += rd.step) {
    const int64_t m = std::min(rd.step, out.count - c0);
    for (int q = 0; q < w; ++q) {
      r.in[q] = elem_ptr(ins[q], c0);
      r.n_in[q] = q == me ? 0 : m;
    }
    r.own = elem_ptr(ins[me], c0);
    r.n_own = m;
    r.out[me] = elem_ptr(out, c0);
    r.sr_off1 = c0;
    rd.launch(r, c0, out.count);
  }
}

void all_gather(Rounds& rd, const Tensor& in, const std::vector<Tensor>& outs) {
  const int w = rd.ps.world;
  rd.layout(w, 1);  // a recv slot per rank: each decodes its own codes too
  LowpRound r = rd.round(LowpMode::kAllGather);
  r.sr1 = rd.sr(2);
  for (int64_t c0 = 0; c0 < in.count; c0 += rd.step) {
    const int64_t m = std::min(rd.step, in.count - c0);
    r.in[0] = elem_ptr(in, c0);
    r.n_in[0] = m;
    for (int q = 0; q < w; ++q) {
      r.out[q] = elem_ptr(outs[q], c0);
      r.n_out[q] = m;
    }
    r.sr_off1 = c0;
    rd.launch(r, c0, in.count);
  }
}

void all_to_all(Rounds& rd, const std::vector<Tensor>& ins, const std::vector<Tensor>& outs) {
  const int w = rd.ps.world, me = rd.ps.rank;
  for (int q = 0; q < w; ++q)
    if (ins[q].count != ins[0].count || outs[q].count != ins[0].count)
      throw Error(ErrorCode::kUnsupported,
                  rd.where + "low-precision all_to_all on the cuda backend needs equal counts "
                             "for every pair (every rank must run the same rounds)");
  rd.layout(std::max(1, w - 1), 1);  // a recv slot per peer
  if (ins[me].count > 0 && ins[me].data != outs[me].data)
    COMMX_CUDA_CHECK_CTX(cudaMemcpyAsync(outs[me].data, ins[me].data, ins[me].nbytes(),
                                         cudaMemcpyDeviceToDevice, rd.s),
                         rd.where);
  const int64_t n = ins[0].count;
  LowpRound r = rd.round(LowpMode::kAllToAll);
  r.sr1 = rd.sr(3);
  for (int64_t c0 = 0; c0 < n; c0 += rd.step) {
    const int64_t m = std::min(rd.step, n - c0);
    for (int q = 0; q < w; ++q) {
      r.in[q] = elem_ptr(ins[q], c0);
      r.n_in[q] = q == me ? 0 : m;
      r.out[q] = elem_ptr(outs[q], c0);
      r.n_out[q] = q == me ? 0 : m;
    }
    r.sr_off1 = c0;
    rd.launch(r, c0, n);
  }
}

}  // namespace

void LowpCuda::init(const Hints& comm_hints, const std::string& where) {
  settings_ = lowp::resolve_lowp_settings(comm_hints);
  COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&d_stats_),
                                  lowp::gpu::kNumStats * sizeof(unsigned long long)),
                       where);
  COMMX_CUDA_CHECK_CTX(cudaMemset(d_stats_, 0, lowp::gpu::kNumStats * sizeof(unsigned long long)),
                       where);
}

std::optional<lowp::LowpPlan> LowpCuda::plan(const OpDesc& op, const std::string& where) const {
  return lowp::lowp_choice(settings_, op, where);
}

bool LowpCuda::maybe_enqueue(const OpDesc& op, const PeerSet& ps, int max_blocks,
                             cudaStream_t s, const std::string& where) {
  auto plan = this->plan(op, where);
  if (!plan) return false;
  const DataType dtype = op.dtype();
  Rounds rd{ps, s, where, *plan, d_stats_, op.seq, dtype, max_blocks};
  const bool avg = op.op.kind == ReduceKind::kAvg;
  switch (op.collective) {
    case Collective::kAllReduce:
      all_reduce(rd, op.input, op.output, avg);
      break;
    case Collective::kReduceScatter:
      reduce_scatter(rd, op.inputs, op.output, avg);
      break;
    case Collective::kAllGather:
      all_gather(rd, op.input, op.outputs);
      break;
    case Collective::kAllToAll:
      all_to_all(rd, op.inputs, op.outputs);
      break;
    default:
      throw Error(ErrorCode::kInternal, where + "no low-precision variant");  // not chosen
  }
  return true;
}

lowp::CodecStats LowpCuda::stats() const {
  lowp::CodecStats out;
  if (!d_stats_) return out;
  unsigned long long h[lowp::gpu::kNumStats] = {};
  if (cudaMemcpy(h, d_stats_, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess)
    lowp::gpu::stats_from_device(h, &out);
  return out;
}

void LowpCuda::close() {
  if (!d_stats_) return;
  // Saturation cannot happen to finite data with per-block scales; never let it pass silently.
  lowp::CodecStats st = stats();
  if (lowp::lowp_stats_requested() && st.elements > 0)
    std::fprintf(stderr,
                 "commx lowp (cuda): %llu elements encoded, %llu saturated, %llu underflowed to "
                 "0, %llu NaN/Inf in %llu blocks\n",
                 static_cast<unsigned long long>(st.elements),
                 static_cast<unsigned long long>(st.saturated),
                 static_cast<unsigned long long>(st.underflow),
                 static_cast<unsigned long long>(st.nonfinite_values),
                 static_cast<unsigned long long>(st.nonfinite_blocks));
  else if (st.saturated > 0)
    std::fprintf(stderr,
                 "commx lowp (cuda): %llu values saturated (COMMX_LOW_PRECISION_STATS=1 counts "
                 "elements, underflows and NaN/Inf too)\n",
                 static_cast<unsigned long long>(st.saturated));
  cudaFree(d_stats_);
  d_stats_ = nullptr;
}

}  // namespace commx::cuda
