// Example: all_reduce a vector over every rank with the native cpu backend.
// Run with the launcher:  commx-run -n 4 ./build/bin/commx_example_allreduce
// (or set COMMX_RANK / COMMX_WORLD_SIZE / MASTER_ADDR / MASTER_PORT yourself).
#include <cstdio>
#include <exception>
#include <vector>

#include "commx/commx.h"

int main() {
  try {
    auto comm = commx::Comm::create("cpu", commx::Device::cpu(), "world");
    const int rank = comm->rank(), size = comm->size();
    // Element i of rank r holds (r + 1) * (i + 1): the sum is (i + 1) * size * (size + 1) / 2.
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank + 1) * (i + 1));
    comm->all_reduce(commx::make_tensor(v.data(), static_cast<int64_t>(v.size())),
                     commx::ReduceOp::SUM);
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i)
      ok &= v[i] == static_cast<float>((i + 1) * size * (size + 1) / 2);
    std::printf("rank %d/%d: v[0]=%g v[999]=%g -> %s\n", rank, size, v[0], v[999],
                ok ? "correct" : "WRONG");
    comm->finalize();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce example failed: %s\n", e.what());
    return 2;
  }
}
