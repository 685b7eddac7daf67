// The GPU sweep of commx-bench, the parts that run without a GPU: its command line (the flags the
// GPU scripts pass), the host references its results are checked against, the FP8 error
// measurement, and its outputs as tools/gpu_bench/report.py reads them. Layer: tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "commx/error.h"
#include "commx/numeric.h"
#include "sweep_args.h"
#include "sweep_data.h"
#include "sweep_report.h"
#include "values.h"

using namespace commx;
using namespace commx::bench;

namespace {

std::vector<const char*> argv_of(std::vector<const char*> a) {
  a.insert(a.begin(), "commx-bench");
  return a;
}

SweepOptions parse(std::vector<const char*> a) {
  auto v = argv_of(std::move(a));
  return parse_sweep_args(static_cast<int>(v.size()), v.data());
}

bool is_sweep(std::vector<const char*> a) {
  auto v = argv_of(std::move(a));
  return is_sweep_command(static_cast<int>(v.size()), v.data());
}

TEST(BenchSweepArgs, SelectedByItsOwnFlagsOnly) {
  EXPECT_TRUE(is_sweep({"--ranks", "2"}));
  EXPECT_TRUE(is_sweep({"--backend", "cuda", "--ops=all_reduce"}));
  EXPECT_TRUE(is_sweep({"--skew-us", "20"}));
  // The nccl-tests form, including its long flags that share a prefix with sweep flags.
  EXPECT_FALSE(is_sweep({"all_reduce", "--minbytes", "8", "--maxbytes", "1M", "--op", "sum"}));
  EXPECT_FALSE(is_sweep({"all_reduce", "--backend", "cpu,gloo", "--json", "x.json", "--md", "x.md"}));
  EXPECT_FALSE(is_sweep({}));
}

TEST(BenchSweepArgs, DefaultsAreTheFormerGpuBenchs) {
  SweepOptions o = parse({"--ranks", "2"});
  EXPECT_EQ(o.ranks, 2);
  EXPECT_EQ(o.backends, (std::vector<std::string>{"cuda", "nccl"}));
  EXPECT_EQ(o.dtypes, (std::vector<std::string>{"bf16", "f32"}));
  EXPECT_EQ(o.ops, (std::vector<std::string>{"all_reduce"}));
  EXPECT_EQ(o.modes, (std::vector<std::string>{"eager", "graph"}));
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 256u << 20);
  EXPECT_EQ(o.factor, 2);
  EXPECT_EQ(o.reps, 7);
  EXPECT_EQ(o.graph_ops, 20);
  EXPECT_EQ(o.json, "gpu_bench.json");
  EXPECT_EQ(o.md, "gpu_bench.md");
  EXPECT_EQ(o.error_max, 0u);
}

// The command lines of scripts/gpu_ci.sh and scripts/gpu_scaling.sh.
TEST(BenchSweepArgs, ScriptCommandLines) {
  SweepOptions lowp = parse({"--ranks", "4", "--backend", "nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8",
                             "--dtypes", "bf16", "--ops", "all_reduce", "--modes", "eager", "--min",
                             "1M", "--max", "1G", "--factor", "4", "--reps", "5", "--error", "16M",
                             "--json", "l.json", "--md", "l.md"});
  EXPECT_EQ(lowp.ranks, 4);
  EXPECT_EQ(lowp.backends.size(), 5u);
  EXPECT_EQ(lowp.min_bytes, 1u << 20);
  EXPECT_EQ(lowp.max_bytes, 1ull << 30);
  EXPECT_EQ(lowp.error_max, 16u << 20);
  EXPECT_EQ(lowp.reps, 5);
  EXPECT_EQ(sweep_sizes(lowp), (std::vector<uint64_t>{1u << 20, 4u << 20, 16u << 20, 64u << 20,
                                                      256u << 20, 1u << 30}));
  SweepOptions skew = parse({"--ranks", "2", "--backend", "cuda,nccl", "--dtypes", "bf16", "--ops",
                             "all_gather,reduce_scatter,all_to_all", "--modes", "graph,eager",
                             "--min", "1K", "--max", "256M", "--factor", "8", "--algo", "tree",
                             "--skew-us", "20", "--gap-us", "2.5"});
  EXPECT_EQ(skew.ops.size(), 3u);
  EXPECT_EQ(skew.algo, "tree");
  EXPECT_DOUBLE_EQ(skew.skew_us, 20);
  EXPECT_DOUBLE_EQ(skew.gap_us, 2.5);
  EXPECT_EQ(sweep_sizes(skew).front(), 1024u);
  EXPECT_EQ(sweep_sizes(skew).back(), 256u << 20);  // 1K * 8^6
}

