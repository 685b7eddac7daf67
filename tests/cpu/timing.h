// Per-op wall times for the latency probes (cpu_allreduce_timing, lowp_allreduce_timing).
// Layer: tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace commx::testing {

// Runs `op` `iters` times back to back; each run's time in microseconds, in increasing order.
template <class F>
std::vector<double> sorted_times_us(int iters, F&& op) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    op();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us;
}

}  // namespace commx::testing
