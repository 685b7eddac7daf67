// The all_reduce (and reduce) algorithms of the cuda backend as one table (commx/algorithm.h):
// each row says how to enqueue an op, whether it fits the registered buffer and which row takes
// over when it does not. The shared selector picks the preferred row (hint, tuning table, size
// thresholds); a new algorithm is its kernel plus one row here. Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string>

#include "commx/algorithm.h"
#include "commx/backend.h"
#include "cuda/kernel_params.h"
#include "cuda/tuning.h"

namespace commx::cuda {

// What an algorithm needs to know of one op.
struct AllReduceShape {
  const void* in;
  void* out;
  int64_t n;          // elements
  size_t elem;        // bytes per element
  int world;
  int out_rank;       // -1: every rank receives (all_reduce); else reduce's root
  uint64_t half;      // bytes of one buffer half
};

// How a row runs. The row's id names it in AllReduceAlgo (tests, the benchmark); `fits` and
// `fallback` handle the registered buffer: a row whose buffer need the op exceeds hands over to
// its fallback (the last row always fits).
struct AllReduceRun {
  AllReduceAlgo id = AllReduceAlgo::kNccl;
  bool (*fits)(const AllReduceShape& a) = nullptr;
  // Enqueues the op on `s` (kernel errors are checked by the caller); null for "nccl", whose ops
  // the backend delegates, and "hierarchical", which the backend's Hierarchy runs.
  void (*enqueue)(const PeerSet& ps, const AllReduceShape& a, const OpDesc& op, const Tuning& t,
                  cudaStream_t s) = nullptr;
  AllReduceAlgo fallback = AllReduceAlgo::kNccl;
};
using AllReduceAlgorithm = Algorithm<AllReduceRun>;

// The rows (all_reduce; reduce runs the same kernels with one receiving rank).
std::span<const AllReduceAlgorithm> allreduce_algorithms();
// The row for `op` (all_reduce or reduce): its hint "algorithm", else `table`'s row for the
// topology, else the size thresholds of `t` (choose_allreduce). On several hosts (topo.hosts > 1)
// the one-host rows fall back to "hierarchical". Throws InvalidArgument for an unknown hint.
const AllReduceAlgorithm& select_allreduce(const Tuning& t, const OpDesc& op, const Topology& topo,
                                           const TuningTable* table, const std::string& where);
// Elements per piece of the two-shot (the last piece may be shorter; all of `a.n` when it fits
// one): whole packs per owner, pieces of even size, two_shot_bytes_needed(piece) within a half.
int64_t two_shot_piece(const AllReduceShape& a);
// The row to run for `preferred`, following buffer fallbacks until one fits.
const AllReduceAlgorithm& fitting_allreduce(const AllReduceAlgorithm& preferred,
                                            const AllReduceShape& a);

}  // namespace commx::cuda
