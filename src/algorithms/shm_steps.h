// Internal helpers of the shm collectives: slot layout (signature, per-peer size table, data) and
// the step calls every algorithm makes. Layer: algorithms.
#pragma once

#include <cstring>
#include <string>

#include "algorithms/shm_collectives.h"
#include "commx/backend.h"
#include "commx/error.h"

namespace commx {

inline size_t round_up64(size_t v) { return (v + 63) & ~size_t{63}; }

class Steps {
 public:
  explicit Steps(ShmColl& c)
      : c_(c),
        me_(c.g.rank()),
        n_(c.g.size()),
        off_(round_up64(sizeof(OpFingerprint) + 24 * static_cast<size_t>(c.g.size()) + 8)),
        cap_(c.g.sizes().slot_bytes - off_) {}

  int me() const { return me_; }
  int n() const { return n_; }
  size_t cap() const { return cap_; }  // data bytes per slot

  // Starts a step; `write`: this rank will write its slot.
  uint64_t begin(bool write) {
    uint64_t s = c_.g.next_step();
    if (write) c_.g.prepare_write(s, c_.ws);
    return s;
  }
  char* mine(uint64_t s) { return c_.g.slot(me_, s) + off_; }
  const char* of(int p, uint64_t s) { return c_.g.slot(p, s) + off_; }
  // Single-copy paths: whether an op whose largest piece is `bytes` uses them (all ranks agree).
  bool use_cma(size_t bytes) const { return n_ > 1 && bytes >= c_.cma_min_bytes; }
  // Reads `len` bytes at address `remote` of peer p into dst.
  void read_peer(int p, void* dst, int64_t remote, size_t len) {
    if (len) c_.g.cma_read(p, dst, static_cast<uint64_t>(remote), len);
  }
  // Writes `len` bytes of src to address `remote` of peer p.
  void write_peer(int p, int64_t remote, const void* src, size_t len) {
    if (len) c_.g.cma_write(p, src, static_cast<uint64_t>(remote), len);
  }
  // After an error on a path where peer p writes into this rank's buffer: waits until p arrived
  // at `step` (its writes are done) or exited, past the deadline and abort, for at most 250 ms.
  void await_writer(int p, uint64_t step) {
    c_.g.await_arrival(p, step, std::chrono::milliseconds(250));
  }
  // Ends a single-copy op: a step that every rank reaches after its reads, awaited by all, so no
  // rank returns (and lets its caller reuse its buffers) while a peer still reads them.
  void finish_reads() {
    uint64_t s = begin(false);
    arrive(s);
    wait_all(s);
  }
  static int64_t addr(const void* p) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(p)); }
  // The per-peer table after the signature: three int64 per rank (sizes and, for single-copy
  // paths, an address) and one more for flags.
  int64_t* table(int p, uint64_t s) {
    return reinterpret_cast<int64_t*>(c_.g.slot(p, s) + sizeof(OpFingerprint));
  }
  void write_sig(uint64_t s) { std::memcpy(c_.g.slot(me_, s), &c_.sig, sizeof(OpFingerprint)); }
  void arrive(uint64_t s) { c_.g.arrive(s); }
  void wait(int p, uint64_t s) { c_.g.wait_peer(p, s, c_.ws); }
  void wait_all(uint64_t s) { c_.g.wait_all(s, c_.ws); }

  // Compares peer p's fingerprint with this rank's (call after waiting for p at step s).
  void check_sig(int p, uint64_t s) {
    OpFingerprint o;
    std::memcpy(&o, c_.g.slot(p, s), sizeof(OpFingerprint));
    if (!fingerprints_match(o, c_.sig))
      throw Error(ErrorCode::kInvalidArgument, mismatch_message(me_, c_.sig, p, o));
  }
  void check_all_sigs(uint64_t s) {
    for (int p = 0; p < n_; ++p)
      if (p != me_) check_sig(p, s);
  }
  // A broadcast root's first step, after it arrived: checks its peers' calls if they all
  // arrived already, else leaves the check to its next op (see ShmGroup::defer_call_check).
  void check_sigs_or_defer(uint64_t s) {
    if (!c_.g.all_arrived(s))
      c_.g.defer_call_check(s, c_.sig);
    else if (!c_.g.notes_match(s, c_.sig))
      check_all_sigs(s);
  }
  // Publishes this rank's note of its call at step s (before it arrives there).
  void write_note(uint64_t s) { c_.g.write_note(s, c_.sig); }
  // The first step of every op: every rank publishes its fingerprint and checks all of its
  // peers', so a mismatch is an error on every rank, before any data is read.
  void agree(uint64_t s) {
    wait_all(s);
    check_all_sigs(s);
  }
  // A non-root's step k of a rooted op (broadcast, scatter): arrives, then waits until the root's
  // data of step s is there (the first step agrees with every peer first).
  void await_root(int root, uint64_t s, size_t k) {
    arrive(s);
    if (k == 0)
      agree(s);
    else
      wait(root, s);
  }

 private:
  ShmColl& c_;
  int me_, n_;
  size_t off_, cap_;
};

}  // namespace commx
