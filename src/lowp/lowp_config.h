// When to run a collective in low precision (FP8 on the wire, FP32 arithmetic): comm-level
// settings from comm hints and COMMX_LOW_PRECISION_* environment variables, and the per-op
// decision a backend asks for before running an op. Layer: algorithms (low-precision).
//
// Precedence, highest first: the op hint `low_precision`; the environment; the comm hints;
// the defaults (off). See docs/low_precision.md for the full table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "commx/backend.h"
#include "lowp/fp8_codec.h"

namespace commx::lowp {

enum class LowpCollective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll };
inline constexpr int kNumLowpCollectives = 4;
const char* lowp_collective_name(LowpCollective c);

// Below this many bytes (of the op's input dtype, per rank) the normal path runs: quantizing
// costs more than it saves on small messages. RCCLX uses 16 MiB on GPUs; see docs for the CPU
// measurement behind this default.
inline constexpr int64_t kDefaultMinBytes = 16 << 20;

struct LowpSettings {
  bool enabled = false;  // comm-wide switch (hint `low_precision` or COMMX_LOW_PRECISION_ENABLE)
  bool per_collective[kNumLowpCollectives] = {true, true, true, true};
  int64_t min_bytes = kDefaultMinBytes;
  CodecConfig codec;             // format, block, rounding, seed
  bool two_term_gather = false;  // all_reduce: gather value + residual (LowpContext)
};

// What an op runs with when it runs in low precision.
struct LowpPlan {
  CodecConfig codec;
  bool two_term_gather = false;
};

// Reads the comm hints (`low_precision`, `low_precision_min_bytes`, `low_precision_block`,
// `low_precision_rounding`, `low_precision_seed`,
// `low_precision_gather`) and then the environment, which overrides.
// Throws InvalidArgument naming the hint or variable whose value is bad.
LowpSettings resolve_lowp_settings(const Hints& comm_hints);

// COMMX_LOW_PRECISION_STATS: every codec counter is kept and printed (elements, underflows,
// NaN/Inf); without it only saturation, which is always reported.
bool lowp_stats_requested();

// The low-precision collective an op maps to, if any (v-variants have none: their sizes differ
// per rank, so ranks could decide differently).
std::optional<LowpCollective> lowp_collective_of(OpType t);

// Whether the op can run in low precision at all: its collective has a low-precision variant, a
// float dtype (f32/bf16/f16) and, for reductions, SUM or AVG. `why` says why not.
bool lowp_eligible(OpType t, DataType dtype, ReduceOp op, std::string* why = nullptr);

// The codec to use for this op, or nullopt for the normal path. `bytes` is a size every rank
// agrees on (count of the op's per-rank input times the dtype size). An op hint that forces FP8
// on an ineligible op throws Unsupported, prefixed by `ctx` (op_context of the caller). The op
// hints `low_precision_min_bytes`, `_block`, `_rounding`, `_seed` and `_gather` override the
// comm's settings `s` for this op (a bad value throws InvalidArgument naming the op hint).
std::optional<LowpPlan> lowp_choice(const LowpSettings& s, OpType t, DataType dtype, ReduceOp op,
                                    int64_t bytes, const Hints& op_hints,
                                    const std::string& ctx = "");
// The same for a lowered op. Every op asks, so with low precision off and no op hints it answers
// at once, before any of the op's sizes are computed.
std::optional<LowpPlan> lowp_choice(const LowpSettings& s, const OpDesc& op,
                                    const std::string& ctx = "");

}  // namespace commx::lowp
