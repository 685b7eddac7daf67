// Ranks that disagree about a call (another op, root, reduction, dtype or count) over shared
// memory and TCP: every rank that sees the other call raises InvalidArgument naming both calls
// before any data is combined (buffers keep their input), and the comm is failed afterwards, so
// no later op can pair with the wrong one.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cpu/harness.h"

using namespace commx;
using namespace commx::testing;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
std::string f32() { return dtype_name(DataType::kFloat32); }

// One rank's side of a mismatched op: issues the call on `comm` with `buf` (filled with the rank's
// input); `call` is how the error must describe it ("broadcast #2 (root 1, 8 x float32)").
struct Side {
  std::function<void(Comm&, std::vector<float>&)> issue;
  std::string call;
  bool in_place = true;  // the op reads and writes one buffer (unchanged when it fails)
  int root = -1;         // a broadcast's root as this rank believes it
};

struct Case {
  std::string name;
  std::string transport;
  int ranks;
  int64_t count;                       // elements of the op's per-rank piece
  std::function<Side(int rank)> side;  // what rank r calls
  bool wide = false;                   // buffers of count x ranks (all_gather, all_to_all)
};

// Runs the case: one matched all_reduce (proves the comm works), then the mismatched op, then a
// barrier that must fail. A rank whose call differs from a peer's must name both calls; every
// rank must fail (a rank the mismatch does not involve directly hears of it from one that gave
// up, or at the latest from the barrier after it).
void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  auto res = run_forked(
      c.ranks,
      [&c](RankEnv& env) {
        CommOptions co;
        co.hints["transport"] = c.transport;
        co.timeout = 20s;  // a hang becomes a Timeout, which fails the checks below
        auto comm = env.comm("mismatch-" + c.name, co);
        std::vector<float> warm(4, 1.0f);
        comm->all_reduce(make_tensor(warm.data(), 4), ReduceOp::SUM);
        env.check(warm[0] == static_cast<float>(env.size), "warm-up all_reduce");

        Side me = c.side(env.rank);
        std::vector<float> buf(static_cast<size_t>(c.count) * (c.wide ? env.size : 1), 0.0f);
        for (size_t i = 0; i < buf.size(); ++i)
          buf[i] = static_cast<float>(env.rank * 1000 + i % 97);
        const std::vector<float> input = buf;
        std::string msg;
        ErrorCode code = ErrorCode::kInternal;
        try {
          me.issue(*comm, buf);
        } catch (const Error& e) {
          msg = e.what();
          code = e.code();
        }
        // Ranks whose call matches every peer it talks to may finish the op (their result is right:
        // nobody combined mismatched data); they must fail at the barrier.
        bool direct = false;
        for (int p = 0; p < env.size; ++p)
          if (c.side(p).call != me.call) direct = true;
        if (msg.empty()) {
          // Over shared memory a broadcast root does not wait for its peers' calls: it learns of
          // the mismatch at its next op (below), its peers before reading its data.
          const bool deferred_root = c.transport == "shm" && me.root == env.rank;
          env.check(!direct || c.transport == "tcp" || deferred_root,
                    "the mismatched op succeeded on a rank whose peers called something else");
        } else {
          env.check(code == ErrorCode::kInvalidArgument, "expected InvalidArgument, got: " + msg);
          env.check(has(msg, "do not match") || has(msg, "did not match"),
                    "the error says the calls do not match: " + msg);
          env.check(has(msg, "called " + me.call) || has(msg, "this rank called " + me.call),
                    "the error names this rank's call '" + me.call + "': " + msg);
          // The peer's call as issued: the mismatched one, or (TCP, a rank that did not talk to the
          // mismatching one in that op) the next one it issued.
          env.check(has(msg, " but rank ") || has(msg, "gave up"),
                    "the error names the peer's call as issued: " + msg);
          // Nothing was combined: a failed op leaves this rank's buffer as it was.
          if (me.in_place)
            env.check(buf == input, "the buffer of a failed mismatched op is unchanged");
        }
        std::string later = expect_error(
            env, ErrorCode::kInvalidArgument, [&] { comm->barrier(); }, "an op after the mismatch");
        if (msg.empty())  // this rank learns of the mismatch now, from a peer or by itself
          env.check(has(later, "match"), "the op after the mismatch names it: " + later);
        else
          env.check(has(later, "unusable"), "the comm is failed after the mismatch: " + later);
      },
      90);
  EXPECT_TRUE(res.all_ok()) << c.name << ": " << res.describe();
}

