// Tests of the low-precision collectives with threads as ranks over an in-process Transport:
// bit-identical results on every rank, equality with a serial simulation of the documented
// schedule, error against a float64 reference, odd sizes, world sizes 1..8, bad input, timeout.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "commx/error.h"
#include "lowp/inproc_transport.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_test_util.h"
#include "lowp/simulate.h"

using namespace commx;
using namespace commx::lowp;
using namespace commx::testing;

namespace {

const DataType kDtypes[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16};

Deadline soon(int ms = 20000) { return Clock::now() + std::chrono::milliseconds(ms); }

LowpContext make_ctx(Transport& t, int rank, int size, const Fp8Codec& codec) {
  return LowpContext{t,     rank,    size, soon(),
                     codec, nullptr, 0,    "[test rank " + std::to_string(rank) + "] "};
}

std::vector<double> sum_ref(const std::vector<Buf>& in, ReduceKind kind) {
  std::vector<double> r(in[0].n, 0.0);
  for (const Buf& b : in)
    for (int64_t i = 0; i < b.n; ++i) r[i] += b.get(i);
  if (kind == ReduceKind::kAvg)
    for (double& v : r) v /= static_cast<double>(in.size());
  return r;
}

}  // namespace

TEST(LowpCollectives, AllReduceBitIdenticalMatchesScheduleAndReference) {
  Fp8Codec codec({Fp8Format::kE4M3, 64});
  int cases = 0;
  for (int size = 1; size <= 8; ++size) {
    for (DataType dt : kDtypes) {
      for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kAvg}) {
        for (int64_t n : {0, 1, 63, 257, 3001}) {
          std::vector<Buf> in, out;
          for (int r = 0; r < size; ++r) {
            in.push_back(make_buf(dt, gen(Dist::kNormal, n, 100 * size + r)));
            out.emplace_back(dt, n);
          }
          run_ranks(size, [&](int r, Transport& t) {
            lowp_all_reduce(make_ctx(t, r, size, codec), in[r].tensor(), out[r].tensor(), kind);
          });
          SCOPED_TRACE(::testing::Message() << "size " << size << " " << dtype_name(dt) << " "
                                            << reduce_kind_name(kind) << " n " << n);
          for (int r = 1; r < size; ++r) ASSERT_TRUE(out[r].same_bits(out[0])) << "rank " << r;
          ASSERT_TRUE(out[0].same_bits(simulate_all_reduce(codec, in, kind)));
          if (n > 100) {
            EXPECT_LT(rel_l2(out[0], sum_ref(in, kind)), 4e-2);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 8 * 3 * 2 * 5);
}

TEST(LowpCollectives, AllReduceInPlaceAndE5M2) {
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    Fp8Codec codec({fmt, 256});
    const int size = 4;
    const int64_t n = 5000;
    std::vector<Buf> in, io;
    for (int r = 0; r < size; ++r) {
      in.push_back(make_buf(DataType::kBFloat16, gen(Dist::kNormal, n, 7 + r)));
      io.push_back(in.back());
    }
    run_ranks(size, [&](int r, Transport& t) {
      lowp_all_reduce(make_ctx(t, r, size, codec), io[r].tensor(), io[r].tensor(),
                      ReduceKind::kSum);
    });
    for (int r = 1; r < size; ++r) EXPECT_TRUE(io[r].same_bits(io[0]));
    EXPECT_TRUE(io[0].same_bits(simulate_all_reduce(codec, in, ReduceKind::kSum)));
    EXPECT_LT(rel_l2(io[0], sum_ref(in, ReduceKind::kSum)), fmt == Fp8Format::kE4M3 ? 4e-2 : 8e-2);
  }
}

TEST(LowpCollectives, AllReduceTwoTermGather) {
  Fp8Codec codec({Fp8Format::kE4M3, 128});
  for (int size : {1, 2, 3, 5, 8}) {
    for (DataType dt : kDtypes) {
      const int64_t n = 2000;
      std::vector<Buf> in, out;
      for (int r = 0; r < size; ++r) {
        in.push_back(make_buf(dt, gen(Dist::kNormal, n, 31 * size + r)));
        out.emplace_back(dt, n);
      }
      in[0].set(17, INFINITY);
      run_ranks(size, [&](int r, Transport& t) {
        LowpContext c = make_ctx(t, r, size, codec);
        c.two_term_gather = true;
        lowp_all_reduce(c, in[r].tensor(), out[r].tensor(), ReduceKind::kAvg);
      });
      for (int r = 1; r < size; ++r) ASSERT_TRUE(out[r].same_bits(out[0])) << "rank " << r;
      ASSERT_TRUE(out[0].same_bits(simulate_all_reduce(codec, in, ReduceKind::kAvg, true)));
      EXPECT_EQ(out[0].get(17), INFINITY);
      for (auto& b : in) b.set(17, 0.0f);  // leave the Inf out of the error
      out[0].set(17, 0.0f);
      // Only the peers' input quantization is left: well under the one-term error.
      EXPECT_LT(rel_l2(out[0], sum_ref(in, ReduceKind::kAvg)), size == 1 ? 1e-2 : 3e-2)
          << size << " " << dtype_name(dt);
    }
  }
}

TEST(LowpCollectives, ReduceScatterMatchesScheduleAndReference) {
  Fp8Codec codec({Fp8Format::kE4M3, 128});
  for (int size = 1; size <= 8; ++size) {
    for (DataType dt : kDtypes) {
      for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kAvg}) {
        for (int64_t n : {0, 1, 300}) {
          // ins[r][p]: rank r's contribution to rank p.
          std::vector<std::vector<Buf>> ins(size);
          std::vector<Buf> out;
          for (int r = 0; r < size; ++r) {
            for (int p = 0; p < size; ++p)
              ins[r].push_back(make_buf(dt, gen(Dist::kUniform, n, 1000 * r + p)));
            out.emplace_back(dt, n);
          }
          run_ranks(size, [&](int r, Transport& t) {
            std::vector<Tensor> ts;
            for (auto& b : ins[r]) ts.push_back(b.tensor());
            lowp_reduce_scatter(make_ctx(t, r, size, codec), ts, out[r].tensor(), kind);
          });
          SCOPED_TRACE(::testing::Message()
                       << "size " << size << " " << dtype_name(dt) << " n " << n);
          for (int p = 0; p < size; ++p) {
            // Serial: rank order, own exact, others through the codec.
            std::vector<float> acc(n, 0.0f);
            std::vector<Buf> contrib;
            for (int r = 0; r < size; ++r) {
              if (r == p) {
                for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + ins[r][p].get(i);
              } else if (n > 0) {
                std::vector<uint8_t> e(codec.encoded_bytes(n));
                codec.encode(ins[r][p].bytes.data(), dt, n, e.data());
                codec.accumulate(acc.data(), e.data(), n);
              }
              contrib.push_back(ins[r][p]);
            }
            Buf expect(dt, n);
            for (int64_t i = 0; i < n; ++i)
              expect.set(i, kind == ReduceKind::kAvg ? acc[i] / static_cast<float>(size) : acc[i]);
            ASSERT_TRUE(out[p].same_bits(expect)) << "rank " << p;
            if (n > 100) {
              EXPECT_LT(rel_l2(out[p], sum_ref(contrib, kind)), 4e-2);
            }
          }
        }
      }
    }
  }
}

