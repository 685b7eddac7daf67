// The hierarchical (multi-host) all_reduce of the cuda backend: host detection, the local peer
// memory and inter-host NCCL comm, and the three-step enqueue. Layer: backends (cuda).
#include "cuda/hierarchy.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "commx/error.h"
#include "commx/env.h"
#include "cuda/allreduce_algorithms.h"
#include "cuda/exchange.h"
#include "cuda/kernels.h"
#include "cuda/peer_set.h"
#include "cuda/reduce_scatter.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

// hostname + boot id: two machines with one hostname (containers) still differ.
std::string host_key() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) name[0] = 0;
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (f) std::getline(f, boot);
  return std::string(name) + "/" + boot;
}

}  // namespace

HostLayout detect_hosts(Store& store, int rank, int world, int device, int ranks_per_host,
                        const std::string& where) {
  char bus[32] = {};
  COMMX_CUDA_CHECK_CTX(cudaDeviceGetPCIBusId(bus, sizeof(bus), device), where);
  const std::string mine = host_key() + "\n" + bus;
  store.set("hier/place/" + std::to_string(rank), Bytes(mine.begin(), mine.end()));
  std::vector<RankPlace> places(world);
  for (int r = 0; r < world; ++r) {
    std::string s = mine;
    if (r != rank) {
      Bytes b = store.get("hier/place/" + std::to_string(r));
      s.assign(b.begin(), b.end());
    }
    size_t nl = s.find('\n');
    if (nl == std::string::npos)
      throw Error(ErrorCode::kInternal, where + "bad host record from rank " + std::to_string(r));
    places[r] = RankPlace{s.substr(0, nl), s.substr(nl + 1)};
  }
  return host_layout(places, rank, ranks_per_host, where);
}

std::unique_ptr<Hierarchy> Hierarchy::create(const BackendContext& ctx, const HostLayout& layout,
                                             int device, int sms, DevState* state, HostCtl* ctl,
                                             PeerMemKind peer_mem, const std::string& where) {
  std::unique_ptr<Hierarchy> h(new Hierarchy());
  h->ctx_ = ctx;
  h->layout_ = layout;
  h->device_ = device;
  h->world_ = ctx.size;
  h->state_ = state;
  h->ctl_ = ctl;
  const int local = layout.local_size;
  const std::string ctx_where = where + "hierarchical path (host " + std::to_string(layout.host) +
                                "/" + std::to_string(layout.hosts) + ", local rank " +
                                std::to_string(layout.local_rank) + "/" +
                                std::to_string(local) + "): ";
  h->tuning_ = Tuning::resolve(local, sms, ctx.options.hints);
  std::string problem;
  if (local > kMaxRanks) {
    problem = std::to_string(local) + " ranks on one host (the peer-memory kernels take at most " +
              std::to_string(kMaxRanks) + ")";
  } else if (local > 1) {
    auto local_store = make_prefix_store("hier/local/" + std::to_string(layout.host), ctx.store);
    h->pm_ = PeerMemory::create(*local_store, layout.local_rank, local, device,
                                kSignalBytes + 2 * h->tuning_.buffer_bytes, ctx_where, peer_mem);
    problem = h->pm_->problem();
    // Same limit as the flat path: several ranks on one GPU take one block (cuda_backend.cc).
    if (h->pm_->shares_gpu() && !env_str("COMMX_CUDA_MAX_BLOCKS")) h->tuning_.max_blocks = 1;
  }
  if (problem.empty() && !layout.inter_gpu_shared.empty())
    problem = "NCCL cannot span an inter-host group: " + layout.inter_gpu_shared;
  // Every rank of the comm must take the same decision before any NCCL init: share verdicts.
  ctx.store->set("hier/verdict/" + std::to_string(ctx.rank), Bytes(problem.begin(), problem.end()));
  for (int r = 0; r < ctx.size && problem.empty(); ++r) {
    if (r == ctx.rank) continue;
    Bytes b = ctx.store->get("hier/verdict/" + std::to_string(r));
    if (!b.empty()) problem = "rank " + std::to_string(r) + ": " + std::string(b.begin(), b.end());
  }
  if (!problem.empty()) {
    h->problem_ = problem;
    if (h->pm_) h->pm_->close();
    return h;
  }
  BackendContext c = ctx;
  c.comm_name = ctx.comm_name + "/inter" + std::to_string(layout.local_rank);
  c.rank = layout.host;
  c.size = layout.hosts;
  c.store = make_prefix_store("hier/inter/" + std::to_string(layout.local_rank), ctx.store);
  c.world_ranks.clear();
  for (int r : layout.inter_ranks)
    c.world_ranks.push_back(ctx.world_ranks.empty() ? r : ctx.world_ranks.at(r));
  try {
    h->inter_ = create_backend("nccl");
    h->inter_->init(c);
  } catch (const Error& e) {
    throw Error(ErrorCode::kUnsupported,
                ctx_where + "the inter-host step needs the nccl backend: " + e.what());
  }
  h->connect_inter(ctx_where);
  return h;
}

