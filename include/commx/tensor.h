// Tensor: a non-owning view of contiguous memory (pointer, element count, dtype, device, stream).
// Layer: public API. Conversions from/to DLPack let any framework hand its buffers over zero-copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "commx/dlpack.h"
#include "commx/types.h"

namespace commx {

struct Tensor {
  void* data = nullptr;
  int64_t count = 0;  // elements; negative counts are rejected by every op
  DataType dtype = DataType::kFloat32;
  Device device = Device::cpu();
  void* stream = nullptr;  // cudaStream_t for GPU tensors; nullptr = the caller's current stream

  Tensor() = default;
  Tensor(void* d, int64_t n, DataType t, Device dev = Device::cpu(), void* s = nullptr)
      : data(d), count(n), dtype(t), device(dev), stream(s) {}

  size_t nbytes() const { return count > 0 ? static_cast<size_t>(count) * dtype_size(dtype) : 0; }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // A sub-view of `n` elements starting at element `offset`.
  Tensor slice(int64_t offset, int64_t n) const {
    return Tensor(static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_size(dtype)), n,
                  dtype, device, stream);
  }
};

template <typename T>
constexpr DataType dtype_of();
template <> constexpr DataType dtype_of<float>() { return DataType::kFloat32; }
template <> constexpr DataType dtype_of<double>() { return DataType::kFloat64; }
template <> constexpr DataType dtype_of<int8_t>() { return DataType::kInt8; }
template <> constexpr DataType dtype_of<uint8_t>() { return DataType::kUInt8; }
template <> constexpr DataType dtype_of<int32_t>() { return DataType::kInt32; }
template <> constexpr DataType dtype_of<int64_t>() { return DataType::kInt64; }
template <> constexpr DataType dtype_of<uint32_t>() { return DataType::kUInt32; }
template <> constexpr DataType dtype_of<uint64_t>() { return DataType::kUInt64; }
template <> constexpr DataType dtype_of<bool>() { return DataType::kBool; }

// A view over a typed host array (or device array when `dev` says so).
template <typename T>
Tensor make_tensor(T* p, int64_t n, Device dev = Device::cpu()) {
  return Tensor(p, n, dtype_of<T>(), dev);
}

// DLPack: the view must be contiguous (strides null or row-major); throws InvalidArgument otherwise.
Tensor from_dlpack(const DLTensor& t);
DataType dtype_from_dlpack(DLDataType t);
DLDataType dtype_to_dlpack(DataType t);
// Fills `out` to describe `t` as a 1-D tensor; `shape_storage` must outlive `out`.
void to_dlpack(const Tensor& t, DLTensor* out, int64_t* shape_storage);

}  // namespace commx