TEST(LowpCollectives, AllGatherIdenticalOnEveryRank) {
  Fp8Codec codec({Fp8Format::kE4M3, 256});
  for (int size = 1; size <= 8; ++size) {
    for (DataType dt : kDtypes) {
      for (int64_t n : {0, 1, 777}) {
        std::vector<Buf> in;
        std::vector<std::vector<Buf>> outs(size);
        for (int r = 0; r < size; ++r) {
          in.push_back(make_buf(dt, gen(Dist::kStudentT, n, 50 + r)));
          for (int p = 0; p < size; ++p) outs[r].emplace_back(dt, n);
        }
        run_ranks(size, [&](int r, Transport& t) {
          std::vector<Tensor> ts;
          for (auto& b : outs[r]) ts.push_back(b.tensor());
          lowp_all_gather(make_ctx(t, r, size, codec), in[r].tensor(), ts);
        });
        for (int p = 0; p < size; ++p) {
          Buf expect(dt, n);
          if (n > 0) {
            std::vector<uint8_t> e(codec.encoded_bytes(n));
            codec.encode(in[p].bytes.data(), dt, n, e.data());
            codec.decode(e.data(), n, expect.bytes.data(), dt);
          }
          for (int r = 0; r < size; ++r) ASSERT_TRUE(outs[r][p].same_bits(expect)) << r << " " << p;
          if (n > 100) {
            std::vector<double> ref(n);
            for (int64_t i = 0; i < n; ++i) ref[i] = in[p].get(i);
            EXPECT_LT(rel_l2(outs[0][p], ref), 3e-2);
          }
        }
      }
    }
  }
}

