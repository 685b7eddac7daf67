// send/recv and batch p2p on every backend present: a ring of sends and receives, pairwise
// exchanges, and a batch exchanging uneven pieces with every peer at once, for every dtype the
// backend claims, empty, one and odd sizes, sync and async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class P2P : public ConformanceTest {};

// Data rank `from` sends rank `to` in case `seed`.
Buf message(uint64_t seed, int from, int to, size_t count, DataType t) {
  return gen(seed * 64 + to, from, count, t, ReduceKind::kSum);
}

TEST_P(P2P, SendRecvAndBatch) {
  run_world(GetParam(), [](Rank& r) {
    const int n = r.size, me = r.rank;
    if (n < 2) return;  // a rank has no peer
    uint64_t seed = 1;
    for (DataType t : r.dtypes()) {
      if (!r.claims(OpType::kSend, t) || !r.claims(OpType::kRecv, t)) {
        Buffer b = r.blank(1, t);
        r.expect_unsupported(
            [&] {
              if (me % 2 == 0)
                r.comm().send(b.tensor(), (me + 1) % n);
              else
                r.comm().recv(b.tensor(), (me + n - 1) % n);
            },
            describe("send/recv", t, 1));
        continue;
      }
      for (size_t count : case_counts()) {
        ++seed;
        const bool async = seed % 2 == 0;
        // A ring: even ranks send first, odd ranks receive first.
        const int next = (me + 1) % n, prev = (me + n - 1) % n;
        Buffer out = r.upload(message(seed, me, next, count, t), count, t);
        Buffer in = r.blank(count, t);
        if (me % 2 == 0) {
          r.comm().send(out.tensor(), next, async).wait();
          r.comm().recv(in.tensor(), prev, async).wait();
        } else {
          r.comm().recv(in.tensor(), prev, async).wait();
          r.comm().send(out.tensor(), next, async).wait();
        }
        r.expect(message(seed, prev, me, count, t), in,
                 describe("send/recv ring", t, count) + " from " + std::to_string(prev));
        // A batch with every peer: rank p sends count + p elements to each peer.
        if (!r.claims(OpType::kBatchP2P, t)) continue;
        ++seed;
        std::vector<Buffer> sends, recvs;
        auto batch = r.comm().batch_op_create();
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          sends.push_back(r.upload(message(seed, me, p, count + me, t), count + me, t));
          recvs.push_back(r.blank(count + p, t));
          batch.send(sends.back().tensor(), p).recv(recvs.back().tensor(), p);
        }
        batch.issue(async).wait();
        for (int p = 0, i = 0; p < n; ++p) {
          if (p == me) continue;
          r.expect(message(seed, p, me, count + p, t), recvs[i++],
                   describe("batch p2p", t, count + p) + " from " + std::to_string(p));
        }
      }
    }
  });
}

COMMX_CONFORMANCE_WORLDS(P2P);

}  // namespace
