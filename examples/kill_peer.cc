// Example: the last rank dies abruptly in the middle of a series of all_reduces; every other rank
// gets a PeerFailure naming it (within milliseconds, not at the timeout) and exits non-zero.
// Run with the launcher:  commx-run -n 4 ./build/bin/commx_example_kill_peer
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "commx/commx.h"

int main() {
  int rank = -1;
  try {
    auto comm = commx::Comm::create("cpu", commx::Device::cpu(), "world");
    rank = comm->rank();
    const int victim = comm->size() - 1;
    std::vector<float> v(1 << 20, 1.0f);
    for (int iter = 0; iter < 100; ++iter) {
      if (rank == victim && iter == 10) {
        std::fprintf(stderr, "rank %d: exiting abruptly at iteration %d\n", rank, iter);
        _exit(3);  // no finalize, no goodbye
      }
      comm->all_reduce(commx::make_tensor(v.data(), static_cast<int64_t>(v.size())),
                       commx::ReduceOp::MAX);
    }
    std::printf("rank %d: finished without noticing a failure\n", rank);
    return 0;
  } catch (const commx::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return e.code() == commx::ErrorCode::kPeerFailure ? 1 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: failed: %s\n", rank, e.what());
    return 2;
  }
}
