// Typed options of comms and ops. Environment variables only override (see docs/env.md).
// Layer: public API.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace commx {

class Store;
using Hints = std::map<std::string, std::string>;
using Timeout = std::chrono::milliseconds;

inline constexpr Timeout kDefaultTimeout = std::chrono::seconds(600);
// The longest timeout accepted: a year (longer ones overflow deadlines and mean "never" anyway).
inline constexpr Timeout kMaxTimeout = std::chrono::hours(24 * 365);

// A timeout given in seconds by a user (an op's timeout=, a variable): finite, 0 to a year, else
// kInvalidArgument naming `what`.
Timeout timeout_from_seconds(double secs, const std::string& what = "timeout");

struct CommOptions {
  // Per-op default; env COMMX_TIMEOUT_SECONDS overrides the default (not an explicit value).
  std::optional<Timeout> timeout;
  // On timeout or peer failure: std::abort() the process after running abort hooks.
  // Default false for a library (env COMMX_ABORT_ON_ERROR=1 turns it on).
  std::optional<bool> abort_process_on_timeout_or_error;
  // Rendezvous store; when null the comm bootstraps one from the environment.
  std::shared_ptr<Store> store;
  // Explicit rank/size; when unset they come from the environment (COMMX_*, torchrun, MPI, PMI).
  std::optional<int> rank;
  std::optional<int> size;
  bool enable_reconfigure = false;
  Hints hints;  // backend-specific, e.g. {"transport": "tcp"} for the cpu backend
};

struct OpOptions {
  std::optional<Timeout> timeout;  // unset: the comm's timeout
  Hints hints;                     // e.g. {"algorithm": "ring"}
};

}  // namespace commx
