// A test plugin: backend "echo" for one-rank comms (all_reduce, broadcast, barrier, all_gather
// with equal pieces, on f32 only), loaded through the plugin path like any out-of-tree backend.
#include <memory>

#include "commx/backend.h"
#include "commx/error.h"
#include "core/host_work.h"

namespace {

class EchoBackend : public commx::Backend {
 public:
  std::string name() const override { return "echo"; }
  void init(const commx::BackendContext& ctx) override {
    if (ctx.size != 1) throw commx::Error(commx::ErrorCode::kUnsupported, "echo runs one rank only");
  }
  commx::Work run(const commx::OpDesc& op, bool async_op) override {
    return exec_.submit(
        [op] {
          if (op.type == commx::OpType::kAllReduce && op.op.kind == commx::ReduceKind::kPremulSum) {
            float* p = op.input.ptr<float>();
            for (int64_t i = 0; i < op.input.count; ++i) p[i] = static_cast<float>(p[i] * op.op.factor);
          }
        },
        async_op);
  }
  bool supports(commx::Collective c, commx::DataType d, commx::ReduceKind) const override {
    return d == commx::DataType::kFloat32 &&
           (c == commx::Collective::kAllReduce || c == commx::Collective::kBroadcast ||
            c == commx::Collective::kBarrier || c == commx::Collective::kAllGather);
  }
  // The forms with per-rank counts are not claimed: core_test checks that the core asks.
  bool supports_uneven(commx::Collective, commx::DataType, commx::ReduceKind) const override {
    return false;
  }
  void abort() override { exec_.fail_pending(std::make_exception_ptr(commx::Error(commx::ErrorCode::kAborted, "aborted"))); }
  bool accepts_device(const commx::Device& d) const override { return d.is_cpu(); }

 private:
  commx::OrderedExecutor exec_;
};

void register_echo() {
  commx::register_backend("echo", [] { return std::make_unique<EchoBackend>(); });
}

}  // namespace

COMMX_DEFINE_PLUGIN(register_echo)
