// Plugin entry point of the cuda backend (libcommx_backend_cuda.so). Layer: backends (cuda).
#include "commx/backend.h"
#include "cuda/cuda_backend.h"

namespace {
void register_cuda() {
  commx::register_backend("cuda", [] { return std::make_unique<commx::cuda::CudaBackend>(); });
}
}  // namespace

COMMX_DEFINE_PLUGIN(register_cuda)
