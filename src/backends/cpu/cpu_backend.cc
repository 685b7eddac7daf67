// CpuBackend (see cpu_backend.h): init (host check, shm setup), op dispatch through the algorithm
// table (cpu_algorithms.h), p2p, abort and finalize. Layer: backends/cpu.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <numeric>

#include "algorithms/generic_collectives.h"
#include "algorithms/shm_collectives.h"
#include "backends/cpu/cpu_algorithms.h"
#include "commx/error.h"
#include "core/env.h"
#include "lowp/lowp_dispatch.h"
#include "backends/cpu/all_to_all_v_dynamic.h"
#include "backends/cpu/cpu_window.h"
#include "backends/cpu/tcp_window.h"
#include "transport/shm_segment.h"
#include "transport/shm_transport.h"
#include "transport/tcp_transport.h"

namespace commx {
namespace {

std::string to_str(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

struct Registration {
  Registration() { register_backend("cpu", make_cpu_backend); }
} registration;

}  // namespace

CpuBackend::~CpuBackend() {
  drain();
  try {
    finalize();
  } catch (...) {
  }
}

void CpuBackend::init(const BackendContext& ctx) {
  ctx_ = ctx;
  tuning_ = CpuTuning::from_env();
  table_ = &TuningTable::from_env(library_dir() + "/commx_tuning_cpu.txt");
  lowp_ = lowp::resolve_lowp_settings(ctx.options.hints);
  const Hints& h = ctx.options.hints;
  auto tr = h.find("transport");
  std::string want = tr == h.end() ? "auto" : tr->second;
  if (want != "auto" && want != "shm" && want != "tcp")
    throw Error(ErrorCode::kInvalidArgument, "comm '" + ctx.comm_name +
                                                 "': unknown transport hint '" + want +
                                                 "' (cpu backend: auto, shm, tcp)");
  // Each rank publishes its host identity and how to map its segment, then reads everyone's.
  if (want != "tcp")
    group_ = std::make_unique<ShmGroup>(ctx.comm_name, ctx.rank, ctx.size, tuning_.shm);
  std::string me = host_identity() + "\n" + (group_ ? group_->info() : std::string());
  ctx.store->set_str("cpu/peer/" + std::to_string(ctx.rank), me);
  std::vector<std::string> keys;
  for (int r = 0; r < ctx.size; ++r) keys.push_back("cpu/peer/" + std::to_string(r));
  ctx.store->wait(keys, ctx.options.timeout.value_or(kDefaultTimeout));
  std::vector<Bytes> all = ctx.store->multi_get(keys);
  std::vector<std::string> hosts, infos;
  for (auto& b : all) {
    std::string s = to_str(b);
    auto nl = s.find('\n');
    hosts.push_back(s.substr(0, nl));
    infos.push_back(nl == std::string::npos ? "" : s.substr(nl + 1));
  }
  bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](auto& x) { return x == hosts[0]; });
  bool any_tcp = std::any_of(infos.begin(), infos.end(), [](auto& x) { return x.empty(); });
  use_shm_ = one_host && !any_tcp;
  if (use_shm_) {
    group_->set_peer_info(infos);
    // Map every peer now, then wait until all ranks did: after that a rank may finish ops and
    // finalize (unmapping its segment) without pulling memory from under a slower peer.
    group_->map_all();
    tuning_.adapt_to_oversubscription(ctx.size, group_->cpus_of_all());
    if (tuning_.cma)
      group_->probe_cma(CmaLimits{tuning_.cma_min_bytes, tuning_.cma_all_reduce_min_bytes,
                                  tuning_.broadcast_cma_min(ctx.size),
                                  tuning_.broadcast_root_writes_min(ctx.size)});
    if (ctx.size > 1) {
      if (ctx.store->add("cpu/mapped", 1) == ctx.size) ctx.store->set_str("cpu/mapped_all", "1");
      ctx.store->wait({"cpu/mapped_all"}, ctx.options.timeout.value_or(kDefaultTimeout));
    }
    group_->agree_cma();  // every rank probed before the meeting: all reach the same answer
    transport_ = std::make_unique<ShmTransport>(group_.get(), &tuning_.wait);
    topology_ = Topology{ctx.size, "shm", group_->cma()};
    return;
  }
  group_.reset();
  if (want == "shm")
    throw Error(ErrorCode::kInvalidArgument,
                "comm '" + ctx.comm_name +
                    "': transport=shm was asked for but the ranks are on several hosts");
  // Several hosts, or TCP asked for: the generic algorithms over the TCP transport (it connects
  // lazily, on the first exchange with each peer).
  transport_ = make_tcp_transport(ctx.rank, ctx.size, ctx.store, ctx.comm_name, h);
  topology_ = Topology{ctx.size, "tcp", false};
}

