// The hierarchical path's inter-host step in low precision: the link between hosts is the slow
// one, so that is where FP8 halves the bytes of bf16 (a quarter of f32). The same algorithm and
// bits as the host path's FP8 all_reduce and reduce_scatter (lowp_collectives.cc), with the hosts
// as its ranks: each host encodes the slices owned by the others once, an NCCL all_to_all moves
// them, the owner sums in FP32 in host order (its own slice exact); all_reduce re-encodes the sum
// once (two terms: value and residual), an NCCL all_gather moves it and every host decodes the
// same bytes. Everything is enqueued on the op's stream (graph-capturable).
// Layer: backends (cuda).
#include <algorithm>
#include <utility>

#include "cuda/hierarchy.h"
#include "cuda_common/cuda_util.h"
#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/lowp_collectives.h"

namespace commx::cuda {
namespace {

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

// The slices of the step (element offset and length per host) and where its bytes lie in the
// scratch buffer: send (the slices encoded for their owners, one stride each), recv (the peers'
// encodings of this host's slice), gather (every owner's re-encoded sum, `terms` strides each;
// all_reduce only), acc and tmp (FP32, the longest slice).
struct LowpStep {
  LowpStep(lowp::LowpSlices sl, int64_t block, int terms, bool gather)
      : slices(std::move(sl)), terms(terms) {
    const uint64_t h = slices.len.size();
    int64_t longest = 0;
    for (int64_t len : slices.len) longest = std::max(longest, len);
    stride = round_up(std::max<uint64_t>(lowp::encoded_bytes(longest, block), 1), 256);
    const uint64_t f32 = round_up(4 * static_cast<uint64_t>(longest), 256);
    recv = send + h * stride;
    gather_at = recv + h * stride;
    acc = gather_at + (gather ? h * terms * stride : 0);
    tmp = acc + f32;
    bytes = tmp + (gather ? f32 : 0);
  }
  lowp::LowpSlices slices;
  int terms;
  uint64_t stride = 0, send = 0, recv = 0, gather_at = 0, acc = 0, tmp = 0, bytes = 0;
};

// Encodes slice p of `in` for host p, exchanges them (all_to_all through `run_inter`), and sums
// this host's slice in FP32 into buf + st.acc, in host order with the own slice added exactly.
template <typename RunInter>
void reduce_to_owner(const OpDesc& op, const InterLowp& lp, const LowpStep& st, char* buf,
                     const char* in, DataType t, int host, cudaStream_t s,
                     const std::string& where, RunInter run_inter) {
  const lowp::CodecConfig& cfg = lp.plan.codec;
  const int hosts = static_cast<int>(st.slices.len.size());
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  for (int p = 0; p < hosts; ++p) {
    if (p == host) continue;
    COMMX_CUDA_CHECK_CTX(
        lowp::gpu::encode(in + st.slices.off[p] * es, t, st.slices.len[p],
                          reinterpret_cast<uint8_t*>(buf + st.send + p * st.stride), cfg, s,
                          lp.stats, lowp::sr_stream_of(op.seq, 0, host), 0),
        where + "inter-host FP8 encode: ");
  }
  OpDesc d;
  d.type = OpType::kAllToAllSingle;
  d.seq = op.seq;
  d.timeout = op.timeout;
  const int64_t all = static_cast<int64_t>(hosts * st.stride);
  d.input = Tensor(buf + st.send, all, DataType::kUInt8, op.output.device, s);
  d.output = Tensor(buf + st.recv, all, DataType::kUInt8, op.output.device, s);
  run_inter(std::move(d));
  const int64_t mine = st.slices.len[host];
  float* acc = reinterpret_cast<float*>(buf + st.acc);
  COMMX_CUDA_CHECK_CTX(cudaMemsetAsync(acc, 0, 4 * mine, s), where);
  for (int p = 0; p < hosts; ++p) {  // fixed order: host 0, 1, ...
    const auto* enc = reinterpret_cast<const uint8_t*>(buf + st.recv + p * st.stride);
    const cudaError_t e = p == host
                              ? lowp::gpu::add_own(acc, in + st.slices.off[host] * es, t, mine, s)
                              : lowp::gpu::accumulate(acc, enc, mine, cfg, s);
    COMMX_CUDA_CHECK_CTX(e, where + "inter-host FP8 sum: ");
  }
}

}  // namespace

void Hierarchy::inter_all_reduce_lowp(const OpDesc& op, const InterLowp& lp, const void* in,
                                      void* out, int64_t count, cudaStream_t s,
                                      const std::string& where) {
  const DataType t = op.input.dtype;
  const int hosts = layout_.hosts, host = layout_.host;
  const lowp::CodecConfig& cfg = lp.plan.codec;
  const LowpStep st(lowp::LowpSlices(count, cfg.block, hosts), cfg.block,
                    lp.plan.two_term_gather ? 2 : 1, true);
  bool async = false;
  char* buf = scratch(lowp_, st.bytes, is_capturing(s), s, &async, where);
  reduce_to_owner(op, lp, st, buf, static_cast<const char*>(in), t, host, s, where,
                  [this](OpDesc d) { run_inter(std::move(d)); });
  // Re-encode this host's sum once (two terms: the residual s - D(Q(s)) too), in place in the
  // gather area, which an all_gather then fills with every owner's.
  const int64_t mine = st.slices.len[host];
  const uint64_t per_host = st.terms * st.stride;
  auto gathered = [&](int p) { return reinterpret_cast<uint8_t*>(buf + st.gather_at + p * per_host); };
  float* acc = reinterpret_cast<float*>(buf + st.acc);
  float* tmp = reinterpret_cast<float*>(buf + st.tmp);
  const int64_t at = st.slices.off[host];
  COMMX_CUDA_CHECK_CTX(lowp::gpu::encode(acc, DataType::kFloat32, mine, gathered(host), cfg, s,
                                         lp.stats, lowp::sr_stream_of(op.seq, 1, host), at),
                       where + "inter-host FP8 encode: ");
  if (st.terms == 2) {
    COMMX_CUDA_CHECK_CTX(lowp::gpu::residual(acc, gathered(host), mine, cfg, tmp, s), where);
    COMMX_CUDA_CHECK_CTX(
        lowp::gpu::encode(tmp, DataType::kFloat32, mine, gathered(host) + st.stride, cfg, s,
                          lp.stats, lowp::sr_stream_of(op.seq, 4, host), at),
        where + "inter-host FP8 encode: ");
  }
  OpDesc d;
  d.type = OpType::kAllGatherSingle;
  d.seq = op.seq;
  d.timeout = op.timeout;
  const Device dev = op.input.device;
  d.input = Tensor(gathered(host), static_cast<int64_t>(per_host), DataType::kUInt8, dev, s);
  d.output = Tensor(gathered(0), static_cast<int64_t>(hosts * per_host), DataType::kUInt8, dev, s);
  run_inter(std::move(d));
  // Every host, this one included, decodes the same bytes: identical results everywhere.
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  for (int p = 0; p < hosts; ++p) {
    const int64_t m = st.slices.len[p];
    char* dst = static_cast<char*>(out) + st.slices.off[p] * es;
    if (st.terms == 1) {
      COMMX_CUDA_CHECK_CTX(lowp::gpu::decode(gathered(p), m, dst, t, cfg, s), where);
      continue;
    }
    COMMX_CUDA_CHECK_CTX(lowp::gpu::decode(gathered(p), m, tmp, DataType::kFloat32, cfg, s), where);
    COMMX_CUDA_CHECK_CTX(lowp::gpu::accumulate(tmp, gathered(p) + st.stride, m, cfg, s), where);
    COMMX_CUDA_CHECK_CTX(lowp::gpu::convert(tmp, m, dst, t, s), where);
  }
  if (async) COMMX_CUDA_CHECK_CTX(cudaFreeAsync(buf, s), where + "scratch: ");
}

void Hierarchy::inter_reduce_scatter_lowp(const OpDesc& op, const InterLowp& lp, const void* in,
                                          void* out, int64_t count, cudaStream_t s,
                                          const std::string& where) {
  const DataType t = op.output.dtype;
  const int hosts = layout_.hosts, host = layout_.host;
  // The slices are the chunks: chunk h (`count` elements) is host h's.
  lowp::LowpSlices chunks(0, lp.plan.codec.block, hosts);
  for (int p = 0; p < hosts; ++p) {
    chunks.off[p] = p * count;
    chunks.len[p] = count;
  }
  const LowpStep st(std::move(chunks), lp.plan.codec.block, 1, false);
  bool async = false;
  char* buf = scratch(lowp_, st.bytes, is_capturing(s), s, &async, where);
  reduce_to_owner(op, lp, st, buf, static_cast<const char*>(in), t, host, s, where,
                  [this](OpDesc d) { run_inter(std::move(d)); });
  COMMX_CUDA_CHECK_CTX(
      lowp::gpu::convert(reinterpret_cast<float*>(buf + st.acc), count, out, t, s), where);
  if (async) COMMX_CUDA_CHECK_CTX(cudaFreeAsync(buf, s), where + "scratch: ");
}

}  // namespace commx::cuda
