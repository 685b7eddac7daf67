// Shared pieces of the fault-injection tests: forked ranks around a TCP store hosted by the test
// (a rank may be SIGSTOPped: it is killed once every other rank has finished, so a stall never
// blocks the test), a per-rank outcome line the parent reads back, the ranks an error message
// blames, and deterministic data every rank can regenerate. Layer: tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commx/comm.h"
#include "commx/error.h"
#include "commx/store.h"
#include "cpu/fork_ranks.h"

namespace commx::testing {

// How a run ended on each rank, as the rank wrote it (one line) and as waitpid saw it.
struct RankOutcome {
  int status = -1;              // waitpid status; -1: still running at the deadline (a hang)
  bool killed_by_test = false;  // stalled on purpose and killed once the others finished
  std::string line;             // what the rank reported ("" if it wrote nothing)
};

// Runs body(rank, store) in n forked ranks and returns each rank's outcome. Ranks that still run
// once every rank not in `may_stall` has exited are killed (they were stopped on purpose); any
// rank still running at `limit` is a hang (status -1).
inline std::vector<RankOutcome> run_fault_world(
    int n, const std::function<std::string(int, std::shared_ptr<Store>)>& body,
    std::set<int> may_stall, std::chrono::seconds limit) {
  char tmpl[] = "/tmp/commx-faults-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto server = start_tcp_store_server("127.0.0.1", 0);
  const uint16_t port = server->port();
  std::vector<pid_t> pids = fork_ranks(n, [&](int r) {
    std::string line;
    try {
      TCPStoreOptions o;
      o.port = port;
      o.timeout = std::chrono::seconds(30);
      line = body(r, make_tcp_store("127.0.0.1", o));
    } catch (const std::exception& e) {
      line = std::string("uncaught ") + e.what();
    }
    std::ofstream(dir + "/rank" + std::to_string(r)) << line;
    return 0;
  });
  std::vector<RankOutcome> out(n);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    int others_running = 0;
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        out[r].status = st;
        pids[r] = 0;
        --left;
      } else if (!may_stall.count(r)) {
        ++others_running;
      }
    }
    if (left > 0 && others_running == 0) {
      for (int r = 0; r < n; ++r)
        if (pids[r] != 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], &out[r].status, 0);
          out[r].killed_by_test = true;
          pids[r] = 0;
          --left;
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < n; ++r)
    if (pids[r] != 0) {  // a hang: still running at the deadline
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
      out[r].status = -1;
    }
  server->stop();
  for (int r = 0; r < n; ++r) {
    std::ifstream in(dir + "/rank" + std::to_string(r));
    std::getline(in, out[r].line, '\0');
  }
  std::string rm = "rm -rf " + dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return out;
}

// The ranks an error message holds responsible: "rank 3 (addr) failed", "rank 3 stalled", the
// "rank(s) 3, 4" a shared-memory wait timed out on, and the peers listed after "pending:" of a TCP
// timeout.
inline std::set<int> blamed_ranks(const std::string& msg) {
  std::set<int> out;
  static const std::regex verdict(R"(rank (\d+)(?: \([^)]*\))? (?:failed|stalled|died|exited))");
  for (std::sregex_iterator it(msg.begin(), msg.end(), verdict), end; it != end; ++it)
    out.insert(std::stoi((*it)[1]));
  static const std::regex of_comm(R"(((?:rank \d+, )*rank \d+) of comm '[^']*' died)");
  static const std::regex number(R"(\d+)");
  for (std::sregex_iterator it(msg.begin(), msg.end(), of_comm), end; it != end; ++it) {
    const std::string list = (*it)[1].str();
    for (std::sregex_iterator n(list.begin(), list.end(), number), e; n != e; ++n)
      out.insert(std::stoi(n->str()));
  }
  static const std::regex plural(
      R"(timed out after \d+ ms waiting for [^;]* from rank\(s\) ([\d, ]+))");
  for (std::sregex_iterator it(msg.begin(), msg.end(), plural), end; it != end; ++it) {
    std::stringstream ss((*it)[1].str());
    std::string tok;
    while (std::getline(ss, tok, ','))
      if (tok.find_first_of("0123456789") != std::string::npos) out.insert(std::stoi(tok));
  }
  auto p = msg.find("pending: ");
  if (p != std::string::npos) {
    static const std::regex pending(R"((?:^|; )rank (\d+)(?: \([^)]*\))?: sent)");
    const std::string rest = msg.substr(p + 9);
    for (std::sregex_iterator it(rest.begin(), rest.end(), pending), end; it != end; ++it)
      out.insert(std::stoi((*it)[1]));
  }
  return out;
}

// Element i of rank r's input to op k of seed s: small integers, exact in float32 sums.
inline float fault_value(uint64_t s, int k, int r, int64_t i) {
  return static_cast<float>(static_cast<int64_t>((s * 131 + k * 17 + r * 7 + i * 3) % 23) - 11);
}

}  // namespace commx::testing
