// Kernels of the nccl backend's all_to_all_v_dynamic (see dynamic_kernels.h). Layer: backends
// (nccl).
#include "algorithms/dynamic_a2a_check.h"
#include "cuda/protocol_simple.cuh"
#include "cuda_common/dynamic_counts_report_device.cuh"
#include "nccl/dynamic_kernels.h"

namespace commx::nccl {
namespace {

using Byte = unsigned char;
constexpr int kThreads = 512;
// Enough blocks to copy prefill-sized segments at full memory bandwidth; idle ones leave early.
constexpr int kMoveBlocks = 64;

__global__ void row_kernel(DynamicA2AArgs a, long long* row) {
  const DynamicLayout& y = a.layout;
  const int segs = y.segments(), L = y.experts_per_rank;
  for (int c = threadIdx.x; c < segs; c += blockDim.x)
    row[c] = a.in_counts[y.send_index(c / L, c % L)];
  if (threadIdx.x == 0) {
    row[segs + kTailCapacity] = a.out_elems;
    row[segs + kTailInput] = a.in_elems;
    row[segs + kTailRowElems] = a.row_elems;
  }
}

__global__ void plan_kernel(DynamicA2AArgs a, const long long* rows, DynamicDevicePlan* plan,
                            DynamicCountsReport* report, int op, unsigned long long seq) {
  const DynamicLayout& y = a.layout;
  const int L = y.experts_per_rank, me = a.rank;
  auto row = [&](int k, int w) -> int64_t { return rows[k * kDynamicRowWords + w]; };
  const DynamicCountsProblem found = check_dynamic_rows(y, row);
  if (found.kind != DynamicCountsProblem::kNone) {
    const long long p[5] = {found.kind, found.rank, found.a, found.b, found.c};
    cuda::report_dynamic_counts(report, op, seq, p, L);
    plan->ok = 0;
    return;
  }
  plan_dynamic_segments(y, row, me, plan->seg);
  plan->row_bytes = row(me, y.segments() + kTailRowElems) * static_cast<long long>(a.elem_bytes);
  for (int p = 0; p < y.world; ++p)
    for (int l = 0; l < L; ++l) a.out_counts[y.recv_index(p, l)] = row(p, y.canonical(me, l));
  plan->ok = 1;
}

// Copies the part of stream bytes [at, at + len) inside the window [win, win + win_len): between
// `seg` (holding the stream bytes from `at`) and `window` (holding those from `win`), in the
// direction `to_window` says. Spread over the whole grid.
__device__ void copy_piece(Byte* seg, Byte* window, bool to_window, unsigned long long at,
                           unsigned long long len, unsigned long long win,
                           unsigned long long win_len) {
  const unsigned long long lo = max(at, win), hi = min(at + len, win + win_len);
  if (lo >= hi) return;
  Byte* s = seg + (lo - at);
  Byte* w = window + (lo - win);
  const Byte* from = to_window ? s : w;
  Byte* to = to_window ? w : s;
  const bool fa = (reinterpret_cast<uintptr_t>(from) & 15) == 0;
  const bool ta = (reinterpret_cast<uintptr_t>(to) & 15) == 0;
  cuda::copy_block(from, to, static_cast<int64_t>(hi - lo), fa, ta);
}

__global__ void __launch_bounds__(kThreads)
    move_kernel(DynamicA2AArgs a, const DynamicDevicePlan* plan, Byte* staging,
                unsigned long long slot, unsigned long long win, bool pack, bool own) {
  if (!plan->ok) return;
  const DynamicPlan& g = plan->seg;
  const unsigned long long rb = plan->row_bytes;
  const int me = a.rank, L = a.layout.experts_per_rank;
  Byte* in = const_cast<Byte*>(static_cast<const Byte*>(a.in));
  Byte* out = static_cast<Byte*>(a.out);
  for (int p = 0; p < a.layout.world; ++p) {
    if (p == me) continue;
    Byte* window = staging + peer_slot(p, me) * slot;
    for (int l = 0; l < L; ++l) {
      const int c = a.layout.canonical(p, l);
      if (pack)
        copy_piece(in + g.send_in[c] * rb, window, true, g.send_pos[c] * rb, g.send_rows[c] * rb,
                   win, slot);
      else
        copy_piece(out + g.recv_out[c] * rb, window, false, g.recv_pos[c] * rb,
                   g.recv_rows[c] * rb, win, slot);
    }
  }
  if (own)
    for (int l = 0; l < L; ++l) {
      const int c = a.layout.canonical(me, l);
      const unsigned long long len = g.send_rows[c] * rb;
      if (len) copy_piece(in + g.send_in[c] * rb, out + g.recv_out[c] * rb, true, 0, len, 0, len);
    }
}

}  // namespace

void launch_dynamic_row(const DynamicA2AArgs& a, long long* row, cudaStream_t s) {
  row_kernel<<<1, 256, 0, s>>>(a, row);
}

void launch_dynamic_plan(const DynamicA2AArgs& a, const long long* rows, DynamicDevicePlan* plan,
                         DynamicCountsReport* report, int op, unsigned long long seq,
                         cudaStream_t s) {
  plan_kernel<<<1, 1, 0, s>>>(a, rows, plan, report, op, seq);
}

void launch_dynamic_pack(const DynamicA2AArgs& a, const DynamicDevicePlan* plan, Byte* staging,
                         unsigned long long slot, unsigned long long window, cudaStream_t s) {
  move_kernel<<<kMoveBlocks, kThreads, 0, s>>>(a, plan, staging, slot, window, true, false);
}

void launch_dynamic_unpack(const DynamicA2AArgs& a, const DynamicDevicePlan* plan,
                           const Byte* staging, unsigned long long slot, unsigned long long window,
                           bool own, cudaStream_t s) {
  move_kernel<<<kMoveBlocks, kThreads, 0, s>>>(a, plan, const_cast<Byte*>(staging), slot, window,
                                               false, own);
}

}  // namespace commx::nccl
