// The ordered executor: async ops run in issue order, sync ops wait for them, errors stay in Work.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "commx/error.h"
#include "core/host_work.h"

using namespace commx;

TEST(Executor, OrderAndErrors) {
  OrderedExecutor ex;
  std::vector<int> order;
  std::vector<Work> works;
  for (int i = 0; i < 50; ++i) works.push_back(ex.submit([&order, i] { order.push_back(i); }, true));
  Work bad = ex.submit([] { throw Error(ErrorCode::kTimeout, "late"); }, true);
  ex.submit([&order] { order.push_back(50); }, false);
  ASSERT_EQ(order.size(), 51u);
  for (int i = 0; i <= 50; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(bad.is_completed());
  EXPECT_EQ(bad.status(), WorkStatus::kTimedOut);
  EXPECT_THROW(bad.wait(), Error);
  EXPECT_THROW(ex.submit([] { throw Error(ErrorCode::kInternal, "x"); }, false), Error);
}
