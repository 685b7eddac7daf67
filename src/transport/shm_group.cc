// Per-comm shared memory and the step protocol (see shm_group.h). Layer: transport.
#include "transport/shm_group.h"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <thread>

#include "commx/error.h"

namespace commx {
namespace {

constexpr uint64_t kMagic = 0x636f6d6d78736d31ull;  // "commxsm1"
constexpr size_t kPage = 4096;
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

ShmGroup::ShmGroup(const std::string& comm_name, int rank, int size, ShmSizes sizes)
    : comm_name_(comm_name), rank_(rank), size_(size), sizes_(sizes) {
  ring_ctl_off_ = round_up(sizeof(ShmHeader), 64);
  ring_off_ = round_up(ring_ctl_off_ + sizeof(RingCtl) * static_cast<size_t>(size), kPage);
  slot_off_ = ring_off_ + sizes_.ring_bytes * static_cast<size_t>(size);
  total_ = slot_off_ + 2 * sizes_.slot_bytes;
  own_.create("commx-" + comm_name + "-" + std::to_string(rank), total_);
  // A fresh memfd is zero-filled: every counter starts at 0. Construct the atomics in place.
  auto* h = new (own_.base()) ShmHeader{};
  nonce_ = std::random_device{}() * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(getpid()) << 32 ^
           reinterpret_cast<uintptr_t>(own_.base());
  h->magic = kMagic;
  h->nonce = nonce_;
  h->pid = getpid();
  h->rank = rank;
  h->size = size;
  h->cpu.store(-1);
  h->self_addr = reinterpret_cast<uintptr_t>(own_.base());
  h->cma_ok.store(0);
  h->verdict.store(-1);
  cpu_set_t set;
  static_assert(sizeof(set) == sizeof(h->affinity));
  if (sched_getaffinity(0, sizeof(set), &set) == 0) std::memcpy(h->affinity, &set, sizeof(set));
  for (int d = 0; d < size; ++d) new (own_.base() + ring_ctl_off_ + sizeof(RingCtl) * d) RingCtl{};
  bases_.assign(size, nullptr);
  bases_[rank] = own_.base();
  peers_.resize(size);
  watches_.resize(size);
  seen_.assign(size, 0);
}

ShmGroup::~ShmGroup() { close(); }

std::string ShmGroup::info() const {
  return std::to_string(getpid()) + " " + std::to_string(own_.fd()) + " " + std::to_string(total_) +
         " " + std::to_string(nonce_);
}

void ShmGroup::set_peer_info(std::vector<std::string> infos) {
  infos_ = std::move(infos);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::istringstream in(infos_[r]);
    int pid = -1;
    in >> pid;
    watches_[r] = ProcessWatch(pid);  // opened now, while the peer is surely alive
  }
}

bool ShmGroup::alive(int peer) { return !watches_[peer].exited(); }

int ShmGroup::verdict_of(int peer) {
  if (peer == rank_ || peer < 0 || peer >= size_ || !bases_[peer]) return -1;
  const int v = header(peer).verdict.load(std::memory_order_acquire);
  return v >= 0 && v / 2 < size_ && v / 2 != peer && v / 2 != rank_ ? v : -1;
}

int ShmGroup::culprit(int peer, bool* stalled) {
  // A dead peer's segment stays readable while this rank maps it.
  const int v = verdict_of(peer);
  *stalled = v >= 0 && (v & 1);
  return v >= 0 ? v / 2 : peer;
}

void ShmGroup::record_verdict(int rank, bool stalled) {
  int32_t none = -1;
  header(rank_).verdict.compare_exchange_strong(none, rank * 2 + (stalled ? 1 : 0));
}

std::string ShmGroup::call_mismatch(std::span<const int> peers, Clock::time_point now,
                                    std::chrono::nanoseconds grace) {
  const int64_t now_ns = now.time_since_epoch().count();
  const int64_t grace_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(grace).count();
  for (int p : peers) {
    if (p == rank_ || p < 0 || p >= size_ || !bases_[p]) continue;
    std::string m = shm_op_mismatch(header(rank_).op, rank_, header(p).op, p, now_ns, grace_ns);
    if (!m.empty()) return m;
  }
  return {};
}

int ShmGroup::any_dead() {
  if (watches_.size() != static_cast<size_t>(size_)) return -1;  // closed
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && !alive(r) && !(bases_[r] && shm_op_finished(header(r).op, header(rank_).op)))
      return r;
  return -1;
}

