// commx-bench end to end: spawned local ranks (--np), every collective checked (#wrong = 0 in the
// JSON), several backends side by side, clear refusals of bad flags. Layer: tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

const std::string kBench = COMMX_BENCH_BIN;

int run(const std::string& args, const std::string& log) {
  std::string cmd = kBench + " " + args + " > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string tmp(const std::string& name) { return ::testing::TempDir() + "/bench_e2e_" + name; }

// python3 asserts on the JSON file; returns its exit status.
int check_json(const std::string& path, const std::string& asserts) {
  std::string code = "import json,sys; d=json.load(open(sys.argv[1])); r=d[\"rows\"]; " + asserts;
  std::string cmd = "python3 -c '" + code + "' " + path;
  return std::system(cmd.c_str());
}

TEST(BenchE2E, AllReduceTwoRanks) {
  std::string json = tmp("ar.json"), log = tmp("ar.log");
  // The native cpu backend and gloo side by side, on 2 spawned ranks.
  ASSERT_EQ(run("all_reduce --np 2 -b 8 -e 64K -f 4 -w 1 -n 3 -d float,int32,bf16 --backend "
                "cpu,gloo --json " +
                    json,
                log),
            0)
      << "see " << log;
  EXPECT_EQ(check_json(json,
                       "assert r and all(x[\"wrong\"]==0 for x in r), r;"
                       "assert {x[\"backend\"] for x in r}=={\"cpu\",\"gloo\"};"
                       "assert {x[\"size\"] for x in r if x[\"dtype\"]==\"float\"} >= {8, 32768};"
                       "assert all(x[\"world_size\"]==2 and x[\"in_place\"] for x in r)"),
            0);
}

TEST(BenchE2E, EveryCollectiveThreeRanks) {
  std::string json = tmp("all.json"), log = tmp("all.log"), svg = tmp("all.svg");
  ASSERT_EQ(run("all --np 3 -b 4 -e 4K -f 32 -w 1 -n 2 -r 1 --backend gloo --json " + json +
                    " --svg " + svg,
                log),
            0)
      << "see " << log;
  EXPECT_EQ(
      check_json(json,
                 "names={x[\"collective\"] for x in r};"
                 "assert names=={\"all_reduce\",\"all_gather\",\"reduce_scatter\",\"all_to_all\","
                 "\"broadcast\",\"reduce\",\"gather\",\"scatter\",\"sendrecv\",\"barrier\"}, names;"
                 "assert all(x[\"wrong\"] in (0, -1) for x in r);"
                 "assert all(x[\"wrong\"]==0 for x in r if x[\"collective\"]!=\"barrier\");"
                 "assert any(not x[\"in_place\"] for x in r) and any(x[\"in_place\"] for x in r);"
                 "assert all(x[\"root\"]==1 for x in r if x[\"collective\"] in "
                 "(\"broadcast\",\"gather\"))"),
      0);
  std::string cmd =
      "python3 -c 'import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])' " + svg;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

// --tune over shared memory and over TCP (a comm hint) into one file: rows of both links, each
// read back by the backend of that link.
TEST(BenchE2E, TuneWritesRowsPerLinkIntoOneFile) {
  std::string table = tmp("tune.txt"), log = tmp("tune.log"), json = tmp("tune.json");
  std::remove(table.c_str());
  const std::string sweep = "all_reduce --np 2 -b 64 -e 4K -f 8 -w 1 -n 3 --backend cpu:recursive_doubling,cpu:ring --tune " + table;
  ASSERT_EQ(run(sweep + " --json " + json, log), 0) << "see " << log;
  EXPECT_EQ(check_json(json, "assert r and all(x[\"link\"]==\"shm\" for x in r), r"), 0);
  ASSERT_EQ(run(sweep + " --comm-hint transport=tcp", log), 0) << "see " << log;
  std::string check =
      "python3 -c 'import sys; rows=[l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith(\"#\")];"
      "links={r[2] for r in rows}; assert links=={\"shm\",\"tcp\"}, rows;"
      "assert all(r[0]==\"all_reduce\" and r[1]==\"2\" and r[5] in (\"recursive_doubling\",\"ring\") for r in rows), rows' " +
      table;
  EXPECT_EQ(std::system(check.c_str()), 0) << "see " << table;
  // Running the shm sweep again replaces its rows and keeps the tcp ones.
  ASSERT_EQ(run(sweep, log), 0) << "see " << log;
  EXPECT_EQ(std::system(check.c_str()), 0) << "see " << table;
}

TEST(BenchE2E, MissingBackendsAreSkipped) {
  std::string log = tmp("skip.log");
  // mpi refuses to run outside mpirun, "nosuch" is not installed: both are notes, not errors.
  ASSERT_EQ(run("barrier --np 2 -n 2 --backend gloo,mpi,nosuch", log), 0) << "see " << log;
  EXPECT_EQ(std::system(("grep -q 'backend mpi skipped' " + log).c_str()), 0);
  EXPECT_EQ(std::system(("grep -q 'backend nosuch skipped' " + log).c_str()), 0);
  EXPECT_EQ(run("barrier --np 2 -n 2 --backend nosuch", log), 3);
}

TEST(BenchE2E, BadArguments) {
  std::string log = tmp("bad.log");
  EXPECT_EQ(run("all_reduce --np 2 -b 1M -e 1K", log), 2);
  EXPECT_EQ(run("no_such_collective", log), 2);
  EXPECT_EQ(run("all_reduce --graph 1", log), 2);
  EXPECT_EQ(std::system(("grep -q 'CPU backends have none' " + log).c_str()), 0);
  EXPECT_EQ(run("--help", log), 0);
}

}  // namespace
