// Tests of commx-run: the environment each rank gets, "[rank] " output prefixes, the first
// failure's exit code, quick termination of the other ranks (SIGTERM, then SIGKILL), --timeout,
// signal forwarding, no orphans when the launcher is killed, and the hosted store.
// Layer: tests (run).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/commx-run-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

// A commx-run process with stdout and stderr in files.
class Launch {
 public:
  explicit Launch(std::vector<std::string> args) : dir_(temp_dir()) {
    args.insert(args.begin(), COMMX_RUN_PATH);
    pid_ = ::fork();
    if (pid_ == 0) {
      freopen((dir_ + "/out").c_str(), "w", stdout);
      freopen((dir_ + "/err").c_str(), "w", stderr);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    t0_ = Clock::now();
  }
  ~Launch() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::system(("rm -rf " + dir_).c_str());
  }
  // Exit code (128+signal if killed); -1 when it is still running after `limit`.
  int wait(std::chrono::seconds limit = 30s) {
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() - t0_ > limit) return -1;
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    elapsed_ = Clock::now() - t0_;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Waits until stdout has `n` lines containing `text`.
  bool wait_for_output(const std::string& text, int n, std::chrono::seconds limit = 20s) {
    while (Clock::now() - t0_ < limit) {
      int c = 0;
      for (auto& l : lines_of(out())) c += l.find(text) != std::string::npos;
      if (c >= n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  std::string out() const { return read_file(dir_ + "/out"); }
  std::string err() const { return read_file(dir_ + "/err"); }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  Clock::duration elapsed() const { return elapsed_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  Clock::time_point t0_;
  Clock::duration elapsed_{};
};

TEST(CommxRun, EveryRankGetsItsEnvironment) {
  for (int n : {1, 3, 8}) {
    Launch l({"-n", std::to_string(n), "--", RUN_CHILD_PATH, "env", "a b", "--x"});
    ASSERT_EQ(l.wait(), 0) << l.err();
    std::map<int, std::map<std::string, std::string>> env;
    std::map<int, std::vector<std::string>> args;
    std::regex re(R"(^\[(\d+)\] (\w+)=(.*)$)");
    for (auto& line : lines_of(l.out())) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, re)) << line;
      int r = std::stoi(m[1]);
      if (m[2] == "ARG")
        args[r].push_back(m[3]);
      else
        env[r][m[2]] = m[3];
    }
    ASSERT_EQ(env.size(), static_cast<size_t>(n));
    std::set<std::string> ports;
    for (int r = 0; r < n; ++r) {
      auto& e = env[r];
      for (const char* k : {"COMMX_RANK", "RANK", "COMMX_LOCAL_RANK", "LOCAL_RANK"})
        EXPECT_EQ(e[k], std::to_string(r)) << k;
      for (const char* k :
           {"COMMX_WORLD_SIZE", "WORLD_SIZE", "COMMX_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE"})
        EXPECT_EQ(e[k], std::to_string(n)) << k;
      EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
      EXPECT_EQ(e["COMMX_STORE_HOSTED"], "1");
      EXPECT_EQ(e["COMMX_AUTH_TOKEN"].size(), 64u) << "a 32-byte secret in hex";
      EXPECT_EQ(e["COMMX_AUTH_TOKEN"], env[0]["COMMX_AUTH_TOKEN"]) << "one secret per job";
      EXPECT_GT(std::stoi(e["MASTER_PORT"]), 0);
      ports.insert(e["MASTER_PORT"]);
      EXPECT_EQ(args[r], (std::vector<std::string>{"a b", "--x"}));
    }
    EXPECT_EQ(ports.size(), 1u);
  }
}

TEST(CommxRun, OutputLinesArePrefixedAndWhole) {
  constexpr int kRanks = 4, kLines = 300;
  Launch l({"-n", std::to_string(kRanks), RUN_CHILD_PATH, "lines", std::to_string(kLines)});
  ASSERT_EQ(l.wait(), 0) << l.err();
  std::regex out_re(R"(^\[(\d)\] out (\d+) of rank (\d) x{200}$)");
  std::regex tail_re(R"(^\[(\d)\] tail of rank (\d)$)");
  std::map<int, int> next, tails;
  for (auto& line : lines_of(l.out())) {
    std::smatch m;
    if (std::regex_match(line, m, tail_re)) {
      EXPECT_EQ(m[1], m[2]);
      ++tails[std::stoi(m[1])];
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, out_re)) << "mangled line: " << line.substr(0, 80);
    EXPECT_EQ(m[1], m[3]);
    int r = std::stoi(m[1]);
    EXPECT_EQ(std::stoi(m[2]), next[r]++) << "rank " << r << " lines out of order";
  }
  std::regex err_re(R"(^\[(\d)\] err (\d+) of rank (\d)$)");
  std::map<int, int> errs;
  for (auto& line : lines_of(l.err())) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, err_re)) << "mangled stderr line: " << line;
    EXPECT_EQ(m[1], m[3]);
    ++errs[std::stoi(m[1])];
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(next[r], kLines);
    EXPECT_EQ(errs[r], kLines);
    EXPECT_EQ(tails[r], 1);
  }
}

