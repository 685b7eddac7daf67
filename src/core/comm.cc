// Comm: creation (eager, collective), op issue (validate, number, hooks), split and abort.
// Layer: core. Backends are found by name through the registry.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>

#include "commx/comm.h"
#include "commx/error.h"
#include "core/bootstrap.h"
#include "core/comm_impl.h"
#include "core/env.h"
#include "core/settings.h"

namespace commx {
namespace {

// The instance number of a comm named `name` on `store`: how many comms of that name this rank
// created on this store before, counted in the store itself. Members of one group agree on it
// whatever else each of them created elsewhere (a subgroup some ranks skipped, another store), so
// the number only separates a name reused on one store by the same members.
uint64_t store_instance(Store& store, const std::string& name, int rank) {
  return static_cast<uint64_t>(store.add("commx/" + name + "/created/" + std::to_string(rank), 1) - 1);
}

Timeout resolve_timeout(const CommOptions& o) {
  if (o.timeout) {
    if (*o.timeout < Timeout::zero() || *o.timeout > kMaxTimeout)
      throw Error(ErrorCode::kInvalidArgument,
                  "CommOptions::timeout of " + std::to_string(o.timeout->count()) +
                      " ms: expected 0 to " + std::to_string(kMaxTimeout.count()) + " ms");
    return *o.timeout;
  }
  if (setting_is_set("COMMX_TIMEOUT_SECONDS"))
    return timeout_from_seconds(setting_seconds("COMMX_TIMEOUT_SECONDS"), "COMMX_TIMEOUT_SECONDS");
  return kDefaultTimeout;
}

// The launcher's rank of each comm rank, for dumps: the hint "world_ranks" ("0,2,4", as the torch
// process group passes its members), else 0..size-1.
std::vector<int> world_ranks_of(const Hints& hints, const std::string& name, int rank, int size) {
  std::vector<int> out;
  auto it = hints.find("world_ranks");
  if (it == hints.end()) {
    for (int i = 0; i < size; ++i) out.push_back(i);
    return out;
  }
  std::stringstream in(it->second);
  std::string item;
  try {
    while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  } catch (const std::exception&) {
    out.clear();
  }
  if (static_cast<int>(out.size()) != size)
    throw Error(ErrorCode::kInvalidArgument,
                comm_context(name, rank, size) + "hint world_ranks='" + it->second +
                    "' is not a comma-separated list of " + std::to_string(size) + " ranks");
  return out;
}

// Ranks started with different world sizes meet at the comm's first key: the first size written
// stays, and a rank with another one says so (instead of failing later on a layout or a wait).
void check_same_size(Store& store, const std::string& name, int rank, int size,
                     const std::string& source) {
  const std::string mine = std::to_string(size);
  Bytes got = store.compare_set("size", {}, Bytes(mine.begin(), mine.end()));
  const std::string first(got.begin(), got.end());
  if (first != mine)
    throw Error(ErrorCode::kInvalidArgument,
                comm_context(name, rank, size) + "this rank has world size " + mine + " (from " +
                    (source.empty() ? std::string("the default") : source) + ") but another rank of this comm has world size " + first +
                    ": every rank must be started with the same size");
}

std::shared_ptr<FlightRecorder> make_recorder() {
  return std::make_shared<FlightRecorder>(static_cast<size_t>(setting_int("COMMX_FLIGHT_RECORDER_SIZE")));
}

// What hooks and the flight recorder see: the count every rank agrees on (the first tensor's of a
// point-to-point op), so records of one op compare equal across ranks.
OpInfo info_of(const OpDesc& op) {
  const int64_t count = op.collective == Collective::kP2P ? op.input.count : op.agreed_count();
  return OpInfo{op.type, op.seq, op.dtype(), count, op.root};
}

}  // namespace

std::string CommImpl::op_context(const OpDesc& op) const {
  return commx::op_context(name, rank, size, op);
}

std::shared_ptr<Comm> Comm::create(const std::string& backend, Device device, const std::string& name,
                                   CommOptions options) {
  auto comm = std::shared_ptr<Comm>(new Comm());
  comm->impl_ = std::make_unique<CommImpl>();
  CommImpl& c = *comm->impl_;
  c.name = name;
  c.backend_name = backend;
  c.device = device;
  c.timeout = resolve_timeout(options);
  c.abort_process = options.abort_process_on_timeout_or_error.value_or(
      setting_bool("COMMX_ABORT_ON_ERROR"));

  RankInfo ri;
  if (options.rank && options.size) {
    ri.rank = *options.rank;
    ri.size = *options.size;
    ri.source = "options";
  } else if (auto env = rank_from_env()) {
    ri = *env;
  }
  if (ri.size < 1 || ri.rank < 0 || ri.rank >= ri.size)
    throw Error(ErrorCode::kInvalidArgument, "comm '" + name + "': rank " + std::to_string(ri.rank) +
                                                 " is not in [0, " + std::to_string(ri.size) + ")");
  c.rank = ri.rank;
  c.size = ri.size;
  // An unknown backend is reported before anything waits for a store.
  c.backend = create_backend(backend);
  c.base_store = options.store ? options.store : store_from_env(ri, c.timeout);
  // Ranks from the launcher's variables can repeat by mistake (two processes given RANK=0);
  // a store the caller passed comes with ranks the caller chose, each comm its own.
  if (!options.store) claim_rank(*c.base_store, name, c.rank, c.size);
  c.store_prefix = "commx/" + name + "/" + std::to_string(store_instance(*c.base_store, name, c.rank));
  c.world_ranks = world_ranks_of(options.hints, name, c.rank, c.size);
  options.timeout = c.timeout;
  c.options = options;

  c.recorder = make_recorder();
  if (!c.backend->accepts_device(device))
    throw Error(ErrorCode::kInvalidArgument, "comm '" + name + "' rank " + std::to_string(c.rank) +
                                                 ": backend '" + backend + "' cannot run on device " + device.str());
  c.store = make_prefix_store(c.store_prefix, c.base_store);
  check_same_size(*c.store, name, c.rank, c.size, ri.source);
  BackendContext ctx{name, c.rank, c.size, device, c.store, options, c.world_ranks};
  try {
    c.backend->init(ctx);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout || options.store) throw;
    std::string note;
    try {
      note = duplicate_rank_note(*c.base_store, name, c.rank);
    } catch (const Error&) {
    }
    if (note.empty()) throw;
    throw Error(ErrorCode::kInvalidArgument, comm_context(name, c.rank, c.size) + note +
                                                 " (the rendezvous then timed out: " + e.what() + ")");
  }
  return comm;
}

