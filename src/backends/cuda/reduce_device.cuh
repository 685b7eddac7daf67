// The device reduction of the cuda backend: accumulation types, the reduction operators and
// accumulate(), the one rank-order fold every reducing kernel uses; the Reducer that finishes a
// result, the rank-order reduction of packs in a buffer half, and the host's choice of the
// (element type, operator) instantiation a ReduceSpec names. Layer: backends (cuda).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "commx/error.h"
#include "cuda/kernels.h"
#include "cuda/protocol_simple.cuh"

namespace commx::cuda {

// f16/bf16 accumulate in float; the fixed rank order makes results bit-identical on all ranks.
template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };

template <typename T>
__device__ __forceinline__ typename AccOf<T>::type to_acc(T v) {
  return static_cast<typename AccOf<T>::type>(v);
}
template <> __device__ __forceinline__ float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_acc<__half, float>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

template <int OP, typename A>
__device__ __forceinline__ A combine(A a, A b) {
  if constexpr (OP == kRedSum) return a + b;
  if constexpr (OP == kRedProd) return a * b;
  if constexpr (OP == kRedMin) return b < a ? b : a;
  if constexpr (OP == kRedMax) return b > a ? b : a;
}

// Folds rank r's value into acc: every reduction of this backend visits the ranks in the order
// 0..world-1 through here, rank 0's value starting the sum, so every rank computes the same bits.
template <int OP, typename T, typename A>
__device__ __forceinline__ void accumulate(A& acc, T v, int r) {
  acc = r == 0 ? to_acc(v) : combine<OP>(acc, to_acc(v));
}
// The same per element of a pack or line. Written out, not through the scalar form: that call
// moved ptxas's allocation (flat_kernel<int64_t> 63 -> 64 registers, two_shot_kernel<float> more
// spills).
template <int OP, typename T, typename A, int N>
__device__ __forceinline__ void accumulate(A (&acc)[N], const T (&v)[N], int r) {
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = r == 0 ? to_acc(v[k]) : combine<OP>(acc[k], to_acc(v[k]));
}

// Applies the result scale (AVG: 1/world, PREMUL_SUM: factor) and converts back to T.
template <typename T, int OP>
struct Reducer {
  using A = typename AccOf<T>::type;
  A scale;
  bool scaled;
  __device__ __forceinline__ T finish(A v) const { return from_acc<T>(scaled ? v * scale : v); }
};

template <typename T, int OP>
Reducer<T, OP> reducer_of(const ReduceSpec& rs) {
  Reducer<T, OP> rd;
  rd.scale = static_cast<typename AccOf<T>::type>(rs.scale);
  rd.scaled = rs.scale != 1.0;
  return rd;
}

// Rank q's slot in rank r's buffer where r keeps one slot per peer (q != r): q's index among
// r's peers, so world - 1 slots hold them all.
__device__ __forceinline__ int peer_slot(int q, int r) { return q - (q > r); }

// The region of rank r's contribution in rank me's buffer half: r, or with a slot per peer
// peer_slot(r, me).
template <bool kPeerSlots = false>
__device__ __forceinline__ int region_of(int r, int me) {
  return kPeerSlots ? peer_slot(r, me) : r;
}

// The rank-order reduction of the simple-protocol kernels: element(s) e of each rank's
// contribution, rank `me`'s read from `own`, every other rank r's from region region_of(r, me)
// (`region` bytes apart) of this rank's buffer half `mine`, combined in the order 0..world-1
// (bit-identical on every rank).
template <typename T, int OP, bool kPeerSlots = false>
__device__ __forceinline__ void reduce_pack(const Reducer<T, OP>& rd, int world, int me,
                                            const T* own, bool aligned, const char* mine,
                                            uint64_t region, int64_t e, T (&v)[kPack<T>]) {
  using A = typename AccOf<T>::type;
  constexpr int P = kPack<T>;
  A acc[P];
  for (int r = 0; r < world; ++r) {
    if (r == me)
      load_pack(own + e, aligned, v);
    else
      load_pack(reinterpret_cast<const T*>(mine + region_of<kPeerSlots>(r, me) * region) + e, true,
                v);
    accumulate<OP>(acc, v, r);
  }
#pragma unroll
  for (int k = 0; k < P; ++k) v[k] = rd.finish(acc[k]);
}

template <typename T, int OP, bool kPeerSlots = false>
__device__ __forceinline__ T reduce_elem(const Reducer<T, OP>& rd, int world, int me, const T* own,
                                         const char* mine, uint64_t region, int64_t e) {
  typename AccOf<T>::type acc = 0;
  for (int r = 0; r < world; ++r) {
    T v = r == me ? own[e]
                  : reinterpret_cast<const T*>(mine + region_of<kPeerSlots>(r, me) * region)[e];
    accumulate<OP>(acc, v, r);
  }
  return rd.finish(acc);
}

// This block's part of the rank-order reduction of elements [0, n) (see reduce_pack), into out.
template <typename T, int OP>
__device__ __forceinline__ void reduce_block_into(const Reducer<T, OP>& rd, int world, int me,
                                                  const T* own, bool aligned, const char* mine,
                                                  uint64_t region, int64_t n, T* out) {
  for_block_packs<T>(
      n,
      [&](int64_t e) {
        T v[kPack<T>];
        reduce_pack(rd, world, me, own, aligned, mine, region, e, v);
        store_pack(out + e, aligned, v);
      },
      [&](int64_t e) { out[e] = reduce_elem(rd, world, me, own, mine, region, e); });
}

// Host side: calls f(ElemTag<T>{}, RedTag<OP>{}) with the element type and operator `rs` names,
// the one place where a ReduceSpec becomes a kernel's template arguments (the pairs
// native_reduce_supported admits; any other element type is an internal error).
template <typename T> struct ElemTag { using type = T; };
template <int OP> struct RedTag { static constexpr int value = OP; };

template <typename T, typename F>
void with_red_op(int red, F& f) {
  switch (red) {
    case kRedSum: return f(ElemTag<T>{}, RedTag<kRedSum>{});
    case kRedProd: return f(ElemTag<T>{}, RedTag<kRedProd>{});
    case kRedMin: return f(ElemTag<T>{}, RedTag<kRedMin>{});
    case kRedMax: return f(ElemTag<T>{}, RedTag<kRedMax>{});
  }
}

template <typename F>
void with_reduction(const ReduceSpec& rs, F&& f) {
  switch (rs.dtype) {
    case DataType::kFloat32: return with_red_op<float>(rs.red, f);
    case DataType::kFloat64: return with_red_op<double>(rs.red, f);
    case DataType::kFloat16: return with_red_op<__half>(rs.red, f);
    case DataType::kBFloat16: return with_red_op<__nv_bfloat16>(rs.red, f);
    case DataType::kInt32: return with_red_op<int32_t>(rs.red, f);
    case DataType::kInt64: return with_red_op<int64_t>(rs.red, f);
    default:
      throw Error(ErrorCode::kInternal, std::string("cuda kernels: no reduction for ") +
                                            dtype_name(rs.dtype));
  }
}

}  // namespace commx::cuda
