// Leaks on purpose, made under MPI as every zero test runs: the sanitize preset's tests must
// report them (tests/support/CMakeLists.txt expects the failures), so that leak detection is known
// to be on and neither tests/lsan.supp nor the start-up's exemption (zero/comm/mpi_environment.hpp)
// to hide zero's: one in a test's own code, and one in code that Open MPI calls (a reduction's
// function), whose stack passes through Open MPI's library.

#include "comm_test.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <vector>

namespace {

TEST(LeakDetection, ALeakOfOurOwnIsReported) {
  auto& world = zero::testing::world();
  auto* lost = new std::vector<float>(1000, float(world.rank()));
  EXPECT_EQ(lost->size(), 1000u);
  lost = nullptr; // the only pointer to it
}

// 56 bytes, a size that nothing else here allocates: the test's pattern finds this leak by it.
using Lost = std::array<char, 56>;

void sum_losing_memory(void* in, void* inout, int* count, MPI_Datatype*) {
  auto* lost = new Lost{};
  (*lost)[0] = 1;
  for (int i = 0; i < *count; ++i)
    static_cast<int*>(inout)[i] += static_cast<const int*>(in)[i];
}

TEST(LeakDetection, ALeakInCodeThatMpiCallsIsReported) {
  MPI_Op sum = MPI_OP_NULL;
  ASSERT_EQ(MPI_Op_create(sum_losing_memory, 1, &sum), MPI_SUCCESS);
  int in = 2, inout = 3;
  ASSERT_EQ(MPI_Reduce_local(&in, &inout, 1, MPI_INT, sum), MPI_SUCCESS); // from Open MPI's code
  EXPECT_EQ(inout, 5);
  MPI_Op_free(&sum);
}

} // namespace
