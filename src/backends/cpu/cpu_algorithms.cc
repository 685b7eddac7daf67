// The cpu backend's algorithm table (see cpu_algorithms.h). Layer: backends/cpu.
#include "backends/cpu/cpu_algorithms.h"

#include <array>
#include <cstring>
#include <span>
#include <vector>

#include "commx/host_reduce.h"

namespace commx {
namespace {

bool on_shm(const OpDesc&, const Topology& t) { return std::strcmp(t.link, "shm") == 0; }
bool single_copy(const OpDesc&, const Topology& t) {
  return std::strcmp(t.link, "shm") == 0 && t.single_copy && t.world_size > 1;
}

HostReducer reducer(const OpDesc& op) { return HostReducer(op.dtype(), op.op, op.comm_size); }

// A list of `n` values, held inline for comms of up to 16 ranks (the per-op lists must not cost
// allocations: they would outweigh a small op's data movement).
template <class T>
class RankList {
 public:
  explicit RankList(size_t n) : n_(n) {
    if (n > small_.size()) big_.resize(n);
  }
  T* data() { return big_.empty() ? small_.data() : big_.data(); }
  const T* data() const { return big_.empty() ? small_.data() : big_.data(); }
  T& operator[](size_t i) { return data()[i]; }
  operator std::span<const T>() const { return {data(), n_}; }
  operator std::span<T>() { return {data(), n_}; }

