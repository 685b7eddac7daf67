// Algorithm selection of the cuda backend. Layer: backends (cuda).
#include "cuda/tuning.h"

#include <algorithm>

#include "commx/error.h"
#include "commx/env.h"
#include "cuda/kernel_params.h"

namespace commx::cuda {
namespace {

uint64_t parse_bytes(const std::string& s, const char* what) {
  try {
    size_t pos = 0;
    double v = std::stod(s, &pos);
    std::string unit = s.substr(pos);
    double mul = 1;
    if (unit == "k" || unit == "K" || unit == "KiB") mul = 1024;
    else if (unit == "m" || unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
    else if (unit == "g" || unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
    else if (!unit.empty()) throw std::invalid_argument(unit);
    return static_cast<uint64_t>(v * mul);
  } catch (const std::exception&) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("cuda backend: ") + what + "='" + s + "' is not a byte count");
  }
}

void override_bytes(uint64_t& v, const char* env, const Hints& h, const char* hint) {
  if (auto e = env_str(env)) v = parse_bytes(*e, env);
  if (auto it = h.find(hint); it != h.end()) v = parse_bytes(it->second, hint);
}

}  // namespace

const char* algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::kLL: return "ll";
    case AllReduceAlgo::kLL128: return "ll128";
    case AllReduceAlgo::kFlat: return "flat";
    case AllReduceAlgo::kTwoShot: return "two_shot";
    case AllReduceAlgo::kHierarchical: return "hierarchical";
    case AllReduceAlgo::kNccl: return "nccl";
  }
  return "?";
}

Tuning Tuning::resolve(int world, int sms, const Hints& h, bool ll128_links) {
  Tuning t;
  // Measured on H200s over NVLink (graph-captured, bf16, each algorithm forced over its range):
  // 2 ranks: LL beats flat up to 256 KiB, flat beats tree up to 4 MiB (tie at 8 MiB).
  // 4 ranks: LL up to 128 KiB (6.1 vs 6.9 us), flat at 256-512 KiB, tree from 1 MiB (14.4 vs 15.0).
  // One-shot moves (world-1) full copies per rank, so the crossovers fall with world size; 8 ranks
  // were not measured (no 8-GPU machine): halved again.
  t.ll_max_bytes = world <= 2 ? (256u << 10) : world <= 4 ? (128u << 10) : (64u << 10);
  t.flat_max_bytes = world <= 2 ? (4u << 20) : world <= 4 ? (512u << 10) : (256u << 10);
  // LL128 (2 H200s over NVLink, graph, bf16): behind LL up to
  // 16 KiB, level at 32 KiB, then ahead of LL and flat: 256 KiB 3.74 vs LL 4.41 us, 1 MiB 6.63
  // vs flat 8.64, 4 MiB 17.7 vs 18.8 (NCCL 8.54, 14.33, 32.7). Not measured at more ranks: opt-in.
  // Over PCIe a 128-byte store may arrive torn (NCCL turns its LL128 off there): opt-in too.
  if (world <= 2 && ll128_links) {
    t.ll128_min_bytes = 32u << 10;
    t.ll128_max_bytes = 4u << 20;
  }
  t.tree_max_bytes = UINT64_MAX;
  // The per-comm memory budget: two halves and the signal pad stay within 64 MiB per rank and
  // comm (62 MiB + 128 KiB). Larger halves mean fewer kernel boundaries for large messages (256 MiB
  // all-reduce: 804 us with 256 MiB halves, 817 us with 128 MiB); COMMX_CUDA_BUFFER_BYTES raises it.
  t.buffer_bytes = 31ull << 20;
  t.max_blocks = std::min(sms > 0 ? sms : kMaxBlocks, kMaxBlocks);
  // A wait that has missed a while sleeps between polls (sync_device.cuh PollWait): an early
  // rank must not flood the buffer its late peer writes into.
  t.poll_sleep_ns = 1000;
  // Two blocks per SM keep more NVLink stores in flight (256 MiB: 850 us vs 892 us).
  t.max_blocks_large = std::min(sms > 0 ? 2 * sms : kMaxBlocks, kMaxBlocks);
  t.dda_enable = env_bool("COMMX_DDA_ENABLE", t.dda_enable);  // or its alias RCCL_DDA_ENABLE
  if (auto it = h.find("dda_enable"); it != h.end()) t.dda_enable = it->second != "0";
  override_bytes(t.ll_max_bytes, "COMMX_DDA_LL_MAX_BYTES", h, "dda_ll_max_bytes");
  override_bytes(t.ll128_min_bytes, "COMMX_DDA_LL128_MIN_BYTES", h, "dda_ll128_min_bytes");
  override_bytes(t.ll128_max_bytes, "COMMX_DDA_LL128_MAX_BYTES", h, "dda_ll128_max_bytes");
  override_bytes(t.flat_max_bytes, "COMMX_DDA_FLAT_MAX_BYTES", h, "dda_flat_max_bytes");
  override_bytes(t.tree_max_bytes, "COMMX_DDA_TREE_MAX_BYTES", h, "dda_tree_max_bytes");
  override_bytes(t.buffer_bytes, "COMMX_CUDA_BUFFER_BYTES", h, "buffer_bytes");
  t.buffer_bytes = std::max<uint64_t>(t.buffer_bytes & ~uint64_t(4095), 1u << 20);
  uint64_t sleep = t.poll_sleep_ns;
  override_bytes(sleep, "COMMX_CUDA_POLL_SLEEP_NS", h, "poll_sleep_ns");
  t.poll_sleep_ns = static_cast<unsigned int>(std::min<uint64_t>(sleep, 1000000));
  int64_t mb = env_int("COMMX_CUDA_MAX_BLOCKS", t.max_blocks);
  t.max_blocks = static_cast<int>(std::clamp<int64_t>(mb, 1, kMaxBlocks));
  mb = env_int("COMMX_CUDA_MAX_BLOCKS_LARGE", t.max_blocks_large);
  t.max_blocks_large = static_cast<int>(std::clamp<int64_t>(mb, 1, kMaxBlocks));
  return t;
}

