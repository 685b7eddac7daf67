// Low-precision collectives (FP8 on the wire, FP32 accumulation) over Transport::exchange().
// Layer: algorithms (low-precision). See lowp_collectives.h for the schedule of each op.
#include "lowp/lowp_collectives.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "commx/error.h"
#include "commx/numeric.h"

namespace commx::lowp {

namespace {

constexpr size_t kAlign = 64;
size_t round_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Every message starts with a tag naming the codec, so that ranks configured differently get a
// clear error instead of decoding garbage: 'L', format, 0, 0, block (uint32).
constexpr size_t kTag = 8;
void write_tag(uint8_t* p, const CodecConfig& cfg) {
  p[0] = 'L';
  p[1] = static_cast<uint8_t>(cfg.format);
  p[2] = p[3] = 0;
  uint32_t b = static_cast<uint32_t>(cfg.block);
  std::memcpy(p + 4, &b, 4);
}
void check_tag(const LowpContext& c, const uint8_t* p, int peer) {
  const CodecConfig& cfg = c.codec.config();
  uint32_t b;
  std::memcpy(&b, p + 4, 4);
  if (p[0] == 'L' && p[1] == static_cast<uint8_t>(cfg.format) && b == cfg.block) return;
  std::string theirs = p[0] != 'L' ? std::string("something that is not low-precision data")
                                   : std::string(fp8_format_name(static_cast<Fp8Format>(p[1]))) +
                                         " with block " + std::to_string(b);
  throw Error(ErrorCode::kInvalidArgument,
              c.ctx + "rank " + std::to_string(peer) + " sent " + theirs + " but this rank uses " +
                  fp8_format_name(cfg.format) + " with block " + std::to_string(cfg.block) +
                  ": all ranks need the same low-precision settings");
}

// Phases of an op draw distinct stochastic-rounding streams.
uint64_t stream_of(const LowpContext& c, int phase) {
  return sr_stream_of(c.sr_stream, phase, c.rank);
}

[[noreturn]] void fail(const LowpContext& c, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, c.ctx + what);
}

void check_tensor(const LowpContext& c, const Tensor& t, const char* what) {
  if (!codec_supports(t.dtype))
    throw Error(ErrorCode::kUnsupported, c.ctx + "low precision needs f32, bf16 or f16 " + what +
                                             ", not " + dtype_name(t.dtype));
  if (!t.device.is_cpu())
    fail(c, std::string("low-precision host path got a ") + what + " on " + t.device.str());
  if (t.count < 0) fail(c, std::string(what) + " has a negative count");
  if (t.count > 0 && t.data == nullptr) fail(c, std::string(what) + " has a null data pointer");
}

void check_list(const LowpContext& c, std::span<const Tensor> list, const Tensor& ref,
                const char* what) {
  if (static_cast<int>(list.size()) != c.size)
    fail(c, std::string(what) + " has " + std::to_string(list.size()) + " tensors, expected " +
                std::to_string(c.size));
  for (size_t i = 0; i < list.size(); ++i) {
    check_tensor(c, list[i], what);
    if (list[i].dtype != ref.dtype)
      fail(c, std::string(what) + "[" + std::to_string(i) + "] is " + dtype_name(list[i].dtype) +
                  ", expected " + dtype_name(ref.dtype));
  }
}

void exchange(const LowpContext& c, const std::vector<SendReq>& s, const std::vector<RecvReq>& r) {
  if (s.empty() && r.empty()) return;
  c.transport.exchange(s, r, c.deadline);
}

// The context's scratch, or one that lives as long as this op.
class Scratch {
 public:
  explicit Scratch(const LowpContext& c) : s_(c.scratch ? c.scratch : &local_) {}
  LowpScratch* operator->() { return s_; }

