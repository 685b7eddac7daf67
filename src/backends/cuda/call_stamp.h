// The host side of the cuda backend's call checks (the kernels' side: sync_device.cuh): the
// DeviceCall a kernel carries for an op (its OpFingerprint as words, and their hash), the calls
// this rank issued lately (to name a peer's call known only by its hash), and the message of a
// kDevMismatch report. Layer: backends (cuda); plain C++, no CUDA.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "core/op_fingerprint.h"
#include "cuda/kernel_params.h"

namespace commx::cuda {

DeviceCall device_call(const OpFingerprint& f);
OpFingerprint fingerprint_of_words(const unsigned long long (&words)[5]);

// The last kSize distinct calls a rank issued on a comm, their ordinals aside (a loop of the same
// op notes it once). Noting runs on the issuing thread, lock-free while the call repeats;
// lookups may run on another thread.
class RecentCalls {
 public:
  static constexpr size_t kSize = 64;
  void note(const OpFingerprint& f);
  // The newest noted call that, issued as the `ordinal`-th collective, hashes to `hash`.
  // With a `check_value`, `hash` is only flag_check(hash, check_value): the newest call with that
  // check is taken (another of the kSize calls shares it with odds of about kSize / 2^20).
  std::optional<OpFingerprint> find(unsigned long long hash, uint32_t ordinal,
                                    unsigned long long check_value = 0) const;

 private:
  mutable std::mutex mu_;
  std::array<OpFingerprint, kSize> ring_{};
  size_t next_ = 0, count_ = 0;
  OpFingerprint last_{};  // the last call noted (issuing thread only)
  bool any_ = false;
};

// A kDevMismatch report, copied out of the HostCtl the kernels write.
struct CallMismatch {
  unsigned long long mine[5];
  unsigned long long theirs[5];
  unsigned long long their_hash;
  bool theirs_known;  // the peer's words were read from its pad; else only its hash is
  // Non-zero: their_hash is only flag_check(peer's hash, check_value), from a barrier flag.
  unsigned long long check_value = 0;
};

// "rank 0 called all_reduce #4 (sum, 16 x float32) but rank 1 called broadcast #4 (root 1, 16 x
// float32): the ranks' calls do not match"; a peer's call known only by its hash is looked up in
// `recent` (this rank's own calls), else named by its hash.
std::string call_mismatch_message(const CallMismatch& m, int my_rank, int peer,
                                  const RecentCalls& recent);

}  // namespace commx::cuda
