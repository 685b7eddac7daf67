// The mpi backend's algorithm table (commx/algorithm.h): one row per collective, each one MPI
// call, blocking by default or (COMMX_MPI_NONBLOCKING=1) its I-variant polled to the op's
// deadline. Views that are not one buffer are staged through scratch. Layer: backends/mpi.
#include <sched.h>

#include <cctype>
#include <climits>

#include "commx/error.h"
#include "mpi_backend.h"
#include "mpi_types.h"

namespace commx::mpi_backend {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `reqs` until the op's deadline: spins on MPI_Testall (MPI progresses inside it),
// yielding the core after a while so oversubscribed ranks still run.
void wait_all(std::vector<MPI_Request>& reqs, const OpDesc& op, const BackendContext& ctx,
              const std::atomic<bool>& aborted) {
  auto deadline = Clock::now() + op.timeout;
  for (int spins = 0;; ++spins) {
    int done = 0;
    MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (aborted.load())
      throw Error(ErrorCode::kAborted, op_context(ctx, op) + "the comm was aborted");
    if ((spins & 1023) == 1023 && Clock::now() > deadline) {
      for (auto& r : reqs)
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      throw Error(ErrorCode::kTimeout, op_context(ctx, op) + "mpi: no completion within " +
                                           std::to_string(op.timeout.count()) + " ms");
    }
    if (spins > 2000) sched_yield();
  }
}

// "MPI_Iallreduce" for "MPI_Allreduce".
std::string nonblocking_name(const char* blocking) {
  std::string s(blocking);
  if (s.size() > 4) s = "MPI_I" + std::string(1, static_cast<char>(std::tolower(s[4]))) + s.substr(5);
  return s;
}

// Element counts and displacements of per-rank views laid out back to back; the total.
int64_t layout(const std::vector<Tensor>& views, int n, std::vector<int>& counts,
               std::vector<int>& displs, const std::function<int(int64_t)>& icount) {
  int64_t total = 0;
  counts.assign(n, 0);
  displs.assign(n, 0);
  for (int r = 0; r < static_cast<int>(views.size()); ++r) {
    counts[r] = icount(views[r].count);
    displs[r] = icount(total);
    total += views[r].count;
  }
  return total;
}

// The views laid out back to back in `buf` (their contents copied in when `fill`).
char* stage(const std::vector<Tensor>& views, std::vector<uint8_t>& buf, bool fill) {
  buf.resize(total_bytes(views));
  char* p = reinterpret_cast<char*>(buf.data());
  for (const auto& t : views) {
    if (fill) copy_bytes(p, t.data, t.nbytes());
    p += t.nbytes();
  }
  return reinterpret_cast<char*>(buf.data());
}

// The views as one buffer: themselves when back to back, else staged in `buf`.
char* as_buffer(const std::vector<Tensor>& views, std::vector<uint8_t>& buf, bool fill) {
  return back_to_back(views) ? bytes_of(views[0]) : stage(views, buf, fill);
}

// Copies a staged buffer back into the views (nothing when it is them).
void unstage(const char* from, const std::vector<Tensor>& views) {
  if (from == bytes_of(views[0])) return;
  for (const auto& t : views) {
    copy_bytes(t.data, from, t.nbytes());
    from += t.nbytes();
  }
}

}  // namespace

std::span<const MpiBackend::MpiAlgorithm> MpiBackend::algorithms() {
  using C = Collective;
  using M = MpiBackend;
  static const MpiAlgorithm kTable[] = {
      {"allreduce", C::kAllReduce, nullptr, &M::all_reduce},
      {"reduce", C::kReduce, nullptr, &M::reduce},
      {"bcast", C::kBroadcast, nullptr, &M::broadcast},
      {"allgather", C::kAllGather, nullptr, &M::all_gather, nullptr, "allgatherv"},
      {"reduce_scatter", C::kReduceScatter, nullptr, &M::reduce_scatter, nullptr,
       "reduce_scatter_block"},
      {"alltoall", C::kAllToAll, nullptr, &M::all_to_all, nullptr, "alltoallv"},
      {"gather", C::kGather, nullptr, &M::gather},
      {"scatter", C::kScatter, nullptr, &M::scatter},
      {"barrier", C::kBarrier, nullptr, &M::barrier},
      {"isend_irecv", C::kP2P, nullptr, &M::p2p},
  };
  return kTable;
}

