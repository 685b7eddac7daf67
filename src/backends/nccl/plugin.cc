// Plugin entry point of the nccl backend (libcommx_backend_nccl.so). Layer: backends (nccl).
#include "commx/backend.h"
#include "nccl/nccl_backend.h"

namespace {
void register_nccl() {
  commx::register_backend("nccl", [] { return std::make_unique<commx::nccl::NcclBackend>(); });
}
}  // namespace

COMMX_DEFINE_PLUGIN(register_nccl)
