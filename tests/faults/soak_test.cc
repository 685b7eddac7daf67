// A seeded soak: rounds of random collectives (op, size, root, reduction) on 2-6 forked ranks over
// shared memory or TCP, each round with at most one random fault at a random op: a rank killed
// before or during the op, a rank stopped (SIGSTOP), a rank that issues another call (mismatch),
// or a rank that passes a bad argument and leaves. Every rank checks every result against its
// own reference. What must hold: every outcome is a right result or a clear commx error on every
// rank, never a wrong result or a hang; a survivor's error blames the faulty rank only; without a
// fault every op succeeds. COMMX_FAULT_SOAK_ROUNDS (default 48) and COMMX_FAULT_SOAK_SEED set
// the length and the first seed; the matrix of outcomes is printed at the end.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "faults/fault_world.h"

using namespace commx;
using namespace commx::testing;
using namespace std::chrono_literals;

namespace {

enum class Fault { kNone, kKillBefore, kKillDuring, kStall, kMismatch, kBadInput };
const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "none";
    case Fault::kKillBefore:
      return "kill-before";
    case Fault::kKillDuring:
      return "kill-during";
    case Fault::kStall:
      return "stall";
    case Fault::kMismatch:
      return "mismatch";
    case Fault::kBadInput:
      return "bad-input";
  }
  return "?";
}

enum class Kind {
  kAllReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kReduce,
  kGather,
  kBarrier
};
constexpr int kNumKinds = 8;

struct OpPlan {
  Kind kind;
  int64_t count;  // per-rank piece
  int root;
  ReduceKind red;
};

struct Round {
  uint64_t seed;
  int n;
  std::string transport;
  std::vector<OpPlan> ops;
  Fault fault;
  int victim;
  int at;  // the op the fault hits
};

Round make_round(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto pick = [&](int lo, int hi) { return static_cast<int>(lo + g() % (hi - lo + 1)); };
  Round r;
  r.seed = seed;
  r.n = pick(2, 6);
  r.transport = pick(0, 1) ? "tcp" : "shm";
  const int nops = 4;
  for (int i = 0; i < nops; ++i) {
    OpPlan o;
    o.kind = static_cast<Kind>(pick(0, kNumKinds - 1));
    // Mostly small; now and then large enough for several slot rounds or the single-copy paths.
    o.count = pick(0, 9) == 0 ? pick(200000, 700000) : pick(1, 300);
    o.root = pick(0, r.n - 1);
    const ReduceKind reds[] = {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kMin};
    o.red = reds[pick(0, 2)];
    r.ops.push_back(o);
  }
  const Fault faults[] = {Fault::kNone,  Fault::kKillBefore, Fault::kKillDuring,
                          Fault::kStall, Fault::kMismatch,   Fault::kBadInput};
  r.fault = faults[pick(0, 5)];
  r.victim = pick(0, r.n - 1);
  r.at = pick(0, nops - 1);
  return r;
}

std::string describe(const Round& r) {
  return "seed " + std::to_string(r.seed) + ": " + std::to_string(r.n) + " ranks over " +
         r.transport + ", fault " + fault_name(r.fault) + " on rank " + std::to_string(r.victim) +
         " at op " + std::to_string(r.at);
}