Comm::~Comm() {
  if (impl_ && impl_->backend && !impl_->finalized.load()) {
    try {
      impl_->backend->finalize();
    } catch (const std::exception& e) {
      std::cerr << "commx: comm '" << impl_->name << "' finalize failed: " << e.what() << "\n";
    }
  }
}

int Comm::rank() const { return impl_->rank; }
int Comm::size() const { return impl_->size; }
const std::string& Comm::name() const { return impl_->name; }
Device Comm::device() const { return impl_->device; }
std::string Comm::backend_name() const { return impl_->backend_name; }
std::string Comm::link() const { return impl_->backend->link(); }
Timeout Comm::timeout() const { return impl_->timeout; }
const std::shared_ptr<Store>& Comm::store() const { return impl_->store; }
Backend& Comm::unsafe_get_backend() { return *impl_->backend; }

Work Comm::issue(OpDesc op, bool async_op, const OpOptions& o) {
  CommImpl& c = *impl_;
  op.seq = c.seq.fetch_add(1) + 1;
  if (c.aborted.load())
    throw Error(ErrorCode::kAborted, c.op_context(op) + "the comm was aborted");
  if (c.finalized.load())
    throw Error(ErrorCode::kInvalidArgument, c.op_context(op) + "the comm was finalized");
  op.timeout = o.timeout.value_or(c.timeout);
  if (op.timeout < Timeout::zero() || op.timeout > kMaxTimeout)
    throw Error(ErrorCode::kInvalidArgument,
                c.op_context(op) + "timeout of " + std::to_string(op.timeout.count()) +
                    " ms: expected 0 to " + std::to_string(kMaxTimeout.count()) + " ms");
  op.hints = o.hints;
  validate_op(c, op);
  lower_op(op, c.rank, c.size);
  check_supported(c, op);
  OpInfo info = info_of(op);
  {
    std::lock_guard<std::mutex> g(c.hooks_mu);
    for (auto& h : c.pre_hooks) h(*this, info);
  }
  uint64_t rec = c.recorder->record_start(info.type, info.seq, info.dtype, info.count, info.root);
  Work w;
  try {
    w = c.backend->run(op, async_op);
  } catch (const Error& e) {
    c.recorder_ref().fail_and_dump(rec, e.what());
    if ((e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kPeerFailure) && c.abort_process) {
      std::cerr << "commx: " << e.what() << " (aborting the process: abort_process_on_timeout_or_error)\n";
      abort();
      std::abort();
    }
    throw;
  } catch (const std::exception& e) {
    c.recorder_ref().fail_and_dump(rec, e.what());
    throw;
  }
  c.recorder->record_issued(rec, w);
  // An async op's failure shows only when it is waited for or polled: its Work dumps then.
  if (async_op) w = recorded_work(std::move(w), c.recorder_ref(), rec);
  {
    std::lock_guard<std::mutex> g(c.hooks_mu);
    for (auto& h : c.post_hooks) h(*this, info, w);
  }
  return w;
}

