// The agreed check of an all_to_all_v_dynamic: once every rank holds every rank's published row
// (counts in canonical order, then capacity, input size and row size), each finds the same first
// problem, so all ranks fail the op together, before any data moves. Host and device (the cuda
// kernel runs it on the rows it exchanged). Layer: algorithms.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/dynamic_a2a_layout.h"

namespace commx {

struct DynamicCountsProblem {
  enum Kind : int64_t {
    kNone = 0,
    kNegativeCount = 1,     // a: the count, b: its canonical index
    kRowSizeDiffers = 2,    // a: this rank's row size, b: rank 0's
    kInputOverrun = 3,      // a: rows sent, b: row size, c: input elements
    kCapacityExceeded = 4,  // a: rows to receive, b: row size, c: output elements
  };
  int64_t kind = kNone;
  int rank = -1;  // the rank at fault
  int64_t a = 0, b = 0, c = 0;
};

// rows(k, w): word w of rank k's published row (segments() counts, then kTailWords words).
template <typename Rows>
COMMX_HOST_DEVICE DynamicCountsProblem check_dynamic_rows(const DynamicLayout& layout,
                                                          const Rows& rows) {
  const int n = layout.world, L = layout.experts_per_rank, segs = layout.segments();
  using P = DynamicCountsProblem;
  for (int k = 0; k < n; ++k) {
    const int64_t row = rows(k, segs + kTailRowElems);
    if (row != rows(0, segs + kTailRowElems))
      return P{P::kRowSizeDiffers, k, row, rows(0, segs + kTailRowElems)};
    __int128 sent = 0;
    for (int c = 0; c < segs; ++c) {
      const int64_t v = rows(k, c);
      if (v < 0) return P{P::kNegativeCount, k, v, c};
      sent += v;
    }
    if (sent * row > rows(k, segs + kTailInput))
      return P{P::kInputOverrun, k, static_cast<int64_t>(sent), row, rows(k, segs + kTailInput)};
  }
  for (int j = 0; j < n; ++j) {
    __int128 got = 0;
    for (int k = 0; k < n; ++k)
      for (int l = 0; l < L; ++l) got += rows(k, layout.canonical(j, l));
    const int64_t row = rows(j, segs + kTailRowElems);
    if (got * row > rows(j, segs + kTailCapacity))
      return P{P::kCapacityExceeded, j, static_cast<int64_t>(got), row,
               rows(j, segs + kTailCapacity)};
  }
  return P{};
}

// The message for a problem found (without the op's prefix).
std::string describe(const DynamicCountsProblem& p, int experts_per_rank);

}  // namespace commx
