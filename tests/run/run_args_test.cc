// Parsing tests of commx-run's command line: its own flags and those of torchrun and mpirun,
// and the environment each rank gets from them. Layer: tests (run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "args.h"

namespace {

using commx::run::HostCounts;
using commx::run::LaunchOptions;
using commx::run::parse_args;
using commx::run::UsageError;

LaunchOptions parse(std::vector<std::string> args, HostCounts host = {8, 0}) {
  args.insert(args.begin(), "commx-run");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_args(static_cast<int>(argv.size()), argv.data(), host).launch;
}

std::string error_of(std::vector<std::string> args, HostCounts host = {8, 0}) {
  try {
    parse(std::move(args), host);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::map<std::string, std::string> env_of(const LaunchOptions& o, int local_rank) {
  std::map<std::string, std::string> m;
  for (auto& [k, v] : commx::run::rank_environment(o, local_rank, 4321)) m[k] = v;
  return m;
}

TEST(RunArgs, RankCountSpellings) {
  for (std::vector<std::string> a : std::vector<std::vector<std::string>>{
           {"-n", "3", "prog"},
           {"-n3", "prog"},
           {"-np", "3", "prog"},
           {"--np", "3", "prog"},
           {"--nproc", "3", "prog"},
           {"--nproc-per-node", "3", "prog"},
           {"--nproc_per_node", "3", "prog"},
           {"--nproc-per-node=3", "prog"},
           {"--nproc_per_node=3", "prog"}}) {
    EXPECT_EQ(parse(a).nprocs, 3) << testing::PrintToString(a);
    EXPECT_EQ(parse(a).argv, std::vector<std::string>{"prog"});
  }
}

TEST(RunArgs, NprocPerNodeCountsCpusAndGpus) {
  EXPECT_EQ(parse({"--nproc-per-node", "cpu", "p"}, {6, 2}).nprocs, 6);
  EXPECT_EQ(parse({"--nproc-per-node", "gpu", "p"}, {6, 2}).nprocs, 2);
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "p"}, {6, 2}).nprocs, 2);
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "p"}, {6, 0}).nprocs, 6);
  EXPECT_NE(error_of({"--nproc-per-node", "gpu", "p"}, {6, 0}).find("no GPU"), std::string::npos);
}

TEST(RunArgs, MultiNodeFlags) {
  auto o = parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.5",
                  "--master-port", "29500", "--nproc-per-node", "4", "train"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.5");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.world_size(), 8);
  auto u = parse({"--nnodes=2:2", "--node_rank=0", "--master_addr=h", "--master_port=7", "-n", "1",
                  "p"});
  EXPECT_EQ(u.nnodes, 2);
  EXPECT_EQ(u.master_addr, "h");
  EXPECT_EQ(u.master_port, 7);
  auto r = parse({"--rdzv-endpoint", "node0:1234", "--rdzv_id", "job7", "-n", "1", "p"});
  EXPECT_EQ(r.master_addr, "node0");
  EXPECT_EQ(r.master_port, 1234);
  EXPECT_EQ(r.run_id, "job7");
  auto d = parse({"--rdzv_endpoint=node0", "-n", "1", "p"});
  EXPECT_EQ(d.master_port, commx::run::kDefaultRdzvPort);
  auto v6 = parse({"--rdzv-endpoint", "[::1]:99", "-n", "1", "p"});
  EXPECT_EQ(v6.master_addr, "::1");
  EXPECT_EQ(v6.master_port, 99);
  EXPECT_EQ(parse({"--standalone", "-n", "2", "p"}).nnodes, 1);
}

TEST(RunArgs, MultiNodeErrorsNameTheProblem) {
  EXPECT_NE(error_of({"--nnodes", "1:4", "-n", "1", "p"}).find("elastic"), std::string::npos);
  EXPECT_NE(error_of({"--nnodes", "2", "--master-port", "5", "-n", "1", "p"}).find("--node-rank"),
            std::string::npos);
  EXPECT_NE(error_of({"--nnodes", "2", "--node-rank", "1", "-n", "1", "p"}).find("--master-port"),
            std::string::npos);
  EXPECT_NE(error_of({"--nnodes", "2", "--node-rank", "2", "--master-port", "5", "-n", "1", "p"})
                .find("not below"),
            std::string::npos);
  EXPECT_NE(error_of({"--standalone", "--nnodes", "2", "-n", "1", "p"}).find("--standalone"),
            std::string::npos);
  EXPECT_NE(error_of({"--master-port", "70000", "-n", "1", "p"}).find("--master-port"),
            std::string::npos);
}

