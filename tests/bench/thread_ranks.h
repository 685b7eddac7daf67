// Test helper: runs ranks as threads of this process, each with its own Comm of a backend over one
// in-process store. Layer: tests.
#pragma once

#include <functional>
#include <string>

#include "commx/comm.h"

namespace commx::testing {

// Runs fn(comm) on `n` threads; rethrows the first failure after every thread ended.
// `timeout` is the comms' op timeout.
void run_thread_ranks(int n, const std::string& backend, const std::function<void(Comm&)>& fn,
                      Timeout timeout = std::chrono::seconds(30));

}  // namespace commx::testing
