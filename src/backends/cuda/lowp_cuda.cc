// Low-precision collectives of the cuda backend (see lowp_cuda.h). Each rank's data area is cut
// into slots, one per (sender, step); a chunk of every peer's data moves per round:
//   all_reduce:      encode the peers' slices into their recv slots | barrier | the owner sums its
//                    slice in FP32 (rank order) and encodes it into every rank's gather slot |
//                    barrier | everyone decodes all gather slots.
//   reduce_scatter:  the first half, the FP32 sum rounded into the output.
//   all_gather:      encode the input once into every rank's slot | barrier | decode all slots.
//   all_to_all:      encode chunk q into rank q's slot | barrier | decode (own chunk: a copy).
// A barrier before the first round (peers are done with the previous op's buffers) and after
// each round's reads (the next round or op may overwrite the slots) keeps the buffers safe.
// Layer: backends (cuda).
#include "cuda/lowp_cuda.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "commx/error.h"
#include "core/env.h"
#include "cuda/kernels.h"
#include "cuda_common/cuda_util.h"
#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/cuda/fp8_collective_cuda.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_dispatch.h"

namespace commx::cuda {
namespace {

using lowp::gpu::DecodeBatch;
using lowp::gpu::EncodeBatch;
using lowp::gpu::ReduceSrc;

// One rank's share of a list or single-tensor operand: a device pointer and a count.
struct Part {
  char* p = nullptr;
  int64_t n = 0;
};

std::vector<Part> parts_of(const std::vector<Tensor>& ts) {
  std::vector<Part> v;
  for (const Tensor& t : ts) v.push_back({static_cast<char*>(t.data), t.count});
  return v;
}

std::vector<Part> split_even(const Tensor& t, int world) {
  std::vector<Part> v;
  const int64_t each = t.count / world;
  const size_t es = dtype_size(t.dtype);
  for (int q = 0; q < world; ++q) v.push_back({static_cast<char*>(t.data) + q * each * es, each});
  return v;
}

int64_t clamp_len(int64_t len, int64_t from, int64_t most) {
  return std::max<int64_t>(0, std::min(most, len - from));
}

// What every step of one op needs.
struct Steps {
  const PeerSet& ps;
  cudaStream_t s;
  const std::string& where;
  const lowp::LowpPlan& plan;
  unsigned long long* stats;
  uint64_t seq;
  DataType dtype;
  size_t es;
  uint64_t cap = 0;   // bytes per slot
  int64_t chunk = 0;  // elements per slot and round

