// The mpi backend: commx collectives over Open MPI for jobs started by mpirun, so commx-bench
// can put the native backends next to MPI in one run. Blocking MPI collectives (the fast path
// users of MPI get) run on the comm's OrderedExecutor; a watchdog bounds each by its deadline.
// Layer: backends/mpi.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "commx/algorithm.h"
#include "commx/backend.h"
#include "commx/backend_util.h"

namespace commx::mpi_backend {

// Ends the job if a blocking MPI call outlives its op's deadline: MPI cannot cancel a blocking
// collective, so an error that throws is impossible; ending the job beats hanging forever.
class Watchdog {
 public:
  ~Watchdog();
  // Cheap on the op path: two atomic stores, no lock and no thread wake-up (the watchdog thread
  // polls every kPoll, which bounds how late past the deadline the job ends).
  void arm(std::chrono::steady_clock::time_point deadline, const OpDesc* op, MPI_Comm comm);
  void disarm() { deadline_ns_.store(0, std::memory_order_release); }
  void set_context(std::function<std::string(const OpDesc&)> describe) {
    describe_ = std::move(describe);
  }

 private:
  static constexpr std::chrono::milliseconds kPoll{50};
  void loop();
  std::atomic<int64_t> deadline_ns_{0};  // steady_clock ns; 0: disarmed
  std::atomic<const OpDesc*> op_{nullptr};
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::function<std::string(const OpDesc&)> describe_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class MpiBackend : public HostBackend {
 public:
  ~MpiBackend() override;
  std::string name() const override { return "mpi"; }
  void init(const BackendContext& ctx) override;
  bool supports(Collective c, DataType dtype, ReduceKind kind) const override;
  void abort() override;
  void finalize() override;

 private:
  // The algorithm table (mpi_collectives.cc): one row per collective (commx/algorithm.h).
  using MpiAlgorithm = Algorithm<void (MpiBackend::*)(const OpDesc&)>;
  static std::span<const MpiAlgorithm> algorithms();

  void check_open(const OpDesc& op) override;
  void execute(const OpDesc& op) override;
  // The rows: one MPI call each.
  void all_reduce(const OpDesc& op);
  void reduce(const OpDesc& op);
  void broadcast(const OpDesc& op);
  void all_gather(const OpDesc& op);
  void reduce_scatter(const OpDesc& op);
  void all_to_all(const OpDesc& op);
  void gather(const OpDesc& op);
  void scatter(const OpDesc& op);
  void barrier(const OpDesc& op);
  void p2p(const OpDesc& op);
  // Runs `blocking`, or with COMMX_MPI_NONBLOCKING `nonblocking` polled to the op's deadline;
  // `name` (the blocking call's) names a failure.
  // (A is deduced from `blocking` alone: `nonblocking` must take the same and a request.)
  template <class... A>
  void call(const OpDesc& op, const char* name, int (*blocking)(A...),
            std::type_identity_t<int (*)(A..., MPI_Request*)> nonblocking,
            std::type_identity_t<A>... args);
  // `c` as MPI's int count; Unsupported beyond INT_MAX.
  int icount(const OpDesc& op, int64_t c) const;
  void check(int rc, const OpDesc& op, const char* call);

  BackendContext ctx_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Watchdog watchdog_;
  std::atomic<bool> aborted_{false};
  bool nonblocking_ = false;  // COMMX_MPI_NONBLOCKING=1: I-collectives polled to the deadline
  std::vector<uint8_t> scratch_;
};

}  // namespace commx::mpi_backend