// Issues op `k` of the round on this rank (with `plan`, which a mismatching rank alters) and
// checks its result; returns "" when right, else what is wrong.
std::string run_op(Comm& comm, const Round& rd, int k, const OpPlan& plan, bool async_kill) {
  const int n = comm.size(), me = comm.rank();
  const int64_t c = plan.count;
  auto val = [&](int r, int64_t i) { return fault_value(rd.seed, k, r, i); };
  OpOptions o;
  // Short only from the stall on: ops before it must succeed even on a loaded machine.
  o.timeout = rd.fault == Fault::kStall && k >= rd.at ? 1500ms : 20s;
  std::vector<float> in, out;
  auto finish = [&](Work w) {
    if (async_kill) {
      std::this_thread::sleep_for(1ms);
      raise(SIGKILL);
    }
    w.wait();
  };
  auto expect = [&](const std::vector<float>& got, const std::function<float(int64_t)>& want,
                    const char* what) -> std::string {
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want(static_cast<int64_t>(i)))
        return std::string("WRONG ") + what + " element " + std::to_string(i) + ": " +
               std::to_string(got[i]) + " != " + std::to_string(want(static_cast<int64_t>(i)));
    return "";
  };
  auto reduce_all = [&](int64_t i, auto idx) {
    float a = val(0, idx(0, i));
    for (int r = 1; r < n; ++r) {
      float b = val(r, idx(r, i));
      a = plan.red == ReduceKind::kSum   ? a + b
          : plan.red == ReduceKind::kMax ? std::max(a, b)
                                         : std::min(a, b);
    }
    return a;
  };
  switch (plan.kind) {
    case Kind::kAllReduce: {
      in.resize(c);
      for (int64_t i = 0; i < c; ++i) in[i] = val(me, i);
      finish(comm.all_reduce(make_tensor(in.data(), c), plan.red, true, o));
      return expect(
          in, [&](int64_t i) { return reduce_all(i, [](int, int64_t j) { return j; }); },
          "all_reduce");
    }
    case Kind::kBroadcast: {
      in.resize(c);
      for (int64_t i = 0; i < c; ++i) in[i] = val(me, i);
      finish(comm.broadcast(make_tensor(in.data(), c), plan.root, true, o));
      return expect(
          in, [&](int64_t i) { return val(plan.root, i); }, "broadcast");
    }
    case Kind::kAllGather: {
      in.resize(c);
      out.assign(c * n, -99.0f);
      for (int64_t i = 0; i < c; ++i) in[i] = val(me, i);
      finish(comm.all_gather_single(make_tensor(out.data(), c * n), make_tensor(in.data(), c), true,
                                    o));
      return expect(
          out, [&](int64_t i) { return val(static_cast<int>(i / c), i % c); }, "all_gather");
    }
    case Kind::kReduceScatter: {
      in.resize(c * n);
      out.assign(c, -99.0f);
      for (int64_t i = 0; i < c * n; ++i) in[i] = val(me, i);
      finish(comm.reduce_scatter_single(make_tensor(out.data(), c), make_tensor(in.data(), c * n),
                                        plan.red, true, o));
      return expect(
          out, [&](int64_t i) { return reduce_all(i, [&](int, int64_t j) { return me * c + j; }); },
          "reduce_scatter");
    }
    case Kind::kAllToAll: {
      in.resize(c * n);
      out.assign(c * n, -99.0f);
      for (int64_t i = 0; i < c * n; ++i) in[i] = val(me, i);
      finish(comm.all_to_all_single(make_tensor(out.data(), c * n), make_tensor(in.data(), c * n),
                                    true, o));
      return expect(
          out, [&](int64_t i) { return val(static_cast<int>(i / c), me * c + i % c); },
          "all_to_all");
    }
    case Kind::kReduce: {
      in.resize(c);
      for (int64_t i = 0; i < c; ++i) in[i] = val(me, i);
      finish(comm.reduce(make_tensor(in.data(), c), plan.root, plan.red, true, o));
      if (me != plan.root)
        return expect(
            in, [&](int64_t i) { return val(me, i); }, "reduce input");
      return expect(
          in, [&](int64_t i) { return reduce_all(i, [](int, int64_t j) { return j; }); }, "reduce");
    }
    case Kind::kGather: {
      in.resize(c);
      out.assign(c * n, -99.0f);  // read on the root only
      for (int64_t i = 0; i < c; ++i) in[i] = val(me, i);
      finish(comm.gather_single(make_tensor(out.data(), c * n), make_tensor(in.data(), c),
                                plan.root, true, o));
      if (me != plan.root) return "";
      return expect(
          out, [&](int64_t i) { return val(static_cast<int>(i / c), i % c); }, "gather");
    }
    case Kind::kBarrier:
      finish(comm.barrier(true, o));
      return "";
  }
  return "";
}

// What a mismatching rank calls instead of `p`.
OpPlan mismatched(const OpPlan& p, int n) {
  OpPlan m = p;
  switch (p.kind) {
    case Kind::kAllReduce:
    case Kind::kReduceScatter:
      m.red = p.red == ReduceKind::kSum ? ReduceKind::kMax : ReduceKind::kSum;
      break;
    case Kind::kBroadcast:
    case Kind::kReduce:
    case Kind::kGather:
      m.root = (p.root + 1) % n;
      break;
    case Kind::kAllGather:
      m.kind = Kind::kAllToAll;
      break;
    case Kind::kAllToAll:
      m.count = p.count + 1;
      break;
    case Kind::kBarrier:
      m.kind = Kind::kAllReduce;
      break;
  }
  return m;
}

// One rank's run of the round: "ok", "error <code> <message>", "WRONG ..." or "bad-input-left".
std::string run_rank(const Round& rd, int me, std::shared_ptr<Store> store) {
  CommOptions co;
  co.store = store;
  co.rank = me;
  co.size = rd.n;
  co.hints["transport"] = rd.transport;
  co.timeout = 20s;
  auto comm = Comm::create("cpu", Device::cpu(), "soak", co);
  const bool victim = me == rd.victim;
  for (int k = 0; k < static_cast<int>(rd.ops.size()); ++k) {
    OpPlan plan = rd.ops[k];
    bool async_kill = false;
    if (victim && k == rd.at) {
      switch (rd.fault) {
        case Fault::kKillBefore:
          raise(SIGKILL);
          break;
        case Fault::kKillDuring:
          async_kill = true;
          break;
        case Fault::kStall:
          raise(SIGSTOP);  // the test kills it once the others are done
          break;
        case Fault::kMismatch:
          plan = mismatched(plan, rd.n);
          break;
        case Fault::kBadInput:
          try {
            std::vector<float> v(4);
            comm->broadcast(make_tensor(v.data(), 4), rd.n + 3);
          } catch (const Error& e) {
            if (e.code() == ErrorCode::kInvalidArgument) return "bad-input-left";
            return std::string("error ") + error_code_name(e.code()) + " " + e.what();
          }
          return "WRONG a bad root was accepted";
        default:
          break;
      }
    }
    try {
      std::string wrong = run_op(*comm, rd, k, plan, async_kill);
      if (!wrong.empty()) return wrong + " (op " + std::to_string(k) + ")";
    } catch (const Error& e) {
      return std::string("error ") + error_code_name(e.code()) + " " + e.what();
    } catch (const std::exception& e) {
      return std::string("WRONG not a commx error: ") + e.what();
    }
  }
  // A last barrier: after any fault, some op of the round must fail on every rank.
  try {
    OpOptions o;
    o.timeout = rd.fault == Fault::kStall ? 1500ms : 20s;
    comm->barrier(false, o);
  } catch (const Error& e) {
    return std::string("error ") + error_code_name(e.code()) + " " + e.what();
  }
  return "ok";
}

