// Device side of DynamicCountsReport (dynamic_counts_report.h): the writer one thread per rank
// calls when the agreed check of an all_to_all_v_dynamic fails. Layer: backends (GPU), header-only.
#pragma once

#include "cuda_common/dynamic_counts_report.h"

namespace commx::cuda {

// `problem`: kind, rank, a, b, c of a DynamicCountsProblem; `experts`: experts per rank.
__device__ inline void report_dynamic_counts(DynamicCountsReport* r, int op, unsigned long long seq,
                                             const long long* problem, int experts) {
  volatile DynamicCountsReport* v = r;
  if (v->set) return;  // the host has not taken the previous report yet: keep that one
  v->op = op;
  v->seq = seq;
  for (int i = 0; i < 5; ++i) v->problem[i] = problem[i];
  v->problem[5] = experts;
  __threadfence_system();
  v->set = 1;
  __threadfence_system();
}

}  // namespace commx::cuda
