// Where each segment of an all_to_all_v_dynamic sits, for its three forms (plain, MoE dispatch,
// MoE combine): one definition for the cpu backend, the cuda kernels and the tests' reference.
// A segment is (destination rank j, local expert l) seen from a sender, or (source rank k, local
// expert l) seen from a receiver. Layer: algorithms (plain functions, host and device).
#pragma once

#include <cstdint>

#include "commx/backend.h"

#if defined(__CUDACC__)
#define COMMX_HOST_DEVICE __host__ __device__
#else
#define COMMX_HOST_DEVICE
#endif

namespace commx {

struct DynamicLayout {
  int world = 1;
  int experts_per_rank = 1;  // L
  DynamicA2AForm form = DynamicA2AForm::kPlain;

  COMMX_HOST_DEVICE int segments() const { return world * experts_per_rank; }
  // Index in the sender's input counts (and its input order) of segment (destination j, l):
  // global expert order (j, l), except combine, whose input is by local expert, then rank.
  COMMX_HOST_DEVICE int send_index(int j, int l) const {
    return form == DynamicA2AForm::kCombine ? l * world + j : j * experts_per_rank + l;
  }
  // Index in the receiver's output counts (and its output order) of segment (source k, l):
  // by local expert, then source (dispatch; plain has one expert), except combine, whose output
  // is in global expert order (k, l).
  COMMX_HOST_DEVICE int recv_index(int k, int l) const {
    return form == DynamicA2AForm::kCombine ? k * experts_per_rank + l : l * world + k;
  }
  // The segment (j, l) of the canonical index c = j * L + l, the order counts are exchanged in.
  COMMX_HOST_DEVICE int canonical(int j, int l) const { return j * experts_per_rank + l; }
};

// What every rank publishes before any data moves: its counts in canonical order, then these.
enum DynamicRowTail : int {
  kTailCapacity = 0,  // output elements
  kTailInput = 1,     // input elements
  kTailRowElems = 2,
  kTailWords = 3,
};

}  // namespace commx
