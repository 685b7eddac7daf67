// fd_passing: hands file descriptors to other processes of one host over Unix stream sockets in
// the abstract namespace (Linux), as SCM_RIGHTS messages. Used by the VMM peer memory, whose
// exported allocations are POSIX file descriptors that cannot travel through the TCP store.
// Every wait is bounded by a deadline; errors name the rank and the peer.
// Layer: transport (plain POSIX, no CUDA; tested on the CPU).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "commx/store.h"

namespace commx::cuda {

using Deadline = std::chrono::steady_clock::time_point;

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A listening Unix stream socket bound to an abstract name ("@name" in ss/netstat output): no
// file on disk, released when the socket closes or the process ends.
class FdListener {
 public:
  // Binds `name` (1..100 bytes). Throws InvalidArgument for a bad name, System when it is taken.
  FdListener(const std::string& name, int backlog, const std::string& where);
  // "commx/<tag>/<pid>/<random hex>": unique to this process and call.
  static std::string unique_name(const std::string& tag);
  const std::string& name() const { return name_; }
  // One connection, or a Timeout error (`waiting_for` says for whom) after `deadline`.
  UniqueFd accept(Deadline deadline, const std::string& waiting_for, const std::string& where);

 private:
  std::string name_;
  UniqueFd sock_;
};

// Connects to the listener bound to `name`; retries while its backlog is full until `deadline`.
// No listener under that name: a PeerFailure error (`peer` names its owner).
UniqueFd connect_fd_socket(const std::string& name, Deadline deadline, const std::string& peer,
                           const std::string& where);
// Sends `fd` (duplicated into the receiver) with a 64-bit tag.
void send_fd(int sock, int fd, uint64_t tag, const std::string& where);
// Receives one fd and its tag; Timeout after `deadline`, PeerFailure when the peer closes first.
UniqueFd recv_fd(int sock, uint64_t* tag, Deadline deadline, const std::string& peer,
                 const std::string& where);
void send_u64(int sock, uint64_t v, const std::string& where);
uint64_t recv_u64(int sock, Deadline deadline, const std::string& peer, const std::string& where);

// Collective over `world` ranks sharing `store` (keys under `key`): every rank in `peers` (a set
// the same on every rank: r in rank a's list iff a in rank r's) receives a duplicate of `fd`, and
// this rank receives one fd from each of `peers`. Returns them indexed by rank (empty elsewhere).
// Each rank publishes `<key>/<rank>` = its socket name and a random secret; a connection counts
// only with the right secret from a process of the same user (others are dropped). Waits end at
// `deadline` (store gets at the store's timeout). Ranks must share a network namespace (abstract
// socket names live in one).
std::vector<UniqueFd> exchange_fds(Store& store, const std::string& key, int rank, int world,
                                   const std::vector<int>& peers, int fd, Deadline deadline,
                                   const std::string& where);

}  // namespace commx::cuda