void Hierarchy::connect_inter(const std::string& where) {
  // NCCL connects its peers during the first collective of each algorithm (ring, tree, PAT): a
  // host-side handshake that would block an op's enqueue, outside every timeout, if a peer never
  // came. Run every NCCL call the inter step makes, small and large (NCCL picks the algorithm by
  // size), while all ranks are here. all_to_all: the low-precision step's exchange
  // (hierarchy_lowp.cc). (NCCL_RUNTIME_CONNECT=0 would do it too, but for every NCCL
  // comm of the process, torch's included.)
  const int64_t big = 1 << 20;  // elements per rank: 4 MiB of f32
  const int hosts = layout_.hosts, me = layout_.host;
  float* buf = nullptr;  // two areas of `big` elements per host: all_to_all's input and output
  const size_t bytes = 2 * sizeof(float) * static_cast<size_t>(big) * hosts;
  COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&buf), bytes), where);
  COMMX_CUDA_CHECK_CTX(cudaMemset(buf, 0, bytes), where);
  const Device dev = Device::cuda(device_);
  auto part = [&](int h, int64_t n) { return Tensor(buf + h * n, n, DataType::kFloat32, dev); };
  auto run = [&](OpType type, int64_t n) {
    OpDesc d;
    d.type = type;
    d.timeout = ctx_.options.timeout.value_or(kDefaultTimeout);
    d.op = ReduceOp::SUM;
    Tensor all(buf, n * hosts, DataType::kFloat32, dev);
    d.input = d.output = part(me, n);  // in place, as NCCL lays it out
    if (type == OpType::kReduceScatterSingle) d.input = all;
    if (type == OpType::kAllGatherSingle) d.output = all;
    if (type == OpType::kAllToAllSingle) {
      d.input = all;
      d.output = Tensor(buf + big * hosts, n * hosts, DataType::kFloat32, dev);
    }
    // Grouped broadcasts (enqueue_all_gather): pieces out of order, so that NCCL does not take
    // them for one buffer.
    if (type == OpType::kAllGather)
      for (int h = hosts - 1; h >= 0; --h) d.outputs.push_back(part(h, n));
    lower_op(d, me, hosts);
    inter_->run(d, false).wait_blocking();
  };
  try {
    for (int64_t n : {int64_t{1}, big})
      for (OpType t : {OpType::kAllReduce, OpType::kAllGatherSingle, OpType::kAllGather,
                       OpType::kReduceScatterSingle, OpType::kAllToAllSingle})
        run(t, n);
  } catch (...) {
    cudaFree(buf);
    throw;
  }
  cudaFree(buf);
}

Hierarchy::~Hierarchy() {
  try {
    finalize();
  } catch (...) {
  }
}

PeerSet Hierarchy::peers(const OpDesc& op) const {
  return make_peer_set(pm_.get(), layout_.local_rank, layout_.local_size, tuning_, state_, ctl_,
                       op);
}

