// GlooBackend (see gloo_backend.h): a table row per collective, each a call of Gloo's.
// Layer: backends/gloo.
#include "gloo_backend.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <iostream>

#include "commx/error.h"
#include "store_adapter.h"

namespace commx::gloo_backend {
namespace {

// Slot prefix for send/recv; Gloo's collectives use prefixes 0x01-0x08.
constexpr uint8_t kP2PSlotPrefix = 0x40;

// Calls f(T{}) with an unsigned type of `size` bytes: Gloo's setters are templates on the
// element type but only use sizeof(T).
template <typename F>
void with_elem(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  throw Error(ErrorCode::kInternal, "gloo backend: element size " + std::to_string(size));
}

// Gloo combines two buffers at a time through a function of (out, a, b, count): the core's host
// reduction of those two, leaving AVG and PREMUL_SUM a plain sum (finished once at the end).
std::function<void(void*, const void*, const void*, size_t)> pairwise(const HostReducer& r) {
  return [&r](void* out, const void* a, const void* b, size_t n) {
    const void* srcs[2] = {a, b};
    r.reduce(out, srcs, 2, n, /*finish=*/false);
  };
}

// The all_gather row for equal pieces (else its fallback, allgatherv).
bool equal_pieces(const OpDesc& op, const Topology&) { return op.equal_split(); }

std::string local_hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

GlooBackend::~GlooBackend() { drain(); }

void GlooBackend::init(const BackendContext& ctx) {
  ctx_ = ctx;
  send_seq_.assign(ctx.size, 0);
  recv_seq_.assign(ctx.size, 0);
  Timeout timeout = ctx.options.timeout.value_or(kDefaultTimeout);
  // Loopback when every rank is on this host (the common case here), else the host name.
  std::string host = local_hostname();
  std::string bind = "127.0.0.1";
  auto hint = ctx.options.hints.find("gloo.hostname");
  if (hint != ctx.options.hints.end()) {
    bind = hint->second;
  } else if (auto env = env_str("COMMX_GLOO_HOSTNAME")) {
    bind = *env;
  } else if (ctx.size > 1) {
    ctx.store->set_str("gloo/host/" + std::to_string(ctx.rank), host);
    for (int r = 0; r < ctx.size; ++r) {
      if (ctx.store->get_str("gloo/host/" + std::to_string(r)) != host) {
        bind = host;
        break;
      }
    }
  }
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = bind;
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(ctx.rank, ctx.size);
    context->setTimeout(timeout);
    StoreAdapter store(ctx.store);
    context->connectFullMesh(store, device);
    gloo_ = context;
  } catch (const ::gloo::Exception& e) {
    throw Error(ErrorCode::kPeerFailure,
                comm_context(ctx) + "gloo: connecting the full mesh over " + bind +
                    " failed: " + e.what());
  }
}

bool GlooBackend::supports(Collective c, DataType dtype, ReduceKind kind) const {
  if (c == Collective::kAllToAllVDynamic) return false;  // device-resident counts: GPU backends only
  if (!is_reduction(c)) return true;  // data movement works on bytes of any dtype
  if (kind == ReduceKind::kAvg || kind == ReduceKind::kPremulSum) {
    // Sum, then scale in the element type: defined for floating types only.
    return dtype_is_floating(dtype);
  }
  return reduce_supported_on_host(kind, dtype);
}

void GlooBackend::check_open(const OpDesc& op) {
  if (aborted_.load())
    throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
  if (!gloo_) throw Error(ErrorCode::kInvalidArgument, op_context(ctx_, op) + "gloo: finalized");
}

void GlooBackend::execute(const OpDesc& op) {
  if (aborted_.load())
    throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
  try {
    dispatch(op);
  } catch (const ::gloo::IoException& e) {
    if (aborted_.load())
      throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
    std::string what = e.what();
    if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos)
      throw Error(ErrorCode::kTimeout, op_context(ctx_, op) + "gloo: timed out after " +
                                           std::to_string(op.timeout.count()) + " ms: " + what);
    throw Error(ErrorCode::kPeerFailure, op_context(ctx_, op) + "gloo: a peer failed: " + what);
  } catch (const ::gloo::Exception& e) {
    if (aborted_.load())
      throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
    throw Error(ErrorCode::kInternal, op_context(ctx_, op) + "gloo: " + e.what());
  }
}

