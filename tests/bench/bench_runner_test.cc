// The bench's checker must catch wrong results: a backend that corrupts one element per op (or
// does nothing) is measured in-process with one rank, and #wrong must count exactly those
// elements; a correct one-rank backend gives 0. Also the host reference itself. Layer: tests.
#include <gtest/gtest.h>

#include <cstring>

#include "commx/backend.h"
#include "commx/comm.h"
#include "commx/store.h"
#include "core/host_work.h"
#include "memory.h"
#include "runner.h"
#include "values.h"

using namespace commx;
using namespace commx::bench;

namespace {

enum class Fault { kNone, kCorruptOne, kSkipCopy };

// One-rank backend: data movement copies input to output, reductions are the identity; `fault`
// breaks the result on purpose.
class OneRankBackend : public Backend {
 public:
  explicit OneRankBackend(Fault f) : fault_(f) {}
  std::string name() const override { return "one_rank"; }
  void init(const BackendContext&) override {}
  bool supports(Collective, DataType, ReduceKind) const override { return true; }
  void abort() override {}
  bool accepts_device(const Device& d) const override { return d.is_cpu(); }
  Work run(const OpDesc& op, bool) override {
    auto w = std::make_shared<HostWork>();
    const Tensor* dst = nullptr;
    const Tensor* src = nullptr;
    switch (op.type) {
      case OpType::kAllGatherSingle:
      case OpType::kReduceScatterSingle:
      case OpType::kAllToAllSingle:
      case OpType::kGatherSingle:
        src = &op.input, dst = &op.output;
        break;
      case OpType::kScatter:
        src = &op.inputs[0], dst = &op.output;
        break;
      default:
        dst = &op.output;  // in place: nothing to move with one rank
    }
    if (fault_ != Fault::kSkipCopy && src && dst->data != src->data && dst->nbytes())
      std::memmove(dst->data, src->data, dst->nbytes());
    if (fault_ == Fault::kCorruptOne && dst && dst->count > 0 && dst->dtype == DataType::kFloat32)
      static_cast<float*>(dst->data)[dst->count - 1] += 100.f;
    w->set_completed();
    return Work(w);
  }

 private:
  Fault fault_;
};

int64_t run_bench(Fault f, const std::string& colls, bool inplace_only = false) {
  static int n = 0;
  std::string name = "one_rank_" + std::to_string(n++);
  register_backend(name, [f] { return std::make_unique<OneRankBackend>(f); });
  register_backend("one_rank_ok", [] { return std::make_unique<OneRankBackend>(Fault::kNone); });
  CommOptions co;
  co.rank = 0;
  co.size = 1;
  co.store = make_hash_store();
  auto control = Comm::create("one_rank_ok", Device::cpu(), "control-" + name, co);
  std::vector<BenchComm> comms{
      {BackendSpec{name, ""}, Comm::create(name, Device::cpu(), name, co)}};
  std::vector<const char*> argv = {"commx-bench", colls.c_str(), "-b", "4", "-e", "4K",
                                   "-f",          "8",           "-w", "0", "-n", "1"};
  if (inplace_only) argv.insert(argv.end(), {"--inplace", "1"});
  Options o = parse_args(static_cast<int>(argv.size()), argv.data());
  auto mem = make_host_memory();
  Runner r(o, *control, comms, *mem, nullptr);
  auto rows = r.run();
  EXPECT_FALSE(rows.empty());
  return r.total_wrong();
}

TEST(BenchRunner, CorrectBackendHasNoWrongElements) {
  EXPECT_EQ(run_bench(Fault::kNone, "all"), 0);
}

TEST(BenchRunner, CountsCorruptedElements) {
  // all_reduce: sizes 4..4K by 8 -> 4 sizes, in place only -> one corrupted element each.
  EXPECT_EQ(run_bench(Fault::kCorruptOne, "all_reduce"), 4);
  // all_gather out of place and in place: 2 x 4 sizes.
  EXPECT_EQ(run_bench(Fault::kCorruptOne, "all_gather"), 8);
}

TEST(BenchRunner, CountsUnwrittenOutputs) {
  // An out-of-place all_to_all that never writes its output: every element is wrong
  // (1 + 8 + 64 + 512 elements for 4 B .. 2 KiB), the in-place runs are right.
  EXPECT_EQ(run_bench(Fault::kSkipCopy, "all_to_all"), 1 + 8 + 64 + 512);
  EXPECT_EQ(run_bench(Fault::kSkipCopy, "all_to_all", true), 0);
}

TEST(BenchValues, ReferenceAndTolerance) {
  double v[3] = {1, -3, 2};
  EXPECT_EQ(reduce_reference(DataType::kFloat32, ReduceOp::SUM, v, 3), 0);
  EXPECT_EQ(reduce_reference(DataType::kFloat32, ReduceOp::PRODUCT, v, 3), -6);
  EXPECT_EQ(reduce_reference(DataType::kInt32, ReduceOp::MIN, v, 3), -3);
  EXPECT_EQ(reduce_reference(DataType::kFloat64, ReduceOp::AVG, v, 3), 0);
  EXPECT_EQ(reduce_reference(DataType::kFloat32, ReduceOp::premul_sum(2.0), v, 3), 0);
  double w[2] = {100, 100};
  EXPECT_EQ(reduce_reference(DataType::kInt8, ReduceOp::SUM, w, 2), -56);  // wraps like int8
  double b[3] = {1, 1, 0};
  EXPECT_EQ(reduce_reference(DataType::kBool, ReduceOp::SUM, b, 3), 1);
  EXPECT_EQ(reduce_reference(DataType::kBool, ReduceOp::MIN, b, 3), 0);
  EXPECT_TRUE(values_match(DataType::kFloat32, 6.0, 6.0, 2, true));
  EXPECT_FALSE(values_match(DataType::kFloat32, 6.01, 6.0, 2, true));
  EXPECT_TRUE(values_match(DataType::kBFloat16, 6.0, 6.03, 2, true));
  EXPECT_FALSE(values_match(DataType::kBFloat16, 6.0, 6.03, 2, false));  // moved data is exact
  EXPECT_FALSE(values_match(DataType::kInt32, 5, 6, 2, true));
  // Every input value survives the trip through every dtype exactly.
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat8E4M3,
                     DataType::kInt8, DataType::kUInt8, DataType::kFloat8E5M2})
    for (int i = 0; i < 50; ++i) {
      double x = input_value(i % 5, i, t, ReduceKind::kSum);
      uint64_t buf = 0;
      store_value(t, &buf, 0, x);
      EXPECT_EQ(load_value(t, &buf, 0), x) << dtype_name(t);
    }
}

}  // namespace
