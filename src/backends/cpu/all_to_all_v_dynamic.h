// all_to_all_v_dynamic on the cpu backend: the counts are read from host tensors when the op runs
// (the API is the GPU one, tested here in CPU CI). Every rank first sends its row (counts,
// capacity, input size, row size) to every peer, all ranks run the same check, then each
// segment travels as one message. Layer: backends (cpu).
#pragma once

#include "commx/backend.h"
#include "commx/error.h"
#include "transport/transport.h"

namespace commx {

// The op failed the agreed check (dynamic_a2a_check.h): every rank threw the same error before
// any data moved, so the comm stays usable.
class DynamicCountsError : public Error {
 public:
  using Error::Error;
};

void cpu_all_to_all_v_dynamic(const OpDesc& op, Transport& transport, int rank, int size,
                              Deadline deadline);

}  // namespace commx
