// GoogleTest main for single-process tests: GoogleTest's own, with the exit status of
// test_outcome.hpp (77 when every test skipped; a failure when a skip hides among passes).

#include "test_outcome.hpp"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const zero::testing::TestOutcome& outcome = zero::testing::record_outcomes();
  const int status = RUN_ALL_TESTS();
  outcome.print_shape_skips();
  return zero::testing::exit_status(outcome.verdict(status));
}