 private:
  LowpScratch local_;
  LowpScratch* s_;
};

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

const void* at(const Tensor& t, int64_t elem) {
  return static_cast<const char*>(t.data) + elem * static_cast<int64_t>(dtype_size(t.dtype));
}
void* at_mut(const Tensor& t, int64_t elem) {
  return static_cast<char*>(t.data) + elem * static_cast<int64_t>(dtype_size(t.dtype));
}

// Direct reduce-scatter of `n` elements: `slice_src(p)` is this rank's contribution for rank p,
// of `len(p)` elements. Returns the FP32 sum (divided by size for AVG) of this rank's slice, in
// the scratch's acc.
template <typename SrcFn, typename LenFn>
float* reduce_to_owner(const LowpContext& c, Scratch& sc, SrcFn slice_src, LenFn len,
                       DataType dtype, ReduceKind kind) {
  const Fp8Codec& codec = c.codec;
  const int64_t mine = len(c.rank);
  std::vector<size_t> soff(c.size + 1, 0);
  for (int p = 0; p < c.size; ++p)
    soff[p + 1] = soff[p] + (p == c.rank ? 0 : round_up(kTag + codec.encoded_bytes(len(p))));
  const size_t rstride = round_up(kTag + codec.encoded_bytes(mine));
  uint8_t* sendbuf = grow(sc->send, soff[c.size]);
  uint8_t* recvbuf = grow(sc->recv, rstride * c.size);

  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    if (len(p) > 0) {
      write_tag(sendbuf + soff[p], codec.config());
      codec.encode(slice_src(p), dtype, len(p), sendbuf + soff[p] + kTag, c.stats, stream_of(c, 0),
                   0);
      sends.push_back({p, sendbuf + soff[p], kTag + codec.encoded_bytes(len(p))});
    }
    if (mine > 0) recvs.push_back({p, recvbuf + rstride * p, kTag + codec.encoded_bytes(mine)});
  }
  exchange(c, sends, recvs);

  float* acc = grow(sc->acc, static_cast<size_t>(mine));
  if (mine == 0) return acc;
  std::fill(acc, acc + mine, 0.0f);
  float* own = grow(sc->tmp, static_cast<size_t>(mine));
  for (int p = 0; p < c.size; ++p) {  // fixed order: rank 0, 1, ...
    if (p == c.rank) {
      to_float(slice_src(p), dtype, mine, own);
      for (int64_t i = 0; i < mine; ++i) acc[i] = acc[i] + own[i];
    } else {
      check_tag(c, recvbuf + rstride * p, p);
      codec.accumulate(acc, recvbuf + rstride * p + kTag, mine);
    }
  }
  if (kind == ReduceKind::kAvg) {
    const float d = static_cast<float>(c.size);
    for (int64_t i = 0; i < mine; ++i) acc[i] = acc[i] / d;
  }
  return acc;
}

}  // namespace

LowpSlices::LowpSlices(int64_t n, int64_t block, int size) : off(size), len(size) {
  const int64_t nb = num_blocks(n, block);
  for (int r = 0; r < size; ++r) {
    int64_t b0 = nb * r / size, b1 = nb * (r + 1) / size;
    off[r] = std::min(n, b0 * block);
    len[r] = std::min(n, b1 * block) - off[r];
  }
}