std::string CpuBackend::transport_name() const {
  return transport_ ? transport_->name() : std::string("none");
}

bool CpuBackend::supports(Collective c, DataType dtype, ReduceKind kind) const {
  if (is_reduction(c)) return reduce_supported_on_host(kind, dtype);
  return true;
}

std::shared_ptr<WindowImpl> CpuBackend::new_window(int64_t count, DataType dtype,
                                                   const std::string& where) {
  if (finalized_) throw Error(ErrorCode::kInvalidArgument, where + "the comm was finalized");
  const std::string key = "cpu/window/" + std::to_string(window_count_++);
  const Timeout timeout = ctx_.options.timeout.value_or(kDefaultTimeout);
  std::shared_ptr<SignalWaits> w;
  if (use_shm_)
    w = std::make_shared<CpuWindow>(*ctx_.store, key, ctx_.rank, ctx_.size, count, dtype, timeout,
                                    tuning_.wait, where);
  else
    w = std::make_shared<TcpWindow>(*ctx_.store, key, ctx_.rank, ctx_.size, count, dtype, timeout,
                                    ctx_.options.hints, tuning_.wait, where);
  if (aborted_.load()) w->stop("aborted");
  std::lock_guard<std::mutex> g(windows_mu_);
  std::erase_if(windows_, [](const std::weak_ptr<SignalWaits>& x) { return x.expired(); });
  windows_.push_back(w);
  return w;
}

void CpuBackend::stop_windows(const char* why) {
  // Outside the lock, with each window held: a window dropped meanwhile is destroyed (its thread
  // joined) after this returns, not under the lock.
  std::vector<std::shared_ptr<SignalWaits>> live;
  {
    std::lock_guard<std::mutex> g(windows_mu_);
    for (auto& x : windows_)
      if (auto w = x.lock()) live.push_back(std::move(w));
  }
  for (auto& w : live) w->stop(why);
}

void CpuBackend::abort() {
  aborted_.store(true);
  if (ShmWord* w = sleeping_on_.load()) futex_wake_all(*w);
  stop_windows("aborted");
  if (transport_) transport_->abort();
  fail_queued(ctx_, "the comm was aborted before this op started");
}

void CpuBackend::finalize() {
  if (finalized_) return;
  finalized_ = true;
  drain();
  stop_windows("finalized");
  transport_.reset();
  group_.reset();
}

void CpuBackend::execute(const OpDesc& op) {
  // The error prefix is formatted only when something fails: it costs more than a small op.
  if (aborted_.load())
    throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
  if (has_failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(failed_mu_);
    throw Error(ErrorCode::kInvalidArgument,
                op_context(ctx_, op) + "the comm is unusable: an earlier op failed midway (" +
                    failed_ + ")");
  }
  if (!transport_)
    throw Error(ErrorCode::kInvalidArgument, op_context(ctx_, op) + "the comm was finalized");
  try {
    dispatch(op, Clock::now() + op.timeout);
  } catch (const DynamicCountsError&) {
    rethrow_with_prefix(op_context(ctx_, op));  // every rank failed it alike: the comm is fine
  } catch (const Error& e) {
    {
      std::lock_guard<std::mutex> g(failed_mu_);
      failed_ = e.what();
    }
    has_failed_.store(true, std::memory_order_release);
    rethrow_with_prefix(op_context(ctx_, op));
  }
}

