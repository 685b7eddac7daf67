// The tuning table loader (src/core/tuning.h): parsing, errors, lookup rules, env override.
// Layer: tests.
#include "core/tuning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

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

}  // namespace
