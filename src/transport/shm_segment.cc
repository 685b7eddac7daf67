// Shared-memory segments and process watches (see shm_segment.h). Layer: transport.
#include "transport/shm_segment.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "commx/error.h"

namespace commx {
namespace {

[[noreturn]] void sys_fail(const std::string& what) {
  throw Error(ErrorCode::kSystem, what + ": " + std::strerror(errno));
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string link_target(const char* path) {
  char buf[256];
  ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

ShmSegment::~ShmSegment() { close(); }

void ShmSegment::create(const std::string& name, size_t bytes) {
  close();
  fd_ = static_cast<int>(syscall(SYS_memfd_create, name.c_str(), MFD_CLOEXEC));
  if (fd_ < 0) sys_fail("memfd_create(" + name + ")");
  if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0) sys_fail("ftruncate of shm segment " + name);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) sys_fail("mmap of shm segment " + name);
  base_ = static_cast<char*>(p);
  size_ = bytes;
}

void ShmSegment::open(int pid, int fd, size_t bytes, const std::string& who) {
  close();
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) sys_fail("cannot open the shared memory of " + who + " (" + path + ")");
  struct stat st {};
  if (fstat(f, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(f);
    throw Error(ErrorCode::kInternal, "the shared memory of " + who + " is smaller than announced");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  ::close(f);
  if (p == MAP_FAILED) sys_fail("mmap of the shared memory of " + who);
  base_ = static_cast<char*>(p);
  size_ = bytes;
}

void ShmSegment::close() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

ProcessWatch::ProcessWatch(int pid) : pid_(pid) {
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#endif
}

ProcessWatch::~ProcessWatch() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

ProcessWatch::ProcessWatch(ProcessWatch&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), pidfd_(std::exchange(o.pidfd_, -1)) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& o) noexcept {
  if (this != &o) {
    if (pidfd_ >= 0) ::close(pidfd_);
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::exchange(o.pidfd_, -1);
  }
  return *this;
}

bool ProcessWatch::exited() const {
  if (pid_ < 0 || pid_ == getpid()) return false;
  if (pidfd_ >= 0) {
    // A pidfd turns readable when the process ends, zombie or not, and never names a new process
    // that reused the pid.
    pollfd p{pidfd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  if (kill(pid_, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_first_line(("/proc/" + std::to_string(pid_) + "/stat").c_str());
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

std::string host_identity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + read_first_line("/proc/sys/kernel/random/boot_id") + "/" +
         link_target("/proc/self/ns/pid") + "/" + link_target("/proc/self/ns/ipc");
}

}  // namespace commx