void CpuBackend::dispatch(const OpDesc& op, Deadline deadline) {
  const bool p2p = op.collective == Collective::kP2P;
  // The hint, the tuning table, else the size thresholds; execute() adds the op's prefix to errors.
  const CpuAlgorithm* algo = nullptr;
  if (!p2p && op.collective != Collective::kAllToAllVDynamic) algo = &choose(op);
  // Every message of the op carries what this rank called; peers check it before using a byte.
  const OpFingerprint fp = fingerprint_of(op, p2p ? 0 : collectives_++);
  transport_->set_call(fp);
  if (use_shm_) {
    if (group_->has_deferred_check())
      group_->check_deferred_calls(
          WaitScope{deadline, &aborted_, group_.get(), &tuning_.wait, &sleeping_on_, false, true});
    // Published for peers that wait for this rank: p2p here against a collective there is a
    // mismatch they can name (the two travel apart). Left published when the op fails.
    group_->begin_op(fp, p2p ? p2p_peers(op) : std::vector<int>{}, deadline - op.timeout);
    if (p2p)
      run_p2p(op, deadline);
    else
      run_collective_op(op, deadline, algo, fp);
    group_->end_op();
    return;
  }
  if (p2p) return run_p2p(op, deadline);
  run_collective_op(op, deadline, algo, fp);
}

const CpuAlgorithm& CpuBackend::choose(const OpDesc& op) {
  const size_t bytes = op.bytes();
  Choice& last = last_choice_[static_cast<size_t>(op.collective)];
  const bool plain = op.hints.empty();
  if (plain && last.row && last.bytes == bytes) return *last.row;
  const size_t cma_min = group_ ? group_->cma_all_reduce_min_bytes() : ~size_t{0};
  const CpuAlgorithm& row =
      select_algorithm(cpu_algorithms(), op.collective, op, topology_, table_,
                       cpu_default_algorithm(op, topology_, tuning_, cma_min), "",
                       cpu_knows_algorithm);
  if (plain) last = {bytes, &row};
  return row;
}

std::vector<int> CpuBackend::p2p_peers(const OpDesc& op) {
  std::vector<int> peers;
  for (const P2POp& p : op.p2p) peers.push_back(p.peer);
  return peers;
}

void CpuBackend::run_collective_op(const OpDesc& op, Deadline deadline,
                                   const CpuAlgorithm* algo, const OpFingerprint& fp) {
  // all_to_all_v_dynamic has one implementation (counts exchanged first, then rows).
  if (op.collective == Collective::kAllToAllVDynamic)
    return cpu_all_to_all_v_dynamic(op, *transport_, ctx_.rank, ctx_.size, deadline);
  // Low precision (FP8 on the wire, FP32 sums) when enabled and eligible, over the transport.
  if (lowp::lowp_maybe_run(op, lowp_, *transport_, ctx_.rank, ctx_.size, deadline, "",
                           &lowp_stats_, &lowp_scratch_))
    return;
  if (algo->run.generic) {
    GenericColl c{*transport_, ctx_.rank, ctx_.size, deadline, scratch_};
    return algo->run.generic(c, op, tuning_);
  }
  ShmColl c{*group_, WaitScope{deadline, &aborted_, group_.get(), &tuning_.wait, &sleeping_on_},
            fp, tuning_.chunk_bytes, group_->cma_min_bytes()};
  c.ws.whole_group = true;
  if (op.collective == Collective::kBroadcast) {
    c.cma_min_bytes = group_->cma_broadcast_min_bytes();
    c.root_writes_min_bytes = group_->cma_root_writes_min_bytes();
  }
  if (ctx_.size > 1) group_->map_all();
  algo->run.shm(c, op, tuning_);
}

void CpuBackend::run_p2p(const OpDesc& op, Deadline deadline) {
  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  for (const P2POp& p : op.p2p) {
    if (p.is_send)
      sends.push_back({p.peer, p.tensor.data, p.tensor.nbytes()});
    else
      recvs.push_back({p.peer, p.tensor.data, p.tensor.nbytes()});
  }
  transport_->exchange(sends, recvs, deadline);
}

}  // namespace commx