Side broadcast(int64_t count, int root, int seq = 2) {
  return {[=](Comm& c, std::vector<float>& b) { c.broadcast(make_tensor(b.data(), count), root); },
          "broadcast #" + std::to_string(seq) + " (root " + std::to_string(root) + ", " +
              std::to_string(count) + " x " + f32() + ")",
          true, root};
}
Side all_reduce(int64_t count, ReduceOp op, int seq = 2) {
  return {[=](Comm& c, std::vector<float>& b) { c.all_reduce(make_tensor(b.data(), count), op); },
          "all_reduce #" + std::to_string(seq) + " (" + reduce_kind_name(op.kind) + ", " +
              std::to_string(count) + " x " + f32() + ")"};
}
Side all_gather_single(int64_t count, int n) {
  return {[=](Comm& c, std::vector<float>& b) {
            static std::vector<float> in;
            in.assign(b.begin(), b.begin() + count);
            c.all_gather_single(make_tensor(b.data(), count * n), make_tensor(in.data(), count));
          },
          "all_gather_single #2 (" + std::to_string(count) + " x " + f32() + ")", false};
}
Side all_to_all_single(int64_t count, int n) {
  return {[=](Comm& c, std::vector<float>& b) {
            static std::vector<float> in;
            in.assign(b.begin(), b.end());
            c.all_to_all_single(make_tensor(b.data(), count * n),
                                make_tensor(in.data(), count * n));
          },
          "all_to_all_single #2 (" + std::to_string(count * n) + " x " + f32() + ")", false};
}
Side reduce(int64_t count, int root, ReduceOp op) {
  return {[=](Comm& c, std::vector<float>& b) { c.reduce(make_tensor(b.data(), count), root, op); },
          "reduce #2 (root " + std::to_string(root) + ", " + reduce_kind_name(op.kind) + ", " +
              std::to_string(count) + " x " + f32() + ")"};
}

// The silent cases: each returned success (or wrong data) on some rank before fingerprints.
TEST(Mismatch, TcpBroadcastAgainstAllReduce) {
  run_case({"tcp-bcast-vs-ar", "tcp", 2, 16,
            [](int r) { return r == 0 ? broadcast(16, 1) : all_reduce(16, ReduceOp::SUM); }});
}

TEST(Mismatch, ShmBroadcastRootsDiffer) {
  // 32 B (one slot round), 64 KiB and 64 MiB (the single-copy path where it is available).
  for (int64_t count : {int64_t{8}, int64_t{16} << 10, int64_t{16} << 20})
    run_case({"shm-bcast-roots-" + std::to_string(count * 4), "shm", 3, count,
              [count](int r) { return broadcast(count, r == 0 ? 0 : 1); }});
}

TEST(Mismatch, SumAgainstMax) {
  for (const char* t : {"shm", "tcp"})
    run_case({std::string(t) + "-sum-vs-max", t, 2, 64,
              [](int r) { return all_reduce(64, r == 0 ? ReduceOp::SUM : ReduceOp::MAX); }});
}

TEST(Mismatch, TcpAllGatherAgainstAllToAll) {
  run_case({"tcp-ag-vs-a2a", "tcp", 2, 8,
            [](int r) { return r == 0 ? all_gather_single(8, 2) : all_to_all_single(8, 2); },
            true});
}

// Rooted ops over TCP: a rank that only sends (a reduce leaf, a broadcast root) checks its
// receivers' calls too.
TEST(Mismatch, TcpRootsDiffer) {
  run_case({"tcp-bcast-roots", "tcp", 2, 8, [](int r) { return broadcast(8, r); }});
  run_case({"tcp-reduce-roots", "tcp", 3, 8,
            [](int r) { return reduce(8, r == 2 ? 1 : 0, ReduceOp::SUM); }});
}

