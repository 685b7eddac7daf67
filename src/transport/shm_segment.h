// One shared-memory segment: an anonymous memfd created by its owner and mapped by peers of the
// same host through /proc/<pid>/fd/<fd>. Nothing is left behind in /dev/shm when a process dies:
// the memory lives while someone maps it. Layer: transport.
#pragma once

#include <cstddef>
#include <string>

namespace commx {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creates and maps a zero-filled segment of `bytes` (pages are committed on first touch).
  void create(const std::string& name, size_t bytes);
  // Maps the segment that process `pid` holds as descriptor `fd`; throws System naming `who`.
  void open(int pid, int fd, size_t bytes, const std::string& who);
  void close();

  char* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept open by the owner so peers can open it through /proc
};

// Watches one process: exited() becomes true when it ends (a pidfd where the kernel has them).
class ProcessWatch {
 public:
  ProcessWatch() = default;
  explicit ProcessWatch(int pid);
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& o) noexcept;
  ProcessWatch& operator=(ProcessWatch&& o) noexcept;
  bool exited() const;

 private:
  int pid_ = -1;
  int pidfd_ = -1;
};

// A string that differs between hosts (and between pid/ipc namespaces on one host, whose
// processes cannot map each other's memfds).
std::string host_identity();

}  // namespace commx