void lowp_all_reduce(const LowpContext& c, const Tensor& in, const Tensor& out, ReduceKind kind) {
  check_tensor(c, in, "input");
  check_tensor(c, out, "output");
  if (in.count != out.count || in.dtype != out.dtype)
    fail(c, "all_reduce input and output differ in count or dtype");
  if (kind != ReduceKind::kSum && kind != ReduceKind::kAvg)
    throw Error(
        ErrorCode::kUnsupported,
        c.ctx + "low-precision all_reduce supports SUM and AVG, not " + reduce_kind_name(kind));
  const int64_t n = in.count;
  if (n == 0) return;
  const Fp8Codec& codec = c.codec;
  LowpSlices sl(n, codec.config().block, c.size);

  Scratch sc(c);
  float* acc = reduce_to_owner(
      c, sc, [&](int p) { return at(in, sl.off[p]); }, [&](int p) { return sl.len[p]; }, in.dtype,
      kind);

  // Re-quantize the reduced slice once; all ranks (this one included) decode these bytes.
  // Two-term: the residual s - D(Q(s)) follows as a second encoded chunk (0 where D(Q(s)) is not
  // finite, so that Inf stays Inf).
  const int terms = c.two_term_gather ? 2 : 1;
  auto gbytes = [&](int p) { return kTag + terms * codec.encoded_bytes(sl.len[p]); };
  std::vector<size_t> goff(c.size + 1, 0);
  for (int p = 0; p < c.size; ++p) goff[p + 1] = goff[p] + round_up(gbytes(p));
  uint8_t* gbuf = grow(sc->gather, goff[c.size]);
  const int64_t mine = sl.len[c.rank];
  uint8_t* my_msg = gbuf + goff[c.rank];
  uint8_t* my_enc = my_msg + kTag;
  if (mine > 0) {
    write_tag(my_msg, codec.config());
    codec.encode(acc, DataType::kFloat32, mine, my_enc, c.stats, stream_of(c, 1), sl.off[c.rank]);
    if (terms == 2) {
      float* d = grow(sc->tmp, static_cast<size_t>(mine));
      codec.decode(my_enc, mine, d, DataType::kFloat32);
      for (int64_t i = 0; i < mine; ++i) {
        bool finite = (float_bits(d[i]) & 0x7f800000u) != 0x7f800000u;
        d[i] = finite ? acc[i] - d[i] : 0.0f;
      }
      codec.encode(d, DataType::kFloat32, mine, my_enc + codec.encoded_bytes(mine), c.stats,
                   stream_of(c, 4), sl.off[c.rank]);
    }
  }

  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    if (mine > 0) sends.push_back({p, my_msg, gbytes(c.rank)});
    if (sl.len[p] > 0) recvs.push_back({p, gbuf + goff[p], gbytes(p)});
  }
  exchange(c, sends, recvs);
  for (int p = 0; p < c.size; ++p) {
    const int64_t m = sl.len[p];
    if (m == 0) continue;
    if (p != c.rank) check_tag(c, gbuf + goff[p], p);
    const uint8_t* e = gbuf + goff[p] + kTag;
    if (terms == 1) {
      codec.decode(e, m, at_mut(out, sl.off[p]), out.dtype);
    } else {
      float* d = grow(sc->tmp, static_cast<size_t>(m));
      codec.decode(e, m, d, DataType::kFloat32);
      codec.accumulate(d, e + codec.encoded_bytes(m), m);
      from_float(d, m, at_mut(out, sl.off[p]), out.dtype);
    }
  }
}

void lowp_reduce_scatter(const LowpContext& c, std::span<const Tensor> ins, const Tensor& out,
                         ReduceKind kind) {
  check_tensor(c, out, "output");
  check_list(c, ins, out, "inputs");
  for (int p = 0; p < c.size; ++p)
    if (ins[p].count != out.count)
      fail(c, "reduce_scatter inputs[" + std::to_string(p) + "] has " +
                  std::to_string(ins[p].count) + " elements, output has " +
                  std::to_string(out.count));
  if (kind != ReduceKind::kSum && kind != ReduceKind::kAvg)
    throw Error(
        ErrorCode::kUnsupported,
        c.ctx + "low-precision reduce_scatter supports SUM and AVG, not " + reduce_kind_name(kind));
  if (out.count == 0) return;
  Scratch sc(c);
  float* acc = reduce_to_owner(
      c, sc, [&](int p) { return static_cast<const void*>(ins[p].data); },
      [&](int) { return out.count; }, out.dtype, kind);
  from_float(acc, out.count, out.data, out.dtype);
}

