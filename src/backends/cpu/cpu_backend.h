// CpuBackend: the native "cpu" backend. Ranks of one host talk through shared memory (direct slot
// algorithms, shm rings for p2p); ranks on several hosts, or comms with the hint transport=tcp,
// use a byte Transport with the generic algorithms. Ops run in issue order (HostBackend): sync ops
// inline on the caller's thread, async ones on one worker. Layer: backends/cpu.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_algorithms.h"
#include "backends/cpu/cpu_tuning.h"
#include "commx/algorithm.h"
#include "commx/backend.h"
#include "commx/backend_util.h"
#include "core/tuning.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_config.h"
#include "transport/shm_group.h"
#include "transport/transport.h"

namespace commx {

struct ShmColl;
struct GenericColl;
class SignalWaits;

class CpuBackend : public HostBackend {
 public:
  CpuBackend() = default;
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  std::string link() const override { return topology_.link; }
  void init(const BackendContext& ctx) override;
  bool supports(Collective c, DataType dtype, ReduceKind kind) const override;
  // One-sided windows: over shared memory when every rank is on one host (cpu_window.h), else
  // over TCP links (tcp_window.h).
  std::shared_ptr<WindowImpl> new_window(int64_t count, DataType dtype, const std::string& where) override;
  void abort() override;
  void finalize() override;

  // "shm" or the transport's name: what init() chose.
  std::string transport_name() const;

 private:
  void execute(const OpDesc& op) override;
  void dispatch(const OpDesc& op, Deadline deadline);
  void run_p2p(const OpDesc& op, Deadline deadline);
  void run_collective_op(const OpDesc& op, Deadline deadline, const CpuAlgorithm* algo,
                         const OpFingerprint& fp);
  static std::vector<int> p2p_peers(const OpDesc& op);
  const CpuAlgorithm& choose(const OpDesc& op);

  BackendContext ctx_;
  CpuTuning tuning_;
  // Measured per-size algorithm winners (commx-bench --tune): COMMX_TUNING_FILE, else the table
  // installed beside libcommx (bench/tuning/cpu.txt); an op's algorithm hint wins over it.
  const TuningTable* table_ = nullptr;
  Topology topology_;  // shm (with or without single copy) or tcp: what init() found
  // The last choice per collective for an op without hints, by size: without hints the choice
  // reads nothing of the op but its collective and size (every row's supports() reads only the
  // topology), so a repeated size skips the selector (a few hundred instructions per op).
  struct Choice {
    size_t bytes = 0;
    const CpuAlgorithm* row = nullptr;
  };
  std::array<Choice, kNumCollectives> last_choice_{};
  bool use_shm_ = true;
  std::unique_ptr<ShmGroup> group_;       // ranks on one host
  std::unique_ptr<Transport> transport_;  // shm rings, or TCP across hosts
  std::vector<char> scratch_;
  uint32_t collectives_ = 0;  // collectives run so far: the ordinal in the next op's fingerprint
  std::atomic<bool> aborted_{false};
  std::atomic<ShmWord*> sleeping_on_{nullptr};
  std::atomic<bool> has_failed_{false};
  std::mutex failed_mu_;
  std::string failed_;  // set when an op failed midway: the ranks' step counters no longer agree
  bool finalized_ = false;
  std::mutex windows_mu_;
  std::vector<std::weak_ptr<SignalWaits>> windows_;  // stopped by abort and finalize
  int window_count_ = 0;
  void stop_windows(const char* why);
  // Low-precision (FP8) collectives: settings from hints/env, this rank's codec counters, buffers
  // kept between ops (src/lowp, docs/low_precision.md).
  lowp::LowpSettings lowp_;
  lowp::CodecStats lowp_stats_;
  lowp::LowpScratch lowp_scratch_;
};

}  // namespace commx
