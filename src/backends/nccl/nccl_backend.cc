// The nccl backend: every collective NCCL has, the list/v variants as grouped NCCL calls, gather,
// scatter and all-to-all as grouped send/recv, barrier as a 1-element all-reduce,
// all_to_all_v_dynamic with counts on the device (all_to_all_v_dynamic.h).
// Layer: backends (nccl).
#include "nccl/nccl_backend.h"

#include <cstring>
#include <iostream>
#include <thread>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"
#include "cuda_common/dynamic_counts_report.h"
#include "cuda_common/event_work.h"

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

// Data movement needs no dtype: move bytes.
size_t nbytes(const Tensor& t) { return t.nbytes(); }

// Whether any view of `a` shares a byte with any view of `b`.
bool views_overlap(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (const Tensor& x : a)
    for (const Tensor& y : b) {
      auto xs = static_cast<const char*>(x.data), ys = static_cast<const char*>(y.data);
      if (x.nbytes() && y.nbytes() && xs < ys + y.nbytes() && ys < xs + x.nbytes()) return true;
    }
  return false;
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

bool NcclBackend::supports(OpType type, DataType dtype, ReduceKind kind) const {
  // The device-count op needs the backend's own kernels (built where nvcc is).
  if (type == OpType::kAllToAllVDynamic) return COMMX_NCCL_DYNAMIC != 0;
  ncclDataType_t dt;
  if (!is_reduction(type)) return true;
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
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string detail = api_->GetErrorString(r);
  if (api_->GetLastError) {
    const char* last = api_->GetLastError(comm_);
    if (last && *last) detail += std::string(": ") + last;
  }
  throw Error(ErrorCode::kNccl, op_context(ctx_, op) + what + " failed: " + detail);
}

std::optional<Work> NcclBackend::enqueue(const OpDesc& op, cudaStream_t s,
                                         const std::string& where) {
  const int n = ctx_.size;
  const int me = ctx_.rank;
  ncclDataType_t dt = ncclUint8;
  ncclRedOp_t ro = ncclSum;
  if (is_reduction(op.type)) {
    const DataType t = op.dtype();
    // Never let an unsupported type or reduction fall through as a plain sum (PREMUL_SUM would
    // silently lose its factor): the cuda backend delegates ops here without asking supports().
    if (!data_type_of(t, &dt) || !red_op_of(op.op.kind, &ro))
      throw Error(ErrorCode::kUnsupported, op_context(ctx_, op) + "NCCL cannot reduce " +
                                               dtype_name(t) + " with " +
                                               reduce_kind_name(op.op.kind));
  }
  auto group = [&](auto&& body) {
    check(api_->GroupStart(), "ncclGroupStart", op);
    try {
      body();
    } catch (...) {
      api_->GroupEnd();
      throw;
    }
    check(api_->GroupEnd(), "ncclGroupEnd", op);
  };
  auto send = [&](const void* p, size_t bytes, int peer) {
    check(api_->Send(p, bytes, ncclUint8, peer, comm_, s), "ncclSend", op);
  };
  auto recv = [&](void* p, size_t bytes, int peer) {
    check(api_->Recv(p, bytes, ncclUint8, peer, comm_, s), "ncclRecv", op);
  };
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src)
      COMMX_CUDA_CHECK_CTX(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), where);
  };
  switch (op.collective) {
    case Collective::kAllReduce:
      check(api_->AllReduce(op.input.data, op.output.data, op.input.count, dt, ro, comm_, s),
            "ncclAllReduce", op);
      break;
    case Collective::kReduce:
      check(api_->Reduce(op.input.data, op.output.data, op.input.count, dt, ro, op.root, comm_, s),
            "ncclReduce", op);
      break;
    case Collective::kBroadcast:
      check(api_->Broadcast(op.input.data, op.output.data, nbytes(op.input), ncclUint8, op.root,
                            comm_, s),
            "ncclBroadcast", op);
      break;
    case Collective::kAllGather:
      if (op.outputs_one_buffer()) {
        check(api_->AllGather(op.input.data, op.outputs[0].data, nbytes(op.input), ncclUint8,
                              comm_, s),
              "ncclAllGather", op);
        break;
      }
      // One broadcast per root: outputs need not be contiguous nor equal in size.
      group([&] {
        for (int q = 0; q < n; ++q) {
          const void* src = q == me ? op.input.data : op.outputs[q].data;
          check(api_->Broadcast(src, op.outputs[q].data, nbytes(op.outputs[q]), ncclUint8, q,
                                comm_, s),
                "ncclBroadcast", op);
        }
      });
      break;
    case Collective::kReduceScatter:
      if (op.inputs_one_buffer()) {
        check(api_->ReduceScatter(op.inputs[0].data, op.output.data, op.output.count, dt, ro,
                                  comm_, s),
              "ncclReduceScatter", op);
        break;
      }
      // One reduce per root; the receive buffer is used on the root only.
      group([&] {
        for (int q = 0; q < n; ++q)
          check(api_->Reduce(op.inputs[q].data, op.output.data, op.inputs[q].count, dt, ro, q,
                             comm_, s),
                "ncclReduce", op);
      });
      break;
    case Collective::kAllToAll: {
      // In place (input and output views share memory) a receive may land before the send that
      // reads the same bytes: send from a copy then.
      std::vector<const void*> from(n);
      char* staged = nullptr;
      if (views_overlap(op.inputs, op.outputs)) {
        size_t total = 0;
        for (const Tensor& t : op.inputs) total += nbytes(t);
        COMMX_CUDA_CHECK_CTX(cudaMallocAsync(reinterpret_cast<void**>(&staged), total, s), where);
        size_t off = 0;
        for (int q = 0; q < n; ++q) {
          copy(staged + off, op.inputs[q].data, nbytes(op.inputs[q]));
          from[q] = staged + off;
          off += nbytes(op.inputs[q]);
        }
      } else {
        for (int q = 0; q < n; ++q) from[q] = op.inputs[q].data;
      }
      group([&] {
        for (int q = 0; q < n; ++q) {
          send(from[q], nbytes(op.inputs[q]), q);
          recv(op.outputs[q].data, nbytes(op.outputs[q]), q);
        }
      });
      if (staged) COMMX_CUDA_CHECK_CTX(cudaFreeAsync(staged, s), where);
      break;
    }
    case Collective::kGather:
      group([&] {
        if (me == op.root) {
          for (int q = 0; q < n; ++q)
            if (q != me) recv(op.outputs[q].data, nbytes(op.outputs[q]), q);
        } else {
          send(op.input.data, nbytes(op.input), op.root);
        }
      });
      if (me == op.root) copy(op.outputs[me].data, op.input.data, nbytes(op.input));
      break;
    case Collective::kScatter:
      group([&] {
        if (me == op.root) {
          for (int q = 0; q < n; ++q)
            if (q != me) send(op.inputs[q].data, nbytes(op.inputs[q]), q);
        } else {
          recv(op.output.data, nbytes(op.output), op.root);
        }
      });
      if (me == op.root) copy(op.output.data, op.inputs[me].data, nbytes(op.output));
      break;
    case Collective::kBarrier:
      check(api_->AllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, s),
            "ncclAllReduce (barrier)", op);
      break;
    case Collective::kP2P:
      group([&] {
        for (const auto& p : op.p2p) {
          if (p.is_send)
            send(p.tensor.data, nbytes(p.tensor), p.peer);
          else
            recv(p.tensor.data, nbytes(p.tensor), p.peer);
        }
      });
      break;
    case Collective::kAllToAllVDynamic:
#if COMMX_NCCL_DYNAMIC
      enqueue_all_to_all_v_dynamic(op, s, where);
      break;
#else
      throw Error(ErrorCode::kUnsupported,
                  where + "this nccl backend was built without its kernels (no nvcc)");
#endif
  }
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