void lowp_all_gather(const LowpContext& c, const Tensor& in, std::span<const Tensor> outs) {
  check_tensor(c, in, "input");
  check_list(c, outs, in, "outputs");
  for (int p = 0; p < c.size; ++p)
    if (outs[p].count != in.count)
      fail(c, "all_gather outputs[" + std::to_string(p) + "] has " + std::to_string(outs[p].count) +
                  " elements, input has " + std::to_string(in.count));
  const int64_t n = in.count;
  if (n == 0) return;
  const Fp8Codec& codec = c.codec;
  const size_t stride = round_up(kTag + codec.encoded_bytes(n));
  const size_t bytes = kTag + codec.encoded_bytes(n);
  Scratch sc(c);
  uint8_t* buf = grow(sc->gather, stride * c.size);
  uint8_t* mine = buf + stride * c.rank;
  write_tag(mine, codec.config());
  codec.encode(in.data, in.dtype, n, mine + kTag, c.stats, stream_of(c, 2), 0);
  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    sends.push_back({p, mine, bytes});
    recvs.push_back({p, buf + stride * p, bytes});
  }
  exchange(c, sends, recvs);
  for (int p = 0; p < c.size; ++p) {
    if (p != c.rank) check_tag(c, buf + stride * p, p);
    codec.decode(buf + stride * p + kTag, n, outs[p].data, outs[p].dtype);
  }
}

void lowp_all_to_all(const LowpContext& c, std::span<const Tensor> ins,
                     std::span<const Tensor> outs) {
  if (ins.empty()) fail(c, "all_to_all has no inputs");
  check_list(c, ins, ins[0], "inputs");
  check_list(c, outs, ins[0], "outputs");
  if (outs[c.rank].count != ins[c.rank].count)
    fail(c, "all_to_all inputs[" + std::to_string(c.rank) + "] has " +
                std::to_string(ins[c.rank].count) + " elements but outputs[" +
                std::to_string(c.rank) + "] has " + std::to_string(outs[c.rank].count));
  const Fp8Codec& codec = c.codec;
  // Each message starts with the tag and its element count, so that a disagreement is reported
  // clearly.
  constexpr size_t kHeader = kTag + 8;
  std::vector<size_t> soff(c.size + 1, 0), roff(c.size + 1, 0);
  for (int p = 0; p < c.size; ++p) {
    bool self = p == c.rank;
    soff[p + 1] = soff[p] + (self ? 0 : round_up(kHeader + codec.encoded_bytes(ins[p].count)));
    roff[p + 1] = roff[p] + (self ? 0 : round_up(kHeader + codec.encoded_bytes(outs[p].count)));
  }
  Scratch sc(c);
  uint8_t* sbuf = grow(sc->send, soff[c.size]);
  uint8_t* rbuf = grow(sc->recv, roff[c.size]);
  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    int64_t cnt = ins[p].count;
    write_tag(sbuf + soff[p], codec.config());
    std::memcpy(sbuf + soff[p] + kTag, &cnt, 8);
    if (cnt > 0)
      codec.encode(ins[p].data, ins[p].dtype, cnt, sbuf + soff[p] + kHeader, c.stats,
                   stream_of(c, 3), 0);
    sends.push_back({p, sbuf + soff[p], kHeader + codec.encoded_bytes(cnt)});
    recvs.push_back({p, rbuf + roff[p], kHeader + codec.encoded_bytes(outs[p].count)});
  }
  exchange(c, sends, recvs);
  if (ins[c.rank].count > 0 && outs[c.rank].data != ins[c.rank].data)
    std::memcpy(outs[c.rank].data, ins[c.rank].data, ins[c.rank].nbytes());
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    int64_t cnt;
    check_tag(c, rbuf + roff[p], p);
    std::memcpy(&cnt, rbuf + roff[p] + kTag, 8);
    if (cnt != outs[p].count)
      fail(c, "all_to_all: rank " + std::to_string(p) + " sent " + std::to_string(cnt) +
                  " elements but outputs[" + std::to_string(p) + "] has " +
                  std::to_string(outs[p].count));
    if (cnt > 0) codec.decode(rbuf + roff[p] + kHeader, cnt, outs[p].data, outs[p].dtype);
  }
}

}  // namespace commx::lowp
