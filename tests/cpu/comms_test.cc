// Several comms at once: splits (disjoint groups with the same name, a reordered subset), ops
// interleaved across comms, async ops in flight on two comms together, comms of one name on
// group stores that only some ranks used, and the transport hints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backends/cpu/cpu_backend.h"
#include "cpu/cases.h"
#include "cpu/harness.h"

using namespace commx;
using namespace commx::testing;

namespace {

// Sum over `ranks` of (r + 1) * (i + 1), the value all_reduce of fill(r) gives at element i.
std::vector<float> expect_sum(const std::vector<int>& world_ranks, size_t count) {
  std::vector<float> e(count, 0.0f);
  for (int r : world_ranks)
    for (size_t i = 0; i < count; ++i)
      e[i] += static_cast<float>((r + 1) * static_cast<int>(i % 100 + 1));
  return e;
}
std::vector<float> fill(int world_rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>((world_rank + 1) * static_cast<int>(i % 100 + 1));
  return v;
}

TEST(Comms, SplitsAndInterleavedOps) {
  auto res = run_forked(6, [](RankEnv& env) {
    const int me = env.rank;
    auto world = env.comm("world");
    // Two disjoint halves under the same name, and a reordered subset.
    std::vector<int> half = me < 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4, 5};
    auto h = world->split(half, "half");
    std::vector<int> odd = {5, 3, 1};
    auto o = (me % 2 == 1) ? world->split(odd, "odd") : world->split({}, "odd");
    env.check(h && h->size() == 3 && h->rank() == me % 3, "half split rank/size");
    env.check((me % 2 == 1) == (o != nullptr), "odd split membership");
    if (o)
      env.check(o->rank() == (me == 5   ? 0
                              : me == 3 ? 1
                                        : 2),
                "odd split rank follows the list order");
    for (size_t count : {size_t{5}, size_t{3000}, size_t{300000}}) {
      // Async on two comms at once, then sync on the world in between.
      auto a = fill(me, count), b = fill(me, count), c = fill(me, count);
      Work wa =
          h->all_reduce(make_tensor(a.data(), static_cast<int64_t>(count)), ReduceOp::SUM, true);
      Work wb;
      if (o)
        wb = o->all_reduce(make_tensor(b.data(), static_cast<int64_t>(count)), ReduceOp::SUM, true);
      world->all_reduce(make_tensor(c.data(), static_cast<int64_t>(count)), ReduceOp::SUM);
      wa.wait();
      wb.wait();
      env.check(a == expect_sum(half, count), "half all_reduce count " + std::to_string(count));
      if (o)
        env.check(b == expect_sum(odd, count), "odd all_reduce count " + std::to_string(count));
      env.check(c == expect_sum({0, 1, 2, 3, 4, 5}, count),
                "world all_reduce count " + std::to_string(count));
    }
    // A broadcast on the split from its rank 1 (world rank 3 for the odd comm).
    if (o) {
      std::vector<int> v(10, o->rank() == 1 ? 42 : 0);
      o->broadcast(make_tensor(v.data(), 10), 1);
      env.check(v == std::vector<int>(10, 42), "broadcast on a split");
    }
    world->barrier();
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Each group has its own store (as torch gives each process group a prefix store) and its comms
// share one name: a rank that skipped a group's comm still agrees with the others on the next
// group's, and a name reused on one store by the same members gets a fresh comm.
TEST(Comms, NameReusedOnGroupStoresSomeRanksSkipped) {
  auto res = run_forked(3, [](RankEnv& env) {
    CommOptions short_wait;
    short_wait.timeout = std::chrono::milliseconds(5000);
    auto group_comm = [&](const std::string& group, const std::vector<int>& members) {
      CommOptions o = short_wait;
      o.store = make_prefix_store(group, env.store);
      o.rank = static_cast<int>(std::find(members.begin(), members.end(), env.rank) - members.begin());
      o.size = static_cast<int>(members.size());
      return Comm::create("cpu", Device::cpu(), "pg_cpu", o);
    };
    auto check_sum = [&](Comm& c, const std::vector<int>& members, const std::string& what) {
      std::vector<float> v = fill(env.rank, 64);
      c.all_reduce(make_tensor(v.data(), v.size()), ReduceOp::SUM);
      env.check(v == expect_sum(members, 64), what + ": wrong sum");
    };
    if (env.rank == 0) {  // a group only rank 0 uses
      auto solo = group_comm("g1", {0});
      check_sum(*solo, {0}, "solo group");
    }
    if (env.rank != 2) {
      auto pair = group_comm("g2", {0, 1});
      check_sum(*pair, {0, 1}, "pair after a group rank 1 skipped");
    }
    for (int round = 0; round < 2; ++round) {  // the same name twice on one store
      auto all = group_comm("g3", {0, 1, 2});
      check_sum(*all, {0, 1, 2}, "world round " + std::to_string(round));
    }
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Comms, TransportHints) {
  auto res = run_forked(3, [](RankEnv& env) {
    CommOptions o;
    o.hints["transport"] = "tcp";
    auto tcp = env.comm("tcp", o);
    env.check(static_cast<CpuBackend&>(tcp->unsafe_get_backend()).transport_name() != "shm",
              "transport=tcp does not use shared memory");
    // A split of a TCP comm stays on TCP (hints are inherited).
    auto sub = env.rank == 1 ? tcp->split({}, "tcp-sub") : tcp->split({2, 0}, "tcp-sub");
    if (sub) {
      auto v = fill(env.rank, 1000);
      sub->all_reduce(make_tensor(v.data(), 1000), ReduceOp::SUM);
      env.check(v == expect_sum({2, 0}, 1000), "all_reduce on a split of a tcp comm");
    }
    auto shm = env.comm("shm");
    env.check(static_cast<CpuBackend&>(shm->unsafe_get_backend()).transport_name() == "shm",
              "one host: shared memory by default");
    o.hints["transport"] = "carrier-pigeon";
    expect_error(
        env, ErrorCode::kInvalidArgument, [&] { env.comm("bad", o); }, "unknown transport");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Comms, TuningTablePicksTheAlgorithm) {
  // COMMX_TUNING_FILE replaces the installed table: a table naming an unknown algorithm makes the
  // op fail (the table is consulted), one naming ring for every size still gives right results,
  // and an op's algorithm hint wins over the table.
  char dir[] = "/tmp/commx-tuning-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string ring = std::string(dir) + "/ring.txt", bogus = std::string(dir) + "/bogus.txt";
  FILE* f = std::fopen(ring.c_str(), "w");
  std::fputs("all_reduce 3 0 max ring\n", f);
  std::fclose(f);
  f = std::fopen(bogus.c_str(), "w");
  std::fputs("all_reduce 3 0 max carrier_pigeon\n", f);
  std::fclose(f);
  auto res = run_forked(3, [&](RankEnv& env) {
    setenv("COMMX_TUNING_FILE", ring.c_str(), 1);
    auto c = env.comm("tuned");
    for (size_t count : {size_t{7}, size_t{70000}}) {
      auto v = fill(env.rank, count);
      c->all_reduce(make_tensor(v.data(), static_cast<int64_t>(count)), ReduceOp::SUM);
      env.check(v == expect_sum({0, 1, 2}, count), "all_reduce under a ring table");
    }
    setenv("COMMX_TUNING_FILE", bogus.c_str(), 1);
    auto b = env.comm("bogus");
    auto v = fill(env.rank, 10);
    OpOptions hinted;
    hinted.hints["algorithm"] = "dda";
    b->all_reduce(make_tensor(v.data(), 10), ReduceOp::SUM, false, hinted);
    env.check(v == expect_sum({0, 1, 2}, 10), "an algorithm hint wins over the table");
    expect_error(
        env, ErrorCode::kInvalidArgument,
        [&] { b->all_reduce(make_tensor(v.data(), 10), ReduceOp::SUM); }, "carrier_pigeon");
  });
  std::remove(ring.c_str());
  std::remove(bogus.c_str());
  rmdir(dir);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
