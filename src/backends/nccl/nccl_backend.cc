// The nccl backend: NCCL's setup, supports(), running a row of its table (nccl_algorithms.cc) on
// the op's stream, and all_to_all_v_dynamic with counts on the device (all_to_all_v_dynamic.h).
// Layer: backends (nccl).
#include "nccl/nccl_backend.h"

#include <cstring>
#include <iostream>
#include <thread>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"
#include "cuda_common/dynamic_counts_report.h"
#include "cuda_common/event_work.h"
#include "nccl/nccl_algorithms.h"

namespace commx::nccl {
namespace {

bool data_type_of(DataType t, ncclDataType_t* out) {
  switch (t) {
    case DataType::kFloat32: *out = ncclFloat32; return true;
    case DataType::kFloat64: *out = ncclFloat64; return true;
    case DataType::kFloat16: *out = ncclFloat16; return true;
    case DataType::kBFloat16: *out = ncclBfloat16; return true;
    case DataType::kFloat8E4M3: *out = ncclFloat8e4m3; return true;
    case DataType::kFloat8E5M2: *out = ncclFloat8e5m2; return true;
    case DataType::kInt8: *out = ncclInt8; return true;
    case DataType::kUInt8: *out = ncclUint8; return true;
    case DataType::kBool: *out = ncclUint8; return true;
    case DataType::kInt32: *out = ncclInt32; return true;
    case DataType::kUInt32: *out = ncclUint32; return true;
    case DataType::kInt64: *out = ncclInt64; return true;
    case DataType::kUInt64: *out = ncclUint64; return true;
  }
  return false;
}

bool red_op_of(ReduceKind k, ncclRedOp_t* out) {
  switch (k) {
    case ReduceKind::kSum: *out = ncclSum; return true;
    case ReduceKind::kProduct: *out = ncclProd; return true;
    case ReduceKind::kMax: *out = ncclMax; return true;
    case ReduceKind::kMin: *out = ncclMin; return true;
    case ReduceKind::kAvg: *out = ncclAvg; return true;
    default: return false;
  }
}

}  // namespace

NcclBackend::~NcclBackend() {
  try {
    finalize();
  } catch (const std::exception& e) {
    std::cerr << "commx nccl: finalize failed: " << e.what() << "\n";
  }
}

namespace {
// What a Work of an aborted comm reports: its kernel may have been stopped mid-op.
std::exception_ptr aborted_error(const std::string& where) {
  return std::make_exception_ptr(
      Error(ErrorCode::kAborted, where + "the nccl comm was aborted; the op may not have completed"));
}
}  // namespace

void NcclBackend::init(const BackendContext& ctx) {
  ctx_ = ctx;
  std::string where = comm_context(ctx) + "nccl init: ";
  device_ = cuda::usable_device(ctx.device, where);  // first: a missing GPU is the clearer error
  api_ = &api();
  cuda::DeviceGuard g(device_);
  ncclUniqueId id;
  if (ctx.rank == 0) {
    ncclResult_t r = api_->GetUniqueId(&id);
    if (r != ncclSuccess)
      throw Error(ErrorCode::kNccl, where + "ncclGetUniqueId: " + api_->GetErrorString(r));
    ctx.store->set("nccl/uid", Bytes(id.internal, id.internal + sizeof(id.internal)));
  } else {
    Bytes b = ctx.store->get("nccl/uid");
    if (b.size() != sizeof(id.internal))
      throw Error(ErrorCode::kInternal, where + "bad unique id of " + std::to_string(b.size()) + " bytes");
    std::memcpy(id.internal, b.data(), b.size());
  }
  ncclResult_t r = api_->CommInitRank(&comm_, ctx.size, id, ctx.rank);
  if (r != ncclSuccess)
    throw Error(ErrorCode::kNccl, where + "ncclCommInitRank: " + api_->GetErrorString(r));
  ops_.init(device_, where);
  COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), where);
  COMMX_CUDA_CHECK_CTX(cudaMemset(scratch_, 0, sizeof(float)), where);
}

bool NcclBackend::supports(Collective c, DataType dtype, ReduceKind kind) const {
  // The device-count op needs the backend's own kernels (built where nvcc is).
  if (c == Collective::kAllToAllVDynamic) return COMMX_NCCL_DYNAMIC != 0;
  ncclDataType_t dt;
  if (!is_reduction(c)) return true;
  if (!data_type_of(dtype, &dt) || dtype == DataType::kBool) return false;
  ncclRedOp_t ro;
  if (!red_op_of(kind, &ro)) return false;
  if (kind == ReduceKind::kAvg && !dtype_is_floating(dtype)) return false;
  if ((dtype == DataType::kFloat8E4M3 || dtype == DataType::kFloat8E5M2) && api_ &&
      api_->version < 22403)
    return false;
  return true;
}