  // Cuts each rank's `area` into `slots` slots holding `terms` encoded chunks each.
  void layout(uint64_t area, int slots, int terms) {
    cap = (area / slots) & ~uint64_t(255);
    const int64_t b = plan.codec.block;
    chunk = static_cast<int64_t>(cap / terms / static_cast<uint64_t>(b + 4)) * b;
    if (chunk <= 0)
      throw Error(ErrorCode::kInvalidArgument,
                  where + "the registered buffer is too small for low-precision chunks "
                          "(raise COMMX_CUDA_BUFFER_BYTES)");
  }
  uint8_t* slot(int rank, int index) const {
    return reinterpret_cast<uint8_t*>(ps.data[rank]) + static_cast<uint64_t>(index) * cap;
  }
  uint64_t sr(int phase) const { return lowp::sr_stream_of(seq, phase, ps.rank); }
  void check(cudaError_t e) const { COMMX_CUDA_CHECK_CTX(e, where); }
  void barrier() const {
    launch_barrier(ps, s);
    check(cudaGetLastError());
  }
  void encode(const EncodeBatch& b, int phase) const {
    if (b.count) check(lowp::gpu::encode_batch(b, dtype, plan.codec, sr(phase), stats, s));
  }
  void decode(const DecodeBatch& b, bool two_term) const {
    if (b.count) check(lowp::gpu::decode_batch(b, dtype, plan.codec, two_term, s));
  }
  // Adds an item to a batch (nothing when it is empty).
  static void add(EncodeBatch& b, const char* src, uint8_t* dst, int64_t n, int64_t sr_off) {
    if (n <= 0) return;
    auto& it = b.item[b.count++];
    it = {};
    it.src = src;
    it.dst[0] = dst;
    it.ndst = 1;
    it.n = n;
    it.sr_offset = sr_off;
  }
  static void add(DecodeBatch& b, const uint8_t* enc, char* dst, int64_t n) {
    if (n > 0) b.item[b.count++] = {enc, dst, n};
  }
  ReduceSrc reduce_src(const char* own, int64_t n, bool avg) const {
    ReduceSrc r{};
    r.own = own;
    for (int p = 0; p < ps.world; ++p) r.recv[p] = slot(ps.rank, p);
    r.rank = ps.rank;
    r.world = ps.world;
    r.n = n;
    r.avg = avg;
    return r;
  }
};

void all_reduce(Steps& st, const Tensor& in, const Tensor& out, bool avg) {
  const int w = st.ps.world, me = st.ps.rank;
  const bool two = st.plan.two_term_gather;
  st.layout(2 * st.ps.half_bytes, 2 * w, two ? 2 : 1);  // recv slots 0..w-1, gather slots w..2w-1
  const lowp::LowpSlices sl(in.count, st.plan.codec.block, w);
  const int64_t longest = *std::max_element(sl.len.begin(), sl.len.end());
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  st.barrier();
  for (int64_t c0 = 0; c0 < longest; c0 += st.chunk) {
    EncodeBatch eb{};
    for (int q = 0; q < w; ++q)
      if (q != me)
        Steps::add(eb, src + (sl.off[q] + c0) * st.es, st.slot(q, me),
                   clamp_len(sl.len[q], c0, st.chunk), c0);
    st.encode(eb, 0);
    st.barrier();
    const int64_t mine = clamp_len(sl.len[me], c0, st.chunk);
    if (mine > 0) {
      uint8_t* gather[kMaxRanks];
      for (int r = 0; r < w; ++r) gather[r] = st.slot(r, w + me);
      st.check(lowp::gpu::reduce_encode(st.reduce_src(src + (sl.off[me] + c0) * st.es, mine, avg),
                                        st.dtype, st.plan.codec, two, gather, w, st.sr(1),
                                        st.sr(4), sl.off[me] + c0, st.stats, st.s));
    }
    st.barrier();
    DecodeBatch db{};
    for (int q = 0; q < w; ++q)
      Steps::add(db, st.slot(me, w + q), dst + (sl.off[q] + c0) * st.es,
                 clamp_len(sl.len[q], c0, st.chunk));
    st.decode(db, two);
  }
  st.barrier();
}

void reduce_scatter(Steps& st, const std::vector<Part>& ins, const Tensor& out, bool avg) {
  const int w = st.ps.world, me = st.ps.rank;
  st.layout(2 * st.ps.half_bytes, w, 1);
  st.barrier();
  for (int64_t c0 = 0; c0 < out.count; c0 += st.chunk) {
    const int64_t m = std::min(st.chunk, out.count - c0);
    EncodeBatch eb{};
    for (int q = 0; q < w; ++q)
      if (q != me) Steps::add(eb, ins[q].p + c0 * st.es, st.slot(q, me), m, c0);
    st.encode(eb, 0);
    st.barrier();
    st.check(lowp::gpu::reduce_store(st.reduce_src(ins[me].p + c0 * st.es, m, avg), st.dtype,
                                     st.plan.codec, static_cast<char*>(out.data) + c0 * st.es,
                                     st.s));
    st.barrier();
  }
}

void all_gather(Steps& st, const Tensor& in, const std::vector<Part>& outs) {
  const int w = st.ps.world, me = st.ps.rank;
  st.layout(2 * st.ps.half_bytes, w, 1);
  st.barrier();
  for (int64_t c0 = 0; c0 < in.count; c0 += st.chunk) {
    const int64_t m = std::min(st.chunk, in.count - c0);
    EncodeBatch eb{};
    Steps::add(eb, static_cast<const char*>(in.data) + c0 * st.es, st.slot(0, me), m, c0);
    for (int r = 0; r < w; ++r) eb.item[0].dst[r] = st.slot(r, me);
    eb.item[0].ndst = w;
    st.encode(eb, 2);
    st.barrier();
    DecodeBatch db{};
    for (int q = 0; q < w; ++q) Steps::add(db, st.slot(me, q), outs[q].p + c0 * st.es, m);
    st.decode(db, false);
    st.barrier();
  }
}

void all_to_all(Steps& st, const std::vector<Part>& ins, const std::vector<Part>& outs) {
  const int w = st.ps.world, me = st.ps.rank;
  st.layout(2 * st.ps.half_bytes, w, 1);
  if (ins[me].n > 0 && ins[me].p != outs[me].p)
    st.check(cudaMemcpyAsync(outs[me].p, ins[me].p, ins[me].n * st.es, cudaMemcpyDeviceToDevice,
                             st.s));
  int64_t longest = 0;
  for (int q = 0; q < w; ++q)
    if (q != me) longest = std::max({longest, ins[q].n, outs[q].n});
  st.barrier();
  for (int64_t c0 = 0; c0 < longest; c0 += st.chunk) {
    EncodeBatch eb{};
    for (int q = 0; q < w; ++q)
      if (q != me)
        Steps::add(eb, ins[q].p + c0 * st.es, st.slot(q, me), clamp_len(ins[q].n, c0, st.chunk),
                   c0);
    st.encode(eb, 3);
    st.barrier();
    DecodeBatch db{};
    for (int q = 0; q < w; ++q)
      if (q != me)
        Steps::add(db, st.slot(me, q), outs[q].p + c0 * st.es, clamp_len(outs[q].n, c0, st.chunk));
    st.decode(db, false);
    st.barrier();
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

bool LowpCuda::maybe_enqueue(const OpDesc& op, const PeerSet& ps, cudaStream_t s,
                             const std::string& where) {
  const int w = ps.world;
  const DataType dtype = lowp::lowp_op_dtype(op);
  auto plan = lowp::lowp_choice(settings_, op.type, dtype, op.op, lowp::lowp_op_bytes(op, w),
                                op.hints, where);
  if (!plan) return false;
  Steps st{ps, s, where, *plan, d_stats_, op.seq, dtype, dtype_size(dtype)};
  const bool avg = op.op.kind == ReduceKind::kAvg;
  switch (op.type) {
    case OpType::kAllReduce:
      all_reduce(st, op.input, op.output, avg);
      break;
    case OpType::kReduceScatter:
      reduce_scatter(st, parts_of(op.inputs), op.output, avg);
      break;
    case OpType::kReduceScatterSingle:
      reduce_scatter(st, split_even(op.input, w), op.output, avg);
      break;
    case OpType::kAllGather:
      all_gather(st, op.input, parts_of(op.outputs));
      break;
    case OpType::kAllGatherSingle:
      all_gather(st, op.input, split_even(op.output, w));
      break;
    case OpType::kAllToAll:
      all_to_all(st, parts_of(op.inputs), parts_of(op.outputs));
      break;
    case OpType::kAllToAllSingle:
      all_to_all(st, split_even(op.input, w), split_even(op.output, w));
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
  if (st.saturated > 0 || (st.elements > 0 && env_bool("COMMX_LOW_PRECISION_STATS", false)))
    std::fprintf(stderr,
                 "commx lowp (cuda): %llu elements encoded, %llu saturated, %llu underflowed to "
                 "0, %llu NaN/Inf in %llu blocks\n",
                 static_cast<unsigned long long>(st.elements),
                 static_cast<unsigned long long>(st.saturated),
                 static_cast<unsigned long long>(st.underflow),
                 static_cast<unsigned long long>(st.nonfinite_values),
                 static_cast<unsigned long long>(st.nonfinite_blocks));
  cudaFree(d_stats_);
  d_stats_ = nullptr;
}

}  // namespace commx::cuda