TEST(RunArgs, ExportedVariables) {
  ::setenv("RUN_ARGS_TEST_VAR", "from-here", 1);
  auto o = parse({"-x", "A=1", "-x", "RUN_ARGS_TEST_VAR", "-x", "B=x=y", "-n", "1", "p"});
  ASSERT_EQ(o.env.size(), 3u);
  EXPECT_EQ(o.env[0], (std::pair<std::string, std::string>{"A", "1"}));
  EXPECT_EQ(o.env[1].second, "from-here");
  EXPECT_EQ(o.env[2], (std::pair<std::string, std::string>{"B", "x=y"}));
  ::unsetenv("RUN_ARGS_TEST_VAR");
  EXPECT_NE(error_of({"-x", "RUN_ARGS_TEST_VAR", "-n", "1", "p"}).find("not set"),
            std::string::npos);
  EXPECT_NE(error_of({"-x", "1BAD=2", "-n", "1", "p"}).find("not an environment variable"),
            std::string::npos);
  // mpirun habits are accepted.
  EXPECT_EQ(parse({"--allow-run-as-root", "--oversubscribe", "-np", "2", "p"}).nprocs, 2);
}

TEST(RunArgs, PythonProgramsAsTorchrunRunsThem) {
  ::unsetenv("PYTHON");
  EXPECT_EQ(parse({"-n", "1", "train.py", "--lr", "1"}).argv,
            (std::vector<std::string>{"python3", "train.py", "--lr", "1"}));
  EXPECT_EQ(parse({"-n", "1", "--no-python", "./train.py"}).argv,
            (std::vector<std::string>{"./train.py"}));
  EXPECT_EQ(parse({"-n", "1", "-m", "pkg.main", "x"}).argv,
            (std::vector<std::string>{"python3", "-m", "pkg.main", "x"}));
  EXPECT_EQ(parse({"-n", "1", "--", "python3", "t.py"}).argv,
            (std::vector<std::string>{"python3", "t.py"}));
}

TEST(RunArgs, UsageErrorsAreClear) {
  EXPECT_NE(error_of({"--bogus", "-n", "1", "p"}).find("unknown option '--bogus'"),
            std::string::npos);
  EXPECT_NE(error_of({"-n", "0", "p"}).find("-n must be in"), std::string::npos);
  EXPECT_NE(error_of({"-np", "x", "p"}).find("-np expects an integer"), std::string::npos);
  EXPECT_NE(error_of({"p"}).find("number of ranks is required"), std::string::npos);
  EXPECT_NE(error_of({"-n", "2"}).find("no program"), std::string::npos);
  EXPECT_NE(error_of({"-n", "1", "--timeout", "-3", "p"}).find("--timeout"), std::string::npos);
  EXPECT_NE(error_of({"-n", "1", "--standalone=1", "p"}).find("takes no value"), std::string::npos);
  EXPECT_NE(error_of({"-n", "1", "--nnodes"}).find("--nnodes needs a value"), std::string::npos);
}

TEST(RunArgs, TorchrunEnvironmentOfEachRank) {
  ::unsetenv("OMP_NUM_THREADS");
  auto o = parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.2.3",
                  "--master-port", "29500", "-n", "3", "--rdzv-id", "r1", "-x", "RANK=ignored?",
                  "p"});
  o.env.clear();  // -x is checked above; here the launcher's own variables
  auto e = env_of(o, 2);
  std::map<std::string, std::string> want = {
      {"RANK", "5"},        {"COMMX_RANK", "5"},        {"ROLE_RANK", "5"},
      {"WORLD_SIZE", "6"},  {"COMMX_WORLD_SIZE", "6"},  {"ROLE_WORLD_SIZE", "6"},
      {"LOCAL_RANK", "2"},  {"COMMX_LOCAL_RANK", "2"},  {"LOCAL_WORLD_SIZE", "3"},
      {"COMMX_LOCAL_WORLD_SIZE", "3"},                  {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},                        {"ROLE_NAME", "default"},
      {"TORCHELASTIC_RUN_ID", "r1"},                    {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},               {"MASTER_ADDR", "10.1.2.3"},
      {"MASTER_PORT", "4321"},                          {"COMMX_STORE_HOSTED", "1"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},         {"OMP_NUM_THREADS", "1"}};
  EXPECT_EQ(e, want);
  // OMP_NUM_THREADS: set only for several ranks per node and never over the user's value.
  EXPECT_EQ(env_of(parse({"-n", "1", "p"}), 0).count("OMP_NUM_THREADS"), 0u);
  ::setenv("OMP_NUM_THREADS", "4", 1);
  EXPECT_EQ(env_of(parse({"-n", "2", "p"}), 0).count("OMP_NUM_THREADS"), 0u);
  ::unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(env_of(parse({"-n", "1", "p"}), 0).at("TORCHELASTIC_RUN_ID"), "none");
  // -x comes last, so it wins over the launcher's value.
  auto x = env_of(parse({"-n", "2", "-x", "OMP_NUM_THREADS=3", "p"}), 1);
  EXPECT_EQ(x.at("OMP_NUM_THREADS"), "3");
}

}  // namespace
