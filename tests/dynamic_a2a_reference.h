// The reference of all_to_all_v_dynamic and its MoE forms for the cpu and GPU tests: count
// matrices (random with zeros, an all-to-one hot spot, a rank that sends nothing), input bytes
// that name their rank and position, and what each rank must receive, written out per form
// rather than through the library's layout code. Layer: tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "commx/comm.h"

namespace commx::testing {

enum class Form { kPlain, kDispatch, kCombine };
enum class Pattern { kRandom, kHotSpot, kSilentSender };
inline constexpr unsigned char kUntouched = 0xEE;

// Byte b of element e of rank k's input.
inline unsigned char input_byte(int k, int64_t e, size_t b) {
  return static_cast<unsigned char>((k * 131 + e * 7 + b * 29 + 1) % 251);
}

// counts[k]: rank k's input counts, as it passes them (plain: per rank; dispatch: per global
// expert; combine: per (local expert l, source s) at l * n + s).
inline std::vector<std::vector<int64_t>> make_counts(Form f, int n, int L, Pattern p,
                                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int64_t>> c(n, std::vector<int64_t>(n * L));
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < n * L; ++i) {
      int64_t v = static_cast<int64_t>(rng() % 6);
      if (rng() % 3 == 0) v = 0;
      c[k][i] = v;
    }
  if (p == Pattern::kHotSpot)  // every rank sends only to rank 0
    for (int k = 0; k < n; ++k)
      for (int i = 0; i < n * L; ++i) {
        const bool to_zero = f == Form::kCombine ? i % n == 0 : i < L;
        c[k][i] = to_zero ? 5 + (k + i) % 3 : 0;
      }
  if (p == Pattern::kSilentSender)
    for (auto& v : c[n - 1]) v = 0;
  return c;
}

struct Expected {
  std::vector<unsigned char> out;
  std::vector<int64_t> counts;
};

// Where the rows of rank j's output come from, written out per form.
inline Expected reference(Form f, int n, int L, const std::vector<std::vector<int64_t>>& c, int j,
                          int64_t row, size_t es) {
  Expected x;
  x.counts.assign(n * L, 0);
  auto take = [&](int k, int64_t first_row, int64_t rows) {
    for (int64_t e = first_row * row; e < (first_row + rows) * row; ++e)
      for (size_t b = 0; b < es; ++b) x.out.push_back(input_byte(k, e, b));
  };
  auto prefix = [&](int k, int upto) {
    int64_t s = 0;
    for (int i = 0; i < upto; ++i) s += c[k][i];
    return s;
  };
  if (f == Form::kPlain) {
    for (int k = 0; k < n; ++k) {
      take(k, prefix(k, j), c[k][j]);
      x.counts[k] = c[k][j];
    }
  } else if (f == Form::kDispatch) {  // rank j holds experts j*L .. j*L+L-1
    for (int l = 0; l < L; ++l)
      for (int k = 0; k < n; ++k) {
        const int e = j * L + l;
        take(k, prefix(k, e), c[k][e]);
        x.counts[l * n + k] = c[k][e];
      }
  } else {  // combine: rank k's segment (l, j) comes back to j, in global expert order (k, l)
    for (int k = 0; k < n; ++k)
      for (int l = 0; l < L; ++l) {
        take(k, prefix(k, l * n + j), c[k][l * n + j]);
        x.counts[k * L + l] = c[k][l * n + j];
      }
  }
  return x;
}

inline Work run_form(Comm& comm, Form f, const Tensor& out, const Tensor& in,
                     const Tensor& out_counts, const Tensor& in_counts, int64_t row) {
  switch (f) {
    case Form::kPlain:
      return comm.all_to_all_v_dynamic(out, in, out_counts, in_counts, row);
    case Form::kDispatch:
      return comm.dispatch(out, in, out_counts, in_counts, row);
    case Form::kCombine:
      return comm.combine(out, in, out_counts, in_counts, row);
  }
  return {};
}

inline const char* form_name(Form f) {
  return f == Form::kPlain ? "plain" : f == Form::kDispatch ? "dispatch" : "combine";
}

}  // namespace commx::testing
