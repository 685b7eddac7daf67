// Resolution of the low-precision settings (hints, environment) and the per-op decision.
// Layer: algorithms (low-precision).
#include "lowp/lowp_config.h"

#include <optional>
#include <string>

#include "commx/error.h"
#include "core/env.h"

namespace commx::lowp {

namespace {

// A `low_precision` value: off, on (the configured format) or a format.
struct Mode {
  bool on = false;
  std::optional<Fp8Format> format;
};

std::optional<Mode> parse_mode(const std::string& v) {
  if (v == "off" || v == "0" || v == "false" || v == "none") return Mode{false, std::nullopt};
  if (v == "on" || v == "1" || v == "true" || v == "fp8") return Mode{true, std::nullopt};
  if (v == "fp8e4m3" || v == "e4m3") return Mode{true, Fp8Format::kE4M3};
  if (v == "fp8e5m2" || v == "e5m2") return Mode{true, Fp8Format::kE5M2};
  return std::nullopt;
}

[[noreturn]] void bad(const std::string& what, const std::string& value,
                      const std::string& allowed) {
  throw Error(ErrorCode::kInvalidArgument,
              what + "='" + value + "' is invalid (expected " + allowed + ")");
}

constexpr const char* kModeValues = "off, on, fp8e4m3 or fp8e5m2";

Mode mode_or_throw(const std::string& what, const std::string& v) {
  auto m = parse_mode(v);
  if (!m) bad(what, v, kModeValues);
  return *m;
}

int64_t int_or_throw(const std::string& what, const std::string& v) {
  try {
    size_t used = 0;
    int64_t x = std::stoll(v, &used, 0);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  bad(what, v, "an integer");
}

bool rounding_or_throw(const std::string& what, const std::string& v) {
  if (v == "nearest" || v == "rne") return false;
  if (v == "stochastic" || v == "sr") return true;
  bad(what, v, "nearest or stochastic");
}

bool gather_or_throw(const std::string& what, const std::string& v) {
  if (v == "fp8") return false;
  if (v == "fp8x2") return true;
  bad(what, v, "fp8 or fp8x2");
}

void check_block(const std::string& what, int64_t b) {
  if (b < 16 || b > kMaxBlock || b % 16 != 0)
    bad(what, std::to_string(b), "a multiple of 16 in [16, " + std::to_string(kMaxBlock) + "]");
}

// A setting that a comm hint and an environment variable (which wins) both set.
struct Key {
  const char* hint;
  const char* env;
};
constexpr Key kMinBytes{"low_precision_min_bytes", "COMMX_LOW_PRECISION_MIN_BYTES"};
constexpr Key kBlock{"low_precision_block", "COMMX_LOW_PRECISION_BLOCK"};
constexpr Key kRounding{"low_precision_rounding", "COMMX_LOW_PRECISION_ROUNDING"};
constexpr Key kSeed{"low_precision_seed", "COMMX_LOW_PRECISION_SEED"};
constexpr Key kGather{"low_precision_gather", "COMMX_LOW_PRECISION_GATHER"};

// A value read for a Key and how errors name where it came from.
struct Found {
  std::string what;  // "comm hint low_precision_block", "environment variable COMMX_..."
  std::string value;
};

// Applies the settings of both sources from one of them: `get(key)` is the value it gives.
template <class Get>
void apply_shared(LowpSettings& s, Get&& get) {
  if (std::optional<Found> v = get(kMinBytes)) s.min_bytes = int_or_throw(v->what, v->value);
  if (std::optional<Found> v = get(kBlock)) {
    s.codec.block = int_or_throw(v->what, v->value);
    check_block(v->what, s.codec.block);
  }
  if (std::optional<Found> v = get(kRounding))
    s.codec.stochastic = rounding_or_throw(v->what, v->value);
  if (std::optional<Found> v = get(kSeed))
    s.codec.seed = static_cast<uint64_t>(int_or_throw(v->what, v->value));
  if (std::optional<Found> v = get(kGather)) s.two_term_gather = gather_or_throw(v->what, v->value);
}

const char* const kSwitchEnv[kNumLowpCollectives] = {
    "COMMX_LOW_PRECISION_ENABLE_ALLREDUCE", "COMMX_LOW_PRECISION_ENABLE_ALLGATHER",
    "COMMX_LOW_PRECISION_ENABLE_REDUCESCATTER", "COMMX_LOW_PRECISION_ENABLE_ALLTOALL"};

}  // namespace

const char* lowp_collective_name(LowpCollective c) {
  switch (c) {
    case LowpCollective::kAllReduce:
      return "all_reduce";
    case LowpCollective::kAllGather:
      return "all_gather";
    case LowpCollective::kReduceScatter:
      return "reduce_scatter";
    case LowpCollective::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

bool lowp_stats_requested() {
  static const bool on = env_bool("COMMX_LOW_PRECISION_STATS", false);
  return on;
}

LowpSettings resolve_lowp_settings(const Hints& hints) {
  LowpSettings s;
  auto hint = [&](const char* k) -> std::optional<std::string> {
    auto it = hints.find(k);
    if (it == hints.end()) return std::nullopt;
    return it->second;
  };
  if (auto v = hint("low_precision")) {
    Mode m = mode_or_throw("comm hint low_precision", *v);
    s.enabled = m.on;
    if (m.format) s.codec.format = *m.format;
  }
  apply_shared(s, [&](const Key& k) -> std::optional<Found> {
    if (auto v = hint(k.hint)) return Found{std::string("comm hint ") + k.hint, *v};
    return std::nullopt;
  });

  // Environment overrides (RCCL_LOW_PRECISION_ENABLE is the seed-compatible alias).
  if (auto v = env_first({"COMMX_LOW_PRECISION_ENABLE", "RCCL_LOW_PRECISION_ENABLE"})) {
    Mode m = mode_or_throw("environment variable COMMX_LOW_PRECISION_ENABLE", *v);
    s.enabled = m.on;
    if (m.format) s.codec.format = *m.format;
  }
  if (auto v = env_str("COMMX_LOW_PRECISION_FORMAT")) {
    Mode m = mode_or_throw("environment variable COMMX_LOW_PRECISION_FORMAT", *v);
    if (!m.format) bad("environment variable COMMX_LOW_PRECISION_FORMAT", *v, "e4m3 or e5m2");
    s.codec.format = *m.format;
  }
  for (int c = 0; c < kNumLowpCollectives; ++c)
    s.per_collective[c] = env_bool(kSwitchEnv[c], s.per_collective[c]);
  apply_shared(s, [](const Key& k) -> std::optional<Found> {
    if (auto v = env_str(k.env)) return Found{std::string("environment variable ") + k.env, *v};
    return std::nullopt;
  });
  return s;
}

std::optional<LowpCollective> lowp_collective_of(OpType t) {
  switch (t) {
    case OpType::kAllReduce:
      return LowpCollective::kAllReduce;
    case OpType::kAllGather:
    case OpType::kAllGatherSingle:
      return LowpCollective::kAllGather;
    case OpType::kReduceScatter:
    case OpType::kReduceScatterSingle:
      return LowpCollective::kReduceScatter;
    case OpType::kAllToAll:
    case OpType::kAllToAllSingle:
      return LowpCollective::kAllToAll;
    default:
      return std::nullopt;
  }
}

bool lowp_eligible(OpType t, DataType dtype, ReduceOp op, std::string* why) {
  auto c = lowp_collective_of(t);
  if (!c) {
    if (why) *why = std::string(op_type_name(t)) + " has no low-precision variant";
    return false;
  }
  if (!codec_supports(dtype)) {
    if (why)
      *why = std::string("low precision needs f32, bf16 or f16 data, not ") + dtype_name(dtype);
    return false;
  }
  bool reduces = *c == LowpCollective::kAllReduce || *c == LowpCollective::kReduceScatter;
  if (reduces && op.kind != ReduceKind::kSum && op.kind != ReduceKind::kAvg) {
    if (why)
      *why = std::string("low precision reduces with SUM or AVG only, not ") +
             reduce_kind_name(op.kind);
    return false;
  }
  return true;
}

std::optional<LowpPlan> lowp_choice(const LowpSettings& comm, OpType t, DataType dtype, ReduceOp op,
                                    int64_t bytes, const Hints& op_hints, const std::string& ctx) {
  // The op's own low_precision_* hints win over the comm's settings for this op.
  LowpSettings s = comm;
  apply_shared(s, [&](const Key& k) -> std::optional<Found> {
    auto v = op_hints.find(k.hint);
    if (v == op_hints.end()) return std::nullopt;
    return Found{ctx + "op hint " + k.hint, v->second};
  });
  auto it = op_hints.find("low_precision");
  if (it != op_hints.end() && it->second != "auto") {
    auto m = parse_mode(it->second);
    if (!m)
      throw Error(ErrorCode::kInvalidArgument, ctx + "op hint low_precision='" + it->second +
                                                   "' is invalid (expected " + kModeValues +
                                                   " or auto)");
    if (!m->on) return std::nullopt;
    std::string why;
    if (!lowp_eligible(t, dtype, op, &why))
      throw Error(ErrorCode::kUnsupported,
                  ctx + "op hint low_precision='" + it->second + "' cannot be honoured: " + why);
    LowpPlan plan{s.codec, s.two_term_gather};
    if (m->format) plan.codec.format = *m->format;
    return plan;
  }
  if (!s.enabled || bytes < s.min_bytes || !lowp_eligible(t, dtype, op)) return std::nullopt;
  if (!s.per_collective[static_cast<int>(*lowp_collective_of(t))]) return std::nullopt;
  return LowpPlan{s.codec, s.two_term_gather};
}

std::optional<LowpPlan> lowp_choice(const LowpSettings& s, const OpDesc& op,
                                    const std::string& ctx) {
  if (!s.enabled && op.hints.empty()) return std::nullopt;
  return lowp_choice(s, op.type, op.dtype(), op.op, static_cast<int64_t>(op.bytes()), op.hints,
                     ctx);
}

}  // namespace commx::lowp
