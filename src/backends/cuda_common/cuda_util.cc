// CUDA error checks and small runtime helpers shared by the GPU backends. Layer: backends (GPU).
#include "cuda_common/cuda_util.h"

namespace commx::cuda {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line,
                      const std::string& context) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw Error(ErrorCode::kCuda, context + expr + " failed: " + cudaGetErrorName(err) + " (" +
                                    cudaGetErrorString(err) + ") at " + base + ":" +
                                    std::to_string(line));
}

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
  if (device >= 0 && device != prev_) {
    COMMX_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_ && prev_ >= 0) cudaSetDevice(prev_);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

int resolve_device(const Device& d) {
  if (d.index >= 0) return d.index;
  int cur = 0;
  COMMX_CUDA_CHECK(cudaGetDevice(&cur));
  return cur;
}

void* driver_entry_point(const char* name, std::string& error) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  // 12000: the ABI of each function as of CUDA 12.0 (all we fetch are older and unchanged).
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
#else
  cudaError_t e = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &q);
#endif
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    if (error.empty())
      error = std::string("driver entry point ") + name + " not found (" +
              (e != cudaSuccess                               ? cudaGetErrorString(e)
               : q == cudaDriverEntryPointVersionNotSufficent ? "driver too old"
                                                              : "symbol not found") +
              ")";
    return nullptr;
  }
  return p;
}

int usable_device(const Device& d, const std::string& where) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw Error(ErrorCode::kUnsupported,
                where + "no usable CUDA device in this process (" +
                    (e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)
                                      : std::string("no GPU visible")) +
                    ")");
  }
  if (d.index >= n)
    throw Error(ErrorCode::kInvalidArgument, where + "device cuda:" + std::to_string(d.index) +
                                                 " but this process sees " + std::to_string(n) +
                                                 " GPU(s) (CUDA_VISIBLE_DEVICES?)");
  try {
    return resolve_device(d);
  } catch (const Error& err) {
    throw Error(err.code(), where + err.what());
  }
}

const void* op_stream(const OpDesc& op) {
  if (op.input.stream) return op.input.stream;
  if (op.output.stream) return op.output.stream;
  for (const auto& t : op.inputs)
    if (t.stream) return t.stream;
  for (const auto& t : op.outputs)
    if (t.stream) return t.stream;
  for (const auto& p : op.p2p)
    if (p.tensor.stream) return p.tensor.stream;
  return nullptr;
}

cudaStream_t caller_stream(const void* stream) {
  return stream ? static_cast<cudaStream_t>(const_cast<void*>(stream)) : cudaStreamLegacy;
}

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  if (cudaThreadExchangeStreamCaptureMode(&prev_) != cudaSuccess) {
    cudaGetLastError();
    prev_ = cudaStreamCaptureModeRelaxed;  // nothing to restore
  }
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (prev_ != cudaStreamCaptureModeRelaxed && cudaThreadExchangeStreamCaptureMode(&prev_) != cudaSuccess)
    cudaGetLastError();
}

}  // namespace commx::cuda
