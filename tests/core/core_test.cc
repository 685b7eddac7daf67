// Core behaviour through a one-rank comm on the "echo" test plugin: plugin loading, argument
// validation messages, hooks, flight recorder, split and abort.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "commx/commx.h"

using namespace commx;

namespace {

std::shared_ptr<Comm> make_echo(const std::string& name = "t") {
  CommOptions o;
  o.rank = 0;
  o.size = 1;
  o.store = make_hash_store();
  return Comm::create("echo", Device::cpu(), name, o);
}

template <typename F>
std::string error_of(F&& f, ErrorCode expect) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expect) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

}  // namespace

TEST(Registry, LoadsPluginBesideLibrary) {
  auto c = make_echo();
  EXPECT_EQ(c->backend_name(), "echo");
  EXPECT_TRUE(has_backend("echo"));
}

TEST(Registry, UnknownBackendListsWhatWasTried) {
  std::string msg = error_of([] { create_backend("nosuch"); }, ErrorCode::kUnsupported);
  EXPECT_NE(msg.find("nosuch"), std::string::npos);
  EXPECT_NE(msg.find("libcommx_backend_nosuch.so"), std::string::npos);
}

TEST(Registry, RejectsPluginOfAnotherAbi) {
  setenv("COMMX_BACKEND_LIB_PATH_BADABI", COMMX_TEST_BADABI_PLUGIN, 1);
  std::string msg = error_of([] { create_backend("badabi"); }, ErrorCode::kUnsupported);
  EXPECT_NE(msg.find("ABI 999"), std::string::npos) << msg;
  unsetenv("COMMX_BACKEND_LIB_PATH_BADABI");
}

TEST(Validation, MessagesNameCommRankOpAndProblem) {
  auto c = make_echo("val");
  std::vector<float> buf(8, 1.0f);
  Tensor t = make_tensor(buf.data(), 8);
  c->all_reduce(t, ReduceOp::SUM);  // #1 is fine

  Tensor neg = t;
  neg.count = -3;
  std::string msg = error_of([&] { c->all_reduce(neg, ReduceOp::SUM); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("[comm 'val' rank 0/1] all_reduce #2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("negative count -3"), std::string::npos) << msg;

  Tensor gpu = t;
  gpu.device = Device::cuda(0);
  msg = error_of([&] { c->all_reduce(gpu, ReduceOp::SUM); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;

  std::vector<int32_t> ints(8);
  msg = error_of([&] { c->all_reduce(make_tensor(ints.data(), 8), ReduceOp::SUM); }, ErrorCode::kUnsupported);
  EXPECT_NE(msg.find("backend 'echo' does not support all_reduce on int32"), std::string::npos) << msg;

  // The collective is claimed, its form with per-rank counts is not (Backend::supports_uneven).
  msg = error_of([&] { c->all_gather_v({t}, t); }, ErrorCode::kUnsupported);
  EXPECT_NE(msg.find("backend 'echo' does not support all_gather_v on float"), std::string::npos)
      << msg;

  msg = error_of([&] { c->all_reduce(t, ReduceOp::BXOR); }, ErrorCode::kUnsupported);
  EXPECT_NE(msg.find("bxor is not defined for float"), std::string::npos) << msg;

  msg = error_of([&] { c->broadcast(t, 1); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("root 1 is out of range [0, 1)"), std::string::npos) << msg;

  std::vector<float> out(3);
  msg = error_of([&] { c->all_gather_single(make_tensor(out.data(), 3), t); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("expected size*input = 8"), std::string::npos) << msg;

  msg = error_of([&] { c->all_to_all_v_single(t, t, {9}, {1}); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("output splits add up to 9"), std::string::npos) << msg;

  Tensor null_data = t;
  null_data.data = nullptr;
  msg = error_of([&] { c->all_reduce(null_data, ReduceOp::SUM); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("null data pointer"), std::string::npos) << msg;
}

TEST(Comm, PremulSumAsyncHooksAndFlightRecorder) {
  auto c = make_echo("hooks");
  int pre = 0, post = 0;
  c->register_pre_hook([&](const Comm&, const OpInfo& i) {
    ++pre;
    EXPECT_EQ(i.type, OpType::kAllReduce);
  });
  c->register_post_hook([&](const Comm&, const OpInfo&, const Work&) { ++post; });
  std::vector<float> buf = {1, 2, 3};
  Work w = c->all_reduce(make_tensor(buf.data(), 3), ReduceOp::premul_sum(2.0), true);
  w.wait();
  EXPECT_TRUE(w.is_completed());
  EXPECT_EQ(w.status(), WorkStatus::kCompleted);
  EXPECT_EQ(buf[2], 6.0f);
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
  std::string fr = c->flight_record_json();
  EXPECT_NE(fr.find("\"op\":\"all_reduce\""), std::string::npos) << fr;
  EXPECT_NE(fr.find("\"state\":\"completed\""), std::string::npos) << fr;
}

TEST(Comm, SplitAndAbort) {
  auto c = make_echo("split");
  EXPECT_EQ(c->split({}, "none"), nullptr);
  auto s = c->split({0}, "sub");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(s->size(), 1);
  EXPECT_EQ(s->name(), "sub");
  error_of([&] { c->split({1}, "bad"); }, ErrorCode::kInvalidArgument);
  int aborted = 0;
  c->register_abort_hook([&](const Comm&) { ++aborted; });
  c->abort();
  EXPECT_TRUE(c->is_aborted());
  EXPECT_EQ(aborted, 1);
  std::vector<float> buf(2);
  std::string msg = error_of([&] { c->barrier(); }, ErrorCode::kAborted);
  EXPECT_NE(msg.find("aborted"), std::string::npos);
}