struct Tally {
  std::map<std::string, int> cases, ok, failures;
};

TEST(FaultSoak, RandomCollectivesWithRandomFaults) {
  const char* env_rounds = std::getenv("COMMX_FAULT_SOAK_ROUNDS");
  const char* env_seed = std::getenv("COMMX_FAULT_SOAK_SEED");
  const int rounds = env_rounds ? std::atoi(env_rounds) : 48;
  const uint64_t first = env_seed ? std::strtoull(env_seed, nullptr, 10) : 1;
  Tally t;
  for (int i = 0; i < rounds; ++i) {
    const Round rd = make_round(first + static_cast<uint64_t>(i));
    std::set<int> may_stall;
    if (rd.fault == Fault::kStall) may_stall.insert(rd.victim);
    auto out = run_fault_world(
        rd.n, [&rd](int r, std::shared_ptr<Store> s) { return run_rank(rd, r, std::move(s)); },
        may_stall, 90s);
    const std::string key = std::string(fault_name(rd.fault)) + "/" + rd.transport;
    t.cases[key]++;
    std::vector<std::string> problems;
    const bool killed = rd.fault == Fault::kKillBefore || rd.fault == Fault::kKillDuring;
    for (int r = 0; r < rd.n; ++r) {
      const RankOutcome& o = out[r];
      const std::string who = "rank " + std::to_string(r) + ": ";
      if (o.status == -1) {
        problems.push_back(who + "HANG");
        continue;
      }
      const bool is_victim = r == rd.victim;
      if (is_victim && (killed || rd.fault == Fault::kStall)) continue;  // it died or was stopped
      if (WIFSIGNALED(o.status) && !(is_victim && killed)) {
        problems.push_back(who + "crashed with signal " + std::to_string(WTERMSIG(o.status)));
        continue;
      }
      const std::string& l = o.line;
      if (l.rfind("WRONG", 0) == 0 || l.rfind("uncaught", 0) == 0) {
        problems.push_back(who + "WRONG: " + l);
        continue;
      }
      if (rd.fault == Fault::kNone) {
        if (l != "ok") problems.push_back(who + "error without a fault: " + l);
        continue;
      }
      if (is_victim && rd.fault == Fault::kBadInput) {
        if (l != "bad-input-left") problems.push_back(who + "bad input: " + l);
        continue;
      }
      // With a fault every rank must end with an error (the last op of a round waits for all):
      // success would mean an op completed without a rank it needs, or with a mismatched one.
      if (l == "ok") {
        problems.push_back(who + "no error despite the fault");
        continue;
      }
      if (rd.fault == Fault::kMismatch) {
        // Every rank: its own InvalidArgument naming both calls, or (TCP, a rank the mismatch
        // does not involve directly) one from a peer that gave up because of it.
        if (l.rfind("error InvalidArgument", 0) != 0 ||
            (l.find("did not match") == std::string::npos &&
             l.find("do not match") == std::string::npos))
          problems.push_back(who + "mismatch not reported as such: " + l);
        continue;
      }
      // Kills, stalls and a rank that left: the error blames that rank and no other.
      std::set<int> blamed = blamed_ranks(l);
      if (blamed != std::set<int>{rd.victim})
        problems.push_back(who + "blames the wrong rank(s): " + l);
    }
    if (problems.empty()) {
      t.ok[key]++;
    } else {
      for (const auto& p : problems) {
        std::string kind = p.find("HANG") != std::string::npos     ? "hang"
                           : p.find("WRONG") != std::string::npos  ? "wrong result"
                           : p.find("blames") != std::string::npos ? "wrong rank blamed"
                                                                   : "other";
        t.failures[kind]++;
      }
      ADD_FAILURE() << describe(rd) << "\n  " << [&] {
        std::string s;
        for (const auto& p : problems) s += p + "\n  ";
        return s;
      }();
    }
  }
  std::string matrix = "fault soak matrix (rounds: case -> ok/tried):\n";
  for (auto& [k, v] : t.cases)
    matrix += "  " + k + ": " + std::to_string(t.ok[k]) + "/" + std::to_string(v) + "\n";
  for (auto& [k, v] : t.failures) matrix += "  failures, " + k + ": " + std::to_string(v) + "\n";
  std::printf("%s", matrix.c_str());
}

}  // namespace