void NcclBackend::check(ncclResult_t r, const char* what, const OpDesc& op) const {
  check_nccl(*api_, comm_, r, what, op_context(ctx_, op));
}

std::optional<Work> NcclBackend::enqueue(const OpDesc& op, cudaStream_t s,
                                         const std::string& where) {
  ncclDataType_t dt = ncclUint8;
  ncclRedOp_t ro = ncclSum;
  if (is_reduction(op.collective)) {
    const DataType t = op.dtype();
    // Never let an unsupported type or reduction fall through as a plain sum (PREMUL_SUM would
    // silently lose its factor): the cuda backend delegates ops here without asking supports().
    if (!data_type_of(t, &dt) || !red_op_of(op.op.kind, &ro))
      throw Error(ErrorCode::kUnsupported, where + "NCCL cannot reduce " + dtype_name(t) +
                                               " with " + reduce_kind_name(op.op.kind));
  }
  // The average over one rank is its input: sent as a sum, which NCCL takes for every dtype
  // (NCCL 2.28 answered "invalid argument" to a one-rank op of the conformance sweep, at an
  // average of FP8 data by the sweep's order).
  if (ctx_.size == 1 && ro == ncclAvg) ro = ncclSum;
  if (op.collective == Collective::kAllToAllVDynamic) {
#if COMMX_NCCL_DYNAMIC
    enqueue_all_to_all_v_dynamic(op, s, where);
    return std::nullopt;
#else
    throw Error(ErrorCode::kUnsupported,
                where + "this nccl backend was built without its kernels (no nvcc)");
#endif
  }
  const NcclAlgorithm* row = select_library_row(nccl_algorithms(), op);
  if (!row) throw Error(ErrorCode::kUnsupported, where + "not supported by nccl");
  row->run(NcclCall{*api_, comm_, op, s, where, ctx_.rank, ctx_.size, dt, ro, scratch_});
  return std::nullopt;
}

cuda::EventWorkHooks NcclBackend::work_hooks(const OpDesc& op, const std::string& where) {
  cuda::EventWorkHooks hooks;
  hooks.poll_error = [this, where, seq = op.seq]() -> std::exception_ptr {
    (void)seq;
    ncclResult_t ae = ncclSuccess;
    {
      std::lock_guard<std::mutex> lk(abort_mu_);
      if (comm_gone_ || !comm_)  // aborted: a kernel that was stopped mid-op fired its event
        return aborted_ ? aborted_error(where) : nullptr;
      if (api_->CommGetAsyncError(comm_, &ae) == ncclSuccess && ae != ncclSuccess &&
          ae != ncclInProgress)
        return std::make_exception_ptr(
            Error(ErrorCode::kNccl, where + "NCCL reported: " + api_->GetErrorString(ae)));
    }
#if COMMX_NCCL_DYNAMIC
    // A failed agreed check of all_to_all_v_dynamic: this Work's op, or an earlier one.
    DynamicCountsReport* report = nullptr;
    {
      std::lock_guard<std::mutex> lk(dyn_mu_);
      report = dyn_.report_host;
    }
    return cuda::take_dynamic_counts_error(report, seq, report_mu_, where);
#else
    return nullptr;
#endif
  };
  hooks.on_timeout = [this] { abort_comm(); };
  return hooks;
}

void NcclBackend::abort_comm() {
  std::lock_guard<std::mutex> lk(abort_mu_);
  aborted_ = true;
  if (comm_ && !comm_gone_) {
    comm_gone_ = true;
    // ncclCommAbort may wait for the comm's other ranks (NCCL frees resources shared within a node
    // only once every rank aborted): a peer that died or never joined would hold the caller
    // forever. Abort on a thread of its own, as PyTorch's watchdog does; the comm is gone for us.
    std::thread([api = api_, c = comm_, dev = device_] {
      cudaSetDevice(dev);
      api->CommAbort(c);
    }).detach();
  }
}

void NcclBackend::abort() { abort_comm(); }

void NcclBackend::finalize() {
  // Works that outlive the comm stop calling into it (an aborted comm leaves them failed).
  ops_.close_gate(aborted_ ? aborted_error(comm_context(ctx_)) : nullptr);
  std::lock_guard<std::mutex> lk(abort_mu_);
  if (comm_ && !comm_gone_) {
    cuda::DeviceGuard g(device_);
    api_->CommDestroy(comm_);
  }
  comm_gone_ = true;
  comm_ = nullptr;
  ops_.release();
#if COMMX_NCCL_DYNAMIC
  {
    std::lock_guard<std::mutex> dl(dyn_mu_);
    dyn_.release();
  }
#endif
  if (scratch_) cudaFree(scratch_);
  scratch_ = nullptr;
}

}  // namespace commx::nccl