std::span<const GlooBackend::GlooAlgorithm> GlooBackend::algorithms() {
  using C = Collective;
  using G = GlooBackend;
  static const GlooAlgorithm kTable[] = {
      {"allreduce", C::kAllReduce, nullptr, &G::all_reduce},
      {"reduce", C::kReduce, nullptr, &G::reduce},
      {"broadcast", C::kBroadcast, nullptr, &G::broadcast},
      {"allgather", C::kAllGather, equal_pieces, &G::all_gather, "allgatherv"},
      {"allgatherv", C::kAllGather, nullptr, &G::all_gather_v},
      {"allreduce", C::kReduceScatter, nullptr, &G::reduce_scatter},
      {"alltoall", C::kAllToAll, nullptr, &G::all_to_all, nullptr, "alltoallv"},
      {"gather", C::kGather, nullptr, &G::gather},
      {"scatter", C::kScatter, nullptr, &G::scatter},
      {"barrier", C::kBarrier, nullptr, &G::barrier},
      {"unbound_buffers", C::kP2P, nullptr, &G::p2p},
  };
  return kTable;
}

void GlooBackend::dispatch(const OpDesc& op) {
  const GlooAlgorithm* row = select_library_row(algorithms(), op);
  if (!row) throw Error(ErrorCode::kUnsupported, op_context(ctx_, op) + "gloo: not supported");
  (this->*row->run)(op);
}

// Copies a buffer laid out as back-to-back views into the views (nothing when it is them).
static void scatter_views(const char* from, const std::vector<Tensor>& views) {
  if (back_to_back(views) && from == bytes_of(views[0])) return;
  for (const auto& t : views) {
    copy_bytes(t.data, from, t.nbytes());
    from += t.nbytes();
  }
}

void GlooBackend::all_reduce(const OpDesc& op) { all_reduce_buffer(op, op.input.data, op.input.count); }

void GlooBackend::all_reduce_buffer(const OpDesc& op, void* data, int64_t count) {
  uint32_t tag = next_tag();
  const DataType dt = op.dtype();
  HostReducer reducer(dt, op.op, ctx_.size);
  if (count == 0 || ctx_.size == 1) {
    if (count > 0 && op.op.kind == ReduceKind::kPremulSum) reducer.finish(data, count);
    return;
  }
  with_elem(dtype_size(dt), [&](auto t) {
    using T = decltype(t);
    ::gloo::AllreduceOptions o(gloo_);
    o.setOutput<T>(static_cast<T*>(data), count);
    o.setReduceFunction(pairwise(reducer));
    o.setTag(tag);
    o.setTimeout(op.timeout);
    ::gloo::allreduce(o);
  });
  reducer.finish(data, count);
}

void GlooBackend::reduce(const OpDesc& op) {
  uint32_t tag = next_tag();
  const Tensor& t = op.input;
  if (t.count == 0) return;
  bool root = ctx_.rank == op.root;
  HostReducer reducer(t.dtype, op.op, ctx_.size);
  if (ctx_.size > 1) {
    // Gloo uses the output as scratch on every rank; non-roots keep their buffer unchanged.
    void* out = t.data;
    if (!root) {
      scratch_.resize(t.nbytes());
      copy_bytes(scratch_.data(), t.data, t.nbytes());
      out = scratch_.data();
    }
    with_elem(dtype_size(t.dtype), [&](auto e) {
      using T = decltype(e);
      ::gloo::ReduceOptions o(gloo_);
      o.setOutput<T>(static_cast<T*>(out), t.count);
      o.setRoot(op.root);
      o.setReduceFunction(pairwise(reducer));
      o.setTag(tag);
      o.setTimeout(op.timeout);
      ::gloo::reduce(o);
    });
  }
  if (root) reducer.finish(t.data, t.count);
}

void GlooBackend::broadcast(const OpDesc& op) {
  uint32_t tag = next_tag();
  const Tensor& t = op.input;
  if (t.count == 0 || ctx_.size == 1) return;
  with_elem(dtype_size(t.dtype), [&](auto e) {
    using T = decltype(e);
    ::gloo::BroadcastOptions o(gloo_);
    // Only the output is set, on every rank: the root sends from it in place.
    o.setOutput<T>(static_cast<T*>(t.data), t.count);
    o.setRoot(op.root);
    o.setTag(tag);
    o.setTimeout(op.timeout);
    ::gloo::broadcast(o);
  });
}

