// Reductions over shared slots: all_reduce (DDA one-shot and reduce-scatter + all-gather), reduce
// and reduce_scatter. Every output element is reduced from all ranks' inputs in rank order
// 0..n-1, so all ranks get bit-identical results. Layer: algorithms.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/shm_collectives.h"
#include "algorithms/shm_steps.h"

namespace commx {
namespace {

// Rank p's share of m elements: 16-element aligned pieces (whole cache lines for 4-byte types).
struct Part {
  size_t off, len;
};
// Source pointers of one reduction; on the stack for the usual rank counts (no allocation per op).
class SrcList {
 public:
  explicit SrcList(int n) : p_(n <= kInline ? inline_ : (heap_.resize(n), heap_.data())) {}
  const void*& operator[](int i) { return p_[i]; }
  const void* const* data() const { return p_; }

 private:
  static constexpr int kInline = 64;
  const void* inline_[kInline];
  std::vector<const void*> heap_;
  const void** p_;
};

Part part_of(size_t m, int n, int p) {
  size_t q = ((m + n - 1) / n + 15) / 16 * 16;
  size_t a = std::min(m, q * p), b = std::min(m, q * (p + 1));
  return {a, b - a};
}

}  // namespace

// One-shot rounds (root < 0: all_reduce DDA; else reduce to `root`): each rank copies a chunk of
// its input into its slot, then every rank that gets the result reduces all slots, in rank order.
static void one_shot_rounds(ShmColl& c, const void* in, void* out, size_t count,
                            const HostReducer& r, int root) {
  Steps st(c);
  const size_t es = r.elem_size();
  const size_t per = st.cap() / es;
  const bool gets_result = root < 0 || root == st.me();
  SrcList srcs(st.n());
  size_t done = 0;
  bool first = true;
  do {
    size_t m = std::min(per, count - done);
    uint64_t s = st.begin(true);
    if (first) st.write_sig(s);
    std::memcpy(st.mine(s), static_cast<const char*>(in) + done * es, m * es);
    st.arrive(s);
    if (first) st.agree(s);  // non-roots of a reduce too: every rank checks every call
    if (gets_result) {
      st.wait_all(s);
      for (int p = 0; p < st.n(); ++p) srcs[p] = st.of(p, s);
      r.reduce(static_cast<char*>(out) + done * es, srcs.data(), st.n(), m, true);
    }
    done += m;
    first = false;
  } while (done < count);
}

void shm_all_reduce_dda(ShmColl& c, const void* in, void* out, size_t count, const HostReducer& r) {
  one_shot_rounds(c, in, out, count, r, -1);
}

// Reduce-scatter + all-gather (root < 0) or + gather to `root`, in rounds of a chunk. Step s1:
// each rank copies the parts of its chunk that *other* ranks reduce into its slot (its own part
// it reads straight from its input). Step s2: each rank has reduced its part and publishes it;
// the others copy it out. Sources are combined in rank order, so every rank gets the same bits.
static void rsag_rounds(ShmColl& c, const void* in, void* out, size_t count, const HostReducer& r,
                        int root) {
  Steps st(c);
  const size_t es = r.elem_size();
  const size_t bytes = c.chunk_bytes && c.chunk_bytes < st.cap() ? c.chunk_bytes : st.cap();
  const size_t per = std::max<size_t>(1, bytes / es);
  const int n = st.n(), me = st.me();
  const bool gets_result = root < 0 || root == me;
  SrcList srcs(n);
  size_t done = 0;
  bool first = true;
  do {
    size_t m = std::min(per, count - done);
    const char* src = static_cast<const char*>(in) + done * es;
    char* dst = static_cast<char*>(out) + done * es;
    Part mp = part_of(m, n, me);
    uint64_t s1 = st.begin(true);
    if (first) st.write_sig(s1);
    std::memcpy(st.mine(s1), src, mp.off * es);  // the parts before and after this rank's own
    std::memcpy(st.mine(s1) + (mp.off + mp.len) * es, src + (mp.off + mp.len) * es,
                (m - mp.off - mp.len) * es);
    st.arrive(s1);
    st.wait_all(s1);
    if (first) st.check_all_sigs(s1);
    // Step s2's slot may be written now: every peer has arrived at s1.
    uint64_t s2 = st.begin(false);
    for (int p = 0; p < n; ++p) srcs[p] = p == me ? src + mp.off * es : st.of(p, s1) + mp.off * es;
    if (gets_result) {
      // In place is fine: only this rank reads its own part of the input, and it is read here.
      r.reduce(dst + mp.off * es, srcs.data(), n, mp.len, true);
      if (root < 0) std::memcpy(st.mine(s2), dst + mp.off * es, mp.len * es);
    } else {
      r.reduce(st.mine(s2), srcs.data(), n, mp.len, true);  // a non-root's buffer stays unchanged
    }
    st.arrive(s2);
    if (gets_result) {
      for (int i = 1; i < n; ++i) {
        int p = (me + i) % n;
        st.wait(p, s2);
        Part pp = part_of(m, n, p);
        std::memcpy(dst + pp.off * es, st.of(p, s2), pp.len * es);
      }
    }
    done += m;
    first = false;
  } while (done < count);
}

void shm_all_reduce_rsag(ShmColl& c, const void* in, void* out, size_t count,
                         const HostReducer& r) {
  rsag_rounds(c, in, out, count, r, -1);
}

void shm_reduce(ShmColl& c, const void* in, void* out, size_t count, int root, const HostReducer& r,
                bool two_step) {
  if (two_step) return rsag_rounds(c, in, out, count, r, root);
  one_shot_rounds(c, in, out, count, r, root);
}

void shm_reduce_scatter(ShmColl& c, std::span<const void* const> ins,
                        std::span<const size_t> counts, void* out, const HostReducer& r) {
  Steps st(c);
  const int n = st.n(), me = st.me();
  const size_t es = r.elem_size();
  const size_t block = st.cap() / static_cast<size_t>(n) / 64 * 64;  // bytes per destination
  const size_t per = block / es;
  size_t most = 0;
  for (size_t k : counts) most = std::max(most, k);
  const size_t rounds = std::max<size_t>(1, (most + per - 1) / per);
  SrcList srcs(n);
  for (size_t k = 0; k < rounds; ++k) {
    uint64_t s = st.begin(true);
    if (k == 0) st.write_sig(s);
    for (int d = 0; d < n; ++d) {
      size_t a = std::min(counts[d], k * per), b = std::min(counts[d], (k + 1) * per);
      std::memcpy(st.mine(s) + block * d, static_cast<const char*>(ins[d]) + a * es, (b - a) * es);
    }
    st.arrive(s);
    st.wait_all(s);
    if (k == 0) st.check_all_sigs(s);
    size_t a = std::min(counts[me], k * per), b = std::min(counts[me], (k + 1) * per);
    for (int p = 0; p < n; ++p) srcs[p] = st.of(p, s) + block * me;
    r.reduce(static_cast<char*>(out) + a * es, srcs.data(), n, b - a, true);
  }
}

}  // namespace commx

