// Names, sizes and parsers of the public value types.
// Layer: core.
#include <algorithm>
#include <cctype>

#include "commx/backend.h"
#include "commx/error.h"
#include "commx/types.h"
#include "commx/work.h"

namespace commx {
namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat64:
    case DataType::kInt64:
    case DataType::kUInt64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
    case DataType::kUInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kBool:
      return 1;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kFloat16: return "half";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat8E4M3: return "f8e4m3";
    case DataType::kFloat8E5M2: return "f8e5m2";
    case DataType::kInt8: return "int8";
    case DataType::kUInt8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kBool: return "bool";
    case DataType::kUInt32: return "uint32";
    case DataType::kUInt64: return "uint64";
  }
  return "?";
}

bool dtype_is_floating(DataType t) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      return true;
    default:
      return false;
  }
}

DataType parse_dtype(const std::string& str) {
  std::string s = lower(str);
  if (s == "f32" || s == "float" || s == "float32" || s == "fp32") return DataType::kFloat32;
  if (s == "f64" || s == "double" || s == "float64" || s == "fp64") return DataType::kFloat64;
  if (s == "f16" || s == "half" || s == "float16" || s == "fp16") return DataType::kFloat16;
  if (s == "bf16" || s == "bfloat16") return DataType::kBFloat16;
  if (s == "f8e4m3" || s == "fp8e4m3" || s == "float8_e4m3fn" || s == "e4m3" || s == "fp8")
    return DataType::kFloat8E4M3;
  if (s == "f8e5m2" || s == "fp8e5m2" || s == "float8_e5m2" || s == "e5m2") return DataType::kFloat8E5M2;
  if (s == "i8" || s == "int8") return DataType::kInt8;
  if (s == "u8" || s == "uint8") return DataType::kUInt8;
  if (s == "i32" || s == "int32" || s == "int") return DataType::kInt32;
  if (s == "i64" || s == "int64" || s == "long") return DataType::kInt64;
  if (s == "bool") return DataType::kBool;
  if (s == "u32" || s == "uint32") return DataType::kUInt32;
  if (s == "u64" || s == "uint64") return DataType::kUInt64;
  throw Error(ErrorCode::kInvalidArgument, "unknown data type '" + str + "'");
}

const char* reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kProduct: return "prod";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kAvg: return "avg";
    case ReduceKind::kBand: return "band";
    case ReduceKind::kBor: return "bor";
    case ReduceKind::kBxor: return "bxor";
    case ReduceKind::kPremulSum: return "premulsum";
  }
  return "?";
}

ReduceKind parse_reduce_kind(const std::string& str) {
  std::string s = lower(str);
  if (s == "sum") return ReduceKind::kSum;
  if (s == "prod" || s == "product") return ReduceKind::kProduct;
  if (s == "min") return ReduceKind::kMin;
  if (s == "max") return ReduceKind::kMax;
  if (s == "avg" || s == "mean") return ReduceKind::kAvg;
  if (s == "band") return ReduceKind::kBand;
  if (s == "bor") return ReduceKind::kBor;
  if (s == "bxor") return ReduceKind::kBxor;
  if (s == "premulsum" || s == "premul_sum") return ReduceKind::kPremulSum;
  throw Error(ErrorCode::kInvalidArgument, "unknown reduce op '" + str + "'");
}

bool reduce_supported_on_host(ReduceKind k, DataType t) {
  bool bitwise = k == ReduceKind::kBand || k == ReduceKind::kBor || k == ReduceKind::kBxor;
  if (bitwise) return !dtype_is_floating(t);
  if (t == DataType::kBool) return k != ReduceKind::kAvg && k != ReduceKind::kPremulSum;
  return true;
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return index < 0 ? std::string("cuda") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& str) {
  std::string s = lower(str);
  if (s == "cpu") return cpu();
  if (s == "cuda" || s == "gpu") return cuda(-1);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return cuda(std::stoi(s.substr(5)));
    } catch (const std::exception&) {
    }
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown device '" + str + "' (want cpu, cuda or cuda:N)");
}

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kTimeout: return "Timeout";
    case ErrorCode::kPeerFailure: return "PeerFailure";
    case ErrorCode::kAborted: return "Aborted";
    case ErrorCode::kSystem: return "SystemError";
    case ErrorCode::kCuda: return "CudaError";
    case ErrorCode::kNccl: return "NcclError";
    case ErrorCode::kInternal: return "InternalError";
  }
  return "Error";
}

const char* op_type_name(OpType t) {
  switch (t) {
    case OpType::kAllReduce: return "all_reduce";
    case OpType::kReduce: return "reduce";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAllGather: return "all_gather";
    case OpType::kAllGatherSingle: return "all_gather_single";
    case OpType::kAllGatherV: return "all_gather_v";
    case OpType::kReduceScatter: return "reduce_scatter";
    case OpType::kReduceScatterSingle: return "reduce_scatter_single";
    case OpType::kReduceScatterV: return "reduce_scatter_v";
    case OpType::kAllToAll: return "all_to_all";
    case OpType::kAllToAllSingle: return "all_to_all_single";
    case OpType::kAllToAllVSingle: return "all_to_all_v_single";
    case OpType::kGather: return "gather";
    case OpType::kGatherSingle: return "gather_single";
    case OpType::kScatter: return "scatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
    case OpType::kBatchP2P: return "batch_p2p";
    case OpType::kAllToAllVDynamic: return "all_to_all_v_dynamic";
  }
  return "?";
}

const char* dynamic_a2a_form_name(DynamicA2AForm f) {
  switch (f) {
    case DynamicA2AForm::kPlain: return "plain";
    case DynamicA2AForm::kDispatch: return "dispatch";
    case DynamicA2AForm::kCombine: return "combine";
  }
  return "?";
}

std::string op_context(const std::string& comm_name, int rank, int size, const OpDesc& op) {
  std::string name = op.name();
  if (op.type == OpType::kAllToAllVDynamic && op.dynamic.form != DynamicA2AForm::kPlain)
    name += std::string(" (") + dynamic_a2a_form_name(op.dynamic.form) + ")";
  return comm_context(comm_name, rank, size) + name + " #" + std::to_string(op.seq) + ": ";
}

[[noreturn]] void rethrow_with_prefix(const std::string& prefix) {
  try {
    throw;
  } catch (const Error& e) {
    std::string msg = e.what();
    std::string code = std::string(error_code_name(e.code())) + ": ";
    if (msg.rfind(code, 0) == 0) msg = msg.substr(code.size());
    throw Error(e.code(), prefix + msg);
  }
}

const char* work_status_name(WorkStatus s) {
  switch (s) {
    case WorkStatus::kNotStarted: return "NOT_STARTED";
    case WorkStatus::kInProgress: return "INPROGRESS";
    case WorkStatus::kCompleted: return "COMPLETED";
    case WorkStatus::kTimedOut: return "TIMEDOUT";
    case WorkStatus::kError: return "ERROR";
  }
  return "?";
}

WorkStatus failed_status(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    if (err.code() == ErrorCode::kTimeout) return WorkStatus::kTimedOut;
  } catch (...) {
  }
  return WorkStatus::kError;
}

}  // namespace commx