TEST(LowpCollectives, AllToAllWithUnevenCounts) {
  Fp8Codec codec({Fp8Format::kE4M3, 128});
  for (int size = 1; size <= 8; ++size) {
    for (DataType dt : kDtypes) {
      // ins[r][p] has 37 * (r + p) + 1 elements (counts differ per pair, one may be tiny).
      auto cnt = [](int r, int p) { return int64_t{37} * (r + p) + (r == p ? 0 : 1); };
      std::vector<std::vector<Buf>> ins(size), outs(size);
      for (int r = 0; r < size; ++r)
        for (int p = 0; p < size; ++p) {
          ins[r].push_back(make_buf(dt, gen(Dist::kMixedScale, cnt(r, p), 10 * r + p)));
          outs[r].emplace_back(dt, cnt(p, r));
        }
      run_ranks(size, [&](int r, Transport& t) {
        std::vector<Tensor> a, b;
        for (auto& x : ins[r]) a.push_back(x.tensor());
        for (auto& x : outs[r]) b.push_back(x.tensor());
        lowp_all_to_all(make_ctx(t, r, size, codec), a, b);
      });
      for (int r = 0; r < size; ++r)
        for (int p = 0; p < size; ++p) {
          const Buf& src = ins[p][r];  // p sent this to r
          Buf expect = src;
          if (p != r && src.n > 0) {
            std::vector<uint8_t> e(codec.encoded_bytes(src.n));
            codec.encode(src.bytes.data(), dt, src.n, e.data());
            codec.decode(e.data(), src.n, expect.bytes.data(), dt);
          }
          ASSERT_TRUE(outs[r][p].same_bits(expect)) << "size " << size << " " << r << "<-" << p;
        }
    }
  }
}

TEST(LowpCollectives, ScratchReusedAcrossOpsGivesTheSameResults) {
  Fp8Codec codec({Fp8Format::kE4M3, 64});
  const int size = 3;
  std::vector<LowpScratch> scratch(size);
  for (int64_t n : {5000, 10, 2999, 0, 7000}) {
    std::vector<Buf> in, a, b;
    for (int r = 0; r < size; ++r) {
      in.push_back(make_buf(DataType::kFloat32, gen(Dist::kNormal, n, n + r)));
      a.emplace_back(DataType::kFloat32, n);
      b.emplace_back(DataType::kFloat32, n);
    }
    for (bool two : {false, true}) {
      run_ranks(size, [&](int r, Transport& t) {
        LowpContext c = make_ctx(t, r, size, codec);
        c.two_term_gather = two;
        lowp_all_reduce(c, in[r].tensor(), a[r].tensor(), ReduceKind::kSum);
        c.scratch = &scratch[r];
        lowp_all_reduce(c, in[r].tensor(), b[r].tensor(), ReduceKind::kSum);
        std::vector<Tensor> outs;
        std::vector<Buf> g(size, Buf(DataType::kFloat32, n));
        for (auto& x : g) outs.push_back(x.tensor());
        lowp_all_gather(c, in[r].tensor(), outs);  // also through the scratch
      });
      for (int r = 0; r < size; ++r) EXPECT_TRUE(a[r].same_bits(b[r])) << n << " " << r;
    }
  }
  EXPECT_GT(scratch[0].gather.size(), 0u);
}