TEST(BenchSweepArgs, Errors) {
  EXPECT_THROW(parse({"--ranks", "0"}), Error);
  EXPECT_THROW(parse({"--ranks", "two"}), Error);
  EXPECT_THROW(parse({"--ranks"}), Error);
  EXPECT_THROW(parse({"--modes", "lazy"}), Error);
  EXPECT_THROW(parse({"--ops", "barrier"}), Error);
  EXPECT_THROW(parse({"--dtypes", "f64"}), Error);
  EXPECT_THROW(parse({"--factor", "1"}), Error);
  EXPECT_THROW(parse({"--min", "1M", "--max", "1K"}), Error);
  EXPECT_THROW(parse({"--backend", "cuda+fp4"}), Error);
  EXPECT_THROW(parse({"--backend", "nccl+fp8x2"}), Error);
  EXPECT_THROW(parse({"--ranks", "2", "-b", "8"}), Error);         // an nccl-tests flag
  EXPECT_THROW(parse({"all_reduce", "--ranks", "2"}), Error);      // a positional collective
  try {
    parse({"--modes", "lazy"});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lazy"), std::string::npos) << e.what();
  }
}

TEST(BenchSweepArgs, BackendVariants) {
  SweepBackend cuda = parse_sweep_backend("cuda");
  EXPECT_FALSE(cuda.lowp());
  EXPECT_TRUE(sweep_backend_hints(cuda).empty());
  SweepBackend fp8 = parse_sweep_backend("cuda+fp8");
  EXPECT_TRUE(fp8.lowp_commx());
  EXPECT_EQ(sweep_backend_hints(fp8).at("low_precision"), "fp8e4m3");
  EXPECT_EQ(sweep_backend_hints(fp8).at("low_precision_min_bytes"), "0");
  EXPECT_EQ(sweep_backend_hints(fp8).count("low_precision_gather"), 0u);
  EXPECT_EQ(sweep_backend_hints(parse_sweep_backend("cuda+fp8x2")).at("low_precision_gather"),
            "fp8x2");
  SweepBackend native = parse_sweep_backend("nccl+fp8");
  EXPECT_TRUE(native.native_fp8());
  EXPECT_FALSE(native.lowp_commx());
  EXPECT_EQ(native.backend, "nccl");
  EXPECT_TRUE(sweep_backend_hints(native).empty());
}

// What each rank would hold after a correct op, built from the inputs on the host.
std::vector<uint8_t> expected_output(const std::string& op, DataType t, int64_t n, int rank,
                                     int world) {
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < world; ++r) in.push_back(sweep_pattern(t, n, r, 1.0));
  const size_t es = dtype_size(t);
  const int64_t chunk = n / world;
  std::vector<double> out(op == "reduce_scatter" ? chunk : n);
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    if (op == "all_reduce")
      for (int r = 0; r < world; ++r) out[i] += load_value(t, in[r].data(), i);
    if (op == "reduce_scatter")
      for (int r = 0; r < world; ++r) out[i] += load_value(t, in[r].data(), rank * chunk + i);
    if (op == "all_gather") out[i] = load_value(t, in[i / chunk].data(), i % chunk);
    if (op == "all_to_all")
      out[i] = load_value(t, in[i / chunk].data(), rank * chunk + i % chunk);
  }
  std::vector<uint8_t> bytes(n * es);
  for (size_t i = 0; i < out.size(); ++i) {
    float f = static_cast<float>(out[i]);
    if (t == DataType::kBFloat16) {
      uint16_t h = float_to_bf16(f);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      std::memcpy(&bytes[i * 4], &f, 4);
    }
  }
  return bytes;
}

