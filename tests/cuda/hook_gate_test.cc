// HookGate (src/backends/cuda_common/event_work.h): a Work's backend hooks stop at the backend's
// finalize, and finalize waits for a hook already running. Plain C++ (no GPU). Layer: tests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "commx/error.h"
#include "cuda_common/event_work.h"

namespace commx::cuda {
namespace {

EventWorkHooks counting_hooks(std::atomic<int>& polls, std::atomic<int>& timeouts) {
  EventWorkHooks h;
  h.poll_error = [&polls]() -> std::exception_ptr {
    ++polls;
    return std::make_exception_ptr(Error(ErrorCode::kTimeout, "device timeout"));
  };
  h.on_timeout = [&timeouts] { ++timeouts; };
  return h;
}

TEST(HookGate, HooksRunWhileOpenAndStopAfterClose) {
  std::atomic<int> polls{0}, timeouts{0};
  HookGate gate;
  EventWorkHooks g = gate.guard(counting_hooks(polls, timeouts));
  EXPECT_TRUE(g.poll_error() != nullptr);  // the backend's error passes through
  g.on_timeout();
  EXPECT_EQ(polls.load(), 1);
  EXPECT_EQ(timeouts.load(), 1);
  gate.close();
  EXPECT_TRUE(g.poll_error() == nullptr);  // the Work then completes by its event alone
  g.on_timeout();
  EXPECT_EQ(polls.load(), 1);
  EXPECT_EQ(timeouts.load(), 1);
}

TEST(HookGate, AFinalErrorOutlivesTheBackend) {
  // A kernel that bailed out (device timeout) fires its event too: after close, the error the
  // backend last reported must still fail the Work, never turn into a success.
  std::atomic<int> polls{0}, timeouts{0};
  HookGate gate;
  EventWorkHooks g = gate.guard(counting_hooks(polls, timeouts));
  gate.close(std::make_exception_ptr(Error(ErrorCode::kTimeout, "rank 1 never joined")));
  std::exception_ptr e = g.poll_error();
  ASSERT_TRUE(e != nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(err.what()).find("rank 1 never joined"), std::string::npos);
  }
  EXPECT_EQ(polls.load(), 0);  // the backend's hook itself is not called any more
  gate.close(nullptr);         // a second close keeps the first error
  EXPECT_TRUE(g.poll_error() != nullptr);
}

TEST(HookGate, EmptyHooksStayEmpty) {
  HookGate gate;
  EventWorkHooks g = gate.guard(EventWorkHooks{});
  EXPECT_FALSE(static_cast<bool>(g.poll_error));
  EXPECT_FALSE(static_cast<bool>(g.on_timeout));
}

TEST(HookGate, CloseWaitsForAHookInProgress) {
  HookGate gate;
  std::atomic<bool> inside{false}, release{false}, finished{false};
  EventWorkHooks h;
  h.poll_error = [&]() -> std::exception_ptr {
    inside = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    finished = true;
    return nullptr;
  };
  EventWorkHooks g = gate.guard(std::move(h));
  std::thread poller([&] { g.poll_error(); });
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    gate.close();
    closed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(closed.load());  // the backend is not torn down under a running hook
  release = true;
  closer.join();
  poller.join();
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(closed.load());
}

TEST(HookGate, HooksOutliveTheGateObject) {
  std::atomic<int> polls{0}, timeouts{0};
  EventWorkHooks g;
  {
    HookGate gate;
    g = gate.guard(counting_hooks(polls, timeouts));
    gate.close();
  }  // the backend (and its gate) are gone; the Work's hooks are still callable
  EXPECT_TRUE(g.poll_error() == nullptr);
  EXPECT_EQ(polls.load(), 0);
}

}  // namespace
}  // namespace commx::cuda
