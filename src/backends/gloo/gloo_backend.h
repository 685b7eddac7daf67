// The gloo backend: commx collectives over Debian's Gloo (TCP transport), for side-by-side
// comparison with the native cpu backend. Each op runs in issue order on the comm's
// OrderedExecutor; Gloo's own timeouts bound every wait. Layer: backends/gloo.
#pragma once

#include <gloo/context.h>

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "commx/algorithm.h"
#include "commx/backend.h"
#include "commx/backend_util.h"

namespace commx::gloo_backend {

class GlooBackend : public HostBackend {
 public:
  ~GlooBackend() override;
  std::string name() const override { return "gloo"; }
  void init(const BackendContext& ctx) override;
  bool supports(Collective c, DataType dtype, ReduceKind kind) const override;
  void abort() override;
  void finalize() override;

 private:
  // The algorithm table: one row per collective and Gloo call (commx/algorithm.h).
  using GlooAlgorithm = Algorithm<void (GlooBackend::*)(const OpDesc&)>;
  static std::span<const GlooAlgorithm> algorithms();

  void check_open(const OpDesc& op) override;
  void execute(const OpDesc& op) override;
  void dispatch(const OpDesc& op);
  // The rows.
  void all_reduce(const OpDesc& op);
  void reduce(const OpDesc& op);
  void broadcast(const OpDesc& op);
  void all_gather(const OpDesc& op);
  void all_gather_v(const OpDesc& op);
  void reduce_scatter(const OpDesc& op);
  void all_to_all(const OpDesc& op);
  void gather(const OpDesc& op);
  void scatter(const OpDesc& op);
  void barrier(const OpDesc& op);
  void p2p(const OpDesc& op);
  // All-reduces `count` elements at `data` in place (all_reduce, and reduce_scatter's staging).
  void all_reduce_buffer(const OpDesc& op, void* data, int64_t count);
  uint32_t next_tag() { return tag_++; }

  BackendContext ctx_;
  std::shared_ptr<::gloo::Context> gloo_;
  std::atomic<bool> aborted_{false};
  uint32_t tag_ = 0;                // collective tags, equal on every rank (same issue order)
  std::vector<uint32_t> send_seq_;  // per peer: numbers of sends (p2p slot matching)
  std::vector<uint32_t> recv_seq_;  // per peer: numbers of receives
  std::vector<uint8_t> scratch_;    // staging for list-shaped and reduce-scatter ops
};

}  // namespace commx::gloo_backend
