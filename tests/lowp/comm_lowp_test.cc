// Low-precision collectives through Comm on the cpu backend, 2-8 forked ranks: enabled by env
// (COMMX_LOW_PRECISION_ENABLE and the RCCL alias), by comm hint and by op hint. Every rank
// regenerates all ranks' inputs and checks its own output bit for bit against the serial
// schedule, which proves that all ranks hold identical results; the normal path stays exact when
// low precision is off.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "cpu/harness.h"
#include "lowp/lowp_test_util.h"
#include "lowp/simulate.h"

using namespace commx;
using namespace commx::lowp;
using namespace commx::testing;

namespace {

std::vector<Buf> inputs(DataType dt, int size, int64_t n, int salt) {
  std::vector<Buf> in;
  for (int r = 0; r < size; ++r) in.push_back(make_buf(dt, gen(Dist::kNormal, n, 1000 * salt + r)));
  return in;
}

void expect_ok(const ForkResult& res) { EXPECT_TRUE(res.all_ok()) << res.describe(); }

}  // namespace

TEST(CommLowp, AllReduceEnabledByEnvIsBitIdenticalOnEveryRank) {
  for (int size : {2, 3, 4, 8}) {
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
      for (const char* var : {"COMMX_LOW_PRECISION_ENABLE", "RCCL_LOW_PRECISION_ENABLE"}) {
        const int64_t n = 5003;
        expect_ok(run_forked(size, [&](RankEnv& env) {
          setenv(var, "1", 1);
          setenv("COMMX_LOW_PRECISION_MIN_BYTES", "1024", 1);
          auto comm = env.comm("lowp_env");
          auto in = inputs(dt, size, n, size);
          Fp8Codec codec({});
          for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kAvg}) {
            Buf io = in[env.rank];
            comm->all_reduce(io.tensor(), kind);
            Buf expect = simulate_all_reduce(codec, in, kind);
            env.check(io.same_bits(expect), std::string("all_reduce ") + reduce_kind_name(kind) +
                                                " differs from the schedule");
            // A small op stays on the exact path (integers sum exactly in f32).
            std::vector<float> small(16, static_cast<float>(env.rank + 1));
            comm->all_reduce(make_tensor(small.data(), 16), ReduceOp::SUM);
            env.check(small[7] == size * (size + 1) / 2.0f, "small all_reduce not exact");
          }
        }));
      }
    }
  }
}

TEST(CommLowp, CommHintAndOpHintSelectTheCollectives) {
  for (int size : {2, 5}) {
    expect_ok(run_forked(size, [&](RankEnv& env) {
      CommOptions o;
      o.hints["low_precision"] = "fp8e4m3";
      o.hints["low_precision_min_bytes"] = "0";
      o.hints["low_precision_block"] = "128";
      auto comm = env.comm("lowp_hint", o);
      const int64_t each = 700;
      Fp8Codec codec({Fp8Format::kE4M3, 128});
      auto in = inputs(DataType::kFloat32, size, each * size, 7);
      // all_gather_single: every rank's slot p is decode(encode(in[p] first `each`)).
      Buf g(DataType::kFloat32, each * size);
      comm->all_gather_single(g.tensor(), in[env.rank].tensor().slice(0, each));
      for (int p = 0; p < size; ++p) {
        std::vector<uint8_t> e(codec.encoded_bytes(each));
        Buf d(DataType::kFloat32, each);
        codec.encode(in[p].bytes.data(), DataType::kFloat32, each, e.data());
        codec.decode(e.data(), each, d.bytes.data(), DataType::kFloat32);
        env.check(std::memcmp(g.bytes.data() + 4 * each * p, d.bytes.data(), 4 * each) == 0,
                  "all_gather slot " + std::to_string(p));
      }
      // reduce_scatter_single: close to the exact sum of the slices.
      Buf rs(DataType::kFloat32, each);
      comm->reduce_scatter_single(rs.tensor(), in[env.rank].tensor(), ReduceOp::SUM);
      std::vector<double> ref(each, 0.0);
      for (int r = 0; r < size; ++r)
        for (int64_t i = 0; i < each; ++i) ref[i] += in[r].get(env.rank * each + i);
      env.check(rel_l2(rs, ref) < 4e-2, "reduce_scatter error " + std::to_string(rel_l2(rs, ref)));
      // all_to_all_single: piece p came from rank p.
      Buf a(DataType::kFloat32, each * size);
      comm->all_to_all_single(a.tensor(), in[env.rank].tensor());
      for (int p = 0; p < size; ++p)
        for (int64_t i = 0; i < each; i += 13) {
          float want = in[p].get(env.rank * each + i);
          env.check(std::fabs(a.get(p * each + i) - want) <= 0.07f * std::fabs(want) + 1e-2f,
                    "all_to_all element");
        }
      // The op hint "off" forces the exact path.
      std::vector<float> ones(4096, 0.5f);
      OpOptions off;
      off.hints["low_precision"] = "off";
      comm->all_reduce(make_tensor(ones.data(), 4096), ReduceOp::SUM, false, off);
      env.check(ones[100] == 0.5f * size, "op hint off did not give the exact path");
    }));
  }
  // No comm setting, but the op hint forces FP8 on one op.
  expect_ok(run_forked(3, [&](RankEnv& env) {
    auto comm = env.comm("lowp_op");
    auto in = inputs(DataType::kFloat16, 3, 999, 11);
    Buf io = in[env.rank];
    OpOptions o;
    o.hints["low_precision"] = "fp8e4m3";
    comm->all_reduce(io.tensor(), ReduceOp::SUM, false, o);
    Fp8Codec codec({});
    env.check(io.same_bits(simulate_all_reduce(codec, in, ReduceKind::kSum)), "op-hint all_reduce");
    // Forcing FP8 on MAX is an Unsupported error naming the op.
    std::vector<float> x(64, 1.0f);
    try {
      comm->all_reduce(make_tensor(x.data(), 64), ReduceOp::MAX, false, o);
      env.check(false, "MAX with low_precision did not throw");
    } catch (const Error& e) {
      env.check(e.code() == ErrorCode::kUnsupported, e.what());
      env.check(std::string(e.what()).find("all_reduce") != std::string::npos, e.what());
    }
  }));
}

