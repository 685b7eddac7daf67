// The nccl backend's small kernels for all_to_all_v_dynamic (dynamic_kernels.cu): they read and
// write the counts on the device so that the host never sees them. Between them the host issues
// an ncclAllGather of the rows and grouped ncclSend/ncclRecv of the staged streams (see
// all_to_all_v_dynamic.cc). Layer: backends (nccl).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "algorithms/dynamic_a2a_plan.h"
#include "commx/backend.h"
#include "cuda_common/dynamic_a2a_args.h"
#include "cuda_common/dynamic_counts_report.h"

namespace commx::nccl {

using cuda::DynamicA2AArgs;
using cuda::DynamicCountsReport;

// Words of one published row: counts in canonical order (at most kMaxDynamicSegments), then
// kTailWords; fixed, so that the all-gather has the same count on every rank.
inline constexpr int kDynamicRowWords = static_cast<int>(kMaxDynamicSegments) + kTailWords;

// Where rank `me`'s staging keeps peer p's slot: peers in rank order, this rank skipped.
COMMX_HOST_DEVICE inline int peer_slot(int p, int me) { return p < me ? p : p - 1; }

// The plan kernel's result: ok = 0 when the agreed check failed (then nothing moves).
struct DynamicDevicePlan {
  int ok;
  long long row_bytes;
  DynamicPlan seg;
};

// Writes this rank's row (its counts in canonical order, capacity, input size, row size).
void launch_dynamic_row(const DynamicA2AArgs& a, long long* row, cudaStream_t s);
// Runs the agreed check on all rows ([world][kDynamicRowWords]); on a problem reports it
// (report_dynamic_counts with `op`, `seq`) and clears plan->ok, else fills the plan and writes
// the received counts.
void launch_dynamic_plan(const DynamicA2AArgs& a, const long long* rows, DynamicDevicePlan* plan,
                         DynamicCountsReport* report, int op, unsigned long long seq,
                         cudaStream_t s);
// Round `window / slot` of the pair streams: pack copies window [window, window + slot) of the
// stream to every peer p from the input into slot peer_slot(p) of the staging; unpack copies the
// same window of every stream received into that slot into the output, and with `own` this rank's
// own segments from input to output. Both do nothing when the plan is not ok.
void launch_dynamic_pack(const DynamicA2AArgs& a, const DynamicDevicePlan* plan, unsigned char* staging,
                         unsigned long long slot, unsigned long long window, cudaStream_t s);
void launch_dynamic_unpack(const DynamicA2AArgs& a, const DynamicDevicePlan* plan,
                           const unsigned char* staging, unsigned long long slot,
                           unsigned long long window, bool own, cudaStream_t s);

}  // namespace commx::nccl
