// A cuda comm whose creation fails (no GPU here, or a bad hint on a GPU machine) must throw a
// commx::Error naming the comm and rank, never crash on the half-built backend's teardown (its
// finalize once read the control block that init had not allocated yet). Runs on the CPU in CI.
// Layer: tests.
#include <gtest/gtest.h>

#include <string>

#include "commx/comm.h"
#include "commx/error.h"
#include "commx/store.h"

namespace commx {
namespace {

std::string create_error(const Hints& hints) {
  CommOptions o;
  o.store = make_hash_store();
  o.rank = 0;
  o.size = 1;
  o.hints = hints;
  try {
    Comm::create("cuda", Device::cuda(0), "doomed", o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaInitError, BadHintIsAnErrorNotACrash) {
  std::string e = create_error({{"peer_mem", "posix"}});
  ASSERT_FALSE(e.empty()) << "a comm with peer_mem=posix was created";
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
}

TEST(CudaInitError, DeviceOutOfRangeIsNamed) {
  CommOptions o;
  o.store = make_hash_store();
  o.rank = 0;
  o.size = 1;
  for (const char* backend : {"cuda", "nccl"}) {
    try {
      Comm::create(backend, Device::cuda(4096), "far", o);
      ADD_FAILURE() << backend << ": a comm on cuda:4096 was created";
    } catch (const Error& e) {
      std::string m = e.what();
      // No GPU here: Unsupported saying so; a GPU machine: the index is out of range.
      EXPECT_TRUE(m.find("cuda:4096") != std::string::npos ||
                  m.find("no usable CUDA device") != std::string::npos)
          << m;
      EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
    }
  }
}

TEST(CudaInitError, CreateAfterAFailedCreateStillReportsCleanly) {
  EXPECT_FALSE(create_error({{"peer_mem", "posix"}}).empty());
  EXPECT_FALSE(create_error({{"dda_ll_max_bytes", "lots"}}).empty());
}

}  // namespace
}  // namespace commx
