// The simple protocol of the cuda backend's kernels: 16-byte pack loads and stores, the split of
// a range among blocks (the same on every rank, so per-block barriers order every reuse) and the
// block copy built from them. Data moves with plain stores; a block barrier (sync_device.cuh)
// makes it visible. Layer: backends (cuda).
#pragma once

#include <cstdint>

namespace commx::cuda {

template <typename T> inline constexpr int kPack = 16 / sizeof(T);

// Loads kPack elements: one 16-byte access when `aligned`, else element by element.
template <typename T>
__device__ __forceinline__ void load_pack(const T* p, bool aligned, T (&v)[kPack<T>]) {
  if (aligned) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    memcpy(v, &u, 16);
  } else {
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) v[k] = p[k];
  }
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, bool aligned, const T (&v)[kPack<T>]) {
  if (aligned) {
    uint4 u;
    memcpy(&u, v, 16);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) p[k] = v[k];
  }
}

// Whether this block owns the tail of a range of `npacks` whole packs and `len` elements: the
// block that would own pack `npacks` if it were whole. So every pack-sized place of a range has
// the same owner whatever the range's length: a kernel that reuses a buffer region for pieces of
// different lengths (the two-shot in one launch) needs no more than per-block flags either.
template <typename T>
__device__ __forceinline__ bool owns_tail(int64_t npacks, int64_t len) {
  return npacks * kPack<T> < len &&
         blockIdx.x == static_cast<unsigned>((npacks / blockDim.x) % gridDim.x);
}

// Visits the part of [0, len) that this block owns: whole packs by grid-stride (pack j belongs to
// block (j / blockDim) % gridDim on every rank and in every phase, so per-block flags suffice),
// and the tail (len % kPack) element by element in the block owns_tail names.
template <typename T, typename FPack, typename FElem>
__device__ __forceinline__ void for_block_packs(int64_t len, FPack&& f_pack, FElem&& f_elem) {
  const int64_t npacks = len / kPack<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < npacks;
       j += stride)
    f_pack(j * kPack<T>);
  if (owns_tail<T>(npacks, len))
    for (int64_t e = npacks * kPack<T> + threadIdx.x; e < len; e += blockDim.x) f_elem(e);
}

// Copies this block's part of [0, len) elements (same ownership as for_block_packs), four packs
// in flight per thread so that remote stores and loads overlap.
template <typename T>
__device__ __forceinline__ void copy_block(const T* src, T* dst, int64_t len, bool src_aligned,
                                           bool dst_aligned) {
  constexpr int P = kPack<T>;
  constexpr int U = 4;
  const int64_t npacks = len / P;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; j + (U - 1) * stride < npacks; j += U * stride) {
    T v[U][P];
#pragma unroll
    for (int u = 0; u < U; ++u) load_pack(src + (j + u * stride) * P, src_aligned, v[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) store_pack(dst + (j + u * stride) * P, dst_aligned, v[u]);
  }
  for (; j < npacks; j += stride) {
    T v[P];
    load_pack(src + j * P, src_aligned, v);
    store_pack(dst + j * P, dst_aligned, v);
  }
  if (owns_tail<T>(npacks, len))
    for (int64_t e = npacks * P + threadIdx.x; e < len; e += blockDim.x) dst[e] = src[e];
}

}  // namespace commx::cuda
