// Finds or hosts the rendezvous store from launcher variables (DESIGN section 3).
// Layer: core (bootstrap).
#pragma once

#include <memory>

#include "commx/store.h"
#include "core/env.h"

namespace commx {

// MASTER_ADDR/MASTER_PORT: a c10d TCPStore (rank 0 hosts it unless a launcher already does:
// COMMX_STORE_HOSTED=1 or TORCHELASTIC_USE_AGENT_STORE=True); else COMMX_STORE_FILE: a FileStore;
// else under Open MPI/PMI: a FileStore keyed by the job id; else, for one rank, an in-process store.
std::shared_ptr<Store> store_from_env(const RankInfo& ri, Timeout timeout);

}  // namespace commx
