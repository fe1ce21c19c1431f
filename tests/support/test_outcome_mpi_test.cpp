// The ranks of an MPI test agree on its exit status (mpi_main.cpp): a test that skips on rank 0
// and passes elsewhere fails the run, and a test that skips on every rank makes it 77.
// tests/support/CMakeLists.txt runs each alone and checks the status.

#include "comm_test.hpp"

#include <gtest/gtest.h>

namespace {

TEST(RankOutcome, SkipsOnRankZeroOnly) {
  if (zero::testing::world().rank() == 0) GTEST_SKIP() << "rank 0 cannot do this";
}

TEST(RankOutcome, SkipsOnEveryRank) {
  GTEST_SKIP() << "no rank can do this";
}

} // namespace
