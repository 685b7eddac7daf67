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
#include <string>
#include <thread>
#include <vector>

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
  void check_open(const OpDesc& op) override;
  void execute(const OpDesc& op) override;
  void collective(const OpDesc& op);
  void p2p(const OpDesc& op, const std::vector<P2POp>& ops);
  void check(int rc, const OpDesc& op, const char* call);

  BackendContext ctx_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Watchdog watchdog_;
  std::atomic<bool> aborted_{false};
  bool nonblocking_ = false;  // COMMX_MPI_NONBLOCKING=1: I-collectives polled to the deadline
  std::vector<uint8_t> scratch_;
};

}  // namespace commx::mpi_backend
