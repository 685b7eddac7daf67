// lowp_maybe_run: runs a canonical collective (its per-rank views) through the low-precision
// collectives.
// Layer: algorithms (low-precision).
#include "lowp/lowp_dispatch.h"

#include <cstdio>
#include <vector>

#include "commx/error.h"
#include "lowp/lowp_collectives.h"

namespace commx::lowp {

namespace {

void run_op(const OpDesc& op, const LowpContext& c) {
  switch (op.collective) {
    case Collective::kAllReduce:
      return lowp_all_reduce(c, op.input, op.output, op.op.kind);
    case Collective::kAllGather:
      return lowp_all_gather(c, op.input, op.outputs);
    case Collective::kReduceScatter:
      return lowp_reduce_scatter(c, op.inputs, op.output, op.op.kind);
    case Collective::kAllToAll:
      return lowp_all_to_all(c, op.inputs, op.outputs);
    default:
      throw Error(ErrorCode::kInternal, c.ctx + "no low-precision variant");  // not chosen
  }
}

// COMMX_LOW_PRECISION_STATS=1 prints every low-precision op's codec counters on stderr; a
// saturated value (impossible with per-block scaling for finite data) is always reported.
void report(const OpDesc& op, const CodecStats& s, int rank, const std::string& ctx) {
  if (!lowp_stats_requested() && s.saturated == 0) return;
  std::fprintf(stderr,
               "commx lowp: %srank %d %s #%llu: %llu elements encoded, %llu saturated, "
               "%llu underflowed to 0, %llu NaN/Inf in %llu blocks\n",
               ctx.c_str(), rank, op.name(), static_cast<unsigned long long>(op.seq),
               static_cast<unsigned long long>(s.elements),
               static_cast<unsigned long long>(s.saturated),
               static_cast<unsigned long long>(s.underflow),
               static_cast<unsigned long long>(s.nonfinite_values),
               static_cast<unsigned long long>(s.nonfinite_blocks));
}

}  // namespace

bool lowp_maybe_run(const OpDesc& op, const LowpSettings& s, Transport& t, int rank, int size,
                    Deadline deadline, const std::string& ctx, CodecStats* stats,
                    LowpScratch* scratch) {
  auto plan = lowp_choice(s, op, ctx);
  if (!plan) return false;
  // Peers check it: a rank running this op in FP8 never pairs with one running it in full.
  t.call().flags |= OpFingerprint::kLowPrecision;
  t.call().lowp_format = static_cast<uint8_t>(plan->codec.format);
  Fp8Codec codec(plan->codec);
  CodecStats mine;  // this op's counters, added to `stats` at the end
  LowpContext c{t, rank, size, deadline, codec, &mine, op.seq, ctx};
  c.two_term_gather = plan->two_term_gather;
  c.scratch = scratch;
  run_op(op, c);
  if (stats) stats->add(mine);
  report(op, mine, rank, ctx);
  return true;
}

}  // namespace commx::lowp
