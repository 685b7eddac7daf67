// Environment access and rank discovery. A COMMX_* variable is declared in the settings table
// (settings.h) and validated there; the helpers here also read the launchers' own variables.
// Layer: core (bootstrap).
#include "core/env.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>

#include "commx/error.h"
#include "core/settings.h"

namespace commx {

namespace {
// The declared setting `name` belongs to, or null (launcher variables such as RANK, MASTER_ADDR).
const SettingSpec* declared(const char* name) {
  std::string_view n(name);
  if (n.substr(0, 6) != "COMMX_" && n.substr(0, 5) != "RCCL_") return nullptr;
  try {
    return &setting_spec(n);
  } catch (const Error&) {
    return nullptr;  // undeclared: read as before (tests/core/settings_test finds these)
  }
}
}  // namespace

std::optional<std::string> env_raw(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::optional<std::string> env_str(const char* name) {
  if (const SettingSpec* s = declared(name)) {
    auto v = setting_text(name);
    if (v) {
      std::string problem = setting_problem(*s, *v);
      if (!problem.empty())
        throw Error(ErrorCode::kInvalidArgument, std::string("environment variable ") + name +
                                                     "='" + *v + "': " + problem);
    }
    return v;
  }
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t dflt) {
  if (const SettingSpec* s = declared(name)) {
    if (s->type == SettingType::kBytes)
      return static_cast<int64_t>(setting_bytes(name, static_cast<uint64_t>(dflt)));
    if (s->type == SettingType::kBool) return setting_bool(name, dflt != 0) ? 1 : 0;
    return setting_int(name, dflt);
  }
  auto v = env_str(name);
  if (!v) return dflt;
  try {
    size_t used = 0;
    int64_t x = std::stoll(*v, &used, 0);
    if (used == v->size()) return x;
  } catch (const std::exception&) {
  }
  throw Error(ErrorCode::kInvalidArgument, std::string("environment variable ") + name + "='" + *v +
                                               "' is not an integer");
}

double env_double(const char* name, double dflt) {
  if (declared(name)) return setting_seconds(name, dflt);
  auto v = env_str(name);
  if (!v) return dflt;
  try {
    size_t used = 0;
    double x = std::stod(*v, &used);
    if (used == v->size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw Error(ErrorCode::kInvalidArgument,
              std::string("environment variable ") + name + "='" + *v + "' is not a finite number");
}

bool env_bool(const char* name, bool dflt) {
  if (declared(name)) return setting_bool(name, dflt);
  auto v = env_str(name);
  if (!v) return dflt;
  const std::string& s = *v;
  if (s == "1" || s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off") return false;
  throw Error(ErrorCode::kInvalidArgument,
              std::string("environment variable ") + name + "='" + s + "' is not a boolean");
}

std::optional<std::string> env_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env_str(n)) return v;
  return std::nullopt;
}

std::string library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_dir), &info) == 0 || info.dli_fname == nullptr)
    return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

namespace {
std::optional<RankInfo> try_vars(const char* rank, const char* size, const char* lrank,
                                 const char* lsize, const char* source) {
  const bool has_rank = env_str(rank).has_value(), has_size = env_str(size).has_value();
  if (has_rank != has_size)  // half a launcher's variables: a silent 1-rank job would be worse
    throw Error(ErrorCode::kInvalidArgument,
                std::string(has_size ? size : rank) + "=" + *env_str(has_size ? size : rank) +
                    " is set but " + (has_size ? rank : size) + " is not: set both (" + source +
                    " sets them) or neither");
  if (!has_rank) return std::nullopt;
  RankInfo r;
  r.rank = static_cast<int>(env_int(rank, 0));
  r.size = static_cast<int>(env_int(size, 1));
  r.local_rank = static_cast<int>(env_int(lrank, r.rank));
  r.local_size = static_cast<int>(env_int(lsize, r.size));
  r.source = source;
  if (r.size < 1 || r.rank < 0 || r.rank >= r.size)
    throw Error(ErrorCode::kInvalidArgument, std::string("bad rank/size from ") + source + ": rank " +
                                                 std::to_string(r.rank) + " of " + std::to_string(r.size));
  return r;
}
}  // namespace

std::optional<RankInfo> rank_from_env() {
  if (auto r = try_vars("COMMX_RANK", "COMMX_WORLD_SIZE", "COMMX_LOCAL_RANK", "COMMX_LOCAL_WORLD_SIZE", "commx"))
    return r;
  if (auto r = try_vars("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun")) return r;
  if (auto r = try_vars("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "openmpi"))
    return r;
  if (auto r = try_vars("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "pmi")) return r;
  return std::nullopt;
}

}  // namespace commx