TEST(CommxRun, FirstFailureCodeAndOthersKilledQuickly) {
  Launch l({"-n", "4", "--settle", "0.2", RUN_CHILD_PATH, "fail", "2", "7"});
  EXPECT_EQ(l.wait(), 7) << l.err();
  EXPECT_LT(l.elapsed(), 5s);  // the others would sleep 60 s
  EXPECT_NE(l.err().find("rank 2 exited with code 7"), std::string::npos) << l.err();
}

TEST(CommxRun, RankKilledBySignalGives128PlusSignal) {
  Launch l({"-n", "3", "--settle", "0.2", RUN_CHILD_PATH, "signal", "1", std::to_string(SIGSEGV)});
  EXPECT_EQ(l.wait(), 128 + SIGSEGV) << l.err();
  EXPECT_LT(l.elapsed(), 5s);
  EXPECT_NE(l.err().find("rank 1 was killed by signal"), std::string::npos) << l.err();
}

TEST(CommxRun, RanksIgnoringSigtermGetSigkillAfterTheGrace) {
  Launch l({"-n", "3", "--settle", "0.2", "--grace", "0.5", RUN_CHILD_PATH, "ignore_term"});
  EXPECT_EQ(l.wait(), 3) << l.err();
  EXPECT_GE(l.elapsed(), 850ms);
  EXPECT_LT(l.elapsed(), 5s);
  EXPECT_NE(l.err().find("SIGKILL"), std::string::npos) << l.err();
}

TEST(CommxRun, SurvivorsGetTheSettlePeriodToReport) {
  // Within the settle period the survivors finish on their own; the first failure's code wins.
  Launch patient({"-n", "3", "--settle", "5", RUN_CHILD_PATH, "slow_survivors"});
  EXPECT_EQ(patient.wait(), 7) << patient.err();
  EXPECT_LT(patient.elapsed(), 4s);  // ends when the survivors exit, not at the settle deadline
  int reports = 0;
  for (auto& line : lines_of(patient.out())) reports += line.find("reporting") != std::string::npos;
  EXPECT_EQ(reports, 2) << patient.out();
  // With no settle period they are terminated before they report.
  Launch hasty({"-n", "3", "--settle", "0", RUN_CHILD_PATH, "slow_survivors"});
  EXPECT_EQ(hasty.wait(), 7) << hasty.err();
  EXPECT_EQ(hasty.out().find("reporting"), std::string::npos) << hasty.out();
}

TEST(CommxRun, TimeoutEndsTheJobWith124) {
  Launch l({"-n", "2", "--timeout", "0.5", RUN_CHILD_PATH, "sleep"});
  EXPECT_EQ(l.wait(), 124) << l.err();
  EXPECT_GE(l.elapsed(), 450ms);
  EXPECT_LT(l.elapsed(), 5s);
}

TEST(CommxRun, ForwardsSigintToTheRanks) {
  Launch l({"-n", "3", RUN_CHILD_PATH, "sleep"});
  ASSERT_TRUE(l.wait_for_output("ready", 3)) << l.out() << l.err();
  ::kill(l.pid(), SIGINT);
  EXPECT_EQ(l.wait(), 128 + SIGINT) << l.err();
  EXPECT_LT(l.elapsed(), 10s);
}

// Alive and not a zombie waiting for init to reap it.
bool alive(pid_t p) {
  std::string stat = read_file("/proc/" + std::to_string(p) + "/stat");
  auto close_paren = stat.rfind(')');
  return !stat.empty() && close_paren != std::string::npos && stat[close_paren + 2] != 'Z';
}

