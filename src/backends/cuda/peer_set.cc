// make_peer_set (see peer_set.h). Layer: backends (cuda).
#include "cuda/peer_set.h"

#include <chrono>

namespace commx::cuda {

PeerSet make_peer_set(const PeerMemory* pm, int rank, int world, const Tuning& t,
                      DevState* state, HostCtl* ctl, const OpDesc& op) {
  PeerSet ps{};
  for (int r = 0; r < world && pm; ++r) {
    ps.data[r] = pm->base(r) + kSignalBytes;
    ps.sig[r] = reinterpret_cast<unsigned long long*>(pm->base(r));
  }
  ps.rank = rank;
  ps.world = world;
  ps.half_bytes = t.buffer_bytes;
  ps.poll_sleep_ns = t.poll_sleep_ns;
  ps.state = state;
  ps.ctl = ctl;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(op.timeout).count();
  ps.timeout_ns = ns > 0 ? static_cast<unsigned long long>(ns) : ~0ull;
  ps.seq = op.seq;
  ps.op = static_cast<int>(op.type);
  return ps;
}

}  // namespace commx::cuda
