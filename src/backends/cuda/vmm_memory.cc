// vmm_memory: VMM allocation, export to / import from POSIX fds, through driver entry points.
// Layer: transport (GPU).
#include "cuda/vmm_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

// The driver functions this file calls, fetched once through the runtime (no -lcuda).
struct Driver {
#define COMMX_CU_FN(name) decltype(&::name) name = nullptr;
  COMMX_CU_FN(cuGetErrorName)
  COMMX_CU_FN(cuGetErrorString)
  COMMX_CU_FN(cuDeviceGet)
  COMMX_CU_FN(cuDeviceGetAttribute)
  COMMX_CU_FN(cuMemGetAllocationGranularity)
  COMMX_CU_FN(cuMemCreate)
  COMMX_CU_FN(cuMemRelease)
  COMMX_CU_FN(cuMemAddressReserve)
  COMMX_CU_FN(cuMemAddressFree)
  COMMX_CU_FN(cuMemMap)
  COMMX_CU_FN(cuMemUnmap)
  COMMX_CU_FN(cuMemSetAccess)
  COMMX_CU_FN(cuMemExportToShareableHandle)
  COMMX_CU_FN(cuMemImportFromShareableHandle)
#undef COMMX_CU_FN
  std::string error;  // non-empty: some entry point is missing
};

const Driver& drv() {
  static const Driver d = [] {
    Driver x;
#define COMMX_CU_FETCH(name) fetch_driver_fn(x.name, #name, x.error);
    COMMX_CU_FETCH(cuGetErrorName)
    COMMX_CU_FETCH(cuGetErrorString)
    COMMX_CU_FETCH(cuDeviceGet)
    COMMX_CU_FETCH(cuDeviceGetAttribute)
    COMMX_CU_FETCH(cuMemGetAllocationGranularity)
    COMMX_CU_FETCH(cuMemCreate)
    COMMX_CU_FETCH(cuMemRelease)
    COMMX_CU_FETCH(cuMemAddressReserve)
    COMMX_CU_FETCH(cuMemAddressFree)
    COMMX_CU_FETCH(cuMemMap)
    COMMX_CU_FETCH(cuMemUnmap)
    COMMX_CU_FETCH(cuMemSetAccess)
    COMMX_CU_FETCH(cuMemExportToShareableHandle)
    COMMX_CU_FETCH(cuMemImportFromShareableHandle)
#undef COMMX_CU_FETCH
    return x;
  }();
  return d;
}

const Driver& checked_drv(const std::string& where) {
  const Driver& d = drv();
  if (!d.error.empty())
    throw Error(ErrorCode::kUnsupported,
                where + "VMM peer memory needs the CUDA driver API: " + d.error);
  return d;
}

void cu_check(CUresult r, const char* fn, const std::string& where) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (drv().cuGetErrorName) drv().cuGetErrorName(r, &name);
  if (drv().cuGetErrorString) drv().cuGetErrorString(r, &text);
  throw Error(ErrorCode::kCuda, where + fn + " failed: " + (name ? name : "CUresult ") +
                                    (name ? "" : std::to_string(static_cast<int>(r))) + " (" +
                                    (text ? text : "?") + ")");
}
#define COMMX_CU(fn, ...) cu_check(d.fn(__VA_ARGS__), #fn, where)

CUmemAccessDesc rw_access(CUdevice dev) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

CUmemAllocationProp alloc_prop(CUdevice dev) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

uint64_t granularity(const Driver& d, CUdevice dev, CUmemAllocationGranularity_flags which,
                     const std::string& where) {
  CUmemAllocationProp prop = alloc_prop(dev);
  size_t g = 0;
  COMMX_CU(cuMemGetAllocationGranularity, &g, &prop, which);
  return g ? g : (2u << 20);
}

CUdevice cu_device(const Driver& d, int device, const std::string& where) {
  CUdevice dev = 0;
  COMMX_CU(cuDeviceGet, &dev, device);
  return dev;
}

}  // namespace

