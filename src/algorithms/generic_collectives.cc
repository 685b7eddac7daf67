// Transport-generic collectives (see generic_collectives.h). Messages between a pair of ranks are
// FIFO, so each step is one Transport::exchange(). Layer: algorithms.
#include "algorithms/generic_collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace commx {
namespace {

char* scratch(GenericColl& c, size_t bytes) {
  if (c.scratch.size() < bytes) c.scratch.resize(bytes);
  return c.scratch.data();
}

void sendrecv(GenericColl& c, int to, const void* sd, size_t sb, int from, void* rd, size_t rb) {
  SendReq s{to, sd, sb};
  RecvReq r{from, rd, rb};
  c.t.exchange({&s, 1}, {&r, 1}, c.deadline);
}
void send(GenericColl& c, int to, const void* d, size_t b) {
  SendReq s{to, d, b};
  c.t.exchange({&s, 1}, {}, c.deadline);
}
void recv(GenericColl& c, int from, void* d, size_t b) {
  RecvReq r{from, d, b};
  c.t.exchange({}, {&r, 1}, c.deadline);
}

// An empty message carries only its sender's call (every message's header does): a rank that would
// otherwise only send gets one from each rank it sends to, so it checks their calls as its
// receivers check its own, and a mismatch is an error on both sides of every link the op uses.
char g_call_only = 0;
void send_call(std::vector<SendReq>& s, int to) { s.push_back({to, &g_call_only, 0}); }
void recv_call(std::vector<RecvReq>& r, int from) { r.push_back({from, &g_call_only, 0}); }

// out = reduce(lo, hi) in that order (the lower rank's data first, on every rank).
void combine(const HostReducer& r, void* out, const void* lo, const void* hi, size_t count,
             bool fin) {
  const void* srcs[2] = {lo, hi};
  r.reduce(out, srcs, 2, count, fin);
}

struct Part {
  size_t off, len;
};
Part part_of(size_t m, int n, int p) {
  size_t q = (m + n - 1) / n;
  size_t a = std::min(m, q * p), b = std::min(m, q * (p + 1));
  return {a, b - a};
}

}  // namespace

void gen_all_reduce_recursive_doubling(GenericColl& c, const void* in, void* out, size_t count,
                                       const HostReducer& r) {
  const size_t bytes = count * r.elem_size();
  if (out != in) std::memmove(out, in, bytes);
  const int n = c.size, me = c.rank;
  if (n == 1) return r.finish(out, count);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  char* tmp = scratch(c, bytes);
  // Fold: among the first 2*rem ranks, even ones hand their data to the next odd one and wait.
  int vr;
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      send(c, me + 1, out, bytes);
      recv(c, me + 1, out, bytes);
      return;
    }
    recv(c, me - 1, tmp, bytes);
    combine(r, out, tmp, out, count, p2 == 1);
    vr = me / 2;
  } else {
    vr = me - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  for (int mask = 1; mask < p2; mask <<= 1) {
    int peer = real(vr ^ mask);
    sendrecv(c, peer, out, bytes, peer, tmp, bytes);
    bool last = mask * 2 >= p2;
    if (peer < me)
      combine(r, out, tmp, out, count, last);
    else
      combine(r, out, out, tmp, count, last);
  }
  if (me < 2 * rem) send(c, me - 1, out, bytes);
}