char* ShmGroup::map_peer(int r) {
  std::istringstream in(infos_.at(r));
  int pid = -1, fd = -1;
  size_t total = 0;
  uint64_t nonce = 0;
  in >> pid >> fd >> total >> nonce;
  std::string who = "rank " + std::to_string(r) + " of comm '" + comm_name_ + "'";
  if (total != total_)
    throw Error(ErrorCode::kInvalidArgument, who + " uses a shared memory layout of " +
                                                 std::to_string(total) + " bytes, this rank " +
                                                 std::to_string(total_) +
                                                 " (COMMX_CPU_* sizes must agree across ranks)");
  auto seg = std::make_unique<ShmSegment>();
  try {
    seg->open(pid, fd, total, who);
  } catch (const Error&) {
    // A process being killed closes its fds before its exit shows: give that a moment.
    for (int i = 0; i < 100 && !watches_[r].exited() && any_dead() < 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (watches_[r].exited())
      throw Error(ErrorCode::kPeerFailure, who + " died before this rank mapped its shared memory");
    // Alive but its segment is gone: it gave up creating the comm, most likely because another
    // rank died meanwhile. Name that rank, not the live one.
    const int dead = any_dead();
    if (dead >= 0)
      throw Error(ErrorCode::kPeerFailure,
                  "rank " + std::to_string(dead) + " of comm '" + comm_name_ +
                      "' died while the comm was created (" + who +
                      " gave up on it and removed its shared memory before this rank mapped it)");
    throw;
  }
  auto* h = reinterpret_cast<ShmHeader*>(seg->base());
  if ((h->magic != kMagic || h->nonce != nonce || h->rank != r || h->size != size_) &&
      any_dead() >= 0)
    throw Error(ErrorCode::kPeerFailure,
                "rank " + std::to_string(any_dead()) + " of comm '" + comm_name_ +
                    "' died while the comm was created (" + who +
                    " gave up on it and removed its shared memory before this rank mapped it)");
  if (h->magic != kMagic || h->nonce != nonce || h->rank != r || h->size != size_)
    throw Error(ErrorCode::kPeerFailure, "the shared memory of " + who +
                                             " is gone (the rank finalized or exited before this "
                                             "rank mapped it)");
  bases_[r] = seg->base();
  peers_[r] = std::move(seg);
  return bases_[r];
}

void ShmGroup::map_all() {
  for (int r = 0; r < size_; ++r) base(r);
}

int ShmGroup::cpus_of_all() {
  int n = 0;
  for (int w = 0; w < 16; ++w) {
    uint64_t bits = 0;
    for (int r = 0; r < size_; ++r) bits |= header(r).affinity[w];
    n += __builtin_popcountll(bits);
  }
  return n > 0 ? n : 1;
}

RingCtl& ShmGroup::ring_ctl(int owner, int dst) {
  return *reinterpret_cast<RingCtl*>(base(owner) + ring_ctl_off_ + sizeof(RingCtl) * dst);
}

char* ShmGroup::ring(int owner, int dst) {
  return base(owner) + ring_off_ + sizes_.ring_bytes * static_cast<size_t>(dst);
}

void ShmGroup::wait_peer(int peer, uint64_t step, const WaitScope& ws) {
  if (seen_[peer] >= step) return;
  ShmWord& w = header(peer).arrive;
  uint64_t v = w.value.load(std::memory_order_acquire);
  if (v < step) {
    int p[1] = {peer};
    int cpu = sched_getcpu();
    header(rank_).cpu.store(cpu, std::memory_order_relaxed);
    WaitScope scope = ws;
    scope.skip_spin = cpu >= 0 && header(peer).cpu.load(std::memory_order_relaxed) == cpu;
    shm_wait([&] { return (v = w.value.load(std::memory_order_acquire)) >= step; }, w, p,
             "a collective step", scope);
  }
  seen_[peer] = v;
}

void ShmGroup::wait_all(uint64_t step, const WaitScope& ws) {
  // Start with the next rank: ranks then tend to wait for different peers, not all for rank 0.
  for (int i = 1; i < size_; ++i) wait_peer((rank_ + i) % size_, step, ws);
}

bool ShmGroup::all_arrived(uint64_t step) {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && header(p).arrive.value.load(std::memory_order_acquire) < step) return false;
  return true;
}

bool ShmGroup::notes_match(uint64_t step, const OpFingerprint& call) {
  const uint64_t mine = call_note(call, step);
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && header(p).arrive.note[step & 1].load(std::memory_order_relaxed) != mine)
      return false;
  return true;
}

void ShmGroup::check_deferred_calls(const WaitScope& ws) {
  const uint64_t step = deferred_step_;
  deferred_step_ = 0;
  // The peers' notes and fingerprints of that step stay until this rank arrives at the step after
  // it. Equal notes: nothing more to read (the fingerprints would be another cache miss per op).
  wait_all(step, ws);
  if (notes_match(step, deferred_call_)) return;
  for (int i = 1; i < size_; ++i) {
    const int p = (rank_ + i) % size_;
    OpFingerprint theirs;
    std::memcpy(&theirs, slot(p, step), sizeof(theirs));
    if (!fingerprints_match(theirs, deferred_call_))
      throw Error(ErrorCode::kInvalidArgument,
                  mismatch_message(rank_, deferred_call_, p, theirs) +
                      " (found at this rank's next op: the root of a broadcast does not wait for "
                      "its peers' calls)");
  }
}

