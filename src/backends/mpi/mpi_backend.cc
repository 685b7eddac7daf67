// MpiBackend (see mpi_backend.h): maps each commx op onto MPI calls. Layer: backends/mpi.
#include "mpi_backend.h"

#include <sched.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "mpi_types.h"
#include "commx/error.h"

namespace commx::mpi_backend {
namespace {

using Clock = std::chrono::steady_clock;

void finalize_mpi_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

}  // namespace

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::arm(Clock::time_point deadline, const OpDesc* op, MPI_Comm comm) {
  if (!thread_.joinable()) {
    comm_ = comm;
    thread_ = std::thread([this] { loop(); });
  }
  op_.store(op, std::memory_order_relaxed);
  deadline_ns_.store(deadline.time_since_epoch().count(), std::memory_order_release);
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> g(mu_);
  while (!cv_.wait_for(g, kPoll, [&] { return stop_; })) {
    int64_t d = deadline_ns_.load(std::memory_order_acquire);
    if (d == 0 || Clock::now().time_since_epoch().count() < d) continue;
    const OpDesc* op = op_.load(std::memory_order_relaxed);
    std::cerr << "commx: Timeout: " << (op && describe_ ? describe_(*op) : std::string("mpi: "))
              << "no completion within " << (op ? op->timeout.count() : 0)
              << " ms; a blocking MPI call cannot be cancelled, so the job is aborted (set "
                 "COMMX_MPI_NONBLOCKING=1 for timeouts that throw instead)\n";
    MPI_Abort(comm_, 124);
  }
}

MpiBackend::~MpiBackend() { drain(); }

void MpiBackend::init(const BackendContext& ctx) {
  ctx_ = ctx;
  std::string where = comm_context(ctx) + "mpi: ";
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (!env_first({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}))
      throw Error(ErrorCode::kUnsupported,
                  where +
                      "not started by mpirun (no OMPI_COMM_WORLD_SIZE/PMI_SIZE in the "
                      "environment); run the job under mpirun to use this backend");
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw Error(ErrorCode::kInternal, where + "MPI_Init_thread failed");
    std::atexit(finalize_mpi_at_exit);
  }
  int wsize = 0, wrank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  int my_world = ctx.world_ranks.empty() ? ctx.rank : ctx.world_ranks[ctx.rank];
  if (my_world != wrank || (ctx.world_ranks.empty() && ctx.size != wsize))
    throw Error(ErrorCode::kInvalidArgument,
                where + "commx rank " + std::to_string(ctx.rank) + " of " +
                    std::to_string(ctx.size) + " (world rank " + std::to_string(my_world) +
                    ") does not match MPI_COMM_WORLD rank " + std::to_string(wrank) + " of " +
                    std::to_string(wsize) +
                    "; launch every rank with mpirun and no other rank source");
  bool whole = ctx.size == wsize;
  for (int i = 0; whole && i < ctx.size; ++i)
    whole = ctx.world_ranks.empty() || ctx.world_ranks[i] == i;
  if (whole) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  } else {
    // A split comm: only its members take part (MPI_Comm_create_group is collective over them).
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, ctx.size, ctx.world_ranks.data(), &group);
    MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &comm_);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  }
  if (comm_ == MPI_COMM_NULL)
    throw Error(ErrorCode::kInternal, where + "could not create the MPI comm");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  nonblocking_ = env_bool("COMMX_MPI_NONBLOCKING", false);
  watchdog_.set_context([this](const OpDesc& op) { return op_context(ctx_, op) + "mpi: "; });
}

bool MpiBackend::supports(Collective c, DataType dtype, ReduceKind kind) const {
  if (c == Collective::kAllToAllVDynamic) return false;
  if (!is_reduction(c)) return true;
  return reduce_op(kind, dtype) != MPI_OP_NULL;
}

void MpiBackend::check_open(const OpDesc& op) {
  if (aborted_.load())
    throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
  if (comm_ == MPI_COMM_NULL)
    throw Error(ErrorCode::kInvalidArgument, op_context(ctx_, op) + "mpi: finalized");
}

void MpiBackend::check(int rc, const OpDesc& op, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(ErrorCode::kInternal,
              op_context(ctx_, op) + "mpi: " + call + " failed: " + std::string(msg, len));
}

void MpiBackend::execute(const OpDesc& op) {
  if (aborted_.load())
    throw Error(ErrorCode::kAborted, op_context(ctx_, op) + "the comm was aborted");
  if (op.collective == Collective::kP2P) return p2p(op, op.p2p);
  watchdog_.arm(Clock::now() + op.timeout, &op, comm_);
  try {
    collective(op);
  } catch (...) {
    watchdog_.disarm();
    throw;
  }
  watchdog_.disarm();
}