// Each op names the fields of its description that it sets (OpDesc's order); issue() does the rest.
Work Comm::all_reduce(const Tensor& t, ReduceOp op, bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kAllReduce, .input = t, .output = t, .op = op}, async_op, o);
}

Work Comm::reduce(const Tensor& t, int root, ReduceOp op, bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kReduce, .input = t, .output = t, .op = op, .root = root}, async_op,
               o);
}

Work Comm::broadcast(const Tensor& t, int root, bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kBroadcast, .input = t, .output = t, .root = root}, async_op, o);
}

Work Comm::all_gather(const std::vector<Tensor>& outputs, const Tensor& input, bool async_op,
                      const OpOptions& o) {
  return issue({.type = OpType::kAllGather, .input = input, .outputs = outputs}, async_op, o);
}

Work Comm::all_gather_single(const Tensor& output, const Tensor& input, bool async_op,
                             const OpOptions& o) {
  return issue({.type = OpType::kAllGatherSingle, .input = input, .output = output}, async_op, o);
}

Work Comm::all_gather_v(const std::vector<Tensor>& outputs, const Tensor& input, bool async_op,
                        const OpOptions& o) {
  return issue({.type = OpType::kAllGatherV, .input = input, .outputs = outputs}, async_op, o);
}

Work Comm::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                          bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kReduceScatter, .output = output, .inputs = inputs, .op = op},
               async_op, o);
}

Work Comm::reduce_scatter_single(const Tensor& output, const Tensor& input, ReduceOp op,
                                 bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kReduceScatterSingle, .input = input, .output = output, .op = op},
               async_op, o);
}

Work Comm::reduce_scatter_v(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                            bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kReduceScatterV, .output = output, .inputs = inputs, .op = op},
               async_op, o);
}

Work Comm::all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                      bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kAllToAll, .inputs = inputs, .outputs = outputs}, async_op, o);
}

Work Comm::all_to_all_single(const Tensor& output, const Tensor& input, bool async_op,
                             const OpOptions& o) {
  return issue({.type = OpType::kAllToAllSingle, .input = input, .output = output}, async_op, o);
}

Work Comm::all_to_all_v_single(const Tensor& output, const Tensor& input,
                               const std::vector<int64_t>& output_splits,
                               const std::vector<int64_t>& input_splits, bool async_op,
                               const OpOptions& o) {
  return issue({.type = OpType::kAllToAllVSingle,
                .input = input,
                .output = output,
                .inputs = split_views(input, input_splits),
                .outputs = split_views(output, output_splits)},
               async_op, o);
}

Work Comm::issue_dynamic(DynamicA2AForm form, const Tensor& output, const Tensor& input,
                         const Tensor& output_counts, const Tensor& input_counts,
                         int64_t row_size, bool async_op, const OpOptions& o) {
  // A dispatch/combine has one segment per expert: counts.count / size experts per rank
  // (validate_op rejects a count not divisible by size).
  const int experts = form == DynamicA2AForm::kPlain
                          ? 1
                          : static_cast<int>(std::max<int64_t>(input_counts.count / size(), 1));
  return issue({.type = OpType::kAllToAllVDynamic,
                .input = input,
                .output = output,
                .dynamic = {.input_counts = input_counts,
                            .output_counts = output_counts,
                            .row_elems = row_size,
                            .experts_per_rank = experts,
                            .form = form}},
               async_op, o);
}