TEST(LowpCollectives, BadInputIsAClearError) {
  Fp8Codec codec({});
  std::vector<float> a(10), b(11);
  EXPECT_THROW(run_ranks(2,
                         [&](int r, Transport& t) {
                           lowp_all_reduce(make_ctx(t, r, 2, codec), make_tensor(a.data(), 10),
                                           make_tensor(b.data(), 11), ReduceKind::kSum);
                         }),
               Error);
  try {
    run_ranks(2, [&](int r, Transport& t) {
      lowp_all_reduce(make_ctx(t, r, 2, codec), make_tensor(a.data(), 10),
                      make_tensor(a.data(), 10), ReduceKind::kMax);
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("[test rank"), std::string::npos) << e.what();
  }
  try {
    std::vector<Tensor> outs{make_tensor(a.data(), 10)};  // size 2 needs two outputs
    run_ranks(2, [&](int r, Transport& t) {
      lowp_all_gather(make_ctx(t, r, 2, codec), make_tensor(a.data(), 10), outs);
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("expected 2"), std::string::npos) << e.what();
  }
  // Ranks disagreeing on the all_to_all counts: an error, not a hang.
  std::vector<std::vector<float>> data(2, std::vector<float>(64, 1.0f));
  try {
    run_ranks(2, [&](int r, Transport& t) {
      std::vector<Tensor> ins{make_tensor(data[r].data(), 8), make_tensor(data[r].data() + 8, 8)};
      std::vector<Tensor> outs{make_tensor(data[r].data() + 16, r == 0 ? 8 : 9),
                               make_tensor(data[r].data() + 32, 8)};
      lowp_all_to_all(make_ctx(t, r, 2, codec), ins, outs);
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
}

TEST(LowpCollectives, RanksWithDifferentFormatsGetAClearError) {
  std::vector<std::vector<float>> d(2, std::vector<float>(1000, 1.0f));
  for (int op = 0; op < 3; ++op) {
    try {
      run_ranks(2, [&](int r, Transport& t) {
        Fp8Codec codec({r == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2, 256});
        LowpContext c = make_ctx(t, r, 2, codec);
        Tensor x = make_tensor(d[r].data(), 1000);
        if (op == 0) lowp_all_reduce(c, x, x, ReduceKind::kSum);
        std::vector<Tensor> two{make_tensor(d[r].data(), 500), make_tensor(d[r].data() + 500, 500)};
        if (op == 1) lowp_all_gather(c, make_tensor(d[r].data(), 500), two);
        if (op == 2) lowp_all_to_all(c, two, two);
      });
      FAIL() << "op " << op;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("same low-precision settings"), std::string::npos)
          << e.what();
    }
  }
}

TEST(LowpCollectives, MissingPeerTimesOut) {
  Fp8Codec codec({});
  std::vector<float> a(1000, 1.0f);
  auto t0 = Clock::now();
  try {
    run_ranks(2, [&](int r, Transport& t) {
      if (r == 1) return;  // never joins
      LowpContext c = make_ctx(t, r, 2, codec);
      c.deadline = Clock::now() + std::chrono::milliseconds(200);
      lowp_all_reduce(c, make_tensor(a.data(), 1000), make_tensor(a.data(), 1000),
                      ReduceKind::kSum);
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(LowpCollectives, StatsCountNonFiniteAndPropagateIdentically) {
  Fp8Codec codec({Fp8Format::kE4M3, 64});
  const int size = 3;
  const int64_t n = 640;
  std::vector<Buf> io;
  for (int r = 0; r < size; ++r)
    io.push_back(make_buf(DataType::kFloat32, gen(Dist::kNormal, n, r)));
  io[1].set(5, NAN);
  io[2].set(300, INFINITY);
  io[0].set(301, INFINITY);
  io[0].set(600, INFINITY);
  io[1].set(600, -INFINITY);  // inf + -inf = NaN
  std::vector<CodecStats> st(size);
  run_ranks(size, [&](int r, Transport& t) {
    LowpContext c = make_ctx(t, r, size, codec);
    c.stats = &st[r];
    lowp_all_reduce(c, io[r].tensor(), io[r].tensor(), ReduceKind::kSum);
  });
  for (int r = 1; r < size; ++r) EXPECT_TRUE(io[r].same_bits(io[0]));
  EXPECT_TRUE(std::isnan(io[0].get(5)));
  EXPECT_EQ(io[0].get(300), INFINITY);
  EXPECT_EQ(io[0].get(301), INFINITY);
  EXPECT_TRUE(std::isnan(io[0].get(600)));
  EXPECT_TRUE(std::isfinite(io[0].get(4)));
  uint64_t nonfinite = 0, elements = 0;
  for (auto& s : st) {
    nonfinite += s.nonfinite_values;
    elements += s.elements;
    EXPECT_EQ(s.saturated, 0u);
  }
  EXPECT_GT(nonfinite, 5u);
  EXPECT_EQ(elements, static_cast<uint64_t>(n * (size - 1) + n));  // peers' slices + re-quantize
}
