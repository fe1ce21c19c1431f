// GoogleTest main for `gpu` tests: without a CUDA device it exits with 77, which CTest reports as
// skipped (SKIP_RETURN_CODE), so that a CPU-only run never counts these tests as passed. With a
// device, the exit status follows test_outcome.hpp.

#include "test_outcome.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping GPU tests\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  const zero::testing::TestOutcome& outcome = zero::testing::record_outcomes();
  const int status = RUN_ALL_TESTS();
  outcome.print_shape_skips();
  return zero::testing::exit_status(outcome.verdict(status));
}
