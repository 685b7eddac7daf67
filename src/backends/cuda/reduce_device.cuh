// The device reduction of the cuda backend: accumulation types, the reduction operators and
// accumulate(), the one rank-order fold every reducing kernel uses. Layer: backends (cuda).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace commx::cuda {

enum RedOp : int { kRedSum = 0, kRedProd = 1, kRedMin = 2, kRedMax = 3 };

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

}  // namespace commx::cuda