TEST(CommLowp, TwoTermGatherThroughComm) {
  expect_ok(run_forked(4, [&](RankEnv& env) {
    setenv("COMMX_LOW_PRECISION_ENABLE", "fp8e4m3", 1);
    setenv("COMMX_LOW_PRECISION_MIN_BYTES", "0", 1);
    setenv("COMMX_LOW_PRECISION_GATHER", "fp8x2", 1);
    auto comm = env.comm("lowp_x2");
    auto in = inputs(DataType::kBFloat16, 4, 3000, 5);
    Buf io = in[env.rank];
    comm->all_reduce(io.tensor(), ReduceOp::AVG);
    Fp8Codec codec({});
    env.check(io.same_bits(simulate_all_reduce(codec, in, ReduceKind::kAvg, true)), "fp8x2");
  }));
  // The same chosen per op: one comm, each all_reduce with its own gather hint.
  expect_ok(run_forked(3, [&](RankEnv& env) {
    auto comm = env.comm("lowp_x2_op");
    auto in = inputs(DataType::kBFloat16, 3, 3001, 6);
    Fp8Codec codec({});
    for (bool two_term : {true, false, true}) {
      Buf io = in[env.rank];
      OpOptions o;
      o.hints["low_precision"] = "fp8e4m3";
      o.hints["low_precision_gather"] = two_term ? "fp8x2" : "fp8";
      comm->all_reduce(io.tensor(), ReduceOp::SUM, false, o);
      env.check(io.same_bits(simulate_all_reduce(codec, in, ReduceKind::kSum, two_term)),
                two_term ? "op hint fp8x2" : "op hint fp8");
    }
  }));
}

TEST(CommLowp, CollectivesOverTheTcpTransport) {
  for (int size : {2, 4}) {
    expect_ok(run_forked(size, [&](RankEnv& env) {
      CommOptions o;
      o.hints["transport"] = "tcp";
      o.hints["low_precision"] = "on";
      o.hints["low_precision_min_bytes"] = "0";
      auto comm = env.comm("lowp_tcp", o);
      auto in = inputs(DataType::kBFloat16, size, 20011, 21);
      Buf io = in[env.rank];
      comm->all_reduce(io.tensor(), ReduceOp::AVG);
      Fp8Codec codec({});
      env.check(io.same_bits(simulate_all_reduce(codec, in, ReduceKind::kAvg)), "tcp all_reduce");
      Buf rs(DataType::kBFloat16, 20011 / size);
      comm->reduce_scatter_single(rs.tensor(), in[env.rank].tensor().slice(0, rs.n * size),
                                  ReduceOp::SUM);
      std::vector<double> ref(rs.n, 0.0);
      for (int r = 0; r < size; ++r)
        for (int64_t i = 0; i < rs.n; ++i) ref[i] += in[r].get(env.rank * rs.n + i);
      env.check(rel_l2(rs, ref) < 4e-2, "tcp reduce_scatter");
    }));
  }
}
