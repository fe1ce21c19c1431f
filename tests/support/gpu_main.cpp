// GoogleTest main for `gpu` tests: without a CUDA device it exits with 77, which CTest reports as
// skipped (SKIP_RETURN_CODE), so that a CPU-only run never counts these tests as passed. On a
// machine that has a GPU, ZERO_EXPECT_GPU=1 (set by tools/zero-gpu-check, and by tools/zero-test
// where it finds a device) turns that skip into a failure: a broken driver or runtime there must
// not read as "skipped". With a device, the exit status follows test_outcome.hpp.

#include "test_outcome.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices == 0) {
    const char* why = counted != cudaSuccess ? cudaGetErrorString(counted) : "no device found";
    const char* expect_gpu = std::getenv("ZERO_EXPECT_GPU");
    if (expect_gpu != nullptr && std::strcmp(expect_gpu, "1") == 0) {
      std::fprintf(stderr,
                   "zero tests: ZERO_EXPECT_GPU=1, but cudaGetDeviceCount gives %d device(s): %s; "
                   "failing, not skipping\n",
                   devices, why);
      return 1;
    }
    std::printf("no CUDA device (cudaGetDeviceCount: %s): skipping GPU tests\n", why);
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  const zero::testing::TestOutcome& outcome = zero::testing::record_outcomes();
  const int status = RUN_ALL_TESTS();
  outcome.print_shape_skips();
  return zero::testing::exit_status(outcome.verdict(status));
}
