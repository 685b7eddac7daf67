// MpiBackend (see mpi_backend.h): MPI's setup, the watchdog and running a row of the table
// (mpi_collectives.cc). Layer: backends/mpi.
#include "mpi_backend.h"

#include <cstdlib>
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
  const MpiAlgorithm* row = select_library_row(algorithms(), op);
  if (!row) throw Error(ErrorCode::kUnsupported, op_context(ctx_, op) + "mpi: not supported");
  // Point-to-point waits on its requests to the deadline; a blocking collective needs the watchdog.
  if (op.collective == Collective::kP2P) return (this->*row->run)(op);
  watchdog_.arm(Clock::now() + op.timeout, &op, comm_);
  try {
    (this->*row->run)(op);
  } catch (...) {
    watchdog_.disarm();
    throw;
  }
  watchdog_.disarm();
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
