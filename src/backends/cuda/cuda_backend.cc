// The native cuda backend: op dispatch, chunking of large ops through the registered buffer,
// stream ordering, device-error reporting and delegation to NCCL. Layer: backends (cuda).
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "commx/error.h"
#include "commx/env.h"
#include "core/env.h"
#include "cuda/all_to_all_v_dynamic.h"
#include "cuda/allreduce_algorithms.h"
#include "cuda/exchange.h"
#include "cuda/kernels.h"
#include "cuda/peer_set.h"
#include "cuda/reduce_scatter.h"
#include "cuda_common/cuda_util.h"
#include "cuda_common/dynamic_counts_report.h"
#include "cuda_common/event_work.h"

namespace commx::cuda {

CudaBackend::~CudaBackend() {
  try {
    finalize();
  } catch (const std::exception& e) {
    std::cerr << "commx cuda: finalize failed: " << e.what() << "\n";
  }
}

void CudaBackend::init(const BackendContext& ctx) {
  ctx_ = ctx;
  const std::string where = comm_context(ctx) + "cuda init: ";
  device_ = usable_device(ctx.device, where);
  DeviceGuard g(device_);
  ops_.init(device_, where);
  int sms = 0;
  COMMX_CUDA_CHECK_CTX(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_), where);
  tuning_ = Tuning::resolve(ctx.size, sms, ctx.options.hints);
  const PeerMemKind peer_mem = resolve_peer_mem_kind(ctx.options.hints, where);
  lowp_.init(ctx.options.hints, where);
  // Rows measured on GPU links only: a host backend's table (no link column) is not for us.
  for (const TuningEntry& e : TuningTable::from_env(library_dir() + "/commx_tuning_cuda.txt").entries())
    if (e.link != "any") table_.add(e);
  preload_kernels(device_, where);

  COMMX_CUDA_CHECK_CTX(cudaHostAlloc(reinterpret_cast<void**>(&ctl_host_), sizeof(HostCtl),
                                     cudaHostAllocMapped),
                       where);
  std::memset(static_cast<void*>(ctl_host_), 0, sizeof(HostCtl));
  COMMX_CUDA_CHECK_CTX(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ctl_dev_), ctl_host_, 0),
                       where);
  COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(DevState)), where);
  COMMX_CUDA_CHECK_CTX(cudaMemset(state_, 0, sizeof(DevState)), where);

  // Ranks on several hosts (or a forced host boundary): the hierarchical path (hierarchy.h).
  HostLayout layout;
  if (ctx.size > 1)
    layout = detect_hosts(*ctx.store, ctx.rank, ctx.size, device_,
                          ranks_per_host_option(ctx.options.hints, where), where);
  // NCCL refuses two ranks of one comm on a GPU: say so instead of trying.
  if (layout.gpu_shared)
    nccl_problem_ = "two ranks of this comm share a GPU, so no NCCL comm can span it";
  if (layout.hosts > 1) {
    if (!layout.uniform) {
      native_problem_ = "the hosts run different numbers of ranks (the hierarchical path needs "
                        "equal ones)";
    } else {
      hier_ = Hierarchy::create(ctx, layout, device_, sms, state_, ctl_dev_, peer_mem, where);
      native_problem_ = hier_->problem();
      if (!native_problem_.empty())
        hier_.reset();
      else
        topology_ = hier_->topology();
    }
  } else if (ctx.size > kMaxRanks) {
    native_problem_ = "the native path supports at most " + std::to_string(kMaxRanks) + " ranks";
  } else if (ctx.size > 1) {
    pm_ = PeerMemory::create(*ctx.store, ctx.rank, ctx.size, device_,
                             kSignalBytes + 2 * tuning_.buffer_bytes, where, peer_mem);
    native_problem_ = pm_->problem();
    // LL128 by size only over links that deliver a 128-byte store whole (NVLink): not over PCIe,
    // nor between time-sliced contexts of one GPU, where it was never stress-tested.
    if (pm_->shares_gpu() || !pm_->atomic_links())
      tuning_ = Tuning::resolve(ctx.size, sms, ctx.options.hints, false);
    // Several ranks on one GPU (time-sliced contexts): multi-block latency kernels returned wrong
    // all_reduce results at 8 ranks on 4 H200s (32 KiB eager, bf16 and f32: up to 15% of the
    // elements), one block returned none from 2 to 64 KiB. Until the cause is found, one block.
    if (pm_->shares_gpu() && !env_str("COMMX_CUDA_MAX_BLOCKS")) tuning_.max_blocks = 1;
    // Tuning-table rows are measured between GPUs: ranks time-sliced on one GPU ("same_gpu") take
    // the thresholds above, like LL128 and the block count.
    const char* link = pm_->shares_gpu() ? "same_gpu" : pm_->atomic_links() ? "nvlink" : "pcie";
    topology_ = Topology{ctx.size, link, native_problem_.empty()};
  }
  // One rank needs no peer memory: its ops are local copies (the rest go to NCCL lazily).
  native_ = native_problem_.empty() && ctx.size > 1 && !hier_;
  // The ops the hierarchical path leaves to NCCL: create the delegate now, never lazily inside a
  // graph capture (unless it cannot exist: forced hosts sharing GPUs in tests).
  if (hier_ && nccl_problem_.empty()) nccl(nullptr);
  if (!native_problem_.empty()) {
    try {
      nccl(nullptr);
    } catch (const Error& e) {
      throw Error(ErrorCode::kUnsupported, where + "peer memory is unusable (" + native_problem_ +
                                               ") and NCCL cannot take over: " + e.what());
    }
    if (ctx.rank == 0)
      std::cerr << "commx cuda: comm '" << ctx.comm_name << "': " << native_problem_
                << "; every op goes through NCCL\n";
  }
}

