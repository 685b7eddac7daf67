// The shm wait primitive against a peer that posts its last step and exits: the wait must end
// with the step, not with a failure blamed on the exit (the conformance suite once saw
// "rank 5 died (its process exited) while this rank waited for a collective step" with every
// rank exiting 0). And a peer that really left before posting is still a PeerFailure. A rank that
// finished its part of the collective and exited while this rank waits for another one fails
// nothing (shm_op_finished: it left between ops, past this op). Layer: tests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "commx/error.h"
#include "transport/shm_op_state.h"
#include "transport/shm_wait.h"

namespace commx {
namespace {

// A peer whose exit is seen together with its last post: `posts_on_exit` makes the awaited
// step appear at the moment the watch is asked whether the peer is alive.
class ExitingPeer : public PeerWatch {
 public:
  ExitingPeer(std::atomic<bool>& step, bool posts_on_exit, bool whole_group_dead)
      : step_(step), posts_(posts_on_exit), any_(whole_group_dead) {}
  bool alive(int) override {
    if (posts_) step_ = true;
    return false;
  }
  int any_dead() override {
    if (posts_) step_ = true;
    return any_ ? 5 : -1;
  }
  void record_verdict(int, bool) override { ++verdicts; }
  int verdicts = 0;

 private:
  std::atomic<bool>& step_;
  bool posts_, any_;
};

WaitScope scope_with(PeerWatch* w, bool whole_group) {
  WaitScope sc;
  sc.deadline = Clock::now() + std::chrono::seconds(5);
  sc.watch = w;
  sc.whole_group = whole_group;
  sc.skip_spin = true;
  return sc;
}

TEST(ShmWait, StepPostedByAPeerThatThenExitedEndsTheWait) {
  for (bool whole_group : {false, true}) {
    std::atomic<bool> step{false};
    ExitingPeer peer(step, /*posts_on_exit=*/true, whole_group);
    ShmWord word{};
    const std::vector<int> peers{whole_group ? 1 : 5};
    EXPECT_NO_THROW(wait_slow([&] { return step.load(); }, word, peers, "a collective step",
                              scope_with(&peer, whole_group)))
        << "whole_group " << whole_group;
    EXPECT_EQ(peer.verdicts, 0) << "no verdict recorded against a rank that did its part";
  }
}

TEST(ShmWait, PeerThatExitedWithoutPostingIsAPeerFailure) {
  std::atomic<bool> step{false};
  ExitingPeer peer(step, /*posts_on_exit=*/false, false);
  ShmWord word{};
  const std::vector<int> peers{5};
  try {
    wait_slow([&] { return step.load(); }, word, peers, "a collective step", scope_with(&peer, false));
    FAIL() << "the wait ended without the step";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(std::string(e.what()).find("rank 5 died"), std::string::npos) << e.what();
  }
  EXPECT_EQ(peer.verdicts, 1);
}

TEST(ShmWait, StepArrivingAtTheDeadlineIsNotATimeout) {
  std::atomic<bool> step{false};
  ShmWord word{};
  const std::vector<int> peers{1};
  WaitScope sc;
  sc.deadline = Clock::now() + std::chrono::milliseconds(20);
  sc.skip_spin = true;
  int reads = 0;
  // The step is there from the first read after the deadline passed.
  auto pred = [&] {
    ++reads;
    return Clock::now() >= sc.deadline;
  };
  EXPECT_NO_THROW(wait_slow(pred, word, peers, "a collective step", sc));
  EXPECT_GT(reads, 1);
}

// A whole-group wait while a rank that is not awaited has exited: it ends with the step when that
// rank finished the op (any_dead: none), with PeerFailure when it did not.
class FinishedPeer : public PeerWatch {
 public:
  explicit FinishedPeer(bool finished) : finished_(finished) {}
  bool alive(int peer) override { return peer != 5; }
  int any_dead() override { return finished_ ? -1 : 5; }

 private:
  bool finished_;
};

TEST(ShmWait, RankThatFinishedTheOpAndExitedFailsNoWholeGroupWait) {
  for (bool finished : {true, false}) {
    std::atomic<bool> step{false};
    std::thread poster([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      step = true;
    });
    FinishedPeer watch(finished);
    ShmWord word{};
    const std::vector<int> peers{2};  // awaited: rank 2, alive and late
    try {
      wait_slow([&] { return step.load(); }, word, peers, "a collective step",
                scope_with(&watch, true));
      EXPECT_TRUE(finished) << "a rank that left inside the op must fail the wait";
    } catch (const Error& e) {
      EXPECT_FALSE(finished) << e.what();
      EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
      EXPECT_NE(std::string(e.what()).find("rank 5 died"), std::string::npos) << e.what();
    }
    poster.join();
  }
}

// shm_op_finished on the op states the ranks publish: a gone rank finished this rank's collective
// when it left between ops after a collective numbered at or past this one.
TEST(ShmOpState, FinishedMeansBetweenOpsAndAtOrPastThisCollective) {
  auto collective = [](uint32_t ordinal) {
    OpFingerprint f;
    f.ordinal = ordinal;
    return f;
  };
  OpFingerprint p2p;
  p2p.flags = OpFingerprint::kPointToPoint;
  ShmOpState mine{}, theirs{};
  EXPECT_FALSE(shm_op_finished(theirs, mine)) << "neither in an op";
  shm_op_begin(mine, collective(7), {}, 0);
  EXPECT_FALSE(shm_op_finished(theirs, mine)) << "it never began an op";
  shm_op_begin(theirs, collective(7), {}, 0);
  EXPECT_FALSE(shm_op_finished(theirs, mine)) << "it left inside this op";
  shm_op_end(theirs);
  EXPECT_TRUE(shm_op_finished(theirs, mine)) << "it finished this op";
  shm_op_begin(theirs, collective(8), {}, 0);
  shm_op_end(theirs);
  EXPECT_TRUE(shm_op_finished(theirs, mine)) << "it finished a later one";
  ShmOpState behind{};
  shm_op_begin(behind, collective(6), {}, 0);
  shm_op_end(behind);
  EXPECT_FALSE(shm_op_finished(behind, mine)) << "it left before this op";
  const int none[] = {0};
  shm_op_begin(behind, p2p, none, 0);
  shm_op_end(behind);
  EXPECT_FALSE(shm_op_finished(behind, mine)) << "its last op was point-to-point: unknown";
  shm_op_end(mine);
  EXPECT_FALSE(shm_op_finished(theirs, mine)) << "this rank is in no op";
}

}  // namespace
}  // namespace commx