void gen_all_reduce_ring(GenericColl& c, const void* in, void* out, size_t count,
                         const HostReducer& r) {
  const int n = c.size, me = c.rank;
  const size_t es = r.elem_size();
  if (out != in) std::memmove(out, in, count * es);
  if (n == 1) return r.finish(out, count);
  char* o = static_cast<char*>(out);
  char* tmp = scratch(c, part_of(count, n, 0).len * es);
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  // Reduce-scatter: after n-1 steps this rank holds part (me+1)%n fully reduced.
  for (int i = 0; i < n - 1; ++i) {
    Part sp = part_of(count, n, (me - i + n) % n);
    Part rp = part_of(count, n, (me - i - 1 + 2 * n) % n);
    sendrecv(c, next, o + sp.off * es, sp.len * es, prev, tmp, rp.len * es);
    // The chain runs prev -> me: the received partial holds the earlier ranks' data.
    combine(r, o + rp.off * es, tmp, o + rp.off * es, rp.len, i == n - 2);
  }
  // All-gather.
  for (int i = 0; i < n - 1; ++i) {
    Part sp = part_of(count, n, (me + 1 - i + n) % n);
    Part rp = part_of(count, n, (me - i + n) % n);
    sendrecv(c, next, o + sp.off * es, sp.len * es, prev, o + rp.off * es, rp.len * es);
  }
}

void gen_reduce_tree(GenericColl& c, const void* in, void* out, size_t count, int root,
                     const HostReducer& r) {
  const int n = c.size;
  const size_t bytes = count * r.elem_size();
  const int vr = (c.rank - root + n) % n;
  // Accumulate in scratch (non-roots must not touch their input; roots write `out` at the end).
  char* acc = scratch(c, 2 * bytes);
  char* tmp = acc + bytes;
  std::memcpy(acc, in, bytes);
  // Every parent first tells its children its call (they only send to it).
  std::vector<SendReq> calls;
  for (int mask = 1; mask < n && !(vr & mask); mask <<= 1)
    if (vr + mask < n) send_call(calls, (vr + mask + root) % n);
  if (!calls.empty()) c.t.exchange(calls, {}, c.deadline);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      const int parent = (vr - mask + root) % n;
      std::vector<SendReq> s{{parent, acc, bytes}};
      std::vector<RecvReq> r;
      recv_call(r, parent);
      c.t.exchange(s, r, c.deadline);
      return;
    }
    if (vr + mask < n) {
      recv(c, (vr + mask + root) % n, tmp, bytes);
      combine(r, acc, acc, tmp, count, false);
    }
  }
  r.finish(acc, count);
  std::memcpy(out, acc, bytes);
}

void gen_broadcast_tree(GenericColl& c, void* buf, size_t bytes, int root) {
  const int n = c.size;
  const int vr = (c.rank - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      // This rank's call goes to its parent (which only sends) while the data comes.
      const int parent = (vr - mask + root) % n;
      std::vector<SendReq> s;
      send_call(s, parent);
      std::vector<RecvReq> r{{parent, buf, bytes}};
      c.t.exchange(s, r, c.deadline);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) {
      const int child = (vr + mask + root) % n;
      std::vector<SendReq> s{{child, buf, bytes}};
      std::vector<RecvReq> r;
      recv_call(r, child);
      c.t.exchange(s, r, c.deadline);
    }
}

void gen_all_gather_ring(GenericColl& c, const void* in, size_t in_bytes,
                         std::span<void* const> outs, std::span<const size_t> out_bytes) {
  const int n = c.size, me = c.rank;
  if (outs[me] != in) std::memcpy(outs[me], in, in_bytes);
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (int i = 0; i < n - 1; ++i) {
    int sb = (me - i + n) % n, rb = (me - i - 1 + n) % n;
    sendrecv(c, next, outs[sb], out_bytes[sb], prev, outs[rb], out_bytes[rb]);
  }
}

void gen_reduce_scatter_ring(GenericColl& c, std::span<const void* const> ins,
                             std::span<const size_t> counts, void* out, const HostReducer& r) {
  const int n = c.size, me = c.rank;
  const size_t es = r.elem_size();
  if (n == 1) {
    const void* s[1] = {ins[0]};
    return r.reduce(out, s, 1, counts[0], true);
  }
  size_t most = *std::max_element(counts.begin(), counts.end()) * es;
  char* cur = scratch(c, 2 * most);
  char* tmp = cur + most;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  // Step i sends the partial of block (me-i-1) and receives that of block (me-i-2); the last
  // received block is this rank's own.
  int first = (me - 1 + n) % n;
  std::memcpy(cur, ins[first], counts[first] * es);
  for (int i = 0; i < n - 1; ++i) {
    int sb = (me - i - 1 + 2 * n) % n, rb = (me - i - 2 + 2 * n) % n;
    sendrecv(c, next, cur, counts[sb] * es, prev, tmp, counts[rb] * es);
    bool last = i == n - 2;
    combine(r, last ? out : cur, tmp, ins[rb], counts[rb], last);
  }
}