// Waits for `reqs` until the op's deadline: spins on MPI_Testall (MPI progresses inside it),
// yielding the core after a while so oversubscribed ranks still run.
static void wait_all(std::vector<MPI_Request>& reqs, const OpDesc& op, const BackendContext& ctx,
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

void MpiBackend::p2p(const OpDesc& op, const std::vector<P2POp>& ops) {
  std::vector<MPI_Request> reqs;
  for (const auto& p : ops) {
    if (p.tensor.count == 0) continue;
    if (p.tensor.count > INT_MAX)
      throw Error(ErrorCode::kUnsupported,
                  op_context(ctx_, op) + "mpi: more than INT_MAX elements");
    MPI_Request r;
    int count = static_cast<int>(p.tensor.count);
    MPI_Datatype t = move_type(p.tensor.dtype);
    if (p.is_send)
      check(MPI_Isend(p.tensor.data, count, t, p.peer, 0, comm_, &r), op, "MPI_Isend");
    else
      check(MPI_Irecv(p.tensor.data, count, t, p.peer, 0, comm_, &r), op, "MPI_Irecv");
    reqs.push_back(r);
  }
  if (!reqs.empty()) wait_all(reqs, op, ctx_, aborted_);
}

void MpiBackend::collective(const OpDesc& op) {
  const int n = ctx_.size, me = ctx_.rank;
  auto icount = [&](int64_t c) {
    if (c > INT_MAX)
      throw Error(ErrorCode::kUnsupported,
                  op_context(ctx_, op) + "mpi: more than INT_MAX elements");
    return static_cast<int>(c);
  };
  // Blocking call by default; with COMMX_MPI_NONBLOCKING the I-variant, polled to the deadline.
#define COMMX_MPI_CALL(BLOCKING, NONBLOCKING, ...)              \
  do {                                                          \
    if (nonblocking_) {                                         \
      std::vector<MPI_Request> r(1);                            \
      check(NONBLOCKING(__VA_ARGS__, &r[0]), op, #NONBLOCKING); \
      wait_all(r, op, ctx_, aborted_);                          \
    } else {                                                    \
      check(BLOCKING(__VA_ARGS__), op, #BLOCKING);              \
    }                                                           \
  } while (0)
  const Tensor& in = op.input;
  const Tensor& out = op.output;
  // Element counts and displacements of per-rank views laid out back to back.
  auto layout = [&](const std::vector<Tensor>& views, std::vector<int>& counts,
                    std::vector<int>& displs) {
    int64_t total = 0;
    counts.assign(n, 0);
    displs.assign(n, 0);
    for (int r = 0; r < static_cast<int>(views.size()); ++r) {
      counts[r] = icount(views[r].count);
      displs[r] = icount(total);
      total += views[r].count;
    }
    return total;
  };
  // Views that are not one buffer are staged through `buf` (copied in when `fill`).
  auto as_buffer = [&](const std::vector<Tensor>& views, std::vector<uint8_t>& buf, bool fill) {
    if (back_to_back(views)) return bytes_of(views[0]);
    buf.resize(total_bytes(views));
    char* p = reinterpret_cast<char*>(buf.data());
    for (const auto& t : views) {
      if (fill) copy_bytes(p, t.data, t.nbytes());
      p += t.nbytes();
    }
    return reinterpret_cast<char*>(buf.data());
  };
  auto unstage = [&](const char* from, const std::vector<Tensor>& views) {
    if (from == bytes_of(views[0])) return;
    for (const auto& t : views) {
      copy_bytes(t.data, from, t.nbytes());
      from += t.nbytes();
    }
  };
  std::vector<int> counts, displs;
  switch (op.collective) {
    case Collective::kAllReduce: {
      if (in.count == 0) return;
      COMMX_MPI_CALL(MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, in.data, icount(in.count),
                     reduce_type(in.dtype), reduce_op(op.op.kind, in.dtype), comm_);
      return;
    }
    case Collective::kReduce: {
      if (in.count == 0) return;
      bool root = me == op.root;
      COMMX_MPI_CALL(MPI_Reduce, MPI_Ireduce, root ? MPI_IN_PLACE : in.data,
                     root ? in.data : nullptr, icount(in.count), reduce_type(in.dtype),
                     reduce_op(op.op.kind, in.dtype), op.root, comm_);
      return;
    }
    case Collective::kBroadcast:
      if (in.count == 0) return;
      COMMX_MPI_CALL(MPI_Bcast, MPI_Ibcast, in.data, icount(in.count), move_type(in.dtype), op.root,
                     comm_);
      return;
    case Collective::kAllGather: {
      if (layout(op.outputs, counts, displs) == 0) return;
      char* dst = as_buffer(op.outputs, scratch_, false);
      MPI_Datatype t = move_type(in.dtype);
      if (op.equal_split()) {
        bool in_place = dst + me * in.nbytes() == in.data;
        int c = icount(in.count);
        COMMX_MPI_CALL(MPI_Allgather, MPI_Iallgather, in_place ? MPI_IN_PLACE : in.data, c, t,
                       dst, c, t, comm_);
      } else {
        COMMX_MPI_CALL(MPI_Allgatherv, MPI_Iallgatherv, in.data, icount(in.count), t, dst,
                       counts.data(), displs.data(), t, comm_);
      }
      unstage(dst, op.outputs);
      return;
    }
    case Collective::kReduceScatter: {
      const int64_t total = layout(op.inputs, counts, displs);
      if (total == 0) return;
      const size_t es = dtype_size(out.dtype);
      const char* src = back_to_back(op.inputs) ? bytes_of(op.inputs[0]) : nullptr;
      char* o = bytes_of(out);
      bool overlap = src && o >= src && o < src + total * es;
      if (!src || overlap) {
        scratch_.resize(total * es);
        char* p = reinterpret_cast<char*>(scratch_.data());
        for (const auto& v : op.inputs) {
          copy_bytes(p, v.data, v.nbytes());
          p += v.nbytes();
        }
        src = reinterpret_cast<char*>(scratch_.data());
      }
      MPI_Datatype t = reduce_type(out.dtype);
      MPI_Op mop = reduce_op(op.op.kind, out.dtype);
      if (op.equal_split()) {
        COMMX_MPI_CALL(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, src, o, counts[0], t,
                       mop, comm_);
      } else {
        COMMX_MPI_CALL(MPI_Reduce_scatter, MPI_Ireduce_scatter, src, o, counts.data(), t, mop,
                       comm_);
      }
      return;
    }
    case Collective::kAllToAll: {
      std::vector<int> rc, rd;
      const int64_t st = layout(op.inputs, counts, displs);
      const int64_t rt = layout(op.outputs, rc, rd);
      if (st == 0 && rt == 0) return;
      const size_t es = dtype_size(op.dtype());
      std::vector<uint8_t> staged_out;
      char* dst = as_buffer(op.outputs, staged_out, false);
      const char* src = as_buffer(op.inputs, scratch_, true);
      MPI_Datatype t = move_type(op.dtype());
      if (op.equal_split()) {
        int c = counts[0];
        COMMX_MPI_CALL(MPI_Alltoall, MPI_Ialltoall, src == dst ? MPI_IN_PLACE : src, c, t, dst, c,
                       t, comm_);
      } else {
        if (src < dst + rt * es && dst < src + st * es) {  // MPI_Alltoallv takes no aliasing
          std::vector<uint8_t> copy(src, src + st * es);
          scratch_.swap(copy);
          src = reinterpret_cast<char*>(scratch_.data());
        }
        COMMX_MPI_CALL(MPI_Alltoallv, MPI_Ialltoallv, src, counts.data(), displs.data(), t, dst,
                       rc.data(), rd.data(), t, comm_);
      }
      unstage(dst, op.outputs);
      return;
    }
    case Collective::kGather: {
      if (in.count == 0) return;
      const bool root = me == op.root;
      char* dst = root ? as_buffer(op.outputs, scratch_, false) : nullptr;
      bool in_place = root && dst + me * in.nbytes() == in.data;
      MPI_Datatype t = move_type(in.dtype);
      int c = icount(in.count);
      COMMX_MPI_CALL(MPI_Gather, MPI_Igather, in_place ? MPI_IN_PLACE : in.data, c, t, dst, c, t,
                     op.root, comm_);
      if (root) unstage(dst, op.outputs);
      return;
    }
    case Collective::kScatter: {
      if (out.count == 0) return;
      const bool root = me == op.root;
      const char* src = root ? as_buffer(op.inputs, scratch_, true) : nullptr;
      bool in_place = root && src + me * out.nbytes() == out.data;
      MPI_Datatype t = move_type(out.dtype);
      int c = icount(out.count);
      COMMX_MPI_CALL(MPI_Scatter, MPI_Iscatter, src, c, t, in_place ? MPI_IN_PLACE : out.data, c, t,
                     op.root, comm_);
      return;
    }
    case Collective::kBarrier:
      COMMX_MPI_CALL(MPI_Barrier, MPI_Ibarrier, comm_);
      return;
    default:
      break;
  }
#undef COMMX_MPI_CALL
  throw Error(ErrorCode::kUnsupported, op_context(ctx_, op) + "mpi: not supported");
}

void MpiBackend::abort() {
  if (aborted_.exchange(true)) return;
  fail_queued(ctx_, "the comm was aborted");
}

void MpiBackend::finalize() {
  drain();
  int fin = 0;
  MPI_Finalized(&fin);
  if (comm_ != MPI_COMM_NULL && !fin) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

void register_mpi() {
  register_backend("mpi", [] { return std::make_unique<MpiBackend>(); });
}

}  // namespace commx::mpi_backend

COMMX_DEFINE_PLUGIN(commx::mpi_backend::register_mpi)
