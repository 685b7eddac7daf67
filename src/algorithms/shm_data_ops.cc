// Data movement over shared slots: broadcast, all_gather(_v), all_to_all(_v), gather, scatter and
// barrier. Each rank copies its data into its own slot once and every reader copies it straight
// into its output. Layer: algorithms.
#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms/shm_collectives.h"
#include "algorithms/shm_steps.h"

namespace commx {
namespace {

// Bytes [k*per, (k+1)*per) of a buffer of `total` bytes.
struct Piece {
  size_t off, len;
};
Piece piece(size_t total, size_t per, size_t k) {
  size_t a = std::min(total, k * per), b = std::min(total, (k + 1) * per);
  return {a, b - a};
}
bool overlaps(std::span<const void* const> ins, std::span<const size_t> in_bytes,
              std::span<void* const> outs, std::span<const size_t> out_bytes) {
  for (size_t i = 0; i < ins.size(); ++i)
    for (size_t o = 0; o < outs.size(); ++o) {
      auto a = reinterpret_cast<uintptr_t>(ins[i]), b = reinterpret_cast<uintptr_t>(outs[o]);
      if (in_bytes[i] && out_bytes[o] && a < b + out_bytes[o] && b < a + in_bytes[i]) return true;
    }
  return false;
}
size_t rounds_for(size_t most, size_t per) { return std::max<size_t>(1, (most + per - 1) / per); }

}  // namespace

void shm_broadcast(ShmColl& c, void* buf, size_t bytes, int root) {
  Steps st(c);
  const bool is_root = st.me() == root;
  if (st.use_cma(bytes)) {
    // Root publishes its buffer's address; the others copy from it once. With root writes, the
    // peers publish theirs too and the root writes the head (1/n, whole pages) of every peer's
    // buffer while the peers read the rest: both copies run at once on different CPUs (2 ranks:
    // half the time; the one copy no longer waits for the root's CPU to idle).
    const size_t head =
        bytes >= c.root_writes_min_bytes ? bytes / static_cast<size_t>(st.n()) / 4096 * 4096 : 0;
    uint64_t s = st.begin(true);
    st.write_sig(s);
    st.table(st.me(), s)[0] = Steps::addr(buf);
    st.arrive(s);
    st.agree(s);
    if (is_root) {
      for (int i = 1; i < st.n() && head > 0; ++i) {
        int p = (root + i) % st.n();
        st.write_peer(p, st.table(p, s)[0], buf, head);
      }
      return st.finish_reads();
    }
    try {
      st.read_peer(root, static_cast<char*>(buf) + head,
                   st.table(root, s)[0] + static_cast<int64_t>(head), bytes - head);
      st.finish_reads();
    } catch (...) {
      // Leaving early (abort, timeout, a dead rank): the root may still be writing into buf. Do
      // not hand it back to the caller before the root is done (it arrives at the next step
      // after its writes) or gone.
      if (head > 0) st.await_writer(root, s + 1);
      throw;
    }
    return;
  }
  const size_t rounds = rounds_for(bytes, st.cap());
  for (size_t k = 0; k < rounds; ++k) {
    Piece pc = piece(bytes, st.cap(), k);
    uint64_t s = st.begin(is_root || k == 0);
    if (k == 0) {
      st.write_sig(s);
      st.write_note(s);  // what the root compares without reading this slot
    }
    if (is_root) {
      std::memcpy(st.mine(s), static_cast<char*>(buf) + pc.off, pc.len);
      st.arrive(s);
      // Waiting here for every peer to enter the op would cost the root its lead of one op
      // (+10% latency at small sizes); its peers check its call before reading its data.
      if (k == 0) st.check_sigs_or_defer(s);
    } else {
      st.await_root(root, s, k);
      std::memcpy(static_cast<char*>(buf) + pc.off, st.of(root, s), pc.len);
    }
  }
}

void shm_all_gather(ShmColl& c, const void* in, size_t in_bytes, std::span<void* const> outs,
                    std::span<const size_t> out_bytes) {
  Steps st(c);
  const int n = st.n(), me = st.me();
  size_t most = 0;
  for (size_t b : out_bytes) most = std::max(most, b);
  if (st.use_cma(most)) {
    uint64_t s = st.begin(true);
    st.write_sig(s);
    st.table(me, s)[0] = Steps::addr(in);
    st.table(me, s)[1] = static_cast<int64_t>(in_bytes);
    st.arrive(s);
    if (outs[me] != in) std::memcpy(outs[me], in, in_bytes);
    for (int i = 1; i < n; ++i) {
      int p = (me + i) % n;
      st.wait(p, s);
      st.check_sig(p, s);
      if (st.table(p, s)[1] != static_cast<int64_t>(out_bytes[p]))
        throw Error(ErrorCode::kInvalidArgument,
                    "rank " + std::to_string(p) + " contributes " +
                        std::to_string(st.table(p, s)[1]) + " bytes to all_gather, this rank " +
                        "expects " + std::to_string(out_bytes[p]));
      st.read_peer(p, outs[p], st.table(p, s)[0], out_bytes[p]);
    }
    return st.finish_reads();
  }
  const size_t rounds = rounds_for(most, st.cap());
  for (size_t k = 0; k < rounds; ++k) {
    uint64_t s = st.begin(true);
    if (k == 0) st.write_sig(s);
    Piece mine = piece(in_bytes, st.cap(), k);
    std::memcpy(st.mine(s), static_cast<const char*>(in) + mine.off, mine.len);
    st.arrive(s);
    if (outs[me] != in) std::memcpy(static_cast<char*>(outs[me]) + mine.off, st.mine(s), mine.len);
    for (int i = 1; i < n; ++i) {
      int p = (me + i) % n;
      st.wait(p, s);
      if (k == 0) st.check_sig(p, s);
      Piece pc = piece(out_bytes[p], st.cap(), k);
      std::memcpy(static_cast<char*>(outs[p]) + pc.off, st.of(p, s), pc.len);
    }
  }
}

void shm_all_to_all(ShmColl& c, std::span<const void* const> ins, std::span<const size_t> in_bytes,
                    std::span<void* const> outs, std::span<const size_t> out_bytes) {
  Steps st(c);
  const int n = st.n(), me = st.me();
  const size_t block = st.cap() / static_cast<size_t>(n) / 64 * 64;
  // In place (an input overlaps an output) the single-copy path would let peers read inputs this
  // rank already overwrote: such an op goes through the slots, where every round copies its
  // pieces in before anyone writes them out.
  const bool aliased = overlaps(ins, in_bytes, outs, out_bytes);
  size_t my_most = 0;
  for (size_t b : in_bytes) my_most = std::max(my_most, b);
  // A rank that sends a piece of cma_min_bytes or more (and is not in place) expects the op to go
  // single-copy (the decision below takes the largest piece of all) and skips filling its slot;
  // if some other rank is in place after all, every rank fills the first round again.
  const bool skip_fill = st.use_cma(my_most) && !aliased;
  const size_t flag = 3 * static_cast<size_t>(n);  // after the n (sent, expected, address) rows
  size_t rounds = 1, k = 0;
  for (bool first = true;; first = false) {
    uint64_t s = st.begin(true);
    if (first) {
      st.write_sig(s);
      int64_t* t = st.table(me, s);
      for (int d = 0; d < n; ++d) {
        t[3 * d] = static_cast<int64_t>(in_bytes[d]);
        t[3 * d + 1] = static_cast<int64_t>(out_bytes[d]);
        t[3 * d + 2] = Steps::addr(ins[d]);
      }
      t[flag] = aliased ? 1 : 0;
    }
    if (!(first && skip_fill))
      for (int d = 0; d < n; ++d) {
        Piece pc = piece(in_bytes[d], block, k);
        std::memcpy(st.mine(s) + block * d, static_cast<const char*>(ins[d]) + pc.off, pc.len);
      }
    st.arrive(s);
    st.wait_all(s);
    if (first) {
      st.check_all_sigs(s);
      // Every rank sees every pair's sizes, so all of them agree on the rounds and on the error.
      size_t most = 0;
      bool any_aliased = false, any_skipped = false;
      for (int a = 0; a < n; ++a) {
        const int64_t* ta = st.table(a, s);
        size_t a_most = 0;
        for (int b = 0; b < n; ++b) {
          int64_t sent = ta[3 * b], expected = st.table(b, s)[3 * a + 1];
          if (sent != expected)
            throw Error(ErrorCode::kInvalidArgument,
                        "rank " + std::to_string(a) + " sends " + std::to_string(sent) +
                            " bytes to rank " + std::to_string(b) + ", which expects " +
                            std::to_string(expected) + " bytes from it");
          a_most = std::max(a_most, static_cast<size_t>(sent));
        }
        most = std::max(most, a_most);
        any_aliased = any_aliased || ta[flag] != 0;
        any_skipped = any_skipped || (st.use_cma(a_most) && ta[flag] == 0);
      }
      rounds = rounds_for(most, block);
      if (st.use_cma(most) && !any_aliased) {
        for (int i = 0; i < n; ++i) {
          int p = (me + i) % n;
          if (p == me)
            std::memcpy(outs[me], ins[me], out_bytes[me]);
          else
            st.read_peer(p, outs[p], st.table(p, s)[3 * me + 2], out_bytes[p]);
        }
        return st.finish_reads();
      }
      if (any_skipped) continue;  // round 0 again, this time with every slot filled
    }
    for (int i = 0; i < n; ++i) {
      int p = (me + i) % n;
      Piece pc = piece(out_bytes[p], block, k);
      std::memcpy(static_cast<char*>(outs[p]) + pc.off, st.of(p, s) + block * me, pc.len);
    }
    if (++k >= rounds) break;
  }
}

void shm_gather(ShmColl& c, const void* in, size_t bytes, std::span<void* const> outs, int root) {
  Steps st(c);
  const int n = st.n(), me = st.me();
  const size_t rounds = rounds_for(bytes, st.cap());
  for (size_t k = 0; k < rounds; ++k) {
    Piece pc = piece(bytes, st.cap(), k);
    uint64_t s = st.begin(true);
    if (k == 0) st.write_sig(s);
    if (me != root) {
      std::memcpy(st.mine(s), static_cast<const char*>(in) + pc.off, pc.len);
      st.arrive(s);
      if (k == 0) st.agree(s);
      continue;
    }
    st.arrive(s);
    if (k == 0) st.agree(s);
    std::memcpy(static_cast<char*>(outs[me]) + pc.off, static_cast<const char*>(in) + pc.off,
                pc.len);
    for (int i = 1; i < n; ++i) {
      int p = (me + i) % n;
      st.wait(p, s);
      std::memcpy(static_cast<char*>(outs[p]) + pc.off, st.of(p, s), pc.len);
    }
  }
}

void shm_scatter(ShmColl& c, std::span<const void* const> ins, void* out, size_t bytes, int root) {
  Steps st(c);
  const int n = st.n(), me = st.me();
  const size_t block = st.cap() / static_cast<size_t>(n) / 64 * 64;
  const size_t rounds = rounds_for(bytes, block);
  for (size_t k = 0; k < rounds; ++k) {
    Piece pc = piece(bytes, block, k);
    uint64_t s = st.begin(me == root || k == 0);
    if (k == 0) st.write_sig(s);
    if (me == root) {
      for (int d = 0; d < n; ++d)
        if (d != me)
          std::memcpy(st.mine(s) + block * d, static_cast<const char*>(ins[d]) + pc.off, pc.len);
      st.arrive(s);
      if (k == 0) st.agree(s);
      std::memcpy(static_cast<char*>(out) + pc.off, static_cast<const char*>(ins[me]) + pc.off,
                  pc.len);
    } else {
      st.await_root(root, s, k);
      std::memcpy(static_cast<char*>(out) + pc.off, st.of(root, s) + block * me, pc.len);
    }
  }
}

void shm_barrier(ShmColl& c) {
  Steps st(c);
  uint64_t s = st.begin(true);
  st.write_sig(s);
  st.arrive(s);
  st.wait_all(s);
  st.check_all_sigs(s);
}

}  // namespace commx
