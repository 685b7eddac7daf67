// CUDA error checks and small runtime helpers shared by the GPU backends.
// Layer: backends (GPU). Every CUDA call in a backend goes through COMMX_CUDA_CHECK so that a
// failure becomes a commx::Error (code kCuda) naming the call, never an exit().
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "commx/backend.h"
#include "commx/error.h"
#include "commx/tensor.h"

namespace commx::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line,
                                   const std::string& context);

#define COMMX_CUDA_CHECK_CTX(EXPR, CTX)                                                    \
  do {                                                                                     \
    cudaError_t commx_err_ = (EXPR);                                                       \
    if (commx_err_ != cudaSuccess)                                                         \
      ::commx::cuda::throw_cuda_error(commx_err_, #EXPR, __FILE__, __LINE__, (CTX));       \
  } while (0)
#define COMMX_CUDA_CHECK(EXPR) COMMX_CUDA_CHECK_CTX(EXPR, std::string())

// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool changed_ = false;
};

// Number of visible GPUs; 0 when there is no driver or no device (never throws).
int device_count();
// Resolves Device::cuda(-1) to the current device.
int resolve_device(const Device& d);
// A CUDA driver function fetched through the runtime (nothing links libcuda), null when missing;
// `error` then says why (the first failure is kept).
void* driver_entry_point(const char* name, std::string& error);
template <typename F>
void fetch_driver_fn(F& fn, const char* name, std::string& error) {
  fn = reinterpret_cast<F>(driver_entry_point(name, error));
}
// resolve_device, after checking that CUDA works here and the index names a visible GPU: throws
// Unsupported (no driver or GPU) or InvalidArgument (index out of range), prefixed by `where`.
int usable_device(const Device& d, const std::string& where);
// The stream an op runs on when async_op=false: the first tensor's stream, else the legacy default
// stream (what PyTorch calls the default stream).
cudaStream_t caller_stream(const void* stream);
// The stream an op's tensors name: the first one set among input, output, the lists and the p2p
// tensors (null when none is).
const void* op_stream(const OpDesc& op);
// Whether `s` is being captured into a CUDA graph (no events may be recorded or waited then).
bool is_capturing(cudaStream_t s);

// While alive, this thread's stream-capture mode is relaxed: it may query events and pointers
// while a capture is under way (on this thread, or on any thread in the default global mode).
// Without it, a query of an eager op's event (a Work polled or dropped while torch captures a
// graph) is an "unsafe" call that invalidates the capture. The queries themselves never touch
// the captured stream. PyTorch guards its allocator's and watchdog's queries the same way.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode prev_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace commx::cuda