void GlooBackend::all_gather(const OpDesc& op) {
  uint32_t tag = next_tag();
  const Tensor& in = op.input;
  if (in.count == 0) return;
  char* out = op.outputs_one_buffer() ? bytes_of(op.outputs[0]) : nullptr;
  if (!out) {
    scratch_.resize(in.nbytes() * ctx_.size);
    out = reinterpret_cast<char*>(scratch_.data());
  }
  char* mine = out + ctx_.rank * in.nbytes();
  if (ctx_.size == 1) {
    copy_bytes(mine, in.data, in.nbytes());
  } else {
    with_elem(dtype_size(in.dtype), [&](auto e) {
      using T = decltype(e);
      ::gloo::AllgatherOptions o(gloo_);
      // In place when the input already sits at this rank's slot of the output.
      if (mine != in.data) o.setInput<T>(static_cast<T*>(in.data), in.count);
      o.setOutput<T>(reinterpret_cast<T*>(out), in.count * ctx_.size);
      o.setTag(tag);
      o.setTimeout(op.timeout);
      ::gloo::allgather(o);
    });
  }
  scatter_views(out, op.outputs);
}

void GlooBackend::all_gather_v(const OpDesc& op) {
  uint32_t tag = next_tag();
  std::vector<size_t> counts;
  for (const auto& t : op.outputs) counts.push_back(static_cast<size_t>(t.count));
  size_t total = total_bytes(op.outputs);
  if (total == 0) return;
  char* out = back_to_back(op.outputs) ? bytes_of(op.outputs[0]) : nullptr;
  if (!out) {
    scratch_.resize(total);
    out = reinterpret_cast<char*>(scratch_.data());
  }
  with_elem(dtype_size(op.input.dtype), [&](auto e) {
    using T = decltype(e);
    ::gloo::AllgathervOptions o(gloo_);
    o.setInput<T>(static_cast<T*>(op.input.data), op.input.count);
    o.setOutput<T>(reinterpret_cast<T*>(out), counts);
    o.setTag(tag);
    o.setTimeout(op.timeout);
    ::gloo::allgatherv(o);
  });
  scatter_views(out, op.outputs);
}

// Gloo has no type-erased reduce-scatter: like torch's ProcessGroupGloo, all-reduce a staged
// copy of the whole input and keep this rank's block.
void GlooBackend::reduce_scatter(const OpDesc& op) {
  const Tensor& out = op.output;
  const size_t esize = dtype_size(out.dtype);
  int64_t total = 0, offset = 0;
  for (int r = 0; r < ctx_.size; ++r) {
    if (r == ctx_.rank) offset = total;
    total += op.inputs[r].count;
  }
  scratch_.resize(total * esize);
  char* p = reinterpret_cast<char*>(scratch_.data());
  for (const auto& t : op.inputs) {
    copy_bytes(p, t.data, t.nbytes());
    p += t.nbytes();
  }
  all_reduce_buffer(op, scratch_.data(), total);
  copy_bytes(out.data, scratch_.data() + offset * esize, out.nbytes());
}

// Gloo needs distinct contiguous input and output buffers; the per-peer counts of the list and v
// forms go through alltoallv.
void GlooBackend::all_to_all(const OpDesc& op) {
  uint32_t tag = next_tag();
  const size_t in_bytes = total_bytes(op.inputs), out_bytes = total_bytes(op.outputs);
  if (in_bytes == 0 && out_bytes == 0) return;
  const char* in = back_to_back(op.inputs) ? bytes_of(op.inputs[0]) : nullptr;
  char* out = back_to_back(op.outputs) ? bytes_of(op.outputs[0]) : nullptr;
  const bool overlap = in && out && in < out + out_bytes && out < in + in_bytes;
  if (!in || overlap) {
    scratch_.resize(in_bytes);
    char* p = reinterpret_cast<char*>(scratch_.data());
    for (const auto& t : op.inputs) {
      copy_bytes(p, t.data, t.nbytes());
      p += t.nbytes();
    }
    in = reinterpret_cast<char*>(scratch_.data());
  }
  std::vector<uint8_t> staged_out;
  if (!out) {
    staged_out.resize(out_bytes);
    out = reinterpret_cast<char*>(staged_out.data());
  }
  with_elem(dtype_size(op.dtype()), [&](auto e) {
    using T = decltype(e);
    T* src = reinterpret_cast<T*>(const_cast<char*>(in));
    T* dst = reinterpret_cast<T*>(out);
    if (op.equal_split()) {
      ::gloo::AlltoallOptions o(gloo_);
      o.setInput<T>(src, in_bytes / sizeof(T));
      o.setOutput<T>(dst, out_bytes / sizeof(T));
      o.setTag(tag);
      o.setTimeout(op.timeout);
      ::gloo::alltoall(o);
      return;
    }
    std::vector<int64_t> in_counts, out_counts;
    for (const auto& t : op.inputs) in_counts.push_back(t.count);
    for (const auto& t : op.outputs) out_counts.push_back(t.count);
    ::gloo::AlltoallvOptions o(gloo_);
    o.setInput<T>(src, in_counts);
    o.setOutput<T>(dst, out_counts);
    o.setTag(tag);
    o.setTimeout(op.timeout);
    ::gloo::alltoallv(o);
  });
  scatter_views(out, op.outputs);
}

