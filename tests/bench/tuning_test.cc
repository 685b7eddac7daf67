// The tuning table loader (src/core/tuning.h): parsing, errors, lookup rules, env override.
// Layer: tests.
#include "core/tuning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "commx/error.h"

using namespace commx;

namespace {

const char* kTable = R"(# comment line
all_reduce 2 0 4096 one_shot   # trailing comment
all_reduce 2 4097 max ring

all_reduce 8 0 1024 one_shot
all_reduce 8 1025 max two_shot
all_gather 4 0 max direct
)";

TEST(Tuning, Lookup) {
  TuningTable t = TuningTable::parse(kTable);
  EXPECT_EQ(t.entries().size(), 5u);
  EXPECT_EQ(t.lookup("all_reduce", 2, 0), "one_shot");
  EXPECT_EQ(t.lookup("all_reduce", 2, 4096), "one_shot");
  EXPECT_EQ(t.lookup("all_reduce", 2, 4097), "ring");
  EXPECT_EQ(t.lookup("all_reduce", 8, 2048), "two_shot");
  // No exact world size: the largest listed below, else the smallest above.
  EXPECT_EQ(t.lookup("all_reduce", 4, 2048), "one_shot");
  EXPECT_EQ(t.lookup("all_reduce", 4, 8192), "ring");
  EXPECT_EQ(t.lookup("all_reduce", 16, 100), "one_shot");
  EXPECT_EQ(t.lookup("all_gather", 2, 100), "direct");
  EXPECT_EQ(t.lookup("broadcast", 2, 100), "");
}

// Rows of the link itself win over "any" rows for the same sizes, whatever their order (a v1
// table with a newer --tune run merged after it).
TEST(Tuning, LinkRowsWinOverAnyRows) {
  TuningTable t = TuningTable::parse(
      "all_reduce 2 0 max one_shot\n"       // v1: link any
      "all_reduce 2 shm 0 1024 ring\n"
      "all_reduce 2 tcp 0 max recursive_doubling\n");
  EXPECT_EQ(t.lookup("all_reduce", 2, 512, "shm"), "ring");
  EXPECT_EQ(t.lookup("all_reduce", 2, 4096, "shm"), "one_shot");  // no shm row that large
  EXPECT_EQ(t.lookup("all_reduce", 2, 512, "tcp"), "recursive_doubling");
  EXPECT_EQ(t.lookup("all_reduce", 2, 512, "nvlink"), "one_shot");
  EXPECT_EQ(t.lookup("all_reduce", 2, 512), "one_shot");  // link unknown: the first row
}

TEST(Tuning, Errors) {
  EXPECT_THROW(TuningTable::parse("all_reduce 2 0 10"), Error);
  EXPECT_THROW(TuningTable::parse("all_reduce x 0 10 ring"), Error);
  EXPECT_THROW(TuningTable::parse("all_reduce 0 0 10 ring"), Error);
  EXPECT_THROW(TuningTable::parse("all_reduce 2 10 5 ring"), Error);
  EXPECT_THROW(TuningTable::parse("all_reduce 2 -1 5 ring"), Error);
  try {
    TuningTable::parse("\nall_reduce 2 1K 5 ring", "t.txt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.txt line 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(TuningTable::load("/nonexistent/commx/tuning.txt").has_value());
}

TEST(Tuning, FromEnv) {
  std::string path = ::testing::TempDir() + "/tuning_test.txt";
  std::ofstream(path) << "all_reduce 2 0 max from_env\n";
  std::string dflt = ::testing::TempDir() + "/tuning_default.txt";
  std::ofstream(dflt) << "all_reduce 2 0 max from_default\n";
  unsetenv("COMMX_TUNING_FILE");
  EXPECT_EQ(TuningTable::from_env(dflt).lookup("all_reduce", 2, 8), "from_default");
  EXPECT_TRUE(TuningTable::from_env("/nonexistent/x").entries().empty());
  setenv("COMMX_TUNING_FILE", path.c_str(), 1);
  EXPECT_EQ(TuningTable::from_env(dflt).lookup("all_reduce", 2, 8), "from_env");
  setenv("COMMX_TUNING_FILE", "/nonexistent/commx-tuning.txt", 1);
  EXPECT_THROW(TuningTable::from_env(dflt), Error);
  unsetenv("COMMX_TUNING_FILE");
}

// The tables the build installs (bench/tuning/<backend>.txt): each parses, names only algorithms
// of its backend's all_reduce table, and covers every size of each (collective, world size, link)
// it names once, from 0 to max, with no gap or overlap.
void check_shipped_table(const std::string& backend, const std::set<std::string>& algorithms) {
  const std::string path = std::string(COMMX_SOURCE_DIR) + "/bench/tuning/" + backend + ".txt";
  std::optional<TuningTable> t = TuningTable::load(path);
  ASSERT_TRUE(t) << path;
  ASSERT_FALSE(t->entries().empty()) << path;
  std::map<std::tuple<std::string, int, std::string>, uint64_t> next;  // where the next row starts
  for (const TuningEntry& e : t->entries()) {
    SCOPED_TRACE(path + ": " + e.collective + " " + std::to_string(e.world_size) + " " + e.link +
                 " " + std::to_string(e.min_bytes));
    EXPECT_TRUE(algorithms.count(e.algorithm)) << e.algorithm;
    uint64_t& start = next[{e.collective, e.world_size, e.link}];
    EXPECT_EQ(e.min_bytes, start);
    start = e.max_bytes == std::numeric_limits<uint64_t>::max() ? e.max_bytes : e.max_bytes + 1;
  }
  for (const auto& [key, end] : next)
    EXPECT_EQ(end, std::numeric_limits<uint64_t>::max()) << std::get<0>(key) << " " << std::get<1>(key);
}

TEST(Tuning, ShippedTablesCoverEverySize) {
  check_shipped_table("cpu", {"dda", "rsag", "recursive_doubling", "ring", "one_shot", "two_shot"});
  check_shipped_table("cuda", {"ll", "ll128", "flat", "one_shot", "two_shot", "tree"});
}

}  // namespace