std::string vmm_unsupported_reason(int device) {
  const Driver& d = drv();
  if (!d.error.empty()) return "the CUDA driver API is unavailable: " + d.error;
  CUdevice dev = 0;
  if (d.cuDeviceGet(&dev, device) != CUDA_SUCCESS)
    return "cuDeviceGet(" + std::to_string(device) + ") failed";
  int vmm = 0, fd = 0;
  if (d.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      !vmm)
    return "the device does not support virtual memory management (cuMemCreate/cuMemMap)";
  if (d.cuDeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                             dev) != CUDA_SUCCESS ||
      !fd)
    return "the device cannot export VMM allocations as POSIX file descriptors";
  return "";
}

std::unique_ptr<VmmBuffer> VmmBuffer::allocate(int device, uint64_t bytes,
                                               const std::string& where) {
  const Driver& d = checked_drv(where);
  std::unique_ptr<VmmBuffer> b(new VmmBuffer());
  CUdevice dev = cu_device(d, device, where);
  const uint64_t g = granularity(d, dev, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, where);
  b->size_ = (bytes + g - 1) / g * g;
  CUmemAllocationProp prop = alloc_prop(dev);
  CUmemGenericAllocationHandle h = 0;
  COMMX_CU(cuMemCreate, &h, b->size_, &prop, 0);
  b->handle_ = h;
  b->have_handle_ = true;
  b->map(device, g, where);
  return b;
}

std::unique_ptr<VmmBuffer> VmmBuffer::import(int fd, uint64_t size, int device,
                                             const std::string& where) {
  const Driver& d = checked_drv(where);
  std::unique_ptr<VmmBuffer> b(new VmmBuffer());
  CUdevice dev = cu_device(d, device, where);
  // The exporter rounded `size` to its recommended granularity: reserve at that alignment when
  // this device agrees, else at the minimum one cuMemMap needs.
  const uint64_t gmin = granularity(d, dev, CU_MEM_ALLOC_GRANULARITY_MINIMUM, where);
  const uint64_t grec = granularity(d, dev, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, where);
  if (size == 0 || size % gmin != 0)
    throw Error(ErrorCode::kInternal, where + "imported VMM size " + std::to_string(size) +
                                          " is not a multiple of the granularity " +
                                          std::to_string(gmin));
  const uint64_t g = size % grec == 0 ? grec : gmin;
  b->size_ = size;
  CUmemGenericAllocationHandle h = 0;
  COMMX_CU(cuMemImportFromShareableHandle, &h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  b->handle_ = h;
  b->have_handle_ = true;
  b->map(device, g, where);
  return b;
}

void VmmBuffer::map(int device, uint64_t align, const std::string& where) {
  const Driver& d = drv();
  CUdevice dev = cu_device(d, device, where);
  CUdeviceptr p = 0;
  COMMX_CU(cuMemAddressReserve, &p, size_, align, 0, 0);
  ptr_ = p;
  reserved_ = true;
  COMMX_CU(cuMemMap, p, size_, 0, static_cast<CUmemGenericAllocationHandle>(handle_), 0);
  mapped_ = true;
  CUmemAccessDesc a = rw_access(dev);
  COMMX_CU(cuMemSetAccess, p, size_, &a, 1);
}

int VmmBuffer::export_fd(const std::string& where) const {
  const Driver& d = checked_drv(where);
  int fd = -1;
  COMMX_CU(cuMemExportToShareableHandle, &fd, static_cast<CUmemGenericAllocationHandle>(handle_),
           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  return fd;
}

void VmmBuffer::release() {
  const Driver& d = drv();
  if (mapped_) d.cuMemUnmap(static_cast<CUdeviceptr>(ptr_), size_);
  if (reserved_) d.cuMemAddressFree(static_cast<CUdeviceptr>(ptr_), size_);
  if (have_handle_) d.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
  mapped_ = reserved_ = have_handle_ = false;
  ptr_ = 0;
}

void vmm_grant_access(void* ptr, uint64_t size, int device, const std::string& where) {
  const Driver& d = checked_drv(where);
  CUmemAccessDesc a = rw_access(cu_device(d, device, where));
  COMMX_CU(cuMemSetAccess, reinterpret_cast<CUdeviceptr>(ptr), size, &a, 1);
}

}  // namespace commx::cuda