void Hierarchy::run_inter(OpDesc d) {
  lower_op(d, layout_.host, layout_.hosts);
  Work w = inter_->run(d, false);
  std::lock_guard<std::mutex> g(mu_);
  last_inter_ = std::move(w);
}

void Hierarchy::inter_all_reduce(const OpDesc& op, const void* in, void* out, int64_t count,
                                 ReduceKind kind, cudaStream_t s) {
  OpDesc d;
  d.type = OpType::kAllReduce;
  d.seq = op.seq;
  d.timeout = op.timeout;
  d.input = Tensor(const_cast<void*>(in), count, op.input.dtype, op.input.device, s);
  d.output = Tensor(out, count, op.input.dtype, op.input.device, s);
  d.op = ReduceOp(kind);
  run_inter(std::move(d));
}

void Hierarchy::local_exchange(const OpDesc& op, const PtrList& src, const PtrList& dst,
                               uint64_t nbytes, bool every_pair, cudaStream_t s,
                               const std::string& where) {
  enqueue_exchange(peers(op), tuning_, src, dst, nbytes, every_pair, s);
  COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
}

void Hierarchy::local_reduce_scatter(const OpDesc& op, const ReduceSpec& rs, const PtrList& ins,
                                     char* dst, int64_t len, cudaStream_t s,
                                     const std::string& where) {
  const PeerSet ps = peers(op);
  cuda::enqueue_reduce_scatter(ps, tuning_, ReduceScatterShape{ins, dst, len, rs, ps.world}, s);
  COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
}

char* Hierarchy::scratch(Scratch& pool, uint64_t bytes, bool capturing, cudaStream_t s,
                         bool* async, const std::string& where) {
  *async = false;
  if (bytes <= pool.bytes) return pool.p;
  if (capturing) {
    // No cudaMalloc inside a capture: a graph allocation, freed by the same graph.
    void* p = nullptr;
    COMMX_CUDA_CHECK_CTX(cudaMallocAsync(&p, bytes, s), where + "scratch: ");
    *async = true;
    return static_cast<char*>(p);
  }
  // Earlier ops may still use the old buffer: keep it until finalize.
  void* p = nullptr;
  COMMX_CUDA_CHECK_CTX(cudaMalloc(&p, bytes), where + "scratch: ");
  if (pool.p) pool.old.push_back(pool.p);
  pool.p = static_cast<char*>(p);
  pool.bytes = bytes;
  return pool.p;
}

bool Hierarchy::enqueue_reduce_scatter(const OpDesc& op, cudaStream_t s, const std::string& where,
                                       const std::optional<InterLowp>& lowp) {
  const DataType t = op.output.dtype;
  const ReduceKind kind = op.op.kind;
  if (!native_reduce_supported(t, kind)) return false;
  const int64_t n = op.output.count;
  if (n == 0) return true;
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  const int local = layout_.local_size, hosts = layout_.hosts;
  // Comm rank r's input block (the part reduced into rank r's output).
  auto block = [&](int r) {
    return static_cast<char*>(op.inputs[r].data);
  };
  auto rank_of = [&](int host, int q) { return layout_.host_ranks[host][q]; };
  const ReduceKind across = kind == ReduceKind::kMin || kind == ReduceKind::kMax ||
                                    kind == ReduceKind::kProduct
                                ? kind
                                : ReduceKind::kSum;
  auto across_hosts = [&](void* in) {
    // Chunk h of `in` goes to host h (NCCL rank order).
    if (lowp && across == ReduceKind::kSum)
      return inter_reduce_scatter_lowp(op, *lowp, in, op.output.data, n, s, where);
    OpDesc d;
    d.type = OpType::kReduceScatterSingle;
    d.seq = op.seq;
    d.timeout = op.timeout;
    d.input = Tensor(in, hosts * n, t, op.output.device, s);
    d.output = Tensor(op.output.data, n, t, op.output.device, s);
    d.op = ReduceOp(across);
    run_inter(std::move(d));
  };
  // One rank per host (host h = rank h): plain NCCL unless a scale is due.
  if (local == 1 && op.inputs_one_buffer() &&
      make_reduce_spec(t, op.op, world_, false).scale == 1.0) {
    across_hosts(op.inputs[0].data);
    return true;
  }
  // 1. Within the host, per destination host h: local rank q gets the host's partial result of
  //    rank (h, q)'s block, at tmp + h * n (scaled once for AVG / PREMUL_SUM).
  const bool capturing = is_capturing(s);
  bool async = false;
  char* tmp = scratch(partials_, static_cast<uint64_t>(hosts * n * es), capturing, s, &async, where);
  bool al = aligned16(tmp) && (n * es) % 16 == 0;
  for (int r = 0; r < world_; ++r) al = al && aligned16(block(r));
  ReduceSpec rs = make_reduce_spec(t, op.op, world_, al);
  for (int h = 0; h < hosts; ++h) {
    PtrList ins{};
    for (int q = 0; q < local; ++q) ins.p[q] = block(rank_of(h, q));
    local_reduce_scatter(op, rs, ins, tmp + h * n * es, n, s, where);
  }
  // 2. Across hosts: reduce-scatter of the partials.
  across_hosts(tmp);
  if (async) COMMX_CUDA_CHECK_CTX(cudaFreeAsync(tmp, s), where + "scratch: ");
  return true;
}