void gen_all_to_all(GenericColl& c, std::span<const void* const> ins,
                    std::span<const size_t> in_bytes, std::span<void* const> outs,
                    std::span<const size_t> out_bytes) {
  const int n = c.size, me = c.rank;
  // Sends and receives progress together, so a receive may land in memory a send still reads:
  // when the inputs overlap the outputs (in place), send from a copy of the inputs.
  auto span_of = [n](auto ptrs, std::span<const size_t> bytes) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < n; ++i) {
      if (bytes[i] == 0) continue;
      auto p = reinterpret_cast<uintptr_t>(ptrs[i]);
      lo = std::min(lo, p);
      hi = std::max(hi, p + bytes[i]);
    }
    return std::pair<uintptr_t, uintptr_t>(lo, hi);
  };
  auto [ilo, ihi] = span_of(ins, in_bytes);
  auto [olo, ohi] = span_of(outs, out_bytes);
  std::vector<char> staged;
  std::vector<const void*> staged_ins;
  if (ilo < ohi && olo < ihi) {
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += in_bytes[i];
    staged.resize(total);
    size_t off = 0;
    for (int i = 0; i < n; ++i) {
      if (in_bytes[i]) std::memcpy(staged.data() + off, ins[i], in_bytes[i]);
      staged_ins.push_back(staged.data() + off);
      off += in_bytes[i];
    }
    ins = staged_ins;
  }
  std::memmove(outs[me], ins[me], std::min(in_bytes[me], out_bytes[me]));
  std::vector<SendReq> s;
  std::vector<RecvReq> rv;
  for (int i = 1; i < n; ++i) {
    int to = (me + i) % n, from = (me - i + n) % n;
    s.push_back({to, ins[to], in_bytes[to]});
    rv.push_back({from, outs[from], out_bytes[from]});
  }
  c.t.exchange(s, rv, c.deadline);
}

void gen_gather(GenericColl& c, const void* in, size_t bytes, std::span<void* const> outs,
                int root) {
  std::vector<SendReq> s;
  std::vector<RecvReq> rv;
  if (c.rank != root) {
    s.push_back({root, in, bytes});
    recv_call(rv, root);
    return c.t.exchange(s, rv, c.deadline);
  }
  std::memcpy(outs[root], in, bytes);
  for (int p = 0; p < c.size; ++p)
    if (p != root) {
      rv.push_back({p, outs[p], bytes});
      send_call(s, p);
    }
  c.t.exchange(s, rv, c.deadline);
}

void gen_scatter(GenericColl& c, std::span<const void* const> ins, void* out, size_t bytes,
                 int root) {
  std::vector<SendReq> s;
  std::vector<RecvReq> rv;
  if (c.rank != root) {
    send_call(s, root);
    rv.push_back({root, out, bytes});
    return c.t.exchange(s, rv, c.deadline);
  }
  std::memcpy(out, ins[root], bytes);
  for (int p = 0; p < c.size; ++p)
    if (p != root) {
      s.push_back({p, ins[p], bytes});
      recv_call(rv, p);
    }
  c.t.exchange(s, rv, c.deadline);
}

void gen_barrier(GenericColl& c) {
  const int n = c.size, me = c.rank;
  char dummy = 0;
  for (int k = 1; k < n; k <<= 1) sendrecv(c, (me + k) % n, &dummy, 0, (me - k + n) % n, &dummy, 0);
}

}  // namespace commx