Work Comm::all_to_all_v_dynamic(const Tensor& output, const Tensor& input,
                                const Tensor& output_split_sizes, const Tensor& input_split_sizes,
                                int64_t row_size, bool async_op, const OpOptions& o) {
  return issue_dynamic(DynamicA2AForm::kPlain, output, input, output_split_sizes,
                       input_split_sizes, row_size, async_op, o);
}

Work Comm::device_alltoallv_single(const Tensor& output, const Tensor& input,
                                   const Tensor& output_split_sizes,
                                   const Tensor& input_split_sizes, bool async_op,
                                   const OpOptions& o) {
  return all_to_all_v_dynamic(output, input, output_split_sizes, input_split_sizes, 1, async_op, o);
}

Work Comm::dispatch(const Tensor& output, const Tensor& input, const Tensor& output_split_sizes,
                    const Tensor& expert_counts, int64_t row_size, bool async_op,
                    const OpOptions& o) {
  return issue_dynamic(DynamicA2AForm::kDispatch, output, input, output_split_sizes,
                       expert_counts, row_size, async_op, o);
}

Work Comm::combine(const Tensor& output, const Tensor& input, const Tensor& output_split_sizes,
                   const Tensor& input_split_sizes, int64_t row_size, bool async_op,
                   const OpOptions& o) {
  return issue_dynamic(DynamicA2AForm::kCombine, output, input, output_split_sizes,
                       input_split_sizes, row_size, async_op, o);
}

Work Comm::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root, bool async_op,
                  const OpOptions& o) {
  return issue({.type = OpType::kGather, .input = input, .outputs = outputs, .root = root},
               async_op, o);
}

Work Comm::gather_single(const Tensor& output, const Tensor& input, int root, bool async_op,
                         const OpOptions& o) {
  return issue({.type = OpType::kGatherSingle, .input = input, .output = output, .root = root},
               async_op, o);
}

Work Comm::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root, bool async_op,
                   const OpOptions& o) {
  return issue({.type = OpType::kScatter, .output = output, .inputs = inputs, .root = root},
               async_op, o);
}

Work Comm::barrier(bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kBarrier}, async_op, o);
}

Work Comm::send(const Tensor& t, int dst, bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kSend, .input = t, .output = t, .root = dst}, async_op, o);
}

Work Comm::recv(const Tensor& t, int src, bool async_op, const OpOptions& o) {
  return issue({.type = OpType::kRecv, .input = t, .output = t, .root = src}, async_op, o);
}

Work Comm::batch_p2p(const std::vector<P2POp>& ops, bool async_op, const OpOptions& o) {
  return issue(
      {.type = OpType::kBatchP2P, .input = ops.empty() ? Tensor() : ops[0].tensor, .p2p = ops},
      async_op, o);
}

BatchOp& BatchOp::send(const Tensor& t, int dst) {
  ops_.push_back(P2POp{true, t, dst});
  return *this;
}
BatchOp& BatchOp::recv(const Tensor& t, int src) {
  ops_.push_back(P2POp{false, t, src});
  return *this;
}
Work BatchOp::issue(bool async_op, const OpOptions& opts) {
  Work w = comm_->batch_p2p(ops_, async_op, opts);
  ops_.clear();
  return w;
}