Backend& CudaBackend::nccl(const OpDesc* op) {
  if (nccl_ready_) return *nccl_;
  if (!nccl_problem_.empty())
    throw Error(ErrorCode::kUnsupported,
                (op ? op_context(ctx_, *op) + op->name() + " needs NCCL, but " : std::string()) +
                    nccl_problem_);
  try {
    if (!nccl_) nccl_ = create_backend("nccl");
    BackendContext c = ctx_;
    c.store = make_prefix_store("nccl_delegate", ctx_.store);
    nccl_->init(c);
  } catch (const Error& e) {
    std::string what = op ? op_context(ctx_, *op) + op->name() + " is not covered by the native "
                                                                 "cuda path and "
                          : std::string();
    throw Error(ErrorCode::kUnsupported, what + "the nccl backend is unavailable: " + e.what());
  }
  nccl_ready_ = true;
  return *nccl_;
}

bool CudaBackend::supports(Collective c, DataType dtype, ReduceKind kind) const {
  // Natively over peer memory; else (several hosts, peer memory unusable) through the nccl
  // backend's device-count fallback.
  if (c == Collective::kAllToAllVDynamic) return native_ || ctx_.size == 1 || nccl_problem_.empty();
  // Point-to-point goes to NCCL, which cannot span ranks that share a GPU.
  if (c == Collective::kP2P) return nccl_problem_.empty();
  if (!is_reduction(c)) return true;
  // The hierarchical path reduces natively in all_reduce and reduce_scatter only.
  const bool hier_native = c == Collective::kAllReduce || c == Collective::kReduceScatter;
  return (native_reduce_supported(dtype, kind) && (hier_ ? hier_native : native_)) ||
         (nccl_problem_.empty() && nccl_reduces(dtype, kind));
}

bool CudaBackend::supports_uneven(Collective c, DataType dtype, ReduceKind kind) const {
  // all_to_all_v_dynamic runs natively (ranks sharing a GPU included): supports() answers.
  if (c == Collective::kAllToAllVDynamic) return supports(c, dtype, kind);
  // Other pieces of per-rank counts go to NCCL: its reductions only, and only where NCCL can run.
  return nccl_problem_.empty() && (!is_reduction(c) || nccl_reduces(dtype, kind));
}

bool CudaBackend::nccl_reduces(DataType dtype, ReduceKind kind) {
  // NCCL has no PREMUL_SUM or bitwise ops (the cuda backend delegates through the nccl backend).
  const bool op = kind == ReduceKind::kSum || kind == ReduceKind::kProduct ||
                  kind == ReduceKind::kMin || kind == ReduceKind::kMax ||
                  (kind == ReduceKind::kAvg && dtype_is_floating(dtype));
  return op && dtype != DataType::kBool;
}