TEST(BenchSweepData, CountWrongAgreesWithAnIndependentReference) {
  const int world = 3;
  const int64_t n = 3 * 40;
  for (DataType t : {DataType::kBFloat16, DataType::kFloat32})
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"})
      for (int rank = 0; rank < world; ++rank) {
        auto got = expected_output(op, t, n, rank, world);
        EXPECT_EQ(count_wrong(op, t, got.data(), n, rank, world), 0) << op << " rank " << rank;
        // Two elements off: both counted.
        const size_t es = dtype_size(t);
        std::memset(&got[0], 0, es);
        std::memset(&got[5 * es], 0x7f, es);
        EXPECT_EQ(count_wrong(op, t, got.data(), n, rank, world), 2) << op << " rank " << rank;
      }
}

TEST(BenchSweepData, ErrorAgainstFloat64) {
  const int world = 2;
  const int64_t n = 1001;  // odd: the last element is the fixed 0.5
  auto a = normal_data(n, 0), b = normal_data(n, 1);
  EXPECT_EQ(a, normal_data(n, 0));  // reproducible
  EXPECT_NE(a, b);
  double mean = 0, var = 0;
  for (double x : a) mean += x / n;
  for (double x : a) var += (x - mean) * (x - mean) / n;
  EXPECT_NEAR(mean, 0, 0.15);
  EXPECT_NEAR(var, 1, 0.2);
  // The f32 sum of the f32 inputs: error at f32 rounding.
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = static_cast<float>(a[i]) + static_cast<float>(b[i]);
  double exact = relative_error(DataType::kFloat32, false,
                                reinterpret_cast<const uint8_t*>(sum.data()), n, world);
  EXPECT_LT(exact, 1e-7);
  // The sum cast to E4M3 (3 mantissa bits): a few percent, as FP8 collectives report.
  std::vector<uint8_t> fp8(n);
  for (int64_t i = 0; i < n; ++i) fp8[i] = float_to_fp8e4m3(sum[i]);
  double coarse = relative_error(DataType::kFloat32, true, fp8.data(), n, world);
  EXPECT_GT(coarse, 5e-3);
  EXPECT_LT(coarse, 6e-2);
  // Inputs as given to the op: bf16 rounds, fp8 takes one byte each.
  EXPECT_EQ(to_input_bytes(a, DataType::kBFloat16, false).size(), 2u * n);
  EXPECT_EQ(to_input_bytes(a, DataType::kBFloat16, true).size(), 1u * n);
  EXPECT_EQ(to_input_bytes(a, DataType::kFloat32, false).size(), 4u * n);
}

