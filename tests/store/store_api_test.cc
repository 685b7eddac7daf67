// Every Store method on every store kind (hash, TCP, file, prefix views), including blocking
// reads, timeouts, compare_set's c10d semantics and concurrent use from several handles.
// Layer: tests (store).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "commx/error.h"
#include "store/store_env.h"

namespace commx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class StoreApiTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    env_ = make_env(GetParam());
    s_ = env_->client();
  }
  std::unique_ptr<StoreEnv> env_;
  std::shared_ptr<Store> s_;
};

// Runs `f` and returns the commx error code it throws (fails the test if it does not throw).
template <typename F>
ErrorCode code_of(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no commx::Error thrown";
  return ErrorCode::kInternal;
}

TEST_P(StoreApiTest, SetGetOverwriteAndBinaryValues) {
  s_->set("a", B("1"));
  EXPECT_EQ(S(s_->get("a")), "1");
  s_->set("a", B("two"));
  EXPECT_EQ(S(s_->get("a")), "two");
  Bytes bin{0, 1, 2, 255, 0, 7};
  s_->set("bin", bin);
  EXPECT_EQ(s_->get("bin"), bin);
  s_->set("empty", {});
  EXPECT_TRUE(s_->get("empty").empty());
  EXPECT_TRUE(s_->check({"empty"}));
  s_->set_str("str", "hello");
  EXPECT_EQ(s_->get_str("str"), "hello");
}

TEST_P(StoreApiTest, LargeValue) {
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  s_->set("big", big);
  EXPECT_EQ(env_->client()->get("big"), big);
}

TEST_P(StoreApiTest, GetBlocksUntilAnotherHandleSets) {
  auto other = env_->client();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    other->set("late", B("v"));
  });
  auto t0 = Clock::now();
  EXPECT_EQ(S(s_->get("late")), "v");
  EXPECT_GE(Clock::now() - t0, 80ms);
  t.join();
}

TEST_P(StoreApiTest, GetTimesOutNamingTheKey) {
  s_->set_timeout(150ms);
  std::string msg;
  auto t0 = Clock::now();
  EXPECT_EQ(code_of([&] { s_->get("never"); }, &msg), ErrorCode::kTimeout);
  auto dt = Clock::now() - t0;
  EXPECT_GE(dt, 140ms);
  EXPECT_LT(dt, 3s);
  EXPECT_NE(msg.find("never"), std::string::npos) << msg;
  // The handle still works after a timeout.
  s_->set("after", B("ok"));
  EXPECT_EQ(S(s_->get("after")), "ok");
}

TEST_P(StoreApiTest, WaitTimesOutNamingOnlyMissingKeys) {
  s_->set("here", B("x"));
  std::string msg;
  EXPECT_EQ(code_of(
                [&] {
                  s_->wait({"here", "gone1", "gone2"}, 100ms);
                },
                &msg),
            ErrorCode::kTimeout);
  EXPECT_NE(msg.find("gone1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gone2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'here'"), std::string::npos) << msg;
  s_->wait({"here"}, 100ms);
  s_->wait({}, 10ms);
}

TEST_P(StoreApiTest, WaitReturnsWhenAllKeysAppear) {
  auto other = env_->client();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    other->set("w1", B("1"));
    std::this_thread::sleep_for(50ms);
    other->add("w2", 5);
  });
  s_->wait({"w1", "w2"}, 10s);
  EXPECT_TRUE(s_->check({"w1", "w2"}));
  t.join();
}

TEST_P(StoreApiTest, AddCountsInDecimal) {
  EXPECT_EQ(s_->add("c", 3), 3);  // a missing key starts at 0
  EXPECT_EQ(s_->add("c", -5), -2);
  EXPECT_EQ(s_->add("c", 0), -2);
  EXPECT_EQ(S(s_->get("c")), "-2");
  s_->set("c2", B("40"));
  EXPECT_EQ(s_->add("c2", 2), 42);
  EXPECT_EQ(s_->add("big", int64_t{1} << 40), int64_t{1} << 40);
}

TEST_P(StoreApiTest, AddOnNonNumericFailsAndStoreKeepsWorking) {
  s_->set("text", B("abc"));
  EXPECT_THROW(s_->add("text", 1), Error);
  s_->set("k", B("v"));
  EXPECT_EQ(S(s_->get("k")), "v");
  EXPECT_EQ(S(s_->get("text")), "abc");
}

TEST_P(StoreApiTest, CompareSetFollowsC10dSemantics) {
  // Missing, expected empty: create and return desired.
  EXPECT_EQ(S(s_->compare_set("cs", {}, B("first"))), "first");
  EXPECT_EQ(S(s_->get("cs")), "first");
  // Present and equal: store desired, return it.
  EXPECT_EQ(S(s_->compare_set("cs", B("first"), B("second"))), "second");
  EXPECT_EQ(S(s_->get("cs")), "second");
  // Present and different: return current, store nothing.
  EXPECT_EQ(S(s_->compare_set("cs", B("wrong"), B("third"))), "second");
  EXPECT_EQ(S(s_->get("cs")), "second");
  // Missing, expected non-empty: return expected, store nothing.
  EXPECT_EQ(S(s_->compare_set("nokey", B("exp"), B("new"))), "exp");
  EXPECT_FALSE(s_->check({"nokey"}));
  // Present with an empty value equals empty expected.
  s_->set("emptyv", {});
  EXPECT_EQ(S(s_->compare_set("emptyv", {}, B("filled"))), "filled");
}