void ShmGroup::await_arrival(int peer, uint64_t step, std::chrono::milliseconds grace) {
  const auto end = std::chrono::steady_clock::now() + grace;
  ShmWord& w = header(peer).arrive;
  while (w.value.load(std::memory_order_acquire) < step && alive(peer) &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void ShmGroup::prepare_write(uint64_t step, const WaitScope& ws) { wait_all(step - 1, ws); }

void ShmGroup::probe_cma(const CmaLimits& want) {
  CmaLimits mine = want;
  bool ok = true;
  for (int r = 0; r < size_ && ok; ++r) {
    if (r == rank_) continue;
    ShmHeader& h = header(r);
    uint64_t nonce = 0;
    iovec local{&nonce, sizeof(nonce)};
    iovec remote{reinterpret_cast<void*>(h.self_addr + offsetof(ShmHeader, nonce)), sizeof(nonce)};
    ok = process_vm_readv(h.pid, &local, 1, &remote, 1, 0) == sizeof(nonce) && nonce == h.nonce;
    // Writing back the value just read changes nothing the peer could see.
    if (ok && mine.root_writes_min_bytes != ~uint64_t{0} &&
        process_vm_writev(h.pid, &local, 1, &remote, 1, 0) != sizeof(nonce))
      mine.root_writes_min_bytes = ~uint64_t{0};
  }
  static_assert(sizeof(CmaLimits) == sizeof(ShmHeader::cma_min));
  std::memcpy(header(rank_).cma_min, &mine, sizeof(mine));
  header(rank_).cma_ok.store(ok ? 1 : 0, std::memory_order_release);
}

void ShmGroup::agree_cma() {
  cma_all_ = size_ > 1;
  CmaLimits a{0, 0, 0, 0};
  for (int r = 0; r < size_; ++r) {
    if (header(r).cma_ok.load(std::memory_order_acquire) != 1) cma_all_ = false;
    CmaLimits h;
    std::memcpy(&h, header(r).cma_min, sizeof(h));
    a.min_bytes = std::max(a.min_bytes, h.min_bytes);
    a.all_reduce_min_bytes = std::max(a.all_reduce_min_bytes, h.all_reduce_min_bytes);
    a.broadcast_min_bytes = std::max(a.broadcast_min_bytes, h.broadcast_min_bytes);
    a.root_writes_min_bytes = std::max(a.root_writes_min_bytes, h.root_writes_min_bytes);
  }
  cma_ = cma_all_ ? a : CmaLimits{};
}

void ShmGroup::cma_read(int peer, void* dst, uint64_t remote, size_t len) {
  cma_copy(peer, dst, remote, len, false);
}

void ShmGroup::cma_write(int peer, const void* src, uint64_t remote, size_t len) {
  cma_copy(peer, const_cast<void*>(src), remote, len, true);
}

void ShmGroup::cma_copy(int peer, void* local, uint64_t remote, size_t len, bool write) {
  char* d = static_cast<char*>(local);
  size_t done = 0;
  while (done < len) {
    iovec l{d + done, len - done};
    iovec r{reinterpret_cast<void*>(remote + done), len - done};
    ssize_t got = write ? process_vm_writev(header(peer).pid, &l, 1, &r, 1, 0)
                        : process_vm_readv(header(peer).pid, &l, 1, &r, 1, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    int e = got < 0 ? errno : EIO;
    if (e == EINTR) continue;
    std::string who = "rank " + std::to_string(peer) + " of comm '" + comm_name_ + "'";
    // The peer exited (ESRCH: its memory is gone, maybe before its pidfd reports the exit) or
    // left the op and freed its buffer because the op failed for it: name every rank gone.
    // Each rank gone is reported as the rank it gave up for, if it recorded one (a live peer that
    // gave up freed the buffer being read: its verdict names the rank at fault).
    std::vector<char> blamed(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && ((r == peer && (e == ESRCH || verdict_of(r) >= 0)) || !alive(r))) {
        bool stalled = false;
        const int c = culprit(r, &stalled);
        record_verdict(c, stalled);
        blamed[c] = 1;
      }
    std::string dead;
    for (int r = 0; r < size_; ++r)
      if (blamed[r]) dead += (dead.empty() ? "rank " : ", rank ") + std::to_string(r);
    const char* verb = write ? "wrote into" : "read";
    if (!dead.empty())
      throw Error(ErrorCode::kPeerFailure, dead + " of comm '" + comm_name_ +
                                               "' died while this rank " + verb +
                                               " the buffer of " + who);
    throw Error(ErrorCode::kSystem,
                std::string(write ? "process_vm_writev to " : "process_vm_readv from ") + who +
                    " failed after " + std::to_string(done) + " of " + std::to_string(len) +
                    " bytes: " + std::strerror(e));
  }
}

void ShmGroup::close() {
  peers_.clear();
  for (auto& b : bases_) b = nullptr;
  own_.close();
  watches_.clear();
}

}  // namespace commx
