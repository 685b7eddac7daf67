// The cuda backend's reduce_scatter table (see reduce_scatter.h). Layer: backends (cuda).
#include "cuda/reduce_scatter.h"

#include <algorithm>
#include <string_view>

#include "commx/types.h"
#include "cuda/allreduce_algorithms.h"

namespace commx::cuda {
namespace {

int64_t elem_size(const ReduceScatterShape& a) {
  return static_cast<int64_t>(dtype_size(a.rs.dtype));
}

bool ll_fits(const ReduceScatterShape& a, const Tuning& t) {
  return ll_bytes_needed(a.n, elem_size(a), a.world) <= t.buffer_bytes;
}
void ll_enqueue(const PeerSet& ps, const ReduceScatterShape& a, const Tuning& t, cudaStream_t s) {
  launch_reduce_scatter_ll(ps, a.ins, a.out, a.n, a.rs, ll_blocks(a.n * elem_size(a), t.max_blocks),
                           s);
}

// Each source's round takes one 256-byte aligned region of a buffer half, in whole packs; all
// rounds in one launch (rounds_device.cuh).
void chunked_enqueue(const PeerSet& ps, const ReduceScatterShape& a, const Tuning& t,
                     cudaStream_t s) {
  if (a.n <= 0) return;
  const int64_t es = elem_size(a);
  const int64_t pack = 16 / es;
  const int64_t cap =
      static_cast<int64_t>(((t.buffer_bytes / a.world) & ~uint64_t(255)) / es) / pack * pack;
  const uint64_t round_bytes = static_cast<uint64_t>(std::min(cap, a.n) * es);
  launch_reduce_scatter(ps, a.ins, a.out, a.n, cap, a.rs,
                        blocks_for(round_bytes, t.max_blocks_large), s);
}

const ReduceScatterAlgorithm kTable[] = {
    {"ll", Collective::kReduceScatter, nullptr, {ll_fits, ll_enqueue}, "chunked", "one_shot"},
    {"chunked", Collective::kReduceScatter, nullptr, {nullptr, chunked_enqueue}},
    // Not native: the backend hands the op to NCCL.
    {"nccl", Collective::kReduceScatter, nullptr, {}},
};

const ReduceScatterAlgorithm& row_named(std::string_view name) {
  for (const ReduceScatterAlgorithm& a : kTable)
    if (name == a.name) return a;
  return kTable[1];  // "chunked": runs every op the kernels can
}

// The choice without hint or table row.
const char* by_size(const Tuning& t, uint64_t bytes) {
  return bytes <= t.ll_max_bytes ? "ll" : "chunked";
}

// A hint meant for the all_reduce rows (a benchmark passes one hint to every op) is no error.
bool allreduce_name(std::string_view name) {
  for (const AllReduceAlgorithm& a : allreduce_algorithms())
    if (algorithm_detail::names(a.name, a.aliases, name)) return true;
  return false;
}

}  // namespace

std::span<const ReduceScatterAlgorithm> reduce_scatter_algorithms() { return kTable; }

const ReduceScatterAlgorithm& select_reduce_scatter(const Tuning& t, const OpDesc& op,
                                                    const Topology& topo,
                                                    const TuningTable* table,
                                                    const std::string& where) {
  const char* dflt = native_reduce_supported(op.output.dtype, op.op.kind)
                         ? by_size(t, op.output.nbytes())
                         : "nccl";
  const ReduceScatterAlgorithm& row =
      select_algorithm(reduce_scatter_algorithms(), Collective::kReduceScatter, op, topo,
                       t.dda_enable ? table : nullptr, dflt, where, allreduce_name);
  // Neither a hint nor a table row makes the kernels run a reduction they lack.
  return row.run.enqueue && native_reduce_supported(op.output.dtype, op.op.kind)
             ? row
             : row_named("nccl");
}

void enqueue_reduce_scatter(const PeerSet& ps, const Tuning& t, const ReduceScatterShape& a,
                            cudaStream_t s, const ReduceScatterAlgorithm* preferred) {
  const ReduceScatterAlgorithm* row =
      preferred ? preferred : &row_named(by_size(t, static_cast<uint64_t>(a.n * elem_size(a))));
  while (row->run.fits && !row->run.fits(a, t)) row = &row_named(row->fallback);
  row->run.enqueue(ps, a, t, s);
}

}  // namespace commx::cuda
