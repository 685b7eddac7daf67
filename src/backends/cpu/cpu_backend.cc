// CpuBackend (see cpu_backend.h): init (host check, shm setup), op dispatch to the shm or generic
// algorithms, p2p, abort and finalize. Layer: backends/cpu.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <numeric>

#include "algorithms/generic_collectives.h"
#include "commx/host_reduce.h"
#include "algorithms/shm_collectives.h"
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

// Pointers and sizes of an op's per-rank pieces, whatever list/single/v form it came in.
struct Pieces {
  std::vector<void*> ptr;
  std::vector<size_t> bytes;
  std::vector<size_t> counts;
  void add(void* p, size_t n, size_t es) {
    ptr.push_back(p);
    counts.push_back(n);
    bytes.push_back(n * es);
  }
  std::span<const void* const> cptr() const {
    return {const_cast<const void* const*>(ptr.data()), ptr.size()};
  }
};

Pieces from_list(const std::vector<Tensor>& ts) {
  Pieces p;
  for (const Tensor& t : ts) p.add(t.data, static_cast<size_t>(t.count), dtype_size(t.dtype));
  return p;
}
Pieces from_single(const Tensor& t, int n, int64_t each) {
  Pieces p;
  size_t es = dtype_size(t.dtype);
  for (int i = 0; i < n; ++i)
    p.add(static_cast<char*>(t.data) + i * each * static_cast<int64_t>(es),
          static_cast<size_t>(each), es);
  return p;
}
Pieces from_splits(const Tensor& t, const std::vector<int64_t>& splits) {
  Pieces p;
  size_t es = dtype_size(t.dtype);
  int64_t off = 0;
  for (int64_t s : splits) {
    p.add(static_cast<char*>(t.data) + off * static_cast<int64_t>(es), static_cast<size_t>(s), es);
    off += s;
  }
  return p;
}

// One family of algorithms (shared memory or generic over a Transport) for the ops that differ
// between the families only in the function called: the marshalling of an op's list, single or
// v form into per-rank pieces (run_collective) serves both. all_reduce and reduce, which choose
// among several algorithms, are in run_shm and run_generic.
template <class Coll>
struct AlgoSet {
  void (*broadcast)(Coll&, void*, size_t, int);
  void (*all_gather)(Coll&, const void*, size_t, std::span<void* const>, std::span<const size_t>);
  void (*reduce_scatter)(Coll&, std::span<const void* const>, std::span<const size_t>, void*,
                         const HostReducer&);
  void (*all_to_all)(Coll&, std::span<const void* const>, std::span<const size_t>,
                     std::span<void* const>, std::span<const size_t>);
  void (*gather)(Coll&, const void*, size_t, std::span<void* const>, int);
  void (*scatter)(Coll&, std::span<const void* const>, void*, size_t, int);
  void (*barrier)(Coll&);
};

constexpr AlgoSet<ShmColl> kShmAlgos{.broadcast = shm_broadcast,
                                     .all_gather = shm_all_gather,
                                     .reduce_scatter = shm_reduce_scatter,
                                     .all_to_all = shm_all_to_all,
                                     .gather = shm_gather,
                                     .scatter = shm_scatter,
                                     .barrier = shm_barrier};
constexpr AlgoSet<GenericColl> kGenericAlgos{.broadcast = gen_broadcast_tree,
                                             .all_gather = gen_all_gather_ring,
                                             .reduce_scatter = gen_reduce_scatter_ring,
                                             .all_to_all = gen_all_to_all,
                                             .gather = gen_gather,
                                             .scatter = gen_scatter,
                                             .barrier = gen_barrier};

