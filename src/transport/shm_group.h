// The shared memory of one comm on one host: each rank owns a segment (a header with its step
// counter and doorbell, one SPSC ring per destination, two collective slots) and maps its peers'
// segments at init (see CpuBackend::init: a peer may finish its last op and finalize before this
// rank's first look at its memory, so mapping cannot wait for first use). Collective algorithms run
// in "steps": a rank writes its own slot of the step's parity, publishes the step number, waits for
// the peers it reads, then reads their slots. Before writing a slot a rank waits until every peer
// has arrived at the previous step, which proves that the readers of that slot (two steps back) are
// done: one sync per step. Layer: transport.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "commx/store.h"
#include "transport/shm_op_state.h"
#include "transport/shm_segment.h"
#include "transport/shm_sync.h"
#include "transport/shm_wait.h"

namespace commx {

struct ShmSizes {
  size_t ring_bytes = size_t{1} << 20;  // per destination; a power of two
  size_t slot_bytes = size_t{4} << 20;  // per parity
};

// What single copy (process_vm_readv/writev) a rank would use. Every rank publishes its own; the
// comm uses, field by field, the largest over its ranks, so all ranks take the same paths.
struct CmaLimits {
  uint64_t min_bytes = ~uint64_t{0};             // data ops, per rank piece
  uint64_t all_reduce_min_bytes = ~uint64_t{0};  // all_reduce above the DDA size
  uint64_t broadcast_min_bytes = ~uint64_t{0};
  // broadcast from this size on: the root also writes a share of every peer's buffer
  // (process_vm_writev) while the peers read the rest.
  uint64_t root_writes_min_bytes = ~uint64_t{0};
};

struct RingCtl {
  alignas(64) std::atomic<uint64_t> head;  // bytes written by the owner (sender)
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the receiver
};

struct ShmHeader {
  uint64_t magic;
  uint64_t nonce;  // random per segment: a reused fd number can never pass for it
  int32_t pid;
  int32_t rank;
  int32_t size;
  ShmWord arrive;    // last collective step the owner arrived at
  ShmWord doorbell;  // rung by peers that changed one of the owner's rings (or its inbound ones)
  // The CPU the owner last waited on: a waiter that finds the awaited peer on its own CPU yields
  // at once instead of spinning (spinning would only keep that peer from running).
  alignas(64) std::atomic<int32_t> cpu;
  // Cross-memory attach: the segment's address in the owner (peers probe it with
  // process_vm_readv at init) and whether the owner could read every peer that way.
  uint64_t self_addr;
  std::atomic<int32_t> cma_ok;
  uint64_t cma_min[4];  // the owner's CmaLimits, in field order (the comm uses the largest)
  // The CPUs the owner may run on (sched_getaffinity; CPU i is bit i % 64 of word i / 64).
  uint64_t affinity[16];
  // Set once when the owner gives up on the comm: culprit * 2 + stalled (-1: not given up).
  std::atomic<int32_t> verdict;
  // The op the owner is in (it stays published when the op fails: the comm is failed then).
  ShmOpState op;
};

class ShmGroup : public PeerWatch {
 public:
  // Collective: creates this rank's segment and publishes it; `peers_info` come from the store
  // exchange the backend does at init (one string per rank, from info()).
  ShmGroup(const std::string& comm_name, int rank, int size, ShmSizes sizes);
  ~ShmGroup() override;
  // What peers need to map this rank's segment.
  std::string info() const;
  void set_peer_info(std::vector<std::string> infos);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const ShmSizes& sizes() const { return sizes_; }

  bool alive(int peer) override;
  int any_dead() override;
  int culprit(int peer, bool* stalled) override;
  int verdict_of(int peer) override;
  void record_verdict(int rank, bool stalled) override;
  std::string call_mismatch(std::span<const int> peers, Clock::time_point now,
                            std::chrono::nanoseconds grace) override;
  // This rank enters an op (the peers of a p2p op; empty for a collective) and leaves it.
  void begin_op(const OpFingerprint& call, std::span<const int> p2p_peers, Clock::time_point at) {
    shm_op_begin(header(rank_).op, call, p2p_peers, at.time_since_epoch().count());
  }
  void end_op() { shm_op_end(header(rank_).op); }
  // Maps every peer now (a collective op needs them all).
  void map_all();
  // After map_all(): how many CPUs the ranks may run on together (the union of their affinity
  // masks; ranks bound one per core by mpirun are not oversubscribed).
  int cpus_of_all();
  ShmHeader& header(int r) { return *reinterpret_cast<ShmHeader*>(base(r)); }
  RingCtl& ring_ctl(int owner, int dst);
  char* ring(int owner, int dst);
  char* slot(int r, uint64_t step) { return base(r) + slot_off_ + (step & 1) * sizes_.slot_bytes; }