namespace commx {

// Single-copy all_reduce over process_vm_readv. Step 1: every rank publishes its input and output
// addresses; rank d pulls part d of every peer's input (in pieces that stay in the caches) and
// reduces it, in rank order, into its own output. Step 2: every rank's part is final; each pulls
// the others' parts straight into its output. A last step keeps every rank's buffers alive until
// its peers finished reading them. No slot is written, so no cache line bounces between ranks.
void shm_all_reduce_cma(ShmColl& c, const void* in, void* out, size_t count,
                        const HostReducer& r) {
  constexpr size_t kPieceBytes = size_t{256} << 10;  // per peer and piece
  Steps st(c);
  const int n = st.n(), me = st.me();
  const size_t es = r.elem_size();
  const size_t piece = std::max<size_t>(1, kPieceBytes / es);
  uint64_t s1 = st.begin(true);
  st.write_sig(s1);
  st.table(me, s1)[0] = Steps::addr(in);
  st.table(me, s1)[1] = Steps::addr(out);
  st.arrive(s1);
  st.wait_all(s1);
  st.check_all_sigs(s1);
  thread_local std::vector<char> scratch;
  scratch.resize(piece * es * static_cast<size_t>(n));
  SrcList srcs(n);
  Part mp = part_of(count, n, me);
  for (size_t done = 0; done < mp.len; done += piece) {
    const size_t m = std::min(piece, mp.len - done), off = (mp.off + done) * es;
    for (int i = 1; i < n; ++i) {
      int p = (me + i) % n;
      char* buf = scratch.data() + piece * es * static_cast<size_t>(p);
      st.read_peer(p, buf, st.table(p, s1)[0] + static_cast<int64_t>(off), m * es);
      srcs[p] = buf;
    }
    srcs[me] = static_cast<const char*>(in) + off;
    r.reduce(static_cast<char*>(out) + off, srcs.data(), n, m, true);
  }
  // Peers' inputs are read and this rank's part of the output is final.
  uint64_t s2 = st.begin(false);
  st.arrive(s2);
  for (int i = 1; i < n; ++i) {
    int p = (me + i) % n;
    st.wait(p, s2);
    Part pp = part_of(count, n, p);
    st.read_peer(p, static_cast<char*>(out) + pp.off * es,
                 st.table(p, s1)[1] + static_cast<int64_t>(pp.off * es), pp.len * es);
  }
  st.finish_reads();
}

}  // namespace commx
