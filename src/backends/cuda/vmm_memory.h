// vmm_memory: device memory through the CUDA virtual memory management API (cuMemCreate,
// cuMemAddressReserve, cuMemMap, cuMemSetAccess), exportable as a POSIX file descriptor and
// importable from one in another process. The driver functions are fetched at run time through
// cudaGetDriverEntryPointByVersion: nothing links libcuda.
// Layer: transport (GPU). Used by PeerMemory (peer_memory.h) when peer_mem=vmm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace commx::cuda {

// Empty when `device` can allocate VMM memory exportable as a POSIX fd; else what is missing.
std::string vmm_unsupported_reason(int device);

// One mapped VMM allocation: its handle, its address range and the mapping.
class VmmBuffer {
 public:
  // `bytes` on `device` (rounded up to the recommended granularity), mapped read/write for it.
  static std::unique_ptr<VmmBuffer> allocate(int device, uint64_t bytes, const std::string& where);
  // The allocation another process exported as `fd` (of `size` bytes, as that process's size()),
  // mapped read/write for `device`. Does not close `fd`.
  static std::unique_ptr<VmmBuffer> import(int fd, uint64_t size, int device,
                                           const std::string& where);
  ~VmmBuffer() { release(); }
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;

  char* ptr() const { return reinterpret_cast<char*>(ptr_); }
  uint64_t size() const { return size_; }
  // A new fd for the allocation (the caller closes it).
  int export_fd(const std::string& where) const;
  // Unmaps, frees the address range and releases the handle; idempotent.
  void release();

 private:
  VmmBuffer() = default;
  void map(int device, uint64_t align, const std::string& where);
  unsigned long long handle_ = 0;  // CUmemGenericAllocationHandle
  unsigned long long ptr_ = 0;     // CUdeviceptr
  uint64_t size_ = 0;
  bool have_handle_ = false, reserved_ = false, mapped_ = false;
};

// Grants `device` read/write access to `size` bytes at `ptr`, a VMM range mapped in this process
// by another thread's rank (ranks as threads).
void vmm_grant_access(void* ptr, uint64_t size, int device, const std::string& where);

}  // namespace commx::cuda
