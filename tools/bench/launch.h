// How commx-bench gets its ranks: from a launcher's environment (commx-run, torchrun, mpirun,
// PMI), or by spawning --np local ranks itself (fork + a commx TCP store on 127.0.0.1).
// Layer: tools/bench.
#pragma once

#include <functional>

namespace commx::bench {

// The world size a launcher announced through the environment, 0 when none did.
int launcher_world_size();
// Forks `np` ranks that each run `body` with COMMX_RANK/COMMX_WORLD_SIZE/MASTER_ADDR/MASTER_PORT
// set for a TCP store this process hosts; returns 0 when every rank exited 0, else the first
// failure's code (the other ranks are then terminated so nothing hangs).
int spawn_local_ranks(int np, const std::function<int()>& body);

}  // namespace commx::bench