TEST_P(StoreApiTest, CompareSetWakesWaiters) {
  auto other = env_->client();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    other->compare_set("csw", {}, B("v"));
  });
  EXPECT_EQ(S(s_->get("csw")), "v");
  t.join();
}

TEST_P(StoreApiTest, Check) {
  EXPECT_TRUE(s_->check({}));
  EXPECT_FALSE(s_->check({"x"}));
  s_->set("x", B("1"));
  EXPECT_TRUE(s_->check({"x"}));
  EXPECT_FALSE(s_->check({"x", "y"}));
  s_->set("y", B("1"));
  EXPECT_TRUE(s_->check({"x", "y"}));
}

TEST_P(StoreApiTest, DeleteKey) {
  s_->set("d", B("1"));
  EXPECT_TRUE(s_->delete_key("d"));
  EXPECT_FALSE(s_->check({"d"}));
  EXPECT_FALSE(s_->delete_key("d"));
  EXPECT_FALSE(s_->delete_key("never-set"));
  s_->set("d", B("2"));
  EXPECT_EQ(S(s_->get("d")), "2");
}

TEST_P(StoreApiTest, NumKeysCountsSetsAndDeletes) {
  int64_t n0 = s_->num_keys();
  s_->set("n1", B("1"));
  s_->add("n2", 1);
  s_->append("n3", B("x"));
  EXPECT_EQ(s_->num_keys(), n0 + 3);
  s_->set("n1", B("again"));
  EXPECT_EQ(s_->num_keys(), n0 + 3);
  s_->delete_key("n2");
  EXPECT_EQ(s_->num_keys(), n0 + 2);
}

TEST_P(StoreApiTest, AppendCreatesAndConcatenates) {
  s_->append("ap", B("ab"));
  EXPECT_EQ(S(s_->get("ap")), "ab");
  s_->append("ap", B("cd"));
  s_->append("ap", {});
  EXPECT_EQ(S(s_->get("ap")), "abcd");
}

TEST_P(StoreApiTest, MultiSetMultiGet) {
  s_->multi_set({"m1", "m2", "m3"}, {B("a"), B(""), B("ccc")});
  auto v = s_->multi_get({"m3", "m1", "m2", "m1"});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(S(v[0]), "ccc");
  EXPECT_EQ(S(v[1]), "a");
  EXPECT_EQ(S(v[2]), "");
  EXPECT_EQ(S(v[3]), "a");
  EXPECT_TRUE(s_->multi_get({}).empty());
  EXPECT_EQ(code_of([&] { s_->multi_set({"a", "b"}, {B("1")}); }), ErrorCode::kInvalidArgument);
}

TEST_P(StoreApiTest, MultiGetBlocksAndTimesOut) {
  s_->set("mg1", B("1"));
  s_->set_timeout(100ms);
  std::string msg;
  EXPECT_EQ(code_of([&] { s_->multi_get({"mg1", "mg2"}); }, &msg), ErrorCode::kTimeout);
  EXPECT_NE(msg.find("mg2"), std::string::npos) << msg;
  s_->set_timeout(10s);
  auto other = env_->client();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    other->set("mg2", B("2"));
  });
  auto v = s_->multi_get({"mg1", "mg2"});
  EXPECT_EQ(S(v[1]), "2");
  t.join();
}

TEST_P(StoreApiTest, ConcurrentAddsFromManyHandles) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&] {
      auto h = env_->client();
      for (int j = 0; j < kAdds; ++j) h->add("cnt", 1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s_->add("cnt", 0), kThreads * kAdds);
}

TEST_P(StoreApiTest, OneHandleSharedByThreads) {
  constexpr int kThreads = 4, kOps = 50;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&, i] {
      for (int j = 0; j < kOps; ++j) {
        std::string k = "t" + std::to_string(i) + "_" + std::to_string(j);
        s_->set(k, B(k));
        EXPECT_EQ(S(s_->get(k)), k);
        s_->add("shared", 1);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s_->add("shared", 0), kThreads * kOps);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, StoreApiTest,
                         ::testing::Values("hash", "tcp", "file", "prefix_tcp", "prefix_file"),
                         [](const auto& info) { return info.param; });

TEST(PrefixStore, KeysLiveUnderThePrefixAndTimeoutIsTheViews) {
  auto base = make_hash_store();
  auto p = make_prefix_store("job", base);
  p->set("k", B("v"));
  EXPECT_TRUE(base->check({"job/k"}));
  EXPECT_FALSE(base->check({"k"}));
  EXPECT_EQ(S(base->get("job/k")), "v");
  auto nested = make_prefix_store("inner", p);
  nested->set("x", B("1"));
  EXPECT_TRUE(base->check({"job/inner/x"}));
  // The view's own timeout bounds its blocking reads, whatever the base's timeout is.
  base->set_timeout(60s);
  p->set_timeout(100ms);
  auto t0 = Clock::now();
  EXPECT_THROW(p->get("missing"), Error);
  EXPECT_LT(Clock::now() - t0, 5s);
}

}  // namespace
}  // namespace commx::test
