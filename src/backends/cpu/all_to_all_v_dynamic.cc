// cpu_all_to_all_v_dynamic (see all_to_all_v_dynamic.h). Layer: backends (cpu).
#include "backends/cpu/all_to_all_v_dynamic.h"

#include <cstring>
#include <vector>

#include "algorithms/dynamic_a2a_check.h"
#include "algorithms/dynamic_a2a_layout.h"

namespace commx {

void cpu_all_to_all_v_dynamic(const OpDesc& op, Transport& transport, int rank, int size,
                              Deadline deadline) {
  const AllToAllVDynamic& d = op.dynamic;
  const DynamicLayout layout{size, d.experts_per_rank, d.form};
  const int L = layout.experts_per_rank, segs = layout.segments(), words = segs + kTailWords;
  const int64_t* mine = d.input_counts.ptr<const int64_t>();

  std::vector<std::vector<int64_t>> rows(size, std::vector<int64_t>(words));
  for (int j = 0; j < size; ++j)
    for (int l = 0; l < L; ++l) rows[rank][layout.canonical(j, l)] = mine[layout.send_index(j, l)];
  rows[rank][segs + kTailCapacity] = op.output.count;
  rows[rank][segs + kTailInput] = op.input.count;
  rows[rank][segs + kTailRowElems] = d.row_elems;
  const size_t row_bytes = words * sizeof(int64_t);
  std::vector<SendReq> sends;
  std::vector<RecvReq> recvs;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    sends.push_back({p, rows[rank].data(), row_bytes});
    recvs.push_back({p, rows[p].data(), row_bytes});
  }
  transport.exchange(sends, recvs, deadline);
  const DynamicCountsProblem problem =
      check_dynamic_rows(layout, [&](int k, int w) { return rows[k][w]; });
  if (problem.kind != DynamicCountsProblem::kNone)
    throw DynamicCountsError(ErrorCode::kInvalidArgument, describe(problem, L));

  // Element offsets of each segment in this rank's input (send order) and output (recv order).
  const size_t row = static_cast<size_t>(d.row_elems) * dtype_size(op.input.dtype);
  std::vector<int64_t> send_rows(segs), recv_rows(segs), send_at(segs), recv_at(segs);
  for (int j = 0; j < size; ++j)
    for (int l = 0; l < L; ++l) {
      send_rows[layout.send_index(j, l)] = rows[rank][layout.canonical(j, l)];
      recv_rows[layout.recv_index(j, l)] = rows[j][layout.canonical(rank, l)];
    }
  for (int i = 1; i < segs; ++i) {
    send_at[i] = send_at[i - 1] + send_rows[i - 1];
    recv_at[i] = recv_at[i - 1] + recv_rows[i - 1];
  }
  int64_t* written = d.output_counts.ptr<int64_t>();
  std::memcpy(written, recv_rows.data(), segs * sizeof(int64_t));

  const char* in = static_cast<const char*>(op.input.data);
  char* out = static_cast<char*>(op.output.data);
  sends.clear();
  recvs.clear();
  // Per peer, segments in increasing l on both sides: messages match in issue order.
  for (int l = 0; l < L; ++l)
    for (int p = 0; p < size; ++p) {
      const int si = layout.send_index(p, l), ri = layout.recv_index(p, l);
      const size_t send_bytes = send_rows[si] * row, recv_bytes = recv_rows[ri] * row;
      if (p == rank) {
        if (send_bytes) std::memmove(out + recv_at[ri] * row, in + send_at[si] * row, send_bytes);
        continue;
      }
      if (send_bytes) sends.push_back({p, in + send_at[si] * row, send_bytes});
      if (recv_bytes) recvs.push_back({p, out + recv_at[ri] * row, recv_bytes});
    }
  transport.exchange(sends, recvs, deadline);
}

}  // namespace commx