TEST(BenchSweepData, BusFactors) {
  EXPECT_DOUBLE_EQ(sweep_bus_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(sweep_bus_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(sweep_bus_factor("all_to_all", 2), 0.5);
}

std::vector<SweepRow> sample_rows() {
  std::vector<SweepRow> rows;
  for (const char* be : {"cuda", "nccl", "cuda+fp8"})
    for (const char* mode : {"eager", "graph"})
      for (uint64_t b : {1024ull, 1048576ull}) {
        SweepRow r{be, "all_reduce", "bfloat16", mode, b};
        r.us = std::string(be) == "nccl" ? 10.0 : 4.0;
        r.algbw = b / (r.us * 1e-6) / 1e9;
        r.busbw = r.algbw;
        r.error = std::string(be) == "cuda+fp8" ? 0.02 : -1;
        rows.push_back(r);
      }
  return rows;
}

TEST(BenchSweepReport, RowLineKeepsTheColumnsScriptsCut) {
  SweepRow r{"cuda", "all_reduce", "bfloat16", "graph", 1024};
  r.us = 2.5;
  r.algbw = 0.41;
  r.busbw = 0.41;
  std::istringstream line(sweep_row_line(r));
  std::vector<std::string> f;
  for (std::string w; line >> w;) f.push_back(w);
  ASSERT_GE(f.size(), 14u);
  EXPECT_EQ(f[3], "graph");  // awk's $4
  EXPECT_EQ(f[4], "1024");   // $5
  EXPECT_EQ(f[5], "2.50");   // $6
  EXPECT_EQ(f[12], "wrong");
  EXPECT_EQ(f[13], "0");
  EXPECT_EQ(sweep_row_line(r).find("error"), std::string::npos);
  r.error = 0.0123;
  EXPECT_NE(sweep_row_line(r).find("error 0.012300"), std::string::npos);
  EXPECT_NE(sweep_init_line("nccl", 2, 1.3, 2.5).find("init  nccl  ranks 2 create 1.3 ms"),
            std::string::npos);
}

TEST(BenchSweepReport, MarkdownComparesAgainstNccl) {
  SweepOptions o;
  std::string md = sweep_markdown("GPU X", o, sample_rows());
  EXPECT_NE(md.find("Device: GPU X x2 ranks. Median of 7 batches"), std::string::npos);
  EXPECT_NE(md.find("| all_reduce | bfloat16 | graph | 1024 | 4.00 | 10.00 | 0.40 |"),
            std::string::npos) << md;
  // The variant against nccl: 10 / 4 = 2.5x, with its error.
  EXPECT_NE(md.find("| cuda+fp8 | all_reduce | bfloat16 | eager | 1024 | 4.00 | 10.000000 | 2.50 |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| 0.020000 | - |"), std::string::npos) << md;
}

// The JSON is what tools/gpu_bench/report.py reads: run it on the rows and check its table.
TEST(BenchSweepReport, JsonFeedsTheGpuReport) {
  SweepOptions o;
  o.skew_us = 20;
  std::string dir = ::testing::TempDir() + "/bench_sweep_report";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  std::ofstream(dir + "/allreduce.json") << sweep_json("GPU X", o, sample_rows());
  const char* code =
      "import json,sys; d=json.load(open(sys.argv[1])); r=d[\"rows\"];"
      "assert d[\"device\"]==\"GPU X\" and d[\"ranks\"]==2 and len(r)==12;"
      "keys={\"backend\",\"op\",\"dtype\",\"mode\",\"bytes\",\"time_us\",\"algbw_gbps\","
      "\"busbw_gbps\",\"wrong\"};"
      "assert all(keys <= set(x) for x in r);"
      "assert all((x[\"mode\"]==\"eager\")==(\"skew_us\" in x) for x in r);"
      "assert [x[\"skew_us\"] for x in r if \"skew_us\" in x][0]==20;"
      "assert all((\"error\" in x)==(x[\"backend\"]==\"cuda+fp8\") for x in r)";
  std::string check = "python3 -c '" + std::string(code) + "' " + dir + "/allreduce.json";
  EXPECT_EQ(std::system(check.c_str()), 0);
  std::string report = std::string("python3 ") + COMMX_SOURCE_DIR +
                       "/tools/gpu_bench/report.py " + dir + " > /dev/null";
  ASSERT_EQ(std::system(report.c_str()), 0);
  std::ifstream in(dir + "/report.md");
  std::stringstream md;
  md << in.rdbuf();
  EXPECT_NE(md.str().find("| all_reduce | bfloat16 | graph | 1 KiB | 4.00 | 10.00 | 0.40 |"),
            std::string::npos)
      << md.str();
}

}  // namespace