  // --- step protocol -----------------------------------------------------------------------
  uint64_t next_step() { return ++step_; }
  // Wait until every peer arrived at step-1 (then this rank may write its slot of `step`).
  void prepare_write(uint64_t step, const WaitScope& ws);
  void arrive(uint64_t step) { publish(header(rank_).arrive, step); }
  void wait_peer(int peer, uint64_t step, const WaitScope& ws);
  void wait_all(uint64_t step, const WaitScope& ws);
  // Whether every peer arrived at `step` already (no wait).
  bool all_arrived(uint64_t step);
  // This rank's note of its call at `step` (call_note), published with its arrival; and whether
  // every peer that arrived at `step` left the same note (call after they arrived).
  void write_note(uint64_t step, const OpFingerprint& call) {
    header(rank_).arrive.note[step & 1].store(call_note(call, step), std::memory_order_relaxed);
  }
  bool notes_match(uint64_t step, const OpFingerprint& call);
  // A broadcast root does not wait for its peers to enter the op (it would lose its lead of one
  // op): it leaves the check of their fingerprints in the slots of `step` against `call` to the
  // start of its next op on this comm, where check_deferred_calls() waits for them (it waits for
  // them there anyway) and raises the mismatch.
  void defer_call_check(uint64_t step, const OpFingerprint& call) {
    deferred_step_ = step;
    deferred_call_ = call;
  }
  bool has_deferred_check() const { return deferred_step_ != 0; }
  void check_deferred_calls(const WaitScope& ws);
  // Best effort, for error paths: until `peer` arrived at `step`, exited, or `grace` passed.
  void await_arrival(int peer, uint64_t step, std::chrono::milliseconds grace);

  // --- cross-memory attach (process_vm_readv) ---------------------------------------------
  // Init, after map_all(): tries to read every peer's header with process_vm_readv (and to write
  // it with process_vm_writev where root writes are wanted) and publishes the outcome in this
  // rank's header (ptrace rules or seccomp may forbid it), with this rank's limits.
  void probe_cma(const CmaLimits& want);
  // Init, once every rank probed (after the store meeting): true when all ranks can read all.
  void agree_cma();
  bool cma() const { return cma_all_; }
  size_t cma_min_bytes() const { return cma_.min_bytes; }
  size_t cma_all_reduce_min_bytes() const { return cma_.all_reduce_min_bytes; }
  size_t cma_broadcast_min_bytes() const { return cma_.broadcast_min_bytes; }
  size_t cma_root_writes_min_bytes() const { return cma_.root_writes_min_bytes; }
  // Copies `len` bytes at `remote` in peer's address space to `dst` (PeerFailure if it died,
  // an internal error otherwise).
  void cma_read(int peer, void* dst, uint64_t remote, size_t len);
  // Copies `len` bytes from src to `remote` in peer's address space (process_vm_writev).
  void cma_write(int peer, const void* src, uint64_t remote, size_t len);

  void close();

 private:
  char* base(int r) {
    char* b = bases_[r];
    return b ? b : map_peer(r);
  }
  char* map_peer(int r);
  void cma_copy(int peer, void* local, uint64_t remote, size_t len, bool write);

  std::string comm_name_;
  int rank_;
  int size_;
  ShmSizes sizes_;
  size_t ring_ctl_off_ = 0, ring_off_ = 0, slot_off_ = 0, total_ = 0;
  ShmSegment own_;
  uint64_t nonce_ = 0;
  std::vector<std::unique_ptr<ShmSegment>> peers_;
  std::vector<char*> bases_;
  std::vector<ProcessWatch> watches_;
  std::vector<std::string> infos_;
  std::vector<uint64_t> seen_;  // lower bounds of peers' arrive counters
  uint64_t step_ = 0;
  uint64_t deferred_step_ = 0;  // see defer_call_check (0: none)
  OpFingerprint deferred_call_{};
  bool cma_all_ = false;
  CmaLimits cma_;  // agreed; all off until agree_cma()
};

}  // namespace commx
