// The low-precision collectives over the real TCP transport (threads as ranks on loopback):
// bit-identical all_reduce matching the serial schedule at 2..5 ranks, all_gather, all_to_all,
// and a clear size-mismatch error when ranks disagree on the codec settings.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "commx/error.h"
#include "commx/store.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_test_util.h"
#include "lowp/simulate.h"
#include "transport/tcp_transport.h"

using namespace commx;
using namespace commx::lowp;
using namespace commx::testing;

namespace {

// Runs fn(rank, transport) on `n` threads over TCP transports sharing one in-process store.
void run_tcp(int n, const std::string& name, const std::function<void(int, Transport&)>& fn) {
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(make_tcp_transport(r, n, store, name, {}));
  std::vector<std::exception_ptr> errs(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        fn(r, *ts[r]);
      } catch (...) {
        errs[r] = std::current_exception();
        for (auto& t : ts) t->abort();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : errs) {  // the root cause first, not the Aborted it caused elsewhere
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      if (err.code() != ErrorCode::kAborted) throw;
    }
  }
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

Deadline soon() { return Clock::now() + std::chrono::seconds(30); }

}  // namespace

TEST(LowpTcp, AllReduceBitIdenticalOverTcp) {
  for (int size : {2, 3, 5}) {
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
      Fp8Codec codec({Fp8Format::kE4M3, 256});
      const int64_t n = 100003;
      std::vector<Buf> in, out;
      for (int r = 0; r < size; ++r) {
        in.push_back(make_buf(dt, gen(Dist::kStudentT, n, 70 + r)));
        out.emplace_back(dt, n);
      }
      std::vector<LowpScratch> sc(size);
      run_tcp(size, "lowp_ar", [&](int r, Transport& t) {
        LowpContext c{t, r, size, soon(), codec, nullptr, 1, ""};
        c.scratch = &sc[r];
        lowp_all_reduce(c, in[r].tensor(), out[r].tensor(), ReduceKind::kSum);
      });
      Buf expect = simulate_all_reduce(codec, in, ReduceKind::kSum);
      for (int r = 0; r < size; ++r)
        EXPECT_TRUE(out[r].same_bits(expect)) << "size " << size << " rank " << r;
    }
  }
}

TEST(LowpTcp, AllGatherAndAllToAllOverTcp) {
  const int size = 4;
  const int64_t n = 3001;
  Fp8Codec codec({Fp8Format::kE5M2, 128});
  std::vector<Buf> in;
  std::vector<std::vector<Buf>> g(size), a(size);
  for (int r = 0; r < size; ++r) {
    in.push_back(make_buf(DataType::kFloat16, gen(Dist::kMixedScale, n * size, r)));
    for (int p = 0; p < size; ++p) {
      g[r].emplace_back(DataType::kFloat16, n * size);
      a[r].emplace_back(DataType::kFloat16, n);
    }
  }
  run_tcp(size, "lowp_ag", [&](int r, Transport& t) {
    LowpContext c{t, r, size, soon(), codec, nullptr, 2, ""};
    std::vector<Tensor> outs, ins, aouts;
    for (auto& b : g[r]) outs.push_back(b.tensor());
    lowp_all_gather(c, in[r].tensor(), outs);
    for (int p = 0; p < size; ++p) ins.push_back(in[r].tensor().slice(p * n, n));
    for (auto& b : a[r]) aouts.push_back(b.tensor());
    lowp_all_to_all(c, ins, aouts);
  });
  for (int r = 1; r < size; ++r)
    for (int p = 0; p < size; ++p) EXPECT_TRUE(g[r][p].same_bits(g[0][p]));
  for (int r = 0; r < size; ++r)
    for (int p = 0; p < size; ++p) {
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = in[p].get(r * n + i);
      EXPECT_LT(rel_l2(a[r][p], ref), p == r ? 1e-12 : 8e-2) << r << " " << p;
    }
}

TEST(LowpTcp, MismatchedBlockSizesAreAClearError) {
  std::vector<float> x(10000, 1.0f);
  try {
    run_tcp(2, "lowp_bad", [&](int r, Transport& t) {
      Fp8Codec codec({Fp8Format::kE4M3, r == 0 ? 128 : 256});
      LowpContext c{t, r, 2, soon(), codec, nullptr, 3, "[r" + std::to_string(r) + "] "};
      std::vector<float> mine = x;
      lowp_all_reduce(c, make_tensor(mine.data(), 10000), make_tensor(mine.data(), 10000),
                      ReduceKind::kSum);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
}
