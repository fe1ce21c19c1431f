// Mismatched collectives between ranks (different counts, types, reductions, kinds or roots) are
// caught by validation mode, which throws the same message on every rank instead of hanging or
// corrupting memory. Runs at 2 and 3 ranks with ZERO_VALIDATE=1. So does zero::agreed, for local
// work that fails on one rank only.

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

// Runs `call` (which returns a Work) and expects a mismatch error mentioning every needle.
template <class Call>
void expect_mismatch(Call&& call, const std::vector<std::string>& needles) {
  try {
    call().wait();
    FAIL() << "expected a mismatch error";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch) << e.what();
    for (const auto& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "missing '" << needle << "' in: " << e.what();
  }
  // Every rank threw, and the communicator keeps working.
  std::vector<int> one{1};
  comm().all_reduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one[0], comm().size());
}

TEST(Validation, IsOnForTheseTests) {
  EXPECT_TRUE(comm().options().validate);
}

TEST(Validation, CountMismatch) {
  std::vector<float> data(10 + static_cast<std::size_t>(comm().rank()));
  expect_mismatch([&] { return comm().all_reduce(data, ReduceOp::sum); },
                  {"collective mismatch", "rank 0 called all_reduce(10 x float, sum)",
                   "rank 1 called all_reduce(11 x float, sum)"});
}

TEST(Validation, ElementTypeMismatch) {
  std::vector<float> f(8);
  std::vector<double> d(8);
  expect_mismatch(
      [&] {
        return comm().rank() == 0 ? comm().all_reduce(f, ReduceOp::sum)
                                  : comm().all_reduce(d, ReduceOp::sum);
      },
      {"rank 0 called all_reduce(8 x float, sum)", "rank 1 called all_reduce(8 x double, sum)"});
}

TEST(Validation, ReductionMismatch) {
  std::vector<float> data(4);
  expect_mismatch(
      [&] { return comm().all_reduce(data, comm().rank() == 0 ? ReduceOp::max : ReduceOp::sum); },
      {"all_reduce(4 x float, max)", "all_reduce(4 x float, sum)"});
}

TEST(Validation, KindMismatch) {
  const auto n = static_cast<std::size_t>(comm().size());
  std::vector<float> full(4 * n);
  expect_mismatch(
      [&] {
        return comm().rank() == 0 ? comm().all_gather(full)
                                  : comm().reduce_scatter(full, ReduceOp::sum);
      },
      {"rank 0 called all_gather(4 x float)", "rank 1 called reduce_scatter(4 x float, sum)"});
}

TEST(Validation, RootMismatch) {
  std::vector<int> data(3);
  expect_mismatch([&] { return comm().broadcast(data, comm().rank() == 0 ? 0 : 1); },
                  {"broadcast(3 x int32, root 0)", "broadcast(3 x int32, root 1)"});
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
