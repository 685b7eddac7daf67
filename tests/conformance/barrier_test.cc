// barrier on every backend present: no rank leaves it before every rank entered it, sync and
// async. Rank 0 enters late, after leaving a mark (a file) that every rank must see once its
// barrier returned. Layer: tests.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class Barrier : public ConformanceTest {};

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST_P(Barrier, NoRankLeavesBeforeAllEntered) {
  run_world(GetParam(), [](Rank& r) {
    // Rank 0's pid names the marks (every rank learns it by a broadcast).
    Buf pid(sizeof(int64_t) + 1, 0);
    const int64_t mine = getpid();
    std::memcpy(pid.data(), &mine, sizeof mine);
    Buffer b = r.upload(pid, 1, DataType::kInt64);
    r.comm().broadcast(b.tensor(), 0);
    int64_t root_pid = 0;
    std::memcpy(&root_pid, b.read().data(), sizeof root_pid);
    for (int round = 0; round < 4; ++round) {
      const std::string mark = "/tmp/commx-conformance-barrier-" + std::to_string(root_pid) + "-" +
                               std::to_string(round);
      const bool async = round % 2 == 1;
      if (r.rank == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::FILE* f = std::fopen(mark.c_str(), "w");
        r.check(f != nullptr, "cannot create " + mark);
        if (f) std::fclose(f);
      }
      // wait_blocking: on a GPU, wait() would only order streams.
      r.comm().barrier(async).wait_blocking();
      r.check(exists(mark), "round " + std::to_string(round) + (async ? " async" : "") +
                                ": barrier returned before rank 0 entered it");
      r.comm().barrier().wait_blocking();  // everyone has looked: the mark may go
      if (r.rank == 0) std::remove(mark.c_str());
    }
  });
}

COMMX_CONFORMANCE_WORLDS(Barrier);

}  // namespace
