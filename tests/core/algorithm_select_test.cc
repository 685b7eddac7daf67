// select_algorithm (commx/algorithm.h): hint, then tuning table, then default; fallbacks of rows
// that cannot run; errors for names no row has; tuning-table rows keyed by link.
#include <gtest/gtest.h>

#include <cstring>

#include "commx/algorithm.h"
#include "commx/error.h"
#include "core/tuning.h"

using namespace commx;

namespace {

using Row = Algorithm<int>;  // run: a number the test recognises

bool on_fast_link(const OpDesc&, const Topology& t) { return std::strcmp(t.link, "fast") == 0; }

const Row kRows[] = {
    {"small", Collective::kAllReduce, nullptr, 1, nullptr, "tiny"},
    {"big", Collective::kAllReduce, nullptr, 2},
    {"fast_only", Collective::kAllReduce, on_fast_link, 3, "big"},
    {"big", Collective::kAllGather, nullptr, 4},
};

OpDesc all_reduce(std::vector<float>& v, Hints hints = {}) {
  OpDesc op{.type = OpType::kAllReduce, .input = make_tensor(v.data(), int64_t(v.size())), .hints = hints};
  op.output = op.input;
  lower_op(op, 0, 2);
  return op;
}

int pick(const OpDesc& op, const Topology& topo, const TuningTable* table,
         bool (*accepts)(std::string_view) = nullptr) {
  return select_algorithm(std::span<const Row>(kRows), op.collective, op, topo, table, "small",
                          "[where] ", accepts)
      .run;
}

}  // namespace

TEST(AlgorithmSelect, HintThenTableThenDefault) {
  std::vector<float> v(100);  // 400 bytes
  const Topology slow{2, "slow"};
  EXPECT_EQ(pick(all_reduce(v), slow, nullptr), 1);  // the default
  TuningTable t = TuningTable::parse("all_reduce 2 any 0 1000 big\n");
  EXPECT_EQ(pick(all_reduce(v), slow, &t), 2);                            // the table
  EXPECT_EQ(pick(all_reduce(v, {{"algorithm", "tiny"}}), slow, &t), 1);  // the hint, by alias
  EXPECT_EQ(pick(all_reduce(v, {{"algorithm", "auto"}}), slow, &t), 2);  // "auto" is no hint
  std::vector<float> large(1000);  // beyond the table's row
  EXPECT_EQ(pick(all_reduce(large), slow, &t), 1);
}

TEST(AlgorithmSelect, RowsThatCannotRunFallBack) {
  std::vector<float> v(10);
  OpDesc op = all_reduce(v, {{"algorithm", "fast_only"}});
  EXPECT_EQ(pick(op, Topology{2, "fast"}, nullptr), 3);
  EXPECT_EQ(pick(op, Topology{2, "slow"}, nullptr), 2);  // its fallback
}

TEST(AlgorithmSelect, UnknownNamesAreErrors) {
  std::vector<float> v(10);
  try {
    pick(all_reduce(v, {{"algorithm", "carrier_pigeon"}}), Topology{}, nullptr);
    FAIL() << "an unknown hint must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("[where] unknown all_reduce algorithm 'carrier_pigeon'"), std::string::npos)
        << what;
    EXPECT_NE(what.find("small, big, fast_only"), std::string::npos) << what;
  }
  TuningTable bogus = TuningTable::parse("all_reduce 1 0 max carrier_pigeon\n");
  EXPECT_THROW(pick(all_reduce(v), Topology{}, &bogus), Error);
  // A name the backend knows for another collective counts as unnamed.
  auto known = [](std::string_view n) { return n == "carrier_pigeon"; };
  EXPECT_EQ(pick(all_reduce(v, {{"algorithm", "carrier_pigeon"}}), Topology{}, nullptr, known), 1);
}

TEST(AlgorithmSelect, RowsOfOtherCollectivesAreNotCandidates) {
  std::vector<float> in(2), out(4);
  OpDesc ag{.type = OpType::kAllGatherSingle,
            .input = make_tensor(in.data(), 2),
            .output = make_tensor(out.data(), 4),
            .hints = {{"algorithm", "big"}}};
  lower_op(ag, 0, 2);
  EXPECT_EQ(select_algorithm(std::span<const Row>(kRows), ag.collective, ag, Topology{}, nullptr,
                             "big", "")
                .run,
            4);
}

TEST(TuningTableLinks, RowsMatchTheirLinkOrAny) {
  TuningTable t = TuningTable::parse(
      "all_reduce 2 shm 0 max dda\n"
      "all_reduce 2 tcp 0 max ring\n"
      "all_gather 2 0 max direct\n");  // v1 row: any link
  EXPECT_EQ(t.lookup("all_reduce", 2, 10, "shm"), "dda");
  EXPECT_EQ(t.lookup("all_reduce", 2, 10, "tcp"), "ring");
  EXPECT_EQ(t.lookup("all_reduce", 2, 10, "nvlink"), "");
  EXPECT_EQ(t.lookup("all_gather", 2, 10, "nvlink"), "direct");
  EXPECT_EQ(t.entries()[0].link, "shm");
  EXPECT_EQ(t.entries()[2].link, "any");
  TuningTable back = TuningTable::parse(t.to_text());
  EXPECT_EQ(back.to_text(), t.to_text());
  EXPECT_THROW(TuningTable::parse("all_reduce 2 shm 0 10 ring extra\n"), Error);
}

// The library backends (gloo, mpi, nccl): the collective's first row unless a hint names one of
// its rows; a hint naming none is no error; a row that cannot run hands over to its fallback.
TEST(AlgorithmSelect, LibraryRowsTakeTheFirstRowOrANamedOne) {
  bool (*one_buffer)(const OpDesc&, const Topology&) = [](const OpDesc& op, const Topology&) {
    return op.outputs_one_buffer();
  };
  const Row rows[] = {
      {"allreduce", Collective::kAllReduce, nullptr, 1},
      {"ring", Collective::kAllReduce, nullptr, 2},
      {"allgather", Collective::kAllGather, one_buffer, 3, "broadcasts"},
      {"broadcasts", Collective::kAllGather, nullptr, 4},
  };
  const std::span<const Row> table(rows);
  std::vector<float> v(8);
  EXPECT_EQ(select_library_row(table, all_reduce(v))->run, 1);
  EXPECT_EQ(select_library_row(table, all_reduce(v, {{"algorithm", "ring"}}))->run, 2);
  EXPECT_EQ(select_library_row(table, all_reduce(v, {{"algorithm", "no_such"}}))->run, 1);

  std::vector<float> in(2), out(4), a(2), b(2);
  OpDesc single{.type = OpType::kAllGatherSingle, .input = make_tensor(in.data(), 2),
                .output = make_tensor(out.data(), 4)};
  lower_op(single, 0, 2);
  EXPECT_EQ(select_library_row(table, single)->run, 3);
  OpDesc list{.type = OpType::kAllGather, .input = make_tensor(in.data(), 2),
              .outputs = {make_tensor(b.data(), 2), make_tensor(a.data(), 2)}};
  lower_op(list, 0, 2);
  EXPECT_EQ(select_library_row(table, list)->run, 4);  // not one buffer: the fallback

  OpDesc barrier{.type = OpType::kBarrier};
  lower_op(barrier, 0, 2);
  EXPECT_EQ(select_library_row(table, barrier), nullptr);  // no row: the backend says Unsupported
}
