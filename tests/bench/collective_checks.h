// Collective correctness checks shared by the peer-backend tests (gloo over threads, mpi under
// mpirun): every result compared with an independent host reference. Layer: tests.
#pragma once

#include "commx/comm.h"

namespace commx::testing {

// all_reduce, reduce (non-zero root) and the reduce_scatter forms for every dtype and op the
// backend claims in supports(); the combinations it does not claim must fail as Unsupported.
void check_reductions(Comm& c);
// broadcast, all_gather(+single, in place, v), all_to_all(+single, in place, v), gather, scatter.
void check_data_movement(Comm& c);
// send/recv pairs, a batched ring, and async ops completing in issue order.
void check_p2p_and_async(Comm& c);

}  // namespace commx::testing
