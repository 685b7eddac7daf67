// A one-rank backend written as a third party would write it, with the installed headers only:
// a HostBackend whose all_reduce multiplies the tensor by SCALED_BACKEND_FACTOR (an environment
// variable it defines itself) through the core's host reductions. Layer: tests (plugin).
#include <commx/backend_util.h>
#include <commx/error.h>

namespace {

class ScaledBackend : public commx::HostBackend {
 public:
  ~ScaledBackend() override { drain(); }
  std::string name() const override { return "scaled"; }
  void init(const commx::BackendContext& ctx) override {
    if (ctx.size != 1)
      throw commx::Error(commx::ErrorCode::kUnsupported,
                         commx::comm_context(ctx) + "scaled: one rank only");
    ctx_ = ctx;
    factor_ = commx::env_double("SCALED_BACKEND_FACTOR", 1.0);
  }
  bool supports(commx::Collective c, commx::DataType dtype, commx::ReduceKind kind) const override {
    return c == commx::Collective::kAllReduce && kind == commx::ReduceKind::kSum &&
           commx::dtype_is_floating(dtype);
  }
  void abort() override { fail_queued(ctx_, "the comm was aborted"); }

 protected:
  void execute(const commx::OpDesc& op) override {
    // The sum over one rank is the tensor itself; PREMUL_SUM's finishing step scales it.
    commx::HostReducer(op.input.dtype, commx::ReduceOp::premul_sum(factor_), 1)
        .finish(commx::bytes_of(op.input), static_cast<size_t>(op.input.count));
  }

 private:
  commx::BackendContext ctx_;
  double factor_ = 1.0;
};

void register_scaled() {
  commx::register_backend("scaled", [] { return std::make_unique<ScaledBackend>(); });
}

}  // namespace

COMMX_DEFINE_PLUGIN(register_scaled)