AllReduceAlgo CudaBackend::allreduce_algo(uint64_t bytes, const Hints& hints) const {
  OpDesc op{.type = OpType::kAllReduce,
            .input = Tensor(nullptr, static_cast<int64_t>(bytes), DataType::kUInt8),
            .hints = hints};
  lower_op(op, ctx_.rank, ctx_.size);
  return select_allreduce(tuning_, op, topology_, &table_, "").run.id;
}

PeerSet CudaBackend::peers(const OpDesc& op) const {
  PeerSet ps = make_peer_set(pm_.get(), ctx_.rank, ctx_.size, tuning_, state_, ctl_dev_, op);
  ps.call = call_;
  return ps;
}

std::exception_ptr CudaBackend::device_error(const std::string& where) const {
  const volatile HostCtl* c = ctl_host_;
  if (!c) return nullptr;  // init failed before the control block existed
  int code = c->error_code;
  if (code == kDevOk) return nullptr;
  std::string op = op_type_name(static_cast<OpType>(c->error_op));
  int peer = c->error_peer;  // a local index on the hierarchical path
  if (hier_ && peer >= 0 && peer < hier_->layout().local_size) peer = hier_->comm_rank(peer);
  std::string msg = where + op + " #" + std::to_string(c->error_seq) + " on rank " +
                    std::to_string(ctx_.rank);
  if (code == kDevTimeout) {
    msg += " timed out on the GPU waiting for rank " + std::to_string(peer) +
           " (block " + std::to_string(c->error_block) +
           "): that rank never joined the op within its timeout; the comm is unusable, abort it";
    return std::make_exception_ptr(Error(ErrorCode::kTimeout, msg));
  }
  if (code == kDevMismatch) {
    CallMismatch m{};
    for (int w = 0; w < 5; ++w) {
      m.mine[w] = c->error_calls[0][w];
      m.theirs[w] = c->error_calls[1][w];
    }
    m.their_hash = c->error_hashes[1];
    m.theirs_known = c->error_peer_call_known != 0;
    m.check_value = c->error_check_value;
    return std::make_exception_ptr(
        Error(ErrorCode::kInvalidArgument,
              where + call_mismatch_message(m, ctx_.rank, peer, recent_calls_) +
                  " (seen on the GPU before any data was combined; the comm is unusable, abort "
                  "it)"));
  }
  msg += " was aborted while waiting for rank " + std::to_string(peer);
  return std::make_exception_ptr(Error(ErrorCode::kAborted, msg));
}

void CudaBackend::enqueue_allreduce(const OpDesc& op, const AllReduceAlgorithm& preferred,
                                    int out_rank, cudaStream_t s, const std::string& where) {
  const AllReduceShape shape{op.input.data, op.output.data, op.input.count,
                             dtype_size(op.input.dtype), ctx_.size, out_rank, tuning_.buffer_bytes};
  fitting_allreduce(preferred, shape).run.enqueue(peers(op), shape, op, tuning_, s);
  COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
}

