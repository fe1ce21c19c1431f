// zero::agreed: local work that fails on one rank throws on every rank instead of leaving the
// others waiting in their next collective. (Ranks that call different collectives:
// mismatch_test.cpp.)

#include "comm_test.hpp"

#include <zero/comm/agreed.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using zero::ReduceOp;

zero::MpiCommunicator& comm() {
  return zero::testing::world();
}

} // namespace

namespace {

// zero::agreed: local work that fails on one rank throws on every rank, naming that rank and its
// message, and the communicator keeps working (no rank is left in a collective).
TEST(Agreed, AFailureOnOneRankThrowsOnEveryRank) {
  const int last = comm().size() - 1;
  try {
    (void)zero::agreed(comm(), "opening the test's directory", [&] {
      if (comm().rank() == last)
        zero::fail(zero::ErrorKind::io,
                   "/no/such/dir does not exist (rank " + std::to_string(comm().rank()) + ")");
      return 7;
    });
    FAIL() << "expected every rank to throw";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::io);
    const std::string expected = "opening the test's directory failed on rank " +
                                 std::to_string(last) + ": /no/such/dir does not exist (rank " +
                                 std::to_string(last) + ")";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  std::vector<int> one{1};
  comm().all_reduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one[0], comm().size());
}

TEST(Agreed, ReturnsWhatWasBuiltWhenEveryRankSucceeds) {
  const std::string built =
      zero::agreed(comm(), "building", [&] { return std::to_string(comm().rank()); });
  EXPECT_EQ(built, std::to_string(comm().rank()));
}

} // namespace