bool Hierarchy::enqueue_all_gather(const OpDesc& op, cudaStream_t s, const std::string& where) {
  const uint64_t nb = op.input.nbytes();
  if (nb == 0) return true;
  const int local = layout_.local_size, me = layout_.local_rank, hosts = layout_.hosts;
  // Where comm rank r's block lands.
  auto block = [&](int r) {
    return static_cast<char*>(op.outputs[r].data);
  };
  auto rank_of = [&](int host, int q) { return layout_.host_ranks[host][q]; };
  // 1. Across hosts: the ranks with this local index exchange their inputs (grouped NCCL
  //    broadcasts straight into the final places).
  OpDesc d;
  d.type = OpType::kAllGather;
  d.seq = op.seq;
  d.timeout = op.timeout;
  d.input = Tensor(op.input.data, static_cast<int64_t>(nb), DataType::kUInt8, op.input.device, s);
  for (int h = 0; h < hosts; ++h)
    d.outputs.emplace_back(block(rank_of(h, me)), static_cast<int64_t>(nb), DataType::kUInt8,
                           op.input.device, s);
  run_inter(std::move(d));
  // 2. Within the host, per source host: every local rank shares what it received.
  for (int h = 0; h < hosts && local > 1; ++h) {
    PtrList src{}, dst{};
    for (int q = 0; q < local; ++q) {
      src.p[q] = block(rank_of(h, me));
      dst.p[q] = block(rank_of(h, q));
    }
    local_exchange(op, src, dst, nb, true, s, where);
  }
  return true;
}