bool CudaBackend::enqueue_native(const OpDesc& op, cudaStream_t s, const std::string& where) {
  const int world = ctx_.size;
  const int me = ctx_.rank;
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src)
      COMMX_CUDA_CHECK_CTX(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), where);
  };
  // One rank: every op is a local copy (or nothing).
  if (world == 1) {
    const bool scales = op.op.kind == ReduceKind::kPremulSum;  // a copy would lose the factor
    switch (op.collective) {
      case Collective::kAllReduce:
      case Collective::kReduce:
        if (scales) break;
        copy(op.output.data, op.input.data, op.input.nbytes());
        return true;
      case Collective::kBroadcast:
      case Collective::kBarrier:
        return true;
      case Collective::kAllToAllVDynamic:  // copies its one segment, checks and writes the counts
        enqueue_all_to_all_v_dynamic(peers(op), op, 1, s);
        COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
        return true;
      case Collective::kAllGather:
      case Collective::kGather:
        copy(op.outputs[0].data, op.input.data, op.input.nbytes());
        return true;
      case Collective::kReduceScatter:
        if (scales) break;
        [[fallthrough]];
      case Collective::kScatter:
        copy(op.output.data, op.inputs[0].data, op.inputs[0].nbytes());
        return true;
      case Collective::kAllToAll:
        copy(op.outputs[0].data, op.inputs[0].data, op.inputs[0].nbytes());
        return true;
      default:
        break;
    }
  }
  if (!native_) return false;
  if (lowp_.maybe_enqueue(op, peers(op), tuning_.max_blocks_large, s, where)) return true;
  // Per-pair byte exchange in chunks of at most one region of the buffer. `every_pair`: every rank
  // receives from every peer (all-gather, all-to-all), which the barrier-free LL variant needs.
  auto exchange = [&](const PtrList& src, const PtrList& dst, uint64_t nbytes, bool every_pair) {
    if (nbytes == 0) {
      launch_barrier(peers(op), s);
      return;
    }
    enqueue_exchange(peers(op), tuning_, src, dst, nbytes, every_pair, s);
    COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
  };
  if (op.collective == Collective::kAllToAllVDynamic) {
    enqueue_all_to_all_v_dynamic(peers(op), op, all_to_all_v_dynamic_blocks(tuning_), s);
    COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
    return true;
  }
  // Per-pair exchanges move equal pieces; the forms with per-peer counts go to NCCL.
  if (!op.equal_split()) return false;
  PtrList src{}, dst{};
  auto ptr = [](const Tensor& t) { return static_cast<char*>(t.data); };
  switch (op.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce: {
      if (!native_reduce_supported(op.input.dtype, op.op.kind)) return false;
      const bool all = op.collective == Collective::kAllReduce;
      const AllReduceAlgorithm& algo = select_allreduce(tuning_, op, topology_, &table_, where);
      if (!algo.run.enqueue) return false;  // the "nccl" row (one host: never "hierarchical")
      if (op.input.count == 0) {
        launch_barrier(peers(op), s);
        return true;
      }
      enqueue_allreduce(op, algo, all ? -1 : op.root, s, where);
      return true;
    }
    case Collective::kAllGather: {
      for (int q = 0; q < world; ++q) {
        src.p[q] = ptr(op.input);
        dst.p[q] = ptr(op.outputs[q]);
      }
      exchange(src, dst, op.input.nbytes(), true);
      return true;
    }
    case Collective::kAllToAll: {
      for (int q = 0; q < world; ++q) {
        src.p[q] = ptr(op.inputs[q]);
        dst.p[q] = ptr(op.outputs[q]);
      }
      exchange(src, dst, op.inputs[0].nbytes(), true);
      return true;
    }
    case Collective::kBroadcast: {
      if (me == op.root)
        for (int q = 0; q < world; ++q) src.p[q] = ptr(op.input);
      dst.p[op.root] = ptr(op.output);
      exchange(src, dst, op.input.nbytes(), false);
      return true;
    }
    case Collective::kGather: {
      src.p[op.root] = ptr(op.input);
      if (me == op.root)
        for (int q = 0; q < world; ++q) dst.p[q] = ptr(op.outputs[q]);
      exchange(src, dst, op.input.nbytes(), false);
      return true;
    }
    case Collective::kScatter: {
      if (me == op.root)
        for (int q = 0; q < world; ++q) src.p[q] = ptr(op.inputs[q]);
      dst.p[op.root] = ptr(op.output);
      exchange(src, dst, op.output.nbytes(), false);
      return true;
    }
    case Collective::kReduceScatter: {
      const ReduceScatterAlgorithm& algo =
          select_reduce_scatter(tuning_, op, topology_, &table_, where);
      if (!algo.run.enqueue) return false;  // the "nccl" row
      const int64_t n = op.output.count;
      bool al = aligned16(op.output.data);
      for (int q = 0; q < world; ++q) {
        src.p[q] = ptr(op.inputs[q]);
        al = al && aligned16(src.p[q]);
      }
      if (n == 0) {
        launch_barrier(peers(op), s);
        return true;
      }
      const ReduceScatterShape shape{src, op.output.data, n,
                                     make_reduce_spec(op.output.dtype, op.op, world, al), world};
      enqueue_reduce_scatter(peers(op), tuning_, shape, s, &algo);
      COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
      return true;
    }
    case Collective::kBarrier:
      launch_barrier(peers(op), s);
      COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
      return true;
    default:
      return false;  // p2p: NCCL
  }
}

