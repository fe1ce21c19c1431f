// The exit statuses of test_outcome.hpp, which decide what CTest reports for every zero test
// binary. The tests below pass, skip or fail on purpose; tests/support/CMakeLists.txt runs them in
// the combinations that matter and checks each status and message (the binary is never run whole).

#include "test_outcome.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

TEST(Outcome, Passes) {
  EXPECT_EQ(1 + 1, 2);
}

TEST(Outcome, SkipsForTheMachine) {
  GTEST_SKIP() << "this machine cannot mount a file system";
}

TEST(Outcome, SkipsForTheRunsShape) {
  GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
}

TEST(Outcome, Fails) {
  ADD_FAILURE() << "a failure on purpose";
}

} // namespace
