// Transport over the per-pair SPSC rings of a ShmGroup: ordered messages with a size header, so a
// receive whose size differs from the send's is a clear error. Layer: transport.
#pragma once

#include <atomic>
#include <memory>

#include "transport/shm_group.h"
#include "transport/transport.h"

namespace commx {

class ShmTransport : public Transport {
 public:
  ShmTransport(ShmGroup* group, const WaitTuning* tuning);
  std::string name() const override { return "shm"; }
  void exchange(std::span<const SendReq> sends, std::span<const RecvReq> recvs,
                Deadline deadline) override;
  void abort() override;

 private:
  ShmGroup* group_;
  const WaitTuning* tuning_;
  std::atomic<bool> aborted_{false};
  std::atomic<ShmWord*> sleeping_on_{nullptr};
};

}  // namespace commx