void GlooBackend::gather(const OpDesc& op) {
  uint32_t tag = next_tag();
  const Tensor& in = op.input;
  if (in.count == 0) return;
  const bool root = ctx_.rank == op.root;
  char* out = nullptr;
  if (root) {
    out = op.outputs_one_buffer() ? bytes_of(op.outputs[0]) : nullptr;
    if (!out) {
      scratch_.resize(in.nbytes() * ctx_.size);
      out = reinterpret_cast<char*>(scratch_.data());
    }
  }
  with_elem(dtype_size(in.dtype), [&](auto e) {
    using T = decltype(e);
    ::gloo::GatherOptions o(gloo_);
    o.setInput<T>(static_cast<T*>(in.data), in.count);
    if (root) o.setOutput<T>(reinterpret_cast<T*>(out), in.count * ctx_.size);
    o.setRoot(op.root);
    o.setTag(tag);
    o.setTimeout(op.timeout);
    ::gloo::gather(o);
  });
  if (root) scatter_views(out, op.outputs);
}

void GlooBackend::scatter(const OpDesc& op) {
  uint32_t tag = next_tag();
  const Tensor& out = op.output;
  if (out.count == 0) return;
  with_elem(dtype_size(out.dtype), [&](auto e) {
    using T = decltype(e);
    ::gloo::ScatterOptions o(gloo_);
    if (ctx_.rank == op.root) {
      std::vector<T*> ptrs;
      for (const auto& t : op.inputs) ptrs.push_back(static_cast<T*>(t.data));
      o.setInputs<T>(ptrs, out.count);
    }
    o.setOutput<T>(static_cast<T*>(out.data), out.count);
    o.setRoot(op.root);
    o.setTag(tag);
    o.setTimeout(op.timeout);
    ::gloo::scatter(o);
  });
}

void GlooBackend::barrier(const OpDesc& op) {
  uint32_t tag = next_tag();
  if (ctx_.size == 1) return;
  ::gloo::BarrierOptions o(gloo_);
  o.setTag(tag);
  o.setTimeout(op.timeout);
  ::gloo::barrier(o);
}

void GlooBackend::p2p(const OpDesc& op) {
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> bufs;
  std::vector<bool> is_send;
  for (const auto& p : op.p2p) {
    if (p.tensor.count == 0) continue;  // both sides skip: counts must match
    auto buf = gloo_->createUnboundBuffer(p.tensor.data, p.tensor.nbytes());
    uint32_t n = p.is_send ? send_seq_[p.peer]++ : recv_seq_[p.peer]++;
    uint64_t slot = ::gloo::Slot::build(kP2PSlotPrefix, n);
    if (p.is_send)
      buf->send(p.peer, slot);
    else
      buf->recv(p.peer, slot);
    bufs.push_back(std::move(buf));
    is_send.push_back(p.is_send);
  }
  for (size_t i = 0; i < bufs.size(); ++i) {
    bool ok = is_send[i] ? bufs[i]->waitSend(op.timeout) : bufs[i]->waitRecv(op.timeout);
    if (!ok) throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "gloo: the wait was aborted");
  }
}

void GlooBackend::abort() {
  if (aborted_.exchange(true)) return;
  fail_queued(ctx_, "the comm was aborted");
  // An op already inside Gloo cannot be interrupted (closing Gloo's pairs does not wake its
  // waits): it ends at its own deadline and then reports Aborted.
}

void GlooBackend::finalize() {
  drain();
  gloo_.reset();
}

void register_gloo() {
  register_backend("gloo", [] { return std::make_unique<GlooBackend>(); });
}

}  // namespace commx::gloo_backend

COMMX_DEFINE_PLUGIN(commx::gloo_backend::register_gloo)