AllReduceAlgo choose_allreduce(const Tuning& t, uint64_t bytes, const Hints& op_hints,
                               const std::string& where) {
  if (auto it = op_hints.find("algorithm"); it != op_hints.end()) {
    if (it->second == "ll") return AllReduceAlgo::kLL;
    if (it->second == "ll128") return AllReduceAlgo::kLL128;
    if (it->second == "flat" || it->second == "one_shot") return AllReduceAlgo::kFlat;
    if (it->second == "tree" || it->second == "two_shot") return AllReduceAlgo::kTwoShot;
    if (it->second == "hierarchical") return AllReduceAlgo::kHierarchical;
    if (it->second == "nccl") return AllReduceAlgo::kNccl;
    throw Error(ErrorCode::kInvalidArgument,
                where + "unknown all_reduce algorithm hint '" + it->second +
                    "' (want ll, ll128, flat (one_shot), two_shot (tree), hierarchical or nccl)");
  }
  if (!t.dda_enable) return AllReduceAlgo::kNccl;
  if (bytes > t.ll128_min_bytes && bytes <= t.ll128_max_bytes) return AllReduceAlgo::kLL128;
  if (bytes <= t.ll_max_bytes) return AllReduceAlgo::kLL;
  if (bytes <= t.flat_max_bytes) return AllReduceAlgo::kFlat;
  if (bytes <= t.tree_max_bytes) return AllReduceAlgo::kTwoShot;
  return AllReduceAlgo::kNccl;
}

int ll_threads() {
  static const int threads = [] {
    int64_t t = env_int("COMMX_CUDA_LL_THREADS", kThreads);
    return static_cast<int>(std::clamp<int64_t>(t / 32 * 32, 64, kThreads));
  }();
  return threads;
}

namespace {
// Blocks of ll_threads() threads for `lanes` busy lanes, within 1..max_blocks.
int ll_grid(uint64_t lanes, int max_blocks) {
  const uint64_t threads = static_cast<uint64_t>(ll_threads());
  const uint64_t b = (lanes + threads - 1) / threads;
  return static_cast<int>(std::clamp<uint64_t>(b, 1, static_cast<uint64_t>(max_blocks)));
}
}  // namespace

int ll_blocks(uint64_t bytes, int max_blocks) { return ll_grid((bytes + 7) / 8, max_blocks); }

int ll128_blocks(uint64_t bytes, int max_blocks) {
  const uint64_t lines = (bytes + kLL128Payload - 1) / kLL128Payload;
  return ll_grid(lines * (kLL128Line / 16), max_blocks);  // 16 bytes per lane
}

int blocks_for(uint64_t bytes, int max_blocks) {
  uint64_t b = (bytes + 16383) / 16384;
  return static_cast<int>(std::clamp<uint64_t>(b, 1, static_cast<uint64_t>(max_blocks)));
}

}  // namespace commx::cuda