Work CudaBackend::delegate(const OpDesc& op, cudaStream_t s) {
  OpDesc d = op;
  auto set = [s](Tensor& t) { t.stream = s; };
  set(d.input);
  set(d.output);
  for (auto& t : d.inputs) set(t);
  for (auto& t : d.outputs) set(t);
  for (auto& p : d.p2p) set(p.tensor);
  return nccl(&op).run(d, false);
}

void CudaBackend::check_runnable(const std::string& where) {
  if (std::exception_ptr e = device_error(where + "an earlier op failed: ")) std::rethrow_exception(e);
}

EventWorkHooks CudaBackend::work_hooks(const OpDesc& op, const std::string& where) {
  EventWorkHooks hooks;
  hooks.poll_error = [this, where, seq = op.seq] {
    std::exception_ptr e = device_error(where);
    if (!e && ctl_host_) e = take_dynamic_counts_error(&ctl_host_->counts, seq, counts_mu_, where);
    return e || !hier_ ? e : hier_->inter_error();
  };
  hooks.on_timeout = [this] { abort(); };
  return hooks;
}

Timeout CudaBackend::host_bound(const OpDesc& op) const {
  // The device-side bound fires first and names the missing peer; the host bound is a backstop.
  return op.timeout + op.timeout / 10 + std::chrono::milliseconds(200);
}

bool CudaBackend::enqueue_hierarchical(const OpDesc& op, cudaStream_t s,
                                       const std::string& where) {
  std::optional<InterLowp> lowp;
  if (auto plan = lowp_.plan(op, where)) lowp = InterLowp{*plan, lowp_.device_stats()};
  return hier_->enqueue(op, s, where, lowp);
}

std::optional<Work> CudaBackend::enqueue(const OpDesc& op, cudaStream_t s,
                                         const std::string& where) {
  // Every kernel of the op carries its call; captured into a graph, it replays with it.
  const bool p2p = op.collective == Collective::kP2P;
  const OpFingerprint fp = fingerprint_of(op, p2p ? 0 : collectives_++);
  call_ = device_call(fp);
  recent_calls_.note(fp);
  if ((hier_ && enqueue_hierarchical(op, s, where)) || enqueue_native(op, s, where))
    return std::nullopt;
  if (!native_problem_.empty() && !nccl_ready_)
    throw Error(ErrorCode::kUnsupported, where + native_problem_);
  return delegate(op, s);
}

void CudaBackend::abort() {
  aborted_ = true;
  if (ctl_host_) ctl_host_->abort = 1;
  if (nccl_ && nccl_ready_) nccl_->abort();
  if (hier_) hier_->abort();
}

void CudaBackend::finalize() {
  if (finalized_) return;
  finalized_ = true;
  if (device_ < 0) return;  // init failed before it touched the device
  DeviceGuard g(device_);
  // Works that outlive the comm stop calling into it; they keep the comm's last device error.
  auto close_gate = [this] { ops_.close_gate(device_error(comm_context(ctx_))); };
  // Kernels may still touch peer memory: let them end (they are bounded) before unmapping.
  auto deadline = std::chrono::steady_clock::now() + ctx_.options.timeout.value_or(kDefaultTimeout);
  if (!ops_.wait_idle(deadline)) {
    ctl_host_->abort = 1;
    if (nccl_ && nccl_ready_) nccl_->abort();  // its comm must not be destroyed while stuck
    if (hier_) hier_->abort();
    if (!ops_.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5))) {
      // Only a kernel that is not ours (an NCCL step waiting for a dead peer) gets here; its
      // memory stays mapped rather than pulled from under it.
      std::cerr << "commx cuda: comm '" << ctx_.comm_name << "' rank " << ctx_.rank
                << ": work still running at finalize; its buffers are left mapped\n";
      close_gate();
      return;
    }
  }
  close_gate();
  if (hier_) hier_->finalize();
  if (nccl_ && nccl_ready_) nccl_->finalize();
  nccl_.reset();
  lowp_.close();
  if (pm_) pm_->close();
  ops_.release();
  if (state_) cudaFree(state_);
  state_ = nullptr;
  if (ctl_host_) cudaFreeHost(ctl_host_);
  ctl_host_ = nullptr;
}

}  // namespace commx::cuda