int MpiBackend::icount(const OpDesc& op, int64_t c) const {
  if (c > INT_MAX)
    throw Error(ErrorCode::kUnsupported, op_context(ctx_, op) + "mpi: more than INT_MAX elements");
  return static_cast<int>(c);
}

template <class... A>
void MpiBackend::call(const OpDesc& op, const char* name, int (*blocking)(A...),
                      std::type_identity_t<int (*)(A..., MPI_Request*)> nonblocking,
                      std::type_identity_t<A>... args) {
  if (!nonblocking_) return check(blocking(args...), op, name);
  std::vector<MPI_Request> r(1);
  const int rc = nonblocking(args..., &r[0]);
  if (rc != MPI_SUCCESS) check(rc, op, nonblocking_name(name).c_str());
  wait_all(r, op, ctx_, aborted_);
}

void MpiBackend::all_reduce(const OpDesc& op) {
  const Tensor& in = op.input;
  if (in.count == 0) return;
  call(op, "MPI_Allreduce", MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, in.data,
       icount(op, in.count), reduce_type(in.dtype), reduce_op(op.op.kind, in.dtype), comm_);
}

void MpiBackend::reduce(const OpDesc& op) {
  const Tensor& in = op.input;
  if (in.count == 0) return;
  const bool root = ctx_.rank == op.root;
  call(op, "MPI_Reduce", MPI_Reduce, MPI_Ireduce, root ? MPI_IN_PLACE : in.data,
       root ? in.data : nullptr, icount(op, in.count), reduce_type(in.dtype),
       reduce_op(op.op.kind, in.dtype), op.root, comm_);
}

void MpiBackend::broadcast(const OpDesc& op) {
  const Tensor& in = op.input;
  if (in.count == 0) return;
  call(op, "MPI_Bcast", MPI_Bcast, MPI_Ibcast, in.data, icount(op, in.count), move_type(in.dtype),
       op.root, comm_);
}

void MpiBackend::all_gather(const OpDesc& op) {
  const Tensor& in = op.input;
  const auto ic = [&](int64_t c) { return icount(op, c); };
  std::vector<int> counts, displs;
  if (layout(op.outputs, ctx_.size, counts, displs, ic) == 0) return;
  char* dst = as_buffer(op.outputs, scratch_, false);
  MPI_Datatype t = move_type(in.dtype);
  if (op.equal_split()) {
    const bool in_place = dst + ctx_.rank * in.nbytes() == in.data;
    const int c = icount(op, in.count);
    call(op, "MPI_Allgather", MPI_Allgather, MPI_Iallgather, in_place ? MPI_IN_PLACE : in.data, c,
         t, dst, c, t, comm_);
  } else {
    call(op, "MPI_Allgatherv", MPI_Allgatherv, MPI_Iallgatherv, in.data, icount(op, in.count), t,
         dst, counts.data(), displs.data(), t, comm_);
  }
  unstage(dst, op.outputs);
}

void MpiBackend::reduce_scatter(const OpDesc& op) {
  const Tensor& out = op.output;
  const auto ic = [&](int64_t c) { return icount(op, c); };
  std::vector<int> counts, displs;
  const int64_t total = layout(op.inputs, ctx_.size, counts, displs, ic);
  if (total == 0) return;
  const size_t es = dtype_size(out.dtype);
  const char* src = back_to_back(op.inputs) ? bytes_of(op.inputs[0]) : nullptr;
  char* o = bytes_of(out);
  const bool overlap = src && o >= src && o < src + total * es;
  if (!src || overlap) src = stage(op.inputs, scratch_, true);
  MPI_Datatype t = reduce_type(out.dtype);
  MPI_Op mop = reduce_op(op.op.kind, out.dtype);
  if (op.equal_split())
    call(op, "MPI_Reduce_scatter_block", MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, src,
         o, counts[0], t, mop, comm_);
  else
    call(op, "MPI_Reduce_scatter", MPI_Reduce_scatter, MPI_Ireduce_scatter, src, o, counts.data(),
         t, mop, comm_);
}

