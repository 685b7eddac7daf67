// Environment access and rank discovery.
// Layer: core (bootstrap).
#include "core/env.h"

#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>

#include "commx/error.h"

namespace commx {

std::optional<std::string> env_str(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t dflt) {
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
  auto v = env_str(name);
  if (!v) return dflt;
  try {
    return std::stod(*v);
  } catch (const std::exception&) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("environment variable ") + name + "='" + *v + "' is not a number");
  }
}

bool env_bool(const char* name, bool dflt) {
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
  if (!env_str(rank) || !env_str(size)) return std::nullopt;
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
