// How a comm created without CommOptions::store finds its peers: the launcher's store.
// Layer: public API (implemented in src/core/bootstrap.cc).
#pragma once

#include <memory>

#include "commx/options.h"
#include "commx/store.h"

namespace commx {

// The store that comms created without CommOptions::store meet on, from the launcher's variables
// (MASTER_ADDR/MASTER_PORT, COMMX_STORE_FILE, mpirun; docs/api.md "Creating a comm"), with the
// launcher's rank 0 hosting a TCP store where nobody does. For comms whose members are decided
// later (Python's enable_reconfigure). Throws InvalidArgument when the environment names no
// launcher rank or no store.
std::shared_ptr<Store> launcher_store(Timeout timeout);

}  // namespace commx
