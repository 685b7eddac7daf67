// Rank and size discovery from launcher variables, in the order of DESIGN section 3.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "commx/error.h"
#include "core/env.h"

using namespace commx;

namespace {
void clear_all() {
  for (const char* v : {"COMMX_RANK", "COMMX_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE"})
    unsetenv(v);
}
}  // namespace

TEST(Env, Precedence) {
  clear_all();
  EXPECT_FALSE(rank_from_env().has_value());
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "4", 1);
  EXPECT_EQ(rank_from_env()->source, "pmi");
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  EXPECT_EQ(rank_from_env()->source, "openmpi");
  EXPECT_EQ(rank_from_env()->local_rank, 0);
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_EQ(rank_from_env()->rank, 3);
  setenv("COMMX_RANK", "0", 1);
  setenv("COMMX_WORLD_SIZE", "2", 1);
  auto r = rank_from_env();
  EXPECT_EQ(r->source, "commx");
  EXPECT_EQ(r->size, 2);
  setenv("COMMX_RANK", "5", 1);
  EXPECT_THROW(rank_from_env(), Error);
  clear_all();
}

TEST(Env, ParsesNumbersAndBooleans) {
  setenv("COMMX_TEST_X", "0x10", 1);
  EXPECT_EQ(env_int("COMMX_TEST_X", 0), 16);
  setenv("COMMX_TEST_X", "abc", 1);
  EXPECT_THROW(env_int("COMMX_TEST_X", 0), Error);
  setenv("COMMX_TEST_X", "on", 1);
  EXPECT_TRUE(env_bool("COMMX_TEST_X", false));
  EXPECT_EQ(env_first({"COMMX_TEST_NOPE", "COMMX_TEST_X"}).value(), "on");
  unsetenv("COMMX_TEST_X");
}

// Half a launcher's pair is an error naming both variables, not a silent 1-rank job.
TEST(Env, SizeWithoutRankIsAnError) {
  clear_all();
  setenv("WORLD_SIZE", "2", 1);
  try {
    rank_from_env();
    ADD_FAILURE() << "WORLD_SIZE without RANK was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE=2 is set but RANK is not"), std::string::npos)
        << e.what();
  }
  unsetenv("WORLD_SIZE");
  setenv("COMMX_RANK", "1", 1);
  EXPECT_THROW(rank_from_env(), Error);
  clear_all();
}
