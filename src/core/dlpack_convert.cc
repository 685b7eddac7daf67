// DLPack <-> Tensor conversions (zero-copy; contiguous tensors only).
// Layer: core.
#include <string>

#include "commx/error.h"
#include "commx/tensor.h"

namespace commx {

DataType dtype_from_dlpack(DLDataType t) {
  if (t.lanes != 1) throw Error(ErrorCode::kUnsupported, "DLPack tensors with lanes != 1");
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DataType::kFloat32;
      if (t.bits == 64) return DataType::kFloat64;
      if (t.bits == 16) return DataType::kFloat16;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DataType::kBFloat16;
      break;
    case kDLInt:
      if (t.bits == 8) return DataType::kInt8;
      if (t.bits == 32) return DataType::kInt32;
      if (t.bits == 64) return DataType::kInt64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DataType::kUInt8;
      if (t.bits == 32) return DataType::kUInt32;
      if (t.bits == 64) return DataType::kUInt64;
      if (t.bits == 1) return DataType::kBool;
      break;
    case kDLBool:
      if (t.bits == 8) return DataType::kBool;
      break;
    case kDLFloat8_e4m3fn:
      return DataType::kFloat8E4M3;
    case kDLFloat8_e5m2:
      return DataType::kFloat8E5M2;
    default:
      break;
  }
  throw Error(ErrorCode::kUnsupported, "DLPack dtype code " + std::to_string(t.code) + " bits " +
                                           std::to_string(t.bits) + " has no commx DataType");
}

DLDataType dtype_to_dlpack(DataType t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16: d.code = kDLFloat; break;
    case DataType::kBFloat16: d.code = kDLBfloat; break;
    case DataType::kFloat8E4M3: d.code = kDLFloat8_e4m3fn; break;
    case DataType::kFloat8E5M2: d.code = kDLFloat8_e5m2; break;
    case DataType::kInt8:
    case DataType::kInt32:
    case DataType::kInt64: d.code = kDLInt; break;
    case DataType::kUInt8:
    case DataType::kUInt32:
    case DataType::kUInt64: d.code = kDLUInt; break;
    case DataType::kBool: d.code = kDLBool; break;
  }
  return d;
}

Tensor from_dlpack(const DLTensor& t) {
  Tensor out;
  out.dtype = dtype_from_dlpack(t.dtype);
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  if (t.strides != nullptr && n > 0) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect)
        throw Error(ErrorCode::kInvalidArgument,
                    "tensor is not contiguous (dim " + std::to_string(i) + " has stride " +
                        std::to_string(t.strides[i]) + ", expected " + std::to_string(expect) + ")");
      expect *= t.shape[i];
    }
  }
  out.count = n;
  out.data = static_cast<char*>(t.data) + t.byte_offset;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      out.device = Device::cpu();
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      out.device = Device::cuda(t.device.device_id);
      break;
    default:
      throw Error(ErrorCode::kUnsupported,
                  "DLPack device type " + std::to_string(t.device.device_type) + " is not supported");
  }
  return out;
}

void to_dlpack(const Tensor& t, DLTensor* out, int64_t* shape_storage) {
  *shape_storage = t.count;
  out->data = t.data;
  out->device.device_type = t.device.is_cpu() ? kDLCPU : kDLCUDA;
  out->device.device_id = t.device.is_cpu() ? 0 : (t.device.index < 0 ? 0 : t.device.index);
  out->ndim = 1;
  out->dtype = dtype_to_dlpack(t.dtype);
  out->shape = shape_storage;
  out->strides = nullptr;
  out->byte_offset = 0;
}

}  // namespace commx