// The set is a template argument: its calls are direct, as if written out per family.
template <const auto& kAlgos, class Coll>
void run_collective(const OpDesc& op, Coll& c, int rank, int n) {
  const Tensor& in = op.input;
  const Tensor& out = op.output;
  switch (op.type) {
    case OpType::kBroadcast:
      return kAlgos.broadcast(c, in.data, in.nbytes(), op.root);
    case OpType::kAllGather:
    case OpType::kAllGatherV: {
      Pieces o = from_list(op.outputs);
      return kAlgos.all_gather(c, in.data, in.nbytes(), o.ptr, o.bytes);
    }
    case OpType::kAllGatherSingle: {
      Pieces o = from_single(out, n, in.count);
      return kAlgos.all_gather(c, in.data, in.nbytes(), o.ptr, o.bytes);
    }
    case OpType::kReduceScatter:
    case OpType::kReduceScatterV:
    case OpType::kReduceScatterSingle: {
      HostReducer r(out.dtype, op.op, n);
      Pieces i = op.type == OpType::kReduceScatterSingle ? from_single(in, n, out.count)
                                                         : from_list(op.inputs);
      return kAlgos.reduce_scatter(c, i.cptr(), i.counts, out.data, r);
    }
    case OpType::kAllToAll: {
      Pieces i = from_list(op.inputs), o = from_list(op.outputs);
      return kAlgos.all_to_all(c, i.cptr(), i.bytes, o.ptr, o.bytes);
    }
    case OpType::kAllToAllSingle: {
      Pieces i = from_single(in, n, in.count / n), o = from_single(out, n, out.count / n);
      return kAlgos.all_to_all(c, i.cptr(), i.bytes, o.ptr, o.bytes);
    }
    case OpType::kAllToAllVSingle: {
      Pieces i = from_splits(in, op.input_splits), o = from_splits(out, op.output_splits);
      return kAlgos.all_to_all(c, i.cptr(), i.bytes, o.ptr, o.bytes);
    }
    case OpType::kGather: {
      Pieces o = rank == op.root ? from_list(op.outputs) : Pieces{};
      return kAlgos.gather(c, in.data, in.nbytes(), o.ptr, op.root);
    }
    case OpType::kGatherSingle: {
      Pieces o = rank == op.root ? from_single(out, n, in.count) : Pieces{};
      return kAlgos.gather(c, in.data, in.nbytes(), o.ptr, op.root);
    }
    case OpType::kScatter: {
      Pieces i = rank == op.root ? from_list(op.inputs) : Pieces{};
      return kAlgos.scatter(c, i.cptr(), out.data, out.nbytes(), op.root);
    }
    case OpType::kBarrier:
      return kAlgos.barrier(c);
    default:
      throw Error(ErrorCode::kUnsupported, std::string("the cpu backend cannot run ") + op.name());
  }
}

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
}

std::string CpuBackend::transport_name() const {
  return transport_ ? transport_->name() : std::string("none");
}

