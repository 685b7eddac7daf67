// What is specific to the gloo backend: its claims, and its errors (unsupported ops, timeouts, a
// peer that leaves, abort). Its collectives are checked by the conformance suite
// (tests/conformance). Ranks are threads of this process (Gloo over TCP loopback). Layer: tests.
#include <gtest/gtest.h>

#include <thread>

#include "commx/comm.h"
#include "commx/error.h"
#include "thread_ranks.h"

using namespace commx;
using namespace commx::testing;

namespace {

TEST(GlooBackend, ClaimsWhatItComputes) {
  run_thread_ranks(1, "gloo", [](Comm& c) {
    Backend& b = c.unsafe_get_backend();
    EXPECT_TRUE(b.supports(Collective::kAllReduce, DataType::kBFloat16, ReduceKind::kSum));
    EXPECT_TRUE(b.supports(Collective::kAllReduce, DataType::kFloat32, ReduceKind::kAvg));
    EXPECT_FALSE(b.supports(Collective::kAllReduce, DataType::kInt32, ReduceKind::kAvg));
    EXPECT_FALSE(b.supports(Collective::kAllToAllVDynamic, DataType::kFloat32, ReduceKind::kSum));
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
