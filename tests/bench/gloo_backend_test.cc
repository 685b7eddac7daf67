// The gloo backend against an independent host reference (collective_checks.h): every
// collective it offers, every dtype/op it claims, sizes 0, 1 and odd, world sizes 1-4, non-zero
// roots, async order, errors. Ranks are threads of this process (Gloo over TCP loopback).
// Layer: tests.
#include <gtest/gtest.h>

#include <thread>

#include "collective_checks.h"
#include "commx/comm.h"
#include "commx/error.h"
#include "thread_ranks.h"

using namespace commx;
using namespace commx::testing;

namespace {

class GlooTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooTest, Reductions) { run_thread_ranks(GetParam(), "gloo", check_reductions); }
TEST_P(GlooTest, DataMovement) { run_thread_ranks(GetParam(), "gloo", check_data_movement); }
TEST_P(GlooTest, P2PAndAsync) { run_thread_ranks(GetParam(), "gloo", check_p2p_and_async); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooTest, ::testing::Values(1, 2, 3, 4));

TEST(GlooBackend, EightRanks) {
  // The widest world on 8 threads: sum, broadcast from rank 5, all_gather, all_to_all.
  run_thread_ranks(8, "gloo", [](Comm& c) {
    const int n = c.size(), me = c.rank();
    for (int64_t cnt : {int64_t{0}, int64_t{1}, int64_t{1029}}) {
      std::vector<float> x(cnt), g(cnt * n), a(cnt * n), b(cnt * n);
      for (int64_t i = 0; i < cnt; ++i) x[i] = static_cast<float>(me * 3 + i % 5);
      std::vector<float> y = x;
      c.all_reduce(make_tensor(y.data(), cnt), ReduceOp::SUM);
      for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(y[i], 3.f * n * (n - 1) / 2 + n * (i % 5));
      y = x;
      c.broadcast(make_tensor(y.data(), cnt), 5);
      for (int64_t i = 0; i < cnt; ++i) ASSERT_EQ(y[i], 15.f + i % 5);
      c.all_gather_single(make_tensor(g.data(), cnt * n), make_tensor(x.data(), cnt));
      for (int64_t i = 0; i < cnt * n; ++i) ASSERT_EQ(g[i], (i / cnt) * 3.f + (i % cnt) % 5);
      for (int64_t i = 0; i < cnt * n; ++i) a[i] = static_cast<float>(me * 100000 + i);
      c.all_to_all_single(make_tensor(b.data(), cnt * n), make_tensor(a.data(), cnt * n));
      for (int64_t i = 0; i < cnt * n; ++i)
        ASSERT_EQ(b[i], static_cast<float>((i / cnt) * 100000 + me * cnt + i % cnt));
    }
  });
}

TEST(GlooBackend, ClaimsWhatItComputes) {
  run_thread_ranks(1, "gloo", [](Comm& c) {
    Backend& b = c.unsafe_get_backend();
    EXPECT_TRUE(b.supports(OpType::kAllReduce, DataType::kBFloat16, ReduceKind::kSum));
    EXPECT_TRUE(b.supports(OpType::kAllReduce, DataType::kFloat32, ReduceKind::kAvg));
    EXPECT_FALSE(b.supports(OpType::kAllReduce, DataType::kInt32, ReduceKind::kAvg));
    EXPECT_FALSE(b.supports(OpType::kAllToAllVDynamic, DataType::kFloat32, ReduceKind::kSum));
  });
}

TEST(GlooErrors, UnsupportedAndTimeout) {
  run_thread_ranks(2, "gloo", [&](Comm& c) {
    int32_t v[4] = {1, 2, 3, 4};
    try {
      c.all_reduce(make_tensor(v, 4), ReduceOp::AVG);
      ADD_FAILURE() << "AVG on int32 should be unsupported";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("gloo"), std::string::npos) << e.what();
    }
    // Rank 0 waits for a message rank 1 never sends: bounded by the op's timeout.
    if (c.rank() == 0) {
      OpOptions o;
      o.timeout = std::chrono::milliseconds(300);
      try {
        c.recv(make_tensor(v, 4), 1, false, o);
        ADD_FAILURE() << "recv should time out";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
        EXPECT_NE(std::string(e.what()).find("recv"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(900));  // stay connected meanwhile
    }
  });
}

TEST(GlooErrors, PeerLeaves) {
  // Rank 1 closes its comm at once; rank 0's receive ends with PeerFailure, not a hang.
  run_thread_ranks(2, "gloo", [&](Comm& c) {
    c.barrier();  // both ranks connected: rank 1 then leaves mid-job, not during set-up
    if (c.rank() == 1) return;
    int32_t v[4];
    OpOptions o;
    o.timeout = std::chrono::seconds(20);
    try {
      c.recv(make_tensor(v, 4), 1, false, o);
      ADD_FAILURE() << "recv should fail";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
    }
  });
}

TEST(GlooErrors, AbortEndsABlockedOp) {
  // Rank 0 is blocked in an all_reduce rank 1 never joins; abort() from another thread makes it
  // end as Aborted (at its deadline: Gloo cannot interrupt a wait), and later ops fail fast.
  run_thread_ranks(2, "gloo", [&](Comm& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      return;
    }
    float v[8] = {};
    OpOptions o;
    o.timeout = std::chrono::milliseconds(1000);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c.abort();
    });
    auto t0 = std::chrono::steady_clock::now();
    try {
      c.all_reduce(make_tensor(v, 8), ReduceOp::SUM, false, o);
      ADD_FAILURE() << "all_reduce should be aborted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
    }
    aborter.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
    try {
      c.barrier();
      ADD_FAILURE() << "ops after abort must fail";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
    }
  });
}

}  // namespace
