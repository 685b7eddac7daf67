// Finds or hosts the rendezvous store from launcher variables (DESIGN section 3).
// Layer: core (bootstrap).
#pragma once

#include <memory>
#include <string>

#include "commx/store.h"
#include "core/env.h"

namespace commx {

// MASTER_ADDR/MASTER_PORT: a c10d TCPStore (rank 0 hosts it unless a launcher already does:
// COMMX_STORE_HOSTED=1 or TORCHELASTIC_USE_AGENT_STORE=True); else COMMX_STORE_FILE: a FileStore;
// else under Open MPI/PMI: a FileStore keyed by the job id; else, for one rank, an in-process store.
std::shared_ptr<Store> store_from_env(const RankInfo& ri, Timeout timeout);

// Claims rank `rank` of the comm `name` on `store` for this process, so that two processes
// started with the same rank are told so at once (instead of waiting for a peer that never
// comes). Throws InvalidArgument naming the other process when the rank is already held, and
// leaves a note that duplicate_rank_note() finds for the process that claimed it first.
// A torchrun restart (TORCHELASTIC_RESTART_COUNT) claims afresh.
void claim_rank(Store& store, const std::string& name, int rank, int size);

// What the rank's other claimant left on `store` (empty if nothing): the first claimant adds
// it to a rendezvous timeout, which is how it learns that its peer was started with its rank.
std::string duplicate_rank_note(Store& store, const std::string& name, int rank);

}  // namespace commx
