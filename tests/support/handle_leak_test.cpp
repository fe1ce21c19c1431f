// MPI handles forgotten on purpose, under the MPI test main as every zero test runs: the run must
// fail naming them (tests/support/CMakeLists.txt expects the failure and its words), so that a
// communicator zero splits and never frees cannot pass unseen.
//  - a communicator split and forgotten: Open MPI frees it in MPI_Finalize without a word; the
//    main's ledger (mpi_handle_ledger.hpp) must name it;
//  - a communicator that a pending receive still holds: Open MPI's own report (on in the MPI tests'
//    environment, cmake/ZeroTesting.cmake) must name it as well.

#include <gtest/gtest.h>
#include <mpi.h>

namespace {

TEST(HandleLeak, ASplitCommunicatorForgotten) {
  MPI_Comm part = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &part), MPI_SUCCESS);
  EXPECT_NE(part, MPI_COMM_NULL);
}

TEST(HandleLeak, ACommunicatorHeldByAPendingReceive) {
  MPI_Comm part = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &part), MPI_SUCCESS);
  static int never_sent = 0;
  MPI_Request receive = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Irecv(&never_sent, 1, MPI_INT, 0, 17, part, &receive), MPI_SUCCESS);
}

} // namespace
