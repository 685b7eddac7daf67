// Fused GPU steps of the low-precision collectives (see fp8_collective_cuda.h): batched encode and
// decode (one launch for all peers, blockIdx.y picks the item), and the owner's reduce fused with
// the re-encode, which recomputes the FP32 sums in each pass instead of storing them (the inputs of
// one block stay in L1 between passes). Layer: algorithms (low-precision, GPU).
#include "lowp/cuda/fp8_collective_cuda.h"
#include "lowp/cuda/fp8_device.cuh"

namespace commx::lowp::gpu {
namespace {

bool valid(const CodecConfig& cfg) {
  return cfg.block >= 16 && cfg.block <= kMaxBlock && cfg.block % 16 == 0;
}

unsigned grid_for_elements(int64_t n) {
  int64_t ctas = ((n + 3) / 4 + kThreads - 1) / kThreads;
  return static_cast<unsigned>(ctas < 65535 ? (ctas > 0 ? ctas : 1) : 65535);
}

unsigned grid_for_blocks(int64_t n, int64_t block) {
  int64_t nb = (n + block - 1) / block;
  int64_t ctas = (nb + kWarpsPerCta - 1) / kWarpsPerCta;
  return static_cast<unsigned>(ctas > 0 ? ctas : 1);
}

// Dispatches a functor templated on the element type and the format.
template <typename F>
cudaError_t with_types(DataType dtype, Fp8Format f, F&& fn) {
  const bool e5 = f == Fp8Format::kE5M2;
  switch (dtype) {
    case DataType::kFloat32:
      e5 ? fn(float{}, std::true_type{}) : fn(float{}, std::false_type{});
      break;
    case DataType::kBFloat16:
      e5 ? fn(__nv_bfloat16{}, std::true_type{}) : fn(__nv_bfloat16{}, std::false_type{});
      break;
    case DataType::kFloat16:
      e5 ? fn(__half{}, std::true_type{}) : fn(__half{}, std::false_type{});
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T, bool kE5, bool kSR>
__global__ void __launch_bounds__(kThreads)
    encode_batch_kernel(EncodeBatch b, int64_t block, unsigned long long* stats, uint64_t seed,
                        uint64_t stream) {
  const EncodeItem& it = b.item[blockIdx.y];
  const int64_t nb = (it.n + block - 1) / block;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (blk >= nb) return;
  const int64_t off = blk * block;
  const T* x = static_cast<const T*>(it.src) + off;
  const BufferSrc<T> in{x, (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0,
                        min(block, it.n - off)};
  EncDsts d{};
  for (int k = 0; k < it.ndst; ++k) d.p[k] = it.dst[k];
  d.count = it.ndst;
  encode_block_warp<kE5, kSR>(in, in.m, blk, nb, block, d, stats, seed, stream,
                              static_cast<uint64_t>(it.sr_offset + off));
  __threadfence_system();  // the destinations may be peers' memory, read after a barrier kernel
}

template <bool kE5>
__device__ __forceinline__ float decoded(const uint8_t* enc, int64_t nb, int64_t block,
                                         int64_t i) {
  return decode_one<kE5>(enc[nb * 4 + i], load_scale(enc, i / block));
}

template <typename T, bool kE5, bool kTwo>
__global__ void __launch_bounds__(kThreads)
    decode_batch_kernel(DecodeBatch b, int64_t block) {
  const DecodeItem& it = b.item[blockIdx.y];
  const int64_t n = it.n;
  const int64_t nb = (n + block - 1) / block;
  const uint8_t* e1 = it.enc;
  const uint8_t* e2 = it.enc + nb * 4 + n;  // Q2 follows Q1 (two-term)
  T* dst = static_cast<T*>(it.dst);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = decoded<kE5>(e1, nb, block, i);
    if constexpr (kTwo) v = __fadd_rn(v, decoded<kE5>(e2, nb, block, i));
    store_f<T>(dst, i, v);
  }
}

// The FP32 sum (AVG: mean) of element i of the slice, in the host path's order.
template <typename T, bool kE5>
__device__ __forceinline__ float reduced(const ReduceSrc& r, int64_t nb, int64_t block,
                                         int64_t i) {
  float acc = 0.0f;
  for (int p = 0; p < r.world; ++p) {
    float x = p == r.rank ? load_f<T>(static_cast<const T*>(r.own), i)
                          : decoded<kE5>(r.recv[p], nb, block, i);
    acc = __fadd_rn(acc, x);
  }
  return r.avg ? __fdiv_rn(acc, static_cast<float>(r.world)) : acc;
}

// Values of block `blk` of the reduced slice for encode_block_warp: the peers' scale words of the
// block are loaded once; full groups of 4 use one load per source.
template <typename T, bool kE5>
struct ReducedSrc {
  const ReduceSrc* r;
  int64_t nb, block, off, m;
  uint32_t sb[kMaxItems];
  bool vec;  // own and codes aligned for 4-element loads

  __device__ __forceinline__ ReducedSrc(const ReduceSrc* rs, int64_t nb_, int64_t block_,
                                        int64_t blk)
      : r(rs), nb(nb_), block(block_), off(blk * block_), m(min(block_, rs->n - blk * block_)) {
    vec = (reinterpret_cast<uintptr_t>(static_cast<const T*>(r->own) + off) % (4 * sizeof(T))) == 0;
    for (int p = 0; p < r->world; ++p) {
      sb[p] = p == r->rank ? 0u : load_scale(r->recv[p], blk);
      if (p != r->rank) vec = vec && (reinterpret_cast<uintptr_t>(r->recv[p] + nb * 4 + off) % 4) == 0;
    }
  }
  __device__ __forceinline__ float finish(float acc) const {
    return r->avg ? __fdiv_rn(acc, static_cast<float>(r->world)) : acc;
  }
  __device__ __forceinline__ float load1(int64_t i) const {
    float acc = 0.0f;
    for (int p = 0; p < r->world; ++p) {
      float x = p == r->rank ? load_f<T>(static_cast<const T*>(r->own), off + i)
                             : decode_one<kE5>(r->recv[p][nb * 4 + off + i], sb[p]);
      acc = __fadd_rn(acc, x);
    }
    return finish(acc);
  }
  __device__ __forceinline__ void load4(int64_t i, bool full, float v[4]) const {
    if (!full || !vec) {
      for (int j = 0; j < 4; ++j) v[j] = i + j < m ? load1(i + j) : 0.0f;
      return;
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int p = 0; p < r->world; ++p) {
      float x[4];
      if (p == r->rank) {
        load4v<T>(static_cast<const T*>(r->own) + off, i, true, x);
      } else {
        uint32_t w = *reinterpret_cast<const uint32_t*>(r->recv[p] + nb * 4 + off + i);
        for (int j = 0; j < 4; ++j) x[j] = decode_one<kE5>((w >> (8 * j)) & 0xff, sb[p]);
      }
      for (int j = 0; j < 4; ++j) acc[j] = __fadd_rn(acc[j], x[j]);
    }
    for (int j = 0; j < 4; ++j) v[j] = finish(acc[j]);
  }
};

// The residual acc - D(Q1) of the same block (0 where D(Q1) is not finite), Q1 recomputed from
// the block's code `c1`.
template <typename T, bool kE5, bool kSR>
struct ResidualSrc {
  ReducedSrc<T, kE5> a;
  BlockCode c1;
  uint64_t seed, stream, idx0;
  __device__ __forceinline__ float load1(int64_t i) const {
    const float x = a.load1(i);
    const float d = decode_one<kE5>(encode_one<kE5, kSR>(x, c1.inv, c1.flagged, seed, stream,
                                                          idx0 + i),
                                    c1.sb);
    return (f2u(d) & kInfBits) != kInfBits ? __fsub_rn(x, d) : 0.0f;
  }
  __device__ __forceinline__ void load4(int64_t i, bool, float v[4]) const {
    for (int j = 0; j < 4; ++j) v[j] = i + j < a.m ? load1(i + j) : 0.0f;
  }
};

template <typename T, bool kE5, bool kSR, bool kTwo>
__global__ void __launch_bounds__(kThreads)
    reduce_encode_kernel(ReduceSrc r, int64_t block, EncDsts d1, EncDsts d2,
                         unsigned long long* stats, uint64_t seed, uint64_t stream,
                         uint64_t stream2, int64_t sr_offset) {
  const int64_t nb = (r.n + block - 1) / block;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (blk >= nb) return;
  const int64_t off = blk * block;
  const ReducedSrc<T, kE5> a(&r, nb, block, blk);
  const uint64_t idx0 = static_cast<uint64_t>(sr_offset + off);
  const BlockCode c1 =
      encode_block_warp<kE5, kSR>(a, a.m, blk, nb, block, d1, stats, seed, stream, idx0);
  if constexpr (kTwo) {
    const ResidualSrc<T, kE5, kSR> res{a, c1, seed, stream, idx0};
    encode_block_warp<kE5, kSR>(res, a.m, blk, nb, block, d2, stats, seed, stream2, idx0);
  }
  __threadfence_system();  // as in encode_batch_kernel
}

template <typename T, bool kE5>
__global__ void __launch_bounds__(kThreads)
    reduce_store_kernel(ReduceSrc r, int64_t block, T* out) {
  const int64_t nb = (r.n + block - 1) / block;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < r.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_f<T>(out, i, reduced<T, kE5>(r, nb, block, i));
}

}  // namespace

cudaError_t encode_batch(const EncodeBatch& b, DataType dtype, const CodecConfig& cfg,
                         uint64_t sr_stream, unsigned long long* d_stats, cudaStream_t stream) {
  if (!valid(cfg) || b.count < 0 || b.count > kMaxItems) return cudaErrorInvalidValue;
  int64_t most = 0;
  for (int k = 0; k < b.count; ++k) most = b.item[k].n > most ? b.item[k].n : most;
  if (most == 0) return cudaSuccess;
  const dim3 grid(grid_for_blocks(most, cfg.block), static_cast<unsigned>(b.count));
  return with_types(dtype, cfg.format, [&](auto t, auto e5) {
    using T = decltype(t);
    if (cfg.stochastic)
      encode_batch_kernel<T, e5.value, true>
          <<<grid, kThreads, 0, stream>>>(b, cfg.block, d_stats, cfg.seed, sr_stream);
    else
      encode_batch_kernel<T, e5.value, false>
          <<<grid, kThreads, 0, stream>>>(b, cfg.block, d_stats, cfg.seed, sr_stream);
  });
}

cudaError_t decode_batch(const DecodeBatch& b, DataType dtype, const CodecConfig& cfg,
                         bool two_term, cudaStream_t stream) {
  if (!valid(cfg) || b.count < 0 || b.count > kMaxItems) return cudaErrorInvalidValue;
  int64_t most = 0;
  for (int k = 0; k < b.count; ++k) most = b.item[k].n > most ? b.item[k].n : most;
  if (most == 0) return cudaSuccess;
  const dim3 grid(grid_for_elements(4 * most), static_cast<unsigned>(b.count));
  return with_types(dtype, cfg.format, [&](auto t, auto e5) {
    using T = decltype(t);
    if (two_term)
      decode_batch_kernel<T, e5.value, true><<<grid, kThreads, 0, stream>>>(b, cfg.block);
    else
      decode_batch_kernel<T, e5.value, false><<<grid, kThreads, 0, stream>>>(b, cfg.block);
  });
}

cudaError_t reduce_encode(const ReduceSrc& r, DataType dtype, const CodecConfig& cfg,
                          bool two_term, uint8_t* const* dst, int ndst, uint64_t sr_stream,
                          uint64_t sr_stream2, int64_t sr_offset, unsigned long long* d_stats,
                          cudaStream_t stream) {
  if (!valid(cfg) || r.world < 1 || r.world > kMaxItems || ndst < 1 || ndst > kMaxDsts)
    return cudaErrorInvalidValue;
  if (r.n == 0) return cudaSuccess;
  // Q1 at dst[k], Q2 right after it.
  const size_t q1 = encoded_bytes(r.n, cfg.block);
  EncDsts d1{}, d2{};
  for (int k = 0; k < ndst; ++k) {
    d1.p[k] = dst[k];
    d2.p[k] = dst[k] + q1;
  }
  d1.count = d2.count = ndst;
  const unsigned grid = grid_for_blocks(r.n, cfg.block);
  return with_types(dtype, cfg.format, [&](auto t, auto e5) {
    using T = decltype(t);
    auto go = [&](auto sr, auto two) {
      reduce_encode_kernel<T, e5.value, sr.value, two.value><<<grid, kThreads, 0, stream>>>(
          r, cfg.block, d1, d2, d_stats, cfg.seed, sr_stream, sr_stream2, sr_offset);
    };
    if (cfg.stochastic)
      two_term ? go(std::true_type{}, std::true_type{}) : go(std::true_type{}, std::false_type{});
    else
      two_term ? go(std::false_type{}, std::true_type{}) : go(std::false_type{}, std::false_type{});
  });
}

cudaError_t reduce_store(const ReduceSrc& r, DataType dtype, const CodecConfig& cfg, void* out,
                         cudaStream_t stream) {
  if (!valid(cfg) || r.world < 1 || r.world > kMaxItems) return cudaErrorInvalidValue;
  if (r.n == 0) return cudaSuccess;
  return with_types(dtype, cfg.format, [&](auto t, auto e5) {
    using T = decltype(t);
    reduce_store_kernel<T, e5.value>
        <<<grid_for_elements(4 * r.n), kThreads, 0, stream>>>(r, cfg.block, static_cast<T*>(out));
  });
}

}  // namespace commx::lowp::gpu