std::shared_ptr<Comm> Comm::split(const std::vector<int>& ranks, const std::string& name, CommOptions options) {
  CommImpl& c = *impl_;
  uint64_t instance = c.split_count++;
  if (ranks.empty()) return nullptr;
  int new_rank = -1;
  std::string key;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= c.size)
      throw Error(ErrorCode::kInvalidArgument, "[comm '" + c.name + "' rank " + std::to_string(c.rank) +
                                                   "] split: rank " + std::to_string(ranks[i]) + " is out of range");
    for (size_t j = 0; j < i; ++j)
      if (ranks[j] == ranks[i])
        throw Error(ErrorCode::kInvalidArgument, "[comm '" + c.name + "' rank " + std::to_string(c.rank) +
                                                     "] split: rank " + std::to_string(ranks[i]) + " is listed twice");
    if (ranks[i] == c.rank) new_rank = static_cast<int>(i);
    key += (i ? "," : "") + std::to_string(ranks[i]);
  }
  if (new_rank < 0)
    throw Error(ErrorCode::kInvalidArgument, "[comm '" + c.name + "' rank " + std::to_string(c.rank) +
                                                 "] split '" + name + "': this rank is not in the list [" + key + "]");
  auto comm = std::shared_ptr<Comm>(new Comm());
  comm->impl_ = std::make_unique<CommImpl>();
  CommImpl& n = *comm->impl_;
  n.name = name;
  n.backend_name = c.backend_name;
  n.device = c.device;
  n.timeout = options.timeout.value_or(c.timeout);
  n.abort_process = options.abort_process_on_timeout_or_error.value_or(c.abort_process);
  n.rank = new_rank;
  n.size = static_cast<int>(ranks.size());
  n.base_store = c.base_store;
  // The split's keys live under the parent's prefix, the split number and the member list, so
  // disjoint groups splitting with the same name never meet.
  n.store_prefix = c.store_prefix + "/split" + std::to_string(instance) + "/" + name + "/" + key;
  n.store = make_prefix_store(n.store_prefix, n.base_store);
  for (int r : ranks) n.world_ranks.push_back(c.world_ranks[r]);
  options.timeout = n.timeout;
  if (options.hints.empty()) options.hints = c.options.hints;
  n.options = options;
  n.recorder = make_recorder();
  n.backend = create_backend(n.backend_name);
  BackendContext ctx{name, n.rank, n.size, n.device, n.store, options, n.world_ranks};
  n.backend->init(ctx);
  return comm;
}

std::shared_ptr<Comm> Comm::shrink(const std::vector<int>& exclude, const std::string& name,
                                   CommOptions options) {
  CommImpl& c = *impl_;
  const std::string where = comm_context(c.name, c.rank, c.size) + "shrink: ";
  std::vector<bool> out(c.size, false);
  for (int r : exclude) {
    if (r < 0 || r >= c.size)
      throw Error(ErrorCode::kInvalidArgument,
                  where + "excluded rank " + std::to_string(r) + " is out of range [0, " +
                      std::to_string(c.size) + ")");
    if (out[r])
      throw Error(ErrorCode::kInvalidArgument, where + "rank " + std::to_string(r) + " is excluded twice");
    out[r] = true;
  }
  if (out[c.rank])
    throw Error(ErrorCode::kInvalidArgument,
                where + "this rank is in the exclude list (only the ranks that stay call shrink)");
  std::vector<int> keep;
  for (int r = 0; r < c.size; ++r)
    if (!out[r]) keep.push_back(r);
  return split(keep, name, std::move(options));
}

void Comm::abort() {
  CommImpl& c = *impl_;
  if (c.aborted.exchange(true)) return;
  c.backend->abort();
  dump_flight_record();
  std::vector<AbortHook> hooks;
  {
    std::lock_guard<std::mutex> g(c.hooks_mu);
    hooks = c.abort_hooks;
  }
  for (auto& h : hooks) h(*this);
}

bool Comm::is_aborted() const { return impl_->aborted.load(); }

void Comm::finalize() {
  if (impl_->finalized.exchange(true)) return;
  impl_->backend->finalize();
}

std::string Comm::flight_record_json() {
  return impl_->recorder->dump_json(impl_->name, impl_->rank, impl_->size, impl_->backend_name,
                                    impl_->world_ranks);
}

std::string Comm::dump_flight_record() {
  return write_trace_file(impl_->name, impl_->rank, flight_record_json());
}

void Comm::register_pre_hook(PreHook h) {
  std::lock_guard<std::mutex> g(impl_->hooks_mu);
  impl_->pre_hooks.push_back(std::move(h));
}
void Comm::register_post_hook(PostHook h) {
  std::lock_guard<std::mutex> g(impl_->hooks_mu);
  impl_->post_hooks.push_back(std::move(h));
}
void Comm::register_abort_hook(AbortHook h) {
  std::lock_guard<std::mutex> g(impl_->hooks_mu);
  impl_->abort_hooks.push_back(std::move(h));
}

}  // namespace commx
