// all_to_all_v_dynamic, dispatch and combine on the cpu backend, over shared memory and TCP, at
// 2, 3 and 4 forked ranks: random count matrices with zeros, an all-to-one hot spot, a rank that
// sends nothing, odd row sizes and several element sizes, each output checked byte for byte
// against a reference written out per form (not through the library's layout code), including
// that nothing past the received rows was touched; then the agreed errors (capacity exceeded,
// input overrun, negative counts, differing row sizes) and the argument checks. Layer: tests.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cpu/harness.h"
#include "dynamic_a2a_reference.h"

namespace commx::testing {
namespace {

void check_all_forms(RankEnv& env, Comm& comm) {
  const int n = env.size, me = env.rank;
  const DataType dtypes[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt8,
                             DataType::kFloat64};
  uint32_t seed = 1;
  for (Form f : {Form::kPlain, Form::kDispatch, Form::kCombine})
    for (int L : {1, 2, 3}) {
      if (f == Form::kPlain && L > 1) continue;
      for (Pattern p : {Pattern::kRandom, Pattern::kHotSpot, Pattern::kSilentSender})
        for (int64_t row : {1, 3, 7})
          for (DataType dt : dtypes) {
            const size_t es = dtype_size(dt);
            auto c = make_counts(f, n, L, p, seed++);
            int64_t sent = 0;
            for (int64_t v : c[me]) sent += v;
            std::vector<unsigned char> in((sent * row + 5) * es);  // 5 spare elements: not sent
            for (int64_t e = 0; e < sent * row + 5; ++e)
              for (size_t b = 0; b < es; ++b) in[e * es + b] = input_byte(me, e, b);
            Expected x = reference(f, n, L, c, me, row, es);
            const int64_t cap = static_cast<int64_t>(x.out.size() / es) + 4 * row;
            std::vector<unsigned char> out(cap * es, kUntouched);
            std::vector<int64_t> got_counts(n * L, -1);
            std::vector<int64_t> in_counts = c[me];
            run_form(comm, f, Tensor(out.data(), cap, dt), Tensor(in.data(), sent * row + 5, dt),
                     make_tensor(got_counts.data(), n * L), make_tensor(in_counts.data(), n * L),
                     row);
            const std::string what = std::string(form_name(f)) + " L=" + std::to_string(L) +
                                     " row=" + std::to_string(row) + " " + dtype_name(dt) +
                                     " pattern " + std::to_string(static_cast<int>(p));
            env.check(got_counts == x.counts, what + ": received counts differ");
            env.check(std::memcmp(out.data(), x.out.data(), x.out.size()) == 0,
                      what + ": received rows differ");
            bool untouched = true;
            for (size_t b = x.out.size(); b < out.size(); ++b) untouched &= out[b] == kUntouched;
            env.check(untouched, what + ": bytes past the received rows were written");
          }
    }
}

// dispatch, then combine of the dispatched rows: every rank gets its input back.
void check_round_trip(RankEnv& env, Comm& comm) {
  const int n = env.size, me = env.rank, L = 2, row = 5;
  auto c = make_counts(Form::kDispatch, n, L, Pattern::kRandom, 777);
  int64_t sent = 0;
  for (int64_t v : c[me]) sent += v;
  std::vector<float> tokens(sent * row);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<float>(me * 100000 + i);
  const int64_t cap = 6 * n * L * n * row;
  std::vector<float> at_experts(cap), back(cap, -1.f);
  std::vector<int64_t> expert_counts = c[me], received(n * L), returned(n * L);
  comm.dispatch(make_tensor(at_experts.data(), cap), make_tensor(tokens.data(), sent * row),
                make_tensor(received.data(), n * L), make_tensor(expert_counts.data(), n * L), row);
  int64_t got = 0;
  for (int64_t v : received) got += v;
  comm.combine(make_tensor(back.data(), cap), make_tensor(at_experts.data(), got * row),
               make_tensor(returned.data(), n * L), make_tensor(received.data(), n * L), row);
  env.check(returned == expert_counts, "combine returned other counts than dispatch was given");
  env.check(std::equal(tokens.begin(), tokens.end(), back.begin()),
            "dispatch + combine did not bring the tokens back in order");
}

void check_errors(RankEnv& env, Comm& comm) {
  const int n = env.size, me = env.rank;
  std::vector<float> in(64, 1.f), out(64);
  std::vector<int64_t> counts(n, 2), got(n);
  auto run = [&](int64_t out_cap, int64_t row) {
    comm.all_to_all_v_dynamic(make_tensor(out.data(), out_cap), make_tensor(in.data(), 64),
                              make_tensor(got.data(), n), make_tensor(counts.data(), n), row);
  };
  // Rank 0's output holds one element too few: every rank fails, naming rank 0.
  std::string msg = expect_error(
      env, ErrorCode::kInvalidArgument, [&] { run(me == 0 ? 2 * n - 1 : 64, 1); },
      "capacity exceeded");
  env.check(msg.find("capacity exceeded: rank 0 would receive " + std::to_string(2 * n) +
                     " rows") != std::string::npos &&
                msg.find("all_to_all_v_dynamic") != std::string::npos &&
                msg.find("rank " + std::to_string(me) + "/") != std::string::npos,
            "capacity error names the op, this rank and rank 0: " + msg);
  // The comm is still usable, and the op then works.
  std::fill(out.begin(), out.end(), 0.f);
  run(64, 1);
  env.check(got == std::vector<int64_t>(n, 2) && out[0] == 1.f, "the op after a capacity error");
  if (me == n - 1) counts[0] = -1;
  msg = expect_error(
      env, ErrorCode::kInvalidArgument, [&] { run(64, 1); }, "negative count");
  env.check(
      msg.find("rank " + std::to_string(n - 1) + " has a negative count -1") != std::string::npos,
      "negative count names the rank: " + msg);
  counts.assign(n, 40);
  counts[0] = 65;  // more rows than the 64 input elements
  msg = expect_error(
      env, ErrorCode::kInvalidArgument, [&] { run(64, 1); }, "input overrun");
  env.check(msg.find("but its input holds 64 elements") != std::string::npos,
            "input overrun: " + msg);
  counts.assign(n, 1);
  if (n > 1) {
    msg = expect_error(
        env, ErrorCode::kInvalidArgument, [&] { run(64, me == 1 ? 2 : 1); }, "row sizes differ");
    env.check(msg.find("rank 1 passed row_size 2") != std::string::npos, "row size: " + msg);
  }
  // Argument checks (local: no peer is involved).
  std::vector<float> fcounts(n);
  expect_error(
      env, ErrorCode::kInvalidArgument,
      [&] {
        comm.all_to_all_v_dynamic(make_tensor(out.data(), 64), make_tensor(in.data(), 64),
                                  make_tensor(got.data(), n), make_tensor(fcounts.data(), n), 1);
      },
      "float counts");
  expect_error(
      env, ErrorCode::kInvalidArgument,
      [&] {
        comm.all_to_all_v_dynamic(make_tensor(out.data(), 64), make_tensor(in.data(), 64),
                                  make_tensor(got.data(), n), make_tensor(counts.data(), n), 0);
      },
      "row size 0");
  if (n > 1) {
    std::vector<int64_t> odd(n + 1), odd_out(n + 1);
    expect_error(
        env, ErrorCode::kInvalidArgument,
        [&] {
          comm.dispatch(make_tensor(out.data(), 64), make_tensor(in.data(), 64),
                        make_tensor(odd_out.data(), n + 1), make_tensor(odd.data(), n + 1), 1);
        },
        "experts not divisible by ranks");
  }
}

void run_suite(int n, const char* transport) {
  auto res = run_forked(n, [&](RankEnv& env) {
    CommOptions o;
    o.hints["transport"] = transport;
    auto comm = env.comm(std::string("a2av_dyn_") + transport, o);
    check_all_forms(env, *comm);
    check_round_trip(env, *comm);
    check_errors(env, *comm);
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(AllToAllVDynamic, TwoRanksShm) { run_suite(2, "shm"); }
TEST(AllToAllVDynamic, ThreeRanksShm) { run_suite(3, "shm"); }
TEST(AllToAllVDynamic, FourRanksShm) { run_suite(4, "shm"); }
TEST(AllToAllVDynamic, ThreeRanksTcp) { run_suite(3, "tcp"); }

TEST(AllToAllVDynamic, OneRank) { run_suite(1, "auto"); }

}  // namespace
}  // namespace commx::testing
