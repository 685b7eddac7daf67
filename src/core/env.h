// Rank discovery from launcher variables (DESIGN section 3) and the library's own folder; the
// environment reads themselves are public (commx/env.h). Layer: core (bootstrap).
#pragma once

#include <optional>
#include <string>

#include "commx/env.h"

namespace commx {

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