TEST(CommxRun, KilledLauncherLeavesNoOrphans) {
  std::string dir = temp_dir();
  Launch l({"-n", "3", RUN_CHILD_PATH, "pidfile", dir});
  ASSERT_TRUE(l.wait_for_output("ready", 3)) << l.out() << l.err();
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) pids.push_back(std::stoi(read_file(dir + "/" + std::to_string(r))));
  ::kill(l.pid(), SIGKILL);
  l.wait();
  auto deadline = Clock::now() + 5s;
  for (pid_t p : pids) {
    while (alive(p) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(alive(p)) << "rank pid " << p << " outlived the launcher";
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(CommxRun, RanksRendezvousThroughTheHostedStore) {
  Launch l({"-n", "5", "--timeout", "60", RUN_CHILD_PATH, "store"});
  EXPECT_EQ(l.wait(), 0) << l.out() << l.err();
  int ok = 0;
  for (auto& line : lines_of(l.out())) ok += line.find("store ok rank") != std::string::npos;
  EXPECT_EQ(ok, 5) << l.out();
}

// The store commx-run hosts accepts only processes with the job's token; --no-auth turns it off.
TEST(CommxRun, StoreRejectsProcessesWithoutTheJobToken) {
  {
    Launch l({"-n", "1", "--timeout", "60", RUN_CHILD_PATH, "intruder"});
    ASSERT_EQ(l.wait(), 0) << l.out() << l.err();
    std::string out = l.out();
    EXPECT_NE(out.find("wrong token: refused:"), std::string::npos) << out;
    EXPECT_NE(out.find("did not prove it knows this job's token"), std::string::npos) << out;
    EXPECT_NE(out.find("no token: refused:"), std::string::npos) << out;
    EXPECT_NE(out.find("job token: accepted"), std::string::npos) << out;
    EXPECT_NE(l.err().find("unauthenticated"), std::string::npos) << l.err();
  }
  {
    Launch l({"-n", "1", "--no-auth", "--timeout", "60", RUN_CHILD_PATH, "intruder"});
    ASSERT_EQ(l.wait(), 0) << l.out() << l.err();
    EXPECT_NE(l.out().find("no token: accepted"), std::string::npos) << l.out();
    EXPECT_NE(l.err().find("without authentication"), std::string::npos) << l.err();
  }
  Launch env({"-n", "1", "--no-auth", RUN_CHILD_PATH, "env"});
  ASSERT_EQ(env.wait(), 0);
  EXPECT_NE(env.out().find("COMMX_AUTH_TOKEN=<unset>"), std::string::npos) << env.out();
}

TEST(CommxRun, MpirunAndTorchrunFlags) {
  ::unsetenv("OMP_NUM_THREADS");
  Launch l({"-np", "2", "-x", "RUN_TEST_EXPORTED=yes", "--rdzv-id", "job9", "--allow-run-as-root",
            RUN_CHILD_PATH, "env"});
  ASSERT_EQ(l.wait(), 0) << l.err();
  std::string out = l.out();
  for (const char* want : {"[1] RANK=1", "[1] GROUP_RANK=0", "[1] ROLE_RANK=1",
                           "[0] ROLE_WORLD_SIZE=2", "[0] TORCHELASTIC_RUN_ID=job9",
                           "[0] OMP_NUM_THREADS=1", "[1] RUN_TEST_EXPORTED=yes"})
    EXPECT_NE(out.find(std::string(want) + "\n"), std::string::npos) << want << "\n" << out;
  Launch torchrun_style({"--nproc_per_node=2", "--standalone", RUN_CHILD_PATH, "env"});
  ASSERT_EQ(torchrun_style.wait(), 0) << torchrun_style.err();
  EXPECT_NE(torchrun_style.out().find("[1] LOCAL_WORLD_SIZE=2\n"), std::string::npos);
}

// A port nothing listens on right now (the kernel's pick for an ephemeral bind).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(CommxRun, TwoNodesRendezvousThroughNodeZerosStore) {
  // Two launchers on loopback as two nodes of one 4-rank job: node 1's ranks join the store
  // node 0 hosts at --master-addr:--master-port and see global ranks 2 and 3.
  std::string port = std::to_string(free_port());
  std::vector<std::string> common = {"--nnodes", "2", "--nproc-per-node", "2", "--master-addr",
                                     "127.0.0.1", "--master-port", port, "--timeout", "60"};
  auto args = [&](const char* node_rank, const char* mode) {
    std::vector<std::string> a = common;
    a.insert(a.end(), {"--node-rank", node_rank, RUN_CHILD_PATH, mode});
    return a;
  };
  // Nodes share the job's store token; they cannot make one each.
  ::setenv("COMMX_AUTH_TOKEN", "two-node-test-secret-0123456789", 1);
  Launch node1(args("1", "store"));  // first: its ranks wait for node 0's store
  Launch node0(args("0", "store"));
  ::unsetenv("COMMX_AUTH_TOKEN");
  EXPECT_EQ(node0.wait(), 0) << node0.out() << node0.err();
  EXPECT_EQ(node1.wait(), 0) << node1.out() << node1.err();
  for (auto& [l, ranks] : {std::pair<Launch*, std::vector<int>>{&node0, {0, 1}},
                           std::pair<Launch*, std::vector<int>>{&node1, {2, 3}}})
    for (int r : ranks)
      EXPECT_NE(l->out().find("[" + std::to_string(r) + "] store ok rank " + std::to_string(r) +
                              " of 4"),
                std::string::npos)
          << l->out();
}

TEST(CommxRun, UsageErrorsAndMissingProgram) {
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{},
                                             {"-n", "0", "true"},
                                             {"-n", "x", "true"},
                                             {"--bogus", "-n", "1", "true"},
                                             {"-n", "2"},
                                             {"-n", "1", "--timeout", "-3", "true"},
                                             {"-n", "1", "--settle", "x", "true"},
                                             {"-np", "2", "--nnodes", "2", "true"},
                                             {"-n", "1", "--nnodes", "2", "--node-rank", "1",
                                              "--master-port", "9", "true"}}) {
    Launch l(args);
    EXPECT_EQ(l.wait(), 2) << "args: " << testing::PrintToString(args) << " " << l.err();
  }
  Launch l({"-n", "2", "/nonexistent/program"});
  EXPECT_EQ(l.wait(), 127);
  EXPECT_NE(l.err().find("cannot run '/nonexistent/program'"), std::string::npos) << l.err();
  Launch ok({"-n3", "true"});
  EXPECT_EQ(ok.wait(), 0) << ok.err();
}

}  // namespace
