// The mpi backend: commx collectives over Open MPI for jobs started by mpirun, so commx-bench
// can put the native backends next to MPI in one run. Blocking MPI collectives (the fast path
// users of MPI get) run on the comm's OrderedExecutor; a watchdog bounds each by its deadline.
// Layer: backends/mpi.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "commx/backend.h"
#include "core/host_work.h"

namespace commx::mpi_backend {

// Ends the job if a blocking MPI call outlives its op's deadline: MPI cannot cancel a blocking
// collective, so an error that throws is impossible; ending the job beats hanging forever.
class Watchdog {
 public:
  ~Watchdog();
  void arm(std::chrono::steady_clock::time_point deadline, std::string what, MPI_Comm comm);
  void disarm();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, stop_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::string what_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::thread thread_;
};

class MpiBackend : public Backend {
 public:
  ~MpiBackend() override;
  std::string name() const override { return "mpi"; }
  void init(const BackendContext& ctx) override;
  Work run(const OpDesc& op, bool async_op) override;
  bool supports(OpType type, DataType dtype, ReduceKind kind) const override;
  void abort() override;
  void finalize() override;
  bool accepts_device(const Device& d) const override { return d.is_cpu(); }

 private:
  void execute(const OpDesc& op);
  void collective(const OpDesc& op);
  void p2p(const OpDesc& op, const std::vector<P2POp>& ops);
  void check(int rc, const OpDesc& op, const char* call);

  BackendContext ctx_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  OrderedExecutor exec_;
  Watchdog watchdog_;
  std::atomic<bool> aborted_{false};
  bool nonblocking_ = false;  // COMMX_MPI_NONBLOCKING=1: I-collectives polled to the deadline
  std::vector<uint8_t> scratch_;
};

}  // namespace commx::mpi_backend
