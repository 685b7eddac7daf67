// The one exception family of commx. Messages name comm, rank, op and sequence number.
// Layer: public API.
#pragma once

#include <stdexcept>
#include <string>

namespace commx {

enum class ErrorCode {
  kInvalidArgument,
  kUnsupported,
  kTimeout,
  kPeerFailure,
  kAborted,
  kSystem,  // an OS call failed (errno in the message)
  kCuda,
  kNccl,
  kInternal,
};

const char* error_code_name(ErrorCode c);

// Called in a catch block: rethrows the commx::Error being handled with `prefix` put before its
// message (same code); any other exception passes unchanged.
[[noreturn]] void rethrow_with_prefix(const std::string& prefix);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& msg)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + msg), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace commx
