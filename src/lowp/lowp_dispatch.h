// The hook a host backend calls before running a collective: if the op should run in low
// precision (settings, hints, size threshold, dtype, reduction), it runs it over the backend's
// Transport and returns true; otherwise it does nothing and returns false.
// Layer: algorithms (low-precision).
//
// Use in a backend (three lines):
//   init():     lowp_ = lowp::resolve_lowp_settings(ctx.options.hints);
//   dispatch(): if (lowp::lowp_maybe_run(op, lowp_, *transport_, rank, size, deadline,
//                                        op_context(ctx_, op), &lowp_stats_, &lowp_scratch_))
//                 return;
#pragma once

#include <string>
#include <vector>

#include "commx/backend.h"
#include "lowp/lowp_collectives.h"
#include "lowp/lowp_config.h"
#include "transport/transport.h"

namespace commx::lowp {

// The size compared with the threshold is OpDesc::bytes() (every rank agrees on it for the
// eligible forms), in bytes of OpDesc::dtype(); `op` is lowered (lower_op).
// Runs `op` in low precision when lowp_choice() says so; `stats` (nullable) gathers the codec
// counters; `scratch` (nullable, one per comm) keeps the buffers from op to op. Throws like the
// collectives (errors prefixed by `ctx`).
bool lowp_maybe_run(const OpDesc& op, const LowpSettings& s, Transport& t, int rank, int size,
                    Deadline deadline, const std::string& ctx, CodecStats* stats = nullptr,
                    LowpScratch* scratch = nullptr);

}  // namespace commx::lowp
