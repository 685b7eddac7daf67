// Ring protocol (see shm_transport.h). The ring from rank s to rank d lives in s's segment. A
// message is a 48-byte header {size, the sender's call (OpFingerprint)} followed by the payload
// padded to 8 bytes; head and tail are
// byte counters that only grow. Whoever moves head or tail rings the other side's doorbell, and a
// rank with nothing to do sleeps on its own doorbell. Layer: transport.
#include "transport/shm_transport.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "commx/error.h"

namespace commx {
namespace {

struct RingHeader {
  uint64_t bytes;
  OpFingerprint call;
};
constexpr size_t kHdr = sizeof(RingHeader);
static_assert(kHdr % 8 == 0);
size_t pad8(size_t v) { return (v + 7) & ~size_t{7}; }

// Copies `n` bytes into/out of a ring at byte position `pos` (wrapping).
void ring_write(char* ring, size_t cap, uint64_t pos, const char* src, size_t n) {
  size_t off = pos & (cap - 1);
  size_t first = std::min(n, cap - off);
  std::memcpy(ring + off, src, first);
  if (n > first) std::memcpy(ring, src + first, n - first);
}
void ring_read(const char* ring, size_t cap, uint64_t pos, char* dst, size_t n) {
  size_t off = pos & (cap - 1);
  size_t first = std::min(n, cap - off);
  std::memcpy(dst, ring + off, first);
  if (n > first) std::memcpy(dst + first, ring, n - first);
}

struct Progress {
  bool header_done = false;
  size_t done = 0;  // payload bytes moved
  bool complete = false;
};

}  // namespace

ShmTransport::ShmTransport(ShmGroup* group, const WaitTuning* tuning)
    : group_(group), tuning_(tuning) {}

void ShmTransport::abort() {
  aborted_.store(true);
  if (ShmWord* w = sleeping_on_.load()) futex_wake_all(*w);
}

void ShmTransport::exchange(std::span<const SendReq> sends, std::span<const RecvReq> recvs,
                            Deadline deadline) {
  if (aborted_.load()) throw Error(ErrorCode::kAborted, "the shm transport was aborted");
  const int me = group_->rank();
  const size_t cap = group_->sizes().ring_bytes;
  std::vector<Progress> sp(sends.size()), rp(recvs.size());
  size_t pending = sends.size() + recvs.size();
  ShmWord& bell = group_->header(me).doorbell;
  WaitScope ws{deadline, &aborted_, group_, tuning_, &sleeping_on_};
  std::vector<int> busy_peer(group_->size());  // which request of a peer may progress now
  while (pending > 0) {
    uint64_t seen = bell.value.load(std::memory_order_acquire);
    bool progressed = false;
    // Sends: per peer only the oldest unfinished request moves (FIFO per direction).
    std::fill(busy_peer.begin(), busy_peer.end(), 0);
    for (size_t i = 0; i < sends.size(); ++i) {
      const SendReq& s = sends[i];
      Progress& p = sp[i];
      if (p.complete || busy_peer[s.peer]++) continue;
      RingCtl& c = group_->ring_ctl(me, s.peer);
      char* ring = group_->ring(me, s.peer);
      uint64_t head = c.head.load(std::memory_order_relaxed);
      uint64_t tail = c.tail.load(std::memory_order_acquire);
      size_t space = cap - static_cast<size_t>(head - tail);
      bool moved = false;
      if (!p.header_done) {
        if (space < kHdr) continue;
        const RingHeader h{s.bytes, call_};
        ring_write(ring, cap, head, reinterpret_cast<const char*>(&h), kHdr);
        head += kHdr;
        space -= kHdr;
        p.header_done = moved = true;
      }
      size_t n = std::min(space & ~size_t{7}, pad8(s.bytes) - p.done);
      if (n == 0 && !moved) continue;
      size_t real = p.done < s.bytes ? std::min(n, s.bytes - p.done) : 0;
      if (real) ring_write(ring, cap, head, static_cast<const char*>(s.data) + p.done, real);
      head += n;
      p.done += n;
      c.head.store(head, std::memory_order_release);
      ring_bell(group_->header(s.peer).doorbell);
      progressed = true;
      if (p.done >= pad8(s.bytes)) {
        p.complete = true;
        --pending;
      }
    }
    std::fill(busy_peer.begin(), busy_peer.end(), 0);
    for (size_t i = 0; i < recvs.size(); ++i) {
      const RecvReq& r = recvs[i];
      Progress& p = rp[i];
      if (p.complete || busy_peer[r.peer]++) continue;
      RingCtl& c = group_->ring_ctl(r.peer, me);
      const char* ring = group_->ring(r.peer, me);
      uint64_t tail = c.tail.load(std::memory_order_relaxed);
      uint64_t head = c.head.load(std::memory_order_acquire);
      size_t avail = static_cast<size_t>(head - tail);
      bool moved = false;
      if (!p.header_done) {
        if (avail < kHdr) continue;
        RingHeader h;
        ring_read(ring, cap, tail, reinterpret_cast<char*>(&h), kHdr);
        if (!fingerprints_match(h.call, call_))
          throw Error(ErrorCode::kInvalidArgument, mismatch_message(me, call_, r.peer, h.call));
        const uint64_t sz = h.bytes;
        if (sz != r.bytes)
          throw Error(ErrorCode::kInvalidArgument,
                      "rank " + std::to_string(r.peer) + " sent a message of " +
                          std::to_string(sz) + " bytes but the matching receive on rank " +
                          std::to_string(me) + " expects " + std::to_string(r.bytes) + " bytes");
        tail += kHdr;
        avail -= kHdr;
        p.header_done = moved = true;
      }
      size_t n = std::min(avail, pad8(r.bytes) - p.done);
      if (n == 0 && !moved) continue;
      size_t real = p.done < r.bytes ? std::min(n, r.bytes - p.done) : 0;
      if (real) ring_read(ring, cap, tail, static_cast<char*>(r.data) + p.done, real);
      tail += n;
      p.done += n;
      c.tail.store(tail, std::memory_order_release);
      ring_bell(group_->header(r.peer).doorbell);
      progressed = true;
      if (p.done >= pad8(r.bytes)) {
        p.complete = true;
        --pending;
      }
    }
    if (pending == 0 || progressed) continue;
    std::vector<int> peers;
    for (size_t i = 0; i < sends.size(); ++i)
      if (!sp[i].complete) peers.push_back(sends[i].peer);
    for (size_t i = 0; i < recvs.size(); ++i)
      if (!rp[i].complete) peers.push_back(recvs[i].peer);
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    shm_wait([&] { return bell.value.load(std::memory_order_acquire) != seen; }, bell, peers,
             "a message (send/recv)", ws);
  }
}

}  // namespace commx
