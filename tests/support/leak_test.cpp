// A leak on purpose, made under MPI as every zero test runs: the sanitize preset's tests must
// report it (tests/support/CMakeLists.txt expects the failure), so that leak detection is known to
// be on and tests/lsan.supp, which names Open MPI's own allocations, not to hide zero's.

#include "comm_test.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

TEST(LeakDetection, ALeakOfOurOwnIsReported) {
  auto& world = zero::testing::world();
  auto* lost = new std::vector<float>(1000, float(world.rank()));
  EXPECT_EQ(lost->size(), 1000u);
  lost = nullptr; // the only pointer to it
}

} // namespace