bool CpuBackend::supports(OpType type, DataType dtype, ReduceKind kind) const {
  if (is_reduction(type)) return reduce_supported_on_host(kind, dtype);
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

CpuAlgo CpuBackend::table_algorithm(const OpDesc& op) const {
  if (table_->entries().empty()) return CpuAlgo::kAuto;
  // nccl-tests' size: the larger buffer (all_reduce: the tensor; all_gather: the output).
  size_t bytes = std::max(op.input.nbytes(), op.output.nbytes());
  CpuAlgo a = parse_algorithm_name(table_->lookup(op.name(), ctx_.size, bytes));
  // A table measured over shared memory says nothing about TCP: keep the built-in choice there.
  if (!use_shm_ && (a == CpuAlgo::kDda || a == CpuAlgo::kRsag || a == CpuAlgo::kCma))
    return CpuAlgo::kAuto;
  return a;
}

void CpuBackend::dispatch(const OpDesc& op, Deadline deadline) {
  CpuAlgo algo = parse_algorithm_hint(op.hints);
  if (algo == CpuAlgo::kAuto) algo = table_algorithm(op);
  const bool p2p =
      op.type == OpType::kSend || op.type == OpType::kRecv || op.type == OpType::kBatchP2P;
  // Every message of the op carries what this rank called; peers check it before using a byte.
  const OpFingerprint fp = fingerprint_of(op, p2p ? 0 : collectives_++);
  transport_->set_call(fp);
  if (p2p) return run_p2p(op, deadline);
  if (op.type == OpType::kAllToAllVDynamic)
    return cpu_all_to_all_v_dynamic(op, *transport_, ctx_.rank, ctx_.size, deadline);
  // Low precision (FP8 on the wire, FP32 sums) when enabled and eligible, over the transport;
  // execute() adds the op's prefix to errors.
  if (lowp::lowp_maybe_run(op, lowp_, *transport_, ctx_.rank, ctx_.size, deadline, "",
                           &lowp_stats_, &lowp_scratch_))
    return;
  bool generic = !use_shm_ || algo == CpuAlgo::kRing || algo == CpuAlgo::kRecursiveDoubling ||
                 algo == CpuAlgo::kGeneric;
  if (generic) {
    GenericColl c{*transport_, ctx_.rank, ctx_.size, deadline, scratch_};
    return run_generic(op, c, algo);
  }
  ShmColl c{*group_, WaitScope{deadline, &aborted_, group_.get(), &tuning_.wait, &sleeping_on_},
            fp, tuning_.chunk_bytes, group_->cma_min_bytes()};
  c.ws.whole_group = true;
  if (op.type == OpType::kBroadcast) {
    c.cma_min_bytes = group_->cma_broadcast_min_bytes();
    c.root_writes_min_bytes = group_->cma_root_writes_min_bytes();
  }
  if (ctx_.size > 1) group_->map_all();
  run_shm(op, c, algo);
}

void CpuBackend::run_shm(const OpDesc& op, ShmColl& c, CpuAlgo algo) {
  const int n = ctx_.size;
  const Tensor& in = op.input;
  switch (op.type) {
    case OpType::kAllReduce: {
      HostReducer r(in.dtype, op.op, n);
      bool dda = algo == CpuAlgo::kDda ||
                 (algo == CpuAlgo::kAuto && in.nbytes() <= tuning_.dda_max_bytes(n));
      if (dda) return shm_all_reduce_dda(c, in.data, op.output.data, in.count, r);
      // Single copy where cross-memory attach works (the same answer on every rank).
      bool cma = n > 1 && group_->cma() &&
                 (algo == CpuAlgo::kCma ||
                  (algo == CpuAlgo::kAuto && in.nbytes() >= group_->cma_all_reduce_min_bytes()));
      if (cma) return shm_all_reduce_cma(c, in.data, op.output.data, in.count, r);
      return shm_all_reduce_rsag(c, in.data, op.output.data, in.count, r);
    }
    case OpType::kReduce: {
      HostReducer r(in.dtype, op.op, n);
      bool two = algo == CpuAlgo::kRsag ||
                 (algo != CpuAlgo::kDda && in.nbytes() > tuning_.dda_max_bytes(n));
      return shm_reduce(c, in.data, op.output.data, in.count, op.root, r, two);
    }
    default:
      return run_collective<kShmAlgos>(op, c, ctx_.rank, n);
  }
}

void CpuBackend::run_generic(const OpDesc& op, GenericColl& c, CpuAlgo algo) {
  const int n = ctx_.size;
  const Tensor& in = op.input;
  switch (op.type) {
    case OpType::kAllReduce: {
      HostReducer r(in.dtype, op.op, n);
      bool rd = algo == CpuAlgo::kRecursiveDoubling ||
                (algo != CpuAlgo::kRing && in.nbytes() <= tuning_.rd_max_bytes);
      if (rd) return gen_all_reduce_recursive_doubling(c, in.data, op.output.data, in.count, r);
      return gen_all_reduce_ring(c, in.data, op.output.data, in.count, r);
    }
    case OpType::kReduce: {
      HostReducer r(in.dtype, op.op, n);
      return gen_reduce_tree(c, in.data, op.output.data, in.count, op.root, r);
    }
    default:
      return run_collective<kGenericAlgos>(op, c, ctx_.rank, n);
  }
}

void CpuBackend::run_p2p(const OpDesc& op, Deadline deadline) {
  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  if (op.type == OpType::kSend) sends.push_back({op.root, op.input.data, op.input.nbytes()});
  if (op.type == OpType::kRecv) recvs.push_back({op.root, op.input.data, op.input.nbytes()});
  for (const P2POp& p : op.p2p) {
    if (p.is_send)
      sends.push_back({p.peer, p.tensor.data, p.tensor.nbytes()});
    else
      recvs.push_back({p.peer, p.tensor.data, p.tensor.nbytes()});
  }
  transport_->exchange(sends, recvs, deadline);
}

}  // namespace commx