void MpiBackend::all_to_all(const OpDesc& op) {
  const auto ic = [&](int64_t c) { return icount(op, c); };
  std::vector<int> counts, displs, rc, rd;
  const int64_t st = layout(op.inputs, ctx_.size, counts, displs, ic);
  const int64_t rt = layout(op.outputs, ctx_.size, rc, rd, ic);
  if (st == 0 && rt == 0) return;
  const size_t es = dtype_size(op.dtype());
  std::vector<uint8_t> staged_out;
  char* dst = as_buffer(op.outputs, staged_out, false);
  const char* src = as_buffer(op.inputs, scratch_, true);
  MPI_Datatype t = move_type(op.dtype());
  if (op.equal_split()) {
    const int c = counts[0];
    call(op, "MPI_Alltoall", MPI_Alltoall, MPI_Ialltoall, src == dst ? MPI_IN_PLACE : src, c, t,
         dst, c, t, comm_);
  } else {
    if (src < dst + rt * es && dst < src + st * es) {  // MPI_Alltoallv takes no aliasing
      std::vector<uint8_t> copy(src, src + st * es);
      scratch_.swap(copy);
      src = reinterpret_cast<char*>(scratch_.data());
    }
    call(op, "MPI_Alltoallv", MPI_Alltoallv, MPI_Ialltoallv, src, counts.data(), displs.data(), t,
         dst, rc.data(), rd.data(), t, comm_);
  }
  unstage(dst, op.outputs);
}

void MpiBackend::gather(const OpDesc& op) {
  const Tensor& in = op.input;
  if (in.count == 0) return;
  const bool root = ctx_.rank == op.root;
  char* dst = root ? as_buffer(op.outputs, scratch_, false) : nullptr;
  const bool in_place = root && dst + ctx_.rank * in.nbytes() == in.data;
  MPI_Datatype t = move_type(in.dtype);
  const int c = icount(op, in.count);
  call(op, "MPI_Gather", MPI_Gather, MPI_Igather, in_place ? MPI_IN_PLACE : in.data, c, t, dst, c,
       t, op.root, comm_);
  if (root) unstage(dst, op.outputs);
}

void MpiBackend::scatter(const OpDesc& op) {
  const Tensor& out = op.output;
  if (out.count == 0) return;
  const bool root = ctx_.rank == op.root;
  const char* src = root ? as_buffer(op.inputs, scratch_, true) : nullptr;
  const bool in_place = root && src + ctx_.rank * out.nbytes() == out.data;
  MPI_Datatype t = move_type(out.dtype);
  const int c = icount(op, out.count);
  call(op, "MPI_Scatter", MPI_Scatter, MPI_Iscatter, src, c, t, in_place ? MPI_IN_PLACE : out.data,
       c, t, op.root, comm_);
}

void MpiBackend::barrier(const OpDesc& op) {
  call(op, "MPI_Barrier", MPI_Barrier, MPI_Ibarrier, comm_);
}

void MpiBackend::p2p(const OpDesc& op) {
  std::vector<MPI_Request> reqs;
  for (const auto& p : op.p2p) {
    if (p.tensor.count == 0) continue;
    MPI_Request r;
    const int count = icount(op, p.tensor.count);
    MPI_Datatype t = move_type(p.tensor.dtype);
    if (p.is_send)
      check(MPI_Isend(p.tensor.data, count, t, p.peer, 0, comm_, &r), op, "MPI_Isend");
    else
      check(MPI_Irecv(p.tensor.data, count, t, p.peer, 0, comm_, &r), op, "MPI_Irecv");
    reqs.push_back(r);
  }
  if (!reqs.empty()) wait_all(reqs, op, ctx_, aborted_);
}

}  // namespace commx::mpi_backend
