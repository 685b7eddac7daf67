// take_dynamic_counts_error (see dynamic_counts_report.h). Layer: backends (GPU).
#include "cuda_common/dynamic_counts_report.h"

#include <algorithm>

#include "algorithms/dynamic_a2a_check.h"
#include "commx/backend.h"
#include "commx/error.h"

namespace commx::cuda {

std::exception_ptr take_dynamic_counts_error(volatile DynamicCountsReport* r, uint64_t work_seq,
                                             std::mutex& mu, const std::string& where) {
  if (!r || !r->set) return nullptr;
  std::lock_guard<std::mutex> lk(mu);
  if (!r->set || r->seq > work_seq) return nullptr;
  DynamicCountsProblem p;
  p.kind = r->problem[0];
  p.rank = static_cast<int>(r->problem[1]);
  p.a = r->problem[2];
  p.b = r->problem[3];
  p.c = r->problem[4];
  const long long per_rank = r->problem[5];
  const int experts = static_cast<int>(std::max<long long>(per_rank, 1));
  const std::string op = op_type_name(static_cast<OpType>(r->op));
  const std::string which = r->seq == work_seq ? op + " #" + std::to_string(r->seq) + ": "
                                               : "an earlier " + op + " (#" +
                                                     std::to_string(r->seq) + ") failed: ";
  std::string msg = where + which + describe(p, experts) +
                    " (found on the GPU by every rank; the comm stays usable)";
  r->set = 0;
  return std::make_exception_ptr(Error(ErrorCode::kInvalidArgument, msg));
}

}  // namespace commx::cuda
