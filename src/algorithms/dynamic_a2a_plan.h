// Where this rank's segments of an all_to_all_v_dynamic sit, once every rank's published row is
// known (and passed the agreed check): rows and row offsets of each segment in the input, the
// output, and the byte stream of the pair it travels between. Host and device (the nccl
// backend's plan kernel runs it). Layer: algorithms.
#pragma once

#include <cstdint>

#include "algorithms/dynamic_a2a_layout.h"

namespace commx {

// Indexed by canonical segment c = (peer p, local expert l): what this rank sends to p for l and
// receives from p for l. A pair's stream holds its segments in increasing l.
struct DynamicPlan {
  int64_t send_rows[kMaxDynamicSegments];  // rows sent
  int64_t send_in[kMaxDynamicSegments];    // first row in the input
  int64_t send_pos[kMaxDynamicSegments];   // first row in the stream to p
  int64_t recv_rows[kMaxDynamicSegments];  // rows received
  int64_t recv_out[kMaxDynamicSegments];   // first row in the output
  int64_t recv_pos[kMaxDynamicSegments];   // first row in the stream from p
};

// rows(k, w) as for check_dynamic_rows.
template <typename Rows>
COMMX_HOST_DEVICE void plan_dynamic_segments(const DynamicLayout& layout, const Rows& rows, int me,
                                             DynamicPlan& plan) {
  const int n = layout.world, L = layout.experts_per_rank, segs = layout.segments();
  // Rows per segment in send / receive order (send_index / recv_index are bijections onto
  // 0..segs-1), then turned into exclusive prefix sums: the segments' first rows.
  int64_t in_at[kMaxDynamicSegments], out_at[kMaxDynamicSegments];
  for (int p = 0; p < n; ++p)
    for (int l = 0; l < L; ++l) {
      in_at[layout.send_index(p, l)] = rows(me, layout.canonical(p, l));
      out_at[layout.recv_index(p, l)] = rows(p, layout.canonical(me, l));
    }
  int64_t acc_in = 0, acc_out = 0;
  for (int i = 0; i < segs; ++i) {
    const int64_t ci = in_at[i], co = out_at[i];
    in_at[i] = acc_in;
    out_at[i] = acc_out;
    acc_in += ci;
    acc_out += co;
  }
  for (int p = 0; p < n; ++p) {
    int64_t sp = 0, rp = 0;
    for (int l = 0; l < L; ++l) {
      const int c = layout.canonical(p, l);
      plan.send_rows[c] = rows(me, c);
      plan.recv_rows[c] = rows(p, layout.canonical(me, l));
      plan.send_in[c] = in_at[layout.send_index(p, l)];
      plan.recv_out[c] = out_at[layout.recv_index(p, l)];
      plan.send_pos[c] = sp;
      plan.recv_pos[c] = rp;
      sp += plan.send_rows[c];
      rp += plan.recv_rows[c];
    }
  }
}

}  // namespace commx