 private:
  size_t n_;
  std::array<T, 16> small_{};
  std::vector<T> big_;
};

// The per-rank views as the algorithms take them.
struct Pieces {
  RankList<void*> ptr;
  RankList<size_t> bytes;
  RankList<size_t> counts;
  explicit Pieces(const std::vector<Tensor>& views)
      : ptr(views.size()), bytes(views.size()), counts(views.size()) {
    for (size_t i = 0; i < views.size(); ++i) {
      ptr[i] = views[i].data;
      counts[i] = static_cast<size_t>(views[i].count);
      bytes[i] = views[i].nbytes();
    }
  }
  std::span<const void* const> cptr() const {
    const std::span<void* const> p = ptr;
    return {const_cast<const void* const*>(p.data()), p.size()};
  }
};

// all_reduce and reduce.
template <class Coll, void (*kFn)(Coll&, const void*, void*, size_t, const HostReducer&)>
void all_reduce(Coll& c, const OpDesc& op, const CpuTuning&) {
  kFn(c, op.input.data, op.output.data, static_cast<size_t>(op.input.count), reducer(op));
}
void all_reduce_transport(GenericColl& c, const OpDesc& op, const CpuTuning& t) {
  // The transport's own choice by size, for the hint "generic".
  if (op.input.nbytes() <= t.rd_max_bytes)
    return all_reduce<GenericColl, gen_all_reduce_recursive_doubling>(c, op, t);
  all_reduce<GenericColl, gen_all_reduce_ring>(c, op, t);
}
template <bool kTwoStep>
void shm_reduce_rows(ShmColl& c, const OpDesc& op, const CpuTuning&) {
  shm_reduce(c, op.input.data, op.output.data, static_cast<size_t>(op.input.count), op.root,
             reducer(op), kTwoStep);
}
void gen_reduce(GenericColl& c, const OpDesc& op, const CpuTuning&) {
  gen_reduce_tree(c, op.input.data, op.output.data, static_cast<size_t>(op.input.count), op.root,
                  reducer(op));
}

// The data collectives: one function per family, over the op's per-rank views.
template <class Coll, void (*kFn)(Coll&, void*, size_t, int)>
void broadcast(Coll& c, const OpDesc& op, const CpuTuning&) {
  kFn(c, op.input.data, op.input.nbytes(), op.root);
}
template <class Coll, void (*kFn)(Coll&, const void*, size_t, std::span<void* const>,
                                  std::span<const size_t>)>
void all_gather(Coll& c, const OpDesc& op, const CpuTuning&) {
  Pieces o(op.outputs);
  kFn(c, op.input.data, op.input.nbytes(), o.ptr, o.bytes);
}
template <class Coll, void (*kFn)(Coll&, std::span<const void* const>, std::span<const size_t>,
                                  void*, const HostReducer&)>
void reduce_scatter(Coll& c, const OpDesc& op, const CpuTuning&) {
  Pieces i(op.inputs);
  kFn(c, i.cptr(), i.counts, op.output.data, reducer(op));
}
template <class Coll, void (*kFn)(Coll&, std::span<const void* const>, std::span<const size_t>,
                                  std::span<void* const>, std::span<const size_t>)>
void all_to_all(Coll& c, const OpDesc& op, const CpuTuning&) {
  Pieces i(op.inputs), o(op.outputs);
  kFn(c, i.cptr(), i.bytes, o.ptr, o.bytes);
}
template <class Coll, void (*kFn)(Coll&, const void*, size_t, std::span<void* const>, int)>
void gather(Coll& c, const OpDesc& op, const CpuTuning&) {
  Pieces o(op.outputs);  // empty but on the root
  kFn(c, op.input.data, op.input.nbytes(), o.ptr, op.root);
}
template <class Coll, void (*kFn)(Coll&, std::span<const void* const>, void*, size_t, int)>
void scatter(Coll& c, const OpDesc& op, const CpuTuning&) {
  Pieces i(op.inputs);  // empty but on the root
  kFn(c, i.cptr(), op.output.data, op.output.nbytes(), op.root);
}
template <class Coll, void (*kFn)(Coll&)>
void barrier(Coll& c, const OpDesc&, const CpuTuning&) {
  kFn(c);
}

using C = Collective;
using S = ShmColl;
using G = GenericColl;
constexpr const char* kTransportNames = "ring,recursive_doubling,rd,tree,direct";

// Every row's `supports` reads only the topology: CpuBackend::choose reuses a choice by the
// op's collective and size alone.
const CpuAlgorithm kTable[] = {
    // all_reduce: one-shot (every rank reads every slot), reduce-scatter + all-gather through
    // the slots, single copy over cross-memory attach; over the transport: recursive doubling,
    // ring, or the transport's own choice by size.
    {"dda", C::kAllReduce, on_shm, {.shm = all_reduce<S, shm_all_reduce_dda>}, nullptr, "one_shot"},
    {"rsag", C::kAllReduce, on_shm, {.shm = all_reduce<S, shm_all_reduce_rsag>}, nullptr,
     "two_shot,reduce_scatter_all_gather"},
    {"cma", C::kAllReduce, single_copy, {.shm = all_reduce<S, shm_all_reduce_cma>}, "rsag",
     "single_copy"},
    {"recursive_doubling", C::kAllReduce, nullptr,
     {.generic = all_reduce<G, gen_all_reduce_recursive_doubling>}, nullptr, "rd"},
    {"ring", C::kAllReduce, nullptr, {.generic = all_reduce<G, gen_all_reduce_ring>}},
    {"generic", C::kAllReduce, nullptr, {.generic = all_reduce_transport}, nullptr, "tree,direct"},
    // reduce: one step (the root reads every slot) or two (reduce-scatter, then gather).
    {"dda", C::kReduce, on_shm, {.shm = shm_reduce_rows<false>}, nullptr, "one_shot"},
    {"rsag", C::kReduce, on_shm, {.shm = shm_reduce_rows<true>}, nullptr,
     "two_shot,reduce_scatter_all_gather"},
    {"tree", C::kReduce, nullptr, {.generic = gen_reduce}, nullptr,
     "generic,ring,recursive_doubling,rd,direct"},
    // The data collectives: one algorithm per family.
    {"shm", C::kBroadcast, on_shm, {.shm = broadcast<S, shm_broadcast>}},
    {"generic", C::kBroadcast, nullptr, {.generic = broadcast<G, gen_broadcast_tree>}, nullptr,
     kTransportNames},
    {"shm", C::kAllGather, on_shm, {.shm = all_gather<S, shm_all_gather>}},
    {"generic", C::kAllGather, nullptr, {.generic = all_gather<G, gen_all_gather_ring>}, nullptr,
     kTransportNames},
    {"shm", C::kReduceScatter, on_shm, {.shm = reduce_scatter<S, shm_reduce_scatter>}},
    {"generic", C::kReduceScatter, nullptr,
     {.generic = reduce_scatter<G, gen_reduce_scatter_ring>}, nullptr, kTransportNames},
    {"shm", C::kAllToAll, on_shm, {.shm = all_to_all<S, shm_all_to_all>}},
    {"generic", C::kAllToAll, nullptr, {.generic = all_to_all<G, gen_all_to_all>}, nullptr,
     kTransportNames},
    {"shm", C::kGather, on_shm, {.shm = gather<S, shm_gather>}},
    {"generic", C::kGather, nullptr, {.generic = gather<G, gen_gather>}, nullptr, kTransportNames},
    {"shm", C::kScatter, on_shm, {.shm = scatter<S, shm_scatter>}},
    {"generic", C::kScatter, nullptr, {.generic = scatter<G, gen_scatter>}, nullptr,
     kTransportNames},
    {"shm", C::kBarrier, on_shm, {.shm = barrier<S, shm_barrier>}},
    {"generic", C::kBarrier, nullptr, {.generic = barrier<G, gen_barrier>}, nullptr,
     kTransportNames},
};

}  // namespace

std::span<const CpuAlgorithm> cpu_algorithms() { return kTable; }

bool cpu_knows_algorithm(std::string_view name) {
  for (const CpuAlgorithm& a : kTable)
    if (algorithm_detail::names(a.name, a.aliases, name)) return true;
  return false;
}

const char* cpu_default_algorithm(const OpDesc& op, const Topology& topo, const CpuTuning& t,
                                  size_t cma_all_reduce_min_bytes) {
  const bool shm = on_shm(op, topo);
  const size_t bytes = op.bytes();
  switch (op.collective) {
    case Collective::kAllReduce:
      if (!shm) return bytes <= t.rd_max_bytes ? "recursive_doubling" : "ring";
      if (bytes <= t.dda_max_bytes(topo.world_size)) return "dda";
      // Single copy where cross-memory attach works (the same answer on every rank).
      if (single_copy(op, topo) && bytes >= cma_all_reduce_min_bytes) return "cma";
      return "rsag";
    case Collective::kReduce:
      if (!shm) return "tree";
      return bytes <= t.dda_max_bytes(topo.world_size) ? "dda" : "rsag";
    default:
      return shm ? "shm" : "generic";
  }
}

}  // namespace commx