bool Hierarchy::enqueue(const OpDesc& op, cudaStream_t s, const std::string& where,
                        const std::optional<InterLowp>& lowp) {
  if (!inter_) return false;
  // The per-host steps move equal pieces; the forms with per-peer counts go to NCCL.
  if (op.collective == Collective::kAllGather && op.equal_split())
    return enqueue_all_gather(op, s, where);
  if (op.collective == Collective::kReduceScatter && op.equal_split())
    return enqueue_reduce_scatter(op, s, where, lowp);
  if (op.collective != Collective::kAllReduce) return false;
  const DataType t = op.input.dtype;
  const ReduceKind kind = op.op.kind;
  if (!native_reduce_supported(t, kind)) return false;
  // The table's choice: "hierarchical" (by default, or a hint naming it or a one-host row), else
  // "nccl" (hint, or DDA off), which leaves the whole op to NCCL.
  if (select_allreduce(tuning_, op, topology(), nullptr, where).run.id !=
      AllReduceAlgo::kHierarchical)
    return false;
  const int64_t n = op.input.count;
  if (n == 0) return true;
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  const int local = layout_.local_size, me = layout_.local_rank;
  char* in = static_cast<char*>(op.input.data);
  char* out = static_cast<char*>(op.output.data);
  // AVG and PREMUL_SUM scale once, in the local step (by 1/world resp. the factor); the hosts
  // then sum the scaled partial results.
  ReduceSpec rs = make_reduce_spec(t, op.op, world_, aligned16(in) && aligned16(out));
  const ReduceKind across = kind == ReduceKind::kMin || kind == ReduceKind::kMax ||
                                    kind == ReduceKind::kProduct
                                ? kind
                                : ReduceKind::kSum;
  PeerSet ps = peers(op);
  auto reduce_scatter = [&](const PtrList& ins, char* dst, int64_t len) {
    local_reduce_scatter(op, rs, ins, dst, len, s, where);
  };
  // The step across hosts; in FP8 when the op runs in low precision (its sums are SUMs here:
  // AVG and PREMUL_SUM scaled in the local step).
  auto across_hosts = [&](const void* from, void* to, int64_t count) {
    if (lowp && across == ReduceKind::kSum)
      inter_all_reduce_lowp(op, *lowp, from, to, count, s, where);
    else
      inter_all_reduce(op, from, to, count, across, s);
  };
  if (local == 1) {
    // Only the scale needs a kernel (one rank: the reduce-scatter is a scaled copy).
    if (rs.scale == 1.0) {
      across_hosts(in, out, n);
    } else {
      PtrList ins{};
      ins.p[0] = in;
      reduce_scatter(ins, out, n);
      across_hosts(out, out, n);
    }
    return true;
  }
  // Shards of whole 16-byte packs (plan_shards); the tail is reduced onto the last local rank,
  // which adds it to its shard across hosts and broadcasts it locally.
  const ShardPlan plan = plan_shards(n, es, local);
  const int64_t s0 = plan.shard, n0 = s0 * local, r = plan.tail;
  if (s0 > 0) {
    PtrList ins{};
    for (int q = 0; q < local; ++q) ins.p[q] = in + q * s0 * es;
    reduce_scatter(ins, out + me * s0 * es, s0);
  }
  if (r > 0) {
    launch_allreduce_flat(ps, in + n0 * es, out + n0 * es, r, local - 1, rs, 1, s);
    COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
  }
  const int64_t shard = plan.owned(me, local);
  if (shard > 0) across_hosts(out + me * s0 * es, out + me * s0 * es, shard);
  if (s0 > 0) {
    PtrList src{}, dst{};
    for (int q = 0; q < local; ++q) {
      src.p[q] = out + me * s0 * es;
      dst.p[q] = out + q * s0 * es;
    }
    local_exchange(op, src, dst, s0 * es, true, s, where);
  }
  if (r > 0) {
    PtrList src{}, dst{};
    if (me == local - 1)
      for (int q = 0; q < local; ++q) src.p[q] = out + n0 * es;
    dst.p[local - 1] = out + n0 * es;
    local_exchange(op, src, dst, r * es, false, s, where);
  }
  return true;
}

std::exception_ptr Hierarchy::inter_error() const {
  Work w;
  {
    std::lock_guard<std::mutex> g(mu_);
    w = last_inter_;
  }
  return w.error();
}

void Hierarchy::abort() {
  if (inter_) inter_->abort();
}

void Hierarchy::finalize() {
  {
    std::lock_guard<std::mutex> g(mu_);
    last_inter_ = Work();  // its hooks point into inter_
  }
  if (inter_) inter_->finalize();
  inter_.reset();
  if (pm_) pm_->close();
  DeviceGuard g(device_);
  for (Scratch* pool : {&partials_, &lowp_}) {
    for (char* p : pool->old) cudaFree(p);
    if (pool->p) cudaFree(pool->p);
    *pool = Scratch{};
  }
}

}  // namespace commx::cuda
