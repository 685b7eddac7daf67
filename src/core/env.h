// Environment access and rank discovery from launcher variables (DESIGN section 3).
// Layer: core (bootstrap).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace commx {

std::optional<std::string> env_str(const char* name);
int64_t env_int(const char* name, int64_t dflt);
double env_double(const char* name, double dflt);
bool env_bool(const char* name, bool dflt);
// The first of `names` that is set (aliases such as RCCL_DDA_ENABLE for COMMX_DDA_ENABLE).
std::optional<std::string> env_first(std::initializer_list<const char*> names);

// The folder holding libcommx itself (plugins and data files are installed beside it).
std::string library_dir();

struct RankInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string source;  // which launcher's variables were used
};

// COMMX_RANK/COMMX_WORLD_SIZE, then torchrun (RANK/WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_*),
// PMI (PMI_RANK/PMI_SIZE); nullopt when none is set.
std::optional<RankInfo> rank_from_env();

}  // namespace commx