TEST(Mismatch, CountsAndDtypes) {
  for (const char* t : {"shm", "tcp"}) {
    run_case({std::string(t) + "-counts", t, 2, 16,
              [](int r) { return all_reduce(r == 0 ? 10 : 12, ReduceOp::SUM); }});
    run_case({std::string(t) + "-dtypes", t, 2, 8, [](int r) {
                if (r == 0) return all_reduce(8, ReduceOp::SUM);
                return Side{
                    [](Comm& c, std::vector<float>& b) {
                      c.all_reduce(Tensor(b.data(), 8, DataType::kInt32), ReduceOp::SUM);
                    },
                    "all_reduce #2 (sum, 8 x " + std::string(dtype_name(DataType::kInt32)) + ")"};
              }});
  }
}

// p2p against a collective: over TCP the receive of a p2p op sees a collective's frame; over
// shared memory, where the two travel apart, each rank sees the other sit in an op of the other
// kind (after a second, far below the 20 s timeout).
TEST(Mismatch, RecvAgainstCollective) {
  for (const char* t : {"tcp", "shm"}) {
    run_case({std::string(t) + "-recv-vs-ar", t, 2, 8, [](int r) {
                if (r == 0) return all_reduce(8, ReduceOp::SUM);
                return Side{
                    [](Comm& c, std::vector<float>& b) { c.recv(make_tensor(b.data(), 8), 0); },
                    "recv #2"};
              }});
  }
}

// The error names the calls as issued: PREMUL_SUM against SUM, and one rank a collective behind.
TEST(Mismatch, ShmSendAgainstCollectiveIsNoTimeout) {
  // A send that fits the ring completes alone; the collective on the other rank must still not
  // wait for its timeout: it names the send.
  auto res = run_forked(2, [](RankEnv& env) {
    CommOptions co;
    co.hints["transport"] = "shm";
    co.timeout = 20s;
    auto comm = env.comm("shm-send-vs-ar", co);
    std::vector<float> v(1 << 20, 1.0f);  // 4 MiB: more than a ring holds, so the send waits
    auto t0 = std::chrono::steady_clock::now();
    std::string msg = expect_error(
        env, ErrorCode::kInvalidArgument,
        [&] {
          if (env.rank == 0)
            comm->send(make_tensor(v.data(), v.size()), 1);
          else
            comm->all_reduce(make_tensor(v.data(), v.size()), ReduceOp::SUM);
        },
        "send against all_reduce");
    env.check(std::chrono::steady_clock::now() - t0 < 10s, "named before the timeout");
    env.check(has(msg, "do not match") && has(msg, "send #1") && has(msg, "all_reduce #1"),
              "both calls named: " + msg);
    // Stay until both ranks saw it (a rank that exits is a dead peer to the other).
    if (env.store->add("both-named", 1) == 2) env.store->set("both-named-done", Bytes{1});
    env.store->wait({"both-named-done"}, 20s);
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Mismatch, MessagesDescribeEachCall) {
  auto res = run_forked(2, [](RankEnv& env) {
    CommOptions co;
    co.hints["transport"] = "tcp";
    co.timeout = 20s;
    auto comm = env.comm("describe", co);
    std::vector<float> v(6, 1.0f);
    ReduceOp op = env.rank == 0 ? ReduceOp::premul_sum(0.5) : ReduceOp::SUM;
    std::string msg = expect_error(
        env, ErrorCode::kInvalidArgument, [&] { comm->all_reduce(make_tensor(v.data(), 6), op); },
        "premul against sum");
    const std::string mine = env.rank == 0 ? "all_reduce #1 (premulsum, 6 x " + f32() + ")"
                                           : "all_reduce #1 (sum, 6 x " + f32() + ")";
    const std::string theirs = env.rank == 0 ? "all_reduce #1 (sum, 6 x " + f32() + ")"
                                             : "all_reduce #1 (premulsum, 6 x " + f32() + ")";
    env.check(has(msg, "rank " + std::to_string(env.rank) + " called " + mine + " but rank " +
                           std::to_string(1 - env.rank) + " called " + theirs),
              "both calls as issued: " + msg);
    env.check(v == std::vector<float>(6, 1.0f), "buffer unchanged");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
