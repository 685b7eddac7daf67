// The cuda backend's all_reduce table (see allreduce_algorithms.h). Layer: backends (cuda).
#include "cuda/allreduce_algorithms.h"

#include <algorithm>

#include "commx/error.h"
#include "cuda/exchange.h"
#include "cuda/kernels.h"

namespace commx::cuda {
namespace {

ReduceSpec spec_of(const AllReduceShape& a, const OpDesc& op) {
  return make_reduce_spec(op.input.dtype, op.op, a.world, aligned16(a.in) && aligned16(a.out));
}

uint64_t bytes_of(const AllReduceShape& a) { return static_cast<uint64_t>(a.n) * a.elem; }

bool ll_fits(const AllReduceShape& a) {
  return a.out_rank < 0 && ll_bytes_needed(a.n, a.elem, a.world) <= a.half;
}
void ll_enqueue(const PeerSet& ps, const AllReduceShape& a, const OpDesc& op, const Tuning& t,
                cudaStream_t s) {
  launch_allreduce_ll(ps, a.in, a.out, a.n, spec_of(a, op), ll_blocks(bytes_of(a), t.max_blocks), s);
}

bool ll128_fits(const AllReduceShape& a) {
  return a.out_rank < 0 && ll128_bytes_needed(a.n, a.elem, a.world) <= a.half;
}
void ll128_enqueue(const PeerSet& ps, const AllReduceShape& a, const OpDesc& op, const Tuning& t,
                   cudaStream_t s) {
  launch_allreduce_ll128(ps, a.in, a.out, a.n, spec_of(a, op), ll128_blocks(bytes_of(a), t.max_blocks), s);
}

bool flat_fits(const AllReduceShape& a) { return flat_bytes_needed(a.n, a.elem, a.world) <= a.half; }
void flat_enqueue(const PeerSet& ps, const AllReduceShape& a, const OpDesc& op, const Tuning& t,
                  cudaStream_t s) {
  launch_allreduce_flat(ps, a.in, a.out, a.n, a.out_rank, spec_of(a, op),
                        blocks_for(bytes_of(a), t.max_blocks), s);
}

// Two-shot (reduce-scatter into owners, then all-gather), in pieces that fit one buffer half, all
// in one launch: the bandwidth path, and the one that always fits.
bool two_shot_fits(const AllReduceShape&) { return true; }
void two_shot_enqueue(const PeerSet& ps, const AllReduceShape& a, const OpDesc& op, const Tuning& t,
                      cudaStream_t s) {
  if (a.n <= 0) return;
  const int64_t es = static_cast<int64_t>(a.elem);
  const int64_t chunk = two_shot_piece(a);
  launch_allreduce_two_shot(ps, a.in, a.out, a.n, chunk, a.out_rank, spec_of(a, op),
                            blocks_for(static_cast<uint64_t>(chunk * es) / a.world,
                                       t.max_blocks_large),
                            s);
}

}  // namespace

int64_t two_shot_piece(const AllReduceShape& a) {
  if (a.world <= 1) return a.n;  // nothing goes through the buffer
  const int64_t pack = 16 / static_cast<int64_t>(a.elem), unit = pack * a.world;
  // Pieces of whole packs per owner, so every piece starts as aligned as the op's buffers, and of
  // even sizes: an op a little over one half's worth runs as two like pieces, not as a full one
  // and a short tail. A half holds a slot per peer for each step (two_shot_bytes_needed), each
  // 256-byte aligned: the largest piece has the most whole packs per slot.
  const uint64_t slot = a.half / (2 * (a.world - 1)) / 256 * 256;
  const int64_t most = std::max<int64_t>(static_cast<int64_t>(slot / a.elem) / pack, 1) * unit;
  const int64_t pieces = (a.n + most - 1) / most;
  return std::min(((a.n + pieces - 1) / pieces + unit - 1) / unit * unit, a.n);
}

namespace {

// The kernels of one host's links; on several hosts their ops go to the hierarchical path.
bool one_host(const OpDesc&, const Topology& topo) { return topo.hosts <= 1; }
// Several hosts (hierarchy.h): a reduce-scatter over each host's peer memory, an all_reduce of the
// shards across hosts through NCCL, an all-gather over peer memory. The backend's Hierarchy runs
// it (no enqueue here), for all_reduce; reduce on several hosts goes to NCCL before any row.
bool across_hosts(const OpDesc&, const Topology& topo) { return topo.hosts > 1; }

const AllReduceAlgorithm kTable[] = {
    {"ll", Collective::kAllReduce, one_host,
     {AllReduceAlgo::kLL, ll_fits, ll_enqueue, AllReduceAlgo::kFlat}, "hierarchical"},
    {"ll128", Collective::kAllReduce, one_host,
     {AllReduceAlgo::kLL128, ll128_fits, ll128_enqueue, AllReduceAlgo::kFlat}, "hierarchical"},
    {"flat", Collective::kAllReduce, one_host,
     {AllReduceAlgo::kFlat, flat_fits, flat_enqueue, AllReduceAlgo::kTwoShot}, "hierarchical",
     "one_shot"},
    {"two_shot", Collective::kAllReduce, one_host,
     {AllReduceAlgo::kTwoShot, two_shot_fits, two_shot_enqueue, AllReduceAlgo::kTwoShot}, "hierarchical",
     "tree"},
    // Unsupported on one host: the size-based row instead.
    {"hierarchical", Collective::kAllReduce, across_hosts, {AllReduceAlgo::kHierarchical}},
    // Not native: the backend hands the op to NCCL.
    {"nccl", Collective::kAllReduce, nullptr, {AllReduceAlgo::kNccl}},
};

const AllReduceAlgorithm& row_of(AllReduceAlgo id) {
  for (const AllReduceAlgorithm& a : kTable)
    if (a.run.id == id) return a;
  throw Error(ErrorCode::kInternal, std::string("cuda: no all_reduce algorithm '") + algo_name(id) + "'");
}

}  // namespace

std::span<const AllReduceAlgorithm> allreduce_algorithms() { return kTable; }

const AllReduceAlgorithm& select_allreduce(const Tuning& t, const OpDesc& op, const Topology& topo,
                                           const TuningTable* table, const std::string& where) {
  // DDA switched off (COMMX_DDA_ENABLE=0) leaves only hints: no table row brings it back.
  const char* dflt = algo_name(choose_allreduce(t, op.input.nbytes(), {}, where));
  return select_algorithm(allreduce_algorithms(), Collective::kAllReduce, op, topo,
                          t.dda_enable ? table : nullptr, dflt, where);
}

const AllReduceAlgorithm& fitting_allreduce(const AllReduceAlgorithm& preferred,
                                            const AllReduceShape& a) {
  const AllReduceAlgorithm* row = &preferred;
  while (row->run.fits && !row->run.fits(a)) row = &row_of(row->run.fallback);
  return *row;
}

}  // namespace commx::cuda
